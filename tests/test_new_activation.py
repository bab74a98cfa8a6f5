"""Adding an activation is its entry and its test (issue 33, item 1): a new piecewise-linear activation,
registered with ``registry.registered(...)`` and no other code change, is found by every consumer that selects
by capability -- the conventions matrix (its kink cells are measured and judged in the Clarke set), the
strategies (a network draw uses it, with exact ties at its kinks) and the exact oracle (``check_gradient`` of a
program calling ``F.softshrink`` gives the Clarke set derived by hand below).

The activation is PyTorch's softshrink with lambda = 1/2: x + 1/2 below -1/2, 0 in between, x - 1/2 above 1/2
(ATen ``softshrink``, backward ``softshrink_backward``, autograd node ``SoftshrinkBackward0``). PyTorch's
derivative at both kinks is 0 (measured below, not assumed): the left piece's at +1/2 and the right piece's at
-1/2, the middle piece at both. Its entry is built once, by :func:`softshrink_entry`. The registry now ships
softshrink (``nsverify/registry/entries_shrink.py``, issue 36): this file hides the shipped entry for its tests
(:func:`without_the_shipped_softshrink`) and registers its own, so it still shows that an entry alone is all it
takes, and checks that the shipped entry is the one built here by hand.

Park's engine (the last part of this file) reaches Park et al.'s Theorem 8 (Park, Chun and Lee, Sec. 3.2) for
networks that use it, with no change to the engine: it selects activations by the registry's capability
(``park_layer``), finds them by the entry's modules, functional forms and autograd nodes, and reads the kinks and
AD's side at each from the entry. Each decision is checked against the plain enumeration, which shares none of the
layer reading; the not_member case is Park et al.'s Lemma 2 construction (two samples whose pre-activations
cancel), where Theorem 8's cone is empty and the enumeration decides.
"""
from __future__ import annotations

from fractions import Fraction

import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, Phase, find, settings
from torch import nn

import nsverify
from nsverify import registry
from nsverify.conventions import matrix
from nsverify.oracle.interp import Evaluation, module_function
from nsverify.oracle.park import exact as layered
from nsverify.strategies import networks, tie_points

HALF = Fraction(1, 2)
D = torch.float64


def softshrink_entry(lambd=HALF) -> registry.Elementwise:
    """The registry entry of ``F.softshrink(x, lambd)``: pieces x + lambd, 0, x - lambd; PyTorch's rule at -lambd
    is ``right`` and at +lambd ``left`` (the middle piece's derivative 0 at both, measured on torch 2.13 CPU);
    ``from_args`` builds the instance of an ATen call's ``lambd``."""
    lam = Fraction(lambd)
    return registry.Elementwise(
        "softshrink", ("softshrink",), F.softshrink, (-lam, lam),
        (registry.lin(1, lam), registry.lin(0), registry.lin(1, -lam)), ("right", "left"),
        kwargs={"lambd": float(lam)}, backward=("softshrink_backward",), modules=("Softshrink",),
        functionals=("torch.nn.functional.softshrink",), from_args=lambda lambd=0.5, *_: softshrink_entry(lambd),
        autograd_nodes=("SoftshrinkBackward0",), jax=None, jax_note="jax.nn has no softshrink",
        doc="x + lambd below -lambd, 0 on [-lambd, lambd], x - lambd above lambd")


@pytest.fixture(autouse=True)
def without_the_shipped_softshrink():
    """The registry as it was before softshrink shipped: the shipped entry is removed for each test of this file
    and the table restored afterwards, in its registration order."""
    shipped = registry.get("softshrink")
    assert shipped.breakpoints == (-HALF, HALF)
    saved = [registry.get(n) for n in registry.names()]
    registry.unregister("softshrink")
    try:
        yield shipped
    finally:
        for n in registry.names():
            registry.unregister(n)
        for e in saved:
            registry.register(e)


def test_the_shipped_entry_is_the_one_built_by_hand(without_the_shipped_softshrink):
    shipped, mine = without_the_shipped_softshrink, softshrink_entry()
    assert (shipped.breakpoints, shipped.pieces, shipped.torch_rules) == (mine.breakpoints, mine.pieces,
                                                                          mine.torch_rules)
    assert (shipped.aten, shipped.backward, shipped.modules, shipped.functionals, shipped.autograd_nodes) == (
        mine.aten, mine.backward, mine.modules, mine.functionals, mine.autograd_nodes)
    with registry.registered(shipped):  # its from_args reads the table
        inst = shipped.instance((0.25,))
    assert inst.breakpoints == (-Fraction(1, 4), Fraction(1, 4)) and inst.torch_rules == mine.torch_rules


