"""The ops of the models people train, evaluated exactly: batch norm (eval and training mode), layer norm, group
norm, average pools, embedding, dropout, transposed convolution, attention (softmax, bmm, baddbmm,
scaled_dot_product_attention) and the tanh GELU.

Each op is checked against PyTorch's float64 value and autograd at random points, in forward and reverse mode:
the exact value (a Fraction, or a rigorous interval) must contain PyTorch's float64 result up to float64's own
rounding error, bounded by Higham's gamma_k = k u / (1 - k u) times the sum of the magnitudes that the float run
rounds (:func:`_float64_tol`).  Then ``check_module`` decides small networks using each op at a ReLU (or max)
tie, and every decided verdict's certificate is re-checked by ``verify_certificate`` with ``fn`` replayed.
Where an interval value straddles a tie the oracle must answer "unknown", never guess.
"""

from __future__ import annotations

import warnings
from fractions import Fraction

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as tF

import nsverify
from nsverify.errors import UnsupportedOpError
from nsverify.oracle import Evaluation, exact_backprop, exact_gradient, module_function, verify_certificate
from nsverify.oracle.numbers import Ival, bounds

F = Fraction
D = torch.float64
U = 2.0**-53  # float64's unit roundoff


def _float64_tol(k: int, scale: float) -> float:
    """Higham's forward error bound for a float64 evaluation with at most k roundings in a chain, each on a
    quantity bounded by ``scale``: gamma_k * scale."""
    return k * U / (1 - k * U) * scale


def _assert_encloses(exact, ref: float, tol: float, what: str):
    lo, hi = bounds(exact)
    assert float(lo) - tol <= ref <= float(hi) + tol, f"{what}: float64 {ref!r} outside [{lo}, {hi}] +- {tol}"
    assert isinstance(exact, Fraction) or float(hi - lo) <= tol, f"{what}: enclosure wider than float64's error"


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _fixed(seed: int, *shape):
    return torch.randn(*shape, dtype=D, generator=_gen(seed))


# the cases: (name, fn of a flat w, size of w, k = roundings in the longest float64 chain of fn)
BN_EVAL = nn.BatchNorm2d(3).double().eval()
BN_TRAIN = nn.BatchNorm2d(3).double().train()
BN1D_TRAIN = nn.BatchNorm1d(4, affine=False).double().train()
LN = nn.LayerNorm(4).double()
LN2 = nn.LayerNorm((2, 3), elementwise_affine=False).double()
GN = nn.GroupNorm(2, 4).double()
INN = nn.InstanceNorm2d(2, affine=True).double()
RMS = nn.RMSNorm(4).double()
with torch.no_grad():
    for _m, _s in ((BN_EVAL, 1), (BN_TRAIN, 2), (LN, 3), (GN, 4), (INN, 13)):
        _m.weight.copy_(_fixed(_s, *_m.weight.shape))
        _m.bias.copy_(_fixed(_s + 10, *_m.bias.shape))
    RMS.weight.copy_(_fixed(14, 4))
    BN_EVAL.running_mean.copy_(_fixed(5, 3))
    BN_EVAL.running_var.copy_(_fixed(6, 3).abs() + 0.5)
C54 = _fixed(7, 2, 3, 3, 3)
CT1 = _fixed(8, 2, 3, 3)
CT2 = _fixed(9, 4, 3, 3, 2)
IDX = torch.tensor([[0, 2, 3], [3, 3, 4]])
FLASH = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
MHA = nn.MultiheadAttention(4, 2, batch_first=True).double().eval()
MHA_FROZEN = nn.MultiheadAttention(4, 2, batch_first=True).double().eval().requires_grad_(False)


def _two_outputs(mha, x):
    """Self-attention (the fused path needs query, key and value to be one tensor): the output and the
    head-averaged attention weights, both used."""
    out, weights = mha(x, x, x)
    return (out ** 2).sum() + (weights * C54.reshape(-1)[:9].reshape(1, 3, 3)).sum()


def _attention(w):
    q, k, v = w[:12].reshape(2, 3, 2), w[12:24].reshape(2, 3, 2), w[24:].reshape(2, 3, 2)
    a = torch.softmax(torch.baddbmm(torch.zeros(2, 3, 3, dtype=D), q, k.transpose(1, 2), alpha=0.5), -1)
    return (torch.bmm(a, v) ** 2).sum()


