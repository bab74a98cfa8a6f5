"""Rigorous float enclosures of a whole program, on whole tensors: the oracle's route to real models at full width
(float32, default initialisation, BatchNorm's default eps), where exact rational arithmetic through the whole
network does not scale.

:func:`enclose` runs ``fn`` once at ``w`` under a :class:`~torch.utils._python_dispatch.TorchDispatchMode`. Every
ATen op that reads a value depending on w is evaluated in float64 by this module's own rule, which returns a
midpoint tensor (the value the program continues with) and a radius tensor ``rad``: the exact value of the entry,
computed in exact real arithmetic from the exact point (w's floats read exactly; constants as PyTorch computed
them, as everywhere in the oracle), lies in ``[mid - rad, mid + rad]``.  The bounds are a-posteriori error bounds
of round-to-nearest float64 arithmetic (Higham, *Accuracy and Stability of Numerical Algorithms*, 2nd ed., Sec.
3.1, the constant gamma_n = n u / (1 - n u) for a sum of n products in any order, with or without FMA; u = 2^-53),
every radius computed from non-negative terms and inflated for its own rounding.  Underflow is excluded, not
bounded: a non-zero magnitude below 2^-400 anywhere stops the run (then every product of two non-zero values is a
normal float64 and the relative bounds hold).  Square roots and divisions are correctly rounded (IEEE 754);
``exp`` is assumed accurate to 2^-45 relative (a few hundred ulps of margin over the C library's; tested against
mpmath in tests/test_enclosure.py).

Two facts are exact, not just enclosed:

* **exact zeros.** An entry with ``rad == 0`` equals its midpoint exactly.  Zeros stay exact through the rules: a
  product with an exact 0 factor is 0 with radius 0, a sum of exact zeros too.  A dead unit or channel (its weights
  0, its BatchNorm shift 0) therefore reaches its activation as an exact 0 whatever the irrational
  ``1/sqrt(var + eps)`` it was multiplied by: an exact kink touch.
* **provenance.** ``pid``: equal ids mean *identical functions of w near the point* (not merely equal values).
  Constants get one id per value (0 is id 0, also a convolution's zero padding); each coordinate of w its own id;
  an op's output entries get equal ids exactly when the op applies the same function to entries with equal ids --
  a convolution's output channel c at two positions whose input windows hold equal ids (weights are shared over
  positions and samples), a per-channel map (BatchNorm) within one channel, an elementwise map, a sum of two
  entries with equal id pairs, a max pool over windows of equal ids.  Ids are exact (rows compared by
  ``torch.unique``, no hashing).  A tie between entries of one id is a tie between identical functions: it persists
  on a whole neighbourhood and creates no kink.

Ops outside the table that read a w-dependent value stop the run (:class:`Unsupported`), except functions that are
analytic everywhere (``log_softmax``, ``nll_loss``, ...), whose outputs get an infinite radius: nothing after them
may branch.  The record of each ReLU call (kink touches, undecided entries) and max pool (ties) is what
:mod:`nsverify.oracle.park.enclosed` decides from.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes
from torch.utils._pytree import tree_leaves

from nsverify.oracle import ddarith as dd
from nsverify.oracle.context import poll_deadline
from nsverify.oracle.prepass import _in_custom_function

aten = torch.ops.aten
U = 2.0 ** -53
#: non-zero magnitudes below this stop the run (so no product or sum underflows)
TINY = 2.0 ** -400
#: assumed relative accuracy of torch's float64 exp on CPU (tested against mpmath)
LIBM = 2.0 ** -45
INF = math.inf
#: the bits below an activation tensor's largest entry that the error-free products keep, per attempt (what is
#: below is a radius): 104 first (double-double's reach, enough for eval-mode networks), then 157 (triple-double:
#: training-mode ResNet-18 at full width, whose batch statistics multiply the radius by about 3 per BatchNorm,
#: left 40 ReLU entries of its last block undecided at 104)
PRECISION_BITS = (104, 157)


class Unsupported(Exception):
    """The program is outside what the enclosures can evaluate (an op, a value, a structure): the reason."""


def gamma(n: int) -> float:
    """Higham's gamma_n = n u / (1 - n u), inflated slightly (it is itself a float)."""
    if n * U >= 0.5:
        raise Unsupported(f"a sum of {n} products is too long for the a-posteriori bound")
    return n * U / (1 - n * U) * (1 + 2.0 ** -40)


def _inflate(r: torch.Tensor, n: int = 1) -> torch.Tensor:
    """A radius computed in round-to-nearest from non-negative terms (sums of up to n terms), made an upper
    bound of the exact one; NaN (0 * inf) becomes inf."""
    r = r * (1 + 4 * gamma(n + 2) + 2.0 ** -50)
    return torch.nan_to_num(r, nan=INF, posinf=INF)


class Lazy:
    """Provenance ids computed only when a max pool asks for them (most networks have one pool, early)."""

    __slots__ = ("fn",)

    def __init__(self, fn):
        self.fn = fn


@dataclass
class Rec:
    """What the engine knows about one w-dependent tensor besides its midpoint."""

    mid: torch.Tensor  # float64 midpoints (the tensor the program sees is a carrier in its own dtype)
    rad: torch.Tensor | None  # None: exact (radius 0 everywhere)
    lo: torch.Tensor | None = None  # double-double low parts: the value's centre is mid + lo (+ tail), exactly
    tail: torch.Tensor | None = None  # a third part (triple-double, ~2^-106 of mid): deep networks in training mode
    pid: torch.Tensor | None = None  # float64 provenance ids (exact integers); None: every entry its own function
    zero_ad: torch.Tensor | None = None  # bool: the entry is 0 with AD derivative 0 in w (ReLU at/below its kink)
    woff: torch.Tensor | None = None  # int64 coordinates in w, for a pure view of w (a parameter)
    bias: dict | None = None  # see :func:`_with_bias`
    orig: frozenset | None = None  # the parameters (chunks of w, by number) the value depends on
    tan: tuple | None = None  # (mid, rad): the tangent along the Lemma 2 direction (see :func:`_identity_pair`)
    coord: tuple | None = None  # (j, slope): the value is slope * w[j] + a constant (one entry)


@dataclass
class ReluCall:
    """One ReLU call on a w-dependent value: its input's exact zeros (kink touches) and its record."""

    call: int
    shape: tuple
    touches: torch.Tensor  # bool, the input's exact zeros
    undecided: int  # entries whose enclosure contains 0 but is not the point 0
    bias: dict | None  # the input's own additive parameters (see _with_bias), or None
    input_id: int
    output_id: int = 0
    orig: frozenset = frozenset()  # the parameter chunks its input depends on
    pair: int | None = None  # the other ReLU call of an identity pair relu(y) - relu(-y) (see _identity_pair)
    float_only: int = 0  # entries that are 0 in the program's dtype while their exact value is not (decided)


@dataclass
class PoolCall:
    call: int
    orig: frozenset
    windows: int
    tied: int  # windows with two or more candidates for the maximum
    identical: int  # of those: all candidates one function (equal ids)
    zero_ad: int  # of those: all candidates ReLU outputs at or below the kink (AD derivative 0)
    mixed: int  # of those: different functions that may tie: not decided by enclosures
    first_mixed: tuple | None = None
    float_only: int = 0  # windows whose maximum ties in the program's dtype while one exact entry is the largest


@dataclass
class Enclosure:
    """The result of :func:`enclose`."""

    relus: list = field(default_factory=list)
    pools: list = field(default_factory=list)
    ops: int = 0
    dependent_ops: int = 0
    uses: torch.Tensor | None = None  # per coordinate of w: how many non-view ops read it
    consumers: dict = field(default_factory=dict)  # id(tensor) -> number of ops that read it
    analytic: set = field(default_factory=set)  # analytic ops evaluated without an enclosure (radius inf)
    max_rel_radius: float = 0.0  # the widest relative radius met (a health figure)
    pairs: list = field(default_factory=list)  # identity pairs: (relu call A, relu call B, id of z, touches)
    neg_of: dict = field(default_factory=dict)  # id(-y) -> id(y)
    chunks: list = field(default_factory=list)  # (start, end) of each parameter chunk of w
    tangent_lost: str | None = None  # an op that a tangent reached and has no tangent rule
    output_tan: tuple | None = None  # the program output's tangent (mid, rad), when one was seeded


# ------------------------------------------------------------------------------------------------ the rules
def _bounds(m, r):
    """Outward [lo, hi] of an interval (exact where r == 0)."""
    if r is None:
        return m, m
    lo = torch.where(r == 0, m, torch.nextafter(m - r, torch.full_like(m, -INF)))
    hi = torch.where(r == 0, m, torch.nextafter(m + r, torch.full_like(m, INF)))
    return lo, hi


def _dd_bounds(hi, lo, r):
    """Outward float64 bounds [a, b] of every value within r of hi + lo (exact where the value is an exact 0 or
    an exact float64 with no low part and no radius)."""
    rr = torch.zeros_like(hi) if r is None else r
    slack = 4 * U * (hi.abs() + lo.abs() + rr)
    a = hi + (lo - rr) - slack
    b = hi + (lo + rr) + slack
    point = (lo == 0) & (rr == 0)
    return torch.where(point, hi, a), torch.where(point, hi, b)


def _from_bounds(lo, hi):
    """Midpoint and radius enclosing [lo, hi] (a point stays exact)."""
    mid = lo / 2 + hi / 2
    mid = torch.where(lo == hi, lo, mid)
    rad = torch.maximum(hi - mid, mid - lo)
    rad = torch.where(lo == hi, torch.zeros_like(rad), torch.nextafter(rad, torch.full_like(rad, INF)))
    return mid, _none_if_zero(rad)


def _none_if_zero(r):
    return None if r is None or not bool(r.any()) else r


def _fold(rad, *parts):
    """``rad`` widened by the parts of a centre that a rule does not carry (a double-double's low part, a
    triple-double's tail): rad + sum |part|, rounded up; ``rad`` itself when every part is absent or 0."""
    terms = [p.abs() for p in parts if p is not None and bool(p.any())]
    if not terms:
        return rad
    total = sum(terms) if rad is None else rad + sum(terms)
    return _none_if_zero(total * (1 + 4 * U))


def _abs_plus(m, r):
    return m.abs() if r is None else m.abs() + r


