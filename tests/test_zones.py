"""Zones: backward-rule switching, D, thresholds, volume estimator (resume, intervals), bad input."""
from __future__ import annotations

import json
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from nsverify import ad
from nsverify.claims.stats import clopper_pearson, hoeffding_margin, mcdiarmid_margin, share_intervals
from nsverify.errors import NsverifyError, UnsupportedDtypeError
from nsverify.papers.zones import repro as repro
from nsverify.papers.zones.measure import (
    MissingThresholdError,
    NoNonsmoothLayersError,
    backprop_variation,
    check_dtype_device,
    program_grads,
    threshold_for,
    thresholds,
)
from nsverify.papers.zones.rules import (
    PROGRAMS,
    MaxPool2dS,
    ReLUS,
    as_program,
    hybrid_program,
    program_label,
    program_params,
    switchable,
    use_rule,
)
from nsverify.papers.zones.volume import VolumeConfig, estimate_volume, load_partial
from nsverify.registry import parse_rule
from nsverify.workloads.datasets import DataNotFoundError, get_dataset, plateaus
from nsverify.workloads.models import MODELS, build_model

DTYPES = [torch.bfloat16, torch.float32, torch.float64]


@pytest.mark.parametrize("dtype", DTYPES)
def test_native_rule_is_pytorch_bitwise(dtype):
    torch.manual_seed(0)
    x = (torch.randint(-2, 3, (2, 3, 8, 8)) / 4).to(dtype)  # many exact ties and zeros
    for pool in [(2, 2, 0), (3, 2, 1), (3, 1, 0)]:
        ref = nn.Sequential(nn.ReLU(), nn.MaxPool2d(*pool))
        var = switchable(nn.Sequential(nn.ReLU(), nn.MaxPool2d(*pool)))
        assert isinstance(var[0], ReLUS) and isinstance(var[1], MaxPool2dS)
        g = torch.randn(ref(x).shape).to(dtype)
        xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
        ya, yb = ref(xa), var(xb)
        assert torch.equal(ya, yb)
        (ga,) = torch.autograd.grad(ya, xa, g)
        with use_rule("native"):
            (gb,) = torch.autograd.grad(yb, xb, g)
        assert torch.equal(ga, gb)


@pytest.mark.parametrize("dtype", DTYPES)
def test_minimal_and_hybrid_match_definition(dtype):
    x = torch.tensor([[[[1.0, 1.0, 0.5, 2.0], [1.0, 0.0, 2.0, 2.0]]]], dtype=dtype, requires_grad=True)
    pool = MaxPool2dS(2)
    y = pool(x)
    assert y.tolist() == [[[[1.0, 2.0]]]]
    g = torch.tensor([[[[4.0, 8.0]]]], dtype=dtype)
    with use_rule("minimal"):
        (gm,) = torch.autograd.grad(y, x, g, retain_graph=True)
    a = torch.tensor(4.0, dtype=dtype) / 3  # 1/|A| of the upstream 4 (three-way tie), rounded in dtype
    b = torch.tensor(8.0, dtype=dtype) / 3  # three-way tie at 2.0 in the right window
    z = torch.tensor(0.0, dtype=dtype)
    assert torch.equal(gm, torch.stack([a, a, z, b, a, z, b, b]).reshape(1, 1, 2, 4))
    with use_rule({"max_pool2d": "hybrid=10"}):
        (gh,) = torch.autograd.grad(y, x, g, retain_graph=True)
    with use_rule("native"):
        (gn,) = torch.autograd.grad(y, x, g)
    assert gn.tolist() == [[[[4.0, 0.0, 0.0, 8.0], [0.0, 0.0, 0.0, 0.0]]]]
    # hybrid(beta) = (1-beta) native + beta minimal, as nsverify.ad computes it with explicit rules
    xe = x.detach().clone().requires_grad_()
    (ge,) = torch.autograd.grad(ad.max_pool2d(xe, 2, rule=("hybrid", 10.0)), xe, g)
    assert torch.equal(gh, ge)
    assert torch.allclose(gh.double(), (gn.double() * -9 + gm.double() * 10), rtol=0.02)


def test_hybrid_forward_is_max_fp16_large_beta():
    x = torch.tensor([[[[60000.0, 60000.0], [1.0, 2.0]]]], dtype=torch.float16)
    with use_rule("beta=1e4"):
        assert torch.equal(MaxPool2dS(2)(x), F.max_pool2d(x, 2))


