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
    # 784-32-32-10 at batch 8: forward one product per layer, backward the weight gradients and the input
    # gradients of layers 2-3 (2 * batch * fan_in * fan_out FLOPs per product)
    mm = [2 * 8 * a * b for a, b in ((784, 32), (32, 32), (32, 10))]
    assert row["flop_ratio"] == (2 * sum(mm) + sum(mm[1:])) / sum(mm)
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


def test_gpu_rows_render_with_their_provenance(tmp_path):
    from nsverify.papers.costs.repro import gpu_rows
    from nsverify.report.schema import validate_metrics
    from nsverify.sections.costs import _gpu_rows

    file_rows = [
        {"model": "mlp", "batch": 1024, "dtype": "float32", "wall_ratio": 3.0, "flop_ratio": 2.99},
        {"model": "mlp_sweep", "depth": 1, "width": 64, "batch": 1024, "dtype": "float32", "wall_ratio": 2.0,
         "flop_ratio": 2.0},
        {"model": "mlp_sweep", "depth": 5, "width": 64, "batch": 1024, "dtype": "float32", "wall_ratio": 2.5,
         "flop_ratio": 2.5}]
    prov = {"device": "NVIDIA H200", "torch": "2.11", "date": "2026-11-26", "command": "scripts/gpu/costs.py"}
    path = tmp_path / "costs.json"
    path.write_text(json.dumps({"provenance": prov, "rows": file_rows}))
    res = gpu_rows(path)
    metrics, tables = [], []
    assert _gpu_rows(res, metrics, tables) == file_rows  # the report's data keeps the file's rows
    assert tables[0]["title"] == "CUDA rows (NVIDIA H200, torch 2.11, 2026-11-26, `scripts/gpu/costs.py`)"
    assert [(m["kind"], m["value"]) for m in metrics] == [("bench_ratio", r["wall_ratio"]) for r in file_rows]
    validate_metrics(metrics, "costs")  # unique keys: one per model, depth, width and dtype
    # without the file: no rows, no table
    absent = gpu_rows(tmp_path / "absent.json")
    assert absent["rows"] == [] and _gpu_rows(absent, [], tables) == [] and len(tables) == 1


@pytest.mark.slow
def test_section_quick_runs():
    from nsverify.report import RunContext
    from nsverify.sections.costs import costs_section

    out = costs_section(RunContext(quick=True, section="costs"))
    keys = [m["key"] for m in out["data"]["metrics"]]
    assert len(keys) == len(set(keys))
    assert {c["source"]["where"] for c in out["claims"]} >= {"Table 2.1", "Theorem 6"}
    assert {c["id"] for c in out["claims"]} >= {"costs/table2.1-omega", "costs/theorem6"}
    json.dumps(out)
