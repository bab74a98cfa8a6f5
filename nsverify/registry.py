"""The registry of nonsmooth primitives: one data-driven table (in the style of PyTorch's OpInfo).

Everything else reads this table: the conventions matrix, the exact oracle's interpreter, the generators and
the benchmarks. Two families of entries:

* :class:`Elementwise` -- scalar functions applied entrywise, piecewise smooth with finitely many kinks.
  Each piece carries an mpmath value/derivative and, when it is a polynomial, exact rational coefficients, so
  one-sided derivatives at a kink are exact ``Fraction`` values whenever possible.
* :class:`Selection` -- max-like ops (maximum, amax, max(dim), median, max_pool, sort/topk) whose nonsmooth
  points are *ties*; the local pieces are "the output selects input i", and PyTorch picks a tie rule
  (even split, first index, ...).

Every entry also lists :class:`TieCase` instances: concrete inputs sitting exactly on a kink/tie, with a
cotangent that turns the op's output into a scalar, the exact Bouligand gradients of the adjacent pieces
(the Clarke set is their convex hull), and the PyTorch rule measured on torch 2.13 (NOTES.md section 2).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Callable, Sequence

import mpmath

from .errors import UnknownOpError

F = Fraction
Vec = tuple[Fraction, ...]


# ----------------------------------------------------------------------------------------------------
# Elementwise pieces
# ----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Piece:
    """One smooth piece of an elementwise function.

    ``poly``: exact polynomial coefficients (c0, c1, c2, ...) when the piece is a polynomial, else ``None``.
    ``mp``/``dmp``: value and derivative in mpmath (used for non-polynomial pieces, and to cross-check).
    """

    poly: tuple[Fraction, ...] | None = None
    mp: Callable | None = None
    dmp: Callable | None = None

    def value(self, x):
        if self.poly is not None:
            return sum((c * x**k for k, c in enumerate(self.poly)), F(0) if isinstance(x, Fraction) else 0)
        return self.mp(x)

    def derivative(self, x):
        """Exact Fraction when the piece is polynomial and x is a Fraction; an mpf otherwise."""
        if self.poly is not None:
            zero = F(0) if isinstance(x, Fraction) else 0
            return sum((k * c * x ** (k - 1) for k, c in enumerate(self.poly) if k), zero)
        return self.dmp(mpmath.mpf(x.numerator) / x.denominator if isinstance(x, Fraction) else x)

    @property
    def exact(self) -> bool:
        return self.poly is not None


def lin(slope, intercept=0) -> Piece:
    return Piece(poly=(F(intercept), F(slope)))


@dataclass(frozen=True)
class Elementwise:
    """A piecewise-smooth scalar function x -> f(x), applied entrywise.

    ``breakpoints`` b_1 < ... < b_m (exact), ``pieces`` p_0..p_m with p_i on [b_i, b_{i+1}].
    ``torch_side[i]`` is PyTorch's derivative rule at b_i: "left", "right", or "inside" (for clamp: the
    derivative of the middle piece), as measured on torch 2.13 (NOTES.md section 2).
    """

    name: str
    aten: tuple[str, ...]
    torch_fn: Callable
    breakpoints: tuple[Fraction, ...]
    pieces: tuple[Piece, ...]
    torch_side: tuple[str, ...]
    kwargs: dict = field(default_factory=dict)
    doc: str = ""

    kind = "elementwise"

    def piece_index(self, x: Fraction, side: int = 0) -> int:
        """Index of the piece active at x; at a breakpoint, side=-1 gives the left piece, +1 the right."""
        for i, b in enumerate(self.breakpoints):
            if x < b or (x == b and side < 0):
                return i
        return len(self.breakpoints)

    def value(self, x):
        return self.pieces[self.piece_index(x, +1)].value(x)

    def one_sided(self, b: Fraction) -> tuple:
        """(left derivative, right derivative) at breakpoint b, exact when both pieces are polynomial."""
        i = self.breakpoints.index(b)
        return self.pieces[i].derivative(b), self.pieces[i + 1].derivative(b)

    def clarke(self, x: Fraction) -> tuple:
        """Clarke subdifferential at x as an interval (lo, hi)."""
        if x in self.breakpoints:
            left, right = self.one_sided(x)
            return (min(left, right), max(left, right))
        d = self.pieces[self.piece_index(x)].derivative(x)
        return (d, d)

    def torch_derivative(self, x: Fraction):
        """The derivative PyTorch's documented convention gives at x (exact where possible)."""
        if x not in self.breakpoints:
            return self.pieces[self.piece_index(x)].derivative(x)
        i = self.breakpoints.index(x)
        side = self.torch_side[i]
        left, right = self.one_sided(x)
        if side == "left":
            return left
        if side == "right":
            return right
        if side == "inside":  # the derivative of the piece between the two outer kinks (clamp)
            return self.pieces[1].derivative(x)
        if side == "mid":  # the even split (left + right) / 2 (abs: the minimal-norm element 0)
            return (left + right) / 2
        raise ValueError(side)

    def mp_value(self, x):
        """High-precision value at an mpf point (for difference quotients)."""
        xf = mpmath.mpf(x)
        for i, b in enumerate(self.breakpoints):
            if xf < mpmath.mpf(b.numerator) / b.denominator:
                return self._mp_piece(self.pieces[i], xf)
        return self._mp_piece(self.pieces[-1], xf)

    @staticmethod
    def _mp_piece(p: Piece, x):
        if p.poly is not None:
            return sum(mpmath.mpf(c.numerator) / c.denominator * x**k for k, c in enumerate(p.poly))
        return p.mp(x)