CASES = [
    ("batch_norm eval", lambda w: (BN_EVAL(w.reshape(2, 3, 3, 3)) * C54).sum(), 54, 64),
    ("batch_norm train", lambda w: (BN_TRAIN(w.reshape(2, 3, 3, 3)) * C54).sum(), 54, 128),
    ("batch_norm1d train, no affine", lambda w: (BN1D_TRAIN(w.reshape(3, 4)) ** 3).sum(), 12, 64),
    ("layer_norm", lambda w: (LN(w.reshape(3, 4)) * C54.reshape(-1)[:12].reshape(3, 4)).sum(), 12, 64),
    ("layer_norm 2-d shape, no affine", lambda w: (LN2(w.reshape(2, 2, 3)) ** 3).sum(), 12, 64),
    ("instance_norm (batch norm on the folded batch)", lambda w: (INN(w.reshape(1, 2, 3, 3)) ** 3).sum(), 18, 64),
    ("RMSNorm (composite)", lambda w: (RMS(w.reshape(3, 4)) ** 3).sum(), 12, 64),
    ("var, std, var_mean, std_mean", lambda w: torch.var(w) ** 2 + (torch.std(w.reshape(2, 3, 2), dim=(0, 2)) *
                                                                    torch.arange(3.0, dtype=D)).sum()
     + sum((t ** 3).sum() for t in torch.std_mean(w.reshape(4, 3), dim=1, correction=2))
     + sum((t ** 2).sum() for t in torch.var_mean(w.reshape(4, 3), dim=0, keepdim=True))
     + torch.var(w.reshape(3, 4), 1, False).sum(), 12, 64),
    ("logsumexp", lambda w: (torch.logsumexp(w.reshape(2, 3, 2), dim=(0, 2), keepdim=True) ** 2).sum()
     + torch.logsumexp(w, 0), 12, 64),
    ("group_norm", lambda w: (GN(w.reshape(2, 4, 3)) * C54.reshape(-1)[:24].reshape(2, 4, 3)).sum(), 24, 64),
    ("avg_pool1d ceil_mode", lambda w: (tF.avg_pool1d(w.reshape(1, 2, 7), 3, 2, 1, ceil_mode=True) ** 2).sum(),
     14, 32),
    ("avg_pool2d no pad count", lambda w: (tF.avg_pool2d(w.reshape(1, 2, 5, 5), 2, padding=1,
                                                         count_include_pad=False) ** 2).sum(), 50, 64),
    ("avg_pool2d ceil_mode", lambda w: (tF.avg_pool2d(w.reshape(2, 5, 5), 3, 2, 1, ceil_mode=True) ** 2).sum(),
     50, 64),
    ("avg_pool3d divisor_override", lambda w: (tF.avg_pool3d(w.reshape(1, 1, 4, 4, 4), 2,
                                                             divisor_override=3) ** 2).sum(), 64, 64),
    ("adaptive_avg_pool1d uneven", lambda w: (tF.adaptive_avg_pool1d(w.reshape(1, 2, 5), 3) ** 2).sum(), 10, 32),
    ("adaptive_avg_pool2d uneven", lambda w: (tF.adaptive_avg_pool2d(w.reshape(1, 2, 5, 5), (3, 2)) ** 2).sum(),
     50, 64),
    ("adaptive_avg_pool3d uneven", lambda w: (tF.adaptive_avg_pool3d(w.reshape(1, 5, 4, 3), (2, 3, 2)) ** 2).sum(),
     60, 64),
    ("nearest upsampling 1d/2d/3d, nearest-exact, fractional scale", lambda w: (
        (tF.interpolate(w.reshape(1, 2, 2, 3), size=(5, 4)) ** 3).sum()
        + (tF.interpolate(w.reshape(1, 2, 6), scale_factor=1.7) ** 3).sum()
        + (tF.interpolate(w.reshape(1, 1, 2, 2, 3), size=(3, 3, 5), mode="nearest-exact") ** 3).sum()
        + (tF.interpolate(w.reshape(1, 1, 3, 4), size=(2, 3)) ** 3).sum()), 12, 64),
    ("embedding", lambda w: (tF.embedding(IDX, w.reshape(5, 3)) ** 2).sum(), 15, 32),
    ("conv_transpose1d input", lambda w: (tF.conv_transpose1d(w.reshape(1, 2, 5), CT1, stride=2, padding=1,
                                                              output_padding=1) ** 2).sum(), 10, 64),
    ("conv_transpose1d weight, dilation", lambda w: (tF.conv_transpose1d(_fixed(10, 1, 2, 5), w.reshape(2, 3, 3),
                                                                         stride=2, dilation=2) ** 2).sum(), 18, 64),
    ("conv_transpose2d groups", lambda w: (tF.conv_transpose2d(w[:32].reshape(1, 4, 2, 4), w[32:].reshape(4, 1, 3, 2),
                                                               stride=(2, 1), padding=(1, 0), groups=2,
                                                               dilation=(1, 2)) ** 2).sum(), 56, 64),
    ("conv_transpose2d unbatched", lambda w: (tF.conv_transpose2d(w.reshape(4, 2, 2), CT2, stride=2) ** 2).sum(),
     16, 64),
    ("softmax/bmm/baddbmm attention", _attention, 36, 64),
    ("scaled_dot_product_attention", lambda w: (tF.scaled_dot_product_attention(
        w[:12].reshape(1, 3, 4), w[12:24].reshape(1, 3, 4), w[24:].reshape(1, 3, 4)) ** 2).sum(), 36, 64),
    ("gelu tanh", lambda w: (tF.gelu(w, approximate="tanh") ** 2).sum(), 6, 32),
    ("flash attention kernel, causal, scale", lambda w: (FLASH(
        w[:24].reshape(1, 2, 3, 4), w[24:48].reshape(1, 2, 3, 4), w[48:].reshape(1, 2, 3, 4), is_causal=True,
        scale=0.3)[0] ** 2).sum(), 72, 64),
    ("flash attention kernel, head dim 2, float mask", lambda w: (FLASH(
        w[:12].reshape(1, 2, 3, 2), w[12:24].reshape(1, 2, 3, 2), w[24:].reshape(1, 2, 3, 2),
        attn_mask=torch.tensor([[0.5, -1.0, 0.25]], dtype=D))[0] ** 2).sum(), 36, 64),
    ("MultiheadAttention eval (math path)", lambda w: (MHA(
        w.reshape(1, 3, 4), w.reshape(1, 3, 4), w.reshape(1, 3, 4))[0] ** 2).sum(), 12, 64),
    ("MultiheadAttention eval, frozen (fused path in forward mode)", lambda w: _two_outputs(
        MHA_FROZEN, w.reshape(1, 3, 4)), 12, 64),
    ("_native_batch_norm_legit_no_training", lambda w: (torch.ops.aten._native_batch_norm_legit_no_training(
        w.reshape(2, 3, 3, 3), BN_EVAL.weight, BN_EVAL.bias, BN_EVAL.running_mean, BN_EVAL.running_var, 0.1,
        1e-5)[0] * C54).sum(), 54, 64),
    ("_native_batch_norm_legit no_stats", lambda w: (torch.ops.aten._native_batch_norm_legit(
        w.reshape(2, 3, 3, 3), None, None, True, 0.1, 1e-5)[0] * C54).sum(), 54, 128),
]


