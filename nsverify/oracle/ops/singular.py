"""Singular points: the ops and the exact numbers for a point where a function has no derivative in the usual
sense -- a norm at 0, a square root at 0, ``atan2`` at the origin, ``xlogy`` at 0, ``acos``/``asin`` at the ends
of their domain, a real power at 0 -- and the smooth ops ``cosh``/``sinh``/``atan2``/``acos``/``asin`` elsewhere.

What each singular point is (PyTorch's autograd notes, "Gradients for non-differentiable functions"):

* a seminorm at its zero is locally Lipschitz: ``sqrt(sum_i c_i (g_i . d)^2)`` (d = w' - w) has the Clarke set
  ``{M^(1/2) u : |u| <= 1}``, M = sum_i c_i g_i g_i^T (the unit ball for ``vector_norm(w)`` at 0).  Such a value is a
  :class:`NormForm`: an exact first-order model ``v + <g, d> + s ||d||_M``, built from :class:`Sq` (an exact sum of
  squares of affine forms vanishing at w, made by every product ``x * x`` of such a form) by ``sqrt``;
* a one-sided infinite slope (``sqrt``, ``|x|^p`` with p < 1, ``acos`` at 1), a jump (``atan2`` at the origin or
  across its branch cut) or a pole is not locally Lipschitz: :class:`Singular` with kind ``"not_lipschitz"``;
* a value that is NaN on a whole neighbourhood (``sqrt``/``log``/``pow`` of a value < 0 at w, ``acos`` beyond 1) is
  :class:`Undefined`: harmless in the branch of ``torch.where`` that is not taken, fatal when it reaches the output;
* 0/0 at w (a norm that is 0 at w divides a value that is 0 at w): :class:`Singular` with kind ``"undefined"``.

Everything else that cannot be decided exactly (a zero of a non-linear argument whose second order is unknown, an
enclosure containing the singular point) raises a plain :class:`~nsverify.errors.InexactError`: "unknown".
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
from mpmath.libmp.libmpi import mpi_atan, mpi_atan2

from nsverify.errors import InexactError, UnsupportedOpError
from nsverify.oracle import context
from nsverify.oracle.numbers import (
    PREC,
    Aff,
    Ival,
    Sq,
    _gadd,
    _gscale,
    _isnum,
    _wrap,
    exp_i,
    log_i,
    mk,
    pi_i,
    sign,
    smooth,
    sqrt_i,
    to_iv,
    val,
)
from nsverify.oracle.ops.common import arr, filled, objmap
from nsverify.oracle.ops.record import ExactOp

F = Fraction
_WP = PREC + 24


class Singular(InexactError):
    """An exact finding at a singular point: ``kind`` "not_lipschitz" (no Clarke set at w) or "undefined" (the value
    at w is 0/0), raised by ``op`` (an ATen name) for ``reason``.  It is an InexactError, so a caller that does not
    read it answers "unknown"; :func:`check_gradient` turns it into NotLipschitzError / NonFiniteError."""

    def __init__(self, kind: str, op: str, reason: str):
        super().__init__(f"aten.{op}: {reason}")
        self.kind, self.op, self.reason = kind, op, reason


def _op() -> str:
    ctx = context.active()
    return ctx.op_name if ctx is not None and ctx.op_name else "?"


def _real_piece() -> bool:
    """Whether the current trace's first-order forms are those of a real piece around w: a pieces-mode trace, or an
    AD trace that met no kink/tie site (AD's choices at a kink need not be any piece's derivative)."""
    ctx = context.active()
    return ctx is not None and (ctx.mode == "pieces" or (ctx.mode == "ad" and not ctx.sites))


def _varies(x) -> bool:
    """x's first-order form is nonzero (it changes sign across w to first order)."""
    return isinstance(x, Aff) and not isinstance(x, NormForm) and bool(x.g)


def _undecided(x, what: str):
    return Undecided(what, f"{what} at a zero of a non-linear argument ({x!r}) whose first order vanishes: whether "
                     "the function is locally Lipschitz there is not decided by the exact oracle")


