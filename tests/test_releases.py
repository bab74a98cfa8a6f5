"""Conventions across torch releases: release selection, the resumable sweep, bisection to the first release of a
change, baselines (default, file, errors), the change texts, reproduction scripts and the report section.

The sweep is driven with a fake ``measure`` (synthetic runs whose cells change at known releases), so every
expectation is set by the test, not read from the implementation; the reproduction scripts are executed with the
installed torch and compared with the matrix's own evaluation."""
import ast
import json
import subprocess
import sys
from dataclasses import asdict, replace

import pytest
import torch

from nsverify import conventions as cv
from nsverify.cli import main
from nsverify.conventions import baselines, releases
from nsverify.conventions.baselines import BaselineError, Change, Run
from nsverify.conventions.envs import Installer, ReleaseEnvError
from nsverify.conventions.releases import ReleaseSpecError, Sweep, select_releases

AVAILABLE = ["2.3.1", "2.4.0", "2.4.1", "2.5.0", "2.5.1", "2.6.0", "2.7.0", "2.7.1", "2.8.0", "2.9.0", "2.9.1",
             "2.10.0", "2.11.0", "2.12.0", "2.12.1", "2.13.0", "2.14.0", "2.14.1", "2.15.0"]


# ----------------------------------------------------------------------------------------------------------
# which releases
# ----------------------------------------------------------------------------------------------------------
def test_select_releases_lists_minors_ranges_and_last_patch():
    assert select_releases("2.4.1,2.9.1,2.13.0,2.14.1", AVAILABLE) == ["2.4.1", "2.9.1", "2.13.0", "2.14.1"]
    assert select_releases("2.9", AVAILABLE) == ["2.9.0", "2.9.1"]
    assert select_releases("2.12..2.14", AVAILABLE) == ["2.12.0", "2.12.1", "2.13.0", "2.14.0", "2.14.1"]
    assert select_releases("2.4..2.14", AVAILABLE, last_patch=True) == [
        "2.4.1", "2.5.1", "2.6.0", "2.7.1", "2.8.0", "2.9.1", "2.10.0", "2.11.0", "2.12.1", "2.13.0", "2.14.1"]
    assert select_releases("2.4.1..2.5.0, 2.14.1", AVAILABLE) == ["2.4.1", "2.5.0", "2.14.1"]  # 2.10 > 2.9


@pytest.mark.parametrize("spec,msg", [("", "no releases"), ("2.x", "not a release"), ("2.20", "matches no release"),
                                      ("2.14..2.4", "is empty"), ("2", "not a release")])
def test_select_releases_rejects_bad_specs(spec, msg):
    with pytest.raises(ReleaseSpecError, match=msg):
        select_releases(spec, AVAILABLE)


# ----------------------------------------------------------------------------------------------------------
# a sweep over synthetic releases
# ----------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def base_results():
    return cv.run_matrix(["relu", "clamp"], ["float32"], ["cpu"], ["eager"])


def _synthetic(release: str, base_results, change_at: str = "2.14.0", flaky: set = frozenset()):
    """A conventions run of ``release``: clamp's derivative at x=0 is 1 before ``change_at`` and 0 from it on."""
    if release in flaky:
        raise ReleaseEnvError(f"installing torch {release} failed: no wheel")
    rs = []
    for r in base_results:
        if (r.op, r.case) == ("clamp", "x=0"):
            new = baselines.release_key(release) >= baselines.release_key(change_at)
            r = replace(r, derivative=[0.0 if new else 1.0], rule="left" if new else "right")
        rs.append(r)
    return cv.to_json(rs, {"provenance": {"date": "2026-01-01T00:00:00Z", "device_names": ["cpu"]}}) | {
        "torch": f"{release}+cpu"}


