"""The registry as the one op table: a new elementwise op is one entry, found by the conventions matrix, the oracle
and the strategies; the OpInfo fields (ATen, nn module, functional names) and the families derived from the pieces;
the oracle's exact backward of every entry against PyTorch's own."""
import dataclasses
from fractions import Fraction

import pytest
import torch
from hypothesis import HealthCheck, given, settings

import nsverify
from nsverify import registry
from nsverify.conventions.matrix import run_matrix
from nsverify.errors import UnknownOpError, UnsupportedOpError
from nsverify.oracle.interp import exact_backprop, exact_gradient
from nsverify.oracle.tensor import supported_ops
from nsverify.registry import Elementwise, lin, parse_rule
from nsverify.strategies import networks, tie_points

F = Fraction


# ----------------------------------------------------------------------------------------------------------
# a new elementwise op, outside the registry: kinky(x) = x/2 - 1/2 for x <= 1, 2x - 2 for x >= 1 (a kink at 1 with
# slopes 1/2 and 2), as a torch custom op with its own backward op (PyTorch's rule at the kink: the left slope)
# ----------------------------------------------------------------------------------------------------------
@torch.library.custom_op("nsverify_test::kinky", mutates_args=())
def kinky(x: torch.Tensor) -> torch.Tensor:
    return torch.where(x > 1, 2 * x - 2, x / 2 - 0.5)