# ---------------------------------------------------------------------------------------------- numbers
class Marker:
    """A value at a singular point that does not reach the output exactly, only its kind (a marker): ``torch.where``
    may drop it (the branch not taken: the function does not depend on it near w); at the output of a trace it
    raises :meth:`exception`.  Arithmetic keeps what stays provable (below); comparisons raise (unknown)."""

    __slots__ = ("op", "why")
    kind = "undecided"
    is_marker = True

    def __init__(self, op: str, why: str):
        self.op, self.why = op, why

    def _join(self, o):
        if isinstance(self, Undefined):
            return self
        if isinstance(o, Undefined):
            return o
        return Undecided(self.op, f"{self.why}, combined with another singular value ({o.why})")

    def __add__(self, o):  # a Lipschitz function added changes no class (NaN stays NaN, a steep part stays steep)
        return self._join(o) if isinstance(o, Marker) else self

    __radd__ = __sub__ = __rsub__ = __add__

    def __neg__(self):
        return self

    __pos__ = __neg__

    def __mul__(self, o):
        return self._join(o) if isinstance(o, Marker) else self._scale(o)

    __rmul__ = __mul__

    def __truediv__(self, o):
        return self._join(o) if isinstance(o, Marker) else self._scale(o, divide=True)

    def __rtruediv__(self, o):
        return self if isinstance(self, Undefined) else Undecided(self.op, f"a value divided by {self.why}")

    def __pow__(self, e):
        return self if isinstance(self, Undefined) else Undecided(self.op, f"a power of {self.why}")

    def __abs__(self):
        return self if isinstance(self, Undefined) else Undecided(self.op, f"the absolute value of {self.why}")

    def _scale(self, o, divide: bool = False):
        return self

    def smooth_of(self):
        """A smooth function of this value: NaN stays NaN; a steep part may flatten (cos(sqrt(w)) is smooth)."""
        return self if isinstance(self, Undefined) else Undecided(self.op, f"a smooth function of {self.why}")

    def _read(self, *_):
        raise InexactError(f"a value at a singular point ({self.why}) was compared or read")

    __lt__ = __le__ = __gt__ = __ge__ = __bool__ = __float__ = _read

    def exception(self) -> InexactError:
        """What this value means at the output of fn."""
        if self.kind == "undecided":
            return InexactError(f"whether fn is locally Lipschitz at w is not decided: {self.why}")
        return Singular(self.kind, self.op, self.why)

    def __repr__(self):
        return f"{type(self).__name__}({self.why})"


def _value_sign(o):
    try:
        return sign(val(o))
    except (InexactError, TypeError):
        return None


class Undefined(Marker):
    """NaN at w (and, made from a value < 0 of sqrt/log/pow, on a whole neighbourhood): stays NaN whatever is done."""

    __slots__ = ()
    kind = "undefined"


class Steep(Marker):
    """Not locally Lipschitz at w (an infinite one-sided slope, a jump, NaN on one side): adding a Lipschitz function
    or multiplying by a C^1 one that is non-zero at w keeps it so (g = (g h) / h); anything else: undecided."""

    __slots__ = ()
    kind = "not_lipschitz"

    def _scale(self, o, divide: bool = False):
        s = _value_sign(o)
        if s is not None and s != 0 and not (divide and isinstance(o, NormForm)):
            return self
        return Undecided(self.op, f"{self.why}, {'divided' if divide else 'multiplied'} by a value that may be 0 "
                         "at w")


class Pole(Steep):
    """+-inf at w, unbounded near it (1 / a norm that is 0, log 0, a divisor crossing 0); times a value that is 0 at
    w it is 0 x inf: undefined at w."""

    __slots__ = ()

    def _scale(self, o, divide: bool = False):
        s = _value_sign(o)
        if s == 0 and not divide:
            return Undefined(self.op, f"0 x inf: {self.why}, multiplied by a value that is 0 at w (0/0)")
        return Steep._scale(self, o, divide)


class Undecided(Marker):
    """A singular value whose class the exact oracle cannot tell: harmless where it is dropped, "unknown" at the
    output."""

    __slots__ = ()
    kind = "undecided"


def refuse_markers(a, what: str) -> None:
    """``what`` (isnan, isfinite, ...) cannot read a singular value exactly: unknown."""
    for x in np.asarray(a, dtype=object).reshape(-1):
        if isinstance(x, Marker):
            raise InexactError(f"{what} of a value at a singular point ({x.why}): not decided by the exact oracle")


