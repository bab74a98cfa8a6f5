"""Layered decisions for networks: exact certificates, read from the layer structure, that AD is a Clarke
subgradient -- before any enumeration (Park, Chun and Lee, *What does automatic differentiation compute for
neural networks?*, Sec. 3).

:func:`decide` takes a ``torch.nn.Sequential`` of affine layers (``Linear``, ``Conv1d``, ``Conv2d``), pointwise
activations whose AD derivative at every kink is a one-sided derivative (the registry's ``park_layer`` entries,
selected by that capability: ``ReLU`` takes the left one at 0, ``ReLU6`` the right one at 6), max pools
(``MaxPool1d``/``MaxPool2d``, first tied index) and shape layers
(``Flatten``, ``Identity``), differentiated with respect to its parameters, with a loss that is smooth at the
network's output.  That is Park et al.'s Condition 2 (Condition 1 without pools).  Two theorems of the paper
then decide membership from exact data, without enumerating pieces:

* **Theorem 5** (fully connected layers, no max pool): AD is a Bouligand (so Clarke) subgradient if, at every
  layer l where some pre-activation sits exactly on a kink, the columns of z_{l-1} (one per sample) are linearly
  independent.  Certificate ``park_theorem5``: for each such layer, B columns' indices and the B x B minor of
  z_{l-1}, nonsingular modulo a prime (so over the integers, so over Q).
* **Theorem 8** (Algorithm 1): AD is a Bouligand subgradient if, for every layer l, the open cone P_l is
  non-empty.  P_l has one row per kink touch (AD's side times the gradient pi_i of the pre-activation in the
  layer's own parameters w_l) and one per tied max-pool entry outside T_j (AD's chosen entry minus the other,
  each times AD's activation derivative).  Certificate ``park_theorem8``: every layer's rows and an exact
  rational direction strictly inside all of them.  Rows on disjoint parameters (different units and channels,
  whose ties cannot interact) are separate cones, each decided alone.

Everything is exact: the activations come from the exact reverse-mode trace (which also gives the tested
vector, PyTorch's AD evaluated exactly), kink touches are exact zeros, ties are exact equalities, the cones are
decided by an LP whose answer is re-checked in rationals (:mod:`nsverify.oracle.cones`).  T_j (tied entries
whose AD derivatives in w_{1:l} coincide, which need no constraint) is taken only where that equality is proved:
entries with a zero activation derivative, or equal rows when no earlier layer has parameters; every other tied
entry gets its row, which can only shrink P_l (so a non-empty P_l stays a proof).

When a premise fails (another structure, a kink in the loss, an empty or undecided P_l), :func:`decide` returns
the reason and the plain enumeration decides.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import torch

from nsverify.errors import UnsupportedOpError
from nsverify.oracle.cones import ConeStats, primitive
from nsverify.oracle.context import Site, poll_deadline, polled
from nsverify.oracle.park.algorithm1 import pool_index_windows
from nsverify.oracle.park.cone import LayerCheck, p_nonempty
from nsverify.oracle.park.graph import module_layers
from nsverify.oracle.park.kinks import ad_derivative, kink_sign, kink_touches
from nsverify.oracle.park.layers import (
    Capture,
    Declined,
    Layer,
    Layered,
    param_offsets,
    pi_rows,
    pool_indices,
)
from nsverify.oracle.park.rank import independent_columns

F = Fraction

# ------------------------------------------------------------------------------------------------ local slopes
def _act_derivative(L: Layer, y) -> Fraction:
    """AD's derivative of the layer's activation at the exact pre-activation y (identity when none)."""
    if L.act is None:
        return F(1)
    try:
        return ad_derivative(L.act_entry, y)
    except ValueError as e:
        raise Declined(f"layer {L.name}: {e}") from None


def _touches(L, y) -> list:
    """``(index, breakpoint index)`` of every entry of the layer's pre-activation ``y`` on a kink of its
    activation (:func:`.kinks.kink_touches`), or :class:`Declined`."""
    try:
        got = kink_touches(L.act_entry, y.reshape(-1).tolist())
    except ValueError as e:
        raise Declined(f"layer {L.name}: {e}") from None
    return [(tuple(int(j) for j in np.unravel_index(p, y.shape)), i) for p, i in got]


def _kink_sign(L, i: int) -> int:
    try:
        return kink_sign(L.act_entry, i)
    except ValueError as e:
        raise Declined(f"layer {L.name}: {e}") from None


def _scaled(row: dict, c) -> dict:
    return {k: c * v for k, v in row.items() if c * v != 0}


def _minus(a: dict, b: dict) -> dict:
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, F(0)) - v
    return {k: v for k, v in out.items() if v != 0}


def _pool_dims(m) -> int:
    return 1 if isinstance(m, torch.nn.MaxPool1d) else 2


def _tied_windows(L: Layer):
    """Yield (sample, window position in the pool's output, [flat input index of each tied maximal entry]) for
    every window of the layer's max pool with two or more maximal entries (windows from the registry's one
    geometry, :func:`nsverify.registry.windows.pool_window_table`).

    Exact: the pool's input is replaced by the ranks of its exact values (equal values, equal ranks; order kept),
    so a float max over ranks (integers far below 2^53) finds exactly the exact ties."""
    m = L.pool
    a = L.seen["pool_in"]
    if m.ceil_mode:
        raise Declined(f"layer {L.name}: a ceil_mode max pool")
    nsp = _pool_dims(m)
    batched = a.ndim == nsp + 2
    ab = a if batched else a[None]
    flat = ab.reshape(-1).tolist()
    values = sorted(set(polled(flat)))  # one sort of a full-width pool's input: seconds, and no poll inside
    poll_deadline()
    rank = {v: r + 1 for r, v in enumerate(polled(values))}
    codes = torch.tensor([rank[v] for v in polled(flat)], dtype=torch.float64).reshape(ab.shape)
    wins = _channel_windows(tuple(ab.shape[1:]), m)  # (windows, K), -1 = padding
    valid = wins >= 0
    oshape = L.seen["pool_out"].shape[1:] if batched else L.seen["pool_out"].shape
    for b in range(ab.shape[0]):
        flat = codes[b].reshape(-1)
        vals = torch.where(valid, flat[wins.clamp(min=0)], torch.zeros((), dtype=torch.float64))
        top = vals.max(dim=1, keepdim=True).values
        tied = (vals == top) & valid
        for wi in torch.nonzero(tied.sum(dim=1) >= 2).reshape(-1).tolist():
            pos = np.unravel_index(wi, oshape)
            yield b, tuple(int(x) for x in pos), [int(wins[wi, c]) for c in torch.nonzero(tied[wi]).reshape(-1)]


def _channel_windows(per_sample: tuple, m) -> torch.Tensor:
    """(C * windows, K) flat indices into one sample (C, *spatial) of every window of max pool ``m``, channel
    by channel; -1 for padding."""
    return pool_index_windows(per_sample, m.kernel_size, m.stride if m.stride is not None else m.kernel_size,
                              m.padding, m.dilation)


# ------------------------------------------------------------------------------------------------------- checks
def _algorithm1(L: Layer, ev, offsets: dict, earlier_params: bool, sites: list) -> LayerCheck:
    """Park et al.'s Algorithm 1 for one layer, exactly: the rows of P_l (see the module docstring)."""
    chk = LayerCheck(L.name)
    pi = pi_rows(L, offsets)
    rows: list = []
    if L.act is not None:
        y = L.seen["act_in"]
        for idx, i in _touches(L, y):
            poll_deadline()
            chk.kink_touches += 1
            sites.append(Site(L.act_name, -1, idx, L.act_entry.breakpoints[i], extra={"layer": L.name}))
            s = _kink_sign(L, i)  # AD's side at this kink: the row keeps y on AD's piece
            rows.append({k: s * v for k, v in pi(idx, y.shape).items()})
    if L.pool is not None:
        a = L.seen["pool_in"]
        batched = a.ndim == _pool_dims(L.pool) + 2
        ab = a if batched else a[None]
        yb = L.seen.get("act_in", a).reshape(ab.shape)
        plane = int(np.prod(ab.shape[2:]))  # AD's indices are flat within one channel's plane
        pout = L.seen["pool_out"]
        # AD's indices, shaped like the pool's output (a 1-d pool runs as a 2-d one: (B, C, 1, L) indices)
        chosen = L.seen["pool_idx"].reshape(pout.shape if batched else (1,) + pout.shape)
        for b, pos, tied in _tied_windows(L):
            poll_deadline()
            chk.tied_windows += 1
            c = pos[0]
            star = c * plane + int(chosen[(b,) + pos])  # AD's entry: the exact interpreter's own index
            if star not in tied:
                raise Declined(f"layer {L.name}: AD's max-pool index is not a maximal entry of its window")
            unflat = [(b,) + tuple(int(x) for x in np.unravel_index(f, ab.shape[1:])) for f in tied]
            sq = (b,) + tuple(int(x) for x in np.unravel_index(star, ab.shape[1:]))
            d_star = _act_derivative(L, yb[sq])
            r_star = (pi(sq, ab.shape) if d_star == 1 else _scaled(pi(sq, ab.shape), d_star)) if d_star else {}
            nontrivial = False
            for q in unflat:
                if q == sq:
                    continue
                d_q = _act_derivative(L, yb[q])
                if d_star == 0 and d_q == 0:
                    continue  # both AD derivatives are 0 in every parameter: T_j
                r_q = (pi(q, ab.shape) if d_q == 1 else _scaled(pi(q, ab.shape), d_q)) if d_q else {}
                if not earlier_params and r_q == r_star:
                    continue  # no earlier parameters: equal rows are equal derivatives in w_{1:l}: T_j
                rows.append(_minus(r_star, r_q))
                nontrivial = True
            chk.nontrivial_windows += nontrivial
            loc = ((b,) if batched else ()) + pos
            sites.append(Site(type(L.pool).__name__.lower(), -1, loc, ab[sq],
                              extra={"layer": L.name, "tied": [list(q) for q in unflat]}))
    keys, uniq = set(), []
    for r in rows:
        pr = primitive(r) if r else r
        key = tuple(sorted(pr.items()))
        if key not in keys:
            keys.add(key)
            uniq.append(pr)
    chk.rows = uniq
    return chk


