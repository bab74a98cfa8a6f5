"""Regression rules of `nsverify compare`, one test per metric kind (docs/report.md)."""
import json
import math

import pytest

from nsverify.cli import main
from nsverify.report.compare import compare_reports, judge
from nsverify.report.nightly import write_report
from tests.report_fakes import FAKE_MACHINE, metric, standard_metrics


def run_report(metrics, machine=None, status="ok", created="2026-01-01T00:00:00+00:00"):
    sec = {"title": "S", "status": status, "data": {"metrics": metrics}}
    if status == "failed":
        sec["traceback"] = "Traceback: boom"
    return {"schema": "nsverify.report/1", "kind": "run", "created": created, "quick": True,
            "machine": dict(machine or FAKE_MACHINE), "sections": {"s": sec}, "regressions": []}


def regs(old, new, **kw):
    return compare_reports(run_report(old), run_report(new), **kw)["regressions"]


@pytest.mark.parametrize("kind,a,b", [("convention", 0.0, 1.0), ("convention", "zero", "one"),
                                      ("verdict", "valid", "invalid"), ("verdict", "valid", "unknown")])
def test_convention_and_verdict_changes_are_regressions(kind, a, b):
    assert judge(metric("k", kind, a), metric("k", kind, a))[0] == "same"
    verdict, rule = judge(metric("k", kind, a), metric("k", kind, b))
    assert verdict == "regression" and kind in rule


def test_nan_convention_equal_to_itself():
    assert judge(metric("k", "convention", math.nan), metric("k", "convention", math.nan))[0] == "same"


def test_counterexample_appearing_is_a_regression():
    assert judge(metric("k", "counterexample", 0), metric("k", "counterexample", 1))[0] == "regression"
    assert judge(metric("k", "counterexample", 2), metric("k", "counterexample", 1))[0] == "improvement"
    assert judge(metric("k", "counterexample", 0), metric("k", "counterexample", 0))[0] == "same"
    assert judge(None, metric("k", "counterexample", 3))[0] == "regression"
    assert judge(None, metric("k", "counterexample", 0))[0] == "changed"


def test_share_flagged_only_when_intervals_disjoint():
    old = metric("z", "share", 0.30, lo=0.25, hi=0.35)
    assert judge(old, metric("z", "share", 0.38, lo=0.34, hi=0.42))[0] == "same"  # overlap at 0.34..0.35
    assert judge(old, metric("z", "share", 0.40, lo=0.36, hi=0.44))[0] == "regression"
    assert judge(old, metric("z", "share", 0.20, lo=0.15, hi=0.24))[0] == "regression"
    assert judge(old, metric("z", "share", 0.20, lo=0.15, hi=0.25))[0] == "same"  # touching intervals


def test_convergence_flagged_beyond_seed_spread():
    old = metric("c", "convergence", 0.50, spread=0.02)
    assert judge(old, metric("c", "convergence", 0.515, spread=0.01))[0] == "same"
    assert judge(old, metric("c", "convergence", 0.53, spread=0.01))[0] == "regression"
    assert judge(old, metric("c", "convergence", 0.53, spread=0.05))[0] == "same"  # the larger spread counts
    assert judge(old, metric("c", "convergence", math.nan, spread=0.01))[0] == "regression"
    assert judge(old, metric("c", "convergence", math.inf, spread=0.01))[0] == "regression"


def test_bench_ratio_factor_configurable():
    old = metric("b", "bench_ratio", 1.0)
    assert judge(old, metric("b", "bench_ratio", 1.09))[0] == "same"
    assert judge(old, metric("b", "bench_ratio", 1.12))[0] == "regression"
    assert judge(old, metric("b", "bench_ratio", 1.12), bench_factor=1.2)[0] == "same"
    assert judge(old, metric("b", "bench_ratio", 0.8))[0] == "improvement"


def test_info_never_compared():
    assert judge(metric("i", "info", 1), metric("i", "info", 2))[0] == "same"


def test_all_kinds_stable_gives_no_regression():
    assert regs(standard_metrics(), standard_metrics(ratio=1.05, share=(0.31, 0.26, 0.36),
                                                     conv=(0.51, 0.02))) == []


def test_exactly_the_changed_metric_is_flagged():
    out = regs(standard_metrics(), standard_metrics(relu0=1.0))
    assert [r["key"] for r in out] == ["relu|0|float32|cpu|eager"]
    assert out[0]["old"] == "0.0" and out[0]["new"] == "1.0" and out[0]["section"] == "s"


def test_removed_and_added_metrics_are_changes_not_regressions():
    cmp = compare_reports(run_report(standard_metrics()[:3]), run_report(standard_metrics()[1:4]))
    assert cmp["regressions"] == []
    rules = sorted(c["rule"] for c in cmp["changes"])
    assert rules == ["metric no longer reported", "new metric"]


def test_failed_section_is_a_regression():
    out = compare_reports(run_report(standard_metrics()), run_report([], status="failed"))["regressions"]
    assert [r["rule"] for r in out] == ["section failed"]


def test_cross_machine_comparison_is_labelled():
    gpu = dict(FAKE_MACHINE, gpu="NVIDIA H100", machine_id="gpubox|x|NVIDIA H100", torch="2.11.0")
    cmp = compare_reports(run_report(standard_metrics()), run_report(standard_metrics(relu0=1.0), gpu))
    assert not cmp["same_machine"] and "CROSS-MACHINE" in cmp["label"]
    assert cmp["regressions"]
    assert all(r.get("cross_machine") and r["message"].startswith("[cross-machine]")
               for r in cmp["regressions"])
    assert any(e.startswith("torch:") for e in cmp["environment_changes"])
    assert any(e.startswith("gpu:") for e in cmp["environment_changes"])


def test_compare_cli(tmp_path, capsys):
    a = write_report(tmp_path, run_report(standard_metrics()), stamp="a")
    b = write_report(tmp_path, run_report(standard_metrics(cex=2)), stamp="b")
    assert main(["compare", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "1 regression(s)" in out and "chain-rule-property: 0 -> 2 (counterexample appeared)" in out
    assert main(["compare", str(a), str(b), "--fail-on-regression"]) == 1
    capsys.readouterr()
    assert main(["compare", str(a / "report.json"), str(tmp_path), "--json"]) == 0  # root -> latest (= b)
    assert len(json.loads(capsys.readouterr().out)["regressions"]) == 1
    assert main(["compare", str(a), str(a), "--fail-on-regression"]) == 0


def test_compare_cli_bad_bench_factor(tmp_path, capsys):
    a = write_report(tmp_path, run_report(standard_metrics()), stamp="a")
    assert main(["compare", str(a), str(a), "--bench-factor", "0.5"]) == 2
    assert "--bench-factor" in capsys.readouterr().err
