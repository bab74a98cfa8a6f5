"""Reference models whose ReLU and MaxPool layers are switchable AD variants (:mod:`nsverify.ad`).

* ``mlp``: 784-2048-2048-2048-10 (Bertoin et al. App. D.1), hidden width scaled by ``width``;
* ``lenet5``: the LeNet-5 Boustany cites (conv 1->6 5x5, pool, conv 6->16 5x5, pool, 256-120-84-10; 28x28);
* ``vgg11/13/16/19``: CIFAR-style VGG (kuangliu/pytorch-cifar: conv3x3 stacks, 2x2 maxpools, one 512x10
  linear layer), channel widths scaled by ``width``, optional BatchNorm after each convolution;
* ``resnet18``: torchvision's ResNet18 adapted to CIFAR as in Bertoin App. D.1 (first conv 3x3, 10 classes,
  BatchNorm optional -> Identity); it keeps torchvision's 3x3/stride-2/padding-1 maxpool (overlapping windows);
* :class:`PreNormTransformer`: a pre-norm transformer encoder on feature sequences (LayerNorm, multi-head softmax
  attention, a GELU MLP, residual adds) with a mean-pooled ReLU head -- the shape of issue 23's target (b);
* :func:`opt_decoder`: an OPT-style causal language model (token and learned position embeddings, pre-LayerNorm
  blocks with causal self-attention written out and a ReLU MLP, a final LayerNorm, an LM head tied to the token
  embedding), built from PyTorch's own modules; :func:`plant_dead_unit` puts one MLP unit exactly at its kink;
* :class:`Lemma2Logit` (:func:`lemma2_logit`): any classifier with Park, Chun and Lee's Lemma 2 term
  ``relu(u) - relu(-u)`` added to one logit (App. D.2), so that AD is provably outside the Clarke set.

In the CNNs and the MLP every ReLU is a :class:`nsverify.ad.ReLUVariant` and every maxpool a
:class:`nsverify.ad.MaxPool2dVariant`, both built without a rule, so the backward rule is chosen at backward time
(:func:`nsverify.ad.backward_rules`, or a zone program with :func:`nsverify.papers.zones.use_rule`);
:func:`plain_layers` swaps them for PyTorch's own modules.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
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


# ----------------------------------------------------------------------------------------- OPT-style decoder
class OPTBlock(nn.Module):
    """One OPT decoder layer (pre-LayerNorm, as OPT-125m..66b): ``x + out(attn(LN(x)))`` with causal multi-head
    self-attention written out (q/k/v ``nn.Linear``, ``scores = q @ k^T / sqrt(dh)``, the future masked, softmax,
    ``@ v``), then ``x + fc2(ReLU(fc1(LN(x))))`` with a ``d -> 4d -> d`` MLP.  ``mask``: ``"fill"`` masks the
    future with ``masked_fill(-inf)``; ``"additive"`` adds a float mask holding ``torch.finfo(dtype).min`` there
    (as Hugging Face's OPT does)."""

    def __init__(self, d: int, heads: int, mask: str = "fill"):
        super().__init__()
        if d % heads:
            raise NsverifyError(f"the model width d={d} must be a multiple of heads={heads}")
        if mask not in MASKS:
            raise NsverifyError(f"mask={mask!r}: choose from {', '.join(MASKS)}")
        self.heads, self.mask = heads, mask
        self.self_attn_layer_norm = nn.LayerNorm(d)
        self.q_proj, self.k_proj, self.v_proj = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
        self.out_proj = nn.Linear(d, d)
        self.final_layer_norm = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, 4 * d)
        self.activation = nn.ReLU()
        self.fc2 = nn.Linear(4 * d, d)

    def attention(self, h: torch.Tensor) -> torch.Tensor:
        b, n, d = h.shape
        dh = d // self.heads

        def split(t):  # (b, n, d) -> (b, heads, n, dh)
            return t.reshape(b, n, self.heads, dh).transpose(1, 2)

        q, k, v = split(self.q_proj(h)), split(self.k_proj(h)), split(self.v_proj(h))
        scores = q @ k.transpose(-1, -2) / math.sqrt(dh)
        future = torch.ones(n, n, dtype=torch.bool, device=h.device).triu(1)
        if self.mask == "fill":
            scores = scores.masked_fill(future, float("-inf"))
        else:
            scores = scores + torch.zeros(n, n, dtype=h.dtype, device=h.device).masked_fill(
                future, torch.finfo(h.dtype).min)
        return self.out_proj((scores.softmax(dim=-1) @ v).transpose(1, 2).reshape(b, n, d))

    def forward(self, x):
        x = x + self.attention(self.self_attn_layer_norm(x))
        return x + self.fc2(self.activation(self.fc1(self.final_layer_norm(x))))


#: the causal masks :class:`OPTBlock` can apply
MASKS = ("fill", "additive")


class OPTDecoder(nn.Module):
    """Token ids (batch, seq) -> next-token logits (batch, seq, vocab): token + learned position embeddings,
    ``layers`` :class:`OPTBlock`, a final LayerNorm and an LM head tied to the token embedding (``logits =
    h @ embed_tokens.weight^T``, so the embedding is one parameter, counted once)."""

    def __init__(self, layers: int = 4, d: int = 256, heads: int = 4, vocab: int = 512, seq: int = 32,
                 mask: str = "fill"):
        super().__init__()
        if min(layers, d, heads, vocab, seq) < 1:
            raise NsverifyError(f"opt_decoder: layers={layers}, d={d}, heads={heads}, vocab={vocab}, seq={seq}; "
                                "give positive sizes")
        self.seq = seq
        self.embed_tokens = nn.Embedding(vocab, d)
        self.embed_positions = nn.Embedding(seq, d)
        self.layers = nn.ModuleList([OPTBlock(d, heads, mask) for _ in range(layers)])
        self.final_layer_norm = nn.LayerNorm(d)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        if tokens.dim() != 2 or tokens.dtype != torch.long:
            raise NsverifyError(f"OPTDecoder takes token ids of shape (batch, seq) and dtype torch.long, got "
                                f"{tuple(tokens.shape)} {tokens.dtype}")
        n = tokens.shape[1]
        if n > self.seq:
            raise NsverifyError(f"OPTDecoder: {n} tokens, but the position embedding has {self.seq}; build it with "
                                f"seq >= {n}")
        x = self.embed_tokens(tokens) + self.embed_positions(torch.arange(n, device=tokens.device))
        for blk in self.layers:
            x = blk(x)
        return F.linear(self.final_layer_norm(x), self.embed_tokens.weight)