def test_sweep_is_resumable_records_failures_and_bisects_to_the_first_release(tmp_path, base_results):
    calls = []

    def measure(rel):
        calls.append(rel)
        return _synthetic(rel, base_results, flaky={"2.12.1"})

    lines = []
    sweep = Sweep(tmp_path, measure=measure, progress=lines.append)
    sample = select_releases("2.4..2.14", AVAILABLE, last_patch=True)
    sweep.sweep(sample)
    assert calls == sample and "2.12.1" not in sweep.measured()
    assert "could not be measured" in " ".join(lines) and "no wheel" in sweep.failures()["2.12.1"]["reason"]
    sweep.sweep(sample)  # resumable: measured releases are skipped, the failed one is tried again
    assert calls == sample + ["2.12.1"]
    sweep.bisect(select_releases("2.4..2.14", AVAILABLE))
    # the only change lies between 2.13.0 and 2.14.1: bisection measures 2.14.0 and nothing else
    assert calls[len(sample) + 1:] == ["2.14.0"]
    rows = sweep.timeline(AVAILABLE)
    changed = [(r["release"], len(r["changes"])) for r in rows if r["changes"]]
    assert changed == [("2.14.0", 1)]
    (ch,) = releases.all_changes(rows)
    assert ch.exact and ch.prev == "2.13.0" and ch.since == "2.14.0"
    assert ch.text() == "clamp, x=0: 1 -> 0 since 2.14.0 (rule right -> left; Clarke yes -> yes)"
    table = releases.format_timeline(rows, sweep.failures())
    assert "| 2.14.0 | 1 | clamp, x=0: 1 -> 0 since 2.14.0" in table and "| 2.12.1 | not measured |" in table


def test_a_change_next_to_an_unmeasurable_release_is_reported_as_a_range(tmp_path, base_results):
    sweep = Sweep(tmp_path, measure=lambda rel: _synthetic(rel, base_results, "2.9.0", flaky={"2.9.0"}))
    sweep.sweep(["2.8.0", "2.9.1"])
    sweep.bisect(AVAILABLE)
    (ch,) = releases.all_changes(sweep.timeline(AVAILABLE))
    assert not ch.exact and "between 2.8.0 and 2.9.1" in ch.text()


def test_a_run_of_another_torch_than_asked_is_a_failure(tmp_path, base_results):
    sweep = Sweep(tmp_path, measure=lambda rel: _synthetic("2.5.0", base_results))
    assert not sweep.measure("2.6.0")
    assert "imported torch 2.5.0+cpu, not 2.6.0" in sweep.failures()["2.6.0"]["reason"]


def test_publish_writes_the_runs_and_an_index(tmp_path, base_results):
    sweep = Sweep(tmp_path / "out", measure=lambda rel: _synthetic(rel, base_results, flaky={"2.5.0"}))
    sweep.sweep(["2.4.1", "2.5.0", "2.5.1"])
    files = sweep.publish(tmp_path / "data", ["2.4.1", "2.5.0", "2.5.1"], "nsverify releases 2.4..2.5")
    assert sorted(p.name for p in files) == ["2.4.1.json", "2.5.1.json", "index.json"]
    index = json.loads((tmp_path / "data" / "index.json").read_text())
    assert index["failed"] == {"2.5.0": "installing torch 2.5.0 failed: no wheel"}
    assert Sweep(tmp_path / "data").failures()["2.5.0"]["reason"].endswith("no wheel")
    assert Run.load(tmp_path / "data" / "2.4.1.json").release == "2.4.1"


# ----------------------------------------------------------------------------------------------------------
# baselines
# ----------------------------------------------------------------------------------------------------------
def _data_dir(tmp_path, base_results, rels=("2.12.1", "2.13.0", "2.14.0", "2.14.1")):
    d = tmp_path / "data"
    d.mkdir()
    for rel in rels:
        data = _synthetic(rel, base_results)
        data["meta"]["release"] = rel
        releases.write_run(d / f"{rel}.json", data)
    return d


def test_default_baseline_is_the_nearest_recorded_release_at_or_below(tmp_path, base_results):
    d = _data_dir(tmp_path, base_results)
    assert baselines.recorded_releases(d) == ["2.12.1", "2.13.0", "2.14.0", "2.14.1"]
    assert baselines.default_baseline("2.13.0", d) == "2.13.0"
    assert baselines.default_baseline("2.13.5", d) == "2.13.0"
    assert baselines.default_baseline("2.15.0", d) == "2.14.1"
    assert baselines.default_baseline("2.3.0", d) is None
    assert baselines.resolve_baseline("auto", "2.14.1", d).release == "2.14.1"
    assert baselines.resolve_baseline("none", "2.14.1", d) is None
    with pytest.raises(BaselineError, match="no conventions recorded for torch 2.11.0; recorded releases: 2.12.1"):
        baselines.resolve_baseline("2.11.0", "2.14.1", d)
    with pytest.raises(BaselineError, match="neither a recorded release"):
        baselines.resolve_baseline("latest", "2.14.1", d)