def _decide_cone(chk: LayerCheck, stats: ConeStats) -> None:
    """An exact witness for the layer's cone (:func:`.cone.p_nonempty`, component by component: rows on disjoint
    parameters), or :class:`Declined`."""
    if not chk.rows:
        return
    if any(not r for r in chk.rows):
        raise Declined(f"layer {chk.name}: a tie or kink whose row is zero in the layer's parameters "
                       "(P_l is empty: Algorithm 1 cannot certify it)")
    chk.p = p_nonempty(chk.rows, stats)
    if chk.p.status == "empty":
        raise Declined(f"layer {chk.name}: P_l is empty (exact Gordan certificate): Algorithm 1's "
                       "sufficient condition fails")
    if chk.p.status != "nonempty":
        raise Declined(f"layer {chk.name}: the LP could not decide P_l exactly")


# ---------------------------------------------------------------------------------------------------- decision
def decide(ev, model, loss_fn, targets, *, tracker=None) -> Layered | str:
    """A layered certificate for ``loss_fn(model(inputs), targets)`` w.r.t. the model's trainable parameters
    (``ev`` is that program's Evaluation), or the reason (a string) why the shortcut does not apply.  The engine's
    one decision: Theorems 5 and 8 on the layers the module readings find (a ``Sequential``'s chain, a traced
    graph), else Theorem 8 on the layers read from the autograd graph (:func:`.optrace.theorem8`)."""
    try:
        return _decide(ev, model, loss_fn, targets, tracker)
    except Declined as e:
        first = str(e)
    if "P_l is empty" in first:  # the autograd-graph rows are a restriction of the same rows: empty too
        return first
    from nsverify.oracle.park import optrace

    if tracker is not None:
        tracker.update(stage="layers: the autograd graph")
    try:
        got = optrace.theorem8(ev, model, optrace.slot_offsets(model), tracker)
    except Declined as e:
        return f"{first}; layers read from the autograd graph: {e}"
    got.modules_declined = first
    return got


