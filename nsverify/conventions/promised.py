"""The promised column: what PyTorch's documented rule gives at every cell of the conventions matrix.

PyTorch documents its rule for non-differentiable functions in the autograd notes ("Gradients for
non-differentiable functions"): where the function is differentiable, the gradient; where it is locally convex
(concave), the sub- (super-)gradient of minimum norm; where it is neither (nor defined by continuity), the value
is not promised. This module computes that promise exactly, generically from the registry's exact Clarke sets, so
that a new entry gets its promise without code of its own:

* an elementwise kink (:class:`~nsverify.registry.Elementwise`): the cell's one input is x; the Clarke set is the
  interval between the one-sided derivatives. The function is locally convex iff the left slope is at most the
  right one and both adjacent pieces are convex near the kink (a polynomial piece's second derivative is signed by
  its Taylor expansion at the kink; a non-polynomial piece's convexity is not decided exactly, and the cell is
  then "not covered", with that reason). Concave likewise;
* a tie case (:class:`~nsverify.registry.TieCase`): the cell's inputs are every entry of the case's input tensor
  (for ``maximum`` and ``minimum`` both x and y, for ``clamp_tensor`` x, min and max; constants are not inputs),
  and the function is ``sum_j c_j op(x)_j`` with the case's cotangent c. The outputs are split into blocks that
  share no input (an elementwise op's rule applies per element); a block is convex when its windows are all max
  windows of rank 0 with nonnegative weights (or min windows with nonpositive ones), concave in the mirrored
  case, and otherwise decided exactly by enumerating the orderings of its tied entries: the function is convex
  iff on every ordering cone each Bouligand piece lies below the piece of that cone (<g_k - g, d> <= 0 on the
  cone, checked on the cone's generators). Ranks that mix (median, kthvalue, topk with these cotangents) come out
  neither; sort with increasing weights comes out convex.

The minimum-norm element of a hull is the quadratic program of :func:`nsverify.rational.nearest_point` (Wolfe's
minimum-norm-point algorithm in Fractions, the optimality conditions checked; the matrix's largest hull, 150
vertices in 9 dimensions, takes 0.15 s): the recorded value is the exact one. A cell *follows* the promise when its
derivative equals it exactly or is its rounding to the cell's dtype (:func:`follows`). JAX cells are judged against
JAX's own documented convention where JAX documents one (:data:`JAX_DOCUMENTED`), else against the same rule,
labelled so.
"""
from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass
from fractions import Fraction
from typing import Sequence

import mpmath

from nsverify import registry
from nsverify.errors import NsverifyError
from nsverify.rational import nearest_point
from nsverify.registry.windows import MAX_PIECES

#: where the promise comes from, per framework
RULE_SOURCE = {"torch": "PyTorch's documented rule (autograd notes, 'Gradients for non-differentiable functions')"}
#: JAX's own documented conventions at a kink: op -> ({case: the exact derivative}, where JAX documents it).
#: jax.nn.relu's docstring: "except under differentiation, we take: grad relu(0) = 0"; jax.nn.relu6's: the
#: derivative is 0 at 0 and at 6. Other JAX ops document no value at their kinks or ties; their cells are judged
#: against PyTorch's documented rule, labelled so.
JAX_DOCUMENTED = {"relu": ({"x=0": (Fraction(0),)}, "jax.nn.relu's docstring: grad relu(0) = 0"),
                  "relu6": ({"x=0": (Fraction(0),), "x=6": (Fraction(0),)},
                            "jax.nn.relu6's docstring: grad relu6(0) = 0 and grad relu6(6) = 0")}

#: the statuses :func:`follows` gives a cell
FOLLOWS = ("yes", "rounding", "no", "not covered", "n/a")
#: the most (orderings x pieces x inputs) a block's convexity is decided by enumeration; beyond it "undecided"
ENUMERATION_BUDGET = 2_000_000