def test_relu_s_multiplies_upstream_gradient():
    x = torch.tensor([-1.0, 0.0, 0.0, 2.0], requires_grad=True)
    y = ReLUS()(x)
    g = torch.tensor([3.0, 5.0, 0.0, 7.0])
    with use_rule(hybrid_program(0.5, 0.0)):
        (gx,) = torch.autograd.grad(y, x, g)
    assert gx.tolist() == [0.0, 2.5, 0.0, 7.0]  # s * g at zero entries, not the constant s


def test_programs_are_rules_of_the_one_vocabulary_and_keep_their_labels():
    first, even, v0, v1 = (parse_rule(r) for r in ("first", "even", "value=0", "value=1"))
    assert PROGRAMS == {"native": {"relu": v0, "max_pool2d": first}, "minimal": {"relu": v0, "max_pool2d": even},
                        "relu1": {"relu": v1, "max_pool2d": first},
                        "relu1_minimal": {"relu": v1, "max_pool2d": even}}
    # the labels reports print (zones sgd runs, the training sweep) are unchanged
    assert [program_label(p) for p in PROGRAMS] == ["relu_s=0,beta=0", "relu_s=0,beta=1", "relu_s=1,beta=0",
                                                    "relu_s=1,beta=1"]
    assert program_label("beta=1e3") == "relu_s=0,beta=1000" and program_params("relu_s=0.5,beta=10") == (0.5, 10.0)
    # every spelling of a program gives the same rules; labels parse back
    assert as_program("relu_s=1,beta=1") == as_program({"relu": 1, "max_pool2d": "minimal"}) == PROGRAMS[
        "relu1_minimal"]
    assert program_label({"relu": "right", "max_pool2d": "native"}) == "relu_s=1,beta=0"  # right: ReLU'(0) = 1
    assert as_program({"max_pool2d": "hybrid=10"})["max_pool2d"] == parse_rule(("hybrid", 10))
    with pytest.raises(NsverifyError, match="native, minimal, relu1"):
        as_program("fast")
    with pytest.raises(NsverifyError, match="relu, max_pool2d"):
        as_program({"hardtanh": "left"})
    with pytest.raises(NsverifyError, match="Valid rules"):
        as_program({"relu": "lft"})


def test_one_forward_two_backward_equals_two_models():
    torch.manual_seed(1)
    model = build_model("lenet5")
    x, y = get_dataset("digits28")
    x, y = x[:16], y[:16]
    (gp, gq), _, _ = program_grads(model, x, y, ("native", "minimal"))
    ref = []
    for prog in ("native", "minimal"):
        loss = F.cross_entropy(model(x), y)
        with use_rule(prog):
            ref.append(torch.cat([g.reshape(-1).double() for g in torch.autograd.grad(loss, model.parameters())]))
    assert torch.equal(gp, ref[0]) and torch.equal(gq, ref[1])


@pytest.mark.parametrize("name", MODELS)
def test_models_build_and_have_switchable_layers(name):
    bn = name not in ("mlp", "lenet5")
    m = build_model(name, width=0.0625 if name != "lenet5" else 1.0, bn=bn)
    shape = (3, 32, 32) if name not in ("mlp", "lenet5") else (1, 28, 28)
    assert m(torch.zeros(2, *shape)).shape == (2, 10)
    pools = [mod for mod in m.modules() if isinstance(mod, MaxPool2dS)]
    assert any(isinstance(mod, ReLUS) for mod in m.modules())
    assert (len(pools) > 0) == (name != "mlp")


def test_data_has_exact_plateaus():
    x, y = get_dataset("digits28")
    assert x.shape == (1797, 1, 28, 28) and (x[:, :, :2] == 0).all()
    assert torch.equal(x * 16, torch.round(x * 16))  # exact dyadic values k/16
    # nearest upsampling duplicates each pixel into 3x3 blocks
    assert torch.equal(x[:, :, 2:5, 2:5], x[:, :, 2:3, 2:3].expand(-1, -1, 3, 3))
    xp, yp = plateaus(32, seed=3)
    assert xp.shape == (32, 3, 32, 32) and (xp == 0).float().mean() > 0.2 and torch.equal(xp * 8, torch.round(xp * 8))