def test_a_change_names_its_first_recorded_release_and_both_clarke_statuses(tmp_path, base_results):
    d = _data_dir(tmp_path, base_results)
    now = Run.from_json(_synthetic("2.14.1", base_results)).results.values()
    chs, missing = baselines.compare_with_baseline(list(now), baselines.load_recorded("2.12.1", d), "2.14.1", d)
    assert missing == [] and [c.text() for c in chs] == [
        "clamp, x=0: 1 -> 0 since 2.14.0 (rule right -> left; Clarke yes -> yes)"]
    same, _ = baselines.compare_with_baseline(list(now), baselines.load_recorded("2.14.1", d), "2.14.1", d)
    assert same == []
    # a build that differs from its own recorded release: the change is new in the installed release
    odd = [replace(r, derivative=[0.5]) if (r.op, r.case) == ("relu", "x=0") else r for r in now]
    (ch,), _ = baselines.compare_with_baseline(odd, baselines.load_recorded("2.14.1", d), "2.14.1", d)
    assert ch.text().startswith("relu, x=0: 0 -> 0.5 since 2.14.1")


def test_unreadable_baselines_are_clear_errors(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(BaselineError, match="cannot read the conventions file"):
        Run.load(bad)
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"schema": "something/1", "results": []}))
    with pytest.raises(BaselineError, match="is not a conventions JSON file"):
        Run.load(other)


def test_cli_baseline_from_a_file_shows_the_differing_cells(tmp_path, capsys):
    res = cv.run_matrix(["relu", "clamp"], ["float32"], ["cpu"], ["eager"])
    data = cv.to_json(res)
    for r in data["results"]:
        if (r["op"], r["case"]) == ("clamp", "x=1"):
            r["derivative"], r["rule"] = [0.0], "right"  # a baseline whose clamp differs at the upper bound
    path = tmp_path / "base.json"
    path.write_text(json.dumps(data))
    assert main(["conventions", "--ops", "relu,clamp", "--dtype", "float32", "--modes", "eager",
                 "--baseline", str(path)]) == 0
    out = capsys.readouterr().out
    assert "Differences from the baseline torch" in out and ": 1 cells" in out
    assert f"clamp, x=1: 0 -> 1 since {baselines.installed_release()} (rule right -> left; Clarke yes -> yes)" in out


@pytest.mark.parametrize("argv,msg", [
    (["conventions", "--baseline", "1.0.0"], "no conventions recorded for torch 1.0.0"),
    (["conventions", "--baseline", "/nonexistent/base.json"], "cannot read the conventions file"),
    (["conventions", "--ops", ""], "--ops: no registry ops given"),
    (["conventions", "--compile-dtype", "float32", "--dtype", "float64"], "--compile-dtype"),
    (["releases", "2.4..2.14", "--modes", "eager,sideways"], "--modes"),
    (["releases", "2.4..2.14", "--timeout", "nan"], "--timeout"),
    (["releases", "2.4..2.14", "--compile-dtype", "int8"], "not a floating dtype"),
])
def test_cli_bad_input_is_one_line_before_any_work(argv, msg, capsys, monkeypatch, tmp_path):
    monkeypatch.setattr(releases, "available_releases", lambda: pytest.fail("validation must come first"))
    monkeypatch.setattr(cv, "run_matrix", lambda *a, **k: pytest.fail("validation must come first"))
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert msg in err and len(err.splitlines()) == 1 and "Traceback" not in err


def test_releases_cli_out_must_be_a_directory(tmp_path, capsys):
    f = tmp_path / "file"
    f.write_text("")
    assert main(["releases", "2.4", "--out", str(f)]) == 2
    assert "is a file" in capsys.readouterr().err


def test_installer_passes_the_pins_and_local_indexes(tmp_path, monkeypatch):
    from nsverify.conventions import envs

    cmds = []
    monkeypatch.setattr(envs, "run_logged", lambda cmd, log, **kw: cmds.append(cmd))
    inst = Installer("uv", "/bin/uv", None, sys.executable, ["--find-links", "/opt/wheels"])
    inst.create(tmp_path / "env", "2.9.1", None)
    assert cmds[0][:2] == ["/bin/uv", "venv"]
    install = cmds[1]
    assert install[:3] == ["/bin/uv", "pip", "install"] and "torch==2.9.1" in install
    assert "--find-links" in install and any(a.startswith("mpmath==") for a in install)
    assert any(a.startswith("setuptools") for a in install)  # inductor imports it up to torch 2.6
    with pytest.raises(ReleaseEnvError, match="unknown installer"):
        Installer.detect("conda")


