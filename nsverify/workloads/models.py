"""Reference models whose ReLU and MaxPool layers are switchable AD variants (:mod:`nsverify.ad`).

* ``mlp``: 784-2048-2048-2048-10 (Bertoin et al. App. D.1), hidden width scaled by ``width``;
* ``lenet5``: the LeNet-5 Boustany cites (conv 1->6 5x5, pool, conv 6->16 5x5, pool, 256-120-84-10; 28x28);
* ``vgg11/13/16/19``: CIFAR-style VGG (kuangliu/pytorch-cifar: conv3x3 stacks, 2x2 maxpools, one 512x10
  linear layer), channel widths scaled by ``width``, optional BatchNorm after each convolution;
* ``resnet18``: torchvision's ResNet18 adapted to CIFAR as in Bertoin App. D.1 (first conv 3x3, 10 classes,
  BatchNorm optional -> Identity); it keeps torchvision's 3x3/stride-2/padding-1 maxpool (overlapping windows);
* :class:`PreNormTransformer`: a pre-norm transformer encoder on feature sequences (LayerNorm, multi-head softmax
  attention, a GELU MLP, residual adds) with a mean-pooled ReLU head -- the shape of issue 23's target (b).

Every ReLU is a :class:`nsverify.ad.ReLUVariant` and every maxpool a :class:`nsverify.ad.MaxPool2dVariant`, both
built without a rule, so the backward rule is chosen at backward time (:func:`nsverify.ad.backward_rules`, or a
zone program with :func:`nsverify.papers.zones.use_rule`).
"""
from __future__ import annotations

from torch import nn

from nsverify.ad import MaxPool2dVariant, ReLUVariant
from nsverify.errors import NsverifyError

VGG_CFG = {
    "vgg11": [64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"],
    "vgg13": [64, 64, "M", 128, 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"],
    "vgg16": [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"],
    "vgg19": [64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M",
              512, 512, 512, 512, "M"],
}

#: input shape (C, H, W) each model expects
INPUT_SHAPE = {"mlp": (1, 28, 28), "lenet5": (1, 28, 28), "resnet18": (3, 32, 32),
               **{k: (3, 32, 32) for k in VGG_CFG}}


def _w(c: int, width: float) -> int:
    return max(1, int(round(c * width)))


def mlp(width: float = 1.0, hidden: int = 2048, depth: int = 3, in_features: int = 784,
        classes: int = 10) -> nn.Sequential:
    h = _w(hidden, width)
    layers: list[nn.Module] = [nn.Flatten()]
    prev = in_features
    for _ in range(depth):
        layers += [nn.Linear(prev, h), ReLUVariant()]
        prev = h
    layers.append(nn.Linear(prev, classes))
    return nn.Sequential(*layers)


def lenet5(width: float = 1.0, classes: int = 10, bn: bool = False) -> nn.Sequential:
    c1, c2 = _w(6, width), _w(16, width)
    norm = (lambda c: nn.BatchNorm2d(c)) if bn else (lambda c: nn.Identity())
    return nn.Sequential(
        nn.Conv2d(1, c1, 5), norm(c1), ReLUVariant(), MaxPool2dVariant(2),
        nn.Conv2d(c1, c2, 5), norm(c2), ReLUVariant(), MaxPool2dVariant(2),
        nn.Flatten(), nn.Linear(c2 * 16, _w(120, width)), ReLUVariant(),
        nn.Linear(_w(120, width), _w(84, width)), ReLUVariant(), nn.Linear(_w(84, width), classes))


def vgg(name: str = "vgg11", width: float = 1.0, bn: bool = False, classes: int = 10,
        in_channels: int = 3) -> nn.Sequential:
    if name not in VGG_CFG:
        raise NsverifyError(f"unknown VGG {name!r}; choose from {', '.join(VGG_CFG)}.")
    layers: list[nn.Module] = []
    prev = in_channels
    for v in VGG_CFG[name]:
        if v == "M":
            layers.append(MaxPool2dVariant(2, 2))
            continue
        c = _w(v, width)
        layers += [nn.Conv2d(prev, c, 3, padding=1)] + ([nn.BatchNorm2d(c)] if bn else []) + [ReLUVariant()]
        prev = c
    layers += [nn.Flatten(), nn.Linear(prev, classes)]
    return nn.Sequential(*layers)


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, bn: bool):
        super().__init__()
        norm = (lambda c: nn.BatchNorm2d(c)) if bn else (lambda c: nn.Identity())
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=not bn)
        self.bn1 = norm(cout)
        self.relu1 = ReLUVariant()
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=not bn)
        self.bn2 = norm(cout)
        self.relu2 = ReLUVariant()
        self.short = nn.Identity()
        if stride != 1 or cin != cout:
            self.short = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=not bn), norm(cout))

    def forward(self, x):
        out = self.relu1(self.bn1(self.conv1(x)))
        return self.relu2(self.bn2(self.conv2(out)) + self.short(x))