def add_i(am, ar, bm, br, sign: float = 1.0):
    m = am + bm if sign == 1.0 else am - bm
    terms = [2 * U * m.abs()]
    if ar is not None:
        terms.append(ar)
    if br is not None:
        terms.append(br)
    r = terms[0]
    for t in terms[1:]:
        r = r + t
    return m, _none_if_zero(_inflate(r, 3))


def mul_i(am, ar, bm, br):
    m = am * bm
    r = 2 * U * m.abs()
    if br is not None:
        r = r + am.abs() * br
    if ar is not None:
        r = r + ar * (bm.abs() + (br if br is not None else 0))
    r = _inflate(r, 4)
    exact0 = ((am == 0) & (ar == 0 if ar is not None else True)) | ((bm == 0) & (br == 0 if br is not None else True))
    if isinstance(exact0, torch.Tensor):
        r = torch.where(exact0, torch.zeros_like(r), r)
    return m, _none_if_zero(r)


def div_i(am, ar, bm, br):
    """a / b for b bounded away from 0 (else :class:`Unsupported`)."""
    alo, ahi = _bounds(am, ar)
    blo, bhi = _bounds(bm, br)
    if bool(((blo <= 0) & (bhi >= 0)).any()):
        raise Unsupported("a divisor's enclosure contains 0")
    cands = [alo / blo, alo / bhi, ahi / blo, ahi / bhi]
    lo = torch.minimum(torch.minimum(cands[0], cands[1]), torch.minimum(cands[2], cands[3]))
    hi = torch.maximum(torch.maximum(cands[0], cands[1]), torch.maximum(cands[2], cands[3]))
    point = (alo == ahi) & (blo == bhi) & (am == 0)  # 0 / b is exactly 0
    lo = torch.where(point, lo, torch.nextafter(lo, torch.full_like(lo, -INF)))
    hi = torch.where(point, hi, torch.nextafter(hi, torch.full_like(hi, INF)))
    return _from_bounds(lo, hi)


def sqrt_i(m, r):
    lo, hi = _bounds(m, r)
    if bool((lo <= 0).any()):
        raise Unsupported("a square root's argument is not bounded away from 0")
    return _from_bounds(torch.nextafter(lo.sqrt(), torch.zeros_like(lo)),
                        torch.nextafter(hi.sqrt(), torch.full_like(hi, INF)))


def exp_i(m, r):
    lo, hi = _bounds(m, r)
    elo, ehi = lo.exp(), hi.exp()
    lo2 = torch.where(lo == -INF, torch.zeros_like(elo), elo * (1 - LIBM))
    hi2 = torch.where(hi == -INF, torch.zeros_like(ehi), ehi * (1 + LIBM))
    return _from_bounds(lo2, hi2)


def square_i(m, r):
    lo, hi = _bounds(m, r)
    a, b = lo.abs(), hi.abs()
    big = torch.maximum(a, b)
    small = torch.where((lo <= 0) & (hi >= 0), torch.zeros_like(a), torch.minimum(a, b))
    slo, shi = small * small, big * big
    exact = (lo == hi) & (lo == 0)
    return _from_bounds(torch.where(exact, slo, slo * (1 - 4 * U)), torch.where(exact, shi, shi * (1 + 4 * U)))


def sum_i(m, r, dims, keepdim=False):
    """A sum over ``dims`` (n terms each)."""
    n = 1
    for d in dims:
        n *= m.shape[d]
    s = m.sum(dims, keepdim=keepdim)
    rr = gamma(n) * m.abs().sum(dims, keepdim=keepdim)
    if r is not None:
        rr = rr + r.sum(dims, keepdim=keepdim)
    return s, _none_if_zero(_inflate(rr, n))


def mean_i(m, r, dims, keepdim=False):
    n = 1
    for d in dims:
        n *= m.shape[d]
    s, sr = sum_i(m, r, dims, keepdim)
    return div_i(s, sr, torch.full_like(s, float(n)), None)


# ----------------------------------------------------------------------------------------- provenance ids
class Ids:
    """Fresh provenance ids; constants by value (0.0 -> 0)."""

    def __init__(self):
        self.next = 1
        self.by_value: dict = {0.0: 0}

    def fresh(self, count: int) -> float:
        base = self.next
        self.next += int(count)
        if self.next >= 2 ** 52:
            raise Unsupported("too many provenance ids")
        return float(base)

    def const(self, t: torch.Tensor) -> torch.Tensor:
        v = t.detach().double()
        vals, inv = torch.unique(v.reshape(-1), return_inverse=True)
        ids = []
        for x in vals.tolist():
            x = 0.0 if x == 0 else x
            if x not in self.by_value:
                self.by_value[x] = self.fresh(1)
            ids.append(self.by_value[x])
        return torch.tensor(ids, dtype=torch.float64)[inv].reshape(v.shape)

    def rows(self, rows: torch.Tensor) -> torch.Tensor:
        """Equal rows, equal fresh ids (a row: the ids an entry is a function of, and which function).

        Exact: rows are grouped by two 64-bit linear hashes, then every row is compared entry by entry with its
        group's first row; only if some group holds different rows (a hash collision) are they grouped by
        sorting the rows themselves."""
        n = rows.shape[0]
        if n == 0:
            return rows.new_zeros(0)
        r = rows.long()
        g = torch.Generator().manual_seed(rows.shape[1])
        coef = torch.randint(1, 2 ** 31, (rows.shape[1], 1), generator=g, dtype=torch.int64)
        h = ((r.unsqueeze(-1) * coef).sum(dim=1) if rows.shape[1] <= 8 else _int_matmul(r, coef)).reshape(-1)
        poll_deadline()
        _u, inv = torch.unique(h, return_inverse=True)
        first = torch.full((int(inv.max()) + 1,), n, dtype=torch.int64).scatter_reduce(
            0, inv, torch.arange(n), reduce="amin")
        if not bool((rows == rows[first[inv]]).all()):
            _u, inv = torch.unique(rows, dim=0, return_inverse=True)
        return inv.double() + self.fresh(int(inv.max()) + 1)

    def relabel(self, *cols: torch.Tensor) -> torch.Tensor:
        shape = torch.broadcast_shapes(*(c.shape for c in cols))
        if len(cols) == 1:
            _u, inv = torch.unique(cols[0].reshape(-1), return_inverse=True)
            return (inv.double() + self.fresh(int(inv.max()) + 1 if inv.numel() else 0)).reshape(shape)
        rows = torch.stack([c.expand(shape).reshape(-1) for c in cols], dim=1)
        return self.rows(rows).reshape(shape)