class NormForm(Aff):
    """``v + <sg, d> + sum_k s_k sqrt(Sq_k(d))``: an exact first-order model of a function at w whose remainder is
    strictly differentiable with derivative 0 (valid in a neighbourhood: made only in traces that met no kink).
    ``g`` (the derivative) does not exist: an op that reads it raises (unknown); + - * / are exact here.
    ``ad_zero``: PyTorch's backward takes 0 for every norm term at its zero (norm, dist, cdist, std mask it);
    False for a plain ``sqrt`` (PyTorch's AD is NaN/inf there)."""

    __slots__ = ("sg", "terms", "ad_zero")

    def __init__(self, v, sg: dict, terms: tuple, ad_zero: bool):
        self.v, self.lin = v, False
        self.sg, self.terms, self.ad_zero = sg, terms, ad_zero

    @property
    def g(self):
        raise InexactError("a norm at its zero (not differentiable at w) reached an op that needs the derivative of "
                           "its argument; the exact oracle follows a norm at 0 through + - * / only")

    @staticmethod
    def _merge(ta, tb):
        out = list(ta)
        for s, sq in tb:
            for k, (s0, sq0) in enumerate(out):
                if sq0 is sq or sq0.comps == sq.comps:
                    out[k] = (s0 + s, sq0)
                    break
            else:
                out.append((s, sq))
        return tuple((s, q) for s, q in out if not (isinstance(s, (int, Fraction)) and s == 0))

    def _scaled(self, c):
        return tuple((s * c, q) for s, q in self.terms)

    def __add__(self, o):
        if isinstance(o, NormForm):
            return NormForm(self.v + o.v, _gadd(self.sg, o.sg), self._merge(self.terms, o.terms),
                            self.ad_zero and o.ad_zero)
        if isinstance(o, Aff):
            return NormForm(self.v + o.v, _gadd(self.sg, o.g), self.terms, self.ad_zero)
        if _isnum(o):
            return NormForm(self.v + o, self.sg, self.terms, self.ad_zero)
        return NotImplemented

    __radd__ = __add__

    def __neg__(self):
        return NormForm(-self.v, _gscale(self.sg, -1), self._scaled(-1), self.ad_zero)

    def __sub__(self, o):
        return self + (-o)

    def __rsub__(self, o):
        return (-self) + o

    def __mul__(self, o):
        if isinstance(o, NormForm):
            return NormForm(self.v * o.v, _gadd(_gscale(self.sg, o.v), _gscale(o.sg, self.v)),
                            self._merge(self._scaled(o.v), o._scaled(self.v)), self.ad_zero and o.ad_zero)
        if isinstance(o, Aff):
            return NormForm(self.v * o.v, _gadd(_gscale(self.sg, o.v), _gscale(o.g, self.v)),
                            self._merge((), self._scaled(o.v)), self.ad_zero)
        if _isnum(o):
            if not isinstance(o, Ival) and o == 0:
                return F(0)
            return NormForm(self.v * o, _gscale(self.sg, o), self._merge((), self._scaled(o)), self.ad_zero)
        return NotImplemented

    __rmul__ = __mul__

    def inv(self):
        s = sign(self.v)
        if s is None:
            raise InexactError("division by a norm whose value at w may be 0 (its enclosure contains 0)")
        if s == 0:
            return Pole(_op(), "1 / a norm that is 0 at w")
        v2 = self.v * self.v
        return NormForm(1 / self.v, _gscale(self.sg, -1 / v2), self._merge((), self._scaled(-1 / v2)), self.ad_zero)

    def __truediv__(self, o):
        if isinstance(o, NormForm):
            return self * o.inv()
        if isinstance(o, Aff):
            return self * o.inv()
        if _isnum(o):
            if sign(o) == 0:
                if sign(self.v) == 0:
                    return Undefined(_op(), "a norm that is 0 at w divided by an exact zero (0/0)")
                return Undefined(_op(), "a division by an exact zero")
            return self * (1 / F(o) if isinstance(o, int) else 1 / o)
        return NotImplemented

    def __rtruediv__(self, o):
        if sign(self.v) == 0:
            if _value_sign(o) == 0:
                return Undefined(_op(), "0/0: a value that is 0 at w divided by a norm that is 0 at w (e.g. normalize "
                                 "or layer_norm with eps=0 at a constant or zero input)")
            return Pole(_op(), "1 / a norm that is 0 at w") * o
        return self.inv() * o

    def ad_gradient(self) -> dict:
        """The forward-mode AD: the smooth part, each norm term taking 0 at its zero (PyTorch's masked backward)."""
        if not self.ad_zero:
            raise InexactError("PyTorch's backward of sqrt at 0 is not finite (1/(2 sqrt(0))); the forward-mode AD "
                               "has no value here")
        return self.sg

    def __repr__(self):
        return f"NormForm({self.v!r}, {self.sg!r}, {len(self.terms)} norm terms)"


