"""Exact scalars for the oracle: rationals, rigorous intervals, first-order affine forms and Taylor jets.

* values are :class:`fractions.Fraction` whenever they are *proved* exactly rational, else :class:`Ival`, an
  interval with binary endpoints at ``PREC`` bits that is guaranteed to contain the real value; square roots
  of rationals (a normalisation's ``1/sqrt(var + eps)``) are :class:`Surd`, exact ``a + sum b sqrt(d)`` forms
  with an exact sign that are also Ivals;
* :class:`Aff` is a value together with its exact local derivative with respect to the input vector ``w``
  (a sparse ``{index: number}`` dict), plus a flag ``lin`` telling whether the entry is exactly affine in ``w``
  on the current piece.  Entries that do not depend on ``w`` are plain numbers, never ``Aff``;
* :class:`Jet` is a truncated Taylor series in t of an entry along a ray w + t d (the ray traces of
  :mod:`nsverify.oracle.jets`): ring operations only, everything else refuses (:class:`JetDeclined`).

Intervals live on mpmath's raw binary floats (``(sign, mantissa, exponent, bitcount)`` tuples) and use only
mpmath's *directed-rounding basic operations* (``mpi_add``, ``mpi_mul``, ``mpi_div`` ...: an exact result rounded
down for the lower endpoint, up for the upper one).  The elementary functions are NOT taken from ``mpmath.iv``:
mpmath 1.3's ``iv.exp`` returns a point interval (a wrong enclosure) for tiny positive arguments, and it has no
``iv.tanh``.  Each one is enclosed below from those basic operations and a Taylor or atanh series whose
remainder is bounded in the comment next to it.  Endpoints convert to Fractions exactly (never through a 53-bit
float), so an interval is kept at its working precision everywhere.
"""

from __future__ import annotations

import math
from fractions import Fraction

from mpmath import libmp
from mpmath.libmp import (
    fnan,
    fone,
    from_int,
    from_man_exp,
    from_rational,
    fzero,
    mpf_mul,
    mpf_neg,
    mpf_shift,
    mpf_sign,
    mpf_sub,
    mpi_add,
    mpi_div,
    mpi_mul,
    mpi_neg,
    mpi_pos,
    mpi_sub,
    round_ceiling,
    round_floor,
)
from mpmath.libmp.libmpi import mpi_square

from nsverify.errors import InexactError, UnsupportedOpError

F = Fraction
PREC = 212  # bits of every interval endpoint (about 64 decimal digits)
_GUARD = 24  # extra bits carried inside an elementary function before rounding outward to PREC


# ----------------------------------------------------------------------------------------------------
# binary floats <-> Fractions, exactly
# ----------------------------------------------------------------------------------------------------
def mpf_fraction(t) -> Fraction:
    """The exact Fraction of an mpmath raw binary float (an interval endpoint); never rounded."""
    sgn, man, exp, _bc = t
    if not man:
        if t == fzero:
            return F(0)
        raise InexactError("an interval endpoint is infinite: the smooth part overflowed; rescale the input")
    out = F(man << exp) if exp >= 0 else F(man, 1 << -exp)
    return -out if sgn else out


def _pt(x, prec: int = PREC):
    """An exact number (Fraction, int) as an interval (lo, hi) of binary floats at ``prec`` bits, rounded
    outward (a point when the number is binary and fits)."""
    if isinstance(x, int):
        x = int(x)  # bools too
        return from_int(x, prec, round_floor), from_int(x, prec, round_ceiling)
    p, q = x.numerator, x.denominator
    return from_rational(p, q, prec, round_floor), from_rational(p, q, prec, round_ceiling)


def _mag(t) -> int:
    """For a non-zero raw float: the m with 2^(m-1) <= |t| < 2^m."""
    return t[2] + t[3]


class Ival:
    """A rigorous real interval [lo, hi] (binary endpoints at PREC bits) known to contain the real value."""

    __slots__ = ("t",)

    def __init__(self, x):
        if isinstance(x, (Fraction, int)):
            x = _pt(x)
        elif isinstance(x, Ival):
            x = x.t
        lo, hi = x
        if lo == fnan or hi == fnan or not lo[1] and lo != fzero or not hi[1] and hi != fzero:
            raise InexactError("an interval became unbounded (overflow or division by an interval containing "
                               "0); the exact oracle cannot bound this smooth part; rescale the input")
        self.t = (lo, hi)

    @classmethod
    def of(cls, lo: Fraction, hi: Fraction) -> Ival:
        """The smallest PREC-bit interval containing [lo, hi] (Fractions, lo <= hi)."""
        if lo > hi:
            raise InexactError(f"an interval needs lo <= hi, got [{lo}, {hi}]")
        return cls((_pt(lo)[0], _pt(hi)[1]))

    # arithmetic
    # -----------------------------------------------------------------------------------------------
    def _op(self, o, f, swap=False):
        if not _isnum(o):
            return NotImplemented
        ot = o.t if isinstance(o, Ival) else _pt(o)
        return simplify(Ival(f(ot, self.t, PREC) if swap else f(self.t, ot, PREC)))

    def __add__(self, o):
        return self._op(o, mpi_add)

    __radd__ = __add__

    def __sub__(self, o):
        return self._op(o, mpi_sub)

    def __rsub__(self, o):
        return self._op(o, mpi_sub, swap=True)

    def __mul__(self, o):
        return self._op(o, mpi_mul)

    __rmul__ = __mul__

    def __truediv__(self, o):
        return self._op(o, mpi_div)

    def __rtruediv__(self, o):
        return self._op(o, mpi_div, swap=True)

    def __neg__(self):
        return Ival(mpi_neg(self.t))

    @property
    def lo(self) -> Fraction:
        """The lower endpoint, exactly."""
        return mpf_fraction(self.t[0])

    @property
    def hi(self) -> Fraction:
        """The upper endpoint, exactly."""
        return mpf_fraction(self.t[1])

    def contains(self, x) -> bool:
        """Does this interval contain the exact number x (or the whole interval x)?"""
        lo, hi = (x.lo, x.hi) if isinstance(x, Ival) else (x, x)
        return self.lo <= lo and hi <= self.hi

    def __float__(self):
        return float((self.lo + self.hi) / 2)

    def __repr__(self):
        return f"Ival[{decimal_str(self.lo)}, {decimal_str(self.hi)}]"