def _int_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a @ b in int64 (wrapping), in chunks of columns (torch has no BLAS for integers)."""
    out = torch.zeros((a.shape[0], b.shape[1]), dtype=torch.int64)
    for k in range(0, a.shape[1], 256):
        poll_deadline()
        out += (a[:, k:k + 256].unsqueeze(-1) * b[k:k + 256]).sum(dim=1)
    return out


def _channel_index(shape, dim: int = 1) -> torch.Tensor:
    idx = torch.arange(shape[dim], dtype=torch.float64)
    view = [1] * len(shape)
    view[dim] = shape[dim]
    return idx.reshape(view).expand(shape)


# ----------------------------------------------------------------------------------------------- the mode
_VIEWS = {
    aten.view.default, aten._unsafe_view.default, aten.reshape.default, aten.permute.default,
    aten.transpose.int, aten.t.default, aten.expand.default, aten.unsqueeze.default, aten.squeeze.dim,
    aten.squeeze.default, aten.squeeze.dims, aten.clone.default, aten.contiguous.default, aten.select.int,
    aten.slice.Tensor, aten.alias.default, aten.flatten.using_ints, aten.unflatten.int,
    aten._to_copy.default, aten.lift_fresh.default,
}
#: views that may keep the last dimension (a bias along it stays the entries' own additive term)
_LEADING_VIEWS = {aten.view.default, aten._unsafe_view.default, aten.reshape.default, aten.unsqueeze.default,
                  aten.flatten.using_ints, aten.unflatten.int}
_SPLITS = {aten.split_with_sizes.default, aten.split.Tensor, aten.unbind.int, aten.chunk.default}
#: analytic everywhere: evaluated in float64 with an infinite radius (nothing after them may branch)
_ANALYTIC = {
    aten.mse_loss.default, aten.tanh.default,
    aten.sigmoid.default, aten.nll_loss2d_forward.default, aten.binary_cross_entropy_with_logits.default,
    aten.exp.default, aten.gelu.default, aten.silu.default, aten.softplus.default,
}
#: ops that create tensors from nothing (constants)
#: the nonsmooth ops of the table: their AD is PyTorch's rule only outside a custom autograd.Function
_KINKED = {aten.relu.default, aten.relu_.default, aten.threshold.default, aten.max_pool2d_with_indices.default}


class _Mode(TorchDispatchMode):
    def __init__(self, engine):
        super().__init__()
        self.e = engine

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return self.e.dispatch(func, args, kwargs or {})


class Engine:
    def __init__(self, w: torch.Tensor, target_bits: int = PRECISION_BITS[0]):
        self.w = w
        self.target_bits = target_bits  # the activations' bits kept by the error-free products
        self.recs: dict[int, tuple] = {}  # id(tensor) -> (tensor, Rec): strong references
        self.ids = Ids()
        self.res = Enclosure(uses=torch.zeros(w.numel(), dtype=torch.int32))
        self.calls = 0
        #: triple-double centres with error-free products (deep networks); False: plain float64 enclosures
        self.precise = True

    # -- records
    def rec(self, t) -> Rec | None:
        got = self.recs.get(id(t)) if isinstance(t, torch.Tensor) else None
        return None if got is None or got[0] is not t else got[1]

    def put(self, carrier: torch.Tensor, r: Rec) -> torch.Tensor:
        """Register ``carrier`` (the tensor the program continues with, in its dtype) with its record."""
        poll_deadline()
        self.recs[id(carrier)] = (carrier, r)
        m = r.mid
        if m.is_floating_point() and m.numel():
            fin = torch.isfinite(m)
            if not bool(fin.all()):  # (one pass when all are finite)
                exact_inf = torch.isinf(m) & ((r.rad == 0) if r.rad is not None else torch.ones_like(fin))
                if not bool((fin | exact_inf).all()):
                    raise Unsupported("a value overflows (inf or NaN) in float64")
            a = m.abs()
            if bool(((a < TINY) & (a > 0)).any()):
                raise Unsupported("a value's magnitude is below 2^-400 (underflow is not bounded)")
            if r.rad is not None:
                r.rad = torch.where((r.rad > 0) & (r.rad < TINY), torch.full_like(r.rad, TINY), r.rad)
        return carrier

    def emit(self, mid: torch.Tensor, dtype, **fields) -> torch.Tensor:
        """A new w-dependent tensor: its carrier (``mid`` rounded to the program's ``dtype``) and record."""
        carrier = mid.to(dtype) if dtype != torch.float64 else mid.clone()
        return self.put(carrier, Rec(mid=mid, **fields))

    def interval(self, t):
        """(mid, rad, pid) of a tensor argument (a constant: exact, ids by value), in float64 (the low part and the
        tail folded into the radius)."""
        r = self.rec(t)
        if r is not None:
            return r.mid, _fold(r.rad, r.lo, r.tail), r.pid
        m = t.detach()
        if m.is_floating_point() and m.dtype != torch.float64:
            m = m.double()
        return m, None, None

    def dd(self, t):
        """(hi, lo, rad) of a tensor argument: the value lies within rad of hi + lo (rad None: exactly); a
        triple-double's tail is folded into the radius (:meth:`td` keeps it)."""
        hi, lo, tail, rad = self.td(t)
        return hi, lo, _fold(rad, tail)

    def td(self, t):
        """(hi, lo, tail, rad) of a tensor argument: the value lies within rad of hi + lo + tail (tail None: 0;
        rad None: exactly)."""
        r = self.rec(t)
        if r is not None:
            return r.mid, (r.lo if r.lo is not None else torch.zeros_like(r.mid)), r.tail, r.rad
        m = t.detach()
        m = m.double() if m.is_floating_point() and m.dtype != torch.float64 else m
        return m, torch.zeros_like(m), None, None

    def triple(self, t):
        """((hi, lo, tail), rad) of a tensor argument, the tail a tensor of zeros where there is none: the
        operand of the triple-double rules (:func:`~nsverify.oracle.ddarith.td_add`, ``td_mul``)."""
        hi, lo, tail, rad = self.td(t)
        return (hi, lo, torch.zeros_like(hi) if tail is None else tail), rad

    def pid(self, t) -> torch.Tensor | None:
        r = self.rec(t)
        if r is not None:
            if isinstance(r.pid, Lazy):
                r.pid = r.pid.fn()
            return r.pid
        return self.ids.const(t)

    def dep(self, t) -> bool:
        return self.rec(t) is not None

    # -- dispatch
    def dispatch(self, func, args, kwargs):
        poll_deadline()
        self.calls += 1
        self.res.ops += 1
        leaves = [x for x in tree_leaves((args, kwargs)) if isinstance(x, torch.Tensor)]
        for x in leaves:
            if self.dep(x):
                self.res.consumers[id(x)] = self.res.consumers.get(id(x), 0) + 1
        if not any(self.dep(x) for x in leaves):
            with _disable_current_modes():
                return func(*args, **kwargs)  # a constant, as PyTorch computes it
        if torch.Tag.nondeterministic_seeded in func.tags:
            raise Unsupported(f"{func} draws random numbers")
        if not torch.is_grad_enabled():
            raise Unsupported(f"{func} runs with grad mode off on a value that depends on w")
        self.res.dependent_ops += 1
        for x in leaves:
            r = self.rec(x)
            if r is not None and r.woff is not None and func not in _VIEWS and func not in _SPLITS:
                self.res.uses.index_add_(0, r.woff.reshape(-1), torch.ones(r.woff.numel(), dtype=torch.int32))
        if func in _KINKED and _in_custom_function():
            raise Unsupported(f"{func} runs inside a custom autograd.Function (its backward is not PyTorch's rule)")
        origins = frozenset().union(*(self.rec(x).orig or frozenset() for x in leaves if self.dep(x)))
        tangents = [x for x in leaves if self.dep(x) and self.rec(x).tan is not None]
        with _disable_current_modes():
            out = self._run(func, args, kwargs)
            for o in tree_leaves(out):
                r = self.rec(o)
                if r is not None and r.orig is None:
                    r.orig = origins
            if tangents:
                _tangent(self, func, args, kwargs, out)
        return out

    def _run(self, func, args, kwargs):
        rule = _RULES.get(func)
        if rule is not None:
            return rule(self, *args, **kwargs)
        if func in _VIEWS:
            return self._view(func, args, kwargs)
        if func in _SPLITS:
            return self._split(func, args, kwargs)
        if func in _ANALYTIC:
            out = func(*args, **kwargs)  # on the carriers, in the program's dtype
            self.res.analytic.add(str(func))
            for o in tree_leaves(out):
                if isinstance(o, torch.Tensor) and o.is_floating_point():
                    m = o.detach().double()
                    self.put(o, Rec(mid=m, rad=torch.full_like(m, INF), pid=None))
            return out
        raise Unsupported(f"{func} is not in the enclosure table")

    def _view(self, func, args, kwargs):
        t = args[0]
        rec = self.rec(t)
        copy = func is aten._to_copy.default
        out = func(t, *args[1:], **kwargs)  # the carrier (a _to_copy may change its dtype)

        def same(x):
            if x is None:
                return None
            return x.clone() if copy else func(x, *args[1:], **kwargs)

        lazy_pid = Lazy(lambda: same(self.pid(t))) if isinstance(rec.pid, Lazy) else same(rec.pid)
        new = Rec(mid=same(rec.mid), rad=same(rec.rad), lo=same(rec.lo), tail=same(rec.tail), pid=lazy_pid,
                  zero_ad=same(rec.zero_ad), woff=same(rec.woff))
        if new.woff is not None and new.woff.numel() == 1:
            new.coord = (int(new.woff.reshape(-1)[0]), 1.0)
        elif rec.coord is not None and out.numel() == 1:
            new.coord = rec.coord
        if rec.bias is not None and func in (aten.clone.default, aten.contiguous.default, aten.alias.default,
                                             aten._to_copy.default):
            new.bias = dict(rec.bias, chain=rec.bias["chain"] + [id(out)])
        elif (rec.bias is not None and func in _LEADING_VIEWS and rec.bias["dim"] == t.dim() - 1 and out.dim() >= 1
              and out.shape[-1] == t.shape[-1]):  # a reshape of the leading dims: the bias stays on the last one
            new.bias = dict(rec.bias, dim=out.dim() - 1, chain=rec.bias["chain"] + [id(out)])
        return self.put(out, new)

    def _split(self, func, args, kwargs):
        t = args[0]
        rec = self.rec(t)
        outs = func(t, *args[1:], **kwargs)
        parts = {k: (func(v, *args[1:], **kwargs) if v is not None else [None] * len(outs))
                 for k, v in (("mid", rec.mid), ("rad", rec.rad), ("lo", rec.lo), ("tail", rec.tail),
                              ("pid", self.pid(t)),
                              ("zero_ad", rec.zero_ad), ("woff", rec.woff))}
        root = rec.orig == frozenset({"w"})
        if root:
            starts = 0
            for o in outs:
                self.res.chunks.append((starts, starts + o.numel()))
                starts += o.numel()
        for i, o in enumerate(outs):
            self.put(o, Rec(mid=parts["mid"][i], rad=parts["rad"][i], lo=parts["lo"][i], tail=parts["tail"][i],
                            pid=parts["pid"][i],
                            zero_ad=parts["zero_ad"][i], woff=parts["woff"][i],
                            orig=frozenset({i}) if root else rec.orig))
        return outs


def _with_bias(engine, out, bias_t, dim: int, sign: float = 1.0):
    """``out = g + sign * bias`` broadcast along ``dim``, with ``bias`` a pure view of w: its coordinates, for the
    direction of Park's cone (d out / d bias_c = sign on channel c, structurally)."""
    r = engine.rec(bias_t)
    if r is None or r.woff is None:
        return None
    return {"coords": r.woff.reshape(-1).clone(), "dim": dim, "sign": sign, "chain": [id(out)]}


# ------------------------------------------------------------------------------------------------ op rules
def _conv(e: Engine, x, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    if transposed:
        raise Unsupported("a transposed convolution")
    xm, xr, _ = e.interval(x)
    wm, wr, _ = e.interval(weight)
    bm, br, _ = e.interval(bias) if bias is not None else (None, None, None)
    nd = xm.dim() - 2
    conv = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[nd]
    kw = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
    n = (wm.shape[1] * math.prod(wm.shape[2:])) + (1 if bias is not None else 0)
    if e.precise and wr is None and br is None:
        hi, lo, tail, r = _exact_product(e, lambda a, b: conv(a, b, None, **kw), x, wm, tuple(range(1, wm.dim())),
                                         n, bm.reshape((1, -1) + (1,) * nd) if bm is not None else None)
        pid = _conv_pid(e, x, weight, hi.shape, stride, padding, dilation, groups, nd)
        out = e.emit(hi, x.dtype, rad=r, lo=lo, tail=tail, pid=pid)
        if bias is not None:
            e.rec(out).bias = _with_bias(e, out, bias, 1)
        return out
    mid = conv(xm, wm, bm, **kw)
    poll_deadline()
    wa = wm.abs()
    mag = conv(xm.abs(), wa, None, **kw)
    poll_deadline()
    if bm is not None:
        mag = mag + bm.abs().reshape((1, -1) + (1,) * nd)
    r = gamma(n) * mag
    if xr is not None:
        r = r + conv(xr, wa if wr is None else wa + wr, None, **kw)
    if wr is not None:
        r = r + conv(xm.abs(), wr, None, **kw)
    if br is not None:
        r = r + br.reshape((1, -1) + (1,) * nd)
    r = _none_if_zero(_inflate(r, n))
    poll_deadline()
    out = e.emit(mid, x.dtype, rad=r, pid=_conv_pid(e, x, weight, mid.shape, stride, padding, dilation, groups, nd))
    if bias is not None:
        e.rec(out).bias = _with_bias(e, out, bias, 1)
    return out


def _conv_pid(e: Engine, x, weight, shape, stride, padding, dilation, groups, nd):
    if groups != 1 or nd != 2:
        return None
    return Lazy(lambda: _conv_pid_now(e, x, weight, shape, stride, padding, dilation))


def _conv_pid_now(e: Engine, x, weight, shape, stride, padding, dilation):
    xp = e.pid(x)
    if xp is None:
        return None
    k = tuple(weight.shape[2:])
    cols = F.unfold(xp, k, dilation=dilation, padding=padding, stride=stride)  # (N, C*kk, L); pad: id 0
    nb, _, L = cols.shape
    wid = e.ids.rows(cols.transpose(1, 2).reshape(nb * L, -1)).reshape(nb, 1, L)
    cout = shape[1]
    return e.ids.relabel((wid * cout + _channel_index((nb, cout, L))).reshape(shape))


def _exact_product(e: Engine, op, x, w, wdims, n: int, bias, w_lo=None, w_rad=None):
    """op(x, w) (+ bias) in triple-double: x (an enclosure, possibly double- or triple-double) cut into slices to
    ``e.target_bits`` below its largest entry and w (exact, or w + w_lo within w_rad) into slices whose products
    ``op`` computes exactly (:mod:`nsverify.oracle.ddarith`), summed in triple-double (hi, lo, tail); the radius
    bounds the operands' radii, the slices' remainders, and the sums' last rounding. Returns (hi, lo, tail, rad)."""
    xh, xl, xt, xr = e.td(x)
    w_lo = torch.zeros_like(w) if w_lo is None else w_lo
    Ex = dd.exponent(xh)
    Ew = dd.exponent(w.abs() + w_lo.abs(), wdims)
    wbits = dd.weight_bits(w, wdims) if not bool(w_lo.any()) else 104
    bx, kx, bw, kw = dd.plan(n, min(wbits, 104), e.target_bits)
    xs, xrem = dd.slices(xh, xl, Ex, bx, kx, tail=xt)
    ws, wrem = dd.slices(w, w_lo, Ew, bw, kw)
    acc = err = None

    def accumulate(p):
        nonlocal acc, err
        if acc is None:
            acc, err = [p, torch.zeros_like(p), torch.zeros_like(p)], torch.zeros_like(p)
            return
        acc[0], t = dd.two_sum(acc[0], p)
        acc[1], t2 = dd.two_sum(acc[1], t)
        acc[2] = acc[2] + t2
        err = err + U * acc[2].abs()  # the only rounding: the third part's

    for a in xs:
        for b in ws:
            poll_deadline()
            if not bool(a.any()) or not bool(b.any()):
                continue
            accumulate(op(a, b))  # exact: every partial sum is a multiple of both grids, below 2^53 of them
    if acc is None:
        accumulate(op(torch.zeros_like(xh), w))
    if bias is not None:
        accumulate(bias.expand_as(acc[0]))
    hi, x_ = dd.two_sum(acc[0], acc[1])
    lo, tail = dd.two_sum(x_, acc[2])
    wa = w.abs() + w_lo.abs() if w_rad is None else w.abs() + w_lo.abs() + w_rad
    xabs = xh.abs() + xl.abs() + (xt.abs() if xt is not None else 0)
    xa = xabs + (xr if xr is not None else 0)
    rad = err * 2 + U * U * U * hi.abs() * 8
    if bool(xrem.any()):
        rad = rad + op(xrem, wa)
    if bool(wrem.any()):
        rad = rad + op(xa, wrem)
    if xr is not None:
        rad = rad + op(xr, wa)
    if w_rad is not None:
        rad = rad + op(xabs, w_rad)
    return hi, _none_if_zero(lo), _none_if_zero(tail), _none_if_zero(_inflate(rad, n))


def _addmm(e: Engine, bias, a, b, beta=1, alpha=1):
    if beta != 1 or alpha != 1:
        raise Unsupported("addmm with beta or alpha")
    out = _matmul(e, a, b, bias)
    e.rec(out).bias = _with_bias(e, out, bias, out.dim() - 1) if bias.dim() == 1 else None
    return out


def _mm(e: Engine, a, b):
    return _matmul(e, a, b, None)


def _matmul(e: Engine, a, b, bias):
    if e.precise and (bias is None or e.interval(bias)[1] is None):
        bh, bl, brad = e.dd(b)
        n = a.shape[-1] + (1 if bias is not None else 0)
        hi, lo, tail, r = _exact_product(e, torch.matmul, a, bh, (-2,), n,
                                         None if bias is None else e.interval(bias)[0], w_lo=bl, w_rad=brad)
        return e.emit(hi, a.dtype, rad=r, lo=lo, tail=tail, pid=None)
    am, ar, _ = e.interval(a)
    bm, br, _ = e.interval(b)
    mm = torch.matmul
    n = am.shape[-1] + (1 if bias is not None else 0)
    mid = mm(am, bm)
    mag = mm(am.abs(), bm.abs())
    if bias is not None:
        cm, cr, _ = e.interval(bias)
        mid = mid + cm
        mag = mag + cm.abs()
    r = gamma(n) * mag
    if ar is not None:
        r = r + mm(ar, bm.abs() if br is None else bm.abs() + br)
    if br is not None:
        r = r + mm(am.abs(), br)
    if bias is not None and cr is not None:
        r = r + cr
    return e.emit(mid, a.dtype, rad=_none_if_zero(_inflate(r, n)), pid=None)


def _bmm(e: Engine, a, b):
    return _matmul(e, a, b, None)


def _elementwise(e: Engine, x, fn_pid_tag):
    p = e.pid(x)
    return None if p is None else e.ids.relabel(p, torch.tensor(float(fn_pid_tag)))


def _binary(e: Engine, a, b, op: str):
    am, ar, _ = e.interval(a) if isinstance(a, torch.Tensor) else (torch.tensor(float(a), dtype=torch.float64),
                                                                    None, None)
    bm, br, _ = e.interval(b) if isinstance(b, torch.Tensor) else (torch.tensor(float(b), dtype=torch.float64),
                                                                    None, None)
    inf = None
    if op in ("add", "sub") and not (bool(torch.isfinite(am).all()) and bool(torch.isfinite(bm).all())):
        # an exact infinity (a constant mask: -inf above the diagonal) absorbs the other, finite operand
        for xm, xr in ((am, ar), (bm, br)):
            if xr is not None and bool((~torch.isfinite(xm) & (xr != 0)).any()):
                raise Unsupported("an infinite value with a radius")
        inf = ~torch.isfinite(am + bm if op == "add" else am - bm)
        am, bm = torch.where(torch.isfinite(am), am, torch.zeros_like(am)), \
            torch.where(torch.isfinite(bm), bm, torch.zeros_like(bm))
    low = tail = None

    def triple(t, m):
        """(hi, lo, tail, rad) of an operand (a Python number: exact)."""
        if not isinstance(t, torch.Tensor):
            return m, torch.zeros_like(m), torch.zeros_like(m), None
        v, r_ = e.triple(t)
        return (*v, r_)

    if op in ("add", "sub") and e.precise and inf is None:
        *ta, ar2 = triple(a, am)
        *tb, br2 = triple(b, bm)
        sg = 1.0 if op == "add" else -1.0
        shape = torch.broadcast_shapes(ta[0].shape, tb[0].shape)
        mid, low, tail, err = dd.td_add(tuple(t.expand(shape) for t in ta), tuple(sg * t.expand(shape) for t in tb))
        r = err
        for x in (ar2, br2):
            if x is not None:
                r = r + x
        r = _none_if_zero(_inflate(r, 3))
        low, tail = _none_if_zero(low), _none_if_zero(tail)
    elif op in ("mul", "div") and e.precise and inf is None and (op == "mul" or not _dependent(e, b)):
        *ta, ar2 = triple(a, am)
        if op == "mul":
            *tb, br2 = triple(b, bm)
        else:  # a / c for a constant c: a * (1/c), 1/c in triple-double from mpmath
            *tb, br2 = _reciprocal(bm)
        shape = torch.broadcast_shapes(ta[0].shape, tb[0].shape)
        ta, tb = tuple(t.expand(shape) for t in ta), tuple(t.expand(shape) for t in tb)
        zeros = torch.zeros(shape, dtype=torch.float64)
        ar2 = zeros if ar2 is None else ar2.expand(shape)
        br2 = zeros if br2 is None else br2.expand(shape)
        (mid, low, tail), r = _td_scale(ta, ar2, tb, br2)
        exact0 = ((ta[0] == 0) & (ta[1] == 0) & (ta[2] == 0) & (ar2 == 0)) | \
            ((tb[0] == 0) & (tb[1] == 0) & (tb[2] == 0) & (br2 == 0))
        r = _none_if_zero(torch.where(exact0, torch.zeros_like(r), _inflate(r, 4)))
        low, tail = _none_if_zero(low), _none_if_zero(tail)
    elif op == "add":
        mid, r = add_i(am, ar, bm, br)
    elif op == "sub":
        mid, r = add_i(am, ar, bm, br, -1.0)
    elif op == "mul":
        mid, r = mul_i(am, ar, bm, br)
    else:
        mid, r = div_i(am, ar, bm, br)
    if inf is not None:
        a0 = e.interval(a)[0] if isinstance(a, torch.Tensor) else torch.tensor(float(a), dtype=torch.float64)
        b0 = e.interval(b)[0] if isinstance(b, torch.Tensor) else torch.tensor(float(b), dtype=torch.float64)
        exact = (a0 + b0) if op == "add" else (a0 - b0)
        if bool(torch.isnan(exact).any()):
            raise Unsupported("inf - inf in a sum")
        mid = torch.where(inf, exact, mid)
        r = None if r is None else torch.where(inf, torch.zeros_like(r), r)
    def pid_now(a=a, b=b, am=am, bm=bm):
        pa = e.pid(a) if isinstance(a, torch.Tensor) else e.ids.const(am)
        pb = e.pid(b) if isinstance(b, torch.Tensor) else e.ids.const(bm)
        return None if pa is None or pb is None else e.ids.relabel(pa, pb)

    pid = Lazy(pid_now)
    dt = a.dtype if isinstance(a, torch.Tensor) and e.dep(a) else b.dtype
    out = e.emit(mid, dt, rad=r, lo=low, tail=tail, pid=pid)
    ra_, rb_ = (e.rec(t) if isinstance(t, torch.Tensor) else None for t in (a, b))
    if op in ("add", "sub") and ra_ is not None and ra_.coord is not None and not _dependent(e, b):
        e.rec(out).coord = ra_.coord  # w[j] + a constant
    if op == "sub" and _identity_pair(e, a, b, out):
        return out
    # a bias stays the entry's own additive term through a sum with an operand that does not read it
    for t, sign in ((a, 1.0), (b, 1.0 if op == "add" else -1.0)):
        ra = e.rec(t) if isinstance(t, torch.Tensor) else None
        if op in ("add", "sub") and ra is not None and ra.bias is not None and tuple(t.shape) == tuple(mid.shape):
            other = b if t is a else a
            ro = e.rec(other) if isinstance(other, torch.Tensor) else None
            if ro is None or ro.bias is None:
                e.rec(out).bias = dict(ra.bias, sign=ra.bias["sign"] * sign, chain=ra.bias["chain"] + [id(out)])
    return out


def _dependent(e: Engine, t) -> bool:
    return isinstance(t, torch.Tensor) and e.dep(t)


def _reciprocal(c: torch.Tensor):
    """1/c for a constant tensor c (no zero): (hi, lo, tail, rad)."""
    import mpmath

    flat = c.reshape(-1).tolist()
    if any(v == 0 for v in flat):
        raise Unsupported("a division by a constant 0")
    with mpmath.workprec(PREC):
        vals = [1 / mpmath.mpf(v) for v in flat]
    return _to_td(vals, [0.0] * len(vals), c.shape)


def _identity_pair(e: Engine, a, b, out) -> bool:
    """``out = relu(y) - relu(-y)``: equal to y for every real y (Park, Chun and Lee, Lemma 2), so ``out`` gets
    y's record -- a smooth value, not a kink -- and the pair is recorded: PyTorch's AD gives it derivative
    relu'(y) + relu'(-y), which is 0 where y is exactly 0 (the touches) and 1 elsewhere.  At the touches the
    difference from the true derivative (1) is seeded as ``out``'s tangent, to be carried to the program's output.
    (Both ReLU outputs must be read only here: checked when the run ends.)"""
    calls = {c.output_id: c for c in e.res.relus}
    ca, cb = calls.get(id(a)), calls.get(id(b))
    if ca is None or cb is None or e.res.neg_of.get(cb.input_id) != ca.input_id:
        return False
    y = e.recs[ca.input_id][0]  # records are keyed by id(tensor)
    ry, ro = e.rec(y), e.rec(out)
    if tuple(y.shape) != tuple(out.shape):
        return False
    ro.mid, ro.lo, ro.tail, ro.rad = (None if v is None else v.clone() for v in (ry.mid, ry.lo, ry.tail, ry.rad))
    ro.zero_ad, ro.bias = None, None
    ca.pair, cb.pair = cb.call, ca.call
    touches = ca.touches
    e.res.pairs.append((ca.call, cb.call, id(out), int(touches.sum()), ry.coord))
    if bool(touches.any()):
        seed = touches.double()
        ro.tan = (seed, None)
    return True


def _tangent(e: Engine, func, args, kwargs, out) -> None:
    """Carry the tangent (the Lemma 2 direction) through ``func``: linear ops and the smooth losses only."""
    def tan(t):
        r = e.rec(t) if isinstance(t, torch.Tensor) else None
        return (None, None) if r is None or r.tan is None else r.tan

    ro = e.rec(out) if isinstance(out, torch.Tensor) else (e.rec(out[0]) if isinstance(out, tuple) else None)
    if ro is None:
        return
    t0m, t0r = tan(args[0])
    if func in _VIEWS or func in (aten.expand.default,):
        ro.tan = (func(t0m, *args[1:], **kwargs), None if t0r is None else func(t0r, *args[1:], **kwargs)) \
            if func is not aten._to_copy.default else (t0m.clone(), t0r)
        return
    if func in (aten.add.Tensor, aten.sub.Tensor):
        tb = tan(args[1])
        am = t0m if t0m is not None else torch.zeros_like(ro.mid)
        bm = tb[0] if tb[0] is not None else torch.zeros_like(ro.mid)
        m, r = add_i(am.expand_as(ro.mid), t0r, bm.expand_as(ro.mid), tb[1], 1.0 if func is aten.add.Tensor else -1.0)
        ro.tan = (m, r)
        return
    if func is aten.mul.Tensor:  # (a b)' = a' b + a b'
        a, b = args
        terms = []
        for t, other in ((a, b), (b, a)):
            tm, tr = tan(t)
            if tm is None:
                continue
            om, orr, _ = e.interval(other) if isinstance(other, torch.Tensor) else \
                (torch.tensor(float(other), dtype=torch.float64), None, None)
            terms.append(mul_i(tm, tr, om, orr))
        m, r = terms[0]
        for m2, r2 in terms[1:]:
            m, r = add_i(m, r, m2, r2)
        ro.tan = (m.expand_as(ro.mid).clone(), None if r is None else r.expand_as(ro.mid).clone())
        return
    if func is aten._log_softmax.default:  # y' = x' - sum_j softmax_j x'_j
        x, dim = args[0], args[1]
        xm, xr, _ = e.interval(x)
        c = xm.amax(dim=dim, keepdim=True)
        em, er = exp_i(*add_i(xm, xr, c, None, -1.0))
        sm, sr = sum_i(em, er, [dim % xm.dim()], keepdim=True)
        pm, pr = div_i(em, er, sm, sr)
        qm, qr = mul_i(pm, pr, t0m, t0r)
        wm, wr = sum_i(qm, qr, [dim % xm.dim()], keepdim=True)
        ro.tan = add_i(t0m, t0r, wm, wr, -1.0)
        return
    if func is aten.nll_loss_forward.default:  # -(1/N) sum_b x'[b, t_b] (mean) or the sum
        _x, target, weight, reduction, ignore = args[:5]
        if weight is not None or reduction not in (1, 2) or bool((target == ignore).any()):
            e.res.tangent_lost = f"{func} (class weights, reduction or ignore_index)"
            return
        tm = t0m if t0m.dim() == 2 else t0m.unsqueeze(0)
        tr = None if t0r is None else (t0r if t0r.dim() == 2 else t0r.unsqueeze(0))
        tgt = target.reshape(-1, 1)
        gm = tm.gather(1, tgt).reshape(-1)
        gr = None if tr is None else tr.gather(1, tgt).reshape(-1)
        m, r = (mean_i if reduction == 1 else sum_i)(gm, gr, [0])
        ro.tan = (-m, r)
        return
    if func in (aten.sum.default, aten.mean.default, aten.sum.dim_IntList, aten.mean.dim):
        dims = list(range(t0m.dim())) if len(args) < 2 or args[1] is None else [d % t0m.dim() for d in args[1]]
        keep = bool(args[2]) if len(args) > 2 else False
        ro.tan = (sum_i if func in (aten.sum.default, aten.sum.dim_IntList) else mean_i)(t0m, t0r, dims, keep)
        return
    e.res.tangent_lost = str(func)


def _log_softmax(e: Engine, x, dim, half_to_float=False):
    """log_softmax with an enclosure: x - c - log(sum exp(x - c)) (c: each row's largest midpoint, an exact
    shift), log monotone (the C library's accuracy assumed as for exp)."""
    xm, xr, _ = e.interval(x)
    c = xm.amax(dim=dim, keepdim=True)
    sm, sr = add_i(xm, xr, c, None, -1.0)
    em, er = exp_i(sm, sr)
    tm, tr = sum_i(em, er, [dim % xm.dim()], keepdim=True)
    lo, hi = _bounds(tm, tr)
    if bool((lo <= 0).any()):
        raise Unsupported("log_softmax: a row sum is not bounded away from 0")
    lm, lr = _from_bounds(lo.log() - (lo.log().abs() + 1) * LIBM, hi.log() + (hi.log().abs() + 1) * LIBM)
    ym, yr = add_i(sm, sr, lm, lr, -1.0)
    return e.emit(ym, x.dtype, rad=yr, pid=None)


def _nll_loss(e: Engine, x, target, weight, reduction, ignore_index):
    if weight is not None or reduction not in (1, 2) or e.dep(target) or bool((target == ignore_index).any()):
        with _disable_current_modes():
            out = aten.nll_loss_forward.default(x, target, weight, reduction, ignore_index)
        m = out[0].detach().double()
        e.put(out[0], Rec(mid=m, rad=torch.full_like(m, INF), pid=None))
        return out
    xm, xr, _ = e.interval(x)
    xm2 = xm if xm.dim() == 2 else xm.unsqueeze(0)
    xr2 = None if xr is None else (xr if xr.dim() == 2 else xr.unsqueeze(0))
    tgt = target.reshape(-1, 1)
    gm = xm2.gather(1, tgt).reshape(-1)
    gr = None if xr2 is None else xr2.gather(1, tgt).reshape(-1)
    m, r = (mean_i if reduction == 1 else sum_i)(gm, gr, [0])
    out = e.emit(-m, x.dtype, rad=r, pid=None)
    total = torch.tensor(float(tgt.numel()), dtype=x.dtype)
    return out, total


def _add(e, a, b, alpha=1):
    if alpha != 1:
        raise Unsupported("add with alpha")
    return _binary(e, a, b, "add")


def _sub(e, a, b, alpha=1):
    if alpha != 1:
        raise Unsupported("sub with alpha")
    return _binary(e, a, b, "sub")


def _mul(e, a, b):
    return _binary(e, a, b, "mul")


def _div(e, a, b):
    return _binary(e, a, b, "div")


def _neg(e, a):
    h, lo, r = e.dd(a)
    out = e.emit(-h, a.dtype, rad=r, lo=_none_if_zero(-lo), pid=Lazy(lambda: _elementwise(e, a, -1)))
    e.res.neg_of[id(out)] = id(a)
    c = e.rec(a).coord
    if c is not None:
        e.rec(out).coord = (c[0], -c[1])
    return out


def _batch_norm(e: Engine, x, weight, bias, running_mean, running_var, training, momentum, eps):
    if e.precise and all(t is None or e.interval(t)[1] is None for t in (weight, bias, running_mean, running_var)):
        return _batch_norm_dd(e, x, weight, bias, running_mean, running_var, training, momentum, eps)
    xm, xr, _ = e.interval(x)
    c = xm.shape[1]
    shape = (1, c) + (1,) * (xm.dim() - 2)
    dims = [0] + list(range(2, xm.dim()))

    def chan(t, default):
        if t is None:
            return torch.full(shape, float(default), dtype=torch.float64), None
        m, r, _ = e.interval(t)
        return m.reshape(shape), (None if r is None else r.reshape(shape))

    gm, gr = chan(weight, 1.0)
    if training:
        mu, mur = mean_i(xm, xr, dims, keepdim=True)
        dm, dr = add_i(xm, xr, mu, mur, -1.0)
        sm, sr = square_i(dm, dr)
        vm, vr = mean_i(sm, sr, dims, keepdim=True)
    else:
        rm, _ = chan(running_mean, 0.0)
        vm, vr = chan(running_var, 1.0)
        dm, dr = add_i(xm, xr, rm, None, -1.0)
    tm, tr = add_i(vm, vr, torch.tensor(float(eps), dtype=torch.float64), None)
    qm, qr = sqrt_i(tm, tr)
    poll_deadline()
    sm_, sr_ = div_i(gm, gr, qm, qr)
    ym, yr = mul_i(dm, dr, sm_, sr_)
    bm, br = chan(bias, 0.0)
    om, orad = add_i(ym, yr, bm, br)
    pid = Lazy(lambda: _channel_pid(e, x))
    out = e.emit(om.contiguous(), x.dtype, rad=None if orad is None else orad.contiguous(), pid=pid)
    if bias is not None:
        e.rec(out).bias = _with_bias(e, out, bias, 1)
    aux = aten.native_batch_norm.default(x, weight, bias,
                                         None if running_mean is None else running_mean.clone(),
                                         None if running_var is None else running_var.clone(),
                                         training, momentum, eps)  # the saved statistics, on the carriers
    return out, aux[1], aux[2]


#: mpmath precision of the statistics, scales and exps feeding triple-double values (their rounding, 2^-200
#: relative, is inside the 2^-155 that :func:`_to_td` adds)
PREC = 200


def _group_sums(hi, lo, rad, dims, tail=None):
    """Exact sums of hi + lo (+ tail) over ``dims`` (one group per remaining index): a list of mpmath sums (group
    order, exact to 2^-200) and the radius of each (rad summed, and what the slices leave out, below 2^-165 of
    the group's largest entry), as a float64 tensor."""
    import mpmath

    n = 1
    for d_ in dims:
        n *= hi.shape[d_]
    bits = 52 - math.ceil(math.log2(max(n, 2)))
    k = math.ceil(165 / bits)
    E = dd.exponent(hi.abs() + lo.abs() + (tail.abs() if tail is not None else 0), dims)
    parts, rem = dd.slices(hi, lo, E, bits, k, tail=tail)
    sums = [p.sum(dim=dims) for p in parts if bool(p.any())]  # exact: multiples of one grid, below 2^53 of them
    sums = sums or [torch.zeros_like(hi).sum(dim=dims)]
    r = rem.sum(dim=dims) * (1 + 2 * gamma(n))
    if rad is not None:
        r = r + rad.sum(dim=dims) * (1 + 2 * gamma(n))
    cols = [t.reshape(-1).tolist() for t in sums]
    with mpmath.workprec(PREC):
        out = [mpmath.fsum(mpmath.mpf(c[i]) for c in cols) for i in range(len(cols[0]))]
    return out, r.reshape(-1)


def _to_td(vals, rads, shape):
    """mpmath numbers (``PREC`` bits) and radii -> (hi, lo, tail, rad) float64 tensors of ``shape``: hi + lo +
    tail is v to within 2^-155 |v| (the tail's rounding and the mpmath rounding), added to the radius."""
    import mpmath

    h, lo_, tl, r = [], [], [], []
    with mpmath.workprec(PREC):
        for v, rv in zip(vals, rads):
            hv = float(v)
            lv = float(v - hv)
            tv = float(v - hv - lv)
            h.append(hv)
            lo_.append(lv)
            tl.append(tv)
            r.append(float(rv) + float(abs(v) * mpmath.mpf(2) ** -155))
    return tuple(torch.tensor(t, dtype=torch.float64).reshape(shape) for t in (h, lo_, tl, r))


def _batch_norm_dd(e: Engine, x, weight, bias, running_mean, running_var, training, momentum, eps):
    """BatchNorm in triple-double: (x - mean) * s + beta with s = gamma / sqrt(var + eps) per channel in
    ``PREC``-bit mpmath (rounded to a triple, its error a radius); in training mode the batch mean and (biased)
    variance are exact sums of the triple-double values (:func:`_centred`), their radii propagated."""
    import mpmath

    xv, xr = e.triple(x)
    xh = xv[0]
    c = xh.shape[1]
    shape = (1, c) + (1,) * (xh.dim() - 2)
    dims = [0] + list(range(2, xh.dim()))

    def vals(t, default):
        return [default] * c if t is None else e.interval(t)[0].reshape(-1).tolist()

    g = vals(weight, 1.0)
    if training:
        d, rad_d, var, vrad = _centred(xv, xr, dims, shape)
    else:
        mh = torch.tensor(vals(running_mean, 0.0), dtype=torch.float64).reshape(shape)
        var, vrad = [mpmath.mpf(v) for v in vals(running_var, 1.0)], [mpmath.mpf(0)] * c
        *d, err1 = dd.td_add(xv, _td_of(-mh, xh))
        rad_d = err1 if xr is None else err1 + xr
    s_, sr = _inv_std(var, vrad, eps, shape, "BatchNorm", g)
    poll_deadline()
    y, rad = _td_scale(tuple(d), rad_d, s_, sr)
    if bias is not None:
        *y, err3 = dd.td_add(y, _td_of(e.interval(bias)[0].reshape(shape), xh))
        rad = rad + err3
    pid = Lazy(lambda: _channel_pid(e, x))
    out = e.emit(y[0].contiguous(), x.dtype, rad=_none_if_zero(_inflate(rad, 4)),
                 lo=_none_if_zero(y[1].contiguous()), tail=_none_if_zero(y[2].contiguous()), pid=pid)
    if bias is not None:
        e.rec(out).bias = _with_bias(e, out, bias, 1)
    aux = aten.native_batch_norm.default(x, weight, bias,
                                         None if running_mean is None else running_mean.clone(),
                                         None if running_var is None else running_var.clone(),
                                         training, momentum, eps)
    return out, aux[1], aux[2]


def _channel_pid(e: Engine, x):
    px = e.pid(x)
    return None if px is None else e.ids.relabel(px, _channel_index(px.shape))


def _legit_no_training(e, x, weight, bias, running_mean, running_var, momentum, eps):
    return _batch_norm(e, x, weight, bias, running_mean, running_var, False, momentum, eps)


def _relu(e: Engine, x):
    hi, lo, tl, r0 = e.td(x)
    r = _fold(r0, tl)  # the signs are decided on the tail folded into the radius
    rec = e.rec(x)
    a, b = _dd_bounds(hi, lo, r)
    touch = (hi == 0) & (lo == 0) & ((r == 0) if r is not None else torch.ones_like(hi, dtype=torch.bool))
    undecided = ~touch & (a <= 0) & (b >= 0)
    neg = b < 0
    e.res.relus.append(ReluCall(e.calls, tuple(hi.shape), touch, int(undecided.sum()),
                                rec.bias if rec is not None else None, id(x),
                                orig=(rec.orig or frozenset()) if rec is not None else frozenset(),
                                float_only=int(((x.detach() == 0) & ~touch & ~undecided).sum())))
    off = neg | touch
    mid = torch.where(off, torch.zeros_like(hi), hi)
    low = _none_if_zero(torch.where(off, torch.zeros_like(lo), lo))
    tail = None if tl is None else _none_if_zero(torch.where(off, torch.zeros_like(tl), tl))
    rad = None if r0 is None else _none_if_zero(torch.where(off, torch.zeros_like(r0), r0))

    def pid_now():  # from the input's record (an in-place ReLU replaces the tensor's record by this one)
        if rec is not None and isinstance(rec.pid, Lazy):
            rec.pid = rec.pid.fn()
        p = rec.pid if rec is not None else e.ids.const(x)
        return None if p is None else torch.where(neg, torch.zeros_like(p), e.ids.relabel(p, torch.tensor(-7.0)))

    out = e.emit(mid, x.dtype, rad=rad, lo=low, tail=tail, pid=Lazy(pid_now), zero_ad=off)
    e.res.relus[-1].output_id = id(out)
    return out


def _relu_(e: Engine, x):
    """``nn.ReLU(inplace=True)``: the out-of-place rule, then the result written into ``x`` and ``x``'s record
    replaced.  The input's reads are kept under a key of their own, so that the bias chain's "read once" check
    counts the reads of the pre-activation, not those of the activation that now lives in the same tensor."""
    out = _relu(e, x)
    call = e.res.relus[-1]
    key = ("inplace", e.calls)
    e.res.consumers[key] = e.res.consumers.pop(id(x), 0)
    if call.bias is not None:
        call.bias = dict(call.bias, chain=[key if t == id(x) else t for t in call.bias["chain"]])
    call.input_id = key
    rec_out = e.rec(out)
    x.copy_(out)
    del e.recs[id(out)]
    e.recs[id(x)] = (x, rec_out)
    call.output_id = id(x)
    return x


def _threshold(e: Engine, x, threshold, value):
    if threshold != 0 or value != 0:
        raise Unsupported("threshold other than relu")
    return _relu(e, x)


def _max_pool(e: Engine, x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    if ceil_mode:
        raise Unsupported("a ceil_mode max pool")
    m, lo_part, tail_part, r0 = e.td(x)  # the chosen values keep the tail
    r = _fold(r0, tail_part)  # the comparisons: the tail folded into the radius
    rec = e.rec(x)
    k = tuple(kernel_size) if isinstance(kernel_size, (list, tuple)) else (kernel_size, kernel_size)
    k = k * 2 if len(k) == 1 else k
    s = tuple(stride) if stride else k
    s = s * 2 if len(s) == 1 else s
    pd = tuple(padding) if isinstance(padding, (list, tuple)) else (padding, padding)
    pd = pd * 2 if len(pd) == 1 else pd
    dl = tuple(dilation) if isinstance(dilation, (list, tuple)) else (dilation, dilation)
    dl = dl * 2 if len(dl) == 1 else dl
    batched = m.dim() == 4
    mb = m if batched else m[None]
    nb, c, h, wd = mb.shape
    lpb = lo_part if batched else lo_part[None]
    rb = None if r is None else (r if batched else r[None])
    lo, hi = _dd_bounds(mb, lpb, rb)

    valid = F.unfold(torch.ones((1, 1, h, wd), dtype=torch.float64), k, dilation=dl, padding=pd, stride=s) > 0

    def unf(t, fill):
        cols = F.unfold(t.reshape(nb, c, h, wd), k, dilation=dl, padding=pd, stride=s)  # (N, C*K, L): one call
        cols = cols.reshape(nb * c, -1, cols.shape[-1])  # (NC, K, L)
        return torch.where(valid, cols, torch.full_like(cols, fill)), valid

    poll_deadline()
    lo_w, valid = unf(lo, -INF)
    hi_w, _ = unf(hi, -INF)
    olo = lo_w.max(dim=1).values  # (NC, L)
    cand = (hi_w >= olo[:, None, :]) & valid
    ncand = cand.sum(dim=1)
    tied = ncand >= 2
    first = cand.int().argmax(dim=1)  # the first candidate in window order: PyTorch's first maximal index
    stats = PoolCall(e.calls, (rec.orig or frozenset()) if rec is not None else frozenset(), int(olo.numel()),
                     int(tied.sum()), 0, 0, 0)
    fcols, _ = unf(x.detach().double() if batched else x.detach().double()[None], -INF)  # the program's values
    fties = (fcols == fcols.max(dim=1, keepdim=True).values).sum(dim=1) >= 2
    stats.float_only = int((fties & (ncand == 1)).sum())
    oh = (h + 2 * pd[0] - dl[0] * (k[0] - 1) - 1) // s[0] + 1
    ow = (wd + 2 * pd[1] - dl[1] * (k[1] - 1) - 1) // s[1] + 1
    # the flat input index (within a channel's plane) of each window entry
    plane = torch.arange(h * wd, dtype=torch.float64).reshape(1, 1, h, wd)
    pos = F.unfold(plane + 1, k, dilation=dl, padding=pd, stride=s)[0] - 1  # (K, L); -1: padding
    L = pos.shape[1]
    idx = pos.T[torch.arange(L).expand(nb * c, L), first]  # (NC, L)
    zero_ad = None
    pid_out = None
    p = e.pid(x) if bool(tied.any()) else None
    if bool(tied.any()):
        pw = unf((p if batched else p[None]) if p is not None else None, -1.0)[0] if p is not None else None
        zw = None
        if rec is not None and rec.zero_ad is not None:
            zb = rec.zero_ad if batched else rec.zero_ad[None]
            zw = unf(zb.double(), 0.0)[0] > 0
        t_idx = tied.nonzero(as_tuple=False)
        cand_t = cand[t_idx[:, 0], :, t_idx[:, 1]]  # (T, K)
        if pw is not None:
            pv = pw[t_idx[:, 0], :, t_idx[:, 1]]
            pmax = torch.where(cand_t, pv, torch.full_like(pv, -INF)).max(dim=1).values
            pmin = torch.where(cand_t, pv, torch.full_like(pv, INF)).min(dim=1).values
            identical = pmax == pmin
        else:
            identical = torch.zeros(t_idx.shape[0], dtype=torch.bool)
        if zw is not None:
            zv = zw[t_idx[:, 0], :, t_idx[:, 1]]
            zeros = (zv | ~cand_t).all(dim=1)
        else:
            zeros = torch.zeros(t_idx.shape[0], dtype=torch.bool)
        stats.identical = int(identical.sum())
        stats.zero_ad = int((zeros & ~identical).sum())
        mixed = ~(identical | zeros)
        stats.mixed = int(mixed.sum())
        if stats.mixed:
            j = int(mixed.nonzero()[0])
            stats.first_mixed = (int(t_idx[j, 0]) // c, int(t_idx[j, 0]) % c, int(t_idx[j, 1]))
    e.res.pools.append(stats)
    shape = (nb, c, oh, ow)

    def pick(t):  # the first candidate's value: the unique maximum, or one of identical / zero values
        w_ = unf(t, 0.0)[0]
        return w_.gather(1, first.unsqueeze(1)).squeeze(1)

    omid = pick(mb)
    olow = _none_if_zero(pick(lpb))
    otail = None if tail_part is None else _none_if_zero(pick(tail_part if batched else tail_part[None]))
    rb0 = None if r0 is None else (r0 if batched else r0[None])
    orad = None if rb0 is None else _none_if_zero(pick(rb0))
    def pool_pid():
        px = e.pid(x)
        if px is None:
            return None
        pw = unf(px if batched else px[None], -1.0)[0] + 1  # (NC, K, L), 0: padding
        rows = pw.transpose(1, 2).reshape(nb * c * oh * ow, -1)
        got = e.ids.rows(rows).reshape(shape)  # one function for every channel: no parameters
        return got if batched else got[0]

    pid_out = Lazy(pool_pid)
    if rec is not None and rec.zero_ad is not None:
        zb = rec.zero_ad if batched else rec.zero_ad[None]
        zwin = unf(zb.double(), 1.0)[0] > 0  # padding counts as zero-AD (it is never chosen)
        zero_ad = (zwin | ~cand).all(dim=1).reshape(shape)
    out = omid.reshape(shape)
    orad = None if orad is None else orad.reshape(shape)
    olow = None if olow is None else olow.reshape(shape)
    otail = None if otail is None else otail.reshape(shape)
    indices = idx.reshape(shape).long()
    if not batched:
        out, indices = out[0], indices[0]
        orad = None if orad is None else orad[0]
        olow = None if olow is None else olow[0]
        otail = None if otail is None else otail[0]
        zero_ad = None if zero_ad is None else zero_ad[0]
    return e.emit(out, x.dtype, rad=orad, lo=olow, tail=otail, pid=pid_out, zero_ad=zero_ad), indices


def _mean_dim(e: Engine, x, dims, keepdim=False, dtype=None):
    m, r, _ = e.interval(x)
    dims = [d % m.dim() for d in (dims if dims is not None else range(m.dim()))]
    mid, rad = mean_i(m, r, dims, keepdim)
    return e.emit(mid, x.dtype, rad=rad, pid=None)


def _sum_dim(e: Engine, x, dims=None, keepdim=False, dtype=None):
    m, r, _ = e.interval(x)
    dims = [d % m.dim() for d in (dims if dims else range(m.dim()))]
    mid, rad = sum_i(m, r, dims, keepdim)
    return e.emit(mid, x.dtype, rad=rad, pid=None)


def _embedding(e: Engine, weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    wm, wr, _ = e.interval(weight)
    if e.dep(indices):
        raise Unsupported("embedding indices that depend on w")
    mid, rad = wm[indices], (None if wr is None else wr[indices])
    pid = indices.double() + e.ids.fresh(int(weight.shape[0]))  # a row per token: one function per index
    pid = pid.unsqueeze(-1) * weight.shape[1] + torch.arange(weight.shape[1], dtype=torch.float64)
    return e.emit(mid, weight.dtype, rad=rad, pid=e.ids.relabel(pid))


def _layer_norm(e: Engine, x, normalized_shape, weight, bias, eps):
    if e.precise and all(t is None or e.interval(t)[1] is None for t in (weight, bias)):
        return _layer_norm_dd(e, x, normalized_shape, weight, bias, eps)
    xm, xr, _ = e.interval(x)
    dims = list(range(xm.dim() - len(normalized_shape), xm.dim()))
    mu, mur = mean_i(xm, xr, dims, keepdim=True)
    dm, dr = add_i(xm, xr, mu, mur, -1.0)
    sm, sr = square_i(dm, dr)
    vm, vr = mean_i(sm, sr, dims, keepdim=True)
    tm, tr = add_i(vm, vr, torch.tensor(float(eps), dtype=torch.float64), None)
    qm, qr = sqrt_i(tm, tr)
    poll_deadline()
    ym, yr = div_i(dm, dr, qm, qr)
    if weight is not None:
        gm, gr, _ = e.interval(weight)
        ym, yr = mul_i(ym, yr, gm, gr)
    if bias is not None:
        bm, br, _ = e.interval(bias)
        ym, yr = add_i(ym, yr, bm, br)
    out = e.emit(ym, x.dtype, rad=yr, pid=None)
    if bias is not None:
        e.rec(out).bias = _with_bias(e, out, bias, out.dim() - 1)
    rstd_m, _ = div_i(torch.ones_like(qm), None, qm, qr)
    return out, mu.to(x.dtype), rstd_m.to(x.dtype)


def _centred(x, xr, dims, shape):
    """Per group over ``dims`` (``shape``: the groups' keepdim shape) of x (a triple (hi, lo, tail) within xr):
    x - mean (a triple and its radius) and the biased variance with its radius (mpmath lists), from exact sums
    (:func:`_group_sums`)."""
    import mpmath

    xh = x[0]
    n = 1
    for d_ in dims:
        n *= xh.shape[d_]
    sums, srad = _group_sums(x[0], x[1], xr, dims, tail=x[2])
    with mpmath.workprec(PREC):
        mean = [v / n for v in sums]
    mh, ml, mt, mr = _to_td(mean, (srad / n * (1 + 4 * U)).tolist(), shape)
    dh, dl, dt, err1 = dd.td_add(x, tuple(-t.expand_as(xh) for t in (mh, ml, mt)))
    rad_d = err1 + mr if xr is None else err1 + mr + xr
    qh, ql, qt, err2 = dd.td_mul((dh, dl, dt), (dh, dl, dt))
    rad_q = 2 * (dh.abs() + dl.abs() + dt.abs()) * rad_d + rad_d * rad_d + err2
    qsums, qrad = _group_sums(qh, ql, rad_q, dims, tail=qt)
    with mpmath.workprec(PREC):
        var = [v / n for v in qsums]
        vrad = [mpmath.mpf(r_) / n * (1 + mpmath.mpf(2) ** -40) for r_ in qrad.tolist()]
    return (dh, dl, dt), rad_d, var, vrad


def _inv_std(var, vrad, eps, shape, what: str, gamma=None):
    """gamma / sqrt(var + eps) per group (gamma None: 1) in ``PREC``-bit mpmath, as a triple with its radius:
    |d/dvar| = |gamma| / 2 (var + eps)^-1.5, bounded at var's lower end."""
    import mpmath

    sv, sr = [], []
    with mpmath.workprec(PREC):
        for k, (v, vr) in enumerate(zip(var, vrad)):
            t_lo = min(v, max(v - vr, mpmath.mpf(0))) + mpmath.mpf(eps)  # v itself when exact (vr = 0)
            if t_lo <= 0:
                raise Unsupported(f"{what}: var + eps is not bounded away from 0")
            g = mpmath.mpf(1) if gamma is None else mpmath.mpf(gamma[k])
            sv.append(g / mpmath.sqrt(v + mpmath.mpf(eps)))
            sr.append(abs(g) / 2 * t_lo ** mpmath.mpf(-1.5) * vr * (1 + mpmath.mpf(2) ** -40))
    hi, lo, tail, rad = _to_td(sv, sr, shape)
    return (hi, lo, tail), rad


def _row_stats(e: Engine, x, xr, dims, eps):
    """Per group over ``dims`` of x (a triple within xr): x - mean (a triple, its radius) and 1 / sqrt(var + eps)
    (a triple, its radius), from exact sums and mpmath (the variance is the biased one, as the normalisations
    use)."""
    shape = list(x[0].shape)
    for d_ in dims:
        shape[d_] = 1
    d, rad_d, var, vrad = _centred(x, xr, dims, shape)
    s_, sr = _inv_std(var, vrad, eps, shape, "a normalisation")
    return d, rad_d, s_, sr


def _td_scale(d, rad_d, s_, sr):
    """d * s for triple-double enclosures (d within rad_d, s broadcast within sr): (triple, rad)."""
    s_ = tuple(t.expand_as(d[0]) for t in s_)
    yh, yl, yt, err = dd.td_mul(d, s_)
    rad = rad_d * (s_[0].abs() + s_[1].abs() + s_[2].abs() + sr) + (d[0].abs() + d[1].abs() + d[2].abs()) * sr + err
    return (yh, yl, yt), rad


def _td_of(t, like):
    """A triple of an exact float64 tensor ``t`` (broadcast to ``like``)."""
    t = t.expand_as(like)
    return t, torch.zeros_like(like), torch.zeros_like(like)


def _layer_norm_dd(e: Engine, x, normalized_shape, weight, bias, eps):
    xv, xr = e.triple(x)
    xh = xv[0]
    dims = list(range(xh.dim() - len(normalized_shape), xh.dim()))
    d, rad_d, s_, sr = _row_stats(e, xv, xr, dims, eps)
    poll_deadline()
    y, rad = _td_scale(d, rad_d, s_, sr)
    if weight is not None:
        g = e.interval(weight)[0]
        y, rad = _td_scale(y, rad, _td_of(g, g), torch.zeros_like(g))
    if bias is not None:
        *y, err = dd.td_add(y, _td_of(e.interval(bias)[0], xh))
        rad = rad + err
    out = e.emit(y[0].contiguous(), x.dtype, rad=_none_if_zero(_inflate(rad, 4)),
                 lo=_none_if_zero(y[1].contiguous()), tail=_none_if_zero(y[2].contiguous()))
    if bias is not None:
        e.rec(out).bias = _with_bias(e, out, bias, out.dim() - 1)
    aux = aten.native_layer_norm.default(x, normalized_shape, weight, bias, eps)
    return out, aux[1], aux[2]


def _softmax_dd(e: Engine, x, dim):
    """softmax in triple-double: shifted by each row's largest midpoint (exact in real arithmetic), exp per entry
    in ``PREC``-bit mpmath (with the derivative bound exp(t + r) r for the radius), exact row sums, 1/sum in
    mpmath."""
    import mpmath

    xh, xl, xr = e.dd(x)
    dim = dim % xh.dim()
    c = xh.amax(dim=dim, keepdim=True)
    c = torch.where(torch.isfinite(c), c, torch.zeros_like(c))
    masked = torch.isinf(xh)
    th, tl, err = dd.dd_add(torch.where(masked, torch.zeros_like(xh), xh), xl, -c.expand_as(xh), torch.zeros_like(xh))
    tr = err if xr is None else err + xr
    if xh.numel() > 2_000_000:
        raise Unsupported("a softmax with more than 2,000,000 entries (exp is taken in mpmath entry by entry)")
    vals, rads = [], []
    with mpmath.workprec(PREC):
        for h, lw, r_, m in zip(th.reshape(-1).tolist(), tl.reshape(-1).tolist(), tr.reshape(-1).tolist(),
                                masked.reshape(-1).tolist()):
            if m:
                vals.append(mpmath.mpf(0))
                rads.append(0.0)
                continue
            t = mpmath.mpf(h) + mpmath.mpf(lw)
            v = mpmath.exp(t)
            vals.append(v)
            rads.append(float(mpmath.exp(t + mpmath.mpf(r_)) * mpmath.mpf(r_) * (1 + mpmath.mpf(2) ** -40)))
    poll_deadline()
    eh, el, et, er = _to_td(vals, rads, xh.shape)
    er = torch.where(masked, torch.zeros_like(er), er)
    sums, srad = _group_sums(eh, el, er, [dim], tail=et)
    shape = list(xh.shape)
    shape[dim] = 1
    inv, invr = [], []
    with mpmath.workprec(PREC):
        for v, r_ in zip(sums, srad.tolist()):
            lo_ = v - mpmath.mpf(r_)
            if lo_ <= 0:
                raise Unsupported("a softmax row sum is not bounded away from 0")
            inv.append(1 / v)
            invr.append(mpmath.mpf(r_) / lo_ ** 2 * (1 + mpmath.mpf(2) ** -40))
    ih, il, it, ir = _to_td(inv, invr, shape)
    y, rad = _td_scale((eh, el, et), er, (ih, il, it), ir)
    rad = torch.where(masked, torch.zeros_like(rad), rad)
    return e.emit(y[0], x.dtype, rad=_none_if_zero(_inflate(rad, 4)), lo=_none_if_zero(y[1]), tail=_none_if_zero(y[2]),
                  pid=None)


def _softmax(e: Engine, x, dim, half_to_float=False):
    if e.precise:
        return _softmax_dd(e, x, dim)
    xm, xr, _ = e.interval(x)
    c = xm.amax(dim=dim, keepdim=True)  # softmax is invariant to a constant shift: c need not be exact
    c = torch.where(torch.isfinite(c), c, torch.zeros_like(c))
    sm, sr = add_i(xm, xr, c, None, -1.0)
    sm = torch.where(torch.isinf(xm), xm, sm)
    sr = None if sr is None else torch.where(torch.isinf(xm), torch.zeros_like(sr), sr)
    em, er = exp_i(sm, sr)
    tm, tr = sum_i(em, er, [dim % xm.dim()], keepdim=True)
    ym, yr = div_i(em, er, tm, tr)
    return e.emit(ym, x.dtype, rad=yr, pid=None)


def _masked_fill(e: Engine, x, mask, value):
    if e.dep(mask) or (isinstance(value, torch.Tensor) and e.dep(value)):
        raise Unsupported("masked_fill with a mask or value that depends on w")
    xh, xl, xr = e.dd(x)
    v = float(value)
    mid = torch.where(mask, torch.full_like(xh, v), xh)
    low = _none_if_zero(torch.where(mask, torch.zeros_like(xl), xl))
    rad = None if xr is None else _none_if_zero(torch.where(mask, torch.zeros_like(xr), xr))
    return e.emit(mid, x.dtype, rad=rad, lo=low, pid=None)


def _sum_all(e: Engine, x, dtype=None):
    return _sum_dim(e, x, None)


def _mean_all(e: Engine, x, dtype=None):
    return _mean_dim(e, x, None)


def _adaptive_avg_pool2d(e: Engine, x, output_size):
    if tuple(output_size) != (1, 1):
        raise Unsupported("adaptive_avg_pool2d to a size other than 1x1")
    return _mean_dim(e, x, [-2, -1], True)


_RULES = {
    aten.convolution.default: _conv,
    aten.addmm.default: _addmm,
    aten.mm.default: _mm,
    aten.bmm.default: _bmm,
    aten.add.Tensor: _add,
    aten.sub.Tensor: _sub,
    aten.mul.Tensor: _mul,
    aten.div.Tensor: _div,
    aten.neg.default: _neg,
    aten.native_batch_norm.default: _batch_norm,
    aten._native_batch_norm_legit_no_training.default: _legit_no_training,
    aten.relu.default: _relu,
    aten.relu_.default: _relu_,
    aten.threshold.default: _threshold,
    aten.max_pool2d_with_indices.default: _max_pool,
    aten.mean.dim: _mean_dim,
    aten.sum.dim_IntList: _sum_dim,
    aten.sum.default: _sum_all,
    aten.embedding.default: _embedding,
    aten.native_layer_norm.default: _layer_norm,
    aten._softmax.default: _softmax,
    aten._log_softmax.default: _log_softmax,
    aten.nll_loss_forward.default: _nll_loss,
    aten.masked_fill.Scalar: _masked_fill,
    aten.mean.default: _mean_all,
    aten._adaptive_avg_pool2d.default: _adaptive_avg_pool2d,
}


def enclose(fn, w: torch.Tensor, target_bits: int = PRECISION_BITS[0]) -> tuple[Enclosure, Engine]:
    """Run ``fn`` once at ``w`` under the enclosure rules.  The program runs in its own dtype (constants as
    PyTorch computes them); every w-dependent value is carried as a triple-double centre and a radius, the
    products keeping ``target_bits`` of their activations (:data:`PRECISION_BITS`)."""
    e = Engine(w, target_bits)
    carrier = w.detach().clone()
    e.put(carrier, Rec(mid=w.detach().double(), rad=None,
                       pid=torch.arange(w.numel(), dtype=torch.float64) + e.ids.fresh(w.numel()),
                       woff=torch.arange(w.numel()), orig=frozenset({"w"})))
    try:
        with torch.enable_grad(), _Mode(e):
            out = fn(carrier)
    except Unsupported as ex:
        ex.partial = e.res  # what was found before the stop (an undecided sign upstream explains more)
        raise
    r = e.rec(out)
    if r is not None and r.tan is not None:
        e.res.output_tan = r.tan
    if not isinstance(out, torch.Tensor) or out.numel() != 1:
        raise Unsupported("fn must return a scalar tensor")
    return e.res, e