# ----------------------------------------------------------------------------------------------------------
# reproduction scripts: torch only, and they print what the matrix measured
# ----------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("op,label,mode", [("clamp", "x=0", "eager"), ("amax", "3 ties", "func"),
                                           ("clamp_tensor", "min == max > x", "jvp"),
                                           ("max_pool2d", "k=3 s=2 p=1", "eager"),
                                           ("maximum", "x == y", "eager")])
def test_reproduction_script_prints_the_matrix_derivative(op, label, mode):
    case = next(c for c in cv.build_cases([op]) if c.label == label)
    r = cv.evaluate_case(case, torch.float32, "cpu", mode)
    text = releases.change_script(Change((op, label, "float32", "cpu", mode), r, r, "2.13.0", "2.14.0"))
    assert "nsverify" not in text.split("\nimport torch", 1)[1]  # standalone: torch only
    out = subprocess.run([sys.executable, "-c", text], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-800:]
    got = ast.literal_eval(out.stdout.strip().split("derivative:")[-1].strip())
    assert got == r.derivative, (text, out.stdout)


def test_every_registry_case_has_a_script():
    for c in cv.build_cases():
        r = cv.Result(c.op, c.label, "float32", "cpu", "eager", [0.0], "left", "yes", "left", True)
        text = releases.change_script(Change((c.op, c.label, "float32", "cpu", "eager"), r, r, "2.13.0", "2.14.0"))
        compile(text, f"{c.op}-{c.label}", "exec")


# ----------------------------------------------------------------------------------------------------------
# the report section reads the shipped data
# ----------------------------------------------------------------------------------------------------------
def test_report_section_from_data(tmp_path, base_results, monkeypatch):
    from nsverify.report import RunContext
    from nsverify.report.schema import validate_metrics
    from nsverify.sections import releases as sec

    d = _data_dir(tmp_path, base_results, ("2.12.1", "2.13.0", "2.14.1"))
    (d / "index.json").write_text(json.dumps({"available": ["2.12.1", "2.13.0", "2.14.0", "2.14.1"],
                                              "failed": {"2.14.0": "no wheel for this Python"}}))
    monkeypatch.setattr(baselines, "DATA_DIR", d)
    out = sec.releases_section(RunContext(quick=True, section="releases"))
    json.dumps(out)
    validate_metrics(out["data"]["metrics"], "releases")
    rows = {r[0]: r for r in out["tables"][0]["rows"]}
    # 2.14.0 could not be measured: the change is placed between the releases around it, not at 2.14.1
    assert rows["2.14.1"][3] == 1 and "clamp, x=0: 1 -> 0 between 2.13.0 and 2.14.1" in rows["2.14.1"][4]
    assert rows["2.14.0"][3] == "not measured" and rows["2.13.0"][3] == 0
    assert out["claims"][0]["held"] and out["claims"][1]["held"]
    assert "not measured: 2.14.0" in out["summary"]
    assert any("torch.clamp" in s for s in out["data"]["repro"].values())
    monkeypatch.setattr(baselines, "DATA_DIR", tmp_path / "empty")
    assert "No per-release conventions data" in sec.releases_section(RunContext(quick=True))["summary"]


def test_written_runs_round_trip(tmp_path, base_results):
    data = _synthetic("2.13.0", base_results)
    releases.write_run(tmp_path / "2.13.0.json", data)
    back = json.loads((tmp_path / "2.13.0.json").read_text())
    assert back["results"] == [asdict(cv.result_from_json(x)) for x in data["results"]]
    assert "differences" not in back and back["schema"] == cv.SCHEMA


def test_release_claims_on_both_sides():
    """The releases section's claims come from release_claims: held True, False and None each reachable."""
    from types import SimpleNamespace as NS

    from nsverify.conventions.claims import release_claims

    def ch(op, since, before="yes", after="yes"):
        return NS(op=op, since=since, prev="2.13.0", exact=True, before=NS(in_clarke=before),
                  after=NS(in_clarke=after))

    span = ["2.13.0", "2.14.0"]
    ok = release_claims(span, [ch("clamp", "2.14.0")])
    assert [c["held"] for c in ok] == [True, True]
    missed = release_claims(span, [ch("clamp", "2.13.0", after="no")])
    assert [c["held"] for c in missed] == [False, False]
    none = release_claims(["2.13.0"], [])
    assert [c["held"] for c in none] == [None, None] and all(c["reason"] for c in none)


def test_python_m_conventions_bad_input_is_one_line(capsys):
    """``python -m nsverify.conventions`` answers bad input like the nsverify command: one line, exit 2."""
    from nsverify.conventions.cli import main_conventions

    assert main_conventions(["--ops", "nope"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "unknown op 'nope'" in err
