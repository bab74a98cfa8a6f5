"""Networks of real-model blocks (residual, BatchNorm, LayerNorm, attention) with exact dyadic parameters, integer
inputs and *planted* ties: what :func:`nsverify.strategies.networks` draws with ``blocks=...``.

A :class:`BlockNetSpec` is a small model of the kind people train: an optional image stage of residual blocks
(convolutions, optional BatchNorm in eval mode, optional max pooling), then a token stage (the image's pixels
become tokens, as in a ViT) of linear residual blocks, pre-norm LayerNorm MLP blocks and softmax attention blocks,
then a ReLU head on the token mean. Every parameter and buffer is a dyadic rational, every input an integer;
BatchNorm's running variance is ``s^2 - eps`` with ``s`` in ``bn_scales`` and ``eps = 2^-10``, so its scale
``1/sqrt(var + eps) = 1/s`` is rational (exact in float64 when ``s`` is a power of two).

Ties are planted structurally, so they are exact in the reals whatever irrational values (LayerNorm's rsqrt,
softmax's exp) flow around them:

* ``kink``: a ReLU unit whose weight row and bias are zero (for a BatchNorm unit: zero convolution row, zero
  running mean, zero beta). Its pre-activation is exactly 0 at every sample and position, and it still has a
  bias (a Linear bias, a shared convolution bias or a BatchNorm beta), which is the premise of Park et al.'s
  Theorems 4 and 6 (Sec. 3, with Condition 1 / Condition 2 of Sec. 2.2).
* ``dead``: a ReLU unit with zero weight row and a negative bias (a dead unit: pre-activation = bias < 0); after
  a max pool its windows are all-zero ties.
* ``pool``: a max-pool window of the first image block whose input patches are repeated (the receptive fields
  of all window entries are one constant region of the input), so every entry of the window is the same
  function of the parameters and the window's maximum is attained by all of them.

The strategy re-checks every planted tie in float64 (an exact 0.0 pre-activation, a negative one, equal pool
entries) and rejects a draw where it does not hold.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from fractions import Fraction

import torch
import torch.nn.functional as F
from hypothesis import assume
from hypothesis import strategies as st
from torch import nn

from nsverify.errors import NsverifyError

BLOCK_KINDS = ("residual", "batchnorm", "layernorm", "attention")
BLOCK_TIE_KINDS = ("kink", "dead", "pool")
BLOCK_LOSSES = ("linear", "squared", "cross_entropy")
#: BatchNorm's eps in generated blocks; running_var = s^2 - BN_EPS is exact in float64 for the scales drawn
BN_EPS = 2.0**-10
#: LayerNorm's eps in generated blocks (a power of two, exact in every float dtype)
LN_EPS = 2.0**-10

_IMAGE_KINDS = ("batchnorm",)
_TOKEN_KINDS = ("layernorm", "attention")


# ----------------------------------------------------------------------------------------------------------
# the specification
# ----------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class BlockCfg:
    """One block's architecture.

    ``kind``: ``residual`` (``relu(shortcut(x) + lin2(relu(norm1(lin1(x)))))``, ``lin`` convolutions in the
    image stage, Linear maps on tokens; ``batchnorm`` is the same block with eval-mode BatchNorm after both
    convolutions), ``layernorm`` (pre-norm MLP: ``x + fc2(relu(fc1(LayerNorm(x))))``) or ``attention``
    (``x + proj(softmax(q k^T / sqrt(d_head)) v)`` with q, k, v from one Linear on ``LayerNorm(x)`` when ``norm``).
    """

    kind: str
    width_in: int
    width_out: int
    hidden: int
    conv: bool = False
    kernel: int = 1
    bn: bool = False
    shortcut: str = "identity"  # "identity" | "1x1" (a bias-free 1x1 convolution / Linear)
    pool: tuple | None = None  # (kernel, stride) of a max pool after the block (image stage only)
    heads: int = 1
    norm: bool = True


@dataclass(frozen=True)
class BlockTie:
    """A planted tie. ``kind``: ``kink`` / ``dead`` / ``pool``; ``where``: the module name of the ReLU (kink,
    dead) or max pool (pool) in :class:`BlockNet`; ``unit``: the ReLU's channel / feature (kink, dead) or the
    pool's output entry (batch, channel, row, column); ``members``: for pools, the tied pre-pool entries."""

    kind: str
    where: str
    unit: tuple
    members: tuple = ()

    def __str__(self):
        extra = f" members={list(self.members)}" if self.members else ""
        return f"{self.kind} at {self.where} unit {self.unit}{extra}"