def decimal_str(q, digits: int = 17) -> str:
    """``q`` (a Fraction or int) as a decimal with at most ``digits`` significant digits; never raises, also
    beyond the float range (``float(q)`` would overflow) or for integers longer than Python prints."""
    q = Fraction(q)
    if q == 0:
        return "0"
    if Fraction(1, 10**300) < abs(q) < 10**300:
        return f"{float(q):.{digits}g}"
    sign, n, d = ("-" if q < 0 else ""), abs(q.numerator), q.denominator
    e = int((n.bit_length() - d.bit_length()) * math.log10(2))  # within 1 of floor(log10 |q|)
    while True:
        k = digits - 1 - e
        m = n * 10**k // d if k >= 0 else n // (d * 10**-k)
        if m >= 10**digits:
            e += 1
        elif m < 10 ** (digits - 1):
            e -= 1
        else:
            break
    mant = str(m)
    frac = mant[1:].rstrip("0")
    return f"{sign}{mant[0]}{'.' + frac if frac else ''}e{e:+d}"


def to_iv(x):
    """An exact number (Fraction, int) or an :class:`Ival` as an interval (lo, hi) of raw binary floats."""
    if isinstance(x, Ival):
        return x.t
    if isinstance(x, (Fraction, int)) and not isinstance(x, bool):
        return _pt(x)
    raise TypeError(f"cannot convert {type(x).__name__} to an interval")


def bounds(x) -> tuple:
    """(lo, hi) of a number as exact Fractions (a Fraction is its own bounds)."""
    return (x.lo, x.hi) if isinstance(x, Ival) else (x, x)


def overlap(a, b) -> bool:
    """Can the two numbers (Fractions or intervals) be equal?"""
    alo, ahi = bounds(a)
    blo, bhi = bounds(b)
    return alo <= bhi and blo <= ahi


class KinkZero(Fraction):
    """The exact 0 that relu outputs when its input is exactly at the kink 0.

    PyTorch's relu backward (threshold_backward) reads relu's *output*, where a negative input and a kink
    input both give 0; this tag lets the exact reverse mode apply a user convention ReLU'(0) = s to the kink
    entries only.  Arithmetic on it returns plain Fractions, so the tag never spreads.

    ``moving``: the kink's argument depends on w (forward and pieces mode: a program that differentiates inside
    fn), so the step that relu's backward reads from this 0 sits exactly at a kink that moves with w
    (:func:`nsverify.oracle.ops.kinks.check_steps`).
    """

    def __new__(cls, *, moving: bool = False):
        self = super().__new__(cls, 0)
        self.moving = moving
        return self


def _isnum(o) -> bool:
    return isinstance(o, (Fraction, int, Ival))  # bools count as 0 and 1, as in Python arithmetic


def simplify(v: Ival):
    """Collapse a point interval to its exact Fraction: an enclosure of width 0 pins the real value."""
    if v.t[0] == v.t[1]:
        return mpf_fraction(v.t[0])
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
    """Exact sign of a number, or None when an interval contains 0 (undecidable); a :class:`Surd`'s is exact."""
    if isinstance(x, Surd):
        return x.sign()
    if isinstance(x, Ival):
        if mpf_sign(x.t[0]) > 0:
            return 1
        if mpf_sign(x.t[1]) < 0:
            return -1
        return None
    return (x > 0) - (x < 0)


def is_zero(x) -> bool:
    return not isinstance(x, Ival) and x == 0


def to_float(x) -> float:
    return float(x)


# ----------------------------------------------------------------------------------------------------
# rigorous elementary functions
# ----------------------------------------------------------------------------------------------------
# Each ``_f_pt(a, wp)`` encloses f at ONE exact binary point ``a`` (a raw float) in an interval at about ``wp``
# bits; the public functions below take a Fraction or an Ival, use monotonicity (f(X) = [f(lo), f(hi)]) or
# plain interval composition, return a Fraction only where the value is proved rational (exp(0) = 1, ...), and
# round the enclosure outward to PREC bits.
_ONE = (fone, fone)
_ZERO = (fzero, fzero)


def _ipt(n: int):
    return (from_int(n), from_int(n))


def _hi_abs(s):
    """max(|lo|, |hi|) of an interval, as a raw float."""
    a, b = libmp.mpf_abs(s[0]), libmp.mpf_abs(s[1])
    return b if libmp.mpf_le(a, b) else a


def _below(s, bits: int) -> bool:
    """Is max |s| below 2^-bits?"""
    m = _hi_abs(s)
    return m == fzero or _mag(m) <= -bits


def _exp_pt(a, wp):
    """exp(a).  a < 0: 1/exp(-a).  a > 0: y = a / 2^s <= 2^-8, S = sum_{k<=K} y^k/k!; the tail
    sum_{j>K} y^j/j! <= (y^K/K!) * y/(K+1) * 1/(1 - y/(K+2)) <= y^K/K! (y <= 1/256), so exp(y) is in
    [S, S + y^K/K!]; then exp(a) = exp(y)^(2^s) by s exact-interval squarings (positive operands)."""
    if a == fzero:
        return _ONE
    if mpf_sign(a) < 0:
        return mpi_div(_ONE, _exp_pt(mpf_neg(a), wp + 4), wp)
    m = _mag(a)
    if m > 14:
        raise InexactError("exp of a value above 8192 overflows every float dtype; the exact oracle does not "
                           "follow it (rescale the input)")
    s = max(0, m + 8)
    y = mpf_shift(a, -s)
    w2 = wp + s + 16
    S, T, k = _ONE, _ONE, 0
    while True:
        k += 1
        T = mpi_div(mpi_mul(T, (y, y), w2), _ipt(k), w2)
        S = mpi_add(S, T, w2)
        if _below(T, w2 + 2):
            break
    S = mpi_add(S, (fzero, T[1]), w2)
    for _ in range(s):
        S = mpi_square(S, w2)
    return S


def _exp_neg_huge(a):
    """exp(a) for a <= -2^14: 2^(1.5 a) < exp(a) = 2^(a / ln 2) < 2^(1.44 a), as 1.44 < 1/ln 2 < 1.5."""
    x = mpf_fraction(a)
    return (from_man_exp(1, math.floor(x * F(3, 2))), from_man_exp(1, math.ceil(x * F(144, 100))))


