"""Separable blocks: enumerate groups of kink sites that share no input coordinates alone, combine as a product.

When f(w) = sum_b f_b(w restricted to S_b) near w, with disjoint coordinate sets S_b, the pieces of f adjacent to
w are the combinations of the pieces of the f_b (a combination's open cone is the product of the blocks' cones,
non-empty iff each is), and a combination's gradient is the sum of the blocks' gradients, which live on disjoint
coordinates.  So the Bouligand set is a product and the Clarke set, its convex hull, is the product of the
blocks' Clarke sets: ``t`` is a Clarke subgradient iff ``t`` restricted to every S_b lies in conv(block b's
gradients), and ``t`` equals the common value off the blocks.  Cost: the sum of the blocks' pieces, not their
product (f(w) = sum_i |w_i| at 0: 2k traces instead of 2^k).

**What is proved, and how.**  The enumerator never assumes the program is separable; it checks it, trace by
trace, and falls back to the plain enumeration on the first failed check:

1. A *greedy trace* takes, at every branch site, the first option whose cone stays non-empty (an exact witness):
   a *default* piece, with every site's option recorded by its key (ATen call number, location, op).
2. The coordinates of the default trace's cone rows are grouped (union-find): two sites whose rows share a
   coordinate are in one block.  One block: not separable, the plain enumeration runs.
3. Block b is enumerated alone: at a site of another block the default option is forced (its rows are not added:
   they constrain other coordinates).  Every trace of every block is checked:

   * every branch site's rows (all options) lie inside one block's coordinates, and a site of another block
     has the default trace's key and option labels;
   * every ATen op returns exactly the *values* it returned in the default trace (every entry, every op, in
     order -- a TorchDispatchMode records them);
   * every piece's gradient off S_b equals the default gradient there;
   * the block's enumeration is exact (every piece certified by an exact witness, no second-order site).

Why these checks prove the product (induction over the ops of a trace, for any combination P = (P_1, ..., P_m)
of block pieces): if the values of every earlier op are the same for all P, the next op runs on the same values;
a non-site op's output value is then the same, and its derivative is a fixed linear map of its inputs'
derivatives, so the part of every derivative on S_c depends on P_c alone.  At a branch site of block b the
rows lie in S_b (checked at every P_c through block c's enumeration, which is enough because that part depends
on P_c alone), so the options differ only on S_b and the site's values and index outputs depend only on P_b's
choice; the check that varying P_b alone never changes a value makes them the same for all P.  Hence the
program computes, for every combination, the same values, and a gradient whose part on S_b is block b's.

The certificate (:class:`~nsverify.oracle.certificates.BlockProduct`) lists every block's coordinates and
gradients with per-block convex weights (member) or a separating direction on one block (not member).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction

from nsverify.errors import InexactError
from nsverify.oracle.cones import ConeStats, feasible, holds, primitive
from nsverify.oracle.membership import distinct
from nsverify.oracle.numbers import Aff, Ival, is_exact
from nsverify.oracle.pieces import enumerate_pieces

F = Fraction


class NotSeparable(Exception):
    """A check of the block decomposition failed: the plain enumeration decides instead."""


@dataclass
class Block:
    coords: tuple  # coordinates of w in this block (sorted)
    vertices: list  # distinct gradients of the block's pieces, restricted to coords
    witnesses: list  # one exact direction (sparse dict on coords) per vertex, into a piece that has it
    pieces: int  # pieces of this block (traces)


@dataclass
class Blocks:
    """The Bouligand set of f at w as a product: ``fixed`` off the blocks, one vertex set per block."""

    n: int
    blocks: list  # Block
    fixed: dict  # {coordinate: exact gradient entry} for the coordinates in no block
    stats: ConeStats
    traces: int = 0
    seconds: float = 0.0
    notes: list = field(default_factory=list)

    @property
    def count(self) -> int:
        """How many distinct gradients the product has (the genuine pieces' gradients)."""
        c = 1
        for b in self.blocks:
            c *= len(b.vertices)
        return c

    def product(self, limit: int) -> list | None:
        """Every gradient of the product as dense tuples, or None when there are more than ``limit``."""
        if self.count > limit:
            return None
        out = [dict(self.fixed)]
        for b in self.blocks:
            out = [{**g, **dict(zip(b.coords, v))} for g in out for v in b.vertices]
        return [tuple(g.get(k, F(0)) for k in range(self.n)) for g in out]


def candidate_groups(sites) -> int:
    """How many coordinate-disjoint groups the AD trace's kink sites fall into (a cheap hint: at least two
    are needed before the block enumeration is tried)."""
    uf = UnionFind()
    for s in sites:
        keys = [k for g in s.slopes for k in g]
        if keys:
            uf.union_all(keys)
    return uf.groups()


class UnionFind:
    """Groups of keys (coordinates) joined by :meth:`union_all`: the separable blocks, and in
    :mod:`nsverify.oracle.park.cone` the cones on disjoint parameters."""

    def __init__(self):
        self.parent: dict = {}

    def find(self, k):
        p = self.parent.setdefault(k, k)
        while p != self.parent[p]:
            self.parent[p] = self.parent[self.parent[p]]
            p = self.parent[p]
        return p

    def union_all(self, keys):
        keys = list(keys)
        r = self.find(keys[0])
        for k in keys[1:]:
            q = self.find(k)
            if q != r:
                self.parent[q] = r

    def groups(self) -> int:
        return len({self.find(k) for k in self.parent})

    def classes(self) -> list:
        out: dict = {}
        for k in self.parent:
            out.setdefault(self.find(k), []).append(k)
        return sorted(tuple(sorted(v)) for v in out.values())


def _site_key(site):
    return (site.call, tuple(site.loc), site.op)


def _support(options) -> set:
    keys: set = set()
    for _label, rows in options:
        if rows is None:
            raise NotSeparable("a second-order branch site (no first-order cone)")
        for r in rows:
            keys.update(r)
    return keys


# ------------------------------------------------------------------------------------------------ value record
def _plain(x):
    if isinstance(x, Aff):
        x = x.v
    if isinstance(x, Ival):
        return ("ival", x.lo, x.hi)
    if type(x).__module__ == "numpy":
        return x.item()
    return x


def _values(out) -> tuple:
    """The exact values an op returned (every entry, derivatives dropped)."""
    from nsverify.oracle.tensor import ExactTensor

    if isinstance(out, ExactTensor):
        return ("T", tuple(out.arr.shape), tuple(_plain(x) for x in out.arr.reshape(-1).tolist()))
    if isinstance(out, (list, tuple)):
        return tuple(_values(o) for o in out)
    if isinstance(out, (bool, int, float, Fraction)):
        return out
    return None  # a plain tensor: computed from constants only


_WATCH: list = []


def _watch_class():
    """A TorchDispatchMode that compares every ATen op's exact output values with a reference trace's."""
    if not _WATCH:
        from torch.utils._python_dispatch import TorchDispatchMode

        class _Watch(TorchDispatchMode):
            def __init__(self, reference: list | None):
                super().__init__()
                self.reference = reference
                self.record: list = []  # (op, values) of every op (reference trace)
                self.pos = 0
                self.tainted: list = []  # integer/bool outputs whose values differ from the reference's

        def watch(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if self.tainted and _uses((args, kwargs), {id(t) for t in self.tainted}):
                raise NotSeparable("an index or comparison result that a block's piece changed is used later")
            out = func(*args, **kwargs)
            name, vals = func.__name__, _values(out)
            if self.reference is None:
                self.record.append((name, vals))
                return out
            if self.pos >= len(self.reference) or self.reference[self.pos][0] != name:
                raise NotSeparable("a piece of one block changed the ops the program runs")
            ref = self.reference[self.pos][1]
            self.pos += 1
            if ref != vals:
                parts = list(out) if isinstance(out, (list, tuple)) else [out]
                refs = list(ref) if isinstance(out, (list, tuple)) and isinstance(ref, tuple) else [ref]
                if len(parts) != len(refs):
                    raise NotSeparable("a piece of one block changed the values the program computes")
                for o, r in zip(parts, refs):
                    if _values(o) == r:
                        continue
                    if not _integral(o):
                        raise NotSeparable("a piece of one block changed the values the program computes")
                    self.tainted.append(o)  # indices or booleans: harmless unless an op reads them
            return out

        # set after the class exists: TorchDispatchMode wraps a __torch_dispatch__ defined in the class body
        # in a Dynamo guard whose first call imports torch._dynamo (seconds); nothing here is compiled
        _Watch.__torch_dispatch__ = watch
        _WATCH.append(_Watch)
    return _WATCH[0]


def _integral(out) -> bool:
    """An exact tensor of integers or booleans (indices, comparison results): no real value, no derivative."""
    from nsverify.oracle.tensor import ExactTensor

    return isinstance(out, ExactTensor) and out.arr.dtype != object


def _uses(x, ids: set) -> bool:
    if id(x) in ids:
        return True
    if isinstance(x, (list, tuple)):
        return any(_uses(y, ids) for y in x)
    if isinstance(x, dict):
        return any(_uses(y, ids) for y in x.values())
    return False


class _Checked:
    """An Evaluation whose pieces traces are checked against the default trace: the same ops, returning the
    same exact values (indices and booleans may differ only if no later op reads them)."""

    def __init__(self, ev, reference: list | None):
        self.ev = ev
        self.reference = reference
        self.last: list = []
        self.traces = 0

    def pieces_trace(self, decide):
        mode = _watch_class()(self.reference)
        with mode:
            r = self.ev.pieces_trace(decide)
        self.traces += 1
        if self.reference is not None and mode.pos != len(self.reference):
            raise NotSeparable("a piece of one block changed the ops the program runs")
        self.last = mode.record
        return r

    def forward(self):
        return self.ev.forward()


# --------------------------------------------------------------------------------------------- the decomposition
def decompose(ev, *, limit: int, time_limit: float | None, t0: float, tracker=None) -> Blocks | str:
    """The product form of the pieces of ``ev``'s program at its point, or the reason why not (a string): the
    program is not proved separable into two or more blocks, or a block is not enumerated exactly."""
    try:
        return _decompose(ev, limit=limit, time_limit=time_limit, t0=t0, tracker=tracker)
    except NotSeparable as e:
        return str(e)
    except InexactError as e:
        return f"a value is not exact: {e}"


def _decompose(ev, *, limit: int, time_limit: float | None, t0: float, tracker) -> Blocks:
    import time

    if time_limit is not None and time.perf_counter() - t0 > time_limit:
        raise NotSeparable("the time limit ran out before the blocks were tried")
    stats = ConeStats()
    checked = _Checked(ev, None)
    default: dict = {}  # site key -> (labels, option taken)
    rows_of: list = []  # the default trace's sites' row supports
    state = {"rows": [], "witness": None}

    def greedy(site, options):
        options = [(lbl, None if rows is None else [primitive(r) for r in rows]) for lbl, rows in options]
        rows_of.append(_support(options))
        take = None
        for j, (_lbl, rows) in enumerate(options):
            allrows = state["rows"] + rows
            if holds(allrows, state["witness"]):
                take = j
                break
            res, cert = feasible(allrows, stats)
            if res == "open":
                state["witness"], take = cert, j
                break
            if res is None:
                raise NotSeparable("a cone that the LP could not decide exactly")
        if take is None:
            raise NotSeparable("no option of a branch site has a non-empty cone")
        state["rows"] = state["rows"] + options[take][1]
        default[_site_key(site)] = (site.labels, take)
        return take

    base = checked.pieces_trace(greedy)
    uf = UnionFind()
    for keys in rows_of:
        if keys:
            uf.union_all(keys)
    classes = uf.classes()
    if len(classes) < 2:
        raise NotSeparable("the kink sites' cone rows connect every coordinate: one block")
    block_of = {k: b for b, ks in enumerate(classes) for k in ks}
    reference = checked.last
    blocks = []
    traces = 1
    for b, coords in enumerate(classes):
        cset = set(coords)

        def forced(site, options, b=b):
            keys = _support(options)
            owners = {block_of.get(k) for k in keys}
            if len(owners) != 1 or None in owners:
                raise NotSeparable("a branch site's cone rows span two blocks or leave the blocks")
            (owner,) = owners
            if owner == b:
                return None
            got = default.get(_site_key(site))
            if got is None or got[0] != tuple(lbl for lbl, _ in options):
                raise NotSeparable("a site of another block that the default piece did not have")
            return got[1]

        run = _Checked(ev, reference)
        en = enumerate_pieces(run, limit=limit, on_limit="unknown", time_limit=time_limit, forced=forced,
                              tracker=tracker, t0=t0)
        traces += run.traces
        for k, v in vars(en.stats).items():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                setattr(stats, k, getattr(stats, k) + v)
        if not en.exact:
            raise NotSeparable(en.incomplete or f"block {b} has pieces that are not certified exactly")
        for leaf in en.leaves:
            if any(leaf.gradient[k] != base.gradient[k] for k in range(ev.n) if k not in cset):
                raise NotSeparable(f"a piece of block {b} changed the gradient off the block")
        verts, wits = [], []
        for leaf in en.leaves:
            v = tuple(leaf.gradient[k] for k in coords)
            if v not in verts:
                verts.append(v)
                wits.append(dict(leaf.witness or {}))
        if distinct(verts) != verts or not all(is_exact(x) for v in verts for x in v):
            raise NotSeparable("interval gradients (smooth parts): the plain path decides")
        blocks.append(Block(tuple(coords), verts, wits, len(en.leaves)))
    fixed = {k: base.gradient[k] for k in range(ev.n) if k not in block_of}
    if not all(is_exact(x) for x in fixed.values()):
        raise NotSeparable("interval gradients (smooth parts): the plain path decides")
    return Blocks(ev.n, blocks, fixed, stats, traces, time.perf_counter() - t0)


def block_decision(t: tuple, vertices: list):
    """``(weights, h)`` for one block: exact convex weights over ``vertices`` reproducing ``t`` (member), else a
    rational direction ``h`` with <h, t> > <h, v> for every vertex (not member); (None, None) if neither is found.

    One-coordinate blocks (the common case: one kink per coordinate) are decided on the interval directly, with
    no LP; larger blocks go through :func:`~nsverify.oracle.membership.member_weights` and
    :func:`~nsverify.oracle.membership.separating_direction`."""
    from nsverify.oracle.membership import member_weights, separating_direction

    if len(t) == 1:
        xs = [v[0] for v in vertices]
        lo, hi = min(xs), max(xs)
        x = t[0]
        if x in xs:
            return {xs.index(x): F(1)}, None
        if lo < x < hi:
            return {xs.index(lo): (hi - x) / (hi - lo), xs.index(hi): (x - lo) / (hi - lo)}, None
        return None, (F(1) if x > hi else F(-1),)
    lam = member_weights(t, vertices)
    if lam is not None:
        return lam, None
    h = separating_direction(t, vertices)
    return None, None if h is None else tuple(h)