@pytest.mark.parametrize("name,fn,n,k", CASES, ids=[c[0] for c in CASES])
def test_exact_op_encloses_float64(name, fn, n, k):
    """Value and gradient, forward and reverse mode, at two random points."""
    for seed in (0, 1):
        w = _fixed(100 + seed, n)
        wf = w.clone().requires_grad_(True)
        y = fn(wf)
        (g,) = torch.autograd.grad(y, wf)
        # magnitudes the float run rounds: the output's terms and the gradient entries (both O(sum |.|))
        scale = 1 + abs(y.item()) + g.abs().sum().item()
        tol = _float64_tol(k, scale)
        for mode, run in (("forward", exact_gradient), ("reverse", exact_backprop)):
            ge, value = run(fn, w, return_value=True)
            _assert_encloses(value, y.item(), tol, f"{name} {mode} value")
            assert len(ge) == n
            for j, (a, b) in enumerate(zip(ge, g.tolist())):
                _assert_encloses(a, b, tol, f"{name} {mode} d/dw[{j}]")


def test_linear_ops_are_exact_on_dyadic_inputs():
    """Average pools with power-of-two divisors, embedding and transposed convolution on small integers: float64
    is exact there, and so is the oracle (Fractions equal to PyTorch's floats, no intervals)."""
    w = torch.randint(-4, 5, (32,), generator=_gen(3)).to(D)
    cases = [lambda v: (tF.avg_pool2d(v.reshape(2, 4, 4), 2) ** 2).sum(),
             lambda v: (tF.adaptive_avg_pool2d(v.reshape(2, 4, 4), 2) ** 2).sum(),
             lambda v: (tF.embedding(IDX, v[:15].reshape(5, 3)) ** 2).sum(),
             lambda v: (tF.conv_transpose2d(v[:8].reshape(1, 2, 2, 2), v[8:26].reshape(2, 1, 3, 3),
                                            stride=2) ** 2).sum()]
    for fn in cases:
        wf = w.clone().requires_grad_(True)
        y = fn(wf)
        (g,) = torch.autograd.grad(y, wf)
        for run in (exact_gradient, exact_backprop):
            ge, value = run(fn, w, return_value=True)
            assert value == F(y.item()) and tuple(ge) == tuple(F(x) for x in g.tolist())


