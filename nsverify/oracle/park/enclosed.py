"""Park et al.'s Theorem 8 decided from rigorous float enclosures (:mod:`nsverify.oracle.enclosure`), for models
at the size and precision users train them: no exact rational trace of the network, no exact AD vector.

What is decided, for ``check_module(model, loss_fn, inputs, targets)`` with PyTorch's own rules (``ad=None``,
``rules=None``): whether **the exact AD** -- PyTorch's backward formulas applied in exact arithmetic at the exact
point (w's floats read exactly, constants as PyTorch computed them) -- is a Bouligand (so Clarke) subgradient.
One float64 run under the enclosure rules classifies every nonsmooth op of the program:

* each ReLU input entry is **strictly positive**, **strictly negative** (its enclosure excludes 0), or **exactly
  0** (a kink touch: radius 0).  An enclosure that contains 0 but is not the point 0 declines (the entry may be a
  true kink or a near one: "straddles");
* each max-pool window has one candidate for its maximum, or its candidates are **one function** (equal
  provenance ids: they tie on a whole neighbourhood, so the window is a fixed smooth selection), or they are all
  ReLU outputs at or below their kink (AD derivative 0: Park's T_j); any other possible tie declines;
* every other op that reads a w-dependent value is smooth at the point (the enclosure table's ops; a singular
  argument -- a divisor or square root whose enclosure reaches 0 -- declines).

That is Park, Chun and Lee's setting (Sec. 2.2, Condition 1) with the layers read from the ATen ops: a layer is a
ReLU call with kink touches; everything else is analytic near the point (``tau_l`` and the loss).  Theorem 8 then
needs, for each such layer, a direction in the layer's own parameters ``w_l`` strictly inside the cone P_l: one
row per kink touch (AD's side -- ReLU's derivative at 0 is the left one -- times the gradient of the
pre-activation in w_l) and one per tied window outside T_j (there are none: those decline).  The direction used
is the layer's **own additive parameters**: the entry's bias or BatchNorm shift b_c, added last, so that
d y_i / d b_c = +1 on channel c and 0 elsewhere, structurally -- the parameter is read by exactly one op and
reaches the pre-activation through sums with operands that do not read it, each intermediate read once.  The
direction -sum_c e_{b_c} over the touched channels lies strictly inside every row (each row's value is exactly 1).
A dead unit or channel -- the common kink of a trained or pruned network -- is exactly this case.

What declines (the exact route then runs, within the same time limit): a touch whose pre-activation has no own
additive parameter, a pool tie between different functions, an undecided sign (the enclosures' width grows with
depth: the wrapping effect of interval arithmetic through |W|; measured in docs/oracle.md), an op outside the
table, a custom ``autograd.Function`` around a kink.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from nsverify.errors import TooManyPieces
from nsverify.oracle.context import poll_deadline
from nsverify.oracle.enclosure import PRECISION_BITS, Unsupported, enclose


@dataclass
class TouchedLayer:
    call: int  # the ReLU call's number among the program's ATen calls
    kinks: int  # kink touches (exact zeros of its input)
    channels: list  # the touched channels
    direction: dict  # {coordinate of w: -1 or +1}: strictly inside every row of P_l
    shape: tuple


@dataclass
class Lemma2Pair:
    """not_member: an identity pair relu(y) - relu(-y) (Park, Chun and Lee, Lemma 2) with y exactly 0 at the
    point, y = slope * w[j] + c, and w[j] reaching no other kink or tie: the Clarke set's projection on coordinate
    j is one number D_j, and the exact AD's entry j is D_j - delta with delta enclosed away from 0."""

    coordinate: int
    calls: tuple  # the pair's two ReLU calls
    touches: int
    delta: tuple  # (lo, hi) floats: an enclosure of (true - AD) on coordinate j
    stats: dict = field(default_factory=dict)