def _decide(ev, model, loss_fn, targets, tracker) -> Layered:
    from nsverify.errors import InexactError

    layers, calls, sequential = module_layers(model)
    offsets = param_offsets(model)
    owned = [id(p) for L in layers for p in L.parameters()]
    if len(owned) != len(set(owned)):
        raise Declined("two layers share a parameter: Park et al.'s layers need disjoint parameters")
    if ev.ran("reverse"):
        raise Declined("the exact reverse trace already ran without the layer hooks")
    if tracker is not None:
        tracker.update(stage="layers: exact reverse mode")
    try:
        with Capture(model, calls) as cap, pool_indices(cap):
            exact_ad, value = ev.reverse()
    except (InexactError, UnsupportedOpError) as e:
        raise Declined(f"the exact reverse trace failed: {e}") from None
    cap.fill(layers)
    if cap.output is None:
        raise Declined("the model's output was not seen in the exact trace")
    _check_loss_smooth(cap.output, loss_fn, targets, ev)
    stats = ConeStats()
    sites: list = []
    if tracker is not None:
        tracker.update(stage="layers: Park et al.'s conditions")
    # Theorem 5 is about fully connected networks: a Sequential of Linear layers without max pools
    fc = sequential and all(L.pool is None and isinstance(L.affine, torch.nn.Linear) for L in layers)
    if fc:
        got = _theorem5(layers, offsets, sites)
        if got is not None:
            return Layered("park_theorem5", got, sites, tuple(exact_ad), value, stats)
        sites.clear()
    checks = []
    earlier = False
    for k, L in enumerate(layers):
        poll_deadline()  # a layer without touches or ties polls nowhere else
        if tracker is not None:  # how far the decision got, should the time limit run out in this layer
            tracker.layers(k, len(layers), found=len(sites), left=0)
        chk = _algorithm1(L, ev, offsets, earlier, sites)
        if tracker is not None:
            tracker.layers(k, len(layers), found=len(sites), left=chk.kink_touches + chk.tied_windows)
        _decide_cone(chk, stats)
        checks.append(chk)
        if any(id(p) in offsets for p in L.parameters()):
            earlier = True
    if tracker is not None:
        tracker.layers(len(layers), len(layers), found=len(sites), left=0)
    return Layered("park_theorem8", checks, sites, tuple(exact_ad), value, stats)