def side_near(x: NormForm) -> int:
    """1 when the norm form x is >= its value at w on a whole neighbourhood (its norm terms have positive
    coefficients and its smooth part is 0), 0 when <= there: the side of a kink sitting at x's value that applies
    near w.  Raises (unknown) otherwise."""
    if not x.sg and x.terms and all(isinstance(s, Fraction) for s, _ in x.terms):
        if all(s > 0 for s, _ in x.terms):
            return 1
        if all(s < 0 for s, _ in x.terms):
            return 0
    raise InexactError("a kink at the value of a norm at its zero, with a smooth part or mixed signs: which side "
                       "applies near w is not decided")


# ---------------------------------------------------------------------------------------------- scalar rules
def sqrt_at(x, smooth_sqrt, ad_zero: bool = False):
    """sqrt of one exact scalar whose value is not provably positive (``smooth_sqrt``: the rule for positive values)."""
    if isinstance(x, Marker):
        return x
    if isinstance(x, NormForm):
        raise InexactError("sqrt of a norm at its zero: not decided by the exact oracle")
    v = val(x)
    s = sign(v)
    if s is None:
        raise InexactError(f"sqrt of a value that is not provably positive ({x}); the exact oracle needs the "
                           "argument bounded away from 0 (add an epsilon)")
    if s > 0:
        return smooth_sqrt(x)
    if s < 0:
        return Undefined("sqrt", f"sqrt of {v} < 0")
    if not isinstance(x, Aff):
        return F(0)
    if type(x) is Sq:
        return NormForm(F(0), {}, ((F(1), x),), ad_zero)
    if x.g and _real_piece():
        return Steep("sqrt", "sqrt at 0 of an argument that changes sign to first order: an "
                       "infinite one-sided slope, and no value on the other side")
    return _undecided(x, "sqrt")


def pow_at(x, e: Fraction, smooth_pow):
    """x ** e (e not an integer) of one exact scalar whose value is not provably positive."""
    if isinstance(x, Marker):
        return x
    if isinstance(x, NormForm):
        raise InexactError("a real power of a norm at its zero: not decided by the exact oracle")
    v = val(x)
    s = sign(v)
    if s is None:
        raise InexactError(f"pow with a non-integer exponent of a value that is not provably positive ({x})")
    if s > 0:
        return smooth_pow(x)
    if s < 0:
        return Undefined("pow", f"{v} to the non-integer power {e}")
    if e < 0:
        return Pole("pow", f"0 to the negative power {e}: a pole")
    if not isinstance(x, Aff):
        return F(0)
    if type(x) is Sq:  # (sum of squares)^e ~ |d|^(2e): C^1 with derivative 0 when 2e > 1
        if 2 * e > 1:
            return Aff(F(0), {}, False)
        if 2 * e == 1:
            return NormForm(F(0), {}, ((F(1), x),), False)
        return Steep("pow", f"a sum of squares to the power {e} < 1/2 at 0: an infinite slope")
    if x.g and _real_piece() and e > 1 and _nonneg_on_piece(x):
        return Aff(F(0), {}, False)  # x >= 0 on this piece, x^e = O(|d|^e): C^1 with derivative 0 (e > 1)
    if x.g and _real_piece():
        if e < 1:
            return Steep("pow", f"x^{e} at x = 0 with x changing to first order: an infinite "
                           "one-sided slope (and NaN where x < 0)")
        ctx = context.active()
        if ctx.mode == "ad" and not ctx.sites:  # the whole neighbourhood: x < 0 on one side of w, NaN there
            return Steep("pow", f"x^{e} at x = 0 with x changing sign at w: NaN where x < 0, on a "
                           "whole side of w")
        return Undecided("pow", f"x^{e} at x = 0 with x changing to first order: it is C^1 on the side where x >= 0 "
                         "but NaN on the other; the exact oracle does not decide which sides this piece has")
    return _undecided(x, "pow")