# ----------------------------------------------------------------------------------------------------
# Selection ops and tie cases
# ----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TieCase:
    """A concrete input sitting exactly on a kink/tie of a primitive.

    ``values``: the flattened input (exact dyadic Fractions, exactly representable in every float dtype);
    ``shape``: its shape; ``cotangent``: weights (exact) turning the op's output into the scalar
    ``sum(cotangent * op(x))`` (None: the output is already scalar or has one entry);
    ``pieces``: the exact gradients of that scalar w.r.t. the input on each adjacent smooth piece
    (the Bouligand set; the Clarke set is its convex hull);
    ``rules``: named candidate AD outputs (e.g. "first", "even", "left", "right"), each an exact vector;
    ``torch_rule``: which of ``rules`` PyTorch 2.13 returns (NOTES.md section 2).
    """

    label: str
    values: Vec
    shape: tuple[int, ...]
    pieces: tuple[Vec, ...]
    rules: dict
    torch_rule: str
    cotangent: Vec | None = None
    extra: dict = field(default_factory=dict)

    @property
    def clarke_vertices(self) -> tuple[Vec, ...]:
        return self.pieces


@dataclass(frozen=True)
class Selection:
    """A max-like op: each output entry equals one input entry (or a fixed average, for median)."""

    name: str
    aten: tuple[str, ...]
    torch_fn: Callable
    tie_rule: str  # "even", "first", ... (PyTorch's rule at ties)
    cases: tuple[TieCase, ...] = ()
    kwargs: dict = field(default_factory=dict)
    doc: str = ""

    kind = "selection"


Primitive = Elementwise | Selection

PRIMITIVES: dict[str, Primitive] = {}


def register(p: Primitive) -> Primitive:
    if p.name in PRIMITIVES:
        raise ValueError(f"primitive {p.name!r} registered twice")
    PRIMITIVES[p.name] = p
    return p


def get(name: str) -> Primitive:
    """Look up a primitive by name, with a clear error listing the known ones."""
    try:
        return PRIMITIVES[name]
    except KeyError:
        import difflib

        close = difflib.get_close_matches(name, PRIMITIVES, n=3)
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        raise UnknownOpError(
            f"unknown op {name!r}: it is not in the registry of nonsmooth primitives.{hint} "
            f"Known ops: {', '.join(sorted(PRIMITIVES))}.") from None


def by_aten(aten_name: str) -> Primitive | None:
    """The primitive that handles an ATen op name (e.g. 'aten.relu.default'), or None if smooth/unknown."""
    base = aten_name.removeprefix("aten.").split(".")[0]
    for p in PRIMITIVES.values():
        if base in p.aten:
            return p
    return None


def names(kind: str | None = None) -> list[str]:
    return [n for n, p in PRIMITIVES.items() if kind is None or p.kind == kind]


def as_fraction_vec(xs: Sequence) -> Vec:
    return tuple(F(x) for x in xs)


# ----------------------------------------------------------------------------------------------------
# Elementwise entries (torch_side measured on torch 2.13 CPU, NOTES.md section 2)
# ----------------------------------------------------------------------------------------------------
def _const(c) -> Piece:
    return Piece(poly=(F(c),))


def _mp_exp_piece(scale, alpha) -> Piece:
    """scale * alpha * (exp(x) - 1), the negative branch of elu/selu (mpmath; not rational)."""
    return Piece(mp=lambda x: scale * alpha * (mpmath.exp(x) - 1),
                 dmp=lambda x: scale * alpha * mpmath.exp(x))