@dataclass(frozen=True)
class BlockNetSpec:
    """A drawn block network: the architecture, every parameter and buffer as exact rationals (``state``:
    ``(name, shape, values)`` in :meth:`BlockNet.state_dict` order), the integer input minibatch, the loss and
    its targets, and the planted ties."""

    layout: str  # "image": input (B, C, H, W); "tokens": input (B, T, D)
    in_shape: tuple  # per sample
    batch: int
    x: tuple  # integers (Fractions), flattened (batch, *in_shape)
    blocks: tuple  # BlockCfg per block
    n_out: int
    state: tuple  # (name, shape, values) per parameter / buffer
    loss: str = "linear"
    target: tuple = ()  # linear: coefficients (B * n_out); squared: targets; cross_entropy: class indices (B)
    ties: tuple = ()  # BlockTie per planted tie
    meta: dict = field(default_factory=dict, compare=False)

    # ------------------------------------------------------------------ torch
    def build(self, dtype=torch.float64, device="cpu") -> BlockNet:
        """The ``torch.nn.Module`` (eval mode) with this spec's exact values."""
        net = BlockNet(self)
        sd = {name: _tensor(vals, shape) for name, shape, vals in self.state}
        net.load_state_dict(sd)
        return net.to(dtype=dtype, device=device).eval()

    def inputs(self, dtype=torch.float64, device="cpu") -> torch.Tensor:
        return _tensor(self.x, (self.batch, *self.in_shape)).to(dtype=dtype, device=device)

    def targets(self, dtype=torch.float64, device="cpu") -> torch.Tensor:
        if self.loss == "cross_entropy":
            return torch.tensor([int(t) for t in self.target], dtype=torch.long, device=device)
        return _tensor(self.target, (self.batch, self.n_out)).to(dtype=dtype, device=device)

    def loss_fn(self):
        """``loss(output, targets)`` -> scalar, as ``nsverify.check_module`` takes it."""
        return LOSS_FNS[self.loss]

    @property
    def rational(self) -> bool:
        """True when the network and its loss compute with rationals only (no LayerNorm, attention, cross-entropy
        or mean over a non-power-of-two count) and every BatchNorm scale is a power of two: then float64 is exact
        on these small dyadic networks."""
        if self.loss == "cross_entropy" or any(b.kind in _TOKEN_KINDS for b in self.blocks):
            return False
        if any(b.bn for b in self.blocks) and not all(_pow2(s) for s in self.meta.get("bn_scales", ())):
            return False
        return _pow2(Fraction(self.meta.get("mean_count", 1)))

    def describe(self) -> str:
        lines = [f"BlockNetSpec: {self.layout} input {tuple(self.in_shape)}, batch {self.batch}, loss {self.loss}, "
                 f"{self.n_out} outputs"]
        for i, b in enumerate(self.blocks):
            lines.append(f"  block {i}: {b}")
        for name, shape, vals in self.state:
            lines.append(f"    {name} {list(shape)} = {[str(v) for v in vals]}")
        lines.append(f"  X {[self.batch, *self.in_shape]} = {[str(v) for v in self.x]}")
        lines.append(f"  loss target/coefficients = {[str(v) for v in self.target]}")
        for t in self.ties:
            lines.append(f"  planted {t}")
        return "\n".join(lines)

    __str__ = describe


def _tensor(vals, shape) -> torch.Tensor:
    return torch.tensor([float(v) for v in vals], dtype=torch.float64).reshape(shape)


def _pow2(v: Fraction) -> bool:
    v = Fraction(v)
    return v > 0 and v.numerator & (v.numerator - 1) == 0 and v.denominator & (v.denominator - 1) == 0


def _linear_loss(out, t):
    return (out * t).sum()


def _squared_loss(out, t):
    return ((out - t) ** 2).sum() / 2


def _ce_loss(out, t):
    return F.cross_entropy(out, t, reduction="sum")


LOSS_FNS = {"linear": _linear_loss, "squared": _squared_loss, "cross_entropy": _ce_loss}


