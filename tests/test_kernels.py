"""nsverify.kernels: the fused tie-aware max-pool backward equals the pure-PyTorch reference on every tie pattern
(kernel/stride/padding/dilation/ceil_mode, NaN, +-inf, four dtypes, overlapping windows, 1-d pools), keeps torch.func
and double backward working, falls back to the reference with one warning, and the Triton kernels agree too
(Triton's interpreter on CPU when triton is importable)."""
import json
import logging
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from nsverify import ad, kernels
from nsverify.ad import _maxpool_vjp_reference
from nsverify.kernels import loader
from nsverify.pytest_plugin import budget

DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64]
BETAS = [None, 0.5, 0.1, 1.0, 3.0, -0.25, 1e4]  # None: minimal
HAVE_CXX = shutil.which(os.environ.get("CXX", "c++")) is not None

needs_cxx = pytest.mark.skipif(not HAVE_CXX, reason="no C++ compiler: the fused CPU kernel cannot be built here")


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal numbers, NaN at the same places (NaN payloads and the sign of zero aside)."""
    nan = a.isnan()
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(nan, b.isnan()) and \
        torch.equal(a.masked_fill(nan, 0), b.masked_fill(nan, 0))


@st.composite
def pool_cases(draw):
    kh, kw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    sh, sw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    dh, dw = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    ph, pw = draw(st.integers(0, kh // 2)), draw(st.integers(0, kw // 2))
    ceil = draw(st.booleans())
    h = draw(st.integers(max(1, (kh - 1) * dh + 1 - 2 * ph), 9))
    w = draw(st.integers(max(1, (kw - 1) * dw + 1 - 2 * pw), 9))
    n, c = draw(st.integers(1, 2)), draw(st.integers(1, 3))
    dtype = draw(st.sampled_from(DTYPES))
    gen = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    x = torch.randint(0, draw(st.integers(1, 4)), (n, c, h, w), generator=gen).to(dtype)  # ties everywhere
    specials = draw(st.lists(st.sampled_from([float("nan"), float("-inf"), float("inf")]), max_size=3))
    for v in specials:
        x.view(-1)[int(torch.randint(0, x.numel(), (1,), generator=gen))] = v
    if draw(st.booleans()):  # a whole window's worth of -inf
        x[..., :kh, :kw] = float("-inf")
    geom = ((kh, kw), (sh, sw), (ph, pw), (dh, dw), ceil)
    beta = draw(st.sampled_from(BETAS))
    return x, geom, beta, gen


def _pool(x, geom):
    k, s, p, d, ceil = geom
    return F.max_pool2d(x, k, s, p, d, ceil_mode=ceil, return_indices=True)


@needs_cxx
@settings(max_examples=budget(60))
@given(case=pool_cases())
def test_fused_cpu_kernel_equals_the_reference(case):
    x, geom, beta, gen = case
    out, idx = _pool(x, geom)
    g = (torch.randn(out.shape, generator=gen) * 3).to(x.dtype)
    if out.numel() and torch.rand((), generator=gen) < 0.2:
        g.view(-1)[0] = float("inf")
    jac = "minimal" if beta is None else "hybrid"
    with torch.no_grad():
        want = _maxpool_vjp_reference(g, x, out, idx, geom, jac, beta)
        with kernels.use("fused"):
            got = kernels.maxpool2d_tie_backward(g, x, out, idx, geom, jac, beta)
    assert got is not None
    assert same(got, want), (geom, beta, x.dtype)


@needs_cxx
@settings(max_examples=budget(30))
@given(case=pool_cases(), one_d=st.booleans())
def test_public_ops_give_the_same_gradient_in_both_modes(case, one_d):
    x, geom, beta, gen = case
    (kh, kw), (sh, sw), (ph, pw), (dh, dw), ceil = geom
    rule = "even" if beta is None else ("hybrid", beta)

    def run(mode):
        xx = x.detach().clone().requires_grad_()
        with kernels.use(mode):
            if one_d:
                y = ad.max_pool1d(xx[:, :, 0, :], kw, sw, pw, dw, ceil, rule=rule)
            else:
                y = ad.max_pool2d(xx, (kh, kw), (sh, sw), (ph, pw), (dh, dw), ceil, rule=rule)
            g = torch.randn(y.shape, generator=torch.Generator().manual_seed(1)).to(x.dtype)
            (gx,) = torch.autograd.grad(y, xx, g)
        return y, gx

    y_ref, g_ref = run("reference")
    y_fused, g_fused = run("fused")
    assert same(y_fused, y_ref) and same(g_fused, g_ref)


@needs_cxx
@pytest.mark.parametrize("dtype", DTYPES)
def test_fused_kernel_is_exact_on_the_benchmark_pattern(dtype):
    """The benchmark's input (plateaus 0..2: most 2x2 windows tie) and an overlapping 3x3/2 pool, larger than the
    property's shapes, against the reference (float16 on CPU: a small size)."""
    shape = (2, 3, 16, 16) if dtype == torch.float16 else (8, 16, 32, 32)
    x = torch.randint(0, 3, shape, generator=torch.Generator().manual_seed(0)).to(dtype)
    for geom in [((2, 2), (2, 2), (0, 0), (1, 1), False), ((3, 3), (2, 2), (1, 1), (1, 1), False)]:
        out, idx = _pool(x, geom)
        g = torch.randn(out.shape, generator=torch.Generator().manual_seed(1)).to(dtype)
        for jac, beta in [("minimal", None), ("hybrid", 0.5), ("hybrid", 0.3)]:
            with torch.no_grad(), kernels.use("fused"):
                got = kernels.maxpool2d_tie_backward(g, x, out, idx, geom, jac, beta)
            assert same(got, _maxpool_vjp_reference(g, x, out, idx, geom, jac, beta))


