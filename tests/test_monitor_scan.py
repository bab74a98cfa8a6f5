"""The training monitor's one-call detection per pool layer (nsverify.kernels.monitor_pool_scan: the kink touches of
the pre-activations and the pool's tie scan in one C++ call on the CPU) against an independent enumeration: the
registry's pool windows (nsverify.registry.pool2d_windows) walked in Python over float64 values, with Park et al.'s
Algorithm 2 rule (App. F, line 7: windows whose maximum is a saturated activation value are not counted).  Also: the
rows of a large input split over threads give the same pairs in the same order, and the Monitor counts each
layer's kink touches once, in the pool's hook, as many as the pre-activations' own entries at the kink."""
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from nsverify import kernels
from nsverify.papers.park.monitor import Monitor
from nsverify.pytest_plugin import budget
from nsverify.registry import pool2d_windows

DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64]
#: saturated values and kinks to draw from: 0.1 is not representable in any of the dtypes (nothing equals it)
VALUES = [0.0, 1.0, 2.0, 3.0, 0.1, float("-inf"), float("inf")]


def expected(y, kinks, x, out, geom, saturated):
    """(counts, pairs) by enumeration: [entries of y equal to a kink, windows with >= 2 entries equal to their max,
    those whose max is not saturated] and the latter's (sample, channel * Ho * Wo + j) pairs, row-major."""
    k, s, p, d = geom
    n, c, h, w = x.shape
    (ho, wo), wins = pool2d_windows(h, w, k, s, p, d, False)
    assert tuple(out.shape[-2:]) == (ho, wo)
    touches = 0 if y is None else sum(1 for v in y.double().reshape(-1).tolist() if v in kinks)
    planes = x.double().reshape(n * c, h * w).tolist()
    maxima = out.double().reshape(n * c, ho * wo).tolist()
    tied, counted, pairs = 0, 0, []
    for pl_i, (pl, mx) in enumerate(zip(planes, maxima)):
        for j, win in enumerate(wins):
            m = mx[j]
            if sum(1 for i in win if pl[i] == m) >= 2:  # NaN max: no entry equals it
                tied += 1
                if m not in saturated:
                    counted += 1
                    pairs.append([pl_i // c, (pl_i % c) * ho * wo + j])
    return [touches, tied, counted], pairs


@st.composite
def scan_cases(draw):
    kh, kw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    sh, sw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    dh, dw = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    ph, pw = draw(st.integers(0, kh // 2)), draw(st.integers(0, kw // 2))
    if draw(st.booleans()):  # the monitor's common case: 2x2 windows, stride 2 (odd sizes leave a row/column out)
        kh = kw = sh = sw = 2
        ph = pw = 0
        dh = dw = 1
    h = draw(st.integers(max(1, (kh - 1) * dh + 1 - 2 * ph), 9))
    w = draw(st.integers(max(1, (kw - 1) * dw + 1 - 2 * pw), 9))
    n, c = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    dtype = draw(st.sampled_from(DTYPES))
    gen = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    x = torch.randint(0, draw(st.integers(1, 4)), (n, c, h, w), generator=gen).to(dtype)  # ties everywhere
    for v in draw(st.lists(st.sampled_from([float("nan"), float("-inf"), float("inf")]), max_size=3)):
        x.view(-1)[int(torch.randint(0, x.numel(), (1,), generator=gen))] = v
    y = None
    if draw(st.booleans()):
        y = (torch.randint(-1, 3, (n, c, h, w), generator=gen).to(dtype) - (0.5 if draw(st.booleans()) else 0))
        y.view(-1)[0] = float("nan")
    kinks = draw(st.lists(st.sampled_from(VALUES), max_size=3, unique=True))
    saturated = draw(st.lists(st.sampled_from(VALUES), max_size=4, unique=True))  # > 2: the general loop
    geom = ((kh, kw), (sh, sw), (ph, pw), (dh, dw))
    return y, kinks, x, geom, saturated


@settings(max_examples=budget(60), deadline=None)
@given(case=scan_cases(), mode=st.sampled_from(["reference", "auto"]))
def test_monitor_pool_scan_equals_the_window_enumeration(case, mode):
    y, kinks, x, geom, saturated = case
    out = F.max_pool2d(x, *geom)
    want_counts, want_pairs = expected(y, kinks, x, out, geom, saturated)
    with kernels.use(mode):
        counts, pairs = kernels.monitor_pool_scan(y, kinks, x, out, *geom, saturated=saturated)
        total, mask = kernels.tie_scan(x, out, *geom, saturated=saturated)
        total_w, windows = kernels.tie_scan_windows(x, out, *geom, saturated=saturated)
    assert counts.dtype == torch.int64 and counts.tolist() == want_counts
    assert pairs.tolist() == want_pairs
    assert total.tolist() == want_counts[1:] and total_w.tolist() == want_counts[1:]
    assert windows.tolist() == want_pairs and mask.reshape(x.shape[0], -1).nonzero().tolist() == want_pairs


@pytest.mark.parametrize("shape", [(8, 16, 64, 64), (64, 128, 4, 4), (64, 64, 9, 7)])
def test_rows_split_over_threads_give_the_pairs_in_row_major_order(shape):
    """Inputs large enough for several parallel ranges: the C++ scan on 1 and on 2 threads against the vectorised
    PyTorch path (mode reference: nsverify.kernels.tie_counts, checked against the registry windows in
    test_kernels)."""
    gen = torch.Generator().manual_seed(1)
    x = torch.randint(0, 3, shape, generator=gen).float()
    y = torch.randint(-1, 2, shape, generator=gen).float()
    out = F.max_pool2d(x, 2, 2)
    geom = ((2, 2), (2, 2), (0, 0), (1, 1))
    with kernels.use("reference"):
        want_counts, want_pairs = kernels.monitor_pool_scan(y, [0.0], x, out, *geom, saturated=(0.0,))
    assert want_counts.tolist() == [int((y == 0).sum()), int(((kernels.tie_counts(x, out, *geom) >= 2)).sum()),
                                    len(want_pairs)]
    threads = torch.get_num_threads()
    try:
        for t in (1, 2):
            torch.set_num_threads(t)
            counts, pairs = kernels.monitor_pool_scan(y, [0.0], x, out, *geom, saturated=(0.0,))
            assert torch.equal(counts, want_counts) and torch.equal(pairs, want_pairs)
    finally:
        torch.set_num_threads(threads)


def _net(act: nn.Module, pool: bool):
    torch.manual_seed(0)
    conv = nn.Conv2d(1, 3, 3, padding=1)
    with torch.no_grad():  # channel 0 is all zero: every pre-activation there sits at ReLU's kink
        conv.weight[0].zero_()
        conv.bias[0] = 0.0
    layers = [conv, act] + ([nn.MaxPool2d(2)] if pool else [])
    return nn.Sequential(*layers, nn.Flatten(), nn.Linear(27 if pool else 108, 2))


@pytest.mark.parametrize("pool", [True, False], ids=["relu+pool", "relu alone"])
def test_the_monitor_counts_each_kink_touch_once(pool):
    """Kink touches of a layer with a pool are counted in the pool's hook (one call), of a layer without one in the
    activation's: either way the record equals (y == 0).sum() read from the conv's output by a hook of ours."""
    net = _net(nn.ReLU(), pool)
    x = torch.round(torch.rand(2, 1, 6, 6, generator=torch.Generator().manual_seed(3)) * 2)  # ties in the pools
    seen = []
    net[0].register_forward_hook(lambda m, i, o: seen.append(int((o == 0).sum())))
    with Monitor(net) as mon:
        net(x).sum()
        rec = mon.check()
    assert seen[-1] >= 2 * 36  # the zero channel at least
    assert rec.layers[0].kink_touches == seen[-1]


def test_kinks_are_counted_when_the_pool_hook_does_not_run():
    """A forward that stops after the activation (the pool's hook never runs) still gets its kink touches counted,
    in check(): a layer is never recorded without them."""
    net = _net(nn.ReLU(), True)
    x = torch.rand(2, 1, 6, 6)
    with Monitor(net) as mon:
        y = net[0](x)
        net[1](y)  # the activation only
        rec = mon.check()
    assert rec.layers[0].kink_touches == int((y == 0).sum()) >= 2 * 36
    assert rec.layers[0].windows == 0


def _record(model, x, mode):
    with kernels.use(mode), Monitor(model) as mon:
        model(x)
        rec = mon.check()
    return [(c.status, c.kink_touches, c.tied_windows, c.tied_positive, c.nontrivial_windows, c.sum_nontrivial,
             c.unchecked, c.tj_flat, c.tj_patch, c.tj_field, c.tj_exact,
             sorted(tuple(sorted(r.items())) for r in c.rows)) for c in rec.layers]


def _tie_net(act, bn=False, dtype=torch.float32):
    torch.manual_seed(0)
    c = 4
    first = [nn.Conv2d(3, c, 3, padding=1)] + ([nn.BatchNorm2d(c)] if bn else [])
    layers = first + ([act()] if act else []) + [nn.MaxPool2d(2), nn.Conv2d(c, c, 3, padding=1)]
    layers += ([act()] if act else []) + [nn.MaxPool2d(2), nn.Flatten(), nn.Linear(c * 4 * 4, 3)]
    return nn.Sequential(*layers).to(dtype)


@pytest.mark.parametrize("act, bn, dtype", [
    (nn.ReLU, False, torch.float32), (nn.ReLU, False, torch.float64), (nn.ReLU, True, torch.float32),
    (nn.ReLU6, False, torch.float32), (nn.LeakyReLU, False, torch.float32), (nn.Hardtanh, False, torch.float32),
    (None, False, torch.float32), (nn.ReLU, False, torch.bfloat16)],
    ids=["relu", "relu-f64", "relu-bn", "relu6", "leaky", "hardtanh", "pool-only", "relu-bf16"])
def test_the_c_pairs_pass_gives_the_pytorch_paths_records(act, bn, dtype):
    """Algorithm 1's tied pairs from the C++ pass (pool_tie_pairs, mode auto) against the PyTorch path (mode
    reference): the same verdicts, counters and constraint rows, on plateau images (ties in both pools), scaled so
    that ReLU6's and HardTanh's flat ends are reached. Leaky ReLU (slope 0.01) and bfloat16 take the PyTorch path
    in both modes."""
    from tests.test_monitor import _plateau_images

    model = _tie_net(act, bn, dtype)
    for seed, scale in ((0, 1.0), (1, 8.0)):
        x = (_plateau_images(n=4, seed=seed) * scale).to(dtype)
        model.train(seed == 0)
        want = _record(model, x, "reference")
        assert sum(layer[3] for layer in want) > 0  # ties to decide
        assert _record(model, x, "auto") == want


def test_the_c_pairs_pass_leaves_members_at_a_kink_to_autograd():
    """A tie member whose pre-activation sits at a breakpoint (AD's rule decides D^AD rho there) or is NaN: the C++
    pass declines (None) and algorithm1 takes the PyTorch path; off the breakpoints it gives the pairs with the
    pieces' slopes, by hand: window 0 = entries (0, 1, 4, 5) of a 4x4 plane."""
    from nsverify.ad import Activation
    from nsverify.oracle.park import algorithm1

    relu = Activation("relu")
    win = algorithm1.pool_index_windows((1, 4, 4), 2, 2)
    rows = torch.tensor([[0, 0]])
    y = torch.full((1, 16), -1.0)
    y[0, [0, 1, 5]] = 2.0  # members 0, 1, 5 (value 2): pairs (0, 1) and (0, 5), slopes 1
    a = torch.relu(y)
    flat, (rr, bb, si, ii, rp_s, rp_i), _ = algorithm1._fused_pairs(relu, y, a, rows, win)
    assert flat == 0 and rr.tolist() == [0, 0] and bb.tolist() == [0, 0] and si.tolist() == [0, 0]
    assert ii.tolist() == [1, 5] and rp_s.tolist() == [1.0, 1.0] and rp_i.tolist() == [1.0, 1.0]
    y0 = torch.full((1, 16), -1.0)
    y0[0, [0, 1]] = -2.0  # all four entries at relu's max 0, slope 0 everywhere: three both-flat pairs, none left
    flat, (rr, *_), _ = algorithm1._fused_pairs(relu, y0, torch.relu(y0), rows, win)
    assert flat == 3 and rr.tolist() == []
    for bad in (0.0, float("nan")):  # entry 4 (a member: alpha 0 = the max) at the kink, or NaN
        yb = y0.clone()
        yb[0, 4] = bad
        ab = torch.relu(yb).nan_to_num(0.0)
        assert algorithm1._fused_pairs(relu, yb, ab, rows, win) is None


@pytest.mark.parametrize("fov, single", [(((8, 2, -3), (8, 2, -3)), False), (((3, 1, -1), (3, 1, -1)), True),
                                         (((4, 2, -1), (6, 2, -2)), False), (((5, 1, 0), (3, 3, -2)), False)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_receptive_field_test_by_the_c_patch_pass_equals_the_gathered_fields(fov, single, dtype):
    """_same_field's C++ form (the fields as the patches of a convolution, compared by patch_pairs_equal) against
    its PyTorch form (mode reference: the zero-padded fields gathered and compared entry by entry), on plateau
    inputs with NaN and -0.0 entries: the same answer for every pair, many of them True."""
    from nsverify.papers.park.monitor import _same_field

    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 2, (4, 3, 20, 20), generator=g).to(dtype)
    x[:, :, :, :12] = 0.5
    x[0, 0, 3, 3], x[1, 2, 5, 7] = float("nan"), -0.0
    y = torch.zeros(4, 5, 10, 10, dtype=dtype)
    n = 4000
    b = torch.randint(0, 4, (n,), generator=g)
    i = torch.randint(0, 500, (n,), generator=g)
    k = (i + torch.randint(-3, 4, (n,), generator=g)).clamp(0, 499)  # mostly near pairs, a few far ones
    k[: n // 4] = torch.randint(0, 500, (n // 4,), generator=g)
    got = _same_field(x, y, fov, single)(b, i, k)
    with kernels.use("reference"):
        want = _same_field(x, y, fov, single)(b, i, k)
    assert want.sum() > 100 and (~want).sum() > 100
    assert torch.equal(got, want)


def test_the_ratio_command_tracks_both_widths_in_15_interleaved_rounds():
    """asv_bench/ratios.py --area monitor (issue 39): VGG11 and ResNet18 at width 0.25 and at width 1, by default
    15 interleaved rounds (the median and its per-round IQR)."""
    import importlib.util
    import sys
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "asv_bench" / "ratios.py"
    spec = importlib.util.spec_from_file_location("nsverify_bench_ratios_monitor", path)
    ratios = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = ratios  # dataclasses look their module up there
    spec.loader.exec_module(ratios)
    assert ratios.monitor_widths(False) == [("vgg11", 0.25), ("vgg11", 1.0), ("resnet18", 0.25), ("resnet18", 1.0)]
    assert ratios.parse_args(["--area", "monitor"]).repeat == 15 and ratios.MONITOR_TARGET == 1.15


@pytest.mark.parametrize("h, w", [(1, 1), (2, 3), (3, 2), (5, 5), (6, 7), (8, 8), (9, 4)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_resnet_stem_pool_geometry_equals_the_window_enumeration(h, w, dtype):
    """The 3x3 / stride 2 / padding 1 windows (ResNet's stem pool, a loop of its own in the C++ scan), even and
    odd sizes, against the enumeration, with 0 (ReLU's saturated value) and 2.0 tying."""
    gen = torch.Generator().manual_seed(h * 10 + w)
    x = torch.randint(0, 3, (2, 3, h, w), generator=gen).to(dtype)
    y = torch.randint(-1, 2, (2, 3, h, w), generator=gen).to(dtype)
    geom = ((3, 3), (2, 2), (1, 1), (1, 1))
    out = F.max_pool2d(x, *geom)
    want_counts, want_pairs = expected(y, [0.0], x, out, geom, (0.0,))
    counts, pairs = kernels.monitor_pool_scan(y, [0.0], x, out, *geom, saturated=(0.0,))
    assert counts.tolist() == want_counts and pairs.tolist() == want_pairs
    total, mask = kernels.tie_scan(x, out, *geom, saturated=(0.0, 1.0, 5.0))  # > 2 saturated values
    want_counts3, want_pairs3 = expected(None, [], x, out, geom, (0.0, 1.0, 5.0))
    assert total.tolist() == want_counts3[1:] and mask.reshape(2, -1).nonzero().tolist() == want_pairs3
