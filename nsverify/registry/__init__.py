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
(the Clarke set is their convex hull), and the PyTorch rule measured on torch 2.13.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Callable, Sequence

import mpmath

from nsverify.errors import UnknownOpError

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
        """Exact Fraction when the piece is polynomial and x is a Fraction; an mpf (computed with 40 digits)
        otherwise."""
        if self.poly is not None:
            zero = F(0) if isinstance(x, Fraction) else 0
            return sum((k * c * x ** (k - 1) for k, c in enumerate(self.poly) if k), zero)
        with mpmath.workdps(40):
            return +self.dmp(mpmath.mpf(x.numerator) / x.denominator if isinstance(x, Fraction) else x)

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
    derivative of the middle piece), as measured on torch 2.13.
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
        left, right = self.pieces[i].derivative(b), self.pieces[i + 1].derivative(b)
        if isinstance(left, mpmath.mpf) != isinstance(right, mpmath.mpf):  # compare like with like
            with mpmath.workdps(40):
                left, right = (mpmath.mpf(v.numerator) / v.denominator if isinstance(v, Fraction) else v
                               for v in (left, right))
        return left, right

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
    ``torch_rule``: which of ``rules`` PyTorch 2.13 returns.
    """

    label: str
    values: Vec
    shape: tuple[int, ...]
    pieces: tuple[Vec, ...]
    rules: dict
    torch_rule: str
    cotangent: Vec | None = None
    extra: dict = field(default_factory=dict)
    #: the op's outputs as selection windows (see :class:`Window`), for exact directional derivatives
    windows: tuple = ()
    #: per-mode exceptions to ``torch_rule`` (e.g. {"jvp": "last"}): forward mode may pick another piece
    mode_rules: dict = field(default_factory=dict)

    @property
    def weights(self) -> Vec:
        return self.cotangent if self.cotangent is not None else (F(1),) * len(self.windows)

    def directional(self, tangent: Sequence) -> Fraction:
        """Exact one-sided directional derivative of sum_j w_j op(x)_j at the tie along ``tangent``: the
        piece selected by ordering tied entries by the tangent (then by index)."""
        v = as_fraction_vec(tangent)
        n = len(self.values)
        key = {i: (v[i], -i) for i in range(n)}
        g = _grad(n, self.windows, self.weights, [_select(self.values, w, key) for w in self.windows])
        return sum(a * b for a, b in zip(g, v))

    @property
    def clarke_vertices(self) -> tuple[Vec, ...]:
        return self.pieces

    def in_clarke(self, vec: Sequence) -> bool:
        """Exact: is ``vec`` (exact values, e.g. Fractions of a float gradient) in the Clarke set?"""
        from nsverify.rational import in_hull

        return in_hull(as_fraction_vec(vec), self.pieces)

    def tensor(self, dtype, device="cpu"):
        """The input as a tensor of ``dtype``; raises InexactError if a value is not representable."""
        return exact_tensor(self.values, dtype, device).reshape(self.shape)

    def cotangent_tensor(self, dtype, device="cpu"):
        return None if self.cotangent is None else exact_tensor(self.cotangent, dtype, device)


@dataclass(frozen=True)
class Selection:
    """A max-like op: each output entry equals one input entry (or a fixed average, for median)."""

    name: str
    aten: tuple[str, ...]
    torch_fn: Callable
    tie_rule: str  # "even", "first", ... (PyTorch's rule at ties)
    #: the tie cases, or a zero-argument function building them (computed on first use: exact Bouligand
    #: enumeration is too slow for import time)
    case_source: tuple[TieCase, ...] | Callable[[], tuple[TieCase, ...]] = ()
    kwargs: dict = field(default_factory=dict)
    doc: str = ""
    #: how to read the input: "single" tensor, or "pair" (maximum/minimum: rows 0 and 1 are x and y),
    #: or "triple" (clamp with tensor bounds: rows x, min, max)
    packing: str = "single"

    kind = "selection"

    @property
    def cases(self) -> tuple[TieCase, ...]:
        if callable(self.case_source):
            if self.name not in _CASE_CACHE:
                _CASE_CACHE[self.name] = tuple(self.case_source())
            return _CASE_CACHE[self.name]
        return tuple(self.case_source)


_CASE_CACHE: dict[str, tuple] = {}


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
    """The primitive that handles an ATen op name (e.g. 'aten.relu.default', 'aten.max.dim'), or None if
    smooth/unknown.  An entry listing "name.overload" wins over one listing the bare name."""
    parts = aten_name.removeprefix("aten.").split(".")
    base = parts[0]
    if len(parts) > 1:
        for p in PRIMITIVES.values():
            if f"{base}.{parts[1]}" in p.aten:
                return p
    for p in PRIMITIVES.values():
        if base in p.aten:
            return p
    return None


def names(kind: str | None = None) -> list[str]:
    return [n for n, p in PRIMITIVES.items() if kind is None or p.kind == kind]


def as_fraction_vec(xs: Sequence) -> Vec:
    return tuple(F(x) for x in xs)


# ----------------------------------------------------------------------------------------------------
# Elementwise entries (torch_side measured on torch 2.13 CPU)
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


with mpmath.workdps(40):
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


# ----------------------------------------------------------------------------------------------------
# Exact inputs for a dtype
# ----------------------------------------------------------------------------------------------------
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


def kink_inputs(entry: Elementwise, dtype, device="cpu"):
    """A 1-d tensor with one entry sitting exactly on each kink of an elementwise primitive."""
    return exact_tensor(entry.breakpoints, dtype, device)


# ----------------------------------------------------------------------------------------------------
# Selection semantics: windows, Bouligand pieces, candidate tie rules
# ----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Window:
    """Output j of a selection op: the entry of rank ``rank`` (0 = most extreme in ``direction``) among the
    input entries ``indices`` (flat, in PyTorch's scan order)."""

    indices: tuple[int, ...]
    rank: int = 0
    direction: str = "max"  # "max": ranks from the top; "min": from the bottom


def _select(values, win: Window, key) -> int:
    """Index selected by ``win`` when ties are broken by ``key[i]`` (larger key = more extreme)."""
    sign = 1 if win.direction == "max" else -1
    order = sorted(win.indices, key=lambda i: (sign * values[i], key[i]), reverse=True)
    return order[win.rank]


def _grad(n, windows, weights, sel) -> Vec:
    g = [F(0)] * n
    for w, j in zip(weights, sel):
        g[j] += w
    return tuple(g)


def rule_vectors(values: Vec, windows: Sequence[Window], weights: Vec) -> dict:
    """Candidate AD outputs at a tie: "first" (ties go to the earliest index, as if it were the most
    extreme), "last", and "even" (each output's weight split evenly over the entries equal to it)."""
    n = len(values)
    first = {i: -i for i in range(n)}
    last = {i: i for i in range(n)}
    rules = {"first": _grad(n, windows, weights, [_select(values, w, first) for w in windows]),
             "last": _grad(n, windows, weights, [_select(values, w, last) for w in windows])}
    even = [F(0)] * n
    for w, win in zip(weights, windows):
        v = values[_select(values, win, first)]
        ties = [i for i in win.indices if values[i] == v]
        for i in ties:
            even[i] += w / len(ties)
    rules["even"] = tuple(even)
    return rules


MAX_PIECES = 20_000


def bouligand_pieces(values: Vec, windows: Sequence[Window], weights: Vec) -> tuple[Vec, ...]:
    """Exact Bouligand set of x -> sum_j weights_j op(x)_j at ``values``: the gradients on the smooth pieces
    around the tie, one per way of ordering the tied entries (enumerated without repeats)."""
    import itertools

    from nsverify.errors import TooManyPieces

    n = len(values)
    if all(w.rank == 0 for w in windows) and len({w.direction for w in windows}) == 1:
        # max/min-type windows: choose the most extreme remaining entry, resolve its windows, recurse
        sign = 1 if windows[0].direction == "max" else -1
        memo: dict = {}

        def rec(unresolved: frozenset) -> set:
            if not unresolved:
                return {tuple([F(0)] * n)}
            if unresolved in memo:
                return memo[unresolved]
            live = {i for j in unresolved for i in windows[j].indices}
            top = max(sign * values[i] for i in live)
            out = set()
            for e in sorted(i for i in live if sign * values[i] == top):
                hit = frozenset(j for j in unresolved if e in windows[j].indices)
                add = sum(weights[j] for j in hit)
                for g in rec(unresolved - hit):
                    g2 = list(g)
                    g2[e] += add
                    out.add(tuple(g2))
                    if len(out) > MAX_PIECES:
                        raise TooManyPieces(f"more than {MAX_PIECES} Bouligand pieces at this tie; use a "
                                            "smaller input or fewer tied entries.")
            memo[unresolved] = out
            return out

        return tuple(sorted(rec(frozenset(range(len(windows))))))
    groups: dict = {}
    for i, v in enumerate(values):
        groups.setdefault(v, []).append(i)
    tied = [g for g in groups.values() if len(g) > 1]
    total = 1
    for g in tied:
        total *= len(list(itertools.permutations(g))) if len(g) <= 8 else 10**9
    if total > MAX_PIECES:
        raise TooManyPieces(f"{total} orderings of the tied entries exceed {MAX_PIECES}; use fewer ties.")
    out = set()
    for perms in itertools.product(*[list(itertools.permutations(g)) for g in tied]):
        key = {i: 0 for i in range(n)}
        for perm in perms:
            for r, i in enumerate(perm):
                key[i] = r
        out.add(_grad(n, windows, weights, [_select(values, w, key) for w in windows]))
    return tuple(sorted(out))


def selection_case(label: str, values, shape, windows: Sequence[Window], torch_rule: str,
                   cotangent=None, mode_rules: dict | None = None, **extra) -> TieCase:
    """Build a TieCase from exact input values and the op's windows (pieces and rules computed exactly)."""
    vals = as_fraction_vec(values)
    weights = as_fraction_vec(cotangent) if cotangent is not None else (F(1),) * len(windows)
    if len(weights) != len(windows):
        raise ValueError(f"{label}: {len(windows)} outputs but {len(weights)} cotangent weights")
    return TieCase(label=label, values=vals, shape=tuple(shape),
                   pieces=bouligand_pieces(vals, windows, weights),
                   rules=rule_vectors(vals, windows, weights), torch_rule=torch_rule,
                   cotangent=None if cotangent is None else weights, extra=dict(extra),
                   windows=tuple(windows), mode_rules=dict(mode_rules or {}))


def _pool_windows_2d(h, w, **geom) -> list[Window]:
    _, wins = pool2d_windows(h, w, **geom)
    return [Window(tuple(win)) for win in wins]


def _selection_entries():
    import torch
    import torch.nn.functional as tF

    W, case = Window, selection_case
    # --- binary elementwise max/min: input rows (x, y), output j compares x_j and y_j
    pair = lambda n, d: [W((j, n + j), 0, d) for j in range(n)]  # noqa: E731
    yield Selection("maximum", ("maximum", "fmax"), lambda t: torch.maximum(t[0], t[1]), "even", lambda: (
        case("x == y", [1, 0, 2, 1, 3, 2], (2, 3), pair(3, "max"), "even", cotangent=[1, 2, 3]),),
        packing="pair", doc="torch.maximum(x, y): 1/2 to each side at x == y")
    yield Selection("minimum", ("minimum", "fmin"), lambda t: torch.minimum(t[0], t[1]), "even", lambda: (
        case("x == y", [1, 0, 2, 1, -3, 2], (2, 3), pair(3, "min"), "even", cotangent=[1, 2, 3]),),
        packing="pair")
    # --- full reductions: even split
    for name, fn, d in [("amax", torch.amax, "max"), ("amin", torch.amin, "min"), ("max", torch.max, "max"),
                        ("min", torch.min, "min")]:
        yield Selection(name, (name,), (lambda f: lambda t: f(t))(fn), "even", _reduction_cases(d),
                        doc=f"torch.{name}(x), full reduction: even split over the tie set (minimal norm)")
    # --- reductions along a dim: first index
    rows = lambda r, c, d: [W(tuple(i * c + j for j in range(c)), 0, d) for i in range(r)]  # noqa: E731
    yield Selection("max_dim", ("max.dim",), lambda t: torch.max(t, 1).values, "first", lambda: (
        case("ties in rows", [1, 1, 0, 2, 0, 2], (2, 3), rows(2, 3, "max"), "first", cotangent=[1, 2]),
        case("all tied", [0, 0, 0, 0], (1, 4), rows(1, 4, "max"), "first")),
        kwargs={"dim": 1}, doc="torch.max(x, dim): the first maximal index")
    yield Selection("min_dim", ("min.dim",), lambda t: torch.min(t, 1).values, "first", lambda: (
        case("ties in rows", [1, 1, 2, 0, 3, 0], (2, 3), rows(2, 3, "min"), "first", cotangent=[1, 2]),),
        kwargs={"dim": 1}, doc="torch.min(x, dim): the first minimal index")
    yield Selection("median", ("median",), lambda t: torch.median(t), "even", lambda: (
        case("3 tied at the median", [1, 1, 1, 2], (4,), [W((0, 1, 2, 3), 1, "min")], "even"),
        case("all tied", [0, 0, 0, 0], (4,), [W((0, 1, 2, 3), 1, "min")], "even")),
        doc="torch.median(x) (lower median): even split over the entries equal to it (measured, torch 2.13)")
    yield Selection("median_dim", ("median.dim",), lambda t: torch.median(t, 1).values, "first", lambda: (
        case("3 tied", [1, 1, 1], (1, 3), [W((0, 1, 2), 1, "min")], "first"),
        case("3 tied among 5", [2, 1, 1, 1, 0], (1, 5), [W((0, 1, 2, 3, 4), 2, "min")], "first")),
        kwargs={"dim": 1}, doc="torch.median(x, dim): the gradient goes to the returned index, the one a "
                              "stable ascending sort puts at the median rank (measured on CPU, torch 2.13)")
    # --- pooling: first index in row-major window order, overlapping windows accumulate
    yield Selection("max_pool1d", ("max_pool1d", "max_pool1d_with_indices"),
                    lambda t: tF.max_pool1d(t.reshape(1, 1, -1), 2, stride=1).flatten(), "first", lambda: (
                        case("overlapping k=2 s=1", [0, 0, 1, 1], (4,),
                             _pool_windows_2d(1, 4, kernel=(1, 2), stride=(1, 1)), "first",
                             cotangent=[1, 2, 3]),
                        case("Despres (t, 4t) at t=0", [0, 0], (2,),
                             _pool_windows_2d(1, 2, kernel=(1, 2), stride=(1, 1)), "first")),
                    kwargs={"kernel_size": 2, "stride": 1})
    yield Selection("max_pool2d", ("max_pool2d", "max_pool2d_with_indices"), _max_pool2d_case_fn, "first",
                    _max_pool2d_cases, doc="first index in row-major window order; overlapping windows add "
                    "up. torch_fn(t, geom=...) takes the case's geometry (case.extra)")
    yield Selection("adaptive_max_pool2d", ("adaptive_max_pool2d",),
                    lambda t: tF.adaptive_max_pool2d(t.reshape(1, 1, 3, 3), 2).flatten(), "first", lambda: (
                        case("3x3 -> 2x2 (overlapping) all tied", [0] * 9, (3, 3), _adaptive_windows_2d(3, 2),
                             "first", cotangent=[1, 2, 3, 1]),),
                    kwargs={"output_size": 2})
    # --- sort / topk
    yield Selection("sort", ("sort",), lambda t: torch.sort(t).values, "first", lambda: (
        case("3 tied", [1, 0, 1, 1], (4,), [W((0, 1, 2, 3), r, "min") for r in range(4)], "first",
             cotangent=[1, 2, 3, 4]),),
        doc="ascending sort: tied entries keep their index order (measured, torch 2.13 CPU)")
    yield Selection("topk", ("topk",), lambda t: torch.topk(t, 2).values, "other", lambda: (
        case("3 tied, k=2", [1, 0, 1, 1], (4,), [W((0, 1, 2, 3), r, "max") for r in range(2)], "other",
             cotangent=[1, 2]),),
        kwargs={"k": 2}, doc="topk at ties returns later indices in ascending order (measured, torch 2.13 "
                            "CPU): a Bouligand piece, but neither the first- nor the last-index rule")
    # --- clamp with tensor bounds = median of (x, min, max) when min <= max
    med3 = lambda n: [W((j, n + j, 2 * n + j), 1, "max") for j in range(n)]  # noqa: E731
    yield Selection("clamp_tensor", (), lambda t: torch.clamp(t[0], t[1], t[2]), "other", lambda: (
        case("x == min, x == max", [0, 1, 2, 0, 0, 0, 1, 1, 3], (3, 3), med3(3), "other",
             cotangent=[1, 2, 3]),
        case("min == max > x", [2, 3, 3], (3, 1), med3(1), "other", mode_rules={"jvp": "last"})),
        packing="triple", doc="torch.clamp(x, min_tensor, max_tensor) (aten.clamp.Tensor): the whole "
        "gradient goes to x at x == min or x == max (like the scalar clamp); when min == max > x it is 0 for "
        "every input, outside the Clarke set conv{e_min, e_max}, while forward mode (jvp) returns e_min, "
        "inside it (measured, torch 2.13 CPU)")


def _reduction_cases(d: str):
    """Tie cases of a full max (d="max") or min reduction."""
    big = 3 if d == "max" else -3
    full = [Window((0, 1, 2, 3), 0, d)]
    return lambda: (selection_case("2 ties", [1, big, big, 0], (2, 2), full, "even"),
                    selection_case("3 ties", [big, big, 0, big], (4,), full, "even"),
                    selection_case("all tied", [0, 0, 0, 0], (4,), full, "even"))


def _adaptive_windows_2d(n: int, out: int) -> list[Window]:
    a = adaptive_windows(n, out)
    return [Window(tuple(r * n + c for r in a[i] for c in a[j])) for i in range(out) for j in range(out)]


MAX_POOL2D_GEOMS = (("k=2 non-overlapping", 4, 4, {"kernel": 2}),
                    ("k=3 s=1 overlapping", 4, 4, {"kernel": 3, "stride": 1}),
                    ("k=3 s=2 p=1", 4, 4, {"kernel": 3, "stride": 2, "padding": 1}),
                    ("k=2 s=1 dilation=2", 4, 4, {"kernel": 2, "stride": 1, "dilation": 2}))


def _max_pool2d_cases():
    out = []
    for label, h, w, geom in MAX_POOL2D_GEOMS:
        # a plateau filling the top-left window, one more 1 at the corner, zeros elsewhere: ties everywhere
        vals = [int((i < 2 and j < 2) or (i == h - 1 and j == w - 1)) for i in range(h) for j in range(w)]
        wins = _pool_windows_2d(h, w, **geom)
        cot = [(k % 3) + 1 for k in range(len(wins))]
        out.append(selection_case(label, vals, (h, w), wins, "first", cotangent=cot, geom=geom))
    return tuple(out)


def _max_pool2d_case_fn(t, geom=None):
    import torch.nn.functional as tF

    g = dict(geom or {"kernel": 2})
    k = g.pop("kernel")
    return tF.max_pool2d(t.reshape(1, 1, *t.shape[-2:]), k, **g).flatten()


for _e in _selection_entries():
    register(_e)