def test_batch_norm_eval_is_exact_where_var_plus_eps_is_a_square():
    bn = nn.BatchNorm1d(2, eps=2.0**-10).double().eval()
    with torch.no_grad():
        bn.running_var.copy_(torch.tensor([4 - 2.0**-10, 0.25 - 2.0**-10], dtype=D))  # rstd = 1/2, 2
        bn.running_mean.copy_(torch.tensor([1.0, -0.5], dtype=D))
    g, value = exact_gradient(lambda w: (bn(w.reshape(2, 2)) ** 2).sum(), torch.tensor([3.0, 0.5, 1.0, 1.5], dtype=D),
                              return_value=True)
    # ((3-1)/2)^2 + ((0.5+0.5)*2)^2 + 0 + ((1.5+0.5)*2)^2
    assert value == 1 + 4 + 0 + 16 and g == (F(1), F(8), F(0), F(16))


def test_embedding_padding_idx_is_pytorchs_rule_not_the_derivative():
    """PyTorch's embedding backward gives the padding row no gradient: the reverse mode reproduces that exactly,
    the forward mode differentiates the lookup, and the oracle says PyTorch's vector is not the gradient."""
    def fn(w):
        return (tF.embedding(IDX, w.reshape(5, 3), padding_idx=2) ** 2).sum()

    w = torch.arange(15, dtype=D) / 4
    wf = w.clone().requires_grad_(True)
    (g,) = torch.autograd.grad(fn(wf), wf)
    rev = exact_backprop(fn, w)
    assert tuple(rev) == tuple(F(x) for x in g.tolist()) and all(x == 0 for x in rev[6:9])
    fwd = exact_gradient(fn, w)
    assert fwd[6:9] == (F(1, 1) * 2 * F(6, 4), F(2) * F(7, 4), F(2) * F(8, 4))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        v = nsverify.check_gradient(fn, w, progress=False)
    assert v.status == "not_member" and verify_certificate(v.to_json(), fn)


# ------------------------------------------------------------------------------------------- dropout (train)
def test_dropout_train_mask_is_the_float_runs():
    """nn.Dropout in training mode: every call of fn starts from the same random state, so the exact traces use
    the float run's mask and the layer is linear in its input."""
    drop = nn.Dropout(0.4).train()
    c = _fixed(11, 12)

    def fn(w):
        return (drop(torch.sin(w)) ** 2 * c).sum() + torch.nn.functional.dropout(w, 0.5, True).sum()

    w = _fixed(12, 12)
    ev = Evaluation(fn, w)
    fl = ev.float_ad()
    tol = _float64_tol(32, 1 + sum(abs(x) for x in fl))
    for got in (ev.forward().gradient, ev.reverse()[0]):
        for a, b in zip(got, fl):
            _assert_encloses(a, b, tol, "dropout gradient")
    v = nsverify.check_gradient(fn, w, progress=False)
    assert v.status == "member"


