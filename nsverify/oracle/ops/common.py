"""What every area of exact ops shares: exact operands as object arrays, entrywise maps, scalar arguments, and
the float run of the current op (the shadow the dispatcher runs alongside, :mod:`nsverify.oracle.tensor`)."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import torch

from nsverify.errors import NonFiniteError
from nsverify.oracle import context
from nsverify.oracle.numbers import NEG_INF, val


def scalar(x):
    """A Python scalar argument as an exact number."""
    if isinstance(x, bool):
        return x
    if isinstance(x, int):
        return Fraction(x)
    if isinstance(x, float):
        if x == float("-inf"):  # an attention mask's fill value (masked_fill, scalar_tensor): see NegInf
            return NEG_INF
        if x != x or x == float("inf"):
            raise NonFiniteError(
                f"a scalar argument of the program is {x}: exact analysis needs finite values"
            )
        return Fraction(x)
    return x


def arr(x) -> np.ndarray:
    """Any exact operand as an object ndarray (scalars become 0-d)."""
    if isinstance(x, np.ndarray):
        return x if x.dtype == object else x.astype(object)
    out = np.empty((), dtype=object)
    out[()] = scalar(x)
    return out


def objmap(f, a: np.ndarray) -> np.ndarray:
    out = np.empty(a.shape, dtype=object)
    of, af = out.reshape(-1), a.reshape(-1)
    for i in context.polled_range(af.size):
        of[i] = f(af[i])
    return out


def filled(shape, v) -> np.ndarray:
    """An object array of ``shape`` with every entry ``v``."""
    out = np.empty(shape, dtype=object)
    out.fill(v)
    return out



def float_input(k: int = 0):
    """The k-th argument of the current op as the float run has it (a tensor in w's dtype), or None."""
    sargs = getattr(context.current(), "shadow_in", None)
    if sargs is None or k >= len(sargs) or not isinstance(sargs[k], torch.Tensor):
        return None
    return sargs[k]


def float_output(k: int | None = None):
    """What the float run of the current op returned (output ``k`` of a tuple), as a numpy array, or None."""
    out = getattr(context.current(), "shadow_out", None)
    if k is not None:
        out = out[k] if isinstance(out, (tuple, list)) and k < len(out) else None
    if not isinstance(out, torch.Tensor):
        return None
    return out.detach().cpu().numpy()


def plain_values(a: np.ndarray) -> np.ndarray:
    """The entries' values, first-order parts dropped (an :class:`~nsverify.oracle.numbers.Aff` gives its value)."""
    return objmap(val, a)