def test_digits_loaders_agree():
    from nsverify.workloads.datasets import digits28, digits64, digits_upsampled

    x, y = digits64()
    assert x.shape == (1797, 64) and torch.equal(x * 16, torch.round(x * 16)) and 0 <= x.min() and x.max() <= 1
    x8 = x.reshape(-1, 8, 8)
    # digits28 repeats each pixel 3x3 behind a 2-pixel zero border: its block centres are the 8x8 pixels
    x28, y28 = digits28()
    assert torch.equal(x28[:, 0, 3:27:3, 3:27:3], x8) and torch.equal(y28, y)
    # nearest interpolation from 8 to 12 pixels: output pixel r reads source pixel floor(r * 8 / 12)
    xu, yu = digits_upsampled(12, seed=5)
    idx = torch.arange(12) * 8 // 12
    expected = x8[:, idx][:, :, idx]
    key = lambda t: sorted(map(tuple, t.reshape(len(t), -1).tolist()))  # noqa: E731 -- shuffled order
    assert xu.shape == (1797, 1, 12, 12) and key(xu) == key(expected) and sorted(yu.tolist()) == sorted(y.tolist())
    xp, yp = digits_upsampled(12, plateau=30, seed=5)
    assert len(xp) == 1797 + 30 and torch.equal(xp * 16, torch.round(xp * 16))
    assert yp.bincount(minlength=10)[:3].sum() == y.bincount(minlength=10)[:3].sum() + 30  # plateau labels 0-2


def test_reproduce_tables_and_example():
    for fn in (repro.table_3_1, repro.table_3_3):
        (c,) = fn()["claims"]
        assert c["rule"] == "exact" and c["held"] is True, c["measured"]
    # Sec. 3.5.3: X was rebuilt to fit the printed gradients, so it is an illustration (issue 38), never a verdict;
    # the gradients are still the printed E11 and (E11 + E13)/2
    ex = repro.example_353()
    (c,) = ex["claims"]
    assert c["rule"] == "illustration" and c["held"] is None and "are recomputed" in c["reason"]
    assert ex["native"][0] == [1.0, 0.0, 0.0] and ex["minimal"][0] == [0.5, 0.0, 0.5]
    r = repro.table_3_1()
    assert r["rows"]["x1=(1,2,3,4)"][3] == -1.5  # Boustany Table 3.1 (and Despres Table 2) at t = 0
    assert r["rows"]["x2=1.4*(1,1,1,1)"][0] == pytest.approx(-5.96e-8, rel=1e-2)
    assert repro.table_3_3()["rows"]["x=(1,2,3,4)"][3] == 1.5  # Table 3.3: the ReLU-based max flips the sign
    # 3.5.3: native E11 against minimal (E11 + E13)/2 differ by 1/2 in two entries: D = 1
    assert repro.example_353()["D_L1"] == 1.0


def test_backprop_variation_norm_and_reduction():
    torch.manual_seed(0)
    m = build_model("lenet5")
    x, y = get_dataset("digits28")
    x, y = x[:8], y[:8]
    d_sum = backprop_variation(m, x, y, reduction="sum", norm=1)
    d_mean = backprop_variation(m, x, y, reduction="mean", norm=1)
    assert d_sum > 0 and d_mean == pytest.approx(d_sum / 8, rel=1e-3)
    assert backprop_variation(m, x, y, reduction="sum", norm=2) <= d_sum
    assert backprop_variation(m, x, y, p="native", q="native") == 0.0
    with pytest.raises(NsverifyError, match="reduction"):
        backprop_variation(m, x, y, reduction="avg")
    with pytest.raises(NsverifyError, match="norm"):
        backprop_variation(m, x, y, norm=3)


def test_thresholds_cpu_tau1_not_measurable_tau2_positive():
    x, y = get_dataset("digits28")
    batches = [(x[i * 64:(i + 1) * 64], y[i * 64:(i + 1) * 64]) for i in range(3)]

    def factory(i):
        torch.manual_seed(i)
        return build_model("mlp", width=0.0625)

    th = thresholds(factory, batches, torch.bfloat16)
    assert th.tau1 is None and "not measurable on CPU" in th.tau1_note
    assert th.n_pairs == 3
    assert (th.tau2 is None) == (th.n_nonzero_relu == 0)
    if th.tau2 is not None:
        assert th.tau2 > 0


