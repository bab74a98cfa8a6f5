"""The registry: exact one-sided derivatives, Clarke sets, exact kink inputs, selection semantics."""
from fractions import Fraction

import mpmath
import pytest
import torch

import nsverify
from nsverify import registry
from nsverify.errors import InexactError, TooManyPieces, UnknownOpError
from nsverify.rational import hull_weights, in_hull
from nsverify.registry import Rule, RuleError, parse_rule

DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64]
REQUIRED = ["relu", "leaky_relu", "relu6", "hardtanh", "hardsigmoid", "hardswish", "elu", "selu", "abs",
            "clamp", "clamp_tensor", "maximum", "minimum", "amax", "amin", "max", "min", "max_dim", "min_dim",
            "median", "max_pool1d", "max_pool2d", "adaptive_max_pool2d", "sort", "topk"]


def test_required_primitives_are_registered():
    assert set(REQUIRED) <= set(registry.names())
    assert len(registry.names("elementwise")) >= 10


def _mp(v):
    return mpmath.mpf(v.numerator) / v.denominator if isinstance(v, Fraction) else mpmath.mpf(v)


@pytest.mark.parametrize("name", registry.names("elementwise"))
def test_one_sided_derivatives_match_mpmath_difference_quotients(name):
    entry = registry.get(name)
    with mpmath.workdps(60):
        h = mpmath.mpf(10) ** -30
        for b in entry.breakpoints:
            left, right = entry.one_sided(b)
            x = _mp(b)
            fx = entry.mp_value(x)
            dq_left = (fx - entry.mp_value(x - h)) / h
            dq_right = (entry.mp_value(x + h) - fx) / h
            assert abs(dq_left - _mp(left)) < mpmath.mpf(10) ** -25, (name, b, "left")
            assert abs(dq_right - _mp(right)) < mpmath.mpf(10) ** -25, (name, b, "right")
            lo, hi = entry.clarke(b)
            assert _mp(lo) == min(_mp(left), _mp(right)) and _mp(hi) == max(_mp(left), _mp(right))
        # and the value is continuous at each kink (a Lipschitz piecewise function)
        for b in entry.breakpoints:
            assert abs(entry.mp_value(_mp(b) - h) - entry.mp_value(_mp(b))) < mpmath.mpf(10) ** -25


def test_exact_values_where_rational():
    assert registry.get("hardswish").one_sided(Fraction(3)) == (Fraction(3, 2), Fraction(1))
    assert registry.get("hardswish").one_sided(Fraction(-3)) == (Fraction(0), Fraction(-1, 2))
    assert registry.get("hardsigmoid").one_sided(Fraction(-3)) == (Fraction(0), Fraction(1, 6))
    assert registry.get("leaky_relu").one_sided(Fraction(0)) == (Fraction(1, 100), Fraction(1))
    left, right = registry.get("selu").one_sided(Fraction(0))
    with mpmath.workdps(40):
        assert isinstance(left, mpmath.mpf) and abs(left - registry.SELU_SCALE * registry.SELU_ALPHA) < 1e-35


@pytest.mark.parametrize("dtype", DTYPES)
def test_kink_inputs_are_exact_in_every_dtype(dtype):
    for name in registry.names("elementwise"):
        entry = registry.get(name)
        x = registry.kink_inputs(entry, dtype)
        assert x.dtype == dtype
        assert [Fraction(v) for v in x.double().tolist()] == list(entry.breakpoints)
    for name in registry.names("selection"):
        for case in registry.get(name).cases:
            t = case.tensor(dtype)
            assert [Fraction(v) for v in t.double().flatten().tolist()] == list(case.values)


def test_inexact_values_raise():
    with pytest.raises(InexactError, match="not exactly representable"):
        registry.exact_tensor([Fraction(1, 3)], torch.float32)
    with pytest.raises(InexactError):
        registry.exact_tensor([2049], torch.float16)
    with pytest.raises(InexactError):
        registry.exact_tensor([257], torch.bfloat16)


