"""Tests of the convergence harness: metrics, f* from cvxpy, runs, bad input."""
from __future__ import annotations

import math

import pytest
import torch

from nsverify.claims.stats import mean_ci
from nsverify.devices import torch_threads
from nsverify.errors import NsverifyError
from nsverify.papers.innaprop import compare, make_problem, run_one, steps_to_match, steps_to_target


@pytest.fixture(autouse=True)
def _one_thread():
    with torch_threads(1):
        yield


def test_metrics_on_known_sequences():
    vals = [5.0, 3.0, 1.0, 0.5, 0.2]
    assert steps_to_target(vals, 1.0) == 2
    assert steps_to_target(vals, 0.1) is None
    assert steps_to_target(vals, 0.5, steps=[0, 10, 20, 30, 40]) == 30
    b = [5.0, 4.0, 3.0, 2.0, 1.0]  # B's best (1.0) at step 4; A reaches it at step 2 -> 2x faster
    assert steps_to_match(vals, b) == (2, 2.0)
    assert steps_to_match(b, vals) == (None, None)
    s = mean_ci([1.0, 2.0, 3.0])
    assert s["mean"] == 2.0 and s["spread"] == 2.0
    assert abs(s["hi"] - 2.0 - 4.302652729911275 / math.sqrt(3)) < 1e-9
    assert mean_ci([1.0, float("nan")])["n_failed"] == 1


@pytest.mark.parametrize("name", ["lasso", "hinge_svm", "lad", "max_affine"])
def test_fstar_is_a_lower_bound_along_runs(name):
    p = make_problem(name, 0)
    r = run_one(p, "AdamW", 150, record_every=5)
    assert min(r["gap"]) > -1e-6  # cvxpy's f* is (up to solver tolerance) below every iterate
    assert r["gap"][-1] < r["gap"][0]


def test_compare_summary_and_seeds():
    out = compare("hinge_svm", ["AdamW", "INNAprop(1,1)"], seeds=(0, 1), steps=60,
                  record_every=10, target=0.05)
    s = out["summary"]["INNAprop(1,1)"]
    assert s["final"]["n"] == 2 and s["final"]["lo"] <= s["final"]["mean"] <= s["final"]["hi"]
    runs = out["runs"]["INNAprop(1,1)"]
    assert [r["seed"] for r in runs] == [0, 1] and all(r["steps"] == [0, 10, 20, 30, 40, 50, 60] for r in runs)
    assert s["final"]["mean"] == pytest.approx(sum(r["gap"][-1] for r in runs) / 2, rel=1e-12)
    assert s["final"]["spread"] == pytest.approx(abs(runs[0]["gap"][-1] - runs[1]["gap"][-1]), rel=1e-12)
    assert "speedup_vs_baseline" in s and "speedup_vs_baseline" not in out["summary"]["AdamW"]


def test_float32_and_bfloat16_runs():
    p = make_problem("lad", 1)
    ref = run_one(p, "INNAprop(0.1,0.9)", 30, dtype="float64")
    for dt, rel in (("float32", 1e-5), ("bfloat16", 1e-2)):
        r = run_one(p, "INNAprop(0.1,0.9)", 30, dtype=dt)
        assert math.isfinite(r["final"]) and r["final"] < r["values"][0]  # it made progress
        # the same iteration in lower precision stays close to the float64 run (objective in float64)
        assert r["final"] == pytest.approx(ref["final"], rel=rel) and r["final"] != ref["final"]


def test_bad_input():
    with pytest.raises(NsverifyError, match="unknown convergence problem"):
        make_problem("rosenbrock", 0)
    p = make_problem("lad", 0)
    with pytest.raises(NsverifyError, match="unknown optimizer"):
        run_one(p, "Lion", 10)
    with pytest.raises(NsverifyError, match="steps"):
        run_one(p, "SGD", 0)
    with pytest.raises(NsverifyError):
        run_one(p, "SGD", 5, dtype=torch.int32)
