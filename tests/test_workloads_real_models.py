"""Issue 34's workloads (nsverify.workloads.real_models, the OPT-style decoder, Park et al.'s Lemma 2 term).

Expected values are independent of the code under test: parameter counts from the architectures' published sizes
or counted by hand, the dead units' pre-activations read from forward hooks, and the Lemma 2 term's derivative
derived by hand (Park, Chun and Lee, App. D.2: relu(u) - relu(-u) = u) and checked with float64 one-sided
differences of the loss against a softmax written out in numpy.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from nsverify.ad import MaxPool2dVariant, ReLUVariant
from nsverify.errors import NsverifyError
from nsverify.workloads import datasets, models, real_models

SMALL_OPT = dict(layers=2, d=16, heads=2, vocab=300, seq=8)


def _opt(mask="fill", dtype=torch.float32, **kw):
    torch.manual_seed(0)
    return models.opt_decoder(**{**SMALL_OPT, **kw}, mask=mask).to(dtype)


# ------------------------------------------------------------------------------------------------ OPT decoder
def test_opt_decoder_default_size_counted_by_hand():
    """4 layers of d = 256: attention 4 x (256*256 + 256), MLP 256*1024 + 1024 + 1024*256 + 256, two LayerNorms
    2 x 512; token embedding 512 x 256 (the LM head is the same tensor), positions 32 x 256, final LayerNorm 512."""
    per_layer = 4 * (256 * 256 + 256) + (256 * 1024 + 1024) + (1024 * 256 + 256) + 2 * 512
    want = 4 * per_layer + 512 * 256 + 32 * 256 + 512
    model, loss, x, y = real_models.build("opt_decoder")
    assert sum(p.numel() for p in model.parameters()) == want == 3_298_816
    assert x.shape == y.shape == (2, 32) and x.dtype == y.dtype == torch.long
    assert model(x).shape == (2, 32, 512) and model(x).dtype == torch.float32
    assert loss is models.next_token_loss
    kinds = {type(m) for m in model.modules()}
    assert {nn.Embedding, nn.LayerNorm, nn.Linear, nn.ReLU} <= kinds and ReLUVariant not in kinds


def test_opt_lm_head_is_tied_to_the_token_embedding():
    """Rows of the embedding for tokens absent from the input get a gradient only through the LM head."""
    model = _opt()
    x = torch.tensor([[1, 2, 3, 4]])
    assert all(p is not model.embed_tokens.weight for n, p in model.named_parameters() if "embed_tokens" not in n)
    models.next_token_loss(model(x), torch.tensor([[2, 3, 4, 5]])).backward()
    g = model.embed_tokens.weight.grad
    assert g[200].abs().sum() > 0  # token 200 is not in the input: its row reached the loss through the head


@pytest.mark.parametrize("mask", models.MASKS)
def test_opt_attention_is_causal(mask):
    """The logits at position t do not change when tokens after t change, and do change when token t does."""
    model = _opt(mask)
    a = torch.tensor([[5, 6, 7, 8, 9, 10]])
    b = a.clone()
    b[0, 4:] = torch.tensor([99, 98])
    la, lb = model(a), model(b)
    assert torch.equal(la[0, :4], lb[0, :4])
    assert not torch.equal(la[0, 4], lb[0, 4])


def test_opt_attention_matches_a_softmax_written_in_numpy():
    """One block's attention, recomputed in float64 numpy from its weights: q k^T / sqrt(dh), -inf above the
    diagonal, softmax, @ v, out projection."""
    model = _opt(dtype=torch.float64)
    blk = model.layers[0]
    h = torch.randn(1, 5, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    got = blk.attention(h).detach().numpy()[0]
    H = h.numpy()[0]

    def lin(m, z):
        return z @ m.weight.detach().numpy().T + m.bias.detach().numpy()

    q, k, v = lin(blk.q_proj, H), lin(blk.k_proj, H), lin(blk.v_proj, H)
    heads = []
    for i in range(2):
        s = slice(8 * i, 8 * i + 8)
        sc = q[:, s] @ k[:, s].T / math.sqrt(8)
        sc[np.triu_indices(5, 1)] = -np.inf
        e = np.exp(sc - sc.max(axis=1, keepdims=True))
        heads.append((e / e.sum(axis=1, keepdims=True)) @ v[:, s])
    want = lin(blk.out_proj, np.concatenate(heads, axis=1))
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_planted_dead_unit_is_exactly_zero_before_its_relu_on_every_token(dtype):
    model = models.plant_dead_unit(_opt(dtype=dtype), layer=1, unit=3)
    seen = {}
    for i, blk in enumerate(model.layers):
        blk.fc1.register_forward_hook(lambda m, a, out, i=i: seen.__setitem__(i, out.detach()))
    x, _ = datasets.text_tokens(2, 8, seed=4)
    model(x)
    assert seen[1].dtype == dtype and seen[1].shape == (2, 8, 64)
    assert (seen[1][..., 3] == 0).all()  # exactly 0: a ReLU at its kink on all 16 tokens
    others = torch.cat([seen[1][..., :3], seen[1][..., 4:]], -1)
    assert (others != 0).float().mean() > 0.99  # the other units are not at their kinks
    assert (seen[0] != 0).float().mean() > 0.99  # layer 0 untouched


def test_the_built_opt_workload_has_its_dead_unit_at_layer_0_unit_0_in_float32_and_float64():
    for dtype in (torch.float32, torch.float64):
        model, _, x, _ = real_models.build("opt_decoder", width=1 / 16, dtype=dtype)
        out: dict = {}
        model.layers[0].fc1.register_forward_hook(lambda m, a, o, out=out: out.__setitem__("z", o.detach()))
        model(x)
        assert out["z"].dtype == dtype and (out["z"][..., 0] == 0).all()


def test_opt_bad_input_is_named():
    model = _opt()
    with pytest.raises(NsverifyError, match="position embedding has 8"):
        model(torch.zeros(1, 9, dtype=torch.long))
    with pytest.raises(NsverifyError, match="torch.long"):
        model(torch.zeros(1, 4))
    with pytest.raises(NsverifyError, match="multiple of heads"):
        models.opt_decoder(d=10, heads=4)
    with pytest.raises(NsverifyError, match="mask='causal'"):
        models.opt_decoder(mask="causal")
    with pytest.raises(NsverifyError, match="layer=5"):
        models.plant_dead_unit(model, layer=5)
    with pytest.raises(NsverifyError, match="unit=64"):
        models.plant_dead_unit(model, unit=64)


def test_text_tokens_are_shifted_windows_of_english_text():
    x, y = datasets.text_tokens(3, 20, seed=2)
    assert x.shape == y.shape == (3, 20) and x.dtype == torch.long
    assert torch.equal(x[:, 1:], y[:, :-1])
    text = bytes(x[0].tolist()).decode("ascii")
    assert sum(c.isalpha() or c == " " for c in text) >= 14, text
    assert torch.equal(datasets.text_tokens(3, 20, seed=2)[0], x)
    with pytest.raises(NsverifyError, match="positive"):
        datasets.text_tokens(0, 5)


# ------------------------------------------------------------------------------------------------ CNNs
def test_resnet18_and_vgg11_bn_have_their_published_sizes_and_plain_modules():
    """CIFAR ResNet-18 (3x3 stem, 10 classes) has 11,173,962 parameters and CIFAR VGG11-BN 9,231,114 (kuangliu's
    pytorch-cifar models, the ones Bertoin et al. App. D.1 use)."""
    assert sum(p.numel() for p in models.ResNet18(1.0).parameters()) == 11_173_962
    assert sum(p.numel() for p in models.vgg("vgg11", 1.0, bn=True).parameters()) == 9_231_114
    model, loss, x, y = real_models.build("resnet18", width=0.125)
    kinds = {type(m) for m in model.modules()}
    assert nn.ReLU in kinds and nn.MaxPool2d in kinds and not kinds & {ReLUVariant, MaxPool2dVariant}
    assert x.shape == (2, 3, 64, 64) and x.dtype == torch.float32 and y.shape == (2,)
    assert not model.training
    assert not (model.stem[1].running_mean == 0).all()  # statistics from the training passes, not the defaults
    assert (real_models.build("resnet18", width=0.125, plain=False).model.stem[2].__class__ is ReLUVariant)
    vx = real_models.build("vgg11_bn", width=0.125).x
    assert vx.shape == (2, 3, 32, 32)


@pytest.mark.parametrize("train", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_dead_stem_channel_is_exactly_zero_before_its_relu(train, dtype):
    model, _, x, _ = real_models.build("resnet18", width=0.125, train=train, dtype=dtype)
    assert model.training is train
    out = {}
    model.stem[2].register_forward_pre_hook(lambda m, a: out.__setitem__("z", a[0].detach()))
    with torch.no_grad():
        model(x)
    z = out["z"]
    assert z.dtype == dtype and (z[:, 0] == 0).all()
    assert (z[:, 1:] != 0).float().mean() > 0.9


def test_build_keeps_the_callers_random_state_and_is_deterministic():
    torch.manual_seed(123)
    before = torch.random.get_rng_state()
    a = real_models.build("opt_decoder", width=1 / 16)
    assert torch.equal(torch.random.get_rng_state(), before)
    b = real_models.build("opt_decoder", width=1 / 16)
    assert all(torch.equal(p, q) for p, q in zip(a.model.parameters(), b.model.parameters()))
    assert torch.equal(a.x, b.x)


def test_build_names_bad_arguments():
    with pytest.raises(NsverifyError, match="resnet50.*choose from resnet18, vgg11_bn, opt_decoder"):
        real_models.build("resnet50")
    with pytest.raises(NsverifyError, match="plain=True"):
        real_models.build("opt_decoder", plain=False)
    with pytest.raises(NsverifyError, match="width=0"):
        real_models.build("resnet18", width=0)
    with pytest.raises(NsverifyError, match="float16"):
        real_models.build("resnet18", width=0.125, dtype=torch.float16)


# ------------------------------------------------------------------------------------------------ Lemma 2
def test_the_lemma2_term_is_zero_at_the_point_with_one_sided_slopes_one():
    """relu(u) - relu(-u) at u = 0 is 0; its difference quotients on both sides are exactly 1 (dyadic steps)."""
    model = models.lemma2_logit(nn.Linear(3, 4), logit=2)
    assert model.term().item() == 0.0
    x = torch.tensor([[0.5, -1.0, 2.0]])
    assert torch.equal(model(x), model.model(x))  # the term adds exactly 0 at the point
    for h in (2.0**-10, -(2.0**-10), 0.25, -0.25):
        with torch.no_grad():
            model.u.fill_(h)
        assert model.term().item() / h == 1.0
        diff = (model(x) - model.model(x)).detach()
        assert diff[0, 2].item() == h and (diff[0, [0, 1, 3]] == 0).all()


def _softmax_slope(logits: np.ndarray, y: np.ndarray, k: int) -> float:
    """d mean_n CE(logits_n, y_n) / d (a shift of logit k in every sample), by hand: mean_n (p_nk - [y_n = k])."""
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    p = e / e.sum(axis=1, keepdims=True)
    return float(np.mean(p[:, k] - (y == k)))


def _loss_at(model, coord: torch.Tensor, value: float, loss, x, y) -> float:
    with torch.no_grad():
        old = coord.item()
        coord.fill_(value)
        out = loss(model(x), y).item()
        coord.fill_(old)
    return out


@pytest.mark.parametrize("param", [None, "head.2.bias"])
def test_lemma2_derivative_by_hand_and_by_one_sided_differences(param):
    """The true partial derivative along the term's coordinate is the model's own partial plus the slope of the
    loss in logit 0 (mean_n p_n0 - [y_n = 0]); AD misses the second part (relu'(0) = 0 twice), so AD is not in
    the Clarke set, whose projection on that coordinate is the singleton {true partial} (the loss is smooth in
    it: it enters only through logits)."""
    base, loss, x, y = real_models.build("resnet18", width=1 / 16, dtype=torch.float64)
    model = models.lemma2_logit(base, logit=0, param=param, index=0 if param is None else 3)
    coord = model.u if param is None else base.head[2].bias[3:4]
    with torch.no_grad():
        logits = base(x).numpy()
    term = _softmax_slope(logits, y.numpy(), 0)
    own = 0.0 if param is None else _softmax_slope(logits, y.numpy(), 3)  # the bias shifts logit 3
    truth = own + term
    assert abs(term) > 1e-3  # the term's slope is not 0: the verdict must be not_member
    h = 1e-6
    c = coord.item()
    f0 = _loss_at(model, coord, c, loss, x, y)
    right = (_loss_at(model, coord, c + h, loss, x, y) - f0) / h
    left = (f0 - _loss_at(model, coord, c - h, loss, x, y)) / h
    assert right == pytest.approx(truth, abs=1e-5) and left == pytest.approx(truth, abs=1e-5)
    model.zero_grad()
    loss(model(x), y).backward()
    ad = (model.u.grad if param is None else base.head[2].bias.grad[3:4]).item()
    assert ad == pytest.approx(own, abs=1e-12) and abs(ad - truth) > 1e-3


def test_lemma2_in_build_adds_one_parameter_at_zero():
    plain = real_models.build("resnet18", width=0.125)
    wrapped = real_models.build("resnet18", width=0.125, lemma2=True)
    assert isinstance(wrapped.model, models.Lemma2Logit) and wrapped.model.u.item() == 0.0
    n = sum(p.numel() for p in plain.model.parameters())
    assert sum(p.numel() for p in wrapped.model.parameters()) == n + 1
    with torch.no_grad():
        assert torch.equal(wrapped.model(wrapped.x), plain.model(plain.x))


def test_lemma2_bad_arguments_are_named():
    with pytest.raises(NsverifyError, match="no parameter 'head.bias'"):
        models.lemma2_logit(nn.Sequential(nn.Linear(2, 3)), param="head.bias")
    with pytest.raises(NsverifyError, match="index=5.*3 entries"):
        models.lemma2_logit(nn.Sequential(nn.Linear(2, 3)), param="0.bias", index=5)
    with pytest.raises(NsverifyError, match="logit=7.*3 logits"):
        models.lemma2_logit(nn.Linear(2, 3), logit=7)(torch.ones(1, 2))


@pytest.mark.parametrize("param", [None, "2.bias"])
def test_the_oracle_finds_the_lemma2_term_on_a_small_float32_model(param):
    """The derivation above predicts not_member (AD misses the slope of the loss in logit 0); on a 4-6-3 ReLU
    network in float32 with PyTorch's default initialisation the oracle must say so, never member."""
    import torch.nn.functional as F

    import nsverify

    torch.manual_seed(0)
    base = nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 3))
    x, y = torch.randn(2, 4), torch.tensor([1, 2])
    model = models.lemma2_logit(base, logit=0, param=param, index=1)
    with torch.no_grad():
        assert abs(_softmax_slope(base(x).double().numpy(), y.numpy(), 0)) > 1e-3
    v = nsverify.check_module(model, F.cross_entropy, x, y, time_limit=60, progress=False)
    assert v.status == "not_member", v