def _expm1_pt(a, wp):
    """exp(a) - 1.  |a| >= 2^-8: from exp (losing at most 9 bits, carried as guard bits).  Otherwise the Taylor
    sum y + ... + y^K/K! with |tail| <= |y^K/K!| (same bound as in _exp_pt, alternating or not)."""
    if a == fzero:
        return _ZERO
    if _mag(a) > -8:
        if mpf_sign(a) < 0 and _mag(a) > 14:
            return mpi_sub(_exp_neg_huge(a), _ONE, wp)
        return mpi_sub(_exp_pt(a, wp + 12), _ONE, wp)
    w2 = wp + 16
    S = T = (a, a)
    k = 1
    while True:
        k += 1
        T = mpi_div(mpi_mul(T, (a, a), w2), _ipt(k), w2)
        S = mpi_add(S, T, w2)
        if _below(T, w2 + 2 - _mag(a)):
            break
    r = _hi_abs(T)
    return mpi_add(S, (mpf_neg(r), r), w2)


def _atanh_series(Z, wp):
    """atanh(z) for an interval Z with |z| <= 1/3: S = sum_{k<=K} z^(2k+1)/(2k+1); the tail is at most
    sum_{k>K} |z|^(2k+1) <= |z|^(2K+3) / (1 - z^2) <= (9/8) |z|^(2K+3) <= 2 |z|^(2K+1) |z|^2."""
    if Z == _ZERO:
        return _ZERO
    w2 = wp + 8
    z2 = mpi_square(Z, w2)
    S = P = Z
    k = 0
    while True:
        k += 1
        P = mpi_mul(P, z2, w2)
        S = mpi_add(S, mpi_div(P, _ipt(2 * k + 1), w2), w2)
        if _below(P, w2 + 4 - _mag(_hi_abs(Z))):
            break
    r = _hi_abs(mpi_mul(mpi_mul(_ipt(2), P, w2), z2, w2))
    return mpi_add(S, (mpf_neg(r), r), w2)


_LN2: dict = {}


def _ln2(wp):
    """ln 2 = 2 atanh(1/3)."""
    if wp not in _LN2:
        third = mpi_div(_ONE, _ipt(3), wp + 8)
        _LN2[wp] = mpi_mul(_ipt(2), _atanh_series(third, wp + 8), wp + 4)
    return _LN2[wp]


def _log_pt(a, wp):
    """log(a), a > 0: a = m 2^e with m in [2/3, 4/3], log a = e ln 2 + 2 atanh((m - 1)/(m + 1)), |z| <= 1/5."""
    if mpf_sign(a) <= 0:
        raise InexactError("log of a value that is not positive")
    if a == fone:
        return _ZERO
    e = _mag(a) - 1
    m = mpf_shift(a, -e)  # in [1, 2)
    if libmp.mpf_gt(m, from_rational(4, 3, 60, round_floor)):
        m, e = mpf_shift(m, -1), e + 1
    w2 = wp + 12
    z = mpi_div(mpi_sub((m, m), _ONE, 0), mpi_add((m, m), _ONE, 0), w2)
    out = mpi_mul(_ipt(2), _atanh_series(z, w2), w2)
    if e:
        out = mpi_add(out, mpi_mul(_ipt(e), _ln2(w2 + e.bit_length()), w2), w2)
    return out


def _log1p_pt(u, wp):
    """log(1 + u), u > -1: |u| <= 1/2: 2 atanh(u/(2 + u)) (|z| <= 1/3, no cancellation); else log of the exact
    binary 1 + u."""
    if u == fzero:
        return _ZERO
    if _mag(u) <= -1:
        z = mpi_div((u, u), mpi_add(_ipt(2), (u, u), 0), wp + 8)
        return mpi_mul(_ipt(2), _atanh_series(z, wp + 8), wp + 4)
    one_u = libmp.mpf_add(fone, u)
    return _log_pt(one_u, wp)


def _sincos(X, wp):
    """(sin X, cos X) for an interval X: Y = X / 2^s with |Y| <= 2^-8, Taylor sums to degree N with Lagrange
    remainder |y|^(N+1)/(N+1)! for both (every derivative of sin and cos is bounded by 1), then s doublings
    sin 2y = 2 sin y cos y, cos 2y = 1 - 2 sin^2 y in interval arithmetic (2 bits of width each: 2s guard
    bits)."""
    M = _hi_abs(X)
    if M == fzero:
        return _ZERO, _ONE
    m = _mag(M)
    if m > 40:
        raise InexactError("sin/cos of an argument above 2^40: the exact oracle does not reduce such arguments")
    s = max(0, m + 8)
    w2 = wp + 2 * s + 16
    Y = (mpf_shift(X[0], -s), mpf_shift(X[1], -s))
    ymax = mpf_shift(M, -s)
    S, C, T, n = Y, _ONE, Y, 1
    rel = max(0, -_mag(ymax))  # sin y ~ y: stop relative to |y|
    while True:
        n += 1
        T = mpi_div(mpi_mul(T, Y, w2), _ipt(n), w2)
        if n % 2 == 0:
            C = mpi_sub(C, T, w2) if n % 4 == 2 else mpi_add(C, T, w2)
        else:
            S = mpi_sub(S, T, w2) if n % 4 == 3 else mpi_add(S, T, w2)
        if _below(T, w2 + 4 + rel):
            break
    r = (fone, fone)
    for k in range(1, n + 2):  # |y|^(n+1)/(n+1)!
        r = mpi_div(mpi_mul(r, (ymax, ymax), w2), _ipt(k), w2)
    R = (mpf_neg(r[1]), r[1])
    S, C = mpi_add(S, R, w2), mpi_add(C, R, w2)
    for _ in range(s):
        S, C = mpi_mul(_ipt(2), mpi_mul(S, C, w2), w2), mpi_sub(_ONE, mpi_mul(_ipt(2), mpi_square(S, w2), w2), w2)
    return _clip1(S), _clip1(C)


def _clip1(s):
    lo = s[0] if libmp.mpf_ge(s[0], from_int(-1)) else from_int(-1)
    hi = s[1] if libmp.mpf_le(s[1], fone) else fone
    return lo, hi


def _tanh_pt(a, wp):
    """tanh(a) = t / (t + 2) with t = expm1(2a) (a > 0; odd).  a > 4096: 1 - tanh a = 2/(e^(2a) + 1) <
    2 e^(-2a) < 2^(1 - 2.88 a)."""
    if a == fzero:
        return _ZERO
    if mpf_sign(a) < 0:
        return mpi_neg(_tanh_pt(mpf_neg(a), wp))
    if _mag(a) > 12:
        return (mpf_sub(fone, from_man_exp(1, 1 - math.floor(mpf_fraction(a) * F(288, 100))), wp, round_floor),
                fone)
    t = _expm1_pt(mpf_shift(a, 1), wp + 8)
    return mpi_div(t, mpi_add(t, _ipt(2), wp + 8), wp + 4)