def _theorem5(layers, offsets, sites) -> list | None:
    """Theorem 5's premise at every layer with a kink touch (None when it fails: Theorem 8 is tried next)."""
    checks = []
    for L in layers:
        chk = LayerCheck(L.name)
        if L.act is not None:
            y = L.seen["act_in"]
            touched = _touches(L, y)
            chk.kink_touches = len(touched)
            for idx, i in touched:
                sites.append(Site(L.act_name, -1, idx, L.act_entry.breakpoints[i], extra={"layer": L.name}))
        if chk.kink_touches:
            m = L.affine
            if m is None or id(m.weight) not in offsets:
                return None  # the theorem varies the layer's weight matrix A_l
            z = L.affine_input
            if z.ndim != 2:
                return None
            cols = independent_columns(z)
            if cols is None:
                return None
            chk.rank_columns = cols
            chk.rank_minor = [[z[b, c] for c in cols] for b in range(z.shape[0])]
        checks.append(chk)
    return checks


def _check_loss_smooth(out, loss_fn, targets, ev) -> None:
    """The loss must be smooth at the network's exact output: no kink or tie site when it is evaluated in forward
    mode with respect to the output entries."""
    from nsverify.errors import NsverifyError
    from nsverify.oracle.interp import Evaluation

    if out is None or out.dtype != object:
        raise Declined("the network's output could not be read exactly")
    shape = out.shape
    vals = out.reshape(-1).tolist()
    if not all(isinstance(v, Fraction) for v in vals):
        raise Declined("the network's output is not an exact rational vector")
    template = torch.zeros(shape, dtype=ev.w.dtype)
    try:
        r = Evaluation(lambda o: loss_fn(o, targets), template, values=vals).forward()
    except NsverifyError as e:
        raise Declined(f"the loss could not be evaluated exactly at the network's output: {e}") from None
    if r.sites:
        raise Declined(f"the loss has a kink or tie at the network's output ({r.sites[0].op}): Park et al.'s "
                       "theorems need a smooth loss there")
