"""nsverify.strategies / nsverify.strategies.netspec: exact ties, exactness in every dtype, shrinking, bad input."""

from dataclasses import replace
from fractions import Fraction

import pytest
import torch
from hypothesis import HealthCheck, Phase, find, given, settings
from hypothesis import strategies as st

from nsverify.ad import Activation
from nsverify.errors import InexactError, UnknownOpError
from nsverify.registry import RuleError, Rules, parse_rule
from nsverify.strategies import devices, dtypes, exact_range_check, near_ties, networks, tie_points, ulp
from nsverify.strategies.netspec import check_exact, representable, sum_exact_in

FAST = settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))


def first(strategy, cond=lambda s: True, n=200):
    """The first generated example satisfying cond (no shrinking: fast)."""
    return find(
        strategy,
        cond,
        settings=settings(
            max_examples=n,
            database=None,
            deadline=None,
            phases=[Phase.generate],
            derandomize=True,
            suppress_health_check=list(HealthCheck),
        ),
    )


def test_representable_edges():
    assert representable(Fraction(2047), torch.float16)
    assert representable(Fraction(2048), torch.float16)
    assert not representable(Fraction(2049), torch.float16)
    assert not representable(Fraction(65536), torch.float16)  # above float16's largest finite value
    assert representable(Fraction(255), torch.bfloat16) and not representable(Fraction(257), torch.bfloat16)
    assert not representable(Fraction(1, 3), torch.float64)
    assert representable(Fraction(1, 2**24), torch.float16)  # smallest subnormal
    assert not representable(Fraction(1, 2**25), torch.float16)
    assert sum_exact_in([Fraction(1024), Fraction(1023)], torch.float16)
    assert not sum_exact_in([Fraction(2048), Fraction(1)], torch.float16)


@FAST
@given(st.data())
def test_forced_ties_are_exact_in_fraction_and_dtype(data):
    dtype = data.draw(st.sampled_from([torch.float32, torch.bfloat16, torch.float64]))
    spec = data.draw(tie_points(networks(depth=(1, 3)), dtype=dtype))
    assert spec.forced and spec.dtype_checked
    found = {(s.kind, s.layer, s.index) for s in spec.sites()}
    for s in spec.forced:
        assert (s.kind, s.layer, s.index) in found
        if s.kind == "kink":
            assert s.value in spec.layers[s.layer].activation.breakpoints
    deepest = max(s.layer for s in spec.forced)
    assert check_exact(spec, dtype, upto=deepest).ok


def test_float16_ties_exact_when_checked():
    spec = first(
        tie_points(
            networks(depth=(1, 1), kinds=("linear",), batch=(1, 2)), kinds=("kink",), dtype=torch.float16
        )
    )
    assert spec.dtype_checked == "float16"
    rec: list = []
    with torch.no_grad():
        spec.build(torch.float16)(spec.inputs(torch.float16), record=rec)
    s = spec.forced[0]
    assert Fraction(rec[s.layer][0][s.index].item()) == s.value


@pytest.mark.parametrize("kind", ["pool_equal", "pool_dup", "pool_dead"])
def test_pool_tie_kinds(kind):
    spec = first(
        tie_points(
            networks(depth=(1, 2), pooling=("maxpool",), activations=("relu",)), kinds=(kind,), ties=(1, 1)
        )
    )
    (site,) = spec.forced
    assert site.kind == "pool" and len(site.members) >= 2
    trace = spec.exact()
    vals = {trace.a[site.layer][m] for m in site.members}
    assert len(vals) == 1
    if kind == "pool_dead":
        assert vals == {0}


def test_several_ties_across_layers():
    spec = first(
        tie_points(networks(depth=(2, 3), activations=("relu",)), ties=(2, 3), kinds=("kink",)),
        lambda s: len({t.layer for t in s.forced}) >= 2 and len(s.forced) >= 2,
    )
    assert len(spec.forced) >= 2


def test_shrinks_to_minimal_network():
    spec = find(networks(), lambda s: True, settings=settings(database=None))
    assert len(spec.layers) == 1 and spec.batch == 1 and spec.in_kind == "linear"
    assert spec.layers[0].out == 1 and spec.layers[0].act == "relu"
    assert all(v == 0 for v in spec.x)


def test_shrinks_toward_fewer_ties():
    spec = find(
        tie_points(networks(depth=(1, 2), batch=(1, 2))),
        lambda s: True,
        settings=settings(database=None, suppress_health_check=list(HealthCheck)),
    )
    assert len(spec.forced) == 1 and len(spec.layers) == 1


