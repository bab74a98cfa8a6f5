"""Reverse-mode exact AD (PyTorch's own backward formulas evaluated exactly) against forward-mode exact AD
(the registry's conventions) and against float autograd."""
from __future__ import annotations

import random
from fractions import Fraction

import pytest
import torch

from nsverify.oracle import exact_backprop, exact_gradient, exact_module_backprop, exact_module_gradient
from nsverify.papers.cases import CASES, point
from nsverify.reference.fuzz import random_program

F = Fraction


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_backprop_matches_forward_mode_on_known_cases(case):
    assert exact_backprop(case.fn, point(case)) == exact_gradient(case.fn, point(case))


def test_backprop_matches_forward_mode_on_random_programs():
    rng = random.Random(5)
    for _ in range(25):
        n = rng.randint(1, 3)
        w0 = [F(rng.randint(-4, 4), 2) for _ in range(n)]
        fn, desc = random_program(rng, n, w0, 3)
        w = torch.tensor([float(x) for x in w0], dtype=torch.float64)
        b, f = exact_backprop(fn, w), exact_gradient(fn, w)
        assert b == f, desc
        wf = w.clone().requires_grad_(True)
        fn(wf).backward()
        # float autograd agrees up to the rounding of non-dyadic even splits (1/3)
        assert max(abs(a - float(x)) for a, x in zip(wf.grad.tolist(), b)) < 1e-12, desc


def _cnn():
    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(1, 2, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2), torch.nn.Flatten(),
        torch.nn.Linear(8, 4), torch.nn.Hardtanh(), torch.nn.Linear(4, 3)).double()
    with torch.no_grad():
        for p in net.parameters():
            p.copy_(torch.round(p * 8) / 8)
        net[0].bias.zero_()
    x = torch.zeros(2, 1, 4, 4, dtype=torch.float64)
    x[0, 0, :2, :2] = 1.0  # flat patches: relu kinks and maxpool ties
    x[1, 0, 1:3, 1:3] = 0.5
    return net, x, torch.tensor([0, 2])


@pytest.mark.parametrize("conventions", [None, {"relu": 1}, {"max_pool2d": "minimal"},
                                         {"max_pool2d": ("hybrid", 2), "relu": F(1, 2)}, {"hardtanh": "right"}])
def test_cnn_backprop_forward_agree(conventions):
    net, x, y = _cnn()
    loss = lambda o, t: ((o - t[:, None].double()) ** 2).mean()  # noqa: E731
    b = exact_module_backprop(net, loss, x, y, rules=conventions)
    f = exact_module_gradient(net, loss, x, y, rules=conventions)
    assert b == f
    if conventions is None:
        net.zero_grad()
        loss(net(x), y).backward()
        ref = torch.cat([p.grad.reshape(-1) for p in net.parameters()])
        assert max(abs(float(a) - r) for a, r in zip(b, ref.tolist())) < 1e-12


def test_cross_entropy_backprop_intervals():
    net, x, y = _cnn()
    b = exact_module_backprop(net, torch.nn.functional.cross_entropy, x, y)
    net.zero_grad()
    torch.nn.functional.cross_entropy(net(x), y).backward()
    ref = torch.cat([p.grad.reshape(-1) for p in net.parameters()]).tolist()
    for a, r in zip(b, ref):
        lo, hi = (a.lo, a.hi) if hasattr(a, "lo") else (a, a)
        assert float(lo) - 1e-12 <= r <= float(hi) + 1e-12


def test_adaptive_max_pool_overlapping_windows():
    import torch.nn.functional as Fn

    x = torch.tensor([0.0, 1.0, 1.0, 2.0, 2.0, 0.0, 1.0, 0.0, 3.0], dtype=torch.float64)
    wts = torch.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=torch.float64)
    f = lambda w: (Fn.adaptive_max_pool2d(w.reshape(1, 1, 3, 3), (2, 2)) * wts).sum()  # noqa: E731
    b = exact_backprop(f, x)
    assert b == exact_gradient(f, x)
    wf = x.clone().requires_grad_(True)
    f(wf).backward()
    assert tuple(wf.grad.tolist()) == tuple(float(v) for v in b)  # first index, overlapping windows add up