def test_infinite_upstream_gradient_reaches_only_the_tie_set():
    """0 * inf = NaN must not leak into the other entries of a window (the reference once multiplied a mask)."""
    x = torch.tensor([[[[1.0, 1.0], [0.0, 1.0]]]], requires_grad=True)
    for mode in ("reference", "auto"):
        with kernels.use(mode):
            (gx,) = torch.autograd.grad(ad.max_pool2d(x, 2, rule="even"), x, torch.full((1, 1, 1, 1), float("inf")))
        assert gx.flatten().tolist() == [float("inf"), float("inf"), 0.0, float("inf")]


@needs_cxx
def test_torch_func_and_double_backward_with_the_kernel_on():
    x = torch.tensor([[[[1.0, 1.0, 0.0, 2.0], [0.0, 1.0, 2.0, 2.0]]]], dtype=torch.float64)
    # windows (row-major): {1, 1 | 0, 1} ties at flat 0, 1, 5; {0, 2 | 2, 2} ties at 3, 6, 7
    want = {"even": [1 / 3, 1 / 3, 0, 1 / 3, 0, 1 / 3, 1 / 3, 1 / 3],
            "hybrid=2": [-1 / 3, 2 / 3, 0, -1 / 3, 0, 2 / 3, 2 / 3, 2 / 3]}  # (1 - 2) e_first + 2 even
    with kernels.use("fused"):
        for rule, w in want.items():
            f = lambda t, rule=rule: ad.max_pool2d(t, 2, rule=rule).sum()  # noqa: E731
            assert torch.allclose(torch.func.grad(f)(x).flatten(), torch.tensor(w, dtype=torch.float64))
            batched = torch.func.vmap(torch.func.grad(f))(torch.stack([x, 2 * x]))
            assert torch.allclose(batched[1].flatten(), torch.tensor(w, dtype=torch.float64))
            _, jv = torch.func.jvp(lambda t, rule=rule: ad.max_pool2d(t, 2, rule=rule), (x,), (torch.ones_like(x),))
            assert jv.flatten().tolist() == [1.0, 1.0]  # every Jacobian row sums to 1
            # double backward: the first backward builds a graph, so the differentiable reference runs
            xx = x.clone().requires_grad_()
            (gx,) = torch.autograd.grad(ad.max_pool2d(xx * xx, 2, rule=rule).sum(), xx, create_graph=True)
            (ggx,) = torch.autograd.grad(gx.sum(), xx)
            with kernels.use("reference"):
                xr = x.clone().requires_grad_()
                (gr,) = torch.autograd.grad(ad.max_pool2d(xr * xr, 2, rule=rule).sum(), xr, create_graph=True)
                (ggr,) = torch.autograd.grad(gr.sum(), xr)
            assert torch.equal(gx, gr) and torch.equal(ggx, ggr)