FIND = settings(max_examples=300, database=None, deadline=None, phases=[Phase.generate], derandomize=True,
                suppress_health_check=list(HealthCheck))


def test_pytorchs_rules_at_the_kinks_are_measured():
    """At -1/2 and +1/2 PyTorch's derivative is 0, the middle piece's: ``right`` at -1/2, ``left`` at +1/2."""
    x = torch.tensor([-0.5, 0.5], dtype=torch.float64, requires_grad=True)
    y = F.softshrink(x, 0.5)
    (g,) = torch.autograd.grad(y.sum(), x)
    assert g.tolist() == [0.0, 0.0]
    assert type(y.grad_fn).__name__ == "SoftshrinkBackward0"
    e = softshrink_entry()
    assert [e.one_sided(b) for b in e.breakpoints] == [(1, 0), (0, 1)]
    assert [e.kink_derivative(i) for i in range(2)] == [0, 0]
    assert [Fraction(v) for v in F.softshrink(torch.tensor([-1.5, -0.5, 0.25, 0.5, 2.0], dtype=torch.float64),
                                              0.5).tolist()] == [e.value(Fraction(v)) for v in
                                                                 ("-3/2", "-1/2", "1/4", "1/2", "2")]


def test_its_capabilities():
    with registry.registered(softshrink_entry()) as e:
        assert e.park_layer and e.exact and e.fixed and e.piecewise_linear and e.one_sided_rules()
        assert e in registry.select("elementwise", park_layer=True)
        assert registry.select(autograd_node="SoftshrinkBackward0") == [e]
        assert registry.by_functional(F.softshrink) is e and registry.by_module(torch.nn.Softshrink()) is e
        assert registry.module_instance(torch.nn.Softshrink(0.25)).breakpoints == (Fraction(-1, 4), Fraction(1, 4))
        assert registry.parse_rules({"softshrink": "torch"})["softshrink"] == (registry.Rule("right"),
                                                                                registry.Rule("left"))
    assert "softshrink" not in registry.names()


def test_the_conventions_matrix_measures_its_kinks():
    with registry.registered(softshrink_entry()):
        assert {c.label for c in matrix.build_cases() if c.op == "softshrink"} == {"x=-1/2", "x=1/2"}
        res = matrix.run_matrix(["softshrink"], ["float32", "float64", "bfloat16"], ["cpu"], ["eager", "func", "jvp"])
    assert len(res) == 2 * 3 * 3
    assert all(r.error is None and r.in_clarke == "yes" and r.as_expected for r in res), res
    eager = {r.case: (r.derivative, r.observed) for r in res if r.mode == "eager" and r.dtype == "float64"}
    assert eager == {"x=-1/2": ([0.0], "right"), "x=1/2": ([0.0], "left")}
    assert "softshrink" not in {c.op for c in matrix.build_cases()}


def test_a_network_draw_uses_it_with_exact_ties_at_its_kinks():
    with registry.registered(softshrink_entry()):
        # the default draw (no activations named) selects it by capability
        find(networks(depth=(1, 2)), lambda s: any(layer.act == "softshrink" for layer in s.layers), settings=FIND)
        # a tie forced at one of its kinks; the float forward (F.softshrink) reproduces the exact one (its pieces)
        tied = find(tie_points(networks(depth=(1, 2), activations=("softshrink",)), ties=(1, 1), kinds=("kink",),
                               dtype=torch.float64),
                    lambda s: True, settings=FIND)
        (site,) = tied.forced
        assert site.kind == "kink" and site.value in (-HALF, HALF) and tied.dtype_checked
        assert tied.layers[site.layer].activation.primitive().name == "softshrink"


def f_two_kinks(w):
    """softshrink(w0 + w1) + softshrink(w0 - w1): at w = (0, 1/2) the first argument sits on the kink +1/2 and
    the second on the kink -1/2."""
    return F.softshrink(w[0] + w[1], 0.5) + F.softshrink(w[0] - w[1], 0.5)