def test_native_dropout_and_bernoulli_masks_are_constants():
    """The masks of bernoulli_ (tensor probabilities), bernoulli, native_dropout and nn.Dropout: read from the
    float shadow, or (no shadow) drawn here as PyTorch draws them -- the same masks either way (p = 1/2 keeps
    the scale 2 exact, so the gradients are equal)."""
    drop = nn.Dropout(0.5).train()

    def fn(w):
        m = torch.empty_like(w).bernoulli_(torch.full((6,), 0.3, dtype=D))  # w's shape: dispatched
        y = torch.native_dropout(w * m, 0.5, True)[0] + drop(w) + torch.bernoulli(w.detach(), 0.25) * w
        return (y * torch.arange(6, dtype=D)).sum()

    w = torch.arange(6, dtype=D) - 2
    for shadow in (True, False):
        ev = Evaluation(fn, w, shadow=shadow)
        assert ev.forward().gradient == ev.reverse()[0] == tuple(F(x) for x in ev.float_ad())


def test_bernoulli_with_w_dependent_probabilities_is_refused():
    def fn(w):
        return (w * torch.bernoulli(torch.sigmoid(w))).sum()

    with pytest.raises(UnsupportedOpError, match="bernoulli with probabilities that depend on w"):
        nsverify.check_gradient(fn, torch.zeros(3, dtype=D), progress=False)


# ----------------------------------------------------------------------------------- networks at ties
def _decided(v, fn, status="member"):
    assert v.status == status, v
    check = verify_certificate(v.to_json(), fn)
    assert check, check.reason
    return v


def _mse(o, t):
    return ((o - t) ** 2).mean()


def _dyadic_(model, seed, denom=8):
    g = _gen(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randint(-4, 5, p.shape, generator=g).to(D) / denom)


class ConvBNBlock(nn.Module):
    """A ResNet-style basic block with BatchNorm (eval mode), a residual add and an average-pool head."""

    def __init__(self, c=2, eps=2.0**-10):
        super().__init__()
        self.conv1 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c, eps=eps)
        self.conv2 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c, eps=eps)
        self.fc = nn.Linear(c, 1)

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        y = torch.relu(x + self.bn2(self.conv2(y)))
        return self.fc(tF.adaptive_avg_pool2d(y, 1).flatten(1))


def _bn_block(eps, var):
    m = ConvBNBlock(eps=eps).double()
    _dyadic_(m, 0)
    with torch.no_grad():
        for bn in (m.bn1, m.bn2):
            bn.bias.zero_()
            bn.running_mean.copy_(torch.tensor([0.25, -0.125], dtype=D))
            bn.running_var.copy_(torch.tensor([var, var], dtype=D))
    m.eval()
    # conv1's channel 0 at sample 0 equals the running mean at some pixels: bn1's ReLU sits at its kink there
    x = torch.tensor([[[[1, 0, 1], [0, 2, 0], [1, 0, -1]], [[0, 1, 0], [1, -1, 1], [0, 0, 1]]]], dtype=D)
    return m, x, torch.zeros(1, 1, dtype=D)


@pytest.mark.parametrize("eps,var", [(2.0**-10, 4 - 2.0**-10), (1e-5, 2.0)], ids=["rational rstd", "irrational"])
def test_check_module_resnet_block_bn_eval(eps, var):
    m, x, t = _bn_block(eps, var)
    fn, _ = module_function(m, _mse, x, t)
    v = _decided(nsverify.check_module(m, _mse, x, t, progress=False, time_limit=120), fn)
    assert v.kinks
    # a vector off AD's: the oracle certifies it is outside the Clarke set
    bad = [float(a) + 1.0 for a in v.exact_ad]
    _decided(nsverify.check_module(m, _mse, x, t, ad=bad, progress=False, time_limit=120), fn, "not_member")