def test_non_contiguous_input_uses_the_reference_and_is_right():
    x = torch.randint(0, 2, (2, 3, 4, 4), generator=torch.Generator().manual_seed(0)).float()
    xc = x.to(memory_format=torch.channels_last).requires_grad_()
    out, idx = _pool(xc, ((2, 2), (2, 2), (0, 0), (1, 1), False))
    assert kernels.fused_applies(torch.ones_like(out), xc, out, idx) is not None
    (g1,) = torch.autograd.grad(ad.max_pool2d(xc, 2, rule="even").sum(), xc)
    with kernels.use("reference"):
        x2 = x.clone().requires_grad_()
        (g2,) = torch.autograd.grad(ad.max_pool2d(x2, 2, rule="even").sum(), x2)
    assert torch.equal(g1, g2)


def test_missing_compiler_falls_back_with_one_warning(monkeypatch, caplog):
    loader.reset_for_tests()
    monkeypatch.setattr(loader.shutil, "which", lambda name: None)
    x = torch.zeros(1, 1, 2, 2, requires_grad=True)
    try:
        with caplog.at_level(logging.WARNING, logger="nsverify.kernels"):
            for _ in range(2):
                (gx,) = torch.autograd.grad(ad.max_pool2d(x, 2, rule="even").sum(), x)
                assert gx.flatten().tolist() == [0.25] * 4  # the reference's answer
        warned = [r for r in caplog.records if "unavailable" in r.getMessage()]
        assert len(warned) == 1 and "C++ compiler" in warned[0].getMessage()
        assert kernels.status()["cpu"]["ok"] is False
        with kernels.use("fused"), pytest.raises(kernels.KernelUnavailableError, match="compiler"):
            torch.autograd.grad(ad.max_pool2d(x, 2, rule="even").sum(), x)
    finally:
        loader.reset_for_tests()


def test_kernel_mode_is_validated(monkeypatch):
    monkeypatch.setenv(kernels.ENV, "fast")
    with pytest.raises(kernels.KernelModeError, match="auto, reference, fused"):
        kernels.mode()
    with pytest.raises(kernels.KernelModeError, match="auto, reference, fused"):
        kernels.set_mode("gpu")
    monkeypatch.setenv(kernels.ENV, "Reference")
    assert kernels.mode() == "reference"


@needs_cxx
def test_status_reports_the_build_and_its_cache():
    x = torch.zeros(1, 1, 2, 2, requires_grad=True)
    with kernels.use("fused"):
        torch.autograd.grad(ad.max_pool2d(x, 2, rule="even").sum(), x)
    st_ = kernels.status()
    assert st_["cpu"]["ok"] and st_["cpu"]["path"].startswith(st_["cpu_cache"])
    assert loader.extension_name() in st_["cpu_cache"]


