"""The training monitor's cheap T_j tests (tie_test="auto", issue 26) against the per-window exact test: the same
verdicts, the same constraint rows, on networks whose ties hold T_j and on networks where they do not."""

import pytest
import torch
from torch import nn

from nsverify.oracle.park import algorithm1
from nsverify.papers.park.monitor import TJ_PATHS, Monitor
from tests.test_monitor import _plateau_images, _vgg_like


def _rows(chk):
    return sorted(tuple(sorted(r.items())) for r in chk.rows)


def _both(model, x, t=None):
    """The records of one forward checked by the exact per-window test and by the monitor's default."""
    recs = []
    for test in ("exact", "auto"):
        with Monitor(model, tie_test=test) as mon:
            out = model(x)
            recs.append(mon.check())
            del out
    return recs


def _assert_same(rec_exact, rec_auto):
    assert rec_exact.correct == rec_auto.correct
    for e, a in zip(rec_exact.layers, rec_auto.layers, strict=True):
        assert (e.status, e.nontrivial_windows, e.sum_nontrivial, e.unchecked, e.tied_positive) == (
            a.status, a.nontrivial_windows, a.sum_nontrivial, a.unchecked, a.tied_positive), e.name
        assert _rows(e) == _rows(a), e.name


def _lemma7_conv(weight, bias, pool=2):
    """Lemma 7's shape (Park et al., Sec. 3.2) with the shared parameters of a convolution: y_t = w . x_{t:t+2} + b
    pooled in pairs."""
    conv = nn.Conv1d(1, 1, 2)
    with torch.no_grad():
        conv.weight[:] = torch.tensor(weight).view(1, 1, 2)
        conv.bias[:] = bias
    return nn.Sequential(conv, nn.ReLU(), nn.MaxPool1d(pool), nn.Flatten())


def test_lemma7_style_empty_cone_is_decided_from_patches(monkeypatch):
    """w = 0, b = 1: every y_t = 1 ties; the patches (1,0), (0,0) | (0,1), (1,1) give the opposite rows (1, 0) and
    (-1, 0) on the weight (the bias cancels): P_l is empty. The patch test decides both pairs, no backward pass."""
    m = _lemma7_conv([0.0, 0.0], 1.0)
    x = torch.tensor([[[1.0, 0.0, 0.0, 1.0, 1.0]]])
    rec_exact, rec_auto = _both(m, x)
    _assert_same(rec_exact, rec_auto)
    (chk,) = rec_auto.layers
    assert chk.status == "empty" and rec_auto.correct == "unknown"
    assert _rows(chk) == [((0, -1.0),), ((0, 1.0),)]
    assert (chk.tj_patch, chk.tj_exact) == (2, 0)
    monkeypatch.setattr(algorithm1, "_batched_grads", lambda *a, **k: pytest.fail("a backward pass ran"))
    with Monitor(m) as mon:
        m(x)
        assert mon.check().layers[0].status == "empty"


def test_lemma7_style_with_a_witness_and_with_t_j_holding():
    # rows (1, 0) and (0, -1): P_l non-empty
    m = _lemma7_conv([0.0, 0.0], 1.0)
    rec_exact, rec_auto = _both(m, torch.tensor([[[1.0, 0.0, 0.0, 0.0, 1.0]]]))
    _assert_same(rec_exact, rec_auto)
    assert rec_auto.layers[0].status == "nonempty" and rec_auto.correct == "yes"
    # constant input: identical patches, T_j = S_j in the first layer (equal w_l blocks are the whole gradient)
    rec_exact, rec_auto = _both(m, torch.full((1, 1, 5), 0.5))
    _assert_same(rec_exact, rec_auto)
    (chk,) = rec_auto.layers
    assert chk.status == "trivial" and chk.tied_positive == 2 and (chk.tj_patch, chk.nontrivial_windows) == (2, 0)


