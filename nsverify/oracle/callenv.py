"""How the oracle calls the user's ``fn``: the same environment on every call, whatever the caller's state.

The oracle runs ``fn`` several times at one point (PyTorch's float autograd, the exact forward and reverse
traces, one trace per piece).  Each call must compute the same function, so :func:`user_environment` fixes
what ordinary user code depends on:

* **grad mode** -- every call runs with autograd enabled and inference mode off, so a caller inside
  ``torch.no_grad()`` or ``torch.inference_mode()`` gets the same answer as one outside; the caller's modes are
  restored on exit;
* **random numbers** -- the generators (torch's CPU generator, every initialised CUDA device's, Python's
  ``random`` and numpy's global state) are captured once on entry, every call of ``fn`` starts from that
  state, and the caller's generators are left as they were on entry (the oracle's calls do not advance them).
  A program that draws random numbers (dropout in training mode, weights drawn inside ``fn``) is therefore
  judged as the function it computes *at that draw*.

Warnings the oracle gives about the user's program (:func:`warn_user`) point at the user's line that called
the oracle, not at a line of nsverify: the ``stacklevel`` is computed by walking the stack out of the package.

What cannot be fixed is checked: :class:`CallRecord` compares every call of ``fn`` at one point with the first
one (the float output bit for bit, the exact value exactly) and raises :class:`NondeterministicError` when they
differ -- a program with hidden state (a counter, a cache filled on the first call) or a non-deterministic
kernel would otherwise be judged as a function it is not.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import random
import sys
import warnings
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import torch

from nsverify.errors import NondeterministicError


@dataclass
class _Generators:
    cpu: torch.Tensor
    cuda: list | None
    py: object
    np: object

    @classmethod
    def capture(cls) -> _Generators:
        cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else None
        return cls(torch.get_rng_state(), cuda, random.getstate(), np.random.get_state())

    def restore(self) -> None:
        torch.set_rng_state(self.cpu)
        if self.cuda is not None:
            torch.cuda.set_rng_state_all(self.cuda)
        random.setstate(self.py)
        np.random.set_state(self.np)


_ENTRY: contextvars.ContextVar[_Generators | None] = contextvars.ContextVar("nsverify_entry_rng", default=None)


@contextlib.contextmanager
def user_environment():
    """Grad mode on, inference mode off, and the random generators fixed at their entry state for every call
    of ``fn`` made inside (see the module docstring); the caller's state is restored on exit.  Nested uses
    keep the outermost entry state."""
    outer = _ENTRY.get()
    entry = outer if outer is not None else _Generators.capture()
    token = _ENTRY.set(entry)
    try:
        with torch.inference_mode(False), torch.enable_grad():
            yield
    finally:
        _ENTRY.reset(token)
        if outer is None:
            entry.restore()


_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep  # .../nsverify/
_SHIPPED_TESTS = _PACKAGE + "properties" + os.sep  # nsverify.properties: user-side code that calls the oracle


def _inside_nsverify(filename: str) -> bool:
    path = os.path.abspath(filename)
    return path.startswith(_PACKAGE) and not path.startswith(_SHIPPED_TESTS)


def user_stacklevel() -> int:
    """The ``stacklevel`` that makes a ``warnings.warn`` called by the caller of this function point at the
    first frame outside the nsverify package (the user's line that called the oracle): 1 is that caller."""
    frame, level = sys._getframe(1), 1
    while frame is not None and _inside_nsverify(frame.f_code.co_filename):
        frame, level = frame.f_back, level + 1
    return level if frame is not None else 2


def warn_user(message: str, category: type[Warning] = UserWarning) -> None:
    """``warnings.warn(message)`` pointing at the user's line that called the oracle (:func:`user_stacklevel`)."""
    warnings.warn(message, category, stacklevel=user_stacklevel())


def call(fn, x):
    """Call ``fn(x)`` from the entry random state, with grad mode on (also outside :func:`user_environment`:
    then the state at this call is used and restored afterwards, so the caller's generators do not advance)."""
    entry = _ENTRY.get()
    if entry is None:
        with user_environment():
            return call(fn, x)
    entry.restore()
    with torch.inference_mode(False), torch.enable_grad():
        try:
            return fn(x)
        except Exception as e:
            mark(e, "fn")
            raise


def mark(e: BaseException, where: str) -> None:
    """Note on ``e`` that it passed through a call of ``fn`` (``"fn"``) or an exact ATen op (``"op"``)."""
    with contextlib.suppress(AttributeError):
        setattr(e, f"_nsverify_in_{where}", True)


def raised_by_user_code(e: BaseException) -> bool:
    """Whether ``e`` was raised by the user's own code: while ``fn`` ran, but not inside the exact
    interpreter's evaluation of an ATen op."""
    return getattr(e, "_nsverify_in_fn", False) and not getattr(e, "_nsverify_in_op", False)


def _float_bits(t: torch.Tensor) -> tuple:
    t = t.detach().reshape(-1).cpu()
    return (str(t.dtype), tuple(t.double().tolist()))


def _same_float(a: tuple, b: tuple) -> bool:
    return a[0] == b[0] and len(a[1]) == len(b[1]) and all(
        x == y or (x != x and y != y) for x, y in zip(a[1], b[1]))  # NaN equals NaN here


def _same_exact(a, b) -> bool:
    from nsverify.oracle.numbers import Ival

    if not isinstance(a, (Fraction, int, Ival)) or not isinstance(b, (Fraction, int, Ival)):
        return type(a) is type(b)  # an undefined value (ops.singular.Undefined) at both calls
    if isinstance(a, Ival) or isinstance(b, Ival):
        lo_a, hi_a = (a.lo, a.hi) if isinstance(a, Ival) else (a, a)
        lo_b, hi_b = (b.lo, b.hi) if isinstance(b, Ival) else (b, b)
        return lo_a <= hi_b and lo_b <= hi_a  # enclosures of one number overlap
    return a == b


class CallRecord:
    """The outputs of every call of ``fn`` at one point: each new one must equal the first (see the module
    docstring).  ``float`` outputs are PyTorch's own float run and the float shadow of exact traces (the same
    ATen ops in w's dtype); ``exact`` values are those of the traces that follow AD's own choices."""

    def __init__(self):
        self.float_out: tuple | None = None
        self.exact_out = None
        self.first_call: dict = {}

    def _fail(self, what: str, first, now, call_no: int) -> None:
        raise NondeterministicError(
            f"fn is not deterministic: call {call_no} of fn at the same point returned {what} {now}, but call "
            f"{self.first_call[what]} returned {first}. The oracle calls fn several times and every call starts "
            "from the same random state, so the difference comes from state fn keeps between calls (a counter, "
            "a cache filled on the first call, a module in training mode with running statistics) or from a "
            "non-deterministic kernel. Make fn a pure function of its input (e.g. model.eval(), "
            "torch.use_deterministic_algorithms(True)) and check again")

    def float_output(self, t: torch.Tensor, call_no: int) -> None:
        bits = _float_bits(t)
        if self.float_out is None:
            self.float_out, self.first_call["float value"] = bits, call_no
        elif not _same_float(self.float_out, bits):
            if self.float_out[0] != bits[0] or len(self.float_out[1]) != len(bits[1]):
                # same numbers, other dtype or size: say what differs (an int count made float, e.g. (w > 0).sum())
                self._fail("float value", f"a {self.float_out[0]} tensor of {len(self.float_out[1])} entries "
                           f"({_short(self.float_out[1])})", f"a {bits[0]} tensor of {len(bits[1])} entries "
                           f"({_short(bits[1])})", call_no)
            self._fail("float value", _short(self.float_out[1]), _short(bits[1]), call_no)

    def exact_value(self, v, call_no: int) -> None:
        if self.exact_out is None:
            self.exact_out, self.first_call["exact value"] = v, call_no
        elif not _same_exact(self.exact_out, v):
            self._fail("exact value", self.exact_out, v, call_no)


def _short(values: tuple) -> str:
    return ", ".join(repr(x) for x in values[:4]) + (", ..." if len(values) > 4 else "")
