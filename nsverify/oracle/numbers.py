"""Exact scalars for the oracle: rationals, rigorous intervals, and first-order affine forms.

* values are :class:`fractions.Fraction` whenever they are exactly rational, else :class:`Ival` (an
  ``mpmath.iv`` interval at high precision that is guaranteed to contain the real value);
* :class:`Aff` is a value together with its exact local derivative with respect to the input vector ``w``
  (a sparse ``{index: number}`` dict), plus a flag ``lin`` telling whether the entry is exactly
  affine in ``w``
  on the current piece.  Entries that do not depend on ``w`` are plain numbers, never ``Aff``.
"""

from __future__ import annotations

from fractions import Fraction

from mpmath import iv

from nsverify.errors import InexactError

F = Fraction
PREC = 212  # bits of the interval arithmetic (about 64 decimal digits)
iv.prec = PREC


def to_iv(x):
    """An exact number (Fraction, int) or an :class:`Ival` as an ``mpmath.iv`` interval."""
    if isinstance(x, Ival):
        return x.x
    if isinstance(x, Fraction):
        return iv.mpf(x.numerator) / iv.mpf(x.denominator)
    if isinstance(x, int):
        return iv.mpf(x)
    raise TypeError(f"cannot convert {type(x).__name__} to an interval")


class KinkZero(Fraction):
    """The exact 0 that relu outputs when its input is exactly at the kink 0.

    PyTorch's relu backward (threshold_backward) reads relu's *output*, where a negative input and a kink
    input both give 0; this tag lets the exact reverse mode apply a user convention ReLU'(0) = s to the kink
    entries only.  Arithmetic on it returns plain Fractions, so the tag never spreads.
    """

    def __new__(cls):
        return super().__new__(cls, 0)


class Ival:
    """A rigorous real interval (thin wrapper over ``mpmath.iv.mpf`` that accepts Fractions)."""

    __slots__ = ("x",)

    def __init__(self, x):
        self.x = x if not isinstance(x, (Fraction, int)) else to_iv(x)

    # arithmetic
    # -----------------------------------------------------------------------------------------------
    def __add__(self, o):
        return simplify(Ival(self.x + to_iv(o))) if _isnum(o) else NotImplemented

    __radd__ = __add__

    def __sub__(self, o):
        return simplify(Ival(self.x - to_iv(o))) if _isnum(o) else NotImplemented

    def __rsub__(self, o):
        return simplify(Ival(to_iv(o) - self.x)) if _isnum(o) else NotImplemented

    def __mul__(self, o):
        return simplify(Ival(self.x * to_iv(o))) if _isnum(o) else NotImplemented

    __rmul__ = __mul__

    def __truediv__(self, o):
        return simplify(Ival(self.x / to_iv(o))) if _isnum(o) else NotImplemented

    def __rtruediv__(self, o):
        return simplify(Ival(to_iv(o) / self.x)) if _isnum(o) else NotImplemented

    def __neg__(self):
        return Ival(-self.x)

    @property
    def lo(self):
        return _mpf_to_fraction(self.x.a)

    @property
    def hi(self):
        return _mpf_to_fraction(self.x.b)

    def __float__(self):
        return float(self.x.mid)

    def __repr__(self):
        return f"Ival[{float(self.x.a):.17g}, {float(self.x.b):.17g}]"


def _mpf_to_fraction(m) -> Fraction:
    """Exact Fraction of an mpmath (interval endpoint) binary float."""
    import mpmath

    v = mpmath.mpf(m)
    if not mpmath.isfinite(v):
        raise InexactError("an interval endpoint is infinite: the smooth part overflowed; rescale the input")
    sgn, man, exp, _bc = v._mpf_
    out = F(int(man)) * (F(2) ** int(exp))
    return -out if sgn else out


def _isnum(o) -> bool:
    return isinstance(o, (Fraction, int, Ival))


def simplify(v: Ival):
    """Collapse a point interval to its exact Fraction."""
    if v.x.a == v.x.b:
        return _mpf_to_fraction(v.x.a)
    return v


def straddle_error(opname: str, detail: str = "") -> InexactError:
    """The error for an interval value that straddles a kink or tie: the exact oracle cannot tell the piece."""
    return InexactError(
        f"{opname}: an interval value straddles a kink/tie{detail}, so the exact oracle cannot "
        "tell which piece is active; the smooth part around it is not exactly computable here. "
        "Use rational inputs/weights or check at another point"
    )


