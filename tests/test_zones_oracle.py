"""Cross-check: the zones module's exact classification (integer dyadic arithmetic + Lindemann-Weierstrass)
against the issue-3 exact interpreter (nsverify.oracle.exact_module_backprop, PyTorch's backward ops run on
exact tensors with interval enclosures for the cross-entropy)."""
from __future__ import annotations

from fractions import Fraction

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from nsverify.papers.zones.exact import classify_exact

oracle = pytest.importorskip("nsverify.oracle")


def _bounds(v):
    if isinstance(v, Fraction):
        return v, v
    return Fraction(v.lo), Fraction(v.hi)


def _provably_different(a, b) -> bool:
    (alo, ahi), (blo, bhi) = _bounds(a), _bounds(b)
    return ahi < blo or bhi < alo


def _tiny_cnn(seed: int, generic: bool) -> nn.Module:
    g = torch.Generator().manual_seed(seed)
    conv, lin = nn.Conv2d(1, 2, 3), nn.Linear(2 * 2 * 2, 3)
    with torch.no_grad():  # small dyadic weights make exact zeros and ties frequent; generic ones avoid them
        for p in (conv.weight, conv.bias, lin.weight, lin.bias):
            p.copy_(torch.randn(p.shape, generator=g) if generic else torch.randint(-2, 3, p.shape, generator=g) / 4)
    return nn.Sequential(conv, nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), lin)


def test_exact_zone_agrees_with_oracle_interpreter():
    seen = set()
    for seed in range(8):
        generic = seed >= 6
        model = _tiny_cnn(seed, generic)
        g = torch.Generator().manual_seed(100 + seed)
        x = (torch.randint(0, 2, (1, 1, 3, 3), generator=g).repeat_interleave(2, 2).repeat_interleave(2, 3) / 2)
        if generic:
            x = torch.rand(1, 1, 6, 6, generator=g)
        y = torch.randint(0, 3, (1,), generator=g)
        zone = classify_exact(model, x, y).zone
        e0 = oracle.exact_module_backprop(model, F.cross_entropy, x, y, wrt="parameters",
                                          rules={"relu": 0, "max_pool2d": "native"})
        e1 = oracle.exact_module_backprop(model, F.cross_entropy, x, y, wrt="parameters",
                                          rules={"relu": 1, "max_pool2d": "minimal"})
        differs = any(_provably_different(a, b) for a, b in zip(e0, e1))
        assert differs == (zone == "bifurcation"), (seed, zone)
        seen.add(zone)
    assert seen == {"regular", "compensation", "bifurcation"}  # the check covered every zone