@pytest.mark.parametrize("dtype", DTYPES)
def test_leaky_relu_slope_rounding_is_honest(dtype):
    """0.01 is not dyadic: PyTorch returns 0.01 rounded to the dtype (through float32 for 16-bit kernels)."""
    x = torch.zeros(1, dtype=dtype, requires_grad=True)
    (g,) = torch.autograd.grad(torch.nn.functional.leaky_relu(x).sum(), x)
    got = Fraction(g.item())
    assert got != Fraction(1, 100)
    assert got == registry.round_to_dtype(Fraction(1, 100), dtype)


@pytest.mark.parametrize("name", [n for n in registry.names("selection")])
def test_selection_cases_are_consistent(name):
    entry = registry.get(name)
    assert entry.cases, name
    for case in entry.cases:
        x = case.tensor(torch.float64)
        y = entry.torch_fn(x, **case.extra).flatten()
        # the forward value of each output is the window's selected (rank-r) entry
        for j, win in enumerate(case.windows):
            vals = sorted((case.values[i] for i in win.indices), reverse=win.direction == "max")
            assert Fraction(y[j].item()) == vals[win.rank], (name, case.label, j)
        # Bouligand pieces are gradients of the tie; the even split is in the Clarke set
        assert len(case.pieces) >= 1
        assert case.in_clarke(case.rules["even"]), (name, case.label)
        for rule in ("first", "last"):
            assert case.in_clarke(case.rules[rule]), (name, case.label, rule)
        assert isinstance(case.torch_rule, registry.Rule) and case.torch_rule.at_tie
        vec = case.rule_vector(case.torch_rule, entry.indices_fn(x) if entry.indices_fn else None)
        assert vec is None or len(vec) == len(case.values)


def test_bouligand_pieces_of_a_max():
    case = registry.selection_case("t", [1, 1, 0], (3,), [registry.Window((0, 1, 2))], "even")
    assert set(case.pieces) == {(1, 0, 0), (0, 1, 0)}
    assert case.rules["even"] == (Fraction(1, 2), Fraction(1, 2), 0)
    assert case.directional([1, 2, 0]) == 2 and case.directional([2, 1, 0]) == 2
    assert case.directional([-1, -2, 0]) == -1


def test_too_many_pieces_is_a_clear_error():
    with pytest.raises(TooManyPieces, match="orderings"):
        registry.selection_case("big", [0] * 12, (12,), [registry.Window(tuple(range(12)), r, "max")
                                                          for r in range(12)], "first")


def test_hull_membership_is_exact():
    square = [(1, 0), (-1, 0), (0, 1), (0, -1)]
    assert in_hull((0, 0), square) and in_hull((Fraction(1, 2), Fraction(1, 2)), square)
    assert not in_hull((Fraction(1, 2), Fraction(1, 2) + Fraction(1, 10**12)), square)
    simplex = [(1, 0, 0), (0, 1, 0), (0, 0, 1)]
    w = hull_weights((Fraction(1, 3),) * 3, simplex)
    assert w == [Fraction(1, 3)] * 3
    assert not in_hull((Fraction(1, 3), Fraction(1, 3), Fraction(1, 3) + Fraction(1, 2**30)), simplex)
    assert not in_hull((0.0, 0.0, 0.0), simplex)  # torch's clamp-tensor zero is outside such a set
    assert in_hull((2, 2), [(1, 1), (3, 3)]) and not in_hull((2, 3), [(1, 1), (3, 3)])


def test_lookup_and_errors():
    with pytest.raises(UnknownOpError, match="Did you mean"):
        registry.get("reluu")
    assert registry.by_aten("aten.relu.default").name == "relu"
    assert registry.by_aten("aten.max.dim").name == "max_dim"
    assert registry.by_aten("aten.max.default").name == "max"
    assert registry.by_aten("aten.mm.default") is None