_TRITON_CHECK = textwrap.dedent("""
    import torch, torch.nn.functional as F
    from nsverify.ad import _maxpool_vjp_reference
    from nsverify.kernels import triton_maxpool as tm
    gen = torch.Generator().manual_seed(0)
    bad = []
    for dt in (torch.float32, torch.float64, torch.bfloat16, torch.float16):
        for geom in [((2, 2), (2, 2), (0, 0), (1, 1), False), ((3, 3), (1, 1), (0, 0), (1, 1), False),
                     ((3, 3), (2, 2), (1, 1), (2, 2), True), ((2, 3), (1, 2), (1, 1), (1, 1), False)]:
            for jac, beta in (("minimal", None), ("hybrid", 0.1), ("hybrid", 3.0)):
                x = torch.randint(0, 3, (2, 2, 7, 9), generator=gen).to(dt)
                x[0, 0, 0, 0] = float("nan"); x[1, 1, 2:4, 2:4] = float("-inf")
                k, s, p, d, cm = geom
                out, idx = F.max_pool2d(x, k, s, p, d, ceil_mode=cm, return_indices=True)
                g = torch.randn(out.shape, generator=gen).to(dt)
                ref = _maxpool_vjp_reference(g, x, out, idx, geom, jac, beta)
                got = tm.maxpool2d_tie_backward(g, x, out, idx, geom, jac == "hybrid", 1.0 if beta is None else beta)
                nan = ref.isnan()
                if not (torch.equal(nan, got.isnan())
                        and torch.equal(ref.masked_fill(nan, 0), got.masked_fill(nan, 0))):
                    bad.append((str(dt), geom, jac, beta))
    print("mismatches", bad)
    raise SystemExit(1 if bad else 0)
""")


def test_triton_kernels_equal_the_reference_in_the_interpreter():
    """The CUDA kernels, run by Triton's CPU interpreter (TRITON_INTERPRET=1) on CPU tensors."""
    pytest.importorskip("triton", reason="triton is not installed (CUDA builds of torch bring it)")
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONWARNINGS": "ignore"}
    res = subprocess.run([sys.executable, "-c", _TRITON_CHECK], env=env, capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]


@settings(max_examples=budget(40))
@given(case=pool_cases(), mode=st.sampled_from(["reference", "auto"]))
def test_tie_counts_and_scan_match_the_registry_windows(case, mode):
    """|A_j| per window against an independent enumeration of the windows (the registry's pool2d_windows), and the
    monitor's scan (C++ on CPU, PyTorch in mode reference) against those counts."""
    from nsverify.registry import pool2d_windows

    x, geom, _beta, _gen = case
    k, s, p, d, ceil = geom
    out = F.max_pool2d(x, k, s, p, d, ceil_mode=ceil)
    counts = kernels.tie_counts(x, out, k, s, p, d)
    n, c, h, w = x.shape
    (ho, wo), wins = pool2d_windows(h, w, k, s, p, d, ceil)
    planes = x.reshape(n * c, h * w).double().tolist()
    want = []
    for pl in planes:
        for win in wins:
            vals = [pl[i] for i in win]
            m = max(vals) if not any(v != v for v in vals) else None
            want.append(0 if m is None else sum(1 for v in vals if v == m))
    assert counts.reshape(-1).tolist() == want
    sat = (0.0, 2.0)
    with kernels.use(mode):
        total, mask = kernels.tie_scan(x, out, k, s, p, d, saturated=sat)
        kinks = kernels.count_equal(x, [0.0, 1.0])
    many = counts >= 2
    positive = many & (out != 0) & (out != 2)
    assert total.tolist() == [int(many.sum()), int(positive.sum())] and torch.equal(mask, positive)
    assert int(kinks) == int(((x == 0) | (x == 1)).sum())
    with kernels.use(mode):
        total_w, windows = kernels.tie_scan_windows(x, out, k, s, p, d, saturated=sat)
    assert torch.equal(total_w, total) and torch.equal(windows, positive.reshape(n, -1).nonzero())


