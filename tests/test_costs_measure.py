"""Measured ratios: FLOP counts against the closed form, the GPU script (--smoke), the section.

The timing helper itself is tested in tests/test_devices.py.
"""
import json
import os
import subprocess
import sys

import pytest
import torch

from nsverify.errors import UnsupportedDtypeError
from nsverify.papers.costs.measure import cnn_row, flop_ratio, interpreter_mlp_omega, mlp, mlp_row, vgg11


@pytest.mark.parametrize("widths", [[784, 10], [784, 64, 10], [20, 32, 32, 32, 5]])
def test_mlp_flop_ratio_matches_closed_form(widths):
    batch = 4
    model = mlp(widths).double()
    out = flop_ratio(model, torch.randn(batch, widths[0], dtype=torch.float64))
    mm = [2 * batch * a * b for a, b in zip(widths, widths[1:])]
    # forward: one product per layer; backward: weight gradient per layer, input gradient except layer 1
    assert out["flops_fwd"] == sum(mm)
    assert out["flops_fwdbwd"] == 2 * sum(mm) + sum(mm[1:])
    assert out["flop_ratio"] < 3


def test_rows_have_positive_times_and_ratios():
    row = mlp_row(2, 32, "bfloat16", batch=8, reps=2)
    assert row["dtype"] == "bfloat16" and row["t_fwd"] > 0 and row["wall_ratio"] > 0
    assert 2 < row["flop_ratio"] < 3
    c = cnn_row(0.0625, "float32", batch=2, reps=1)
    assert 2.5 < c["flop_ratio"] < 3.01
    assert sum(isinstance(m, torch.nn.MaxPool2d) for m in vgg11(0.0625)) == 5
    with pytest.raises(UnsupportedDtypeError):
        mlp_row(1, 8, "int32")


def test_interpreter_omega_of_mlps_is_flat_and_below_five():
    om = [interpreter_mlp_omega(d, 4) for d in (1, 4, 12)] + [interpreter_mlp_omega(2, w) for w in (2, 16)]
    assert max(om) <= 5 and max(om) - min(om) < 0.5


def test_gpu_script_smoke_runs_on_cpu(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.getcwd())
    r = subprocess.run([sys.executable, "scripts/gpu/costs.py", "--out", str(tmp_path), "--smoke"],
                       capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    data = json.loads((tmp_path / "costs.json").read_text())
    assert data["smoke"] and {(x["model"], x["dtype"]) for x in data["rows"]} >= {("mlp", "float32"),
                                                                                 ("vgg11", "bfloat16")}
    bad = subprocess.run([sys.executable, "scripts/gpu/costs.py", "--out", str(tmp_path)] if not
                         torch.cuda.is_available() else [sys.executable, "-c", "raise SystemExit(2)"],
                         capture_output=True, text=True, timeout=60, env=env)
    assert bad.returncode == 2
    if not torch.cuda.is_available():
        assert "no CUDA GPU" in bad.stderr and "--smoke" in bad.stderr


def test_section_reads_gpu_json(tmp_path, monkeypatch):
    import nsverify.sections.costs as sec

    path = tmp_path / "costs.json"
    path.write_text(json.dumps({"device": "NVIDIA H200", "torch": "2.11", "rows": [
        {"model": "mlp", "batch": 1024, "dtype": "float32", "wall_ratio": 3.0, "flop_ratio": 2.99},
        {"model": "mlp_sweep", "depth": 1, "width": 64, "batch": 1024, "dtype": "float32", "wall_ratio": 2.0,
         "flop_ratio": 2.0},
        {"model": "mlp_sweep", "depth": 5, "width": 64, "batch": 1024, "dtype": "float32", "wall_ratio": 2.5,
         "flop_ratio": 2.5}]}))
    monkeypatch.setattr(sec, "GPU_JSON", path)
    metrics, claims, tables = [], [], []
    rows = sec._gpu_rows(metrics, claims, tables)
    assert rows and tables[0]["rows"][0][-1] == 2.9          # the H200 anchor next to the measurement
    assert metrics[0]["kind"] == "bench_ratio"
    from nsverify.report.schema import validate_metrics

    validate_metrics(metrics, "costs")  # unique keys: one per model, depth, width and dtype
    monkeypatch.setattr(sec, "GPU_JSON", tmp_path / "absent.json")
    claims = []
    assert sec._gpu_rows([], claims, []) == [] and claims[0]["held"] is None


@pytest.mark.slow
def test_section_quick_runs():
    from nsverify.report import RunContext
    from nsverify.sections.costs import costs_section

    out = costs_section(RunContext(quick=True, section="costs"))
    keys = [m["key"] for m in out["data"]["metrics"]]
    assert len(keys) == len(set(keys))
    assert {c["claim"][:9] for c in out["claims"]} >= {"Table 2.1", "Theorem 6"}
    json.dumps(out)