#: by hand: with a = w0 + w1 - 1/2 and b = w0 - w1 + 1/2, near w the first term is max(a, 0) (gradient (1, 1)
#: or 0) and the second min(b, 0) (gradient (1, -1) or 0); a and b are independent, so all four sign patterns
#: occur: the Bouligand gradients are these four, the Clarke set their convex hull (a square)
PIECES = {(a > 0, b < 0): g for a, b, g in [(1, -1, (2, 0)), (1, 1, (1, 1)), (-1, -1, (1, -1)), (-1, 1, (0, 0))]}
CLARKE_BY_HAND = {(Fraction(2), Fraction(0)), (Fraction(1), Fraction(1)), (Fraction(1), Fraction(-1)),
                  (Fraction(0), Fraction(0))}


def _grad_by_differences(point, eps):
    """The gradient of f_two_kinks at ``point`` (inside one piece) from one-sided float64 differences."""
    base = f_two_kinks(point).item()
    out = []
    for i in range(2):
        step = point.clone()
        step[i] += eps
        out.append(Fraction((f_two_kinks(step).item() - base) / eps))
    return tuple(out)


def test_the_oracle_gives_the_clarke_set_derived_by_hand():
    w = torch.tensor([0.0, 0.5], dtype=torch.float64)
    h, eps = 2.0 ** -8, 2.0 ** -12  # powers of two: every difference below is exact in float64
    # the hand derivation, checked against one-sided float64 differences inside each of the four pieces
    for d in [(1.0, 0.0), (-1.0, 0.0), (0.0, 1.0), (0.0, -1.0)]:
        a, b = d[0] + d[1], d[0] - d[1]  # the signs of a and b along d
        g = _grad_by_differences(w + h * torch.tensor(d, dtype=torch.float64), eps)
        assert g == PIECES[(a > 0, b < 0)]
    assert set(PIECES.values()) == CLARKE_BY_HAND
    with registry.registered(softshrink_entry()):
        v = nsverify.check_gradient(f_two_kinks, w)
    assert v.status == "member"
    assert v.exact_ad == (0, 0)  # PyTorch: the middle piece at both kinks
    assert {tuple(Fraction(c) for c in g) for g in v.bouligand} == CLARKE_BY_HAND
    assert nsverify.oracle.verify_certificate(v.to_json())


def test_without_the_entry_nothing_knows_softshrink():
    """The entry is what every consumer found above: without it the oracle rejects the op by name."""
    assert registry.by_functional(F.softshrink) is None
    with pytest.raises(nsverify.NsverifyError, match="unknown op 'softshrink'"):
        registry.get("softshrink")
    with pytest.raises(nsverify.NsverifyError, match="aten.softshrink"):
        nsverify.check_gradient(f_two_kinks, torch.tensor([0.0, 0.5], dtype=torch.float64))


# ---------------------------------------------------------------------------------------------------------
# Park's engine: a park_theorem8 decision of networks that use the new activation
def test_the_entry_is_pytorchs_softshrink():
    e = softshrink_entry()
    x = torch.tensor([-1.0, -0.5, -0.25, 0.0, 0.5, 0.75], dtype=D, requires_grad=True)
    y = F.softshrink(x, 0.5)
    assert y.tolist() == [float(e.value(Fraction(v))) for v in x.tolist()]
    (g,) = torch.autograd.grad(y.sum(), x)
    assert g.tolist() == [float(e.derivative_at(Fraction(v))) for v in x.tolist()]  # at -1/2: right piece, 1/2: left
    assert [e.kink_derivative(i) for i in range(2)] == [0, 0]
    assert y.grad_fn.name() in e.autograd_nodes
    assert e.park_layer and e.kinks == (-HALF, HALF)
    with registry.registered(e):
        assert registry.by_module(nn.Softshrink()) is e and registry.by_functional(F.softshrink) is e


class Functional(nn.Module):
    """A custom forward calling ``F.softshrink``: outside the fx module reading, read from the autograd graph."""

    def __init__(self, nin, nh):
        super().__init__()
        self.a, self.h = nn.Linear(nin, nh), nn.Linear(nh, 1)

    def forward(self, x):
        return self.h(F.softshrink(self.a(x)))