@FAST
@given(st.data())
def test_near_ties_are_off_kink_by_ulps(data):
    dtype = data.draw(st.sampled_from([torch.float32, torch.bfloat16]))
    spec = data.draw(near_ties(networks(depth=(1, 2)), dtype=dtype))
    (site,) = spec.forced
    trace = spec.exact()
    kink = spec.meta["kink"]
    off = trace.y[site.layer][site.index] - kink
    assert off != 0 and off == spec.meta["offsets"][0]
    assert abs(off) <= 4 * ulp(kink, dtype)


def test_module_builds_in_every_dtype_and_matches_exact():
    spec = first(tie_points(networks(depth=(2, 2), kinds=("conv2d",)), dtype=torch.float64))
    for dt in (torch.float64, torch.float32):
        net = spec.build(dt)
        assert all(p.dtype == dt for p in net.parameters())
        fn, w = spec.loss_fn(dt)
        assert fn(w).shape == ()


def test_dtypes_and_devices():
    assert find(dtypes(), lambda d: True) == torch.float32
    assert "cpu" == find(devices(), lambda d: True)
    if not torch.cuda.is_available():
        from hypothesis.errors import NoSuchExample

        with pytest.raises(NoSuchExample):
            find(devices(), lambda d: d == "cuda", settings=settings(max_examples=20, database=None))


def test_impossible_float16_range_is_a_clear_error():
    with pytest.raises(InexactError, match="float16"):
        exact_range_check(2**17, 0, torch.float16)
    with pytest.raises(InexactError, match="bfloat16"):
        exact_range_check(255, 3, "bfloat16")
    with pytest.raises(InexactError, match="float16"):
        first(tie_points(networks(max_int=2**17), dtype=torch.float16))


def test_unknown_activation_is_a_clear_error():
    with pytest.raises(UnknownOpError, match="relu"):
        find(networks(activations=("rleu",)), lambda s: True)


@pytest.mark.parametrize("bad, err, msg", [
    ("relu_s:1/2", UnknownOpError, r"op\[rule,...\]"),
    ("pl:relu6:left,left", UnknownOpError, r"relu\[value=1/2\]"),
    ("relu[first]", RuleError, "kink rules"), ("relu6[left]x", RuleError, r"\]"),
    ("amax", UnknownOpError, "elementwise"),
])
def test_bad_activation_keys_are_clear_errors(bad, err, msg):
    with pytest.raises(err, match=msg):
        Activation(bad)
    with pytest.raises(err, match=msg):
        find(networks(activations=("relu", bad)), lambda s: True)


def test_activation_variants_are_ops_with_rules():
    r = parse_rule
    plain, half = Activation("relu"), Activation("relu[value=1/2]")
    assert (plain.base, plain.variant, plain.rules) == ("relu", False, (r("left"),))
    assert (half.base, half.variant, half.rules, half.ad_derivatives()) == ("relu", True, (r("value=1/2"),),
                                                                          (Fraction(1, 2),))
    # hardsigmoid (slopes 0 | 1/6 | 0): the even split at both kinks is 1/12
    assert Activation("hardsigmoid[mix=1/2]").ad_derivatives() == (Fraction(1, 12), Fraction(1, 12))
    assert Activation("hardtanh[right,left]").ad_derivatives() == (1, 1)
    assert Activation("abs").ad_derivatives() == (0,) and Activation("identity").rules == ()
    # the variant's float backward is the rule's derivative
    x = torch.tensor([-3.0, 3.0, 0.0], dtype=torch.float64, requires_grad=True)
    (g,) = torch.autograd.grad(Activation("hardsigmoid[right,left]").torch_fn()(x).sum(), x)
    assert g.tolist() == [1 / 6, 1 / 6, 1 / 6]
    (g,) = torch.autograd.grad(half.torch_fn()(x).sum(), x)
    assert g.tolist() == [0.0, 1.0, 0.5]


def test_spec_conventions_are_the_layers_rules():
    spec = first(networks(depth=(2, 2), activations=("relu",)))
    r = parse_rule
    with_acts = lambda *acts: replace(spec, layers=tuple(replace(L, act=a) for L, a in zip(spec.layers, acts)))  # noqa: E731
    assert with_acts("relu", "relu").rules() == {}  # PyTorch's rules: nothing to tell the oracle
    assert with_acts("relu[value=1/2]", "relu[value=1/2]").rules() == {"relu": (r("value=1/2"),)}
    assert with_acts("hardtanh[left,left]", "abs").rules() == {"hardtanh": (r("left"), r("left"))}
    assert with_acts("relu", "relu[value=1]").rules() is None  # one op, two rule sets: not expressible
    assert isinstance(with_acts("relu[value=1/2]", "abs").rules(), Rules)
    with pytest.warns(DeprecationWarning, match=r"NetSpec.rules\(\)"):
        assert with_acts("relu[value=1/2]", "abs").conventions() == {"relu": (r("value=1/2"),)}
