"""nsverify.strategies.blocks: block networks (residual, BatchNorm, LayerNorm, attention) with planted exact ties,
and the property suite's references catching a wrong oracle."""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction

import pytest
import torch
from hypothesis import HealthCheck, Phase, find, given, settings
from hypothesis import strategies as st
from torch import nn

import nsverify
from nsverify.errors import NsverifyError
from nsverify.strategies import BLOCK_KINDS, BlockNetSpec, NetSpec, block_networks, networks
from nsverify.strategies.blocks import BN_EPS, _bn_scales_of, float_trace, unit_values, verify_ties
from properties import test_blocks as pb

D = torch.float64
FAST = settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))


def first(strategy, cond=lambda s: True, n=200):
    return find(strategy, cond, settings=settings(max_examples=n, database=None, deadline=None,
                                                   phases=[Phase.generate], derandomize=True,
                                                   suppress_health_check=list(HealthCheck)))


def _state(spec):
    return {name: vals for name, _, vals in spec.state}


def _dyadic(v: Fraction) -> bool:
    return v.denominator & (v.denominator - 1) == 0


def test_networks_without_blocks_is_unchanged_and_blocks_draws_a_block_net():
    assert isinstance(first(networks()), NetSpec)
    for kind in BLOCK_KINDS:
        spec = first(networks(blocks=(kind,)))
        assert isinstance(spec, BlockNetSpec) and {b.kind for b in spec.blocks} == {kind}, spec.describe()


@FAST
@given(spec=block_networks())
def test_values_are_dyadic_inputs_integers_and_ties_exact(spec):
    st_ = _state(spec)
    assert all(_dyadic(v) for vals in st_.values() for v in vals)
    assert all(v.denominator == 1 for v in spec.x)
    assert spec.ties and verify_ties(spec) == []
    rec = float_trace(spec)
    for t in spec.ties:
        if t.kind == "pool":
            continue
        u = t.unit[0]
        lin = "head" if t.where == "head_act" else t.where.rsplit(".", 1)[0] + (
            ".fc1" if t.where.endswith(".act") else ".lin1")
        w = st_[f"{lin}.weight"]
        row = math.prod(next(s for n, s, _ in spec.state if n == f"{lin}.weight")[1:])
        assert all(v == 0 for v in w[u * row:(u + 1) * row])  # the zeroed row
        y = unit_values(rec[t.where], u)
        if t.kind == "kink":
            assert torch.equal(y, torch.zeros_like(y)), t  # exactly 0 at every sample and position
        else:
            assert bool((y < 0).all()), t


@FAST
@given(spec=block_networks(blocks=("batchnorm",), tie_kinds=("kink", "dead")))
def test_batch_norm_scales_are_rational_and_exact_in_float64(spec):
    for name, m in spec.build(D).named_modules():
        if isinstance(m, nn.BatchNorm2d):
            scales = _bn_scales_of(spec, name)
            assert m.eps == BN_EPS and scales and all(s in (1, Fraction(1, 2), 2, Fraction(3, 2)) for s in scales)
            # sqrt(var + eps) in float64 is the exact rational scale
            got = torch.sqrt(m.running_var + m.eps).tolist()
            assert [Fraction(g) for g in got] == scales


@FAST
@given(spec=block_networks(blocks=("residual", "batchnorm"), pooling=("maxpool",), tie_kinds=("pool",),
                           image=(2, 3), batch=(1, 2)))
def test_pool_ties_are_one_function_of_the_parameters(spec):
    """Every member of a planted pool tie has the same float64 gradient in the parameters: repeated patches."""
    tie = next(t for t in spec.ties if t.kind == "pool")
    net = spec.build(D)
    rec = {}
    h = net.blocks[0].pool.register_forward_hook(lambda m, i, o: rec.__setitem__("y", i[0]))
    net(spec.inputs())
    h.remove()
    params = list(net.parameters())
    grads = [torch.cat([g.reshape(-1) for g in torch.autograd.grad(rec["y"][m], params, retain_graph=True,
                                                                     allow_unused=True, materialize_grads=True)])
             for m in tie.members]
    assert len(grads) >= 2 and all(torch.equal(g, grads[0]) for g in grads[1:])


