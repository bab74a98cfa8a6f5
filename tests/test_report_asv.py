"""asv_bench/ for real use: offline existing env, spawn, GPU-aware machine names, shared axes."""
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
    spec.loader.exec_module(mod)
    return mod


axes = _load("nsverify_bench_axes", BENCH / "benchmarks" / "_axes.py")
machine = _load("nsverify_bench_machine", BENCH / "machine.py")


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
    out = subprocess.run([sys.executable, "machine.py", "asv", "check", "-E", "existing:same"], cwd=BENCH,
                         env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "No problems found" in out.stdout, out.stdout[-3000:] + out.stderr[-3000:]
