"""PReLU (``nn.PReLU`` / ``F.prelu``: ATen ``_prelu_kernel`` and ``_prelu_kernel_backward``) in the exact oracle,
the registry, the conventions matrix and Park's engine, its slope a learnable weight.

Expected values come from what shares no code with the oracle: PyTorch's float64 autograd at dyadic points (every
value and derivative there is exact in float64), its gradients just beside a kink on either side, one-sided
difference quotients, and Clarke sets derived by hand. The hand derivation at the kink: with x and the slope a
both functions of w, the right piece x has gradient grad(x), the left piece a * x has gradient
a * grad(x) + x * grad(a) = a * grad(x) at x = 0 -- the slope's own gradient enters only away from the kink."""
from fractions import Fraction

import numpy as np
import pytest
import torch
import torch.nn.functional as tF
from torch import nn

import nsverify
from nsverify import ad as nsad
from nsverify import registry
from nsverify.conventions import baselines
from nsverify.conventions.matrix import build_cases, evaluate_case
from nsverify.errors import NsverifyError, UnsupportedOpError
from nsverify.oracle.interp import Evaluation, exact_backprop, exact_forward, exact_gradient, module_function
from nsverify.oracle.park import exact as layered
from nsverify.oracle.park.walk import walk

F = Fraction
D = torch.float64
#: (num_parameters, input shape): one slope and one per channel (dim 1), 2-d and 4-d inputs
CONFIGS = [(1, (3, 4)), (4, (3, 4)), (1, (2, 3, 2, 2)), (3, (2, 3, 2, 2)), (1, (5,))]


def _dyadic(shape, seed, zeros=False):
    """Quarters in [-2, 2]: nonzero, or (``zeros``) with every third entry exactly 0 (a kink)."""
    g = torch.Generator().manual_seed(seed)
    k = torch.randint(1, 9, shape, generator=g) * (torch.randint(0, 2, shape, generator=g) * 2 - 1)
    x = k.to(D) / 4
    if zeros:
        x.view(-1)[::3] = 0
    return x


def _weight(c, seed):
    g = torch.Generator().manual_seed(seed + 100)
    return (torch.randint(-6, 7, (c,), generator=g).to(D) / 4)


def _exact(t):
    return [F(v) for v in t.detach().reshape(-1).tolist()]


@pytest.mark.parametrize("c,shape", CONFIGS)
def test_exact_forward_is_pytorchs_float64(c, shape):
    x, a = _dyadic(shape, c), _weight(c, c)
    got = np.array(exact_forward(tF.prelu, x, a), dtype=object).reshape(-1).tolist()
    assert got == _exact(tF.prelu(x, a))


@pytest.mark.parametrize("kinks", [False, True], ids=["off the kinks", "entries at 0"])
@pytest.mark.parametrize("c,shape", CONFIGS)
def test_exact_ad_of_input_and_weight_is_pytorchs_float64_autograd(c, shape, kinks):
    """Forward mode (the registry's rule) and reverse mode (PyTorch's backward op evaluated exactly) equal float64
    autograd w.r.t. the input and the weight; at x == 0 PyTorch's rule is the left piece: grad_input = weight *
    grad, and grad_weight = x * grad = 0."""
    x, a = _dyadic(shape, 7 * c + len(shape), zeros=kinks), _weight(c, len(shape))
    cot = torch.arange(1, x.numel() + 1, dtype=D).reshape(shape) % 5 - 2
    n = x.numel()

    def fn(v):
        return (tF.prelu(v[:n].reshape(shape), v[n:]) * cot).sum()

    w = torch.cat([x.reshape(-1), a])
    wt = w.clone().requires_grad_(True)
    (want,) = torch.autograd.grad(fn(wt), wt)
    assert list(exact_backprop(fn, w)) == _exact(want)
    assert list(exact_gradient(fn, w)) == _exact(want)


