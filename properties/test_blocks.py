"""Real-model blocks at exact ties: residual blocks (convolution or Linear, identity or 1x1 shortcut, eval-mode
BatchNorm with rational scales), pre-norm LayerNorm MLPs and softmax attention, with a ReLU head, drawn by
``networks(blocks=...)`` with planted ties (:mod:`nsverify.strategies.blocks`). Each verdict of
``check_module(..., wrt="parameters")`` is compared with a computation that shares no code with the oracle:

* **Enclosure**: the exact AD the oracle tested (a Fraction or a rigorous interval per entry) contains PyTorch's
  float64 autograd gradient, up to float64's rounding on these small networks.
* **Park et al.'s Theorems 4 and 6** (Sec. 3; networks of Condition 2, Sec. 2.2, which covers residual adds and
  normalization layers): without non-trivial max pools, with a bias at every ReLU (a Linear bias: distinct;
  a convolution bias or a BatchNorm beta: shared per channel) and ReLU'(0) = 0 (one lambda = 0 at every kink),
  PyTorch's AD is in the Clarke subdifferential: ``not_member`` is a wrong verdict.
* **Enumeration** for one planted tie: batch 1, the head's ReLU unit with zero weight row and zero bias, no
  other ReLU input at 0. Near the point the loss is f0 (unit off) where the unit's pre-activation h <= 0 and f1
  (unit on) where h >= 0, both smooth, and dh/dbias = 1, so the Clarke set is the segment [grad f0, grad f1];
  both ends are float64 autograd gradients (ReLU as PyTorch runs it, and with the unit switched on). Points past
  either end are outside: ``member`` is wrong there. In a network float64 computes exactly (no LayerNorm,
  attention or irrational BatchNorm scale), the segment's midpoint is a member: ``not_member`` is wrong there.
* **Sampling** for max-pool ties (outside Theorems 4 and 6): gradients at random nearby points are Bouligand
  gradients in the limit; a ``not_member`` verdict whose tested vector lies in their convex hull is wrong.

``unknown`` is allowed (the oracle may run out of time, or an interval may straddle a tie); the verdict counts
are printed under "nsverify records".
"""

from __future__ import annotations

from collections import Counter
from fractions import Fraction

import numpy as np
import torch
from hypothesis import assume, given, note, settings
from hypothesis import strategies as st
from scipy.optimize import linprog

import nsverify
from nsverify.strategies import BLOCK_KINDS, networks
from nsverify.strategies.blocks import block_networks, float_trace

D = torch.float64
#: the oracle's time limit per call (seconds): a network it cannot decide in time is "unknown", and counted
LIMIT = 5.0
FAST = settings(max_examples=10, deadline=None)
COUNTS: dict = {}


def _count(row: str, status: str, record) -> None:
    c = COUNTS.setdefault(row, Counter())
    c[status] += 1
    record(f"blocks {row}", dict(sorted(c.items())))


def _check(spec, net, ad=None):
    return nsverify.check_module(net, spec.loss_fn(), spec.inputs(), spec.targets(), wrt="parameters", ad=ad,
                                 progress=False, time_limit=LIMIT, on_limit="unknown")


def _grad(spec, net) -> torch.Tensor:
    """PyTorch's float64 gradient of the loss in the parameters, flattened in named_parameters() order."""
    params = [p for _, p in net.named_parameters()]
    loss = spec.loss_fn()(net(spec.inputs()), spec.targets())
    return torch.cat([g.reshape(-1) for g in torch.autograd.grad(loss, params)])


def _switched_on(net, where: str, unit: int):
    """A forward hook that replaces the ReLU ``where``'s output at ``unit`` by the unit's input where it is >= 0:
    the piece with the unit on (derivative 1 at 0)."""
    mod = dict(net.named_modules())[where]

    def hook(m, inp, out):
        y = inp[0]
        on = torch.where(y >= 0, y, torch.zeros_like(y))
        mask = torch.zeros_like(y, dtype=torch.bool)
        mask[..., unit] = True
        return torch.where(mask, on, out)

    return mod.register_forward_hook(hook)


def _assert_encloses(v, g: torch.Tensor, spec):
    if v.exact_ad is None:  # an unknown verdict whose time ran out before the exact AD was complete
        assert v.status == "unknown", v.explain()
        return
    assert len(v.exact_ad) == g.numel()
    tol = 1e-9 * (1 + g.abs().max().item())
    for j, (e, f) in enumerate(zip(v.exact_ad, g.tolist())):
        lo, hi = (e.lo, e.hi) if hasattr(e, "lo") else (e, e)
        assert float(lo) - tol <= f <= float(hi) + tol, (
            f"exact AD entry {j} = [{lo}, {hi}] does not contain float64 autograd's {f!r}\n{spec.describe()}")


def _other_zeros(spec, skip=()) -> int:
    """ReLU inputs (float64) within 1e-9 of 0, other than the units in ``skip`` ((where, unit) pairs)."""
    n = 0
    for where, y in float_trace(spec).items():
        if not where.endswith(("act", "act1", "act2")):
            continue
        near = y.abs() <= 1e-9
        for w, u in skip:
            if w == where:
                if y.dim() == 4:
                    near[:, u] = False
                else:
                    near[..., u] = False
        n += int(near.sum())
    return n