def test_tie_between_irrational_bn_outputs_is_exact():
    """A max over two BatchNorm outputs that are equal in exact arithmetic but irrational (rstd = 1/sqrt(2 +
    eps)): their enclosures overlap, but the exact root (numbers.Surd) makes the tie exact and the verdict is
    decided; a vector off the tie's Clarke set (the two entries' gradients sum to rstd on coordinates 0 and 2,
    here 0.1 + 0.5 = 0.6 < 0.707) is not_member."""
    bn = nn.BatchNorm1d(2).double().eval()
    with torch.no_grad():
        bn.running_var.fill_(2.0)

    def fn(w):
        return bn(w.reshape(2, 2))[:, 0].max(dim=0).values

    w = torch.tensor([2.0, 0.0, 2.0, 1.0], dtype=D)
    v = _decided(nsverify.check_gradient(fn, w, progress=False), fn)
    assert any(isinstance(s.value, Ival) for s in v.kinks)  # an irrational tie, decided exactly
    _decided(nsverify.check_gradient(fn, w, ad=[0.1, 0.0, 0.5, 0.0], progress=False), fn, "not_member")
    bn.eps = 0.0  # rstd = 1/sqrt(2) still irrational; with var 4 it is exact and the tie is decided
    with torch.no_grad():
        bn.running_var.fill_(4.0)
    _decided(nsverify.check_gradient(fn, torch.tensor([2.0, 0.0, 2.0, 1.0], dtype=D), progress=False), fn)


def test_check_module_batch_norm_train_mode():
    """Batch statistics: the ReLU after BatchNorm sits at its kink where a sample equals the batch mean (a curved
    kink argument: (x - mean(x)) / std(x))."""
    m = nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2), nn.ReLU(), nn.Linear(2, 1)).double().train()
    _dyadic_(m, 1)
    with torch.no_grad():
        m[1].bias.zero_()
    x = torch.tensor([[1.0, 0.0], [2.0, 1.0], [3.0, 2.0]], dtype=D)  # equally spaced: the middle one is the mean
    t = torch.zeros(3, 1, dtype=D)
    fn, _ = module_function(m, _mse, x, t)
    v = _decided(nsverify.check_module(m, _mse, x, t, progress=False), fn)
    assert v.kinks


def test_check_module_layer_norm_and_group_norm():
    m = nn.Sequential(nn.Linear(3, 3), nn.LayerNorm(3), nn.ReLU(), nn.Linear(3, 4), nn.Unflatten(1, (4, 1)),
                      nn.GroupNorm(2, 4), nn.Flatten(), nn.ReLU(), nn.Linear(4, 1)).double()
    _dyadic_(m, 2)
    with torch.no_grad():
        m[0].weight.copy_(torch.eye(3, dtype=D))
        m[0].bias.zero_()
        m[1].bias.zero_()
    x = torch.tensor([[1.0, 2.0, 3.0], [0.0, 4.0, 8.0]], dtype=D)  # the middle feature is the row mean: LN gives 0
    t = torch.zeros(2, 1, dtype=D)
    fn, _ = module_function(m, _mse, x, t)
    v = _decided(nsverify.check_module(m, _mse, x, t, progress=False), fn)
    assert v.kinks