def test_module_prelu_parameters_are_pytorchs_float64_autograd():
    m = nn.Sequential(nn.Linear(3, 4), nn.PReLU(4), nn.Linear(4, 1)).double()
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(torch.randint(-4, 5, p.shape, generator=g).to(D) / 4)
    x, t = torch.tensor([[1.0, -0.5, 2.0], [0.25, 1.5, -1.0]], dtype=D), torch.zeros(2, 1, dtype=D)
    fn, w = module_function(m, tF.mse_loss, x, t)
    wt = w.clone().requires_grad_(True)
    (want,) = torch.autograd.grad(fn(wt), wt)
    assert list(exact_backprop(fn, w)) == _exact(want) == list(exact_gradient(fn, w))


# ----------------------------------------------------------------------------------------------------------
# at the kink: verdicts against hand-derived Clarke sets
# ----------------------------------------------------------------------------------------------------------
def _one(v):
    """f(a) = prelu(a - 1/4, a): the slope a is also the input's parameter. At a = 1/4, x = 0: the right piece
    x = a - 1/4 has derivative 1, the left piece a * x = a^2 - a/4 has derivative 2a - 1/4 = 1/4. Clarke set
    [1/4, 1]; PyTorch's AD: grad_input * dx/da + grad_weight = a * 1 + x = 1/4."""
    return tF.prelu(v - 0.25, v).sum()


def test_one_parameter_slope_and_input_clarke_interval_by_hand():
    w = torch.tensor([0.25], dtype=D)
    h = 2.0 ** -20
    right = (_one(w + h) - _one(w)).item() / h  # one-sided difference quotients, float64 (exact here)
    left = (_one(w - h) - _one(w)).item() / -h
    assert right == 1.0 and abs(left - 0.25) <= 2 * h
    wt = w.clone().requires_grad_(True)
    (g,) = torch.autograd.grad(_one(wt), wt)
    assert g.item() == 0.25
    v = nsverify.check_gradient(_one, w, progress=False)
    assert v.status == "member" and v.clarke == (F(1, 4), F(1)) and v.exact_ad == (F(1, 4),)
    assert nsverify.check_gradient(_one, w, ad=[F(5, 4)], progress=False).status == "not_member"
    assert nsverify.check_gradient(_one, w, ad=[F(1, 8)], progress=False).status == "not_member"


def _two(v):
    """f(p, a) = prelu(2p - 1, a) + a at (1/2, 1/2): x = 0. Right piece x + a: gradient (2, 1); left piece
    a * x + a: gradient (2a, x + 1) = (1, 1). Clarke set: the segment from (1, 1) to (2, 1)."""
    return tF.prelu(2 * v[:1] - 1, v[1:]).sum() + v[1]


W2 = torch.tensor([0.5, 0.5], dtype=D)
CLARKE2 = {(F(1), F(1)), (F(2), F(1))}


def test_two_parameters_one_sided_gradients_are_the_hand_derived_pieces():
    """Independent of the oracle: float64 autograd just beside the kink along (+1, 0) and (-1, 0) tends to the
    hand-derived piece gradients, and PyTorch's AD at the kink is the left one."""
    eps = 2.0 ** -24
    side = {}
    for s in (1, -1):
        wt = (W2 + s * eps * torch.tensor([1.0, 0.0], dtype=D)).requires_grad_(True)
        (g,) = torch.autograd.grad(_two(wt), wt)
        side[s] = g.tolist()
    assert side[1] == [2.0, 1.0]
    assert max(abs(u - v) for u, v in zip(side[-1], [1.0, 1.0])) < 1e-6
    wt = W2.clone().requires_grad_(True)
    (g,) = torch.autograd.grad(_two(wt), wt)
    assert g.tolist() == [1.0, 1.0]