# ----------------------------------------------------------------------------------------------------------
# torch modules
# ----------------------------------------------------------------------------------------------------------
class ResidualBlock(nn.Module):
    """``relu(shortcut(x) + norm2(lin2(relu(norm1(lin1(x))))))``, then an optional max pool. ``lin``: a
    convolution (kernel k, padding k // 2, then a 1x1 one) on images, a Linear map on tokens; ``norm``: eval-mode
    BatchNorm2d (the convolutions then have no bias: BatchNorm's beta is the bias) or nothing."""

    def __init__(self, cfg: BlockCfg):
        super().__init__()
        cin, cout, h = cfg.width_in, cfg.width_out, cfg.hidden
        if cfg.conv:
            self.lin1 = nn.Conv2d(cin, h, cfg.kernel, padding=cfg.kernel // 2, bias=not cfg.bn)
            self.lin2 = nn.Conv2d(h, cout, 1, bias=not cfg.bn)
        else:
            self.lin1 = nn.Linear(cin, h)
            self.lin2 = nn.Linear(h, cout)
        self.norm1 = nn.BatchNorm2d(h, eps=BN_EPS) if cfg.bn else nn.Identity()
        self.norm2 = nn.BatchNorm2d(cout, eps=BN_EPS) if cfg.bn else nn.Identity()
        self.act1 = nn.ReLU()
        self.act2 = nn.ReLU()
        if cfg.shortcut == "1x1":
            self.shortcut = nn.Conv2d(cin, cout, 1, bias=False) if cfg.conv else nn.Linear(cin, cout, bias=False)
        else:
            self.shortcut = nn.Identity()
        self.pool = nn.MaxPool2d(*cfg.pool) if cfg.pool else nn.Identity()

    def forward(self, x):
        y = self.norm2(self.lin2(self.act1(self.norm1(self.lin1(x)))))
        return self.pool(self.act2(self.shortcut(x) + y))


class LayerNormBlock(nn.Module):
    """Pre-norm MLP: ``x + fc2(relu(fc1(LayerNorm(x))))`` on tokens (B, T, D)."""

    def __init__(self, cfg: BlockCfg):
        super().__init__()
        self.ln = nn.LayerNorm(cfg.width_in, eps=LN_EPS)
        self.fc1 = nn.Linear(cfg.width_in, cfg.hidden)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(cfg.hidden, cfg.width_in)

    def forward(self, x):
        return x + self.fc2(self.act(self.fc1(self.ln(x))))


class AttentionBlock(nn.Module):
    """``x + proj(softmax(q k^T / sqrt(d_head)) v)``, 1 or 2 heads, q, k, v from one Linear on ``LayerNorm(x)``
    (pre-norm) or on x."""

    def __init__(self, cfg: BlockCfg):
        super().__init__()
        d = cfg.width_in
        self.heads = cfg.heads
        self.ln = nn.LayerNorm(d, eps=LN_EPS) if cfg.norm else nn.Identity()
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)

    def forward(self, x):
        b, n, d = x.shape
        dh = d // self.heads
        q, k, v = self.qkv(self.ln(x)).reshape(b, n, 3, self.heads, dh).permute(2, 0, 3, 1, 4)
        a = torch.softmax(q @ k.transpose(-1, -2) / dh**0.5, dim=-1)
        return x + self.proj((a @ v).transpose(1, 2).reshape(b, n, d))


_MODULES = {"residual": ResidualBlock, "batchnorm": ResidualBlock, "layernorm": LayerNormBlock,
            "attention": AttentionBlock}


class BlockNet(nn.Module):
    """The module of a :class:`BlockNetSpec`: the blocks in order (image blocks, then the pixels as tokens, then
    token blocks), the mean over tokens (or pixels), a Linear head and a ReLU (``head_act``)."""

    def __init__(self, spec: BlockNetSpec):
        super().__init__()
        self.layout = spec.layout
        self.blocks = nn.ModuleList([_MODULES[c.kind](c) for c in spec.blocks])
        self._image = [c.conv for c in spec.blocks]
        width = spec.blocks[-1].width_out if spec.blocks else spec.in_shape[-1 if spec.layout == "tokens" else 0]
        self.head = nn.Linear(width, spec.n_out)
        self.head_act = nn.ReLU()

    def forward(self, x):
        image = self.layout == "image"
        for blk, conv in zip(self.blocks, self._image):
            if image and not conv:
                x = x.flatten(2).transpose(1, 2)  # (B, C, H, W) -> tokens (B, H*W, C)
                image = False
            x = blk(x)
        feats = x.flatten(2).mean(-1) if image else x.mean(1)
        return self.head_act(self.head(feats))