def test_intervals():
    assert hoeffding_margin(1000) == pytest.approx(math.sqrt(math.log(40) / 2000))
    assert mcdiarmid_margin(10, 5) == pytest.approx(math.sqrt(0.5 * (0.1 + 0.2) * math.log(40)))
    lo, hi = clopper_pearson(0, 10)
    assert lo == 0 and hi == pytest.approx(1 - 0.025 ** 0.1)
    s = share_intervals(3, 12, m=4, r=3)
    assert s["value"] == 0.25 and s["clopper_pearson"][0] < 0.25 < s["clopper_pearson"][1]
    assert s["mcdiarmid"][1] - s["mcdiarmid"][0] > s["hoeffding"][1] - s["hoeffding"][0]


TAUS = {"bfloat16": 1e-2, "float32": 1e-8, "float64": 1e-14}


def _cfg(**kw):
    base = dict(model="lenet5", width=0.5, dataset="digits28", batch_size=16, draws=3, batches=2,
                dtypes=["float32", "float64"])
    base.update(kw)
    return VolumeConfig(**base)


def test_volume_resume_after_interrupt(tmp_path):
    part = tmp_path / "partial.json"
    calls = []

    def boom(msg, done=None, total=None):
        calls.append(msg)
        if "draw 0 done" in msg:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        estimate_volume(_cfg(), TAUS, resume=part, progress=boom)
    assert sorted(load_partial(part, _cfg())) == [0]
    res = estimate_volume(_cfg(), TAUS, resume=part, progress=lambda *a, **k: None)
    assert res["computed_draws_rank"] == 2 and res["draws_done"] == 3
    fresh = estimate_volume(_cfg(), TAUS, progress=lambda *a, **k: None)
    for d in ("float32", "float64"):
        assert res["dtypes"][d]["D"] == fresh["dtypes"][d]["D"]
        assert res["dtypes"][d]["pair_share"] == fresh["dtypes"][d]["pair_share"]
    # extending M reuses finished draws; thresholds are applied at the end (may change freely)
    more = estimate_volume(_cfg(draws=4), {**TAUS, "float32": 1.0}, resume=part, progress=lambda *a, **k: None)
    assert more["computed_draws_rank"] == 1 and more["dtypes"]["float32"]["pair_share"]["count"] == 0
    # a partial file of another configuration is refused
    with pytest.raises(NsverifyError, match="another configuration"):
        estimate_volume(_cfg(batch_size=8), TAUS, resume=part)
    blob = json.loads(part.read_text())
    assert blob["schema"] == "nsverify.papers.zones.partial/1" and set(blob["draws"]) == {"0", "1", "2", "3"}


def test_volume_shares_are_counts_of_D_over_tau():
    res = estimate_volume(_cfg(dtypes=["float32"]), {"float32": 1e-8}, progress=lambda *a, **k: None)
    d = res["dtypes"]["float32"]
    pairs = sum(v > 1e-8 for v in d["D"])
    assert d["pair_share"]["count"] == pairs and d["pair_share"]["n"] == 6
    per_draw = [d["D"][2 * i:2 * i + 2] for i in range(3)]
    assert d["draw_share"]["count"] == sum(any(v > 1e-8 for v in row) for row in per_draw)


# ---------------------------------------------------------------- bad input
def test_float16_on_cpu_refused_with_advice():
    with pytest.raises(UnsupportedDtypeError, match="bfloat16 on CPU"):
        check_dtype_device(torch.float16, torch.device("cpu"))
    with pytest.raises(UnsupportedDtypeError, match="allow"):
        estimate_volume(_cfg(dtypes=["float16"]), {"float16": 1e-1})
    check_dtype_device(torch.float16, torch.device("cpu"), allow_slow=True)  # explicit opt-in runs


def test_model_without_nonsmooth_layers():
    smooth = nn.Sequential(nn.Flatten(), nn.Linear(784, 10), nn.Tanh(), nn.Linear(10, 10))
    x, y = torch.zeros(2, 1, 28, 28), torch.zeros(2, dtype=torch.long)
    with pytest.raises(NoNonsmoothLayersError, match="no switchable nonsmooth layer"):
        program_grads(smooth, x, y)
    plain = nn.Sequential(nn.Flatten(), nn.Linear(784, 10), nn.ReLU(), nn.Linear(10, 10))
    with pytest.raises(NoNonsmoothLayersError, match="switchable"):
        program_grads(plain, x, y)
    program_grads(switchable(plain), x, y)