def test_pool_windows_match_pytorch_output_sizes():
    for h, w, geom in [(7, 8, dict(kernel=3, stride=2, padding=1)), (7, 8, dict(kernel=2, ceil_mode=True)),
                       (9, 9, dict(kernel=(2, 3), stride=(1, 2), padding=(1, 1), dilation=(2, 1)))]:
        (ho, wo), wins = registry.pool2d_windows(h, w, **geom)
        g = dict(geom)
        k = g.pop("kernel")
        out = torch.nn.functional.max_pool2d(torch.zeros(1, 1, h, w), k, **g)
        assert out.shape[-2:] == (ho, wo) and len(wins) == ho * wo
    assert [list(r) for r in registry.adaptive_windows(3, 2)] == [[0, 1], [1, 2]]


# ----------------------------------------------------------------------------------------------------------
# PyTorch's rules as Rules, and the op keys
# ----------------------------------------------------------------------------------------------------------
def test_pytorch_rules_are_rules_one_per_kink():
    r = parse_rule
    # measured on torch 2.13 CPU (the conventions matrix re-measures them): relu'(0) = 0 is the left side,
    # abs'(0) = 0 the even split of -1 and 1, clamp's derivative 1 at both bounds the middle piece
    assert registry.torch_rule("relu") == (r("left"),) and registry.torch_rule("abs") == (r("mid"),)
    assert registry.torch_rule("hardtanh") == (r("left"), r("right"))
    assert registry.torch_rule("clamp") == (r("inside"), r("inside"))
    assert registry.torch_rule("max_pool2d") == r("first") and registry.torch_rule("amax") == r("even")
    assert registry.torch_rule("topk") == r("returned") and registry.torch_rule("clamp_tensor") == r("inside")
    for name in registry.names("elementwise"):
        e = registry.get(name)
        assert len(e.torch_rules) == len(e.breakpoints) and all(x.at_kink for x in e.torch_rules)
    with pytest.raises(RuleError, match="tie rule"):
        registry.Elementwise("bad", (), None, (Fraction(0),), (registry.lin(0), registry.lin(1)), ("first",))
    with pytest.raises(RuleError, match="kink rule"):
        registry.Selection("bad", (), None, "left")


def test_kink_derivatives_under_rules():
    hs = registry.get("hardsigmoid")  # slopes 0 | 1/6 | 0
    assert hs.kink_derivative(0) == 0 and hs.kink_derivative(1) == 0  # PyTorch: left at -3, right at 3
    assert hs.kink_derivative(0, parse_rule("right")) == Fraction(1, 6)
    assert hs.kink_derivative(0, parse_rule("mix=1/4")) == Fraction(1, 24)
    assert hs.kink_derivative(1, parse_rule("value=7")) == 7
    clamp = registry.get("clamp")
    assert [clamp.rule_piece(i) for i in (0, 1)] == [1, 1]  # inside: the middle piece at both bounds
    assert clamp.kink_derivative(0) == clamp.kink_derivative(1) == 1
    relu = registry.get("relu")
    assert relu.derivative_piece(0, parse_rule("value=1")) == 1 and relu.derivative_piece(0) == 0
    assert registry.get("abs").derivative_piece(0) is None  # slope 0 is neither side's
    with mpmath.workdps(40):
        left, right = registry.get("selu").one_sided(Fraction(0))
        assert abs(registry.get("selu").kink_derivative(0, parse_rule("mid")) - (left + right) / 2) < 1e-30