# ----------------------------------------------------------------------------------------------------------
# strategies
# ----------------------------------------------------------------------------------------------------------
def _dyadic(max_int: int, frac_bits: int):
    return st.builds(lambda k, d: Fraction(k, 1 << d), st.integers(-max_int, max_int), st.integers(0, frac_bits))


@st.composite
def block_networks(
    draw,
    blocks=BLOCK_KINDS,
    depth=(1, 2),
    batch=(1, 2),
    width=(1, 3),
    tokens=(1, 3),
    image=(2, 3),
    pooling=("none", "maxpool"),
    heads=(1, 2),
    ties=(1, 2),
    tie_kinds=BLOCK_TIE_KINDS,
    tie_units=("inner", "head"),
    losses=BLOCK_LOSSES,
    bn_scales=(1, Fraction(1, 2), 2, Fraction(3, 2)),
    max_int: int = 2,
    frac_bits: int = 2,
    max_input: int = 2,
) -> BlockNetSpec:
    """Draw a :class:`BlockNetSpec` of 1..``depth`` blocks drawn from ``blocks`` (any of ``residual``,
    ``batchnorm``, ``layernorm``, ``attention``) with 1..``ties`` planted ties of the kinds ``tie_kinds`` (any of
    ``kink``, ``dead``, ``pool``; see the module docstring). ``tie_units``: where kink and dead ties may be planted:
``inner`` (a block's ReLU: a residual block's first ReLU, a LayerNorm block's MLP ReLU) and / or ``head`` (the
ReLU head).

    A network with a ``batchnorm`` block, or a ``residual`` block drawn for the image stage, starts from an
    image (B, C, H, W) (C from ``width``, side from ``image``); otherwise from tokens (B, T, D) (T from
    ``tokens``, D from ``width``, at least 2 when a LayerNorm or attention block follows). ``pooling``: whether
    image blocks may end with a 2x2 max pool (stride 1 or 2). ``heads``: allowed head counts of attention blocks
    (a head count must divide the width). ``bn_scales``: the BatchNorm scales s = sqrt(running_var + eps) drawn
    (rationals; powers of two keep float64 exact). Parameters are k / 2^d with |k| <= ``max_int``,
    d <= ``frac_bits``; inputs are integers in [-``max_input``, ``max_input``]. Shrinks toward one block, batch 1,
    small widths, one tie, zeros.
    """
    blocks = tuple(blocks)
    for k in blocks:
        if k not in BLOCK_KINDS:
            raise NsverifyError(f"unknown block kind {k!r}; choose from {', '.join(BLOCK_KINDS)}")
    for k in tie_kinds:
        if k not in BLOCK_TIE_KINDS:
            raise NsverifyError(f"unknown tie kind {k!r}; choose from {', '.join(BLOCK_TIE_KINDS)}")
    if not blocks:
        raise NsverifyError("block_networks needs at least one block kind")
    for u in tie_units:
        if u not in ("inner", "head"):
            raise NsverifyError(f"unknown tie unit {u!r}; choose from inner, head")
    for s in bn_scales:
        if Fraction(s) <= 0:
            raise NsverifyError(f"BatchNorm scale {s} must be positive")
    n = draw(st.integers(*depth), label="blocks")
    kinds = [draw(st.sampled_from(blocks), label=f"block kind {i}") for i in range(n)]
    has_token = any(k in _TOKEN_KINDS for k in kinds)
    if any(k in _IMAGE_KINDS for k in kinds):
        image_stage = True
    elif "residual" in kinds:
        image_stage = draw(st.booleans(), label="image stage")
    else:
        image_stage = False
    # image blocks first (residual, batchnorm as convolutions), then token blocks (residual as Linear)
    if image_stage:
        kinds = sorted(kinds, key=lambda k: k in _TOKEN_KINDS)
    B = draw(st.integers(*batch), label="batch")
    wmin = 2 if has_token else 1
    w_lo, w_hi = max(width[0], wmin), max(width[1], wmin)
    val = _dyadic(max_int, frac_bits)
    cfgs = []
    if image_stage:
        C = draw(st.integers(w_lo, w_hi), label="channels")
        side = draw(st.integers(*image), label="side")
        in_shape = (C, side, side)
        layout = "image"
        cur, sp = C, side
    else:
        D = draw(st.integers(w_lo, w_hi), label="width")
        T = draw(st.integers(*tokens), label="tokens")
        in_shape = (T, D)
        layout = "tokens"
        cur, sp = D, None
    in_image = image_stage
    for i, kind in enumerate(kinds):
        if in_image and kind in _TOKEN_KINDS:
            in_image = False
        hidden = draw(st.integers(1, max(1, w_hi)), label=f"hidden {i}")
        if kind in ("residual", "batchnorm"):
            conv = in_image
            shortcut = draw(st.sampled_from(["identity", "1x1"]), label=f"shortcut {i}")
            out = cur if shortcut == "identity" else draw(st.integers(w_lo, w_hi), label=f"width out {i}")
            kernel = draw(st.sampled_from([1, 3]), label=f"kernel {i}") if conv else 1
            pool = None
            if conv and "maxpool" in pooling and sp >= 2 and draw(st.booleans(), label=f"pool {i}"):
                pool = (2, draw(st.sampled_from([2, 1]), label=f"pool stride {i}"))
            cfg = BlockCfg(kind, cur, out, hidden, conv=conv, kernel=kernel, bn=kind == "batchnorm",
                           shortcut=shortcut, pool=pool)
            cur = out
            if pool:
                sp = (sp - 2) // pool[1] + 1
        elif kind == "layernorm":
            cfg = BlockCfg(kind, cur, cur, hidden)
        else:
            hs = [h for h in heads if cur % h == 0] or [1]
            cfg = BlockCfg(kind, cur, cur, 0, heads=draw(st.sampled_from(hs), label=f"heads {i}"),
                           norm=draw(st.sampled_from([True, False]), label=f"norm {i}"))
        cfgs.append(cfg)
    n_out = draw(st.integers(1, 2), label="outputs")
    loss = draw(st.sampled_from(list(losses)), label="loss")
    if loss == "cross_entropy" and n_out < 2:
        n_out = 2
    spec = BlockNetSpec(layout, in_shape, B, (), tuple(cfgs), n_out, (), loss)
    # values: every parameter / buffer of the module, in state_dict order
    bn_scale = {}
    state = []
    for name, t in BlockNet(spec).state_dict().items():
        shape = tuple(t.shape)
        size = math.prod(shape)
        if name.endswith("num_batches_tracked"):
            vals = (Fraction(0),)
        elif name.endswith("running_var"):
            ss = [Fraction(draw(st.sampled_from(list(bn_scales)), label="bn scale")) for _ in range(size)]
            bn_scale[name] = ss
            vals = tuple(s * s - Fraction(BN_EPS) for s in ss)
        else:
            vals = tuple(draw(st.lists(val, min_size=size, max_size=size), label=name))
        state.append((name, shape, vals))
    x = tuple(Fraction(v) for v in draw(st.lists(st.integers(-max_input, max_input),
                                                 min_size=B * math.prod(in_shape), max_size=B * math.prod(in_shape)),
                                        label="inputs"))
    if loss == "cross_entropy":
        target = tuple(Fraction(t) for t in draw(st.lists(st.integers(0, n_out - 1), min_size=B, max_size=B)))
    else:
        target = tuple(draw(st.lists(val, min_size=B * n_out, max_size=B * n_out), label="targets"))
    mean_count = sp * sp if image_stage else in_shape[0]  # pixels averaged by the head, or tokens
    spec = replace(spec, x=x, state=tuple(state), target=target,
                   meta={"bn_scales": [s for ss in bn_scale.values() for s in ss], "mean_count": mean_count,
                         "max_int": max_int, "frac_bits": frac_bits})
    # planted ties
    ed = _Edit(spec)
    planted = []
    sites = [s for s in _relu_sites(spec) if ("head" if s[0] == "head_act" else "inner") in tie_units]
    n_ties = draw(st.integers(*ties), label="number of ties")
    for _ in range(n_ties):
        options = [k for k in tie_kinds if (_pool_site(spec) is not None if k == "pool" else bool(sites))]
        if not options:
            break
        kind = draw(st.sampled_from(options), label="tie kind")
        if kind == "pool":
            tie = _plant_pool(draw, ed)
        else:
            where, unit_count = draw(st.sampled_from(sites), label="tie unit")
            unit = draw(st.integers(0, unit_count - 1), label="unit")
            if any(t.where == where and t.unit == (unit,) for t in planted):
                continue
            bias = Fraction(0) if kind == "kink" else -draw(st.integers(1, 2), label="dead bias")
            _zero_unit(ed, where, unit, bias)
            tie = BlockTie(kind, where, (unit,))
        if tie is not None and tie not in planted:
            planted.append(tie)
    assume(planted)
    spec = replace(ed.freeze(), ties=tuple(planted))
    problems = verify_ties(spec)
    assume(not problems)
    return spec


