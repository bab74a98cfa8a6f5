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


# --------------------------------------------------------------------------------------------------------------
# Elementwise pieces
# --------------------------------------------------------------------------------------------------------------
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


# --------------------------------------------------------------------------------------------------------------
# Selection ops and tie cases
# --------------------------------------------------------------------------------------------------------------
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
