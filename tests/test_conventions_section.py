"""The conventions section's CUDA-equals-CPU claim (issue 38): the stored GPU run's CUDA rows are compared with
that run's own CPU rows (same torch release, same machine), never with this run's CPU rows of another release."""
from __future__ import annotations

import json

from nsverify.conventions import matrix as cv
from nsverify.sections import conventions as sec


def _row(op, device, rule, mode="eager"):
    return {"op": op, "case": "x=0", "dtype": "float32", "device": device, "mode": mode, "derivative": [0.0],
            "rule": rule, "in_clarke": "yes", "expected": "left", "as_expected": True}


def test_cuda_rows_are_compared_with_the_stored_runs_own_cpu_rows(tmp_path, monkeypatch):
    stored = {"torch": "2.11.0+cu130", "meta": {"device_name": "GPU"},
              "results": [_row("relu", "cuda", "left"), _row("relu", "cpu", "left"),
                          _row("sort", "cuda", "other"), _row("sort", "cpu", "first"),
                          _row("relu", "cuda", "left", mode="compile")]}  # no CPU compile row: not matched
    p = tmp_path / "conventions.json"
    p.write_text(json.dumps(stored))
    monkeypatch.setattr(sec, "GPU_DATA", p)
    # this run's CPU rows (another release) say sort is "other" too: they must not be the comparison
    this_run = [cv.Result(**{k: v for k, v in _row("sort", "cpu", "other").items()}),
                cv.Result(**{k: v for k, v in _row("relu", "cpu", "left").items()})]
    part = sec._gpu_part(cv, this_run)
    c = part["claim"]
    assert c["held"] is False and "1 of 2 GPU evaluations differ" in c["measured"]
    assert "the stored run's own CPU rows" in part["table"]["title"]
    # without CPU rows in the stored run, this run's CPU rows are the comparison (and it says so)
    stored["results"] = [r for r in stored["results"] if r["device"] == "cuda"]
    p.write_text(json.dumps(stored))
    part = sec._gpu_part(cv, this_run)
    assert part["claim"]["held"] is True and "this run's CPU rows" in part["table"]["title"]