def _two_layers(w2):
    """Layer 1: z_t = relu(x_t + x_{t+1}) ties at x = (1, 0, 1) with different patches; layer 2: a 1x1 convolution
    (weight ``w2``, bias 1) and a pool over the pair. Layer 2's w_l blocks (z_t, 1) are equal, so only the earlier
    parameters decide T_j: w2 != 0 makes their gradients w2 * patch_t differ (not in T_j: the constraint row is 0
    and P_2 is empty), w2 = 0 makes them equal (in T_j)."""
    c1, c2 = nn.Conv1d(1, 1, 2), nn.Conv1d(1, 1, 1)
    with torch.no_grad():
        c1.weight[:] = 1.0
        c1.bias[:] = 0.0
        c2.weight[:] = w2
        c2.bias[:] = 1.0
    return nn.Sequential(c1, nn.ReLU(), c2, nn.ReLU(), nn.MaxPool1d(2), nn.Flatten())


@pytest.mark.parametrize("w2, status", [(0.5, "empty"), (0.0, "trivial")])
def test_equal_patches_in_a_deeper_layer_go_to_the_exact_test(w2, status):
    m = _two_layers(w2)
    x = torch.tensor([[[1.0, 0.0, 1.0]]])
    rec_exact, rec_auto = _both(m, x)
    _assert_same(rec_exact, rec_auto)
    chk = rec_auto.layers[1]
    assert chk.status == status and (chk.tj_patch, chk.tj_exact) == (0, 1)


@pytest.mark.parametrize("seed", range(3))
def test_plateaus_and_dead_units_same_verdicts_and_rows(seed):
    """Plateau images (ties with identical fields) and a dead channel (negative bias: ties at 0 with D^AD = 0);
    8-bit pixel values make ties with different patches too."""
    torch.manual_seed(seed)
    m = _vgg_like()
    with torch.no_grad():
        m[0].bias[0] = -10.0
    x = _plateau_images(seed=seed)
    x[:, :, 12:, :4] = (torch.arange(16).float().view(4, 4) % 2) / 255  # two values: ties of different patches
    rec_exact, rec_auto = _both(m, x)
    _assert_same(rec_exact, rec_auto)
    assert sum(c.tied_positive for c in rec_auto.layers) > 0
    paths = rec_auto.tj_paths
    assert set(paths) == set(TJ_PATHS) and paths["patch"] > 0


@pytest.mark.parametrize("name, width", [("vgg11", 1 / 8), ("resnet18", 1 / 8)])
def test_reference_networks_on_natural_crops_same_verdicts_and_rows(name, width):
    """The overhead workloads (Park et al., App. J.2), reduced: VGG11 (every layer Conv + bias: the patch test)
    and ResNet18 (its one pool follows Conv + BatchNorm in training mode: the difference form of the patch test),
    after two SGD steps, four batches of natural crops."""
    from nsverify.papers.park.overhead import TrainingSteps

    run = TrainingSteps(name, 4, width=width, batch=16)
    run.close()
    for _ in range(2):
        run.plain()
    seen = dict.fromkeys(TJ_PATHS, 0)
    nontrivial = 0
    for xb, _ in run.batches:
        rec_exact, rec_auto = _both(run.model, xb)
        _assert_same(rec_exact, rec_auto)
        for k, v in rec_auto.tj_paths.items():
            seen[k] += v
        nontrivial += sum(c.nontrivial_windows for c in rec_auto.layers)
    if name == "vgg11":
        assert seen["patch"] > 0 and seen["exact"] > 0
        assert nontrivial > 0  # some ties are not in T_j: constraints were compared, not only counts
    else:
        assert seen["patch"] > 0 and seen["exact"] == 0