def test_tie_case_rule_vectors():
    topk = registry.get("topk")
    (case,) = topk.cases
    x = case.tensor(torch.float64)
    returned = topk.indices_fn(x)
    assert returned == [2, 3]  # the later two of the tied entries 0, 2, 3 (measured, torch 2.13 CPU)
    # cotangent (1, 2): weight 1 on index 2, 2 on index 3 -- what PyTorch's autograd returns
    assert case.rule_vector(parse_rule("returned"), returned) == (0, 0, 1, 2)
    (g,) = torch.autograd.grad((topk.torch_fn(x.requires_grad_()) * case.cotangent_tensor(torch.float64)).sum(), x)
    assert [Fraction(v) for v in g.tolist()] == [0, 0, 1, 2]
    with pytest.raises(Exception, match="returned index"):
        case.rule_vector("returned")
    even, first = case.rules["even"], case.rules["first"]
    assert case.rule_vector("hybrid=1/2") == tuple((f + e) / 2 for f, e in zip(first, even))
    clamp = registry.get("clamp_tensor").cases
    # x == min (output 0) and x == max (output 1): all of each output's weight on x, the first row
    assert clamp[0].rule_vector("inside") == (1, 2, 3, 0, 0, 0, 0, 0, 0)
    assert clamp[1].rule_vector("inside") is None  # x < min == max: x is not tied with the output


def test_op_keys_and_rules_of_aten_ops():
    assert registry.op_key("max.dim") == "max_dim" and registry.op_key("aten.max.default") == "max"
    assert registry.op_key("max_pool2d_with_indices") == "max_pool2d"
    assert registry.op_key("max_pool3d_with_indices") == "max_pool2d"  # the same first-index kernel rule
    assert registry.op_key("adaptive_max_pool1d") == "adaptive_max_pool2d"  # PyTorch runs it as the 2-d op
    assert registry.op_key("mm") == "mm"
    assert registry.selection_rule_for("max.dim") == parse_rule("first")
    assert registry.selection_rule_for("max") == parse_rule("even")
    with pytest.raises(UnknownOpError, match="Known ops"):
        registry.selection_rule_for("mm")
    lr = registry.elementwise_for("leaky_relu", (0.25,))
    assert lr.one_sided(Fraction(0)) == (Fraction(1, 4), 1) and lr.torch_rules == (parse_rule("left"),)
    ht = registry.elementwise_for("hardtanh", (0.0, 6.0))
    assert ht.name == "relu6" and ht.breakpoints == (0, 6)
    th = registry.elementwise_for("threshold", (1.0, 5.0))
    assert th.breakpoints == (1,) and th.kink_derivative(0) == 0 and th.value(Fraction(1)) == 1
    cl = registry.clamp_for(None, 2)
    assert cl.breakpoints == (2,) and cl.kink_derivative(0) == 1  # clamp_max: the left (identity) piece
    with pytest.raises(UnknownOpError):
        registry.elementwise_for("sigmoid")


# ----------------------------------------------------------------------------------------------------------
# rules keyed by op: parse_rules (Rules) and the op[rule,...] syntax
# ----------------------------------------------------------------------------------------------------------
def test_parse_rules_accepts_the_registry_names_and_every_rule_form():
    got = registry.parse_rules({"abs": "mid", "relu": "value=1/2", "max_pool2d": "hybrid=0.5",
                                      "amax": "minimal", "hardtanh": ["left", "torch"], "threshold": 1,
                                      "max_dim": ("hybrid", 2), "leaky_relu": "torch"})
    assert got == {"abs": parse_rule("mix=1/2"), "relu": parse_rule("value=1/2"),
                   "max_pool2d": parse_rule("hybrid=1/2"), "amax": parse_rule("even"),
                   "hardtanh": (parse_rule("left"), parse_rule("right")), "threshold": parse_rule("value=1"),
                   "max_dim": Rule("hybrid", Fraction(2)), "leaky_relu": (parse_rule("left"),)}
    assert registry.parse_rules(None) == {} and registry.parse_rules(got) == got  # idempotent
    assert isinstance(got, registry.Rules) and registry.parse_rules(dict(got)) == got and hash(got) == hash(
        registry.parse_rules(dict(got)))