def _relu_sites(spec: BlockNetSpec) -> list:
    """(ReLU module name, number of units) where a unit can be zeroed: every block's inner ReLU and the head."""
    out = []
    for i, c in enumerate(spec.blocks):
        if c.kind in ("residual", "batchnorm"):
            out.append((f"blocks.{i}.act1", c.hidden))
        elif c.kind == "layernorm":
            out.append((f"blocks.{i}.act", c.hidden))
    out.append(("head_act", spec.n_out))
    return out


class _Edit:
    def __init__(self, spec: BlockNetSpec):
        self.spec = spec
        self.state = {name: [shape, list(vals)] for name, shape, vals in spec.state}
        self.x = list(spec.x)

    def row(self, name: str, unit: int, value: Fraction):
        shape, vals = self.state[name]
        size = math.prod(shape[1:])
        vals[unit * size:(unit + 1) * size] = [Fraction(value)] * size

    def freeze(self) -> BlockNetSpec:
        st_ = tuple((n, s, tuple(v)) for n, (s, v) in self.state.items())
        return replace(self.spec, state=st_, x=tuple(self.x))


def _zero_unit(ed: _Edit, where: str, unit: int, bias: Fraction):
    """The ReLU unit's pre-activation becomes ``bias`` at every sample and position: zero weight row; bias (or,
    after BatchNorm, zero running mean and beta = bias, since BatchNorm(0) = (0 - mean) gamma / s + beta)."""
    if where == "head_act":
        lin, bn = "head", None
    else:
        blk = where.rsplit(".", 1)[0]
        cfg = ed.spec.blocks[int(blk.split(".")[1])]
        lin = f"{blk}.lin1" if cfg.kind in ("residual", "batchnorm") else f"{blk}.fc1"
        bn = f"{blk}.norm1" if cfg.bn else None
    ed.row(f"{lin}.weight", unit, 0)
    if bn is None:
        ed.row(f"{lin}.bias", unit, bias)
    else:
        ed.row(f"{bn}.running_mean", unit, 0)
        ed.row(f"{bn}.bias", unit, bias)


