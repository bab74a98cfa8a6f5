"""report.json is validated; corrupted, foreign or future reports are rejected with a clear message."""
import json
import pickle

import pytest

from nsverify.cli import main
from nsverify.errors import ReportFormatError
from nsverify.report import section
from nsverify.report.nightly import run_nightly, write_report
from nsverify.report.schema import load_report, validate_metrics
from tests import report_fakes
from tests.report_fakes import metric
from tests.test_report_compare import run_report

fake_sections, fake_machine = report_fakes.fake_sections, report_fakes.fake_machine  # fixtures


def test_valid_report_roundtrip(tmp_path):
    run = write_report(tmp_path, run_report([metric("a", "convention", 0.0)]))
    assert load_report(run)["sections"]["s"]["data"]["metrics"][0]["key"] == "a"
    assert load_report(tmp_path)["created"]  # a reports root resolves through latest


@pytest.mark.parametrize("content,match", [
    (b"{\"schema\": \"nsverify.report/1\", \"sect", "corrupted report .invalid JSON"),
    (b"\xff\xfe\x00garbage", "corrupted report .not UTF-8"),
    (pickle.dumps({"schema": "nsverify.report/1"}), "corrupted report"),
    (b"[1, 2, 3]", "not an nsverify report"),
    (b"{\"name\": \"package.json\", \"version\": \"1.0\"}", "not an nsverify report .no \"schema\""),
    (b"{\"schema\": \"asv.results/2\"}", "foreign document"),
    (b"{\"schema\": \"nsverify.report/2\"}", "nsverify.report/2.* is not the one this nsverify reads"),
    (b"{\"schema\": \"nsverify.report/1\", \"created\": \"x\", \"machine\": {}, \"sections\": {}, "
     b"\"regressions\": []}", "machine.machine_id"),
    (b"{\"schema\": \"nsverify.report/1\", \"created\": \"x\", \"machine\": {\"machine_id\": \"m\"}, "
     b"\"sections\": [], \"regressions\": []}", "sections: missing or not a dict"),
])
def test_bad_report_files_rejected(tmp_path, content, match):
    path = tmp_path / "report.json"
    path.write_bytes(content)
    with pytest.raises(ReportFormatError, match=match):
        load_report(path)


def test_missing_report_dir_is_clear(tmp_path):
    with pytest.raises(ReportFormatError, match="holds no report.json"):
        load_report(tmp_path)
    with pytest.raises(ReportFormatError, match="cannot read report"):
        load_report(tmp_path / "nope.json")


def test_bench_ratio_samples_are_optional():
    validate_metrics([metric("a", "bench_ratio", 1.2), metric("b", "bench_ratio", 1.2, samples=[1.2, 1.3, 1.25])])


@pytest.mark.parametrize("metrics,match", [
    ({"key": "a"}, "must be a list"),
    ([metric("a", "convention", 0), metric("a", "verdict", "x")], "duplicate metric key"),
    ([metric("a", "bogus", 0)], "'kind' is 'bogus'"),
    ([{"key": "a", "kind": "info"}], "'value' is missing"),
    ([metric("", "info", 0)], "non-empty string"),
    ([metric("a", "counterexample", -1)], "integer >= 0"),
    ([metric("a", "counterexample", 1.5)], "integer >= 0"),
    ([metric("a", "share", 0.5)], "confidence interval"),
    ([metric("a", "share", 0.5, lo=0.6, hi=0.7)], "lo <= value <= hi"),
    ([metric("a", "share", 1.5, lo=0.6, hi=1.7)], "lo <= value <= hi <= 1"),
    ([metric("a", "convergence", 0.5)], "spread"),
    ([metric("a", "convergence", 0.5, spread=-1)], "spread"),
    ([metric("a", "bench_ratio", 0.0)], "bench_ratio must be a finite number > 0"),
    ([metric("a", "bench_ratio", float("inf"))], "bench_ratio"),
    ([metric("a", "bench_ratio", 1.0, samples=[])], "non-empty list"),
    ([metric("a", "bench_ratio", 1.0, samples=[1.0, float("nan")])], "finite numbers > 0"),
    ([metric("a", "bench_ratio", 1.0, samples=[1.0, -2.0])], "finite numbers > 0"),
    ([metric("a", "bench_ratio", 1.0, samples="1.0")], "non-empty list"),
    ([metric("a", "share", 0.5, lo=0.4, hi=0.6, samples=[0.5])], "bench_ratio metrics only"),
])
def test_bad_metrics_rejected(metrics, match):
    with pytest.raises(ReportFormatError, match=match):
        validate_metrics(metrics)