def test_rules_text_form_keywords_and_union():
    r = parse_rule
    got = registry.parse_rules("relu[value=1/2]; hardtanh[left, right], max_pool2d[even]")
    assert got == {"relu": r("value=1/2"), "hardtanh": (r("left"), r("right")), "max_pool2d": r("even")}
    assert str(got) == "relu[value=1/2]; hardtanh[left,right]; max_pool2d[even]"
    assert registry.parse_rules(str(got)) == got and hash(registry.parse_rules(str(got))) == hash(got)
    assert registry.Rules(relu=1) == registry.parse_rules({"relu": "value=1"}) == registry.parse_rules(["relu[1]"])
    assert (got | {"relu": "left"})["relu"] == r("left") and got["relu"] == r("value=1/2")  # immutable
    for bad, msg in [("relu", "brackets"), ("relu[]", "at least one rule"), ("kinky[left]", "Known ops")]:
        with pytest.raises((UnknownOpError, RuleError), match=msg):
            registry.parse_rules(bad)


def test_parse_conventions_is_a_deprecated_alias_of_parse_rules():
    with pytest.warns(DeprecationWarning, match="parse_rules"):
        got = registry.parse_conventions({"relu": 1})
    assert got == registry.parse_rules({"relu": 1})


@pytest.mark.parametrize("bad, err, msg", [
    ({"max_pool": "first"}, UnknownOpError, "Did you mean .*max_pool2d"),
    ({"maxpool": "first"}, UnknownOpError, "Known ops: abs, adaptive_max_pool1d, adaptive_max_pool2d"),
    ({"max.dim": "first"}, UnknownOpError, "max_dim"),
    ({"abs": "first"}, RuleError, "abs: first is a tie rule.*kink rules: left, right"),
    ({"max_pool2d": "left"}, RuleError, "max_pool2d: left is a kink rule.*tie rules: first, last, even"),
    ({"relu": "lft"}, RuleError, "Did you mean left"),
    ({"relu6": ["left"]}, RuleError, "relu6 has 2 kinks but 1 rules"),
    ([("relu", 0)], Exception, "mapping"),
])
def test_parse_rules_rejects_others_naming_the_valid_ones(bad, err, msg):
    with pytest.raises(err, match=msg):
        registry.parse_rules(bad)


def test_parse_op_rules():
    r = parse_rule
    assert registry.parse_op_rules("relu") == ("relu", None)
    assert registry.parse_op_rules("relu[value=1/2]") == ("relu", (r("value=1/2"),))
    assert registry.parse_op_rules(" hardtanh[left, right] ") == ("hardtanh", (r("left"), r("right")))
    assert registry.parse_op_rules("hardsigmoid[mix=1/2]") == ("hardsigmoid", (r("mid"), r("mid")))
    assert registry.parse_op_rules("relu6[torch]") == ("relu6", (r("left"), r("right")))
    for bad, msg in [("relu_s:1/2", r"op\[rule,...\]"), ("pl:hardtanh:left,left", r"op\[rule,...\]"),
                     ("max_pool2d[first]", "elementwise"), ("relu[first]", "tie rule"), ("relu[left", r"\]"),
                     ("relu[]", "at least one rule"), ("hardtanh[left,left,left]", "2 kinks but 3")]:
        with pytest.raises((UnknownOpError, RuleError), match=msg):
            registry.parse_op_rules(bad)


def test_recorded_violations_live_on_the_entries():
    v = registry.violation("clamp_tensor", "min == max > x", "float16", release="2.13.0")
    assert v is not None and v.kind == "no" and "neither bound" in v.reason
    assert v.until == "2.14.0" and registry.violation("clamp_tensor", "min == max > x", "float16", "2.14.1") is None
    assert registry.fixed_violation("clamp_tensor", "min == max > x", "float32", "2.14.1") is v
    assert registry.fixed_violation("clamp_tensor", "min == max > x", "float32", "2.13.0") is None
    assert registry.violation("leaky_relu", "x=0", "float32").kind == "rounding"
    assert registry.violation("leaky_relu", "x=0", "bfloat16") is None  # rounds upward, into the Clarke set
    assert registry.violation("amax", "3 ties", "float64").kind == "rounding"
    assert registry.violation("amax", "2 ties", "float64") is None
    with pytest.raises(Exception, match="violation kind"):
        registry.Violation("maybe", "no such kind")