def _planted(form: str, seed: int):
    """A 2-3-1 network whose first layer's pre-activations sit exactly on softshrink's kinks (-1/2 and 1/2) for
    some samples, with dyadic weights; three samples in R^2 (their columns are dependent: Theorem 5 does not
    apply, Theorem 8 decides)."""
    g = torch.Generator().manual_seed(seed)
    m = nn.Sequential(nn.Linear(2, 3), nn.Softshrink(0.5), nn.Linear(3, 1)) if form == "module" else Functional(2, 3)
    m = m.double()
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(torch.round(torch.randn(p.shape, generator=g, dtype=D) * 2) / 4)
        a = m[0] if form == "module" else m.a
        x = torch.randint(-2, 3, (3, 2), generator=g).to(D)
        for j in range(3):  # unit j of sample j on a kink: -1/2 or 1/2
            kink = 0.5 if (seed + j) % 2 else -0.5
            a.bias[j] = kink - float(a.weight[j] @ x[j])
    return m, x, torch.zeros(3, 1, dtype=D)


def _mse(o, t):
    return ((o - t) ** 2).mean()


def _check(m, x, t, loss=_mse, **kw):
    return nsverify.check_module(m, loss, x, t, progress=False, time_limit=120, on_limit="unknown", **kw)


@pytest.mark.parametrize("form", ["module", "functional"])
def test_a_network_with_softshrink_is_decided_by_theorem8(form):
    with registry.registered(softshrink_entry()):
        decided = 0
        for seed in range(6):
            m, x, t = _planted(form, seed)
            v = _check(m, x, t)
            ref = _check(m, x, t, shortcuts=False)
            assert v.status == "member" and v.certificate["kind"] == "park_theorem8", v.stats.get("layers_declined")
            assert nsverify.verify_certificate(v)
            assert v.stats.get("layers_from", "modules") == ("modules" if form == "module" else "autograd graph")
            assert {s.op for s in v.kinks} == {"softshrink"}
            assert {s.value for s in v.kinks} == {-HALF, HALF}  # both kinks touched, each with its own side
            assert ref.status == "member", seed  # the enumeration, with no layer reading, agrees
            decided += 1
        assert decided == 6


@pytest.mark.parametrize("kink", [-HALF, HALF])
@pytest.mark.parametrize("form", ["module", "functional"])
def test_lemma2_cancellation_with_softshrink_is_not_member(form, kink):
    """Park et al.'s Lemma 2 construction: samples x = 1 and x = -1 through one unit y = w x + c whose bias c is
    frozen on the kink, loss out_1 - out_2 = softshrink(c + w) - softshrink(c - w) = w (the flat piece is on
    opposite sides of the two samples), so the derivative is 1, while AD takes the flat piece's 0 at both: not a
    Clarke subgradient. Theorem 8's two rows are opposite (P_l is empty), so the layered decision declines and
    the enumeration proves not_member."""
    with registry.registered(softshrink_entry()):
        lin1 = nn.Linear(1, 1)
        with torch.no_grad():
            lin1.weight.zero_()
            lin1.bias.fill_(float(kink))
        lin1.bias.requires_grad_(False)
        if form == "module":
            m = nn.Sequential(lin1, nn.Softshrink(0.5)).double()
        else:
            class Net(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.a = lin1

                def forward(self, x):
                    return F.softshrink(self.a(x))

            m = Net().double()
        x = torch.tensor([[1.0], [-1.0]], dtype=D)
        t = torch.zeros(2, 1, dtype=D)

        def loss(o, _t):
            return (o[0] - o[1]).sum()

        fn, w = module_function(m, loss, x, t)
        got = layered.decide(Evaluation(fn, w), m, loss, t)
        assert isinstance(got, str) and ("P_l is empty" in got or "coordinates is empty" in got), got
        v = _check(m, x, t, loss=loss)
        assert v.status == "not_member" and v.exact_ad == (0,)
        assert _check(m, x, t, loss=loss, shortcuts=False).status == "not_member"


def test_without_the_entry_parks_engine_does_not_know_softshrink():
    m, x, t = _planted("module", 0)
    assert registry.by_module(nn.Softshrink()) is None
    with pytest.raises(nsverify.errors.UnsupportedOpError, match="aten.softshrink"):
        _check(m, x, t)
