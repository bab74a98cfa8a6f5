"""asv_bench/ for real use: offline existing env, spawn, GPU-aware machine names, the common module's axes,
every benchmark's smallest case run once, and the side-by-side ratio command."""
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from nsverify.errors import UnsupportedDtypeError

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "asv_bench"


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


axes = _load("nsverify_bench_common", BENCH / "benchmarks" / "common.py")
machine = _load("nsverify_bench_machine", BENCH / "asv_machine.py")


def test_asv_conf_for_real_use():
    text = re.sub(r"^\s*//.*$", "", (BENCH / "asv.conf.json").read_text(), flags=re.M)
    conf = json.loads(text)
    assert conf["launch_method"] == "spawn"  # CUDA cannot be initialised in a forked child
    assert conf["environment_type"] == "existing" and conf["pythons"] == ["same"]
    assert conf["repo"] == ".." and conf["benchmark_dir"] == "benchmarks"
    assert "--no-index" in conf["build_command"][0] and "--no-build-isolation" in conf["build_command"][0]
    assert "--no-deps" in conf["install_command"][0]


def test_asv_outputs_ignored_by_git():
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    paths = ["asv_bench/results/m/x.json", "asv_bench/html/index.html", "asv_bench/env/x", "reports/r.json"]
    out = subprocess.run(["git", "check-ignore", *paths], cwd=ROOT, capture_output=True, text=True)
    assert out.stdout.split() == paths


def test_axes_valid_and_impossible_combinations():
    assert axes.DtypeDevice.param_names == ["dtype", "device"]
    assert axes.DtypeDevice.params == [["float32", "float64", "bfloat16", "float16"], ["cpu", "cuda"]]
    assert axes.resolve("float32", "cpu") == (torch.float32, torch.device("cpu"))
    assert axes.resolve("float16", "cpu", allow_cpu_float16=True)[0] == torch.float16
    with pytest.raises(NotImplementedError, match="bfloat16 on CPU"):
        axes.resolve("float16", "cpu")
    b = axes.DtypeDevice()
    b.setup("bfloat16", "cpu")
    assert (b.dtype, b.device) == (torch.bfloat16, torch.device("cpu"))
    with pytest.raises(UnsupportedDtypeError):  # a typo in params is a bug, not a skipped combination
        axes.resolve("int32", "cpu")
    axes.sync(torch.device("cpu"))


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the skip on a machine without a GPU")
def test_axes_cuda_skipped_without_gpu():
    with pytest.raises(NotImplementedError, match="no CUDA GPU"):
        axes.DtypeDevice().setup("float32", "cuda")


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_axes_cuda_on_gpu():
    assert axes.resolve("float32", "cuda")[1].type == "cuda"
    axes.sync(torch.device("cuda"))


def test_machine_name_carries_cpu_and_gpu(tmp_path, monkeypatch):
    import nsverify.report.machine as m

    monkeypatch.setattr(m, "cpu_model", lambda: "AMD EPYC 9654 96-Core Processor")
    monkeypatch.setattr(m, "gpu_model", lambda: "NVIDIA H100 80GB HBM3")
    name, entry = machine.machine_entry()
    assert name.endswith("-amd-epyc-9654-96-core-nvidia-h100-80gb-hbm3")
    assert entry["gpu"] == "NVIDIA H100 80GB HBM3" and "H100" in entry["cpu"] and entry["machine"] == name
    monkeypatch.setattr(m, "gpu_model", lambda: None)
    assert machine.machine_entry()[0].endswith("-amd-epyc-9654-96-core-no-gpu")
    path = tmp_path / "asv-machine.json"
    path.write_text(json.dumps({"version": 1, "other": {"machine": "other"}}))
    name = machine.register(path)
    data = json.loads(path.read_text())
    assert data["version"] == 1 and set(data) == {"version", "other", name}


@pytest.mark.skipif(shutil.which("asv") is None, reason="asv not installed (pip install asv)")
def test_asv_discovers_benchmarks(tmp_path):
    """`asv check` in the existing environment imports every benchmark file (no build, no network)."""
    env = dict(os.environ, HOME=str(tmp_path), ASV_PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "asv_machine.py", "asv", "check", "-E", "existing:same"], cwd=BENCH,
                         env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "No problems found" in out.stdout, out.stdout[-3000:] + out.stderr[-3000:]


