"""The zones report section and the GPU script (smoke).  Both are long: marked slow."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_section_quick_mode(tmp_path, monkeypatch):
    from nsverify.report import RunContext
    from nsverify.sections import zones as sec

    tiny = dict(sec.QUICK, fig33=(2, 1), table=dict(width=0.0625, draws=2, batches=1, batch_size=8),
                trend_batches=(4, 8), trend=dict(width=0.0625, draws=1, batches=1),
                dich=dict(draws=1, batches=1, batch_size=32), sgd_steps=5,
                sweep=dict(seeds=(0,), steps=3, betas=(0.0, 1e4)))
    monkeypatch.setattr(sec, "QUICK", tiny)
    out = sec.zones_section(RunContext(quick=True, scratch=tmp_path, section="zones"))
    json.dumps(out)
    assert {"summary", "tables", "figures", "claims", "data"} <= set(out)
    assert len(out["figures"]) == 3 and all(f["png"] for f in out["figures"])
    assert out["claims"][0]["held"] and out["claims"][1]["held"] and out["claims"][2]["held"]  # 3.1, 3.3, 3.5.3
    claims = {c["claim"]: c["held"] for c in out["claims"]}
    # 64-bit claims hold at any size: no pair above Table 3.4's fp64 tau, bitwise-equal fp64 trajectories
    assert claims["Table 3.2: 64 bits -> 0% of minibatches impacted"] is True
    assert claims["Bertoin: ReLU'(0)=0 vs 1 SGD trajectories are bitwise identical in fp64"] is True
    held = sum(c["held"] is True for c in out["claims"])
    assert out["summary"].startswith(f"{held}/{len(out['claims'])} paper claims held")
    metrics = out["data"]["metrics"]
    keys = [m["key"] for m in metrics]
    assert len(keys) == len(set(keys))
    for m in metrics:
        if m["kind"] == "share":
            assert m["lo"] <= m["value"] <= m["hi"]
    # the second run resumes from the checkpoints (same numbers)
    again = sec.zones_section(RunContext(quick=True, scratch=tmp_path, section="zones"))
    assert again["data"]["fig33"] == out["data"]["fig33"]


@pytest.mark.slow
def test_gpu_script_smoke(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "scripts/gpu/zones.py", "--out", str(tmp_path), "--smoke"], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads((tmp_path / "zones.json").read_text())
    assert res["smoke"] and set(res["volumes"]) == {"noBN", "BN"}
    assert "float16" not in res["volumes"]["noBN"]["dtypes"]  # not on CPU
    assert all(t["tau1"] == 0.0 for t in res["taus"].values())  # deterministic CPU kernels
