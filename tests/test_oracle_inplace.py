"""In-place ops (``nn.ReLU(inplace=True)``, torchvision's default; ``relu_``, ``add_``, ``mul_``, ``clamp_``,
``copy_``) are exact and their kink sites are where the out-of-place program has them: an in-place op no longer
overwrites the float shadow the kink detection reads, nor the activation input the layered decision reads."""

from fractions import Fraction

import pytest
import torch
from torch import nn

import nsverify

D = torch.float64


def _net(inplace: bool) -> nn.Module:
    m = nn.Sequential(nn.Linear(2, 3).double(), nn.ReLU(inplace=inplace), nn.Linear(3, 1).double())
    with torch.no_grad():
        m[0].weight.copy_(torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]], dtype=D))
        m[0].bias.copy_(torch.tensor([-1.0, -4.0, 0.0], dtype=D))
        m[2].weight.fill_(1.0)
        m[2].bias.zero_()
    return m


# pre-activations at the two inputs (1, 2) and (0, -1), by hand: (0, -2, 3) and (-1, -5, -1): one kink, at (0, 0)
X = torch.tensor([[1.0, 2.0], [0.0, -1.0]], dtype=D)


def _sites(v):
    return sorted((k.op, tuple(k.loc), k.value, bool(k.extra.get("float_only"))) for k in v.kinks)


@pytest.mark.parametrize("wrt", ["inputs", "parameters"])
def test_an_inplace_relu_network_has_the_kinks_of_the_plain_one(wrt):
    loss = lambda o, t: o.sum()
    plain = nsverify.check_module(_net(False), loss, X, None, wrt=wrt, progress=False)
    inplace = nsverify.check_module(_net(True), loss, X, None, wrt=wrt, progress=False)
    assert plain.status == inplace.status == "member"
    assert inplace.exact_ad == plain.exact_ad
    assert len(inplace.kinks) == len(plain.kinks) == 1  # the one exact zero pre-activation
    assert _sites(inplace) == _sites(plain)
    assert not any(k.extra.get("float_only") for k in inplace.kinks)  # no "ties created by rounding"
    if wrt == "inputs":  # d/dx of sum(relu(Wx + b)) at x = (1, 2): only row (1, 1) active, relu'(0) = 0 on row 0
        assert inplace.exact_ad[:2] == (Fraction(1), Fraction(1))


def _out_of_place(w):
    y = torch.relu(w * 2 - 1)
    z = torch.clamp(w, 0, 1)
    u = torch.maximum(w, torch.zeros_like(w))
    return (y * z).sum() + u.sum()


def _in_place(w):
    y = w.clone()
    y.mul_(2)
    y.sub_(1)
    y.relu_()
    z = w.clone()
    z.clamp_(0, 1)
    u = torch.zeros_like(w)
    u.copy_(w)
    u.clamp_(min=0)
    r = y * z  # relu_'s output is saved for its backward: it must not be overwritten (PyTorch would refuse)
    r.add_(u)
    return r.sum()


@pytest.mark.parametrize("point", [(0.5, 0.0, 1.0), (0.0, 1.0, 0.5), (0.25, -1.0, 2.0)])
def test_inplace_arithmetic_gives_the_verdict_of_the_out_of_place_program(point):
    w = torch.tensor(point, dtype=D)
    a = nsverify.check_gradient(_out_of_place, w, progress=False)
    b = nsverify.check_gradient(_in_place, w, progress=False)
    assert a.status == b.status and a.status != "unknown"
    assert set(a.bouligand) == set(b.bouligand)
    # the same kink locations and values (op names differ: relu_ is relu; maximum against 0 vs clamp(min=0))
    assert sorted(k.value for k in a.kinks) == sorted(k.value for k in b.kinks)
    assert not any(k.extra.get("float_only") for k in b.kinks)
    assert nsverify.oracle.verify_certificate(b.to_json(), _in_place)