# ----------------------------------------------------------------------------------------------------------
# the public APIs take the registry's names and rules
# ----------------------------------------------------------------------------------------------------------
def _grad(fn, w, rules):
    v = nsverify.check_gradient(fn, w, rules=rules)
    return v.status, [Fraction(x) for x in v.tested]


def test_check_gradient_accepts_every_spelling():
    w = torch.zeros(1, dtype=torch.float64)
    absf = lambda t: t.abs().sum()  # noqa: E731
    assert _grad(absf, w, {"abs": "mid"}) == _grad(absf, w, {"abs": 0}) == ("member", [0])
    assert _grad(absf, w, {"abs": "value=0"}) == _grad(absf, w, {"abs": ("mix", 0.5)}) == ("member", [0])
    assert _grad(lambda t: torch.relu(t).sum(), w, {"relu": "value=1/2"}) == ("member", [Fraction(1, 2)])
    assert _grad(lambda t: torch.relu(t).sum(), w, {"relu": "value=2"})[0] == "not_member"  # outside [0, 1]
    w4 = torch.zeros(4, dtype=torch.float64)
    pool = lambda t: torch.nn.functional.max_pool2d(t.reshape(1, 1, 2, 2), 2).sum()  # noqa: E731
    assert _grad(pool, w4, None) == ("member", [1, 0, 0, 0])  # PyTorch: the first index
    assert _grad(pool, w4, {"max_pool2d": "minimal"}) == ("member", [Fraction(1, 4)] * 4)
    # hybrid(1/2) = 1/2 first + 1/2 even: 1/2 + 1/8 on the first entry, 1/8 on the others
    eighth = Fraction(1, 8)
    assert _grad(pool, w4, {"max_pool2d": "hybrid=0.5"}) == ("member", [Fraction(5, 8), eighth, eighth, eighth])
    assert _grad(pool, w4, {"max_pool2d": "last"}) == ("member", [0, 0, 0, 1])
    with pytest.raises(UnknownOpError, match="max_pool2d"):
        nsverify.check_gradient(pool, w4, rules={"max_pool": "minimal"})
    with pytest.raises(RuleError, match="Valid rules"):
        nsverify.check_gradient(absf, w, rules={"abs": "zero"})
    relu = lambda t: torch.relu(t).sum()  # noqa: E731
    assert _grad(relu, w, "relu[value=1/2]") == _grad(relu, w, nsverify.Rules(relu="value=1/2"))  # the text form


def test_conventions_keyword_is_a_deprecated_alias_of_rules():
    """check_gradient / check_module / exact_gradient(conventions=...) keep working for one release, warning."""
    from nsverify.oracle.interp import exact_gradient

    w = torch.zeros(1, dtype=torch.float64)
    relu = lambda t: torch.relu(t).sum()  # noqa: E731
    with pytest.warns(DeprecationWarning, match=r"check_gradient\(conventions=...\) is deprecated"):
        v = nsverify.check_gradient(relu, w, conventions={"relu": 1})
    assert (v.status, [Fraction(x) for x in v.tested]) == _grad(relu, w, {"relu": 1}) == ("member", [1])
    with pytest.warns(DeprecationWarning, match="exact_gradient"):
        assert exact_gradient(relu, w, conventions={"relu": 1}) == (1,)
    net = torch.nn.Sequential(torch.nn.Linear(1, 1), torch.nn.ReLU()).double()
    torch.nn.init.zeros_(net[0].weight), torch.nn.init.zeros_(net[0].bias)
    x, y = torch.ones(1, 1, dtype=torch.float64), torch.zeros(1, 1, dtype=torch.float64)
    with pytest.warns(DeprecationWarning, match="check_module"):
        old = nsverify.check_module(net, torch.nn.functional.mse_loss, x, y, conventions={"relu": 1})
    new = nsverify.check_module(net, torch.nn.functional.mse_loss, x, y, rules={"relu": 1})
    assert old.status == new.status and old.tested == new.tested
    with pytest.raises(RuleError, match="both rules= and"):
        nsverify.check_gradient(relu, w, rules={"relu": 1}, conventions={"relu": 1})