def _pool_site(spec: BlockNetSpec):
    """The first image block, when it has a max pool (its input is the network input: patches can repeat)."""
    if spec.layout == "image" and spec.blocks and spec.blocks[0].conv and spec.blocks[0].pool:
        return 0
    return None


def _plant_pool(draw, ed: _Edit):
    """Repeat input patches so that every entry of one pool window of block 0 reads the same constant region:
    rows/columns [i - r, i + k - 1 + r] x [j - r, j + k - 1 + r] (r = the convolution's radius), per sample and
    channel; where that region reaches the zero padding, the region is zero."""
    spec = ed.spec
    cfg = spec.blocks[0]
    C, H, W = spec.in_shape
    k, s = cfg.pool
    r = cfg.kernel // 2
    n_o = (H - k) // s + 1
    b = draw(st.integers(0, spec.batch - 1), label="pool sample")
    oi = draw(st.integers(0, n_o - 1), label="pool row")
    oj = draw(st.integers(0, n_o - 1), label="pool column")
    i0, j0 = oi * s, oj * s
    rows = range(i0 - r, i0 + k + r)
    cols = range(j0 - r, j0 + k + r)
    inside = all(0 <= a < H for a in rows) and all(0 <= c < W for c in cols)
    for c in range(C):
        v = ed.x[_xi(spec, b, c, i0, j0)] if inside else Fraction(0)
        for a in rows:
            for cc in cols:
                if 0 <= a < H and 0 <= cc < W:
                    ed.x[_xi(spec, b, c, a, cc)] = v
    members = tuple((b, ch, i0 + p, j0 + q) for ch in range(cfg.width_out) for p in range(k) for q in range(k))
    ch = draw(st.integers(0, cfg.width_out - 1), label="pool channel")
    return BlockTie("pool", "blocks.0.pool", (b, ch, oi, oj), tuple(m for m in members if m[1] == ch))