def test_a_stale_build_lock_is_removed_and_a_fresh_one_waited_for(tmp_path):
    """torch waits forever on the build lock a killed build leaves; the loader removes a lock older than the
    stale age, and waits (bounded) for a younger one."""
    import os
    import time as _time

    from nsverify.kernels.loader import clear_stale_lock

    assert clear_stale_lock(tmp_path) is None  # no lock
    lock = tmp_path / "lock"
    lock.touch()
    old = _time.time() - 1000
    os.utime(lock, (old, old))
    assert "stale build lock" in clear_stale_lock(tmp_path, stale_s=300) and not lock.exists()
    lock.touch()  # fresh: waited for until it turns stale (here after 0.2 s)
    t0 = _time.perf_counter()
    assert clear_stale_lock(tmp_path, stale_s=0.2, poll_s=0.05) and not lock.exists()
    assert _time.perf_counter() - t0 >= 0.15


def test_the_build_key_changes_with_each_input():
    inputs = loader.key_inputs()
    assert set(inputs) >= {"torch", "sources", "compiler", "python_abi", "cflags", "ldflags", "torch_cxx11_abi"}
    assert inputs["torch"] == torch.__version__ and len(inputs["sources"]) == 64
    key = loader.build_key(inputs)
    assert loader.build_key(dict(inputs)) == key and len(key) == 16
    for name, other in [("torch", "2.99.0+cpu"), ("sources", "0" * 64), ("compiler", "/usr/bin/clang++ 18"),
                        ("python_abi", "cpython-399-x"), ("cflags", ["-O2"]), ("ldflags", []),
                        ("torch_cxx11_abi", not inputs["torch_cxx11_abi"]), ("machine", "riscv64")]:
        assert loader.build_key({**inputs, name: other}) != key, name
    assert loader.cache_root(inputs).name == f"{loader.extension_name()}-{key}"


def test_the_cache_directory_is_shared_and_overridable(monkeypatch, tmp_path):
    monkeypatch.delenv(loader.CACHE_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert loader.cache_dir() == tmp_path / "xdg" / "nsverify" / "kernels"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert loader.cache_dir() == Path.home() / ".cache" / "nsverify" / "kernels"
    monkeypatch.setenv(loader.CACHE_ENV, str(tmp_path / "k"))
    assert loader.cache_dir() == tmp_path / "k" and loader.cache_root().parent == tmp_path / "k"


_BUILD_STATE = textwrap.dedent("""
    import json, torch
    from dataclasses import asdict
    from nsverify import ad, kernels
    from nsverify.kernels import loader
    x = torch.zeros(1, 1, 2, 2, requires_grad=True)
    with kernels.use("fused"):
        torch.autograd.grad(ad.max_pool2d(x, 2, rule="even").sum(), x)
    print(json.dumps(asdict(loader.state())))
""")


@needs_cxx
def test_a_second_environment_with_the_same_key_reuses_the_build(tmp_path):
    """Two processes (as two virtual environments with the same torch would be) share the cache: the first
    builds, the second loads the library without compiling (a different PATH and VIRTUAL_ENV do not matter)."""
    root = Path(__file__).resolve().parents[1]
    base = {**os.environ, "PYTHONPATH": str(root), loader.CACHE_ENV: str(tmp_path / "cache")}
    states = []
    for venv in ("env-a", "env-b"):
        env = {**base, "VIRTUAL_ENV": str(tmp_path / venv), "PATH": f"{tmp_path / venv / 'bin'}:{os.environ['PATH']}"}
        proc = subprocess.run([sys.executable, "-c", _BUILD_STATE], capture_output=True, text=True, env=env,
                              timeout=600)
        assert proc.returncode == 0, proc.stderr
        states.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    first, second = states
    assert first["ok"] and first["built"] and first["path"].startswith(str(tmp_path / "cache"))
    assert second["ok"] and not second["built"] and second["path"] == first["path"]
    assert (Path(first["path"]).parent / loader.MARKER).is_file()