# ----------------------------------------------------------------------------------------------------------
# rules and violations across torch releases
# ----------------------------------------------------------------------------------------------------------
def test_release_helpers():
    assert registry.release_of("2.13.0+cpu") == "2.13.0" and registry.release_of("2.15.0a0+git1") == "2.15.0"
    assert registry.release_of("2.10") == "2.10.0"
    assert registry.release_key("2.10.0") > registry.release_key("2.9.1")
    assert registry.installed_release() == registry.release_of(torch.__version__)
    with pytest.raises(Exception, match="not a torch release"):
        registry.release_key("2.x")


def test_rules_are_resolved_for_a_release():
    """clamp's scalar bounds: 1 (the middle piece, 'inside') up to torch 2.13, 0 from 2.14 on (left at the lower
    bound, right at the upper: hardtanh's rule)."""
    import dataclasses

    clamp = registry.get("clamp")
    old, new = dataclasses.replace(clamp, release="2.13.0"), dataclasses.replace(clamp, release="2.14.0")
    assert [str(r) for r in old.torch_rules] == ["inside", "inside"]
    assert [str(r) for r in new.torch_rules] == ["left", "right"]
    assert [old.kink_derivative(i) for i in (0, 1)] == [1, 1] and [new.kink_derivative(i) for i in (0, 1)] == [0, 0]
    assert clamp.rules_at("2.4.1") == old.torch_rules and clamp.rules_at("2.14.1") == new.torch_rules
    assert dataclasses.replace(new, release="2.13.0").torch_rules == old.torch_rules  # resolution is repeatable
    assert clamp.torch_rules == clamp.rules_at(registry.installed_release())
    case = next(c for c in registry.get("clamp_tensor").cases if c.label == "min == max > x")
    assert {m: str(r) for m, r in case.rules_at("2.13.0").items()} == {
        "eager": "inside", "func": "inside", "jvp": "last", "compile": "inside"}
    assert {str(r) for r in case.rules_at("2.14.0").values()} == {"last"}
    tie = next(c for c in registry.get("clamp_tensor").cases if c.label == "x == min, x == max")
    assert str(tie.rules_at("2.13.0")["eager"]) == "inside" and str(tie.rules_at("2.14.1")["jvp"]) == "even"


def test_rule_changes_and_violation_ranges_are_checked():
    from nsverify.errors import NsverifyError

    lin = registry.lin
    with pytest.raises(NsverifyError, match="starts from"):
        registry.Elementwise("t", (), None, (Fraction(0),), (lin(0), lin(1)), ("left",), rule_changes=(
            registry.RuleChange("2.5.0", "left", "right"), registry.RuleChange("2.6.0", "left", "mix=1/2")))
    with pytest.raises(NsverifyError, match="one rule each"):
        registry.Elementwise("t", (), None, (Fraction(0),), (lin(0), lin(1)), ("left",),
                             rule_changes=(registry.RuleChange("2.5.0", ("left", "left"), "right"),))
    with pytest.raises(NsverifyError, match="modes"):
        registry.RuleChange("2.5.0", "first", "last", modes=("backward",))
    with pytest.raises(NsverifyError, match="is empty"):
        registry.Violation("no", "a reason long enough to count", since="2.6.0", until="2.5.0")
    v = registry.Violation("no", "a reason long enough to count", ("float32",), since="2.5.0", until="2.7.0")
    assert [v.applies("float32", r) for r in ("2.4.1", "2.5.0", "2.6.0", "2.7.0")] == [False, True, True, False]
    assert not v.applies("float64", "2.6.0") and v.releases == "2.5.0 .. < 2.7.0"
