"""The monitor's CUDA path, tested on CPU: the pool's hook keeps the mask of counted windows and ``check()`` reads
their pairs after the step's one transfer (``_deferred``), and the Triton detection kernels
(``nsverify/kernels/triton_monitor.py``) in Triton's CPU interpreter (``TRITON_INTERPRET=1``; marker ``triton``,
skipped without triton). Verdicts and rows must equal the per-window exact test's and the CPU path's."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch

from nsverify.papers.park import monitor as monitor_mod
from nsverify.papers.park.monitor import Monitor
from tests.test_monitor import _plateau_images, _vgg_like
from tests.test_monitor_fastpath import _assert_same, _rows


def _record(model, x, tie_test="auto"):
    with Monitor(model, tie_test=tie_test) as mon:
        out = model(x)
        rec = mon.check()
        del out
    return rec


def _same_records(a, b):
    assert a.correct == b.correct
    for p, q in zip(a.layers, b.layers, strict=True):
        assert (p.status, p.windows, p.tied_windows, p.tied_positive, p.kink_touches, p.nontrivial_windows,
                p.unchecked) == (q.status, q.windows, q.tied_windows, q.tied_positive, q.kink_touches,
                                 q.nontrivial_windows, q.unchecked), p.name
        assert _rows(p) == _rows(q), p.name


@pytest.mark.parametrize("seed", range(2))
def test_deferred_windows_give_the_cpu_paths_records(monkeypatch, seed):
    """Plateau images with a dead channel (ties of identical and of different patches): the deferred path's
    records equal the CPU path's and the per-window exact test's."""
    torch.manual_seed(seed)
    m = _vgg_like()
    with torch.no_grad():
        m[0].bias[0] = -10.0
    x = _plateau_images(seed=seed)
    x[:, :, 12:, :4] = (torch.arange(16).float().view(4, 4) % 2) / 255
    cpu = _record(m, x)
    seen = []
    real = monitor_mod._deferred
    monkeypatch.setattr(monitor_mod, "_deferred", lambda t: seen.append(real(t)) or True)
    deferred, exact = _record(m, x), _record(m, x, tie_test="exact")
    assert seen and not any(seen)  # the CPU path would have collected the pairs in its pass
    assert sum(c.tied_positive for c in cpu.layers) > 0
    _same_records(cpu, deferred)
    _assert_same(exact, deferred)


def test_deferred_windows_on_a_1d_pool_and_a_natural_crops_network(monkeypatch):
    from nsverify.papers.park.overhead import TrainingSteps

    run = TrainingSteps("vgg11", 2, width=1 / 8, batch=8)
    run.close()
    run.plain()
    conv = torch.nn.Conv1d(1, 2, 2)
    with torch.no_grad():
        conv.weight[:] = torch.tensor([[[1.0, 1.0]], [[1.0, -1.0]]])
        conv.bias.zero_()
    m1 = torch.nn.Sequential(conv, torch.nn.ReLU(), torch.nn.MaxPool1d(2), torch.nn.Flatten())
    x1 = torch.tensor([[[1.0, 2.0, 1.0, 0.0, 1.0, 1.0, 3.0]]])  # windows of two equal sums: ties
    cases = [(run.model, xb) for xb, _ in run.batches] + [(m1, x1)]
    cpu = [_record(m, x) for m, x in cases]
    monkeypatch.setattr(monitor_mod, "_deferred", lambda t: True)
    for (m, x), want in zip(cases, cpu):
        got = _record(m, x)
        _same_records(want, got)
        _assert_same(_record(m, x, tie_test="exact"), got)
    assert any(c.tied_positive for r in cpu for c in r.layers)


_TRITON_CHECK = textwrap.dedent("""
    import torch, torch.nn.functional as F
    from nsverify import kernels
    from nsverify.kernels import triton_monitor as tmo
    gen = torch.Generator().manual_seed(0)
    bad = []
    for dt in (torch.float32, torch.bfloat16, torch.float16, torch.float64):
        for geom in [((2, 2), (2, 2), (0, 0), (1, 1)), ((3, 3), (2, 2), (1, 1), (1, 1)),
                     ((3, 3), (1, 1), (0, 0), (2, 2)), ((2, 3), (1, 2), (1, 1), (1, 1))]:
            x = torch.randint(-1, 3, (2, 3, 9, 11), generator=gen).to(dt)
            x.view(-1)[::23] = float("nan"); x[0, 0, :2, :2] = float("-inf")
            k, s, p, d = geom
            out = F.max_pool2d(x, k, s, p, d)
            for sat in ((), (0.0,), (0.0, 2.0)):
                with kernels.use("reference"):  # tie_counts and elementwise tests
                    want = kernels.tie_scan(x, out, k, s, p, d, sat)
                got = tmo.tie_scan(x, out, k, s, p, d, sat)
                if not all(torch.equal(a, b) for a, b in zip(want, got)):
                    bad.append(("scan", str(dt), geom, sat))
            for vals in ((0.0,), (0.0, 2.0), (1.0, -1.0)):
                with kernels.use("reference"):
                    want = kernels.count_equal(x, vals)
                if not torch.equal(want, tmo.count_equal(x, vals)):
                    bad.append(("kinks", str(dt), vals))
    # the Triton max-pool backward where windows overlap and share their receivers (NaN argmaxes, hybrid's first
    # entries): a fixed accumulation order, so bitwise the CPU reference's (increasing window order) and its own
    from nsverify.ad import _maxpool_vjp_reference
    from nsverify.kernels import triton_maxpool as tpm
    for dt in (torch.float32, torch.bfloat16):
        for geom in [((3, 3), (1, 1), (0, 0), (1, 1), False), ((3, 3), (2, 2), (1, 1), (1, 1), False)]:
            x = torch.randint(0, 2, (2, 2, 8, 8), generator=gen).to(dt)
            x.view(-1)[::5] = float("nan")
            k, s, p, d, cm = geom
            out, idx = F.max_pool2d(x, k, s, p, d, ceil_mode=cm, return_indices=True)
            shared = torch.bincount(idx[out.isnan()].flatten()).max()
            if shared < 2:
                bad.append(("no NaN argmax shared by overlapping windows", geom))
            g = torch.randn(out.shape, generator=gen).to(dt) * 1e3
            for hyb, beta in ((False, 1.0), (True, 0.3)):
                ref = _maxpool_vjp_reference(g, x, out, idx, geom, "hybrid" if hyb else "minimal",
                                             beta if hyb else None)
                a = tpm.maxpool2d_tie_backward(g, x, out, idx, geom, hyb, beta)
                b = tpm.maxpool2d_tie_backward(g, x, out, idx, geom, hyb, beta)
                if not (torch.equal(a.nan_to_num(7), ref.nan_to_num(7)) and torch.equal(a.nan_to_num(7),
                                                                                         b.nan_to_num(7))):
                    bad.append(("backward", str(dt), geom, hyb))
    # the kernels' scalars are made once (a blocking host-to-device copy per call synchronises the CUDA stream)
    if tmo._values((0.0, 6.0), x) is not tmo._values((0.0, 6.0), x):
        bad.append("tie-scan values copied per call")
    if tpm._scalars(0.3, torch.float32, x.device) is not tpm._scalars(0.3, torch.float32, x.device):
        bad.append("hybrid scalars copied per call")
    # the monitor with the Triton kernels on CPU tensors (as on CUDA), against its CPU path
    from nsverify.papers.park import monitor as mm
    from tests.test_monitor import _plateau_images, _vgg_like
    torch.manual_seed(0)
    m = _vgg_like()
    x = _plateau_images(seed=0)
    def rec():
        with mm.Monitor(m) as mon:
            out = m(x)
            r = mon.check()
        return [(c.status, c.windows, c.tied_windows, c.tied_positive, c.kink_touches, c.nontrivial_windows,
                 sorted(tuple(sorted(w.items())) for w in c.rows)) for c in r.layers], r.correct
    want = rec()
    used = []
    kernels._triton_monitor = lambda *ts: used.append(1) or tmo
    kernels.cpu_kernels_ok = lambda *ts: False
    mm._deferred = lambda t: True
    got = rec()
    if not used or got != want or not any(layer[3] for layer in want[0]):
        bad.append(("monitor", len(used), want, got))
    print("mismatches", bad)
    raise SystemExit(1 if bad else 0)