def test_missing_threshold():
    with pytest.raises(MissingThresholdError, match="bfloat16"):
        threshold_for({"float32": 1e-8}, torch.bfloat16)
    with pytest.raises(MissingThresholdError, match="float64"):
        estimate_volume(_cfg(), {"float32": 1e-8})


def test_data_and_config_errors(tmp_path):
    with pytest.raises(DataNotFoundError, match="does not download"):
        get_dataset("mnist", root=tmp_path)
    with pytest.raises(DataNotFoundError, match="data-root"):
        get_dataset("cifar10")
    with pytest.raises(NsverifyError, match="unknown model"):
        build_model("vgg12")
    with pytest.raises(NsverifyError, match="batches"):
        estimate_volume(_cfg(batch_size=1000, batches=4), TAUS)


def test_cli_volume_and_thresholds(tmp_path, capsys):
    from nsverify.cli import main

    out = tmp_path / "r.json"
    args = ["zones", "volume", "--model", "lenet5", "--width", "0.25", "--draws", "2", "--batches", "1",
            "--batch-size", "8", "--dtypes", "float32", "--tau", "float32=1e-9", "--json", str(out)]
    assert main(args) == 0
    res = json.loads(out.read_text())
    assert res["draws_done"] == 2 and res["dtypes"]["float32"]["pair_share"]["n"] == 2
    assert "float32" in capsys.readouterr().out
    assert main(args[:-4] + ["--json", str(out)]) == 2  # no --tau: a required option (issue 25) -> exit 2
    assert "the following arguments are required: --tau" in capsys.readouterr().err
    assert main(["zones", "thresholds", "--model", "mlp", "--width", "0.03", "--draws", "2", "--batches", "1",
                 "--batch-size", "8", "--dtypes", "float32"]) == 0
    assert "not measurable on CPU" in capsys.readouterr().out


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_float16_volume_and_tau1():
    cfg = _cfg(dtypes=["float16", "float32"], device="cuda", draws=2, batches=1)
    res = estimate_volume(cfg, {"float16": 1e-1, "float32": 1e-8}, progress=lambda *a, **k: None)
    assert res["dtypes"]["float16"]["pair_share"]["n"] == 2
    x, y = get_dataset("digits28")

    def factory(i):
        torch.manual_seed(i)
        return build_model("lenet5", width=0.5)

    th = thresholds(factory, [(x[:16], y[:16])], torch.float16, "cuda")
    assert th.tau1 is not None and th.tau1 >= 0 and "nondeterministic" in th.tau1_note


def test_natural_crops_are_8bit_photographs_with_few_ties():
    """Crops of scikit-learn's sample photographs: values are k/255, deterministic per seed, labels in range, and
    2x2 max-pool windows tie far less often than on the synthetic plateau images (Park et al. saw about 3% of
    tied max operations on CIFAR-10; the plateaus tie in most windows)."""
    from nsverify.workloads.datasets import natural_crops

    x, y = natural_crops(64, seed=3)
    assert x.shape == (64, 3, 32, 32) and y.shape == (64,)
    k = x.double() * 255
    assert torch.equal(x, (k.round() / 255).to(x.dtype)) and x.min() >= 0 and x.max() <= 1
    assert 0 <= int(y.min()) and int(y.max()) < 10 and len(set(y.tolist())) > 2
    x2, y2 = natural_crops(64, seed=3)
    assert torch.equal(x, x2) and torch.equal(y, y2)

    def tie_share(imgs):
        win = F.unfold(imgs.reshape(-1, 1, 32, 32), 2, stride=2)  # (N, 4, windows)
        top = win.max(dim=1, keepdim=True).values
        return float(((win == top).sum(dim=1) >= 2).double().mean())

    xp, _ = plateaus(64, seed=3)
    assert tie_share(x) < 0.5 * tie_share(xp)
    with pytest.raises(NsverifyError, match="channels"):
        natural_crops(4, shape=(2, 8, 8))
