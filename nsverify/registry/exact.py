"""Exact inputs for a dtype: which rationals a float dtype holds, and how PyTorch rounds a scalar constant."""
from __future__ import annotations

from fractions import Fraction
from typing import Sequence

import mpmath

F = Fraction
Vec = tuple[Fraction, ...]


def as_fraction_vec(xs: Sequence) -> Vec:
    return tuple(F(x) for x in xs)


def round_to_dtype(value, dtype) -> Fraction:
    """The exact value of ``value`` after conversion to ``dtype`` the way PyTorch treats a Python scalar
    constant: to float64, then (for float16/bfloat16 kernels, which compute in float32) to float32, then to
    the dtype.  Use it to compare a returned derivative with an exact rule value honestly (leaky_relu's
    0.01, hardsigmoid's 1/6, a 1/3 even split)."""
    import torch

    v = float(value) if not isinstance(value, mpmath.mpf) else float(value)
    t = torch.tensor(v, dtype=torch.float64)
    if dtype in (torch.float16, torch.bfloat16):
        t = t.to(torch.float32)
    return F(t.to(dtype).item())


def exact_tensor(values: Sequence, dtype, device="cpu"):
    """A 1-d tensor holding exactly ``values`` in ``dtype``; InexactError names the first value that is not
    representable (use dyadic values k/2^m with few significant bits)."""
    import torch

    from nsverify.errors import InexactError

    t = torch.tensor([float(F(v)) for v in values], dtype=torch.float64).to(dtype)
    back = t.to(device).double().cpu().tolist()
    for v, b in zip(values, back):
        if F(b) != F(v):
            raise InexactError(
                f"value {v} is not exactly representable in {dtype} (it rounds to {b}); choose a dyadic "
                "value k/2^m with few significant bits, or a wider dtype.")
    return t.to(device)