def test_section_with_bad_metrics_is_recorded_failed(tmp_path, fake_sections, fake_machine):
    @section("bad", "Bad metrics")
    def bad(ctx):
        return {"data": {"metrics": [metric("a", "share", 0.5)]}}

    rep = load_report(run_nightly(tmp_path, quick=True))
    assert rep["sections"]["bad"]["status"] == "failed"
    assert "confidence interval" in rep["sections"]["bad"]["traceback"]


def test_cli_rejects_corrupted_inputs(tmp_path, capsys, fake_sections, fake_machine):
    calls = []

    @section("s", "S")
    def s(ctx):
        calls.append(1)
        return {}

    bad = tmp_path / "bad" / "report.json"
    bad.parent.mkdir()
    bad.write_text("{not json")
    good = write_report(tmp_path / "runs", run_report([]))
    assert main(["compare", str(good), str(bad)]) == 2
    assert "corrupted report" in capsys.readouterr().err
    # a bad --baseline fails before any section runs
    assert main(["nightly", "--out", str(tmp_path / "out"), "--baseline", str(bad)]) == 2
    assert "corrupted report" in capsys.readouterr().err and calls == []


def test_history_skips_corrupted_run(tmp_path, fake_sections, fake_machine, capsys):
    @section("s", "S")
    def s(ctx):
        return {"data": {"metrics": [metric("m", "convention", 1)]}}

    first = run_nightly(tmp_path, quick=True)
    (first / "report.json").write_text(json.dumps({"schema": "something-else"}))
    second = load_report(run_nightly(tmp_path, quick=True))
    assert "skipping stored run" in capsys.readouterr().err
    assert second["comparison"]["baseline"] is None and second["regressions"] == []


def test_report_content_is_escaped_never_executed(tmp_path):
    """Text from report.json (e.g. a foreign or tampered report) is escaped in index.html; no script runs."""
    from nsverify.report.html import render_report

    rep = run_report([metric("<img src=x onerror=alert(1)>", "convention", "</td><script>alert(2)</script>")])
    rep["sections"]["s"]["summary"] = "<script>alert(3)</script>"
    rep["sections"]["s"]["tables"] = [{"title": "<b>t</b>", "columns": ["<i>c</i>"], "rows": [["<u>v</u>"]]}]
    page = render_report(rep)
    assert "<script" not in page and "<img src=x" not in page and "<b>t</b>" not in page
    assert "&lt;script&gt;alert(3)&lt;/script&gt;" in page


def test_claims_need_text_and_unique_ids(tmp_path):
    from nsverify.report.schema import validate_report

    def rep(claims):
        r = run_report([metric("a", "convention", 0.0)])
        r["sections"]["s"]["claims"] = claims
        return r

    validate_report(rep([{"id": "p/a", "claim": "x", "held": True}, {"claim": "y", "held": None}]))
    with pytest.raises(ReportFormatError, match=r"claims\[1\]\.id.*unique"):
        validate_report(rep([{"id": "p/a", "claim": "x", "held": True}, {"id": "p/a", "claim": "y", "held": True}]))
    with pytest.raises(ReportFormatError, match=r"claims\[0\].*claim record"):
        validate_report(rep(["not a claim"]))