class ResNet18(nn.Module):
    def __init__(self, width: float = 1.0, bn: bool = True, classes: int = 10):
        super().__init__()
        c = [_w(v, width) for v in (64, 128, 256, 512)]
        self.stem = nn.Sequential(nn.Conv2d(3, c[0], 3, 1, 1, bias=not bn),
                                  nn.BatchNorm2d(c[0]) if bn else nn.Identity(), ReLUVariant(),
                                  MaxPool2dVariant(3, 2, 1))
        blocks, prev = [], c[0]
        for i, ch in enumerate(c):
            blocks += [BasicBlock(prev, ch, 1 if i == 0 else 2, bn), BasicBlock(ch, ch, 1, bn)]
            prev = ch
        self.blocks = nn.Sequential(*blocks)
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(prev, classes))

    def forward(self, x):
        return self.head(self.blocks(self.stem(x)))


class EncoderBlock(nn.Module):
    """One pre-norm encoder block: ``x + attn(LN(x))``, then ``x + MLP(LN(x))`` with a GELU MLP (4d hidden)."""

    def __init__(self, d: int, heads: int, approximate: str = "tanh"):
        super().__init__()
        if d % heads:
            raise NsverifyError(f"the model width d={d} must be a multiple of heads={heads}")
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(approximate=approximate), nn.Linear(4 * d, d))

    def forward(self, x):
        b, n, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).reshape(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = (q @ k.transpose(-1, -2) / (d // self.heads) ** 0.5).softmax(dim=-1)
        x = x + self.proj((a @ v).transpose(1, 2).reshape(b, n, d))
        return x + self.mlp(self.ln2(x))


class PreNormTransformer(nn.Module):
    """``blocks`` pre-norm encoder blocks of width ``d`` on (batch, tokens, d) inputs, a final LayerNorm, the mean
    over tokens, and a head ``Linear(d, d) -> ReLU -> Linear(d, classes)``."""

    def __init__(self, d: int = 16, heads: int = 2, blocks: int = 2, classes: int = 10,
                 approximate: str = "tanh"):
        super().__init__()
        self.blocks = nn.ModuleList([EncoderBlock(d, heads, approximate) for _ in range(blocks)])
        self.ln = nn.LayerNorm(d)
        self.head = nn.Sequential(nn.Linear(d, d), nn.ReLU(), nn.Linear(d, classes))

    def forward(self, x):
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln(x).mean(1))


MODELS = ("mlp", "lenet5", *VGG_CFG, "resnet18")


def build_model(name: str, width: float = 1.0, bn: bool = False, classes: int = 10) -> nn.Module:
    """Build reference model ``name`` (one of :data:`MODELS`) with its default PyTorch init."""
    if name == "mlp":
        if bn:
            raise NsverifyError("the MLP has no BatchNorm variant; use bn=False (or a CNN for BN studies).")
        return mlp(width, classes=classes)
    if name == "lenet5":
        return lenet5(width, classes, bn)
    if name in VGG_CFG:
        return vgg(name, width, bn, classes)
    if name == "resnet18":
        return ResNet18(width, bn, classes)
    raise NsverifyError(f"unknown model {name!r}; choose from {', '.join(MODELS)}.")


def plain_layers(model: nn.Module) -> nn.Module:
    """Replace (in place) every switchable ReLU / max pool of ``model`` by PyTorch's own ``nn.ReLU`` /
    ``nn.MaxPool2d`` with the same geometry (for code that observes torch modules, such as Park et al.'s training
    monitor); returns the model."""
    for name, child in list(model.named_children()):
        if isinstance(child, ReLUVariant):
            setattr(model, name, nn.ReLU())
        elif isinstance(child, MaxPool2dVariant):
            setattr(model, name, nn.MaxPool2d(child.kernel_size, child.stride, child.padding, child.dilation))
        else:
            plain_layers(child)
    return model