def test_affine_rows_equal_autograd_rows():
    """:class:`AffineRows` gives bitwise what reverse-mode AD gives for d y_i / d w_l (Conv2d with stride, padding
    and dilation, Conv1d, Linear)."""
    torch.manual_seed(0)
    cases = [(nn.Conv2d(2, 3, 3, stride=2, padding=1, dilation=1), torch.randn(2, 2, 7, 7)),
             (nn.Conv2d(2, 3, 2, stride=1, padding=2, dilation=2, bias=False), torch.randn(2, 2, 5, 6)),
             (nn.Conv1d(2, 3, 3, padding=1), torch.randn(2, 2, 6)),
             (nn.Linear(5, 4), torch.randn(3, 5))]
    for mod, z in cases:
        params = list(mod.parameters())
        assert algorithm1.AffineRows.applies(mod, params)
        y = mod(z)
        rows = algorithm1.AffineRows(mod, z, tuple(y.shape))
        B, per = y.shape[0], y[0].numel()
        b = torch.arange(B).repeat_interleave(per)
        i = torch.arange(per).repeat(B)
        scale = torch.linspace(-1, 2, len(b))
        vals, cols = rows.values(b, i, scale), rows.columns(rows.channels(i))
        ad = algorithm1._batched_grads(y, list(zip(b.tolist(), i.tolist())), params)
        for k in range(len(b)):
            dense = torch.zeros(ad[k].numel(), dtype=torch.float64)
            dense[cols[k]] = vals[k].double()
            assert torch.equal(dense, (ad[k].float() * scale[k]).double()), (mod, k)
    assert not algorithm1.AffineRows.applies(nn.Conv2d(2, 2, 3, groups=2), list(nn.Conv2d(2, 2, 3).parameters()))