def _sigmoid_pt(a, wp):
    """1/(1 + e^-a) for a > 0, e^a/(1 + e^a) for a < 0 (no cancellation either way)."""
    if a == fzero:
        return (from_man_exp(1, -1), from_man_exp(1, -1))
    if mpf_sign(a) > 0:
        e = _exp_or_tiny(mpf_neg(a), wp + 4)
        return mpi_div(_ONE, mpi_add(_ONE, e, wp + 4), wp + 2)
    e = _exp_or_tiny(a, wp + 4)
    return mpi_div(e, mpi_add(_ONE, e, wp + 4), wp + 2)


def _exp_or_tiny(a, wp):
    return _exp_neg_huge(a) if mpf_sign(a) < 0 and _mag(a) > 14 else _exp_pt(a, wp)


_PI: dict = {}


def _pi(wp):
    """pi = 16 atan(1/5) - 4 atan(1/239) (Machin); atan z = sum (-1)^k z^(2k+1)/(2k+1) is alternating with
    decreasing terms, so the first omitted term bounds the tail."""
    if wp not in _PI:
        w2 = wp + 10

        def atan_inv(n):
            z = mpi_div(_ONE, _ipt(n), w2)
            z2 = mpi_square(z, w2)
            S = P = z
            k = 0
            while True:
                k += 1
                P = mpi_mul(P, z2, w2)
                t = mpi_div(P, _ipt(2 * k + 1), w2)
                S = mpi_sub(S, t, w2) if k % 2 else mpi_add(S, t, w2)
                if _below(t, w2 + 4):
                    break
            r = t[1]
            return mpi_add(S, (mpf_neg(r), r), w2)

        _PI[wp] = mpi_sub(mpi_mul(_ipt(16), atan_inv(5), w2), mpi_mul(_ipt(4), atan_inv(239), w2), wp + 4)
    return _PI[wp]