def opt_decoder(layers: int = 4, d: int = 256, heads: int = 4, vocab: int = 512, seq: int = 32,
                mask: str = "fill") -> OPTDecoder:
    """An OPT-style decoder (:class:`OPTDecoder`) with PyTorch's default initialisation (seed it first).  The
    defaults are issue 34's target (d): 4 layers, d = 256, 4 heads, 512 tokens, 32 positions (3,299,328
    parameters)."""
    return OPTDecoder(layers, d, heads, vocab, seq, mask)


def next_token_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of next-token logits (batch, seq, vocab) against the following tokens (batch, seq), averaged
    over every position (the language-model loss)."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def plant_dead_unit(model: OPTDecoder, layer: int = 0, unit: int = 0) -> OPTDecoder:
    """Zero row ``unit`` of ``layers[layer].fc1`` (weight row and bias), in place: that MLP unit's ReLU input is
    exactly 0 on every token (0 * finite summed, plus 0), in any float dtype -- a ReLU at its kink.  Returns the
    model."""
    if not isinstance(model, OPTDecoder):
        raise NsverifyError(f"plant_dead_unit takes an OPTDecoder, got {type(model).__name__}")
    if not 0 <= layer < len(model.layers):
        raise NsverifyError(f"plant_dead_unit: layer={layer}, the model has layers 0..{len(model.layers) - 1}")
    fc1 = model.layers[layer].fc1
    if not 0 <= unit < fc1.out_features:
        raise NsverifyError(f"plant_dead_unit: unit={unit}, the MLP has units 0..{fc1.out_features - 1}")
    with torch.no_grad():
        fc1.weight[unit].zero_()
        fc1.bias[unit] = 0.0
    return model


# ------------------------------------------------------------------------------------ Park's Lemma 2 term
class Lemma2Logit(nn.Module):
    """``model(x)`` with Park, Chun and Lee's Lemma 2 term (App. D.2) added to logit ``logit`` (the last axis):
    ``relu(u) - relu(-u)``, where ``u = p[index] - c`` for a parameter ``p`` of the model and ``c`` its value when
    the wrapper was built (a constant), so that ``u`` is exactly 0 at the point.

    As a function the term equals ``u`` (``relu(u) - relu(-u) = u`` for every real ``u``), so the true partial
    derivative of ``loss(wrapper(x), y)`` along ``p[index]`` is the model's own partial plus
    ``d loss / d logit`` summed over the logit's positions; PyTorch's AD takes ``relu'(0) = 0`` in both ReLUs and
    misses that second part.  With ``param=None`` the wrapper owns a fresh parameter ``u`` (value 0, ``c = 0``),
    whose AD is exactly 0 and whose true derivative is that second part alone."""

    def __init__(self, model: nn.Module, logit: int = 0, param: str | None = None, index: int = 0):
        super().__init__()
        self.model, self.logit = model, logit
        if param is None:
            self.u = nn.Parameter(torch.zeros(1, dtype=next(model.parameters()).dtype))
            self.param, self.index = "u", 0
        else:
            params = dict(model.named_parameters())
            if param not in params:
                raise NsverifyError(f"lemma2_logit: the model has no parameter {param!r}; choose one of "
                                    f"{', '.join(list(params)[:8])}{', ...' if len(params) > 8 else ''}")
            if not 0 <= index < params[param].numel():
                raise NsverifyError(f"lemma2_logit: index={index}, but {param!r} has {params[param].numel()} "
                                    "entries")
            self.param, self.index = f"model.{param}", index
        self.register_buffer("c", self.point_value().detach().clone())

    def point_value(self) -> torch.Tensor:
        """The chosen coordinate ``p[index]`` (a one-entry tensor, in the graph)."""
        p = self
        for part in self.param.split("."):  # attributes, not get_parameter: functional calls swap in plain tensors
            p = getattr(p, part)
        return p.reshape(-1)[self.index:self.index + 1]

    def term(self) -> torch.Tensor:
        u = self.point_value() - self.c
        return F.relu(u) - F.relu(-u)

    def forward(self, x):
        out = self.model(x)
        if not -out.shape[-1] <= self.logit < out.shape[-1]:
            raise NsverifyError(f"lemma2_logit: logit={self.logit}, but the model has {out.shape[-1]} logits")
        onehot = torch.zeros(out.shape[-1], dtype=out.dtype, device=out.device)
        onehot[self.logit] = 1.0
        return out + self.term() * onehot


def lemma2_logit(model: nn.Module, logit: int = 0, param: str | None = None, index: int = 0) -> Lemma2Logit:
    """``model`` with Park's Lemma 2 term on logit ``logit`` (:class:`Lemma2Logit`): AD is not in the Clarke set
    along the term's coordinate whenever ``d loss / d logit`` (summed over the logit's positions) is not 0."""
    return Lemma2Logit(model, logit, param, index)