@dataclass(frozen=True)
class Promise:
    """What the documented rule gives at one cell: ``value`` (exact, one entry per input of the cell) when the
    rule covers the point, else None with the reason in ``shape``/``reason``. ``shape``: "differentiable",
    "convex", "concave", "convex and concave blocks", "neither", or "undecided"; ``inputs``: what the cell's
    inputs are (the space the minimum norm is taken in); ``source``: whose documented rule it is."""

    op: str
    case: str
    shape: str
    value: tuple | None
    inputs: str
    reason: str = ""
    source: str = RULE_SOURCE["torch"]

    @property
    def covered(self) -> bool:
        return self.value is not None

    def text(self) -> str:
        """The promised value as text ("0", "(1/2,1/2)"), or "not covered"."""
        if self.value is None:
            return "not covered"
        vals = [_num_text(v) for v in self.value]
        return vals[0] if len(vals) == 1 else "(" + ",".join(vals) + ")"

    def to_json(self) -> dict:
        return {"value": None if self.value is None else [_num_text(v) for v in self.value], "text": self.text(),
                "shape": self.shape, "inputs": self.inputs, "reason": self.reason, "source": self.source}


def _num_text(v) -> str:
    if isinstance(v, mpmath.mpf):
        return mpmath.nstr(v, 17)
    return str(Fraction(v))


# ----------------------------------------------------------------------------------------------------------
# elementwise kinks
# ----------------------------------------------------------------------------------------------------------
def _curvature_sign(piece: registry.Piece, b: Fraction, side: int) -> int | None:
    """The sign of the piece's second derivative just to the ``side`` (-1 left, +1 right) of b: +1, -1, 0 (the
    piece is affine) or None (not a polynomial: not decided exactly). The Taylor expansion of p'' at b: the first
    nonzero derivative p^(2+k)(b) has the sign of p'' at b + side*h for small h > 0, times side^k."""
    if piece.poly is None:
        return None
    coeffs = [Fraction(c) for c in piece.poly]
    for _ in range(2):  # p''
        coeffs = [k * c for k, c in enumerate(coeffs)][1:]
    k = 0
    while coeffs:
        val = sum((c * b**i for i, c in enumerate(coeffs)), Fraction(0))
        if val != 0:
            return (1 if val > 0 else -1) * (side ** k)
        coeffs = [i * c for i, c in enumerate(coeffs)][1:]
        k += 1
    return 0


def _exact_slope(entry: registry.Elementwise, i: int):
    """The common derivative at a differentiable breakpoint i, exact when one adjacent piece is polynomial."""
    b = entry.breakpoints[i]
    for p in (entry.pieces[i + 1], entry.pieces[i]):
        if p.poly is not None:
            return p.derivative(b)
    return entry.one_sided(b)[1]


def elementwise_promise(entry: registry.Elementwise, i: int) -> Promise:
    """The documented rule at kink ``i`` of ``entry`` (module docstring)."""
    b = entry.breakpoints[i]
    label, inputs = entry.kink_label(i), "x (the one input of the elementwise op)"
    left, right = entry.one_sided(b)
    if left == right:
        return Promise(entry.name, label, "differentiable", (_exact_slope(entry, i),), inputs,
                       "the one-sided derivatives agree: the gradient")
    if isinstance(left, mpmath.mpf) or isinstance(right, mpmath.mpf):
        conv = None
    else:
        conv = "convex" if left < right else "concave"
    curv = (_curvature_sign(entry.pieces[i], b, -1), _curvature_sign(entry.pieces[i + 1], b, +1))
    if conv is None or None in curv:
        shape = "convex" if left < right else "concave"
        return Promise(entry.name, label, "undecided", None, inputs,
                       f"a non-polynomial piece: whether the function is locally {shape} at the kink is not decided "
                       "exactly")
    want = 1 if conv == "convex" else -1
    if any(c not in (0, want) for c in curv):
        return Promise(entry.name, label, "neither", None, inputs,
                       f"the slopes ({left}, {right}) would make it {conv}, but an adjacent piece curves the other "
                       "way: neither locally convex nor concave")
    found = nearest_point([[left], [right]])
    if found is None:  # pragma: no cover - a 1-d hull is always confirmed
        return Promise(entry.name, label, "undecided", None, inputs, "the minimum-norm QP was not confirmed")
    return Promise(entry.name, label, conv, tuple(found[0]), inputs,
                   f"locally {conv}: the minimum-norm element of [{min(left, right)}, {max(left, right)}]")