def _benchmark_classes():
    """Every asv benchmark class in asv_bench/benchmarks/, as asv discovers them (public module attributes)."""
    import inspect
    import pkgutil

    sys.path.insert(0, str(BENCH))
    try:
        import benchmarks
    finally:
        sys.path.remove(str(BENCH))
    found = []
    for info in pkgutil.iter_modules(benchmarks.__path__, "benchmarks."):
        mod = importlib.import_module(info.name)
        for name, obj in vars(mod).items():
            if inspect.isclass(obj) and obj.__module__ == mod.__name__ and not name.startswith("_"):
                methods = [m for m in dir(obj) if m.startswith(("time_", "track_", "mem_", "peakmem_"))]
                if methods:
                    found.append(pytest.param(obj, methods, id=f"{info.name.split('.')[1]}.{name}"))
    return found


def _combinations(cls):
    import itertools

    params = getattr(cls, "params", [])
    if params and not isinstance(params[0], (list, tuple)):
        params = [params]
    return list(itertools.product(*params)) if params else [()]


@pytest.mark.parametrize("cls, methods", _benchmark_classes())
def test_every_benchmark_runs_its_first_possible_case(cls, methods):
    """asv only imports benchmarks in `asv check`; run each one's first case that this machine can run, once."""
    for combo in _combinations(cls):
        bench = cls()
        try:
            if hasattr(bench, "setup"):
                bench.setup(*combo)
        except NotImplementedError:
            continue  # asv's "skipped" (e.g. CUDA without a GPU)
        for m in methods:
            value = getattr(bench, m)(*combo)
            if m.startswith("track_"):
                assert isinstance(value, (int, float)) and value == value and value >= 0, (m, combo, value)
        return
    pytest.fail(f"{cls.__name__}: every parameter combination was skipped on this machine")


def test_benchmark_names_are_not_shadowed_by_imported_helpers():
    """asv takes any module-level function named time_*/track_* as a benchmark: helpers must not be imported so."""
    import inspect

    for p in _benchmark_classes():
        mod = sys.modules[p.values[0].__module__]
        stray = [k for k, v in vars(mod).items() if inspect.isfunction(v) and
                 k.startswith(("time_", "track_", "mem_", "peakmem_", "timeraw_"))]
        assert not stray, (mod.__name__, stray)


def _ratios(*args, timeout=300):
    return subprocess.run([sys.executable, str(BENCH / "ratios.py"), *args], capture_output=True, text=True,
                          timeout=timeout, env=dict(os.environ, PYTHONPATH=str(ROOT)))


def test_ratio_command_measures_side_by_side_and_keeps_every_sample(tmp_path):
    import statistics

    out = tmp_path / "ratios.json"
    r = _ratios("--small", "--repeat", "3", "--warmup", "0", "--dtype", "float32", "--json", str(out))
    assert r.returncode == 0, r.stderr[-3000:]
    data = json.loads(out.read_text())
    assert data["schema"] == "nsverify.bench_ratios/1"
    assert {c["area"] for c in data["cases"]} == {"ad_ops", "oracle", "zones"}
    for case in data["cases"]:
        samples = case["timing"]["samples_s"]
        assert case["timing"]["rounds"] == 3 and all(len(v) == 3 for v in samples.values())
        for ratio in case["ratios"]:
            cand, base = samples[ratio["candidate"]], samples[ratio["baseline"]]
            assert ratio["ratio_median"] == pytest.approx(statistics.median(cand) / statistics.median(base))
            assert ratio["ratio_min"] == pytest.approx(min(cand) / min(base))
            assert ratio["candidate"] in r.stdout
    oracle = [c for c in data["cases"] if c["area"] == "oracle"]
    kink = [c for c in oracle if "naive_lps" in c["info"]]
    assert [c["info"]["naive_lps"] for c in kink] == [2**2, 2**4]  # one LP per sign pattern of k sites
    (sep,) = [c for c in oracle if c["case"].startswith("separable")]  # plain 2^4 traces vs 2*4+1 with blocks
    assert sep["info"] == {"block_traces": 9, "plain_traces": 16, "target": "blocks <= 1 s"}
    minimal = [x for c in data["cases"] if c["area"] == "ad_ops" for x in c["ratios"]
               if x["candidate"] == "maxpool_minimal"]
    assert minimal and all(x["target"] == "<= 1.5" and x["met"] == (x["ratio_median"] <= 1.5) for x in minimal)


@pytest.mark.parametrize("args, message", [
    (["--area", "nope"], "--area nope: choose from ad_ops, oracle, zones, zones_dist"),  # then the opt-in areas
    (["--area", ""], "--area (empty)"),
    (["--dtype", "int32"], "not a floating dtype"),
    (["--repeat", "0"], "--repeat"),
    (["--json", "/nonexistent-dir/x.json"], "existing directory"),
])
def test_ratio_command_rejects_bad_arguments(args, message, capsys):
    ratios = _load("nsverify_bench_ratios", BENCH / "ratios.py")
    with pytest.raises(SystemExit) as info:
        ratios.main(args)
    err = capsys.readouterr().err
    assert info.value.code == 2 and message in err, err