def is_exact(x) -> bool:
    return not isinstance(x, Ival)


def sign(x) -> int | None:
    """Exact sign of a number, or None when an interval contains 0 (undecidable)."""
    if isinstance(x, Ival):
        if x.x.a > 0:
            return 1
        if x.x.b < 0:
            return -1
        return None
    return (x > 0) - (x < 0)


def is_zero(x) -> bool:
    return not isinstance(x, Ival) and x == 0


def to_float(x) -> float:
    return float(x)


# ----------------------------------------------------------------------------------------------------
# affine forms
# ----------------------------------------------------------------------------------------------------
def _gadd(a: dict, b: dict, cb=1) -> dict:
    out = dict(a)
    for k, v in b.items():
        s = out.get(k, 0) + (v if cb == 1 else cb * v)
        if is_zero(s):
            out.pop(k, None)
        else:
            out[k] = s
    return out


def gsub(a: dict, b: dict) -> dict:
    """The sparse first-order form a - b (entries that cancel exactly are dropped)."""
    return _gadd(a, b, -1)


def _gscale(a: dict, c) -> dict:
    if is_zero(c):
        return {}
    if c == 1:
        return a
    return {k: c * v for k, v in a.items()}


class Aff:
    """value ``v`` + first-order term ``<g, d>`` in the direction d of the input; ``lin``: exactly affine."""

    __slots__ = ("v", "g", "lin")

    def __init__(self, v, g: dict, lin: bool = True):
        self.v = v
        self.g = g
        self.lin = lin

    def __add__(self, o):
        if isinstance(o, Aff):
            return mk(self.v + o.v, _gadd(self.g, o.g), self.lin and o.lin)
        if _isnum(o):
            return Aff(self.v + o, self.g, self.lin)
        return NotImplemented

    __radd__ = __add__

    def __neg__(self):
        return Aff(-self.v, {k: -x for k, x in self.g.items()}, self.lin)

    def __sub__(self, o):
        if isinstance(o, Aff):
            return mk(self.v - o.v, _gadd(self.g, o.g, -1), self.lin and o.lin)
        if _isnum(o):
            return Aff(self.v - o, self.g, self.lin)
        return NotImplemented

    def __rsub__(self, o):
        return (-self).__add__(o)

    def __mul__(self, o):
        if isinstance(o, Aff):
            lin = self.lin and o.lin and (not self.g or not o.g)
            return mk(self.v * o.v, _gadd(_gscale(self.g, o.v), _gscale(o.g, self.v)), lin)
        if _isnum(o):
            return mk(self.v * o, _gscale(self.g, o), self.lin)
        return NotImplemented

    __rmul__ = __mul__

    def __truediv__(self, o):
        if isinstance(o, Aff):
            return self * o.inv()
        if _isnum(o):
            return mk(self.v / o, _gscale(self.g, 1 / _nz(o)), self.lin)
        return NotImplemented

    def __rtruediv__(self, o):
        return self.inv() * o

    def inv(self):
        v = _nz(self.v)
        return mk(1 / v, _gscale(self.g, -1 / (v * v)), self.lin and not self.g)

    def __repr__(self):
        return f"Aff({self.v!r}, {self.g!r}{'' if self.lin else ', nonlin'})"


def _nz(x):
    s = sign(x)
    if s == 0 or s is None:
        raise InexactError(
            "division by a value that is (or may be) zero in the exact evaluation; "
            "guard the division (e.g. add an epsilon) or move the point"
        )
    return x


def mk(v, g: dict, lin: bool = True):
    """An Aff, or the plain number when it does not depend on w (no derivative, affine)."""
    if not g and lin:
        return v
    return Aff(v, g, lin)


def val(x):
    return x.v if isinstance(x, Aff) else x


def grad(x) -> dict:
    return x.g if isinstance(x, Aff) else {}


def is_lin(x) -> bool:
    return x.lin if isinstance(x, Aff) else True


def smooth(x, f_val, f_der):
    """Apply a smooth scalar function: value f_val(v), derivative f_der(v) (numbers or Ivals)."""
    if not isinstance(x, Aff):
        return f_val(x)
    d = f_der(x.v)
    return mk(f_val(x.v), _gscale(x.g, d), False if x.g else x.lin)