# ------------------------------------------------------------------------------------------------------------
@FAST
@given(spec=networks(blocks=BLOCK_KINDS, pooling=("none",), batch=(1, 2)))
def test_blocks_theorem_never_not_member(spec, nsverify_record):
    """Park's Theorems 4 and 6: every ReLU has a bias, no max pool, ReLU'(0) = 0: AD is a Clarke element."""
    note(spec.describe())
    net = spec.build(D)
    v = _check(spec, net)
    _count("theorem 4/6 (AD)", v.status, nsverify_record)
    note(v.explain())
    assert v.status != "not_member", f"Park's Theorem 4/6 premise holds, yet not_member:\n{v.explain()}"
    _assert_encloses(v, _grad(spec, net), spec)


def _segment(spec, record, row: str):
    """One kink, its Clarke set enumerated: [g0, g1]; points past either end are outside, the midpoint inside."""
    note(spec.describe())
    (tie,) = spec.ties
    assume(_other_zeros(spec, skip=[(tie.where, tie.unit[0])]) == 0)
    net = spec.build(D)
    g0 = _grad(spec, net)
    h = _switched_on(net, tie.where, tie.unit[0])
    try:
        g1 = _grad(spec, net)
    finally:
        h.remove()
    step = g1 - g0
    assume(step.abs().max().item() > 1e-6)  # the loss depends on the tied unit's output
    v = _check(spec, net)
    _count(f"{row} (AD)", v.status, record)
    note(v.explain())
    assert v.status != "not_member", f"AD = g0 is an end of the Clarke segment [g0, g1]:\n{v.explain()}"
    _assert_encloses(v, g0, spec)
    for lam in (-1, 2):
        out = _check(spec, net, ad=(g0 + lam * step).tolist())
        _count(f"{row} (g0 + {lam} (g1 - g0))", out.status, record)
        assert out.status != "member", f"g0 + {lam} (g1 - g0) is outside [g0, g1], yet member:\n{out.explain()}"
    if spec.rational:
        if v.exact_ad is not None:
            assert all(Fraction(e) == f for e, f in zip(v.exact_ad, g0.tolist())), "float64 is exact here"
        out = _check(spec, net, ad=(g0 + step / 2).tolist())
        _count(f"{row} (midpoint)", out.status, record)
        assert out.status != "not_member", f"the midpoint of [g0, g1] is inside, yet not_member:\n{out.explain()}"
    return v


@FAST
@given(spec=block_networks(blocks=BLOCK_KINDS, batch=(1, 1), ties=(1, 1), tie_kinds=("kink",), tie_units=("head",),
                           pooling=("none",)))
def test_blocks_head_tie_segment(spec, nsverify_record):
    _segment(spec, nsverify_record, "head tie")


@FAST
@given(spec=block_networks(blocks=("residual", "batchnorm"), batch=(1, 1), ties=(1, 1), tie_kinds=("kink",),
                           tie_units=("head",), pooling=("none",), bn_scales=(1, Fraction(1, 2), 2), tokens=(1, 2),
                           image=(2, 2)))
def test_blocks_head_tie_segment_rational(spec, nsverify_record):
    """The same in networks float64 computes exactly: the exact AD is float64's, and the midpoint is a member."""
    assume(spec.rational)
    _segment(spec, nsverify_record, "head tie, rational")


def _hull_distance(t: np.ndarray, S: np.ndarray) -> float:
    """The infinity-norm distance from t to the convex hull of the rows of S (a float LP)."""
    m, n = S.shape
    # variables: lambda (m), r; minimize r with |S^T lambda - t| <= r, sum lambda = 1, lambda >= 0
    c = np.r_[np.zeros(m), 1.0]
    A = np.block([[S.T, -np.ones((n, 1))], [-S.T, -np.ones((n, 1))]])
    b = np.r_[t, -t]
    res = linprog(c, A_ub=A, b_ub=b, A_eq=np.r_[np.ones(m), 0.0][None], b_eq=[1.0],
                  bounds=[(0, None)] * m + [(0, None)], method="highs")
    return float(res.x[-1]) if res.success else float("inf")


@FAST
@given(data=st.data())
def test_blocks_pool_ties(data, nsverify_record):
    """Max-pool ties (repeated input patches; dead and kinked units under a pool): outside Theorems 4 and 6, so
    both decided verdicts may occur; the exact AD must enclose float64's, and a not_member verdict must survive
    the sampled Bouligand gradients."""
    spec = data.draw(block_networks(blocks=("residual", "batchnorm"), depth=(1, 1), batch=(1, 2), width=(1, 2),
                                    image=(2, 3), pooling=("maxpool",), ties=(1, 2)))
    assume(spec.layout == "image" and spec.blocks[0].pool is not None)
    note(spec.describe())
    net = spec.build(D)
    v = _check(spec, net)
    _count("max-pool ties (AD)", v.status, nsverify_record)
    note(v.explain())
    g = _grad(spec, net)
    _assert_encloses(v, g, spec)
    if v.status == "not_member":
        params = [p for _, p in net.named_parameters()]
        w0 = [p.detach().clone() for p in params]
        gen = torch.Generator().manual_seed(0)
        samples = []
        for _ in range(64):
            with torch.no_grad():
                for p, p0 in zip(params, w0):
                    p.copy_(p0 + 2.0**-30 * torch.randn(p0.shape, generator=gen, dtype=D))
            samples.append(_grad(spec, net).numpy())
        with torch.no_grad():
            for p, p0 in zip(params, w0):
                p.copy_(p0)
        dist = _hull_distance(g.numpy(), np.array(samples))
        assert dist > 1e-6, f"not_member, yet AD is {dist:g} from the hull of nearby gradients:\n{v.explain()}"