def _nonneg_on_piece(x) -> bool:
    """x (exactly affine, 0 at w) is >= 0 on the current piece: its form is a positive multiple of one of the piece's
    constraint rows (an elementwise kink's side, e.g. abs(w) = w on the piece w >= 0)."""
    ctx = context.active()
    if ctx is None or not x.lin:
        return False
    for site in ctx.sites:
        if site.labels != ("left", "right") or site.chosen is None or len(site.slopes) != 1 or not site.affine:
            continue
        row = site.slopes[0] if site.chosen == 1 else {k: -c for k, c in site.slopes[0].items()}
        if set(row) != set(x.g):
            continue
        k0 = next(iter(row))
        lam = x.g[k0] / row[k0]
        if isinstance(lam, Fraction) and lam > 0 and all(x.g[k] == lam * row[k] for k in row):
            return True
    return False


def log_at(x, smooth_log):
    if isinstance(x, Marker):
        return x
    v = val(x)
    s = sign(v)
    if s is None:
        raise InexactError(f"log of a value that is not provably positive ({x})")
    if s > 0:
        return smooth_log(x)
    if s < 0:
        return Undefined("log", f"log of {v} < 0")
    return Pole("log", "log at 0: the value is -inf at w (a pole)")


def _smooth2(x, y, f, fx, fy):
    """A smooth function of two exact scalars (Aff or numbers): value f(vx, vy), derivative fx dx + fy dy."""
    vx, vy = val(x), val(y)
    gx = x.g if isinstance(x, Aff) else {}
    gy = y.g if isinstance(y, Aff) else {}
    value = f(vx, vy)
    if not gx and not gy and not (isinstance(x, Aff) or isinstance(y, Aff)):
        return value
    g = _gadd(_gscale(gx, fx(vx, vy)) if gx else {}, _gscale(gy, fy(vx, vy)) if gy else {})
    return mk(value, g, False if (gx or gy) else True)


def _iv(x):
    return to_iv(x)


def atan_i(x):
    if sign(x) == 0:
        return F(0)
    return _wrap(mpi_atan(_iv(x), _WP))


def _atan2_i(y, x):
    if sign(y) == 0 and sign(x) == 1:
        return F(0)
    return _wrap(mpi_atan2(_iv(y), _iv(x), _WP))


def atan2(y, x):
    if isinstance(y, Marker) or isinstance(x, Marker):
        return y if isinstance(y, Marker) else x
    sy, sx = sign(val(y)), sign(val(x))
    if sy is None or (sy == 0 and sx is None):
        raise InexactError(f"atan2 near its singular set: the enclosures of ({y}, {x}) do not decide the side")
    if sy == 0 and sx != 1:  # the origin, or the branch cut y = 0, x < 0: a jump of 2 pi (or more) nearby
        if not _varies(y) and not (sx == 0 and _varies(x)):
            if isinstance(y, Aff) or (sx == 0 and isinstance(x, Aff)):
                return _undecided(y, "atan2")
            if sx == 0:
                return F(0)  # atan2(0, 0) = 0, constant near w
            return pi_i()  # y = +0 constant: PyTorch's atan2(+0, x < 0) = pi
        if not _real_piece():
            return Undecided("atan2", "atan2 at its singular set inside a trace that met kinks: not decided")
        where = "the origin" if sx == 0 else "its branch cut (y = 0, x < 0)"
        return Steep("atan2", f"atan2 at {where} with the arguments moving: the angle jumps")

    def d(vy, vx):
        return vx * vx + vy * vy

    return _smooth2(y, x, lambda vy, vx: _atan2_i(vy, vx), lambda vy, vx: vx / d(vy, vx),
                    lambda vy, vx: -vy / d(vy, vx))


