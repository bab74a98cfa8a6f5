"""Exact zone classification: known regular / compensation / bifurcation points, and agreement of the exact
backward with float64 autograd."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from nsverify.errors import UnsupportedOpError
from nsverify.papers.zones.exact import _backward, classify_exact, forward_exact, point_report
from nsverify.papers.zones.measure import NoNonsmoothLayersError
from nsverify.papers.zones.rules import MaxPool2dS, ReLUS, use_rule
from nsverify.workloads.models import build_model, lenet5


def _example_353():
    x = torch.zeros(1, 1, 4, 4)
    x[0, 0, 0, 0] = x[0, 0, 0, 3] = 1.0
    conv = nn.Conv2d(1, 1, 3, bias=False)
    lin = nn.Linear(1, 2)
    with torch.no_grad():
        conv.weight.fill_(1.0)
        lin.weight.copy_(torch.tensor([[1.0], [-1.0]]))
        lin.bias.zero_()
    return nn.Sequential(conv, MaxPool2dS(2), nn.Flatten(), lin), x


def test_example_353_is_bifurcation():
    model, x = _example_353()
    r = classify_exact(model, x, torch.tensor([0]))
    assert r.zone == "bifurcation" and r.tie_windows == 1 and r.bifurcating_examples == [0]


def test_flat_region_ties_are_compensation():
    # zero input: every conv output equals the bias, 2x2 windows tie, patches are identical (zeros)
    model, _ = _example_353()
    model[0].bias = nn.Parameter(torch.tensor([0.5]))
    r = classify_exact(model, torch.zeros(2, 1, 4, 4), torch.tensor([0, 1]))
    assert r.zone == "compensation" and r.tie_windows == 2 and r.bifurcating_examples == []


def test_relu_kink_with_bias_is_bifurcation_and_generic_point_regular():
    lin1, lin2 = nn.Linear(2, 2), nn.Linear(2, 3)
    with torch.no_grad():
        lin1.weight.copy_(torch.tensor([[1.0, -1.0], [0.5, 0.25]]))
        lin1.bias.copy_(torch.tensor([0.0, 0.125]))
        lin2.weight.copy_(torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.5, 0.5]]))
        lin2.bias.zero_()
    model = nn.Sequential(lin1, ReLUS(), lin2)
    x_kink = torch.tensor([[0.5, 0.5]])  # first pre-activation is exactly 0
    assert classify_exact(model, x_kink, torch.tensor([1])).zone == "bifurcation"
    assert classify_exact(model, torch.tensor([[0.75, 0.5]]), torch.tensor([1])).zone == "regular"


def test_equal_logits_make_a_relu_kink_compensation():
    # all logits exactly equal: g = 1/K - e_y sums to 0 and W2 has equal rows, so W2^T g = 0 (exactly)
    lin1, lin2 = nn.Linear(2, 1), nn.Linear(1, 3)
    with torch.no_grad():
        lin1.weight.copy_(torch.tensor([[1.0, -1.0]]))
        lin1.bias.zero_()
        lin2.weight.fill_(0.5)
        lin2.bias.zero_()
    model = nn.Sequential(lin1, ReLUS(), lin2)
    r = classify_exact(model, torch.tensor([[0.25, 0.25]]), torch.tensor([2]))
    assert r.relu_sites == 1 and r.zone == "compensation"


def test_exact_backward_matches_float64_autograd():
    torch.manual_seed(0)
    m = lenet5(width=0.5).double()
    x = (torch.randint(0, 5, (2, 1, 28, 28)) / 4).double()
    _, tape = forward_exact(m, x)
    u = np.zeros((2, 10), dtype=object)
    u[...] = 0
    u[:, 3] += 1
    u[:, 7] -= 1
    weights = [mod.weight for mod in m if hasattr(mod, "weight")]
    for prog, (s, minimal) in (("native", (0, False)), ("relu1_minimal", (1, True))):
        outs = _backward(tape, u.copy(), s, minimal, True)[::-1]
        with use_rule(prog):
            ref = torch.autograd.grad(m(x), weights, torch.tensor(u.astype(float)))
        for (li, ct), g in zip(outs, ref):
            t = tape[li]
            if t.kind == "linear":
                gw = ct.T @ t.x.ints
            else:
                cols = t.params["cols"]
                gw = ct.transpose(1, 0, 2, 3).reshape(ct.shape[1], -1) @ cols.reshape(-1, cols.shape[-1])
            gw = gw.astype(float).reshape(g.shape)
            scale = np.abs(gw).max() / float(g.abs().max())
            assert np.allclose(gw / scale, g.numpy(), rtol=1e-12, atol=1e-15)


def test_point_report_both_views():
    torch.manual_seed(0)
    model = lenet5(width=0.25)
    from nsverify.workloads.datasets import digits28

    x, y = digits28()
    r = point_report(model, x[:3], y[:3], dtypes=("float32", "float64"),
                     thresholds={"float32": 1e-6, "float64": 1e-14})
    for name in ("float32", "float64"):
        e, f = r["dtypes"][name]["exact"], r["dtypes"][name]["float"]
        assert e["zone"] in ("regular", "compensation", "bifurcation")
        created, destroyed = f["sites_created_by_rounding"], f["sites_destroyed_by_rounding"]
        assert f["tied_windows"] + f["relu_zeros"] == e["tie_windows"] + e["relu_sites"] + created - destroyed
        assert f["impacted"] == (f["D"] > f["tau"])
        if e["zone"] == "regular":
            assert f["D"] == 0.0 or f["sites_created_by_rounding"] > 0


def test_exact_refuses_bn_and_residual_and_smooth():
    with pytest.raises(UnsupportedOpError, match="BatchNorm"):
        classify_exact(build_model("lenet5", bn=True), torch.zeros(1, 1, 28, 28), torch.tensor([0]))
    with pytest.raises(UnsupportedOpError, match="Residual"):
        classify_exact(build_model("resnet18", width=0.0625, bn=False), torch.zeros(1, 3, 32, 32),
                       torch.tensor([0]))
    with pytest.raises(NoNonsmoothLayersError):
        classify_exact(nn.Sequential(nn.Linear(2, 2)), torch.zeros(1, 2), torch.tensor([0]))