class Block(nn.Module):
    """A pre-norm transformer block (LayerNorm, two-head softmax attention, GELU MLP) and a ReLU head."""

    def __init__(self, d=4, heads=2, approximate="tanh"):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(approximate=approximate), nn.Linear(2 * d, d))
        self.head = nn.Linear(d, 2)
        self.heads = heads

    def forward(self, x):
        b, n, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).reshape(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = torch.softmax(q @ k.transpose(-1, -2) / (d // self.heads) ** 0.5, dim=-1)
        x = x + self.proj((a @ v).transpose(1, 2).reshape(b, n, d))
        x = x + self.mlp(self.ln2(x))
        return torch.relu(self.head(x.mean(1)))


@pytest.mark.parametrize("approximate", ["tanh", "none"])
def test_check_module_transformer_block_relu_tie(approximate):
    """The head's first unit is dead at exactly 0 (zero weights and bias): a ReLU tie on an irrational input."""
    m = Block(approximate=approximate).double()
    _dyadic_(m, 3)
    with torch.no_grad():
        m.head.weight[0].zero_()
        m.head.bias[0] = 0.0
    x = torch.tensor([[[1.0, 0.0, -1.0, 2.0], [0.0, 1.0, 1.0, -2.0], [2.0, -1.0, 0.0, 1.0]]], dtype=D)
    t = torch.zeros(1, 2, dtype=D)
    fn, _ = module_function(m, _mse, x, t)
    v = _decided(nsverify.check_module(m, _mse, x, t, progress=False, time_limit=120), fn)
    assert v.kinks and any(isinstance(g, Ival) for g in v.exact_ad)


def test_check_module_avg_pool_and_conv_transpose():
    m = nn.Sequential(nn.ConvTranspose2d(1, 2, 2, stride=2), nn.ReLU(), nn.AvgPool2d(2, ceil_mode=True),
                      nn.Flatten(), nn.Linear(8, 1)).double()
    _dyadic_(m, 4)
    with torch.no_grad():
        m[0].bias.zero_()
    x = torch.tensor([[[[1.0, 0.0], [2.0, -1.0]]]], dtype=D)  # the zero input pixel puts 8 ReLUs at the kink
    t = torch.zeros(1, 1, dtype=D)
    fn, _ = module_function(m, _mse, x, t)
    v = _decided(nsverify.check_module(m, _mse, x, t, progress=False), fn)
    assert v.kinks
    fi, wi = module_function(m, _mse, x, t, wrt="inputs")
    _decided(nsverify.check_gradient(fi, wi, progress=False), fi)


def test_check_module_embedding_dropout_train():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(6, 4)
            self.drop = nn.Dropout(0.5)
            self.fc = nn.Linear(4, 1)

        def forward(self, idx):
            return torch.relu(self.fc(self.drop(self.emb(idx)).mean(1)))

    m = Net().double().train()
    _dyadic_(m, 5)
    with torch.no_grad():
        m.fc.bias.zero_()
        m.fc.weight.zero_()  # the head sits at its kink
    idx = torch.tensor([[0, 3, 3], [5, 1, 2]])
    t = torch.ones(2, 1, dtype=D)
    fn, _ = module_function(m, _mse, idx, t)
    v = _decided(nsverify.check_module(m, _mse, idx, t, progress=False), fn)
    assert v.kinks and np.isfinite(v.ad).all()


@pytest.mark.parametrize("norm_first,activation", [(False, "relu"), (True, "gelu")])
def test_check_module_stock_transformer_encoder_layer(norm_first, activation):
    """nn.TransformerEncoderLayer as it ships: in eval mode the forward-mode trace takes its fused path
    (_transformer_encoder_layer_fwd, _native_multi_head_attention), evaluated as their decomposition, whose
    feed-forward ReLU still makes kink sites; in training mode the math path with dropout.  A dead feed-forward
    unit and a dead head unit sit at their kinks."""
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.enc = nn.TransformerEncoderLayer(4, 2, dim_feedforward=8, dropout=0.1, batch_first=True,
                                                  norm_first=norm_first, activation=activation)
            self.head = nn.Linear(4, 2)

        def forward(self, x):
            return torch.relu(self.head(self.enc(x).mean(1)))

    m = Net().double()
    _dyadic_(m, 3)
    with torch.no_grad():
        m.head.weight[0].zero_()
        m.head.bias[0] = 0.0
        m.enc.linear1.weight[2].zero_()
        m.enc.linear1.bias[2] = 0.0
    x = torch.tensor([[[1.0, 0.0, -1.0, 2.0], [0.0, 1.0, 1.0, -2.0], [2.0, -1.0, 0.0, 1.0]]], dtype=D)
    t = torch.zeros(1, 2, dtype=D)
    fn, _ = module_function(m, _mse, x, t)
    for mode in (m.eval, m.train) if activation == "relu" else (m.eval,):
        mode()
        v = _decided(nsverify.check_module(m, _mse, x, t, progress=False, time_limit=120), fn)
        # the head unit, and with ReLU the dead feed-forward unit at each of the 3 tokens (gelu is smooth)
        assert len(v.kinks) == (4 if activation == "relu" else 1)
        tol = _float64_tol(256, 1 + sum(abs(a) for a in v.ad))
        for a, b in zip(v.exact_ad, v.ad):
            _assert_encloses(a, b, tol, "encoder layer gradient")