# ------------------------------------------------------------------------------------------------------------------
# scripts/gpu/perf.py on CPU: argument handling and a dry run of every part
# ------------------------------------------------------------------------------------------------------------------
def _perf_script():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "scripts" / "gpu" / "perf.py"
    spec = importlib.util.spec_from_file_location("gpu_perf_script", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("argv, message", [([], "--out"), (["--out", "{tmp}", "--steps", "0"], "--steps 0"),
                                           (["--out", "{tmp}", "--repeat", "-1"], "--repeat -1"),
                                           (["--out", "{file}", "--dry-run"], "not a directory"),
                                           (["--out", "{tmp}", "--dry-run", "--parts", "monitor,bogus"],
                                            "unknown part(s) bogus")])
def test_gpu_perf_script_rejects_bad_arguments(tmp_path, capsys, argv, message):
    (tmp_path / "f").write_text("")
    argv = [a.format(tmp=tmp_path, file=tmp_path / "f") for a in argv]
    with pytest.raises(SystemExit) as exc:
        _perf_script().main(argv)
    assert exc.value.code == 2 and message in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only refusal")
def test_gpu_perf_script_needs_cuda_without_dry_run(tmp_path, capsys):
    assert _perf_script().main(["--out", str(tmp_path)]) == 2
    assert "--dry-run" in capsys.readouterr().err and not (tmp_path / "perf.json").exists()


def test_gpu_perf_script_dry_run_on_cpu(tmp_path):
    """Every part runs on CPU at tiny sizes (the CUDA tests part too: on CPU it selects no test) and lands in
    perf.json with its provenance; the monitor part has both networks' ratios and T_j path counters."""
    import json

    assert _perf_script().main(["--out", str(tmp_path), "--dry-run"]) == 0
    data = json.loads((tmp_path / "perf.json").read_text())
    assert data["dry_run"] is True and data["provenance"]["device"] == "cpu"
    for part in ("cuda_tests", "kernel_equality", "monitor", "monitor_agreement", "pool_ratios"):
        assert "error" not in data[part], (part, data[part])
    assert data["cuda_tests"]["returncode"] in (0, 5)  # 5: pytest collected no test (no CUDA here)
    assert data["kernel_equality"] and all(r["equal"] and r["deterministic"] for r in data["kernel_equality"])
    assert [m["model"] for m in data["monitor"]] == ["vgg11", "resnet18"]
    for m in data["monitor"]:
        assert m["ratio"] > 0 and set(m["tj_paths"]) == set(TJ_PATHS) and len(m["per_step"]) == 2
        assert m["check_profile"] and all(r["calls"] > 0 for r in m["check_profile"])
    for a in data["monitor_agreement"]:  # both T_j tests on the same forward: the same verdicts here
        assert a["steps"] == len(a["per_step"]) > 0 and a["agree"] == a["steps"]
    assert {r["candidate"] for r in data["pool_ratios"]} >= {"maxpool_minimal", "maxpool_hybrid"}


def test_linear_on_a_sequence_falls_back_to_the_exact_test():
    """A Linear applied to (B, T, in): the flat entry order is not (sample, feature), so no patch rows; the exact
    test decides, with the same verdict and rows as the per-window test."""
    lin = nn.Linear(2, 2)
    with torch.no_grad():
        lin.weight[:] = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
        lin.bias[:] = 0.0
    m = nn.Sequential(lin, nn.ReLU(), nn.Flatten(), nn.Unflatten(1, (1, 6)), nn.MaxPool1d(2), nn.Flatten())
    x = torch.tensor([[[1.0, 1.0], [2.0, 0.5], [0.5, 0.5]]])  # ties (1, 1) and (0.5, 0.5): different inputs
    rec_exact, rec_auto = _both(m, x)
    _assert_same(rec_exact, rec_auto)
    chk = rec_auto.layers[0]
    assert chk.tj_patch == 0 and chk.tj_exact == 2 and chk.nontrivial_windows == 2


def test_budget_and_summary_count_like_the_directional_test():
    """``max_checks``: a window with S_j \\ T_j non-empty costs 1 + |S_j \\ T_j| as in the "jvp" test (the
    monitor's former default); past the budget a window is ``unchecked`` and the step "unknown". The summary
    sums the path counters over steps."""
    m = _lemma7_conv([0.0, 0.0], 1.0)
    x = torch.tensor([[[1.0, 0.0, 0.0, 1.0, 1.0]]])
    got = {}
    for test in ("jvp", "auto"):
        with Monitor(m, max_checks=1, tie_test=test) as mon:
            for _ in range(2):
                m(x)
                mon.check()
            got[test] = mon.steps[-1].layers[0]
            summary = mon.summary()[0]
    for chk in got.values():
        assert (chk.unchecked, chk.nontrivial_windows, chk.status) == (1, 1, "unknown")
    assert mon.steps[-1].correct == "unknown"
    assert {k: summary[f"tj_{k}"] for k in TJ_PATHS} == {"flat": 0, "patch": 4, "field": 0, "exact": 0}


def _conv_bn_pool(train: bool, gamma_sign: float, dtype=torch.float64):
    """Conv2d (no bias) + BatchNorm2d + ReLU + 3x3/2 max pool with padding: ResNet's stem, at integer weights."""
    torch.manual_seed(1)
    conv, bn = nn.Conv2d(2, 3, 2, padding=1, bias=False), nn.BatchNorm2d(3)
    with torch.no_grad():
        conv.weight[:] = torch.randint(-2, 3, conv.weight.shape).float()
        bn.weight[:] = gamma_sign * torch.tensor([1.5, 0.75, 2.0])
        bn.bias[:] = 0.25
        bn.running_mean[:] = 0.5
        bn.running_var[:] = 2.0
    m = nn.Sequential(conv, bn, nn.ReLU(), nn.MaxPool2d(3, 2, 1), nn.Flatten()).to(dtype)
    return m.train(train)


def _two_valued(seed: int, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 2, (4, 2, 6, 6), generator=g).to(dtype)


def _direction(row: dict) -> dict:
    norm = sum(v * v for v in row.values()) ** 0.5
    return {k: v / norm for k, v in row.items()}


@pytest.mark.parametrize("train, gamma_sign", [(True, 1.0), (True, -1.0), (False, 1.0), (False, -1.0)])
def test_conv_batchnorm_pairs_from_patch_differences_match_autograd(train, gamma_sign):
    """The difference form for Conv + BatchNorm (training mode: batch statistics; evaluation mode: running ones):
    every tied pair is decided from the patches, no backward pass, with the verdict of the exact per-pair test, and
    each constraint row points where float64 autograd's gradient difference points (AD's row is the patch
    difference times gamma_c / sigma_c; sigma_c's batch terms cancel only in exact arithmetic, so the comparison
    is to 1e-9 and the bias/BN columns of AD's rows must vanish to that precision)."""
    m = _conv_bn_pool(train, gamma_sign)
    n_weight = m[0].weight.numel()
    decided = nontrivial = 0
    for seed in range(4):
        x = _two_valued(seed)
        rec_exact, rec_auto = _both(m, x)
        (e,), (a,) = rec_exact.layers, rec_auto.layers
        assert rec_exact.correct == rec_auto.correct
        assert (e.status, e.nontrivial_windows, e.sum_nontrivial, e.tied_positive) == (
            a.status, a.nontrivial_windows, a.sum_nontrivial, a.tied_positive)
        assert a.tj_exact == 0 and a.tj_patch > 0
        decided += a.tj_patch
        nontrivial += a.nontrivial_windows
        for re_, ra in zip(e.rows, a.rows, strict=True):  # in window order: the same pairs
            assert all(k < n_weight for k in ra), "a row off the convolution's weight"
            scale = max(abs(v) for v in re_.values())
            assert all(abs(v) <= 1e-9 * scale for k, v in re_.items() if k >= n_weight)
            de, da = _direction({k: v for k, v in re_.items() if abs(v) > 1e-9 * scale}), _direction(ra)
            assert set(de) == set(da) and all(abs(de[k] - da[k]) <= 1e-9 for k in de)
    assert decided > 20 and nontrivial > 5  # rows were compared, not only counts


def test_conv_batchnorm_difference_form_declines_where_it_does_not_hold(monkeypatch):
    """gamma_c = 0 (the channel is constant: the weight block vanishes, the gamma column need not), and a layer with
    kink rows, go to the exact test; a mutation that drops the sign of gamma_c changes the rows and is caught."""
    m = _conv_bn_pool(True, 1.0)
    with torch.no_grad():
        m[1].weight[1] = 0.0
    x = _two_valued(0)
    rec_exact, rec_auto = _both(m, x)
    assert rec_auto.layers[0].tj_patch == 0 and rec_auto.layers[0].tj_exact > 0
    _assert_same(rec_exact, rec_auto)
    m = _conv_bn_pool(True, -1.0)
    monkeypatch.setattr(algorithm1.AffineRows, "channel_sign",
                        lambda self, ch: torch.ones(len(ch), dtype=self.z.dtype))
    rec_exact, rec_auto = _both(m, _two_valued(1))
    flipped = [(_direction(ra), re_) for re_, ra in zip(rec_exact.layers[0].rows, rec_auto.layers[0].rows)]
    assert flipped and all(
        next(iter(da.values())) * re_[next(iter(da))] < 0 for da, re_ in flipped)  # every row points the other way


def test_gpu_perf_script_runs_only_the_parts_asked_for(tmp_path):
    import json

    assert _perf_script().main(["--out", str(tmp_path), "--dry-run", "--parts", "monitor_agreement"]) == 0
    data = json.loads((tmp_path / "perf.json").read_text())
    assert "monitor_agreement" in data and not {"cuda_tests", "monitor", "pool_ratios"} & set(data)


@pytest.mark.parametrize("make", [
    lambda: nn.ReLU(), lambda: nn.ReLU6(), lambda: nn.Hardtanh(), lambda: nn.LeakyReLU(),
    lambda: __import__("nsverify.ad", fromlist=["ReLUVariant"]).ReLUVariant(),
    lambda: __import__("nsverify.ad", fromlist=["ReLUVariant"]).ReLUVariant(0.5),
    lambda: __import__("nsverify.ad", fromlist=["ReLUVariant"]).ReLUVariant(1),
    lambda: __import__("nsverify.ad", fromlist=["PiecewiseLinearVariant"]).PiecewiseLinearVariant("relu6", "right"),
])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_rho_prime_off_the_breakpoints_equals_autograd(make, dtype):
    """D^AD rho at the tied windows' entries: the piece slopes off the breakpoints and a backward pass at them
    give exactly what one backward pass through the module gives (entries at every breakpoint, either side,
    NaN)."""
    act_module = make()
    mon = Monitor(nn.Sequential(nn.Linear(2, 2), act_module, nn.MaxPool1d(2)))
    act = mon.layers[0].activation
    mon.close()
    bps = [float(b) for b in act.breakpoints]
    vals = bps + [b + e for b in bps for e in (-1e-3, 1e-3, -2.0, 2.0)] + [0.25, -7.0, 7.5]
    y = torch.tensor(vals, dtype=dtype).reshape(1, -1)
    got = algorithm1._rho_prime(act, act_module.forward, y)
    want = algorithm1._rho_autograd(act_module.forward, y)
    assert got.dtype == want.dtype and torch.equal(got, want), (act.key, y, got, want)
    y_nan = torch.cat([y, torch.tensor([[float("nan")]], dtype=dtype)], dim=1)
    assert torch.equal(algorithm1._rho_prime(act, act_module.forward, y_nan).nan_to_num(-9),
                       algorithm1._rho_autograd(act_module.forward, y_nan).nan_to_num(-9))


def test_rho_prime_runs_no_backward_off_the_breakpoints(monkeypatch):
    act_module = nn.ReLU()
    mon = Monitor(nn.Sequential(nn.Linear(2, 2), act_module, nn.MaxPool1d(2)))
    act = mon.layers[0].activation
    mon.close()
    calls = []
    real = algorithm1._rho_autograd
    monkeypatch.setattr(algorithm1, "_rho_autograd", lambda rho, y: calls.append(y.numel()) or real(rho, y))
    algorithm1._rho_prime(act, act_module.forward, torch.tensor([[0.5, -2.0, 3.0]]))
    assert calls == []
    assert algorithm1._rho_prime(act, act_module.forward, torch.tensor([[0.5, 0.0, -0.0]])).tolist() == [[1, 0, 0]]
    assert calls == [2]  # the two entries at the kink only


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("conv", [lambda: nn.Conv2d(2, 3, 3, stride=2, padding=1),
                                  lambda: nn.Conv2d(2, 3, 2, stride=1, padding=2, dilation=2, bias=False),
                                  lambda: nn.Conv1d(2, 3, 3, padding=1)])
def test_pairs_equal_kernel_equals_the_values_comparison(conv, dtype):
    """AffineRows.pairs_equal on the CPU (the C++ pass) against the comparison of AffineRows.values (the reference
    path, mode "reference"): equal pairs, unequal ones, zero blocks, padding, both signs of the scale."""
    from nsverify import kernels

    torch.manual_seed(0)
    mod = conv().to(dtype)
    z = torch.randint(0, 2, (3, 2, 7, 7) if isinstance(mod, nn.Conv2d) else (3, 2, 9)).to(dtype)
    z[1] = 0  # a blank sample: zero blocks (equal only through the all-zero rule where a bias entry is 0)
    y = mod(z)
    rows = algorithm1.AffineRows(mod, z, tuple(y.shape))
    per = y[0].numel()
    g = torch.Generator().manual_seed(1)
    n = 400
    b = torch.randint(0, 3, (n,), generator=g)
    i = torch.randint(0, per, (n,), generator=g)
    k = torch.where(torch.rand(n, generator=g) < 0.5, torch.randint(0, per, (n,), generator=g), i)
    scales = torch.tensor([0.0, 1.0, -1.0, 0.5], dtype=dtype)
    si, sk = scales[torch.randint(0, 4, (n,), generator=g)], scales[torch.randint(0, 4, (n,), generator=g)]
    with kernels.use("reference"):
        want = rows.pairs_equal(b, i, k, si, sk)
    got = rows.pairs_equal(b, i, k, si, sk)
    assert torch.equal(got, want) and 0 < int(want.sum()) < n