# ----------------------------------------------------------------------------------------------------------
# tie cases
# ----------------------------------------------------------------------------------------------------------
def blocks(case: registry.TieCase) -> list[tuple[list[int], list[int]]]:
    """The case's outputs split into blocks that share no input: ``[(output indices, input indices)]``, the
    inputs sorted (inputs in no window form no block: the gradient is 0 there)."""
    parent = list(range(len(case.windows)))

    def find(a):
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a
    owner: dict = {}
    for j, w in enumerate(case.windows):
        for i in w.indices:
            if i in owner:
                parent[find(j)] = find(owner[i])
            else:
                owner[i] = j
    groups: dict = {}
    for j in range(len(case.windows)):
        groups.setdefault(find(j), []).append(j)
    out = []
    for outs in groups.values():
        ins = sorted({i for j in outs for i in case.windows[j].indices})
        out.append((outs, ins))
    return sorted(out, key=lambda b: b[1])


def _selected(values, win, d) -> int:
    """The input ``win`` selects at values + eps*d for small eps > 0 (d distinct within every tie)."""
    sign = 1 if win.direction == "max" else -1
    order = sorted(win.indices, key=lambda i: (sign * values[i], sign * d[i]), reverse=True)
    return order[win.rank]


def _block_shape(case: registry.TieCase, outs: list[int], ins: list[int], pieces: list[tuple]) -> str:
    """"convex", "concave", "neither" or "undecided" for one block (module docstring)."""
    wins = [case.windows[j] for j in outs]
    ws = [case.weights[j] for j in outs]
    if all(w.rank == 0 for w in wins):
        dirs = {w.direction for w in wins}
        if dirs == {"max"} and all(x >= 0 for x in ws) or dirs == {"min"} and all(x <= 0 for x in ws):
            return "convex"
        if dirs == {"max"} and all(x <= 0 for x in ws) or dirs == {"min"} and all(x >= 0 for x in ws):
            return "concave"
    vals = case.values
    bygroup: dict = {}
    for i in ins:
        bygroup.setdefault(vals[i], []).append(i)
    ties = [g for g in bygroup.values() if len(g) > 1]
    total = 1
    for g in ties:
        total *= len(list(itertools.permutations(g))) if len(g) <= 8 else 10**9
    if total > MAX_PIECES or total * len(pieces) * len(ins) > ENUMERATION_BUDGET:
        return "undecided"
    pos = {i: k for k, i in enumerate(ins)}
    regions = {}
    for perms in itertools.product(*[list(itertools.permutations(g)) for g in ties]):
        d = {i: 0 for i in ins}
        for perm in perms:
            for r, i in enumerate(perm):
                d[i] = -r  # perm[0] moves up most
        g = [Fraction(0)] * len(ins)
        for w, wt in zip(wins, ws):
            g[pos[_selected(vals, w, d)]] += wt
        regions[perms] = tuple(g)
    if set(regions.values()) != set(pieces):
        # the registry's Bouligand set is not the one the ordering cones give (windows of both directions in one
        # block, whose pieces the registry enumerates with one tie-break key): decide nothing
        return "undecided"
    convex = concave = True
    for perms, g in regions.items():
        for pk in pieces:
            h = [a - b for a, b in zip(pk, g)]
            for perm in perms:
                if sum(h[pos[i]] for i in perm) != 0:  # the cone holds the line along (1, ..., 1) of the tie
                    convex = concave = False
                prefix = Fraction(0)
                for i in perm[:-1]:  # the generators e_{perm[0]} + ... + e_{perm[r]}
                    prefix += h[pos[i]]
                    convex &= prefix <= 0
                    concave &= prefix >= 0
            if not (convex or concave):
                return "neither"
    return "convex" if convex else "concave" if concave else "neither"