def test_a_broken_tie_is_reported():
    spec = first(block_networks(tie_kinds=("kink",), ties=(1, 1)))
    (t,) = spec.ties
    assert verify_ties(spec) == []
    # give the tied unit a bias 1/4 (after BatchNorm: beta): the pre-activation leaves the kink
    blk = t.where.rsplit(".", 1)[0]
    names = {n for n, _, _ in spec.state}
    bias = ("head.bias" if t.where == "head_act" else f"{blk}.fc1.bias" if t.where.endswith(".act")
            else f"{blk}.norm1.bias" if f"{blk}.norm1.bias" in names else f"{blk}.lin1.bias")
    state = tuple((n, s, tuple(Fraction(1, 4) if n == bias and i == t.unit[0] else v for i, v in enumerate(vals)))
                  for n, s, vals in spec.state)
    broken = dataclasses.replace(spec, state=state)
    assert verify_ties(broken) and "not exactly 0" in verify_ties(broken)[0]


def test_shrinks_to_one_small_block():
    spec = find(block_networks(), lambda s: True, settings=settings(database=None, deadline=None,
                                                                    suppress_health_check=list(HealthCheck)))
    assert len(spec.blocks) == 1 and spec.batch == 1 and len(spec.ties) == 1, spec.describe()


@pytest.mark.parametrize("bad", [dict(blocks=("lstm",)), dict(tie_kinds=("nope",)), dict(blocks=()),
                                 dict(tie_units=("middle",)), dict(bn_scales=(0,))])
def test_bad_options_raise(bad):
    with pytest.raises(NsverifyError):
        first(block_networks(**bad), n=1)


def test_rational_networks_are_exact_in_float64():
    spec = first(block_networks(blocks=("batchnorm",), bn_scales=(1, 2), image=(2, 2), losses=("squared",)),
                 lambda s: s.rational)
    net = spec.build(D)
    g = pb._grad(spec, net)
    v = nsverify.check_module(net, spec.loss_fn(), spec.inputs(), spec.targets(), progress=False, time_limit=30)
    assert v.exact_ad is not None and tuple(v.exact_ad) == tuple(Fraction(x) for x in g.tolist())


# ------------------------------------------------------------------------------------ the references can fail
def _segment_spec():
    def ok(s):
        (t,) = s.ties
        return s.loss != "cross_entropy" and pb._other_zeros(s, skip=[(t.where, t.unit[0])]) == 0
    return first(block_networks(blocks=("residual", "layernorm"), batch=(1, 1), ties=(1, 1), tie_kinds=("kink",),
                                tie_units=("head",), pooling=("none",), losses=("linear",)), ok)


@pytest.mark.parametrize("tamper", ["none", "flip_ad", "member_outside"])
def test_the_segment_reference_catches_a_wrong_oracle(monkeypatch, tamper):
    spec = _segment_spec()
    real = nsverify.check_module

    def wrong(model, loss_fn, x, t, ad=None, **kw):
        v = real(model, loss_fn, x, t, ad=ad, **kw)
        if tamper == "flip_ad" and ad is None and v.status == "member":
            return dataclasses.replace(v, status="not_member")
        if tamper == "member_outside" and ad is not None:
            return dataclasses.replace(v, status="member")
        return v

    monkeypatch.setattr(nsverify, "check_module", wrong)
    monkeypatch.setattr(pb, "COUNTS", {})  # keep the tampered verdicts out of the suite's printed counts
    statuses = []

    @settings(max_examples=1, phases=[Phase.generate], database=None, deadline=None)
    @given(s=st.just(spec))
    def run(s):
        statuses.append(pb._segment(s, lambda k, v: None, "test").status)

    if tamper == "none":
        run()
        assert statuses == ["member"]
    else:
        with pytest.raises(AssertionError, match="AD = g0 is an end" if tamper == "flip_ad" else "yet member"):
            run()


def test_the_theorem_row_catches_a_wrong_not_member(monkeypatch):
    real = nsverify.check_module
    monkeypatch.setattr(nsverify, "check_module",
                        lambda *a, **kw: dataclasses.replace(real(*a, **kw), status="not_member"))
    monkeypatch.setattr(pb, "COUNTS", {})
    run = settings(max_examples=2, phases=[Phase.generate], database=None, deadline=None)
    with pytest.raises(AssertionError, match="Theorem 4/6"):
        given(spec=block_networks(blocks=("layernorm",), pooling=("none",)))(run(
            pb.test_blocks_theorem_never_not_member.hypothesis.inner_test))(nsverify_record=lambda k, v: None)