def _elementwise_entries():
    import torch
    import torch.nn.functional as tF

    yield Elementwise("relu", ("relu", "relu_", "threshold_backward"), torch.relu, (F(0),),
                      (_const(0), lin(1)), ("left",), doc="max(x, 0); PyTorch: relu'(0) = 0")
    yield Elementwise("leaky_relu", ("leaky_relu", "leaky_relu_"), tF.leaky_relu, (F(0),),
                      (lin(F(1, 100)), lin(1)), ("left",), kwargs={"negative_slope": 0.01},
                      doc="slope 1/100 below 0; the real slope is not dyadic: in a float dtype the slope "
                          "PyTorch uses (and returns at 0) is 0.01 rounded to the dtype's compute type "
                          "(see :func:`dtype_value`)")
    yield Elementwise("relu6", ("relu6",), tF.relu6, (F(0), F(6)),
                      (_const(0), lin(1), _const(6)), ("left", "right"))
    yield Elementwise("hardtanh", ("hardtanh", "hardtanh_"), tF.hardtanh, (F(-1), F(1)),
                      (_const(-1), lin(1), _const(1)), ("left", "right"))
    yield Elementwise("hardsigmoid", ("hardsigmoid",), tF.hardsigmoid, (F(-3), F(3)),
                      (_const(0), lin(F(1, 6), F(1, 2)), _const(1)), ("left", "right"))
    yield Elementwise("hardswish", ("hardswish",), tF.hardswish, (F(-3), F(3)),
                      (_const(0), Piece(poly=(F(0), F(1, 2), F(1, 6))), lin(1)), ("left", "right"),
                      doc="x * relu6(x + 3) / 6")
    yield Elementwise("elu", ("elu",), tF.elu, (F(0),), (_mp_exp_piece(1, 1), lin(1)), ("left",),
                      kwargs={"alpha": 1.0},
                      doc="alpha = 1: both one-sided derivatives are 1 (C^1, a piece boundary, no kink)")
    yield Elementwise("selu", ("selu",), tF.selu, (F(0),),
                      (_mp_exp_piece(SELU_SCALE, SELU_ALPHA), Piece(mp=lambda x: SELU_SCALE * x,
                                                                     dmp=lambda x: SELU_SCALE)),
                      ("left",), doc="left derivative scale*alpha ~ 1.7581, right scale ~ 1.0507 (mpmath)")
    yield Elementwise("abs", ("abs", "abs_"), torch.abs, (F(0),), (lin(-1), lin(1)), ("mid",),
                      doc="PyTorch: abs'(0) = sgn(0) = 0, the minimal-norm element")
    yield Elementwise("clamp", ("clamp", "clamp_", "clip"), torch.clamp, (F(0), F(1)),
                      (_const(0), lin(1), _const(1)), ("inside", "inside"), kwargs={"min": 0.0, "max": 1.0},
                      doc="clamp(x, 0, 1) with scalar bounds: derivative 1 at both bounds (unlike hardtanh)")


SELU_ALPHA = mpmath.mpf("1.6732632423543772848170429916717")
SELU_SCALE = mpmath.mpf("1.0507009873554804934193349852946")

for _e in _elementwise_entries():
    register(_e)


# ----------------------------------------------------------------------------------------------------
# Pooling windows (shared by the selection entries, the AD-variant tests and the oracle)
# ----------------------------------------------------------------------------------------------------
def pool_out_size(n: int, k: int, s: int, p: int, d: int, ceil_mode: bool = False) -> int:
    """PyTorch's pooling output length (ATen pooling_output_shape)."""
    span = n + 2 * p - d * (k - 1) - 1
    out = (span + (s - 1 if ceil_mode else 0)) // s + 1
    if ceil_mode and (out - 1) * s >= n + p:
        out -= 1
    return out


def pool2d_windows(h: int, w: int, kernel, stride=None, padding=0, dilation=1, ceil_mode=False):
    """Windows of a 2-d max pool over an (h, w) plane: ``(out_shape, windows)`` where ``windows[j]`` lists the
    flat indices ``r * w + c`` of the real (non-padding) entries of output j's window, in row-major window
    order -- the order in which PyTorch's "first index" rule scans them."""
    pair = lambda v: (v, v) if isinstance(v, int) else tuple(v)  # noqa: E731
    k, p, d = pair(kernel), pair(padding), pair(dilation)
    s = k if stride is None else pair(stride)
    ho = pool_out_size(h, k[0], s[0], p[0], d[0], ceil_mode)
    wo = pool_out_size(w, k[1], s[1], p[1], d[1], ceil_mode)
    windows = []
    for i in range(ho):
        for j in range(wo):
            win = []
            for a in range(k[0]):
                r = i * s[0] - p[0] + a * d[0]
                for b in range(k[1]):
                    c = j * s[1] - p[1] + b * d[1]
                    if 0 <= r < h and 0 <= c < w:
                        win.append(r * w + c)
            windows.append(win)
    return (ho, wo), windows


def adaptive_windows(n: int, out: int) -> list[range]:
    """ATen's adaptive pooling windows along one axis: [floor(i n / out), ceil((i + 1) n / out))."""
    return [range((i * n) // out, -((-(i + 1) * n) // out)) for i in range(out)]