def test_two_parameters_verdicts_in_the_hand_derived_clarke_set():
    v = nsverify.check_gradient(_two, W2, progress=False)
    assert v.status == "member" and v.exact_ad == (F(1), F(1))
    assert {tuple(b) for b in v.bouligand} == CLARKE2
    for ad, status in [((F(3, 2), F(1)), "member"), ((F(2), F(1)), "member"), ((F(3, 2), F(9, 8)), "not_member"),
                       ((F(5, 2), F(1)), "not_member"), ((F(3, 4), F(1)), "not_member")]:
        assert nsverify.check_gradient(_two, W2, ad=list(ad), progress=False).status == status, ad


@pytest.mark.parametrize("rule,ad,status", [
    ("right", (F(2), F(1)), "member"),  # the right piece's gradient
    ("mix=1/2", (F(3, 2), F(1)), "member"),  # derivative 1/2 + (1 - 1/2)/2 = 3/4 in x, times dx/dp = 2
    ("value=3", (F(6), F(1)), "not_member"),  # a rule outside [1/2, 1]: AD leaves the Clarke set
    ("value=0", (F(0), F(1)), "not_member"),
])
def test_rules_at_prelus_kink_in_both_modes(rule, ad, status):
    """A rule given for prelu applies in forward mode and in the exact backward op alike; the verdict follows the
    hand-derived Clarke set (the segment from (1, 1) to (2, 1))."""
    rules = {"prelu": rule}
    assert exact_gradient(_two, W2, rules) == ad
    assert exact_backprop(_two, W2, rules) == ad
    assert nsverify.check_gradient(_two, W2, rules=rules, progress=False).status == status


def _conv_prelu():
    """Conv2d(1, 2, 2) -> PReLU(2) -> Linear: two pre-activation entries exactly at 0 (channel 0 at (0, 0) is its
    bias, channel 1 at (0, 0) is 1 - 1.5 + b1 = 0), each channel with its own slope."""
    m = nn.Sequential(nn.Conv2d(1, 2, 2), nn.PReLU(2), nn.Flatten(), nn.Linear(8, 1)).double()
    with torch.no_grad():
        m[0].weight.copy_(torch.tensor([[[[1.0, 0.0], [0.0, 0.0]]], [[[0.0, 1.0], [-1.0, 0.0]]]]))
        m[0].bias.copy_(torch.tensor([0.0, 0.5]))
        m[1].weight.copy_(torch.tensor([0.25, -0.5]))
        m[3].weight.copy_(torch.arange(8, dtype=D).reshape(1, 8) / 4 - 1)
        m[3].bias.zero_()
    x = torch.tensor([[[[0.0, 1.0, 2.0], [1.5, -1.0, 0.5], [0.0, 2.0, 0.0]]]], dtype=D)
    return m, x, torch.zeros(1, 1, dtype=D)


def test_check_module_prelu_channels_at_kinks():
    """PyTorch's AD is the limit of float64 autograd from the side where both kink entries are negative
    (moving both conv biases down), and not from the other side (the kinks are real); check_module says member,
    with and without shortcuts, and not_member under a rule outside the Clarke interval."""
    m, x, t = _conv_prelu()
    assert (m[0](x)[0, :, 0, 0] == 0).all()
    fn, w = module_function(m, tF.mse_loss, x, t)
    wt = w.clone().requires_grad_(True)
    (ad,) = torch.autograd.grad(fn(wt), wt)
    d = torch.zeros_like(w)
    d[8], d[9] = 1.0, 1.0  # the two conv biases
    eps = 2.0 ** -24
    beside = {}
    for s in (1, -1):
        ws = (w + s * eps * d).requires_grad_(True)
        (beside[s],) = torch.autograd.grad(fn(ws), ws)
    assert (beside[-1] - ad).abs().max() < 1e-5
    assert (beside[1] - ad).abs().max() > 0.1
    for shortcuts in (True, False):
        v = nsverify.check_module(m, tF.mse_loss, x, t, progress=False, shortcuts=shortcuts)
        assert v.status == "member" and list(v.exact_ad) == _exact(ad)
        assert len([s for s in v.kinks if s.op == "prelu"]) == 2
    v = nsverify.check_module(m, tF.mse_loss, x, t, progress=False, rules={"prelu": "value=2"})
    assert v.status == "not_member"