def xlogy(x, y):
    """x log y, 0 where x == 0 (PyTorch's xlogy)."""
    if isinstance(x, Marker):
        return x
    if not isinstance(x, Aff) and sign(x) == 0:
        return F(0)  # x is 0 near w: xlogy is 0 there, whatever y is
    if isinstance(y, Marker):
        return y if isinstance(y, Undefined) else Undecided("xlogy", f"xlogy of {y.why}")
    sy = sign(val(y))
    if sy is None:
        raise InexactError(f"xlogy with y's enclosure containing 0 ({y})")
    if sy > 0:
        return x * smooth(y, log_i, lambda v: 1 / v)
    if sy < 0:
        return Undefined("xlogy", "x log y with y < 0")
    if not _real_piece():
        return Undecided("xlogy", "xlogy at y = 0 inside a trace that met kinks: not decided")
    if sign(val(x)) != 0:
        return Pole("xlogy", "x log y with y = 0 and x != 0: the value is infinite at w (a pole)")
    if _varies(x) or _varies(y):
        return Steep("xlogy", "x log y at x = y = 0 with the arguments moving: an infinite "
                       "one-sided slope (x log x), or values without bound")
    return _undecided(x, "xlogy")


def _asin_i(v):
    if sign(v) == 0:
        return F(0)
    if v == 1 or v == -1:
        return pi_i() / 2 * v
    return _wrap(mpi_atan(_iv(v / sqrt_i(1 - v * v)), _WP))


def _arc(x, acos: bool):
    name = "acos" if acos else "asin"
    if isinstance(x, Marker):
        return x
    v = val(x)
    s_hi, s_lo = sign(v - 1), sign(v + 1)
    if s_hi is None or s_lo is None:
        raise InexactError(f"{name} of a value whose enclosure contains an end of [-1, 1] ({v})")
    if s_hi > 0 or s_lo < 0:
        return Undefined(name, f"{name} of {v}, outside [-1, 1]")
    if s_hi == 0 or s_lo == 0:
        if not isinstance(x, Aff):
            a = _asin_i(v)
            return pi_i() / 2 - a if acos else a
        if x.g and _real_piece():
            return Steep(name, f"{name} at {v}, an end of its domain, with the argument moving: "
                           "an infinite one-sided slope, and NaN beyond")
        return _undecided(x, name)

    def f(u):
        a = _asin_i(u)
        return pi_i() / 2 - a if acos else a

    def der(u):
        r = 1 / sqrt_i(1 - u * u)
        return -r if acos else r

    if not isinstance(x, Aff):
        return f(v)
    return mk(f(v), _gscale(x.g, der(v)), False if x.g else x.lin)


def _cosh_i(v):
    return (exp_i(v) + exp_i(-v)) / 2


def _sinh_i(v):
    return (exp_i(v) - exp_i(-v)) / 2


def _hyp(x, cosh: bool):
    if isinstance(x, Marker):
        return x
    f, der = (_cosh_i, _sinh_i) if cosh else (_sinh_i, _cosh_i)
    if not isinstance(x, Aff):
        return f(x)
    return mk(f(x.v), _gscale(x.g, der(x.v)), False if x.g else x.lin)


# ---------------------------------------------------------------------------------------------- norms
def norm_of(xs) -> object:
    """The 2-norm of exact scalars: sqrt(sum x^2), a :class:`NormForm` at its zero (PyTorch's backward takes 0)."""
    total = F(0)
    for x in xs:
        total = total + x * x
    if isinstance(total, Marker):
        return total
    s = sign(val(total))
    if s is not None and s > 0:
        return _sqrt_pos(total)
    return sqrt_at(total, _sqrt_pos, ad_zero=True)


def _sqrt_pos(x):
    return smooth(x, sqrt_i, lambda v: 1 / (2 * sqrt_i(v)))


def _check_p(p, what: str):
    if p is None:
        return
    if float(p) != 2.0:
        raise UnsupportedOpError(f"{what} with p = {p} is not supported by the exact oracle (only the 2-norm); "
                                 "write it with abs/amax/sum (p = 1, inf) or check the 2-norm")


def _reduce(a, dim, keepdim, f):
    a = arr(a)
    if dim is None or (isinstance(dim, (list, tuple)) and len(dim) == 0):
        out = np.empty((), dtype=object)
        out[()] = f(list(a.reshape(-1)))
        return out.reshape((1,) * a.ndim) if keepdim else out
    dims = sorted({d % a.ndim for d in ([dim] if isinstance(dim, int) else dim)})
    rest = [d for d in range(a.ndim) if d not in dims]
    am = np.transpose(a, rest + dims)
    lead = am.shape[: len(rest)]
    flat = am.reshape(lead + (-1,))
    out = np.empty(lead, dtype=object)
    for pos in np.ndindex(*lead):
        out[pos] = f(list(flat[pos]))
    if keepdim:
        out = out.reshape(tuple(1 if i in dims else n for i, n in enumerate(a.shape)))
    return out