def _xi(spec, b, c, i, j) -> int:
    C, H, W = spec.in_shape
    return ((b * C + c) * H + i) * W + j


def float_trace(spec: BlockNetSpec, net: BlockNet | None = None) -> dict:
    """Float64 inputs of every ReLU and max pool of the built network (module name -> tensor)."""
    net = net if net is not None else spec.build(torch.float64)
    rec: dict = {}
    hooks = [m.register_forward_hook(lambda mod, inp, out, name=name: rec.__setitem__(name, inp[0].detach()))
             for name, m in net.named_modules() if isinstance(m, (nn.ReLU, nn.MaxPool2d))]
    try:
        with torch.no_grad():
            net(spec.inputs(torch.float64))
    finally:
        for h in hooks:
            h.remove()
    return rec


def unit_values(y: torch.Tensor, unit: int) -> torch.Tensor:
    """The entries of a ReLU input ``y`` that belong to channel / feature ``unit`` (dim 1 of an image, the last
    dim of tokens and of the head)."""
    if y.dim() == 4:
        return y[:, unit]
    return y[..., unit]


def verify_ties(spec: BlockNetSpec) -> list[str]:
    """Check every planted tie in float64: a kink's pre-activation is exactly 0.0 everywhere, a dead unit's is
    negative, a pool window's members are equal and its maximum; the BatchNorm scales are exact. Returns the
    problems (empty: all hold)."""
    net = spec.build(torch.float64)
    rec = float_trace(spec, net)
    problems = []
    for t in spec.ties:
        y = rec[t.where]
        if t.kind in ("kink", "dead"):
            u = unit_values(y, t.unit[0])
            if t.kind == "kink" and not bool((u == 0).all()):
                problems.append(f"{t}: pre-activation {u.flatten().tolist()} is not exactly 0")
            if t.kind == "dead" and not bool((u < 0).all()):
                problems.append(f"{t}: pre-activation {u.flatten().tolist()} is not negative")
        else:
            vals = [y[m].item() for m in t.members]
            b, ch, oi, oj = t.unit
            k, s = spec.blocks[0].pool
            window = y[b, ch, oi * s:oi * s + k, oj * s:oj * s + k]
            if len(set(vals)) != 1 or vals[0] != window.max().item() or len(vals) < 2:
                problems.append(f"{t}: window entries {vals} are not one tied maximum")
    for name, m in net.named_modules():
        if isinstance(m, nn.BatchNorm2d):
            s = torch.sqrt(m.running_var + m.eps)
            want = torch.tensor([float(v) for v in _bn_scales_of(spec, name)], dtype=torch.float64)
            if want.numel() and not torch.equal(s, want):
                problems.append(f"{name}: sqrt(running_var + eps) = {s.tolist()} is not {want.tolist()}")
    return problems


def _bn_scales_of(spec: BlockNetSpec, name: str) -> list[Fraction]:
    """The exact BatchNorm scales s with running_var = s^2 - eps (recomputed from the stored variance)."""
    for n, _, vals in spec.state:
        if n == f"{name}.running_var":
            out = []
            for v in vals:
                sq = v + Fraction(BN_EPS)
                num, den = math.isqrt(sq.numerator), math.isqrt(sq.denominator)
                if num * num != sq.numerator or den * den != sq.denominator:
                    raise NsverifyError(f"{name}: running_var + eps = {sq} is not a rational square")
                out.append(Fraction(num, den))
            return out
    return []


__all__ = ["BLOCK_KINDS", "BLOCK_TIE_KINDS", "BN_EPS", "LN_EPS", "BlockCfg", "BlockNet", "BlockNetSpec",
           "BlockTie", "block_networks", "float_trace", "unit_values", "verify_ties"]