# ----------------------------------------------------------------------------------------------------------
# Park's engine: a learnable slope is outside the layer model
# ----------------------------------------------------------------------------------------------------------
def test_layered_decisions_decline_prelu_with_the_reason():
    m, x, t = _conv_prelu()
    fn, w = module_function(m, tF.mse_loss, x, t)
    why = layered.decide(Evaluation(fn, w, None), m, tF.mse_loss, t)
    assert isinstance(why, str) and "fixed activations" in why
    assert "layers read from the autograd graph: `prelu`" in why  # the graph reading declines it too


def test_the_fx_walk_declines_prelu_modules_and_functions():
    class Fn(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin, self.a = nn.Linear(2, 2), nn.Parameter(torch.tensor([0.25]))

        def forward(self, x):
            return tF.prelu(self.lin(x), self.a)

    for model in (nn.Sequential(nn.Linear(2, 2), nn.PReLU()), Fn()):
        with pytest.raises(UnsupportedOpError, match="learnable weight"):
            walk(model)


# ----------------------------------------------------------------------------------------------------------
# the registry entry and its conventions cells
# ----------------------------------------------------------------------------------------------------------
def test_registry_entry_and_module_instances():
    e = registry.get("prelu")
    assert not e.fixed and e.learnable == "weight" and e.one_sided(F(0)) == (F(1, 4), F(1))
    assert [str(r) for r in e.torch_rules] == ["left"] and [str(r) for r in e.rules_for("jvp")] == ["right"]
    assert registry.module_instance(nn.PReLU(init=0.5)).one_sided(F(0)) == (F(1, 2), F(1))
    with pytest.raises(UnsupportedOpError, match="num_parameters=3"):
        registry.module_instance(nn.PReLU(3))
    assert "prelu" not in nsad.variant_ops()
    with pytest.raises(NsverifyError, match="use the modes"):  # per-mode rules: a mode the matrix does not have
        registry.Elementwise("bad", (), None, (F(0),), (registry.lin(0), registry.lin(1)), ("left",),
                             mode_rules={"backward": ("right",)})
    with pytest.raises(NsverifyError, match="1 kinks need one rule each; got 2"):
        registry.Elementwise("bad", (), None, (F(0),), (registry.lin(0), registry.lin(1)), ("left",),
                             mode_rules={"jvp": ("right", "left")})


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_conventions_cells_at_0_lie_in_the_hand_derived_clarke_interval(dtype):
    """prelu(x) with slope 1/4: pieces x / 4 and x, Clarke interval [1/4, 1] at 0 (difference quotients below).
    PyTorch: the backward kernel takes the left piece (x > 0 is false at 0), forward mode the right one (its
    formula tests x >= 0); both are what the registry records for the mode."""
    h = torch.tensor([2.0 ** -10], dtype=D)
    op = registry.get("prelu").torch_fn
    assert (op(h) / h).item() == 1.0 and (op(-h) / -h).item() == 0.25
    (case,) = build_cases(["prelu"])
    for mode, want in (("eager", 0.25), ("func", 0.25), ("jvp", 1.0)):
        r = evaluate_case(case, dtype, "cpu", mode)
        assert r.error is None and r.derivative == [want], (mode, r)
        assert r.in_clarke == "yes" and r.as_expected, (mode, r)


def test_a_baseline_recorded_before_prelu_reports_no_change():
    """The shipped torch 2.13.0 run has no prelu cells: a comparison lists them as not in the baseline, and
    reports no change."""
    run = baselines.load_recorded("2.13.0")
    assert not [k for k in run.results if k[0] == "prelu"]
    results = [evaluate_case(c, torch.float32, "cpu", "eager") for c in build_cases(["relu", "prelu"])]
    chs, missing = baselines.compare_with_baseline(results, run, "2.13.0")
    assert chs == [] and {k[0] for k in missing} == {"prelu"}