def _vector_norm(x, ord=2, dim=None, keepdim=False, *, dtype=None):
    _check_p(ord, "linalg.vector_norm")
    return _reduce(x, dim, keepdim, norm_of)


def _dist(a, b, p=2):
    _check_p(p, "dist")
    d = np.asarray(np.broadcast_arrays(arr(a), arr(b))[0] - np.broadcast_arrays(arr(a), arr(b))[1], dtype=object)
    return _reduce(d, None, False, norm_of)


def _cdist(x1, x2, p=2.0, compute_mode=None):
    _check_p(p, "cdist")
    a, b = arr(x1), arr(x2)
    batched = a.ndim == 3
    if not batched:
        a, b = a[None], b[None]
    out = np.empty((a.shape[0], a.shape[1], b.shape[1]), dtype=object)
    for k in range(a.shape[0]):
        for i in range(a.shape[1]):
            for j in range(b.shape[1]):
                out[k, i, j] = norm_of(list(a[k, i] - b[k, j]))
    return out if batched else out[0]


def _cdist_backward(grad, x1, x2, p, cdist):
    """PyTorch's cdist backward for p = 2: sum_j grad_ij (x1_i - x2_j) / d_ij, 0 where d_ij = 0."""
    _check_p(p, "cdist")
    a, b, g, d = arr(x1), arr(x2), arr(grad), arr(cdist)
    batched = a.ndim == 3
    if not batched:
        a, b, g, d = a[None], b[None], g[None], d[None]
    out = filled(a.shape, F(0))
    for k in range(a.shape[0]):
        for i in range(a.shape[1]):
            for j in range(b.shape[1]):
                s = sign(d[k, i, j])
                if s is None:
                    raise InexactError("cdist backward at a distance whose enclosure contains 0")
                if s == 0:
                    continue
                out[k, i] = out[k, i] + (a[k, i] - b[k, j]) * (g[k, i, j] / d[k, i, j])
    return out if batched else out[0]


def _bin_map(f):
    def impl(a, b, **_):
        x, y = np.broadcast_arrays(arr(a), arr(b))
        out = np.empty(x.shape, dtype=object)
        for pos in np.ndindex(*x.shape):
            out[pos] = f(x[pos], y[pos])
        return out

    return impl


def _atan(a):
    return objmap(lambda x: mk(atan_i(val(x)), _gscale(x.g, 1 / (1 + x.v * x.v)), False) if isinstance(x, Aff)
                  and x.g else atan_i(val(x)), arr(a))


RECORDS = (
    ExactOp(("linalg_vector_norm",), _vector_norm, nodes=("LinalgVectorNormBackward0",), enclosure=True),
    ExactOp(("dist",), _dist, nodes=("DistBackward0",), enclosure=True),
    ExactOp(("_cdist_forward",), _cdist, backward_names=("_cdist_backward",), backward=_cdist_backward,
            nodes=("CdistBackward0",), enclosure=True),
    ExactOp(("atan2",), _bin_map(atan2), nodes=("Atan2Backward0",), enclosure=True),
    ExactOp(("xlogy.Tensor", "xlogy.Scalar_Other", "xlogy.Scalar_Self"), _bin_map(xlogy),
            nodes=("XlogyBackward0",), enclosure=True),
    ExactOp(("acos",), lambda a: objmap(lambda x: _arc(x, True), arr(a)), nodes=("AcosBackward0",), enclosure=True),
    ExactOp(("asin",), lambda a: objmap(lambda x: _arc(x, False), arr(a)), nodes=("AsinBackward0",), enclosure=True),
    ExactOp(("cosh",), lambda a: objmap(lambda x: _hyp(x, True), arr(a)), analytic=True, nodes=("CoshBackward0",),
            enclosure=True),
    ExactOp(("sinh",), lambda a: objmap(lambda x: _hyp(x, False), arr(a)), analytic=True, nodes=("SinhBackward0",),
            enclosure=True),
    ExactOp(("atan",), _atan, analytic=True, nodes=("AtanBackward0",), enclosure=True),
)