def tie_promise(op: str, case: registry.TieCase) -> Promise:
    """The documented rule at one tie case (module docstring): the minimum-norm element per block, where every
    block is locally convex or concave."""
    inputs = f"the {len(case.values)} entries of the input tensor (shape {tuple(case.shape)})"
    mixed = len({w.direction for w in case.windows}) > 1  # the registry's pieces are then checked, not trusted
    if len(set(case.pieces)) == 1 and not mixed:
        return Promise(op, case.label, "differentiable", tuple(case.pieces[0]), inputs,
                       "one Bouligand piece: the gradient")
    if not case.windows:
        return Promise(op, case.label, "undecided", None, inputs,
                       "the case has no selection windows, so its convexity is not decided")
    value = [Fraction(0)] * len(case.values)
    shapes = []
    for outs, ins in blocks(case):
        pieces = sorted({tuple(p[i] for i in ins) for p in case.pieces})
        shape = "differentiable" if len(pieces) == 1 and not mixed else _block_shape(case, outs, ins, pieces)
        if shape in ("neither", "undecided"):
            why = ("neither locally convex nor concave" if shape == "neither" else
                   "its convexity is not decided (too many orderings of its tied entries, or windows of both "
                   "directions whose recorded Bouligand set differs from the ordering cones' pieces)")
            return Promise(op, case.label, shape, None, inputs,
                           f"the block of inputs {ins}: {why}, so the rule does not cover it")
        found = nearest_point(pieces)
        if found is None:
            return Promise(op, case.label, "undecided", None, inputs,
                           f"the minimum-norm QP of the block of inputs {ins} was not confirmed exactly")
        for i, v in zip(ins, found[0]):
            value[i] = v
        shapes.append(shape)
    kinds = set(shapes) - {"differentiable"}
    shape = kinds.pop() if len(kinds) == 1 else "differentiable" if not kinds else "convex and concave blocks"
    return Promise(op, case.label, shape, tuple(value), inputs,
                   "the minimum-norm element of the Clarke set" + (" (per block of outputs sharing no input)"
                                                                  if len(shapes) > 1 else ""))


# ----------------------------------------------------------------------------------------------------------
# per cell
# ----------------------------------------------------------------------------------------------------------
def promise(op: str, case: str, framework: str = "torch") -> Promise:
    """The promise at the registry's case ``case`` of ``op`` ("x=0", "x == y"), for ``framework``'s cells:
    PyTorch's documented rule, or for JAX its own documented convention where it has one (:data:`JAX_DOCUMENTED`)
    and else PyTorch's rule, labelled so. Unknown ops raise UnknownOpError; an unknown case, KeyError. Cached per
    registry version (a registration or unregistration recomputes)."""
    return _promise(op, case, framework, registry.version())


@functools.lru_cache(maxsize=None)
def _promise(op: str, case: str, framework: str, _version: int) -> Promise:
    entry = registry.get(op)
    if entry.kind == "elementwise":
        i = next((k for k in range(len(entry.breakpoints)) if entry.kink_label(k) == case), None)
        if i is None:
            raise KeyError(f"{op} has no kink {case!r}: its kinks are "
                           f"{[entry.kink_label(k) for k in range(len(entry.breakpoints))]}")
        p = elementwise_promise(entry, i)
    elif not hasattr(entry, "cases"):
        p = Promise(op, case, "undecided", None, "the op's inputs",
                    f"registry entries of kind {entry.kind!r} state no exact Clarke set the rule can be read from")
    else:
        c = next((c for c in entry.cases if c.label == case), None)
        if c is None:
            raise KeyError(f"{op} has no tie case {case!r}: its cases are {[c.label for c in entry.cases]}")
        p = tie_promise(op, c)
    if framework == "jax":
        values, where = JAX_DOCUMENTED.get(op, ({}, ""))
        if case in values:
            return Promise(op, case, p.shape, values[case], p.inputs, where, "JAX's documented convention")
        return Promise(op, case, p.shape, p.value, p.inputs, p.reason,
                       "PyTorch's documented rule (JAX documents no value here)")
    return p


