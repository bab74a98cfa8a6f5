"""Park et al.'s layered decision on graphs (Condition 2: residual adds, BatchNorm in eval mode, a custom
``forward``), checked against the plain enumeration, which shares none of the layer reading."""
import random

import pytest
import torch
from torch import nn

import nsverify

D = torch.float64


class Block(nn.Module):
    """A BasicBlock: conv-BN-ReLU, conv-BN, identity or 1x1-conv shortcut, ReLU (one ReLU module called twice,
    in place, as torchvision's)."""

    def __init__(self, cin, cout, k=3, bn=True, down=False):
        super().__init__()
        pad = k // 2
        self.c1 = nn.Conv2d(cin, cout, k, 1, pad, bias=not bn)
        self.b1 = nn.BatchNorm2d(cout) if bn else nn.Identity()
        self.c2 = nn.Conv2d(cout, cout, k, 1, pad, bias=not bn)
        self.b2 = nn.BatchNorm2d(cout) if bn else nn.Identity()
        self.relu = nn.ReLU(inplace=True)
        self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, bias=False), nn.BatchNorm2d(cout)) if down else None

    def forward(self, x):
        o = self.relu(self.b1(self.c1(x)))
        o = self.b2(self.c2(o))
        return self.relu(o + (x if self.down is None else self.down(x)))


class ResNetLike(nn.Module):
    def __init__(self, c=2, k=3, bn=True, down=False, pool=True, side=4):
        super().__init__()
        self.stem = nn.Conv2d(1, c, k, 1, k // 2)
        self.r = nn.ReLU()
        self.pool = nn.MaxPool2d(2) if pool else nn.Identity()
        self.block = Block(c, c + down, k, bn, down)
        s = side // 2 if pool else side
        self.head = nn.Linear((c + down) * s * s, 3)

    def forward(self, x):
        x = self.pool(self.r(self.stem(x)))
        return self.head(torch.flatten(self.block(x), 1))


def _dyadic(m, seed, denom=4):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(torch.round(torch.randn(p.shape, generator=g, dtype=D) * 2) / denom)
        for mod in m.modules():
            if isinstance(mod, nn.BatchNorm2d):
                mod.eps = 2.0 ** -10  # var + eps = 1: an exact BatchNorm scale
                mod.running_var.fill_(1 - 2.0 ** -10)
                mod.running_mean.copy_(torch.round(torch.randn(mod.num_features, generator=g, dtype=D)) / denom)
    return m.eval()


def _check(m, x, y, **kw):
    return nsverify.check_module(m, nn.functional.cross_entropy, x, y, progress=False, time_limit=60,
                                 on_limit="unknown", **kw)


@pytest.mark.parametrize("down", [False, True])
def test_residual_block_with_batch_norm_is_decided_by_theorem8(down):
    m = _dyadic(ResNetLike(down=down).double(), 0)
    x = torch.randint(-1, 2, (2, 1, 4, 4), generator=torch.Generator().manual_seed(0)).double()
    v = _check(m, x, torch.tensor([0, 2]))
    assert v.status == "member" and v.certificate["kind"] == "park_theorem8", v.stats.get("layers_declined")
    assert nsverify.verify_certificate(v)
    touched = sum(L["kinks"] + L["tied_windows"] for L in v.certificate["layers"])
    assert touched > 0  # the point has kinks or ties: the theorem did the work, not smoothness


def _tiny(seed):
    """A residual net small enough for the plain enumeration: 1 channel (2 after a 1x1-conv shortcut), 1x1
    kernels, a 2x2 input, values on a coarse dyadic grid so that kinks and ties occur."""
    rng = random.Random(seed)
    m = _dyadic(ResNetLike(c=1, k=1, bn=rng.random() < 0.5, down=rng.random() < 0.3, pool=rng.random() < 0.5,
                           side=2).double(), seed, denom=2)
    x = torch.tensor([[rng.choice((-1, 0, 1)) for _ in range(4)] for _ in range(2)], dtype=D).reshape(2, 1, 2, 2)
    return m, x, torch.tensor([rng.randrange(3), rng.randrange(3)])


def test_graph_layered_member_never_contradicts_the_enumeration():
    # the enumeration decides the Clarke set from the pieces, with no layer structure; the layered decision may
    # certify member (Theorem 8) or decline, never certify a point the enumeration proves not_member
    decided = 0
    for seed in range(40):
        m, x, y = _tiny(seed)
        v = _check(m, x, y)
        ref = _check(m, x, y, shortcuts=False)
        if v.certificate is not None and v.certificate.get("kind") == "park_theorem8":
            assert ref.status != "not_member", seed
            touched = sum(L["kinks"] + L["tied_windows"] for L in v.certificate["layers"])
            if ref.status == "member" and touched:
                decided += 1
    assert decided >= 5, decided  # enough points where both decided for the comparison to mean something


def test_graph_declines_what_it_does_not_model():
    class TwoAffine(nn.Module):  # two affine maps in one layer: Park's rows would be bilinear
        def __init__(self):
            super().__init__()
            self.a, self.b, self.r, self.h = nn.Linear(2, 2), nn.Linear(2, 2), nn.ReLU(), nn.Linear(2, 1)

        def forward(self, x):
            return self.h(self.r(self.b(self.a(x))))

    class Functional(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.h = nn.Linear(2, 2), nn.Linear(2, 1)

        def forward(self, x):
            return self.h(torch.nn.functional.relu(self.a(x)))

    x = torch.tensor([[0.0, 1.0]], dtype=D)
    for net, why in ((TwoAffine(), "two affine maps in one layer"), (Functional(), "outside the graph layer")):
        net = _dyadic(net.double(), 1)
        v = nsverify.check_module(net, lambda o, t: (o - t).pow(2).sum(), x, torch.zeros(1, 1, dtype=D),
                                  progress=False)
        assert why in v.stats.get("layers_declined", ""), v.stats.get("layers_declined")
        # the layers read from the autograd graph (tests/test_oracle_trace_layers.py) take such models over
        assert v.stats.get("layers_from") == "autograd graph" or "autograd graph" in v.stats["layers_declined"]
    m = _dyadic(ResNetLike().double(), 0).train()  # BatchNorm in training mode: batch statistics
    v = _check(m, torch.ones(2, 1, 4, 4, dtype=D), torch.tensor([0, 1]))
    assert "BatchNorm" in v.stats.get("layers_declined", "")