def _sqrt_pt(a, wp):
    """sqrt(a) for a binary a >= 0 with an integer square root: exact when a's mantissa is a perfect square."""
    if a == fzero:
        return _ZERO
    if mpf_sign(a) < 0:
        raise InexactError("sqrt of a negative value")
    _s, man, exp, _bc = a
    if exp % 2:
        man, exp = man << 1, exp - 1
    k = max(0, (wp - man.bit_length() // 2) + 2)
    n = man << (2 * k)
    r = math.isqrt(n)
    e = (exp - 2 * k) // 2
    lo = from_man_exp(r, e)
    hi = lo if r * r == n else from_man_exp(r + 1, e)
    return lo, hi


def _erf_series(a, wp):
    """erf(a) for a > 0 with a^2 <= (wp + 30) ln 2: erf a = (2/sqrt(pi)) e^(-a^2) sum_n T_n with T_0 = a,
    T_n = T_(n-1) 2a^2/(2n+1) (all positive).  Once the ratio q = 2a^2/(2n+3) <= 1/2 the tail after T_n is at
    most T_n q/(1 - q) <= T_n."""
    w2 = wp + 20
    a2 = mpf_mul(a, a)
    two_a2 = (mpf_shift(a2, 1), mpf_shift(a2, 1))
    S = T = (a, a)
    n = 0
    while True:
        n += 1
        T = mpi_div(mpi_mul(T, two_a2, w2), _ipt(2 * n + 1), w2)
        S = mpi_add(S, T, w2)
        q_ok = libmp.mpf_le(mpf_shift(a2, 2), from_int(2 * n + 3))  # 2a^2/(2n+3) <= 1/2
        if q_ok and _below(T, w2 + 4 - _mag(S[0])):
            break
    S = mpi_add(S, (fzero, T[1]), w2)
    E = _exp_pt(mpf_neg(a2), w2)
    sq = _sqrt_iv(_pi(w2), w2)
    return mpi_div(mpi_mul(mpi_mul(_ipt(2), E, w2), S, w2), sq, w2)


def _sqrt_iv(X, wp):
    return _sqrt_pt(X[0], wp)[0], _sqrt_pt(X[1], wp)[1]


def _erfc_pos(a, wp):
    """erfc(a) for a > 0: 1 - erf(a) with a^2 log2(e) + 20 extra bits (the cancellation), or, for a > 37, the
    bounds 2 e^(-a^2) / (sqrt(pi) (a + sqrt(a^2 + 2))) < erfc a <= 2 e^(-a^2) / (sqrt(pi) (a + sqrt(a^2 +
    4/pi))) (Abramowitz and Stegun 7.1.13)."""
    x = mpf_fraction(a)
    if x > 37:
        w2 = wp + 10
        a2 = mpf_mul(a, a)
        E = _exp_pt(mpf_neg(a2), w2) if _mag(a2) <= 14 else _exp_neg_huge(mpf_neg(a2))
        sq = _sqrt_iv(_pi(w2), w2)
        num = mpi_mul(_ipt(2), E, w2)
        d_lo = mpi_add((a, a), _sqrt_iv(mpi_add((a2, a2), _ipt(2), w2), w2), w2)
        four_pi = mpi_div(_ipt(4), _pi(w2), w2)
        d_hi = mpi_add((a, a), _sqrt_iv(mpi_add((a2, a2), four_pi, w2), w2), w2)
        lo = mpi_div(num, mpi_mul(sq, d_lo, w2), w2)[0]
        hi = mpi_div(num, mpi_mul(sq, d_hi, w2), w2)[1]
        return lo, hi
    extra = int(x * x * F(145, 100)) + 20
    return mpi_sub(_ONE, _erf_pt(a, wp + extra), wp)


def _erf_pt(a, wp):
    """erf(a) (odd); for a^2 > (wp + 30) ln 2 (so erfc a < e^(-a^2) < 2^-(wp+30)): [1 - 2^-(wp+30), 1]."""
    if a == fzero:
        return _ZERO
    if mpf_sign(a) < 0:
        return mpi_neg(_erf_pt(mpf_neg(a), wp))
    x = mpf_fraction(a)
    if x * x * F(144, 100) > wp + 30:  # a^2 log2(e) > wp + 30 (log2 e > 1.44)
        return mpf_sub(fone, from_man_exp(1, -(wp + 30)), wp + 40, round_floor), fone
    return _erf_series(a, wp)


def _monotone(pt, x, exact: dict | None = None, increasing: bool = True):
    """f(x) for a monotone f enclosed pointwise by ``pt(a, wp)``: a Fraction where ``exact`` pins it, else
    an Ival [f(lo), f(hi)] (swapped when decreasing) rounded outward to PREC."""
    if not isinstance(x, Ival):
        if exact and x in exact:
            return exact[x]
        lo_t, hi_t = _pt(x, _exact_bits(x))
    else:
        lo_t, hi_t = x.t
    wp = PREC + _GUARD
    if lo_t == hi_t:
        r = pt(lo_t, wp)
        return _wrap(r)
    a, b = pt(lo_t, wp), pt(hi_t, wp)
    return _wrap((a[0], b[1]) if increasing else (b[0], a[1]))


def _exact_bits(x) -> int:
    """Bits to hold a Fraction exactly when it is binary, else PREC + _GUARD (its interval is then tiny)."""
    if isinstance(x, int):
        return max(PREC, abs(x).bit_length() + 1)
    d = x.denominator
    if d & (d - 1) == 0:
        return max(PREC, abs(x.numerator).bit_length() + 1)
    return PREC + _GUARD


def _wrap(s):
    """An enclosure rounded outward to PREC bits; a Fraction when it is a point (then exact)."""
    return simplify(Ival(mpi_pos(s, PREC)))


def exp_i(x):
    """exp, rigorous: exp(0) = 1 exactly (else irrational, Lindemann)."""
    return _monotone(lambda a, wp: _exp_or_tiny(a, wp), x, {0: F(1)})


def expm1_i(x):
    return _monotone(_expm1_pt, x, {0: F(0)})


def log_i(x):
    """log of a positive value (log 1 = 0 exactly)."""
    if sign(x) != 1:
        raise InexactError(f"log of a value that is not provably positive ({x})")
    return _monotone(_log_pt, x, {1: F(0)})


def log1p_i(x):
    if sign(x + 1) != 1:
        raise InexactError(f"log1p of a value that is not provably above -1 ({x})")
    return _monotone(_log1p_pt, x, {0: F(0)})


def tanh_i(x):
    return _monotone(_tanh_pt, x, {0: F(0)})


def sigmoid_i(x):
    return _monotone(_sigmoid_pt, x, {0: F(1, 2)})


def softplus_i(x):
    """log(1 + e^x), increasing; never rational."""
    return _monotone(lambda a, wp: _log1p_iv(_exp_or_tiny(a, wp + 4), wp), x)


def _log1p_iv(E, wp):
    return _log1p_pt(E[0], wp)[0], _log1p_pt(E[1], wp)[1]


def erf_i(x):
    return _monotone(_erf_pt, x, {0: F(0)})


def erfc_i(x):
    """1 - erf(x), decreasing; for x > 0 without cancellation."""

    def pt(a, wp):
        if mpf_sign(a) > 0:
            return _erfc_pos(a, wp)
        return mpi_sub(_ONE, _erf_pt(a, wp), wp)

    return _monotone(pt, x, {0: F(1)}, increasing=False)


def sqrt_i(x):
    """sqrt of a value >= 0: a Fraction when x is the square of a rational, the exact :class:`Surd` of any other
    rational, else (x an interval) an enclosure."""
    s = sign(x)
    if s is None or s < 0:
        raise InexactError(f"sqrt of a value that is not provably non-negative ({x})")
    if not isinstance(x, Ival):
        return Surd.root(x)  # a Fraction when x is a square, else the exact root (a Surd, also an enclosure)
    return _wrap(_sqrt_iv(x.t, PREC + _GUARD))


# ----------------------------------------------------------------------------------------------------
# sums of square roots of rationals, exactly
# ----------------------------------------------------------------------------------------------------
SURD_TERMS = 2  # the most square-root classes a Surd carries; beyond it the value continues as a plain Ival
_SIGN_BITS = 1 << 14  # the most bits a Surd's sign refinement uses before its answer is "unknown"


def _sqrt_int_iv(d: int, prec: int):
    """An enclosure of sqrt(d) (an integer d > 0) with ``prec``-bit endpoints: r <= sqrt(d) 2^k < r + 1."""
    k = max(0, prec + 4 - d.bit_length() // 2)
    r = math.isqrt(d << (2 * k))
    return from_man_exp(r, -k, prec, round_floor), from_man_exp(r + 1, -k, prec, round_ceiling)


def _square_root_of(n: int) -> int | None:
    """The integer r >= 0 with r * r == n, or None (n >= 0)."""
    r = math.isqrt(n)
    return r if r * r == n else None


def _surd_add_term(a: Fraction, terms: dict, d: int, b: Fraction) -> Fraction:
    """Add b * sqrt(d) (d a positive integer) to the form a + sum terms[e] * sqrt(e) in place, keeping its
    invariant: no radicand is a square and no two radicands differ by a square factor (their product is not a
    square).  Returns the new rational part."""
    if b == 0:
        return a
    r = _square_root_of(d)
    if r is not None:
        return a + b * r
    if d in terms:
        c = terms[d] + b
    else:
        for e in terms:
            s = _square_root_of(d * e)
            if s is not None:  # sqrt(d) = s / sqrt(e) = (s / e) sqrt(e)
                d, b = e, b * F(s, e)
                break
        c = terms.get(d, 0) + b
    if c == 0:
        terms.pop(d, None)
    else:
        terms[d] = c
    return a


def _surd_iv(a: Fraction, terms, prec: int):
    """An enclosure of a + sum b sqrt(d) with ``prec``-bit endpoints (every step rounded outward)."""
    iv = _pt(a, prec)
    for d, b in terms:
        iv = mpi_add(iv, mpi_mul(_pt(b, prec), _sqrt_int_iv(d, prec), prec), prec)
    return iv


class Surd(Ival):
    """An exact real ``a + sum_k b_k sqrt(d_k)`` (rationals a, b_k; positive integers d_k, none a square, no two
    differing by a square factor) that is also a rigorous :class:`Ival` of itself.

    It is what ``sqrt`` of a positive rational that is not a square returns (so BatchNorm's and LayerNorm's
    ``1/sqrt(var + eps)`` with a rational variance), and it stays a Surd under +, -, * and division by a rational
    or by a one-root Surd while it has at most :data:`SURD_TERMS` roots.  Every other consumer sees an Ival (it is
    one).  Its sign is exact (:meth:`sign`): the value is 0 only when every coefficient is 0, because the square
    roots of positive integers with distinct square-free parts, none of them 1, are linearly independent over the
    rationals together with 1 (Besicovitch 1940); a non-zero value's sign is then found by enclosing it at more
    and more bits (docs/conditions.md, "Exact signs behind normalisations")."""

    __slots__ = ("a", "terms", "_t")

    def __init__(self, a: Fraction, terms: tuple):
        self.a, self.terms, self._t = a, terms, None

    @property
    def t(self):
        """The enclosure (lo, hi), computed when first asked for: exact arithmetic on Surds never needs it."""
        if self._t is None:
            self._t = _surd_iv(self.a, self.terms, PREC)
        return self._t

    @t.setter
    def t(self, value):  # copy and pickle restore the slots they read, this one included
        self._t = value

    @staticmethod
    def make(a, terms: dict):
        """The number a + sum terms[d] sqrt(d) (``terms`` already kept by :func:`_surd_add_term`): a Fraction
        when no root is left, a plain Ival when more than :data:`SURD_TERMS` roots are."""
        if not terms:
            return F(a)
        if len(terms) > SURD_TERMS:
            return simplify(Ival(_surd_iv(a, sorted(terms.items()), PREC)))
        return Surd(a, tuple(sorted(terms.items())))

    @staticmethod
    def root(q) -> Fraction | Surd:
        """sqrt(q) of a rational q >= 0, exactly: sqrt(p / r) = sqrt(p r) / r."""
        q = F(q)
        if q < 0:
            raise InexactError(f"sqrt of a negative number ({q})")
        terms: dict = {}
        a = _surd_add_term(F(0), terms, q.numerator * q.denominator, F(1, q.denominator))
        return Surd.make(a, terms)

    # arithmetic: exact with rationals and Surds; with a plain Ival, interval arithmetic (Ival's)
    # -----------------------------------------------------------------------------------------------
    def _combine(self, o, sub=False, swap=False):
        if isinstance(o, bool) or not isinstance(o, (Fraction, int, Surd)):
            return NotImplemented if not isinstance(o, Ival) else None
        if not isinstance(o, Surd):  # a rational: only the rational part moves
            if not o and not swap:
                return self  # Surds are immutable: x + 0 is x itself
            if swap:  # o - self
                return Surd(o - self.a, tuple((d, -b) for d, b in self.terms))
            return Surd(self.a - o if sub else self.a + o, self.terms)
        neg = sub != swap
        if len(self.terms) == 1 == len(o.terms) and self.terms[0][0] == o.terms[0][0]:  # one channel's root
            (d, b1), (_, b2) = self.terms[0], o.terms[0]
            a, c = (o.a - self.a, b2 - b1) if swap else ((self.a - o.a, b1 - b2) if neg else (self.a + o.a, b1 + b2))
            return Surd(a, ((d, c),)) if c else a
        a, terms = (-self.a, {d: -b for d, b in self.terms}) if swap else (self.a, dict(self.terms))
        a = a - o.a if neg else a + o.a
        for d, b in o.terms:
            if d in terms:  # the common case: one channel's root (no square test needed)
                c = terms[d] - b if neg else terms[d] + b
                if c:
                    terms[d] = c
                else:
                    del terms[d]
            else:
                a = _surd_add_term(a, terms, d, -b if neg else b)
        return Surd.make(a, terms)

    def __add__(self, o):
        r = self._combine(o)
        return Ival.__add__(self, o) if r is None else r

    __radd__ = __add__

    def __sub__(self, o):
        r = self._combine(o, sub=True)
        return Ival.__sub__(self, o) if r is None else r

    def __rsub__(self, o):
        r = self._combine(o, sub=True, swap=True)
        return Ival.__rsub__(self, o) if r is None else r

    def __neg__(self):
        return Surd(-self.a, tuple((d, -b) for d, b in self.terms))

    def __mul__(self, o):
        if isinstance(o, bool) or not isinstance(o, (Fraction, int, Surd)):
            return Ival.__mul__(self, o) if isinstance(o, Ival) else NotImplemented
        if not isinstance(o, Surd):
            if not o:
                return F(0)
            if o == 1:
                return self
            if len(self.terms) == 1:
                (d, b), = self.terms
                return Surd(self.a * o if self.a else self.a, ((d, b * o),))
            return Surd(self.a * o, tuple((d, b * o) for d, b in self.terms))
        if len(self.terms) * len(o.terms) > SURD_TERMS * SURD_TERMS:
            return Ival.__mul__(self, o)
        left = ((1, self.a),) + self.terms
        right = ((1, o.a),) + o.terms
        a, terms = F(0), {}
        for d1, b1 in left:
            for d2, b2 in right:
                g = math.gcd(d1, d2)  # sqrt(d1 d2) = g sqrt(d1 d2 / g^2)
                a = _surd_add_term(a, terms, (d1 // g) * (d2 // g), b1 * b2 * g)
        return Surd.make(a, terms)

    __rmul__ = __mul__

    def inverse(self):
        """1 / self: exact for one root ((a - b sqrt d) / (a^2 - b^2 d)), else an enclosure."""
        if len(self.terms) != 1:
            return Ival.__rtruediv__(self, 1)
        (d, b), = self.terms
        n = self.a * self.a - b * b * d  # never 0: sqrt(d) is irrational
        return Surd.make(self.a / n, {d: -b / n})

    def __truediv__(self, o):
        if isinstance(o, bool) or not isinstance(o, (Fraction, int, Surd)):
            return Ival.__truediv__(self, o) if isinstance(o, Ival) else NotImplemented
        if isinstance(o, Surd):
            return self * o.inverse()
        if o == 0:
            return Ival.__truediv__(self, o)  # Ival's own error for a division by 0
        return self * (1 / F(o))

    def __rtruediv__(self, o):
        if isinstance(o, bool) or not isinstance(o, (Fraction, int)):
            return Ival.__rtruediv__(self, o) if isinstance(o, Ival) else NotImplemented
        return self.inverse() * F(o)

    def __eq__(self, o):
        """Equal forms (same rational part, same roots and coefficients) are equal numbers; a Surd never equals a
        rational (it has a root with a non-zero coefficient).  Two equal numbers whose roots are written with
        different radicands (sqrt(2) and sqrt(8) / 2) compare unequal here: a conservative answer (they are
        then treated like two intervals, kept apart), never a wrong "equal"."""
        if isinstance(o, Surd):
            return self.a == o.a and self.terms == o.terms
        return False if isinstance(o, (Fraction, int, Ival)) else NotImplemented

    def __hash__(self):
        return hash((self.a, self.terms))

    def sign(self) -> int | None:
        """The exact sign (never 0: a Surd is not 0): decided exactly for one root, else by enclosures at 2, 4,
        ... times PREC bits; None only when :data:`_SIGN_BITS` bits do not separate it from 0."""
        if len(self.terms) == 1:
            (d, b), = self.terms
            sa, sb = (self.a > 0) - (self.a < 0), (b > 0) - (b < 0)
            if sa == 0 or sa == sb:
                return sb
            return sa if self.a * self.a > b * b * d else sb  # a^2 == b^2 d is impossible: sqrt(d) irrational
        prec, t = PREC, self.t
        while True:
            if mpf_sign(t[0]) > 0:
                return 1
            if mpf_sign(t[1]) < 0:
                return -1
            prec *= 2
            if prec > _SIGN_BITS:
                return None
            t = _surd_iv(self.a, self.terms, prec)

    def __repr__(self):
        roots = " + ".join(f"({decimal_str(b)})*sqrt({d})" for d, b in self.terms)
        return f"Surd[{decimal_str(self.a)} + {roots}]"


def sin_i(x):
    if is_zero(x):
        return F(0)
    return _wrap(_sincos(to_iv(x) if isinstance(x, Ival) else _pt(x, _exact_bits(x)), PREC + _GUARD)[0])


def cos_i(x):
    if is_zero(x):
        return F(1)
    return _wrap(_sincos(to_iv(x) if isinstance(x, Ival) else _pt(x, _exact_bits(x)), PREC + _GUARD)[1])


def pi_i() -> Ival:
    return _wrap(_pi(PREC + _GUARD))


def normal_cdf_i(x):
    """Phi(x) = (1 + erf(x / sqrt 2)) / 2, via erfc(-x / sqrt 2) / 2 for x < 0 (no cancellation)."""
    if is_zero(x):
        return F(1, 2)
    z = x * sqrt_i(F(1, 2))
    if sign(x) == 1:
        return (1 + erf_i(z)) / 2
    return erfc_i(-z) / 2


def normal_pdf_i(x):
    """phi(x) = exp(-x^2/2) / sqrt(2 pi)."""
    return exp_i(-(x * x) / 2) / sqrt_i(2 * pi_i())


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
    if not isinstance(c, Ival) and c == 1:
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
            if (self.lin and o.lin and self.g and type(self.v) is Fraction and type(o.v) is Fraction
                    and not self.v and not o.v and (o is self or o.g == self.g)):
                # the square of an affine form vanishing at w: exactly a quadratic form, which sqrt reads as a norm
                return Sq(((Fraction(1), self.g),))
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
            return mk(self.v / _nz(o), _gscale(self.g, 1 / _nz(o)), self.lin)
        return NotImplemented

    def __rtruediv__(self, o):
        return self.inv() * o

    def inv(self):
        if self.g and type(self.v) is Fraction and not self.v:  # a divisor that crosses 0 at w (a pole)
            raise ZeroDivisionError("division by an exact zero of a value that varies with w")
        v = _nz(self.v)
        return mk(1 / v, _gscale(self.g, -1 / (v * v)), self.lin and not self.g)

    def __repr__(self):
        return f"Aff({self.v!r}, {self.g!r}{'' if self.lin else ', nonlin'})"


class Sq(Aff):
    """``sum_i c_i (g_i . d)^2`` exactly (c_i >= 0 rational, g_i sparse first-order forms): a sum of squares of affine
    forms that vanish at w, made by every product ``x * x`` of such a form.  As an Aff it is value 0, first order 0,
    non-linear -- exactly true -- so every op that does not know it stays right; ``sqrt`` at 0 reads ``comps`` as a
    norm (:mod:`nsverify.oracle.ops.singular`)."""

    __slots__ = ("comps",)

    def __init__(self, comps: tuple):
        super().__init__(Fraction(0), {}, False)
        self.comps = comps

    def __add__(self, o):
        if type(o) is Sq:
            return Sq(self.comps + o.comps)
        if isinstance(o, (int, Fraction)) and o == 0:
            return self
        return Aff.__add__(self, o)

    __radd__ = __add__

    def __mul__(self, o):
        if isinstance(o, (int, Fraction)) and not isinstance(o, bool):
            if o == 0:
                return Fraction(0)
            if o > 0:
                return Sq(tuple((c * o, g) for c, g in self.comps))
        return Aff.__mul__(self, o)

    __rmul__ = __mul__

    def __truediv__(self, o):
        if isinstance(o, (int, Fraction)) and not isinstance(o, bool) and o > 0:
            return self * (1 / Fraction(o))
        return Aff.__truediv__(self, o)

    def matrix(self, n: int) -> list:
        """M = sum_i c_i g_i g_i^T (n x n, exact)."""
        m = [[Fraction(0)] * n for _ in range(n)]
        for c, g in self.comps:
            for i, a in g.items():
                for j, b in g.items():
                    m[i][j] += c * a * b
        return m

    def __repr__(self):
        return f"Sq({len(self.comps)} squares)"


def _nz(x):
    """x, checked to be nonzero; a Python int becomes a Fraction (so that 1 / x stays exact, never a float)."""
    s = sign(x)
    if s == 0:  # exactly zero: fn has a pole at w (the API boundary names it)
        raise ZeroDivisionError("division by an exact zero")
    if s is None:
        raise InexactError(
            "division by a value that may be zero (its enclosure contains 0) in the exact evaluation; "
            "guard the division (e.g. add an epsilon) or move the point"
        )
    return Fraction(x) if type(x) is int else x


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
        if getattr(x, "is_marker", False):  # a value at a singular point (nsverify.oracle.ops.singular)
            return x.smooth_of()
        return f_val(x)
    d = f_der(x.v)
    return mk(f_val(x.v), _gscale(x.g, d), False if x.g else x.lin)


# ----------------------------------------------------------------------------------------------------
# jets: truncated Taylor series along a ray (nsverify.oracle.jets)
# ----------------------------------------------------------------------------------------------------
JET_ORDER = 8  # coefficients c_0 .. c_JET_ORDER of every jet


class NegInf:
    """-inf as PyTorch uses it in attention masks (``is_causal``, ``attn_mask``, ``masked_fill(mask, -inf)``): a
    score plus -inf is -inf, a positive constant times -inf is -inf, and softmax gives it weight exactly 0
    (:mod:`nsverify.oracle.ops.smooth`). Every other use -- a comparison, a sign, a difference of two -inf, a
    product with a non-constant or a non-positive number, a conversion -- raises :class:`NonFiniteError`, so a
    mask value can never pass for a number. The one instance is :data:`NEG_INF`."""

    __slots__ = ()

    def _refuse(self, *_a):
        from nsverify.errors import NonFiniteError

        raise NonFiniteError("the program uses -inf other than as an attention mask (added to scores before a "
                             "softmax): exact analysis needs finite values; replace it (e.g. by a large finite "
                             "negative number) before checking")

    def __add__(self, o):
        if o is self or _isnum(o) or isinstance(o, Aff):
            return self
        return NotImplemented

    __radd__ = __add__

    def __sub__(self, o):
        if o is not self and (_isnum(o) or isinstance(o, Aff)):
            return self
        return self._refuse()

    def __mul__(self, o):
        if _isnum(o) and sign(o) == 1:
            return self
        return self._refuse()

    __rmul__ = __mul__

    def __truediv__(self, o):
        return self.__mul__(o) if _isnum(o) and sign(o) == 1 else self._refuse()

    __rsub__ = __rtruediv__ = __neg__ = __lt__ = __le__ = __gt__ = __ge__ = __float__ = __bool__ = _refuse
    __abs__ = __int__ = __pow__ = __rpow__ = _refuse

    def __repr__(self):
        return "NEG_INF"


#: the exact interpreter's -inf (:class:`NegInf`)
NEG_INF = NegInf()


class JetDeclined(UnsupportedOpError):
    """A jet met an operation it does not support (a comparison outside a kink site, a smooth function, a
    conversion to float or to an index): the ray pass gives up on that direction, nothing is decided."""


class JetUndecided(JetDeclined):
    """A kink site's sign along the ray is not decided by the kept coefficients (another direction may decide it)."""


class Jet:
    """The Taylor coefficients ``c[0] .. c[K]`` (Fractions or :class:`Ival` enclosures) of a quantity
    q(w + t d) in the infinitesimal t > 0, truncated after t^K: ``c[k]`` is the exact k-th coefficient.

    Only ring operations (+, -, *, division by a jet whose constant term is provably non-zero, integer powers)
    are defined; they are exact on truncated series.  Everything else -- ordering, equality, ``bool``,
    ``float``, hashing, unknown functions -- raises :class:`JetDeclined`, so that a jet never passes for a
    constant: only the kink sites that know jets (:func:`jet_sign`) read its sign."""

    __slots__ = ("c",)

    def __init__(self, c):
        self.c = tuple(c)

    @staticmethod
    def _coerce(o):
        if isinstance(o, Jet):
            return o.c
        if _isnum(o) and not isinstance(o, bool):
            return (o,) + (F(0),) * JET_ORDER
        return None

    def __add__(self, o):
        oc = Jet._coerce(o)
        return NotImplemented if oc is None else Jet(a + b for a, b in zip(self.c, oc))

    __radd__ = __add__

    def __neg__(self):
        return Jet(-a for a in self.c)

    def __sub__(self, o):
        oc = Jet._coerce(o)
        return NotImplemented if oc is None else Jet(a - b for a, b in zip(self.c, oc))

    def __rsub__(self, o):
        return (-self).__add__(o)

    def __mul__(self, o):
        if isinstance(o, Jet):
            a, b = self.c, o.c
            return Jet(sum((a[i] * b[k - i] for i in range(k + 1)), F(0)) for k in range(len(a)))
        if _isnum(o) and not isinstance(o, bool):
            return Jet(a * o for a in self.c)
        return NotImplemented

    __rmul__ = __mul__

    def inv(self) -> Jet:
        """1 / q, when q's constant term is provably non-zero (else JetDeclined: a pole or an undecided sign)."""
        a = self.c
        if sign(a[0]) in (0, None):
            raise JetDeclined("division by a jet whose value at w is (or may be) zero")
        a0 = F(a[0]) if type(a[0]) is int else a[0]
        b = [1 / a0]
        for k in range(1, len(a)):
            b.append(-sum((a[j] * b[k - j] for j in range(1, k + 1)), F(0)) / a0)
        return Jet(b)

    def __truediv__(self, o):
        if isinstance(o, Jet):
            return self * o.inv()
        if _isnum(o) and not isinstance(o, bool):
            return self * (1 / _nz(o))
        return NotImplemented

    def __rtruediv__(self, o):
        return self.inv() * o

    def __pow__(self, e):
        if isinstance(e, bool) or not isinstance(e, int) and not (isinstance(e, Fraction) and e.denominator == 1):
            raise JetDeclined("a jet raised to a non-integer power")
        e = int(e)
        out, base = Jet((F(1),) + (F(0),) * JET_ORDER), self if e >= 0 else self.inv()
        for _ in range(abs(e)):
            out = out * base
        return out

    def _refuse(self, *_):
        raise JetDeclined("a jet was compared, converted or hashed outside a kink site that knows jets")

    __lt__ = __le__ = __gt__ = __ge__ = __eq__ = __ne__ = _refuse
    __bool__ = __float__ = __int__ = __index__ = __abs__ = __round__ = __hash__ = _refuse
    __floor__ = __ceil__ = __trunc__ = __rpow__ = __mod__ = __rmod__ = __floordiv__ = __rfloordiv__ = _refuse

    def __repr__(self):
        return f"Jet{self.c!r}"


def jet_sign(q) -> tuple | None:
    """(s, k) when q(w + t d) has the sign s (+1 or -1) for every small enough t > 0, read from its first
    non-zero Taylor coefficient c_k (exact, or an enclosure that excludes 0): q = c_k t^k + O(t^(k+1)).  None
    when every kept coefficient is exactly 0 or the first one not exactly 0 may be 0 (undecided)."""
    for k, c in enumerate(q.c if isinstance(q, Jet) else (q,)):
        s = sign(c)
        if s is None:
            return None
        if s:
            return s, k
    return None