def _rounded(v, dtype: str) -> Fraction:
    from nsverify.conventions.judge import rounded

    return rounded(v, dtype)


def follows_value(value: Sequence | None, derivative: Sequence, dtype: str) -> str:
    """Does ``derivative`` (floats or Fractions) equal the promised ``value``: "yes" (exactly), "rounding" (it
    equals the promised value rounded to ``dtype``, e.g. an even split 1/3), "no", or "not covered" (no
    promise)."""
    if value is None:
        return "not covered"
    got = [Fraction(x) for x in derivative]
    if len(got) != len(value):
        return "no"
    if all(not isinstance(v, mpmath.mpf) and Fraction(v) == g for v, g in zip(value, got)):
        return "yes"
    if all(_rounded(v, dtype) == g for v, g in zip(value, got)):
        return "rounding"
    return "no"


def follows(result, framework: str = "torch") -> str:
    """Whether a matrix cell (a :class:`~nsverify.conventions.matrix.Result`) follows its promise
    (:func:`follows_value`); "n/a" for a cell that measured nothing (error, crashed) or whose case the registry no
    longer has."""
    if result.error or result.rule in ("error", "crashed") or not result.derivative:
        return "n/a"
    try:
        p = promise(result.op, result.case, framework)
    except (KeyError, LookupError, ValueError, NsverifyError):
        return "n/a"
    import math

    if any(not math.isfinite(x) for x in result.derivative):
        return "no" if p.covered else "not covered"
    return follows_value(p.value, result.derivative, result.dtype)


def annotate(results: Sequence, framework: str = "torch") -> None:
    """Fill each cell's ``promised`` (the promise as text) and ``follows`` (:func:`follows`) in place."""
    for r in results:
        try:
            r.promised = promise(r.op, r.case, framework).text()
        except (KeyError, LookupError, ValueError, NsverifyError):
            r.promised = None
        r.follows = follows(r, framework)


def breaks(results: Sequence) -> list:
    """The cells whose derivative breaks their promise (``follows == "no"``), annotated first if needed."""
    return [r for r in results if getattr(r, "follows", None) == "no"]


def format_promises(results: Sequence, framework: str = "torch", width: int = 120) -> str:
    """The promise block of ``nsverify conventions``: how many cells follow the documented rule, and each case
    that breaks it, with its promise and the columns that break it."""
    import textwrap

    counts: dict = {}
    for r in results:
        counts[r.follows] = counts.get(r.follows, 0) + 1
    src = "JAX's documented convention where it has one, else PyTorch's" if framework == "jax" else "PyTorch's"
    head = (f"Promised ({src} documented rule: the gradient; at a locally convex/concave kink or tie the "
            "minimum-norm element of the Clarke set): " + ", ".join(f"{counts.get(k, 0)} {k}" for k in FOLLOWS))
    lines = [textwrap.fill(head, width)]
    by_case: dict = {}
    for r in breaks(results):
        by_case.setdefault((r.op, r.case), []).append(r)
    for (op, case), rs in by_case.items():
        rep = min(rs, key=lambda r: (r.dtype != "float32", r.mode != "eager"))
        got = ",".join(f"{x:.4g}" for x in rep.derivative)
        cols = sorted({f"{r.dtype}/{r.mode}" for r in rs})
        lines.append(textwrap.fill(f"breaks: {op} at {case}: promised {promise(op, case, framework).text()}, got "
                                   f"{got} ({rep.dtype}, {rep.mode}; {len(rs)} cells: {', '.join(cols)})", width,
                                   initial_indent="  ", subsequent_indent="    "))
    return "\n".join(lines)