@dataclass
class Enclosed:
    layers: list  # TouchedLayer
    relu_calls: int
    pools: list  # enclosure.PoolCall
    stats: dict = field(default_factory=dict)


class Imprecise(str):
    """A reason to decline that more bits may remove: an undecided ReLU sign or max-pool tie."""


def decide(fn, w: torch.Tensor, tracker=None) -> Enclosed | Lemma2Pair | str:
    """The enclosed Theorem 8 decision for ``fn`` at ``w``, or the reason (a string) why it declines. The run is
    made at each precision of :data:`~nsverify.oracle.enclosure.PRECISION_BITS` in turn, the next one only when
    the last left a sign or a tie undecided (:class:`Imprecise`)."""
    for i, bits in enumerate(PRECISION_BITS):
        got = _decide_at(fn, w, bits, tracker)
        if not isinstance(got, Imprecise) or i == len(PRECISION_BITS) - 1:
            if isinstance(got, (Enclosed, Lemma2Pair)):
                got.stats["enclosure_bits"] = bits
            return str(got) if isinstance(got, Imprecise) else got
    raise AssertionError("unreachable")  # pragma: no cover


def _decide_at(fn, w: torch.Tensor, bits: int, tracker=None) -> Enclosed | Lemma2Pair | str:
    """:func:`decide` at one precision (the products keep ``bits`` bits of their activations)."""
    if tracker is not None:
        tracker.update(stage=f"enclosures: a float64 run keeping {bits} bits")
    try:
        res, _eng = enclose(fn, w, bits)
    except Unsupported as e:
        partial = getattr(e, "partial", None)
        first = None if partial is None else next((r for r in partial.relus if r.undecided), None)
        return Imprecise(f"{_undecided(first)}; then: {e}") if first is not None else f"enclosures: {e}"
    except TooManyPieces:  # the time limit: the caller reports it
        raise
    except Exception as e:  # noqa: BLE001 - a program the rules cannot run: the exact route decides
        return f"enclosures: the run failed ({type(e).__name__}: {e})"
    poll_deadline()
    paired = {r.call for r in res.relus if r.pair is not None}
    calls = {r.call: r for r in res.relus}
    for a, b, _z, _n, _coord in res.pairs:
        for c in (a, b):  # the pair's outputs must be read only by its difference
            if res.consumers.get(calls[c].output_id, 0) != 1:
                return (f"enclosures: the ReLU outputs of the pair relu(y) - relu(-y) (calls {a}, {b}) are read "
                        "elsewhere")
    for r in res.relus:
        if r.call in paired and r.undecided:  # y may be exactly 0 there: AD's 0 against the identity's 1, unknown
            return Imprecise(f"enclosures: ReLU call {r.call} of a pair relu(y) - relu(-y) has {r.undecided} entries "
                             "whose enclosure contains 0 but is not the point 0")
    touched_pairs = [p for p in res.pairs if p[3]]
    if touched_pairs:
        return _lemma2(res, touched_pairs, paired)
    for r in res.relus:
        if r.call in paired:
            continue  # relu(y) - relu(-y) = y: smooth, whatever y's sign
        if r.undecided:
            return Imprecise(_undecided(r))
    for p in res.pools:
        if p.mixed:
            return Imprecise(f"enclosures: max pool call {p.call} has {p.mixed} windows where different functions "
                             f"may tie (first: sample, channel, window {p.first_mixed})")
    layers = []
    for r in res.relus:
        poll_deadline()
        if r.call in paired:
            continue
        n = int(r.touches.sum())
        if not n:
            continue
        b = r.bias
        if b is None:
            return (f"enclosures: ReLU call {r.call} sits at its kink on {n} entries, but its input has no own "
                    "additive parameter (a bias or BatchNorm shift added last) to certify Park's cone with")
        if any(res.consumers.get(t, 0) != 1 for t in b["chain"]):
            return (f"enclosures: ReLU call {r.call}: the value its bias is added to is read more than once, so "
                    "the bias is not the layer's own parameter")
        coords = b["coords"]
        if bool((res.uses[coords] != 1).any()):
            return (f"enclosures: ReLU call {r.call}: its bias parameter is read by more than one op, so it is "
                    "not the layer's own parameter")
        dim = b["dim"]
        t = r.touches.movedim(dim, 0).reshape(r.touches.shape[dim], -1).any(dim=1)
        chans = torch.nonzero(t).reshape(-1).tolist()
        if len(coords) != r.touches.shape[dim]:
            return f"enclosures: ReLU call {r.call}: its bias does not have one entry per channel"
        sign = -1 if b["sign"] > 0 else 1  # move every touched entry to ReLU's left side (AD's derivative 0)
        layers.append(TouchedLayer(r.call, n, chans, {int(coords[c]): sign for c in chans}, r.shape))
    stats = {"ops": res.ops, "dependent_ops": res.dependent_ops, "relu_calls": len(res.relus),
             "float_only_ties": {"relu": sum(r.float_only for r in res.relus),
                                 "max_pool": sum(p.float_only for p in res.pools)},
             "analytic_ops": sorted(res.analytic),
             "pools": [{"call": p.call, "windows": p.windows, "tied": p.tied, "identical": p.identical,
                        "zero_ad": p.zero_ad} for p in res.pools]}
    return Enclosed(layers, len(res.relus), res.pools, stats)