""")


@pytest.mark.triton
def test_triton_detection_kernels_in_the_interpreter():
    """The Triton tie scan and kink count against the reference path (tie_counts and elementwise tests), every
    float dtype, overlapping, padded and dilated windows, NaN and -inf; the Triton max-pool backward where
    overlapping windows send to one entry (deterministic: the CPU reference's order, twice the same); then the
    monitor run with the detection kernels."""
    pytest.importorskip("triton", reason="triton is not installed (CUDA builds of torch bring it)")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONWARNINGS": "ignore",
           "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    res = subprocess.run([sys.executable, "-c", _TRITON_CHECK], env=env, capture_output=True, text=True, timeout=600,
                         cwd=root)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_cuda_the_forward_never_waits_and_check_waits_once():
    """CUDA's sync debug mode warns at every synchronising operation: none in the monitored forward (the
    detection kernels keep their counts on the device), one in ``check()`` for a step whose counts show no kink
    touch and no counted tie (randn inputs: the pools' ties are the ReLU's zeros, which Algorithm 2 leaves out);
    the record certifies the step, as the CPU's does."""
    import warnings

    torch.manual_seed(0)
    m = _vgg_like()
    x = torch.randn(8, 3, 16, 16, generator=torch.Generator().manual_seed(1))
    want = _record(m, x)
    assert sum(c.tied_positive + c.kink_touches for c in want.layers) == 0 and want.correct == "yes"
    mc, xc = m.cuda(), x.cuda()
    with Monitor(mc) as mon:
        mc(xc)
        mon.check()  # warm-up: kernels compiled, scalars copied once
        torch.cuda.synchronize()
        previous = torch.cuda.get_sync_debug_mode()
        torch.cuda.set_sync_debug_mode("warn")
        try:
            with warnings.catch_warnings(record=True) as fwd:
                warnings.simplefilter("always")
                out = mc(xc)
            with warnings.catch_warnings(record=True) as chk:
                warnings.simplefilter("always")
                rec = mon.check()
        finally:
            torch.cuda.set_sync_debug_mode(previous)
        del out
    syncs = lambda ws: [str(w.message) for w in ws if "synchroniz" in str(w.message)]  # noqa: E731
    assert syncs(fwd) == [] and len(syncs(chk)) == 1, (syncs(fwd), syncs(chk))
    # (TF32 convolutions may move a pre-activation near 0 across it: the counts of ReLU-zero ties can differ)
    assert rec.correct == "yes" and sum(c.tied_positive + c.kink_touches for c in rec.layers) == 0