@torch.library.custom_op("nsverify_test::kinky_backward", mutates_args=())
def kinky_backward(grad: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return grad * torch.where(x > 1, 2.0, 0.5)


@kinky.register_fake
def _kinky_fake(x):
    return torch.empty_like(x)


@kinky_backward.register_fake
def _kinky_backward_fake(grad, x):
    return torch.empty_like(x)


def _save_input(ctx, inputs, output):
    ctx.save_for_backward(inputs[0])


kinky.register_autograd(lambda ctx, g: kinky_backward(g, ctx.saved_tensors[0]), setup_context=_save_input)


def kinky_entry() -> Elementwise:
    """The one registry entry the new op needs: ATen forward and backward names, pieces, PyTorch's rule."""
    return Elementwise("kinky", ("kinky",), kinky, (F(1),), (lin(F(1, 2), F(-1, 2)), lin(2, -2)), ("left",),
                       backward=("kinky_backward",), functionals=(f"{__name__}.kinky",),
                       doc="a test op: slopes 1/2 and 2 around the kink 1")


@pytest.fixture
def kinky_op():
    with registry.registered(kinky_entry()) as entry:
        yield entry
    assert "kinky" not in registry.names()


def test_registration_is_scoped():
    before = registry.version()
    with registry.registered(kinky_entry()):
        assert "kinky" in registry.names("elementwise") and "kinky" in supported_ops()
        assert registry.by_aten("aten.kinky.default").name == "kinky"
        assert registry.by_functional(kinky).name == "kinky"
        with pytest.raises(ValueError, match="registered twice"):
            registry.register(kinky_entry())
        clash = dataclasses.replace(kinky_entry(), name="kinky2", backward=("leaky_relu_backward",))
        with pytest.raises(ValueError, match="belong to 'leaky_relu'"):
            registry.register(clash)
        assert "kinky2" not in registry.names()
    assert "kinky" not in registry.names() and "kinky" not in supported_ops()
    assert registry.version() != before
    with pytest.raises(UnknownOpError):
        registry.parse_rules({"kinky": "left"})


def test_new_op_in_the_conventions_matrix(kinky_op):
    # eager mode (a torch custom op with register_autograd does not support torch.func transforms)
    results = run_matrix(["kinky"], dtypes=("float32", "float64"), modes=("eager",))
    assert len(results) == 2 and {(r.op, r.case) for r in results} == {("kinky", "x=1")}
    for r in results:
        assert r.derivative == [0.5] and r.rule == "left" and r.observed == str(parse_rule("left"))
        assert r.in_clarke == "yes" and r.as_expected and r.error is None
    # a rule outside the Clarke interval [1/2, 2] is told apart: the matrix's candidates are the entry's sides
    assert kinky_op.clarke(F(1)) == (F(1, 2), F(2))


def test_new_op_in_the_oracle_at_its_kink(kinky_op):
    # h(w) = kinky(1 + w) - kinky(1 - w) = 5w/2 on both sides of 0 (by hand: w/2 - (-2w) for w < 0, 2w - (-w/2) for
    # w > 0), so its Clarke set at 0 is {5/2}; AD with PyTorch's rule (1/2 at the kink) gives 1/2 + 1/2 = 1
    def h(w):
        return (kinky(1 + w) - kinky(1 - w)).sum()

    w = torch.zeros(1, dtype=torch.float64)
    v = nsverify.check_gradient(h, w)
    assert v.status == "not_member" and v.exact and v.exact_ad == (F(1),) and v.clarke == (F(5, 2), F(5, 2))
    assert exact_backprop(h, w) == (F(1),)  # the reverse mode: the entry's backward op, exactly
    # the rule value=5/4 at the kink gives 5/4 + 5/4 = 5/2, the Clarke set's one element
    assert nsverify.check_gradient(h, w, rules={"kinky": "value=5/4"}).status == "member"
    assert nsverify.check_gradient(h, w, rules={"kinky": "right"}).status == "not_member"

    # g(w) = kinky(w0 + w1) at (1/2, 1/2): the pieces' gradients (1/2, 1/2) and (2, 2), by hand; AD takes the first
    g = nsverify.check_gradient(lambda w: kinky(w.sum()), torch.tensor([0.5, 0.5], dtype=torch.float64))
    assert g.status == "member" and g.exact_ad == (F(1, 2), F(1, 2))
    assert sorted(tuple(b) for b in g.bouligand) == [(F(1, 2), F(1, 2)), (F(2), F(2))]


def test_new_op_in_the_strategies(kinky_op):
    specs = []

    @settings(max_examples=5, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(tie_points(networks(depth=(1, 2), kinds=("linear",), activations=["kinky"]), kinds=("kink",)))
    def draw(spec):
        specs.append(spec)

    draw()
    assert specs
    for spec in specs:
        assert {L.act for L in spec.layers} == {"kinky"}
        assert all(s.value == 1 for s in spec.forced if s.kind == "kink")
        fn, w = spec.loss_fn(torch.float64)
        v = nsverify.check_gradient(fn, w, on_limit="unknown", max_pieces=500, time_limit=5.0)
        assert v.status in ("member", "not_member", "unknown") and v.kinks


# ----------------------------------------------------------------------------------------------------------
# the OpInfo fields and the public lookups
# ----------------------------------------------------------------------------------------------------------
def test_lookup_by_aten_module_and_functional():
    import torch.nn.functional as tF

    assert registry.by_aten("aten.relu.default").name == "relu"
    assert registry.elementwise_by_aten("aten.threshold_backward.default").name == "relu"
    assert registry.elementwise_by_aten("relu_").name == "relu"  # in-place overloads find their op
    assert registry.elementwise_by_aten("hardtanh_backward").name == "hardtanh"
    assert registry.elementwise_by_aten("mm") is None
    assert registry.by_module(torch.nn.ReLU).name == "relu" and registry.by_module("Hardswish").name == "hardswish"
    assert registry.by_module(torch.nn.Tanh) is None
    assert registry.module_instance(torch.nn.Hardtanh(0.0, 6.0)).name == "relu6"
    assert registry.module_instance(torch.nn.LeakyReLU(0.25)).one_sided(F(0)) == (F(1, 4), 1)
    with pytest.raises(UnsupportedOpError, match="alpha"):
        registry.module_instance(torch.nn.ELU(alpha=2.0))
    for fn in (tF.relu, torch.relu, torch.Tensor.relu, tF.relu_):
        assert registry.by_functional(fn).name == "relu"
    assert registry.by_functional("F.leaky_relu").name == "leaky_relu"
    assert registry.by_functional("torch.nn.functional.hardsigmoid").name == "hardsigmoid"
    assert registry.by_functional(torch.tanh) is None
    relu = registry.get("relu")
    assert relu.aten_forward == ("relu", "relu_") and relu.backward == ("threshold_backward",)


def test_every_named_form_resolves_to_its_entry():
    """The ATen, module and functional names an entry lists exist in the installed torch and lead back to it."""
    for name in registry.names("elementwise"):
        e = registry.get(name)
        for m in e.modules:
            assert isinstance(getattr(torch.nn, m), type) and registry.by_module(m) is e
        for f in e.functionals:
            assert callable(registry.table._resolve(f)), f
            assert registry.by_functional(f) is e
        for a in (*e.aten_forward, *e.backward):
            assert hasattr(torch.ops.aten, a), a


def test_families_derived_from_the_pieces():
    """Park et al.'s families (Sec. 3): PyTorch's derivative is one-sided at every kink (Bouligand proxy) for
    relu, leaky_relu, relu6, hardtanh, hardsigmoid, hardswish (not abs: sgn(0) = 0); a common lambda (Theorem 4)
    for PyTorch's relu, leaky_relu (lambda = 0) and abs (1/2), not for the two-kink ops' left/right rules."""
    exact = [registry.get(n) for n in registry.names("elementwise") if registry.get(n).exact]
    one_sided = {e.name for e in exact if e.one_sided_rules()}
    # issue 36's entries (tests/test_registry_losses.py derives each by hand): the losses' margins and softshrink
    # take a side's derivative; l1_loss takes sgn(0) = 0, like abs
    assert one_sided == {"relu", "leaky_relu", "prelu", "relu6", "hardtanh", "hardsigmoid", "hardswish", "clamp",
                         "softshrink", "rrelu", "smooth_l1_loss", "huber_loss", "hinge_embedding_loss",
                         "margin_ranking_loss", "multi_margin_loss", "multilabel_margin_loss"}
    lam = {n: registry.get(n).common_lambda() for n in registry.names("elementwise")}
    # lambda in the direction of mix=lambda (the weight of the right derivative): PyTorch's left rules give 0
    assert lam["relu"] == lam["leaky_relu"] == lam["prelu"] == 0 and lam["abs"] == F(1, 2) and lam["selu"] == 0
    assert lam["elu"] == "any"  # alpha = 1: no kink
    assert lam["l1_loss"] == F(1, 2) and lam["softshrink"] is None  # softshrink: right at -1/2, left at 1/2
    assert all(lam[n] == 0 for n in ("rrelu", "hinge_embedding_loss", "margin_ranking_loss", "multi_margin_loss",
                                     "multilabel_margin_loss"))
    assert all(lam[n] == "any" for n in ("smooth_l1_loss", "huber_loss", "soft_margin_loss", "mish", "celu"))
    assert all(lam[n] is None for n in ("relu6", "hardtanh", "hardsigmoid", "hardswish", "clamp"))
    # AD variants: one rule for every kink gives the same lambda everywhere
    assert registry.get("hardtanh").common_lambda("left") == 0
    assert registry.get("relu6").common_lambda(["right", "right"]) == 1
    assert registry.get("hardsigmoid").common_lambda("mix=1/4") == F(1, 4)  # Park's lambda is mix's
    assert registry.get("abs").common_lambda("mix=2") is None  # not a convex combination of the sides
    assert registry.get("relu").common_lambda("value=1/2") == F(1, 2)
    assert registry.get("relu").common_lambda("value=2") is None  # outside the Clarke interval
    pl = {n for n in registry.names("elementwise") if registry.get(n).piecewise_linear}
    assert pl == {"relu", "leaky_relu", "prelu", "relu6", "hardtanh", "hardsigmoid", "abs", "clamp", "softshrink",
                  "rrelu", "l1_loss", "hinge_embedding_loss", "margin_ranking_loss", "multi_margin_loss",
                  "multilabel_margin_loss"}
    assert {n for n in registry.names("elementwise") if not registry.get(n).exact} == {
        "elu", "selu", "mish", "celu", "soft_margin_loss"}
    assert registry.get("elu").kinks == () and registry.get("hardswish").kinks == (F(-3), F(3))


def test_exact_backward_formula():
    hs = registry.get("hardswish")
    assert [hs.derivative_at(F(x)) for x in (-4, -3, 0, 3, 4)] == [0, 0, F(1, 2), 1, 1]
    assert registry.get("abs").derivative_at(F(0)) == 0 and registry.get("abs").derivative_at(F(0), "right") == 1


# ----------------------------------------------------------------------------------------------------------
# the oracle's exact forward and backward of every exact entry against PyTorch's float64 autograd
# ----------------------------------------------------------------------------------------------------------
EXACT = [n for n in registry.names("elementwise") if registry.get(n).exact]


@pytest.mark.parametrize("name", EXACT)
def test_oracle_backward_of_every_entry_is_pytorchs(name):
    """At every kink and around it, the reverse mode (PyTorch's backward ATen ops evaluated exactly through the
    registry) and the forward mode agree exactly, and with PyTorch's own float64 derivative: the points are chosen
    so that every derivative is dyadic (hardswish's x/3 + 1/2 is, there), except hardsigmoid's slope 1/6, which
    PyTorch's backward rounds to float32."""
    e = registry.get(name)
    points = sorted({b + d for b in e.breakpoints for d in (F(-3, 2), F(0), F(3, 4))})
    w = torch.tensor([float(p) for p in points], dtype=torch.float64)

    def fn(t):
        return e.torch_fn(t, **e.kwargs).sum()

    wt = w.clone().requires_grad_(True)
    (want,) = torch.autograd.grad(fn(wt), wt)
    rev, value = exact_backprop(fn, w, return_value=True)
    assert rev == exact_gradient(fn, w), name
    for x, g in zip(rev, want.tolist()):
        if F(float(x)) == x:  # a dyadic derivative: PyTorch's rule gives it exactly
            assert float(x) == g, (name, x, g)
        else:  # hardsigmoid's 1/6: PyTorch's float64 backward holds the constant in float32 (measured)
            assert registry.round_to_dtype(x, torch.float32) == F(g), (name, x, g)
    inst = e.instance(tuple(e.kwargs.values()))  # leaky_relu: the double 0.01 PyTorch uses; clamp: its bounds
    assert value == sum(inst.value(p) for p in points)


def test_new_op_in_the_park_engine(kinky_op):
    """Park's engine reads its activations from the registry: the registered op is an activation of its walk and
    of the structure detection on a 1-hidden-layer network that calls it as a function, with its rule ``left``
    (Park's lambda 0, a one-sided proxy)."""
    from nsverify.oracle.park import kinks
    from nsverify.oracle.park.walk import activation_of, walk
    from nsverify.papers.park.conditions import detect

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2 = torch.nn.Linear(2, 3), torch.nn.Linear(3, 1)

        def forward(self, x):
            return self.fc2(kinky(self.fc1(x)))

    assert activation_of("call_function", kinky) == "kinky"
    assert [n.activation for n in walk(Net()) if n.kind == "activation"] == ["kinky"]
    cond = detect(Net(), batch=2)
    assert [L.activation for L in cond.layers] == ["kinky"] and cond.common_lambda
    assert kinks.common_lambda("kinky") == 0 and kinks.proxy_is_bouligand("kinky")