def _lemma2(res, touched_pairs, paired) -> Lemma2Pair | str:
    """not_member from one identity pair at its kink (see :class:`Lemma2Pair`), or why not."""
    if len(touched_pairs) != 1:
        return "enclosures: several Lemma 2 pairs at their kink (one coordinate decides only one)"
    a, b, _z, touches, coord = touched_pairs[0]
    if coord is None:
        return ("enclosures: a Lemma 2 pair relu(y) - relu(-y) sits at its kink, but y is not one coordinate of w "
                "plus a constant (the not_member certificate needs that)")
    j, _slope = coord
    chunk = next((i for i, (lo, hi) in enumerate(res.chunks) if lo <= j < hi), None)
    if chunk is None:
        return "enclosures: the Lemma 2 pair's coordinate is not in a parameter"
    for r in res.relus:
        if r.call in paired:
            continue
        if (int(r.touches.sum()) or r.undecided) and chunk in r.orig:
            return (f"enclosures: the Lemma 2 pair's coordinate {j} also reaches ReLU call {r.call}, which has a kink "
                    "or an undecided sign")
    for p in res.pools:
        if (p.mixed or p.zero_ad) and chunk in p.orig:
            return f"enclosures: the Lemma 2 pair's coordinate {j} also reaches a tied max pool (call {p.call})"
    if res.tangent_lost is not None:
        return f"enclosures: the Lemma 2 direction meets {res.tangent_lost}, which has no tangent rule"
    if res.output_tan is None:
        return "enclosures: the Lemma 2 direction does not reach the program's output"
    m, r = res.output_tan
    m = float(m.reshape(-1)[0])
    r = 0.0 if r is None else float(r.reshape(-1)[0])
    lo, hi = m - r, m + r
    if not (lo > 0 or hi < 0):
        return f"enclosures: the Lemma 2 pair's effect on the output, [{lo:.3g}, {hi:.3g}], is not away from 0"
    # the tangent was seeded with +1 at the touches of z = y; y = slope * w[j] + c: d/dw_j = slope * (that)
    s_ = coord[1]
    d = (lo * s_, hi * s_) if s_ > 0 else (hi * s_, lo * s_)
    return Lemma2Pair(j, (a, b), touches, d, {"pairs": len(res.pairs), "ops": res.ops})


def _undecided(r) -> str:
    return (f"enclosures: ReLU call {r.call} has {r.undecided} of {_numel(r.shape)} input entries whose enclosure "
            "contains 0 but is not the point 0 (a kink or a near one: not decided by float enclosures)")


def _numel(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n
