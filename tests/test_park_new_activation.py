"""A new piecewise-linear activation, registered in a test, reaches Park et al.'s Theorem 8 (Park, Chun and Lee,
Sec. 3.2) with no change to the engine: the engine selects activations by the registry's capability
(``park_layer``), finds them by the entry's modules, functional forms and autograd nodes, and reads the kinks and
AD's side at each from the entry.

softshrink with lambda = 1/2: pieces x + 1/2, 0, x - 1/2; kinks at -1/2 and 1/2, where PyTorch takes the flat
piece's derivative 0 (the right piece at -1/2, the left one at 1/2). Each decision is checked against the plain
enumeration, which shares none of the layer reading; the not_member case is Park et al.'s Lemma 2 construction
(two samples whose pre-activations cancel), where Theorem 8's cone is empty and the enumeration decides.

The registry half of the new-activation test (the conventions matrix, the strategies, the oracle) is
tests/test_registry_new_activation.py, with the same :func:`softshrink_entry`."""
from fractions import Fraction

import pytest
import torch
import torch.nn.functional as tF
from torch import nn

import nsverify
from nsverify import registry
from nsverify.oracle.interp import Evaluation, module_function
from nsverify.oracle.park import exact as layered
from nsverify.registry.types import Elementwise, lin

F = Fraction
D = torch.float64
HALF = F(1, 2)


def softshrink_entry() -> Elementwise:
    """softshrink(x, 1/2) as a registry entry: everything Park's engine and the oracle need to know about it."""
    return Elementwise(
        "softshrink", ("softshrink",), tF.softshrink, (-HALF, HALF), (lin(1, HALF), lin(0), lin(1, -HALF)),
        ("right", "left"), kwargs={"lambd": 0.5}, backward=("softshrink_backward",), modules=("Softshrink",),
        functionals=("torch.nn.functional.softshrink",), autograd_nodes=("SoftshrinkBackward0",),
        jax_note="jax.nn has no softshrink",
        doc="x - 1/2 above 1/2, x + 1/2 below -1/2, 0 between; PyTorch's derivative at both kinks is 0 (the flat "
            "piece's)")


def test_the_entry_is_pytorchs_softshrink():
    e = softshrink_entry()
    x = torch.tensor([-1.0, -0.5, -0.25, 0.0, 0.5, 0.75], dtype=D, requires_grad=True)
    y = tF.softshrink(x, 0.5)
    assert y.tolist() == [float(e.value(F(v))) for v in x.tolist()]
    (g,) = torch.autograd.grad(y.sum(), x)
    assert g.tolist() == [float(e.derivative_at(F(v))) for v in x.tolist()]  # at -1/2: right piece, 1/2: left
    assert [e.kink_derivative(i) for i in range(2)] == [0, 0]
    assert y.grad_fn.name() in e.autograd_nodes
    assert e.park_layer and e.kinks == (-HALF, HALF)
    with registry.registered(e):
        assert registry.by_module(nn.Softshrink()) is e and registry.by_functional(tF.softshrink) is e


class Functional(nn.Module):
    """A custom forward calling ``F.softshrink``: outside the fx module reading, read from the autograd graph."""

    def __init__(self, nin, nh):
        super().__init__()
        self.a, self.h = nn.Linear(nin, nh), nn.Linear(nh, 1)

    def forward(self, x):
        return self.h(tF.softshrink(self.a(x)))


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
                    return tF.softshrink(self.a(x))

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


def test_without_the_entry_nothing_knows_softshrink():
    m, x, t = _planted("module", 0)
    assert registry.by_module(nn.Softshrink()) is None
    with pytest.raises(nsverify.errors.UnsupportedOpError, match="aten.softshrink"):
        _check(m, x, t)
