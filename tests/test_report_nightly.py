"""The nightly job end to end: history, comparison, the summary on top, merge, interruption and resume."""
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nsverify.cli import main
from nsverify.report import RunContext, section
from nsverify.report.nightly import run_nightly
from nsverify.report.schema import load_report
from tests import report_fakes
from tests.report_fakes import register_conventions

fake_sections, fake_machine = report_fakes.fake_sections, report_fakes.fake_machine  # fixtures

ROOT = Path(__file__).resolve().parents[1]


def nightly(out, *extra):
    return main(["nightly", "--out", str(out), "--quick", *extra])


def latest(out):
    return load_report(out / "latest"), (out / "latest" / "index.html").read_text()


def test_done_when_one_change_is_flagged_on_top(tmp_path, fake_sections, fake_machine, capsys):
    """Run twice, swap ReLU'(0), run again: exactly that change is flagged on top, linked to its section."""
    state = {"relu0": 0.0, "ratio": 1.0}
    register_conventions(state)
    assert nightly(tmp_path, "--fail-on-regression") == 0
    first, html = latest(tmp_path)
    assert "First quick run on this machine" in first["comparison"]["label"]
    assert 'class="badge green" id="summary-status">no regressions' in html
    state["ratio"] = 1.04  # benchmark noise within the 1.10 factor
    assert nightly(tmp_path, "--fail-on-regression") == 0
    second, html = latest(tmp_path)
    assert second["regressions"] == [] and 'class="badge green"' in html
    state["relu0"] = 1.0  # the one change: ReLU'(0) swapped
    assert nightly(tmp_path, "--fail-on-regression") == 1
    third, html = latest(tmp_path)
    assert [(r["section"], r["key"], r["rule"]) for r in third["regressions"]] == [
        ("conv", "relu|0|float32|cpu|eager", "convention changed")]
    assert third["comparison"]["baseline"]["created"] == second["created"]
    summary = html[html.index('id="summary"'):html.index('id="machine"')]
    assert 'class="badge red" id="summary-status">1 regression' in summary
    assert summary.count('<li class="regression"') == 1
    assert ('<li class="regression" title="key in report.json: relu|0|float32|cpu|eager"><a href="#sec-conv">conv</a>:'
            ' relu \u00b7 0 \u00b7 float32 \u00b7 cpu \u00b7 eager: 0.0 -&gt; 1.0') in summary
    assert 'id="sec-conv"' in html and 'id="changes-conv"' in html
    err = capsys.readouterr().err
    assert "REGRESSION [conv] relu|0|float32|cpu|eager" in err
    assert "\n  run health: 1 regression\n" in err  # the run's health and the claims' state apart, in words
    # without --fail-on-regression the exit code stays 0 (the report is still red)
    assert nightly(tmp_path) == 0
    assert latest(tmp_path)[0]["regressions"] == []  # compared with the third run: nothing changed since


def test_torch_change_shows_environment_and_flags_only_changed_metric(tmp_path, fake_sections, fake_machine):
    state = {"relu0": 0.0}
    register_conventions(state)
    run_nightly(tmp_path, quick=True)
    fake_machine["torch"] = "2.14.0"
    state["acc"] = 0.5  # the new torch also moved a convergence metric far beyond its seed spread
    rep = load_report(run_nightly(tmp_path, quick=True))
    assert rep["comparison"]["environment_changes"] == ["torch: '2.13.0' -> '2.14.0'"]
    assert [r["key"] for r in rep["regressions"]] == ["acc"]
    assert "Environment changes since the baseline" in (tmp_path / "latest" / "index.html").read_text()


def test_explicit_baseline_and_cross_machine_label(tmp_path, fake_sections, fake_machine):
    state = {"relu0": 0.0}
    register_conventions(state)
    base = run_nightly(tmp_path / "cpu", quick=True)
    fake_machine.update(gpu="NVIDIA H200", machine_id="gpubox|cpu|NVIDIA H200", hostname="gpubox")
    state["relu0"] = 0.5
    rep = load_report(run_nightly(tmp_path / "gpu", quick=True))
    assert rep["comparison"]["baseline"] is None  # never silently compared with the other machine's runs
    rep = load_report(run_nightly(tmp_path / "gpu", quick=True, baseline=base))
    assert not rep["comparison"]["same_machine"] and "CROSS-MACHINE" in rep["comparison"]["label"]
    assert [r["key"] for r in rep["regressions"]] == ["relu|0|float32|cpu|eager"]
    assert rep["regressions"][0]["cross_machine"] is True
    assert 'class="cross"' in (tmp_path / "gpu" / "latest" / "index.html").read_text()


def test_trend_plots_over_history(tmp_path, fake_sections, fake_machine):
    state = {"relu0": 0.0}
    register_conventions(state)
    for acc in (0.90, 0.905, 0.91):
        state["acc"] = acc
        run_nightly(tmp_path, quick=True)
    rep, html = latest(tmp_path)
    acc = next(s for s in rep["trends"]["other"] if s["key"] == "acc")
    assert [p[1] for p in acc["points"]] == [0.90, 0.905, 0.91]
    assert [p[2] for p in acc["points"]] == pytest.approx([0.89, 0.895, 0.90])
    assert html.count("<svg") == len(rep["trends"]["conv"]) + len(rep["trends"]["other"])
    assert 'aria-label="trend of acc"' in html


def test_merge_cpu_and_gpu_runs(tmp_path, fake_sections, fake_machine, capsys):
    state = {"relu0": 0.0}
    register_conventions(state)
    cpu = run_nightly(tmp_path / "cpu", quick=True)
    fake_machine.update(gpu="NVIDIA H100 80GB HBM3", machine_id="gpubox|cpu|H100", hostname="gpubox")
    state["relu0"] = 1.0
    gpu_root = tmp_path / "gpu"
    run_nightly(gpu_root, quick=True)
    assert main(["nightly", "--out", str(tmp_path / "merged"), "--merge", str(cpu), str(gpu_root)]) == 0
    rep, html = latest(tmp_path / "merged")
    assert rep["kind"] == "merged" and rep["regressions"] == []
    labels = ["box (Fake CPU 9000)", "gpubox (NVIDIA H100 80GB HBM3)"]
    assert list(rep["sections"]["conv"]["machines"]) == labels
    assert "<th>box (Fake CPU 9000)</th><th>gpubox (NVIDIA H100 80GB HBM3)</th>" in html
    assert 'class="differs"' in html  # ReLU'(0) differs across machines: shown, not a regression
    assert 'class="badge green"' in html
    # merging one machine twice, or a merged report, is refused
    assert main(["nightly", "--out", str(tmp_path / "m2"), "--merge", str(cpu), str(cpu)]) == 2
    assert "same machine" in capsys.readouterr().err
    merged = str(tmp_path / "merged")
    assert main(["nightly", "--out", str(tmp_path / "m2"), "--merge", merged, str(cpu)]) == 2
    assert "itself a merged report" in capsys.readouterr().err
    assert main(["nightly", "--out", str(tmp_path / "cpu"), "--baseline", merged]) == 2
    assert "the --baseline report is a merged report" in capsys.readouterr().err
    assert main(["compare", merged, str(cpu)]) == 2


def test_interrupted_run_leaves_latest_valid(tmp_path, fake_sections, fake_machine):
    state = {"relu0": 0.0}
    register_conventions(state)
    first = run_nightly(tmp_path, quick=True)

    @section("zz", "Interrupted", order=99)
    def zz(ctx):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_nightly(tmp_path, quick=True)
    assert os.readlink(tmp_path / "latest") == first.name
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".")) == [first.name, "latest"]
    load_report(tmp_path / "latest")


def test_failure_while_writing_leaves_no_half_report(tmp_path, fake_sections, fake_machine, monkeypatch):
    register_conventions({"relu0": 0.0})
    first = run_nightly(tmp_path, quick=True)
    stale = tmp_path / ".tmp-999999999-x"  # left by a killed run (no such pid)
    stale.mkdir()

    def boom(report):
        raise OSError("disk full")

    monkeypatch.setattr("nsverify.report.nightly.render_report", boom)
    with pytest.raises(OSError, match="disk full"):
        run_nightly(tmp_path, quick=True)
    assert os.readlink(tmp_path / "latest") == first.name
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tmp")]  # own tmp and the stale one gone
    load_report(tmp_path / "latest")


def test_checkpoint_helpers(tmp_path):
    ctx = RunContext(scratch=tmp_path, section="sec", code_hash="abc")
    calls = []
    assert ctx.checkpoint("step 1/3", lambda: calls.append(1) or (1, 2.5, "x")) == [1, 2.5, "x"]
    assert ctx.checkpoint("step 1/3", lambda: calls.append(1) or "recomputed") == [1, 2.5, "x"]
    assert calls == [1]
    assert ctx.load_partial("other") is None and ctx.load_partial("other", 7) == 7
    files = list((tmp_path / "sec-abc").iterdir())
    assert len(files) == 1 and files[0].name.startswith("partial-step_1_3-")
    files[0].write_text("{corrupt")  # a corrupted partial result is recomputed, never trusted
    assert ctx.checkpoint("step 1/3", lambda: "again") == "again"
    with pytest.raises(TypeError, match="JSON-able"):
        ctx.save_partial("obj", object())
    with pytest.raises(ValueError, match="non-empty string"):
        ctx.save_partial("", 1)
    # an edited section (other code hash) does not reuse partial results
    assert RunContext(scratch=tmp_path, section="sec", code_hash="def").load_partial("step 1/3") is None


KILL_SCRIPT = '''
import os, sys, time
import nsverify.report as rep
import nsverify.report.nightly as nightly
from nsverify.report import SECTIONS, section
from tests.report_fakes import FAKE_MACHINE, metric

SECTIONS.clear()
nightly.machine_info = lambda: dict(FAKE_MACHINE)
log = open(sys.argv[2], "a", buffering=1)

def step(name):
    log.write(name + "\\n")
    return len(name)

@section("expensive", "Expensive")
def expensive(ctx):
    a = ctx.checkpoint("step-1", lambda: step("s1"))
    b = ctx.checkpoint("step-2", lambda: step("s2"))
    if os.environ.get("HANG"):
        log.write("hanging\\n")
        time.sleep(120)
    c = ctx.checkpoint("step-3", lambda: step("s3"))
    return {"data": {"metrics": [metric("sum", "convention", a + b + c)]}}

nightly.run_nightly(sys.argv[1], quick=True)
'''


def test_killed_run_keeps_latest_and_rerun_resumes(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(KILL_SCRIPT)
    out, log = tmp_path / "reports", tmp_path / "log.txt"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    cmd = [sys.executable, str(script), str(out), str(log)]
    subprocess.run(cmd, env=env, check=True, timeout=120, capture_output=True)
    first = os.readlink(out / "latest")
    assert log.read_text().split() == ["s1", "s2", "s3"]
    assert not (out / ".scratch").exists() or not any((out / ".scratch").iterdir())  # cleared after success
    proc = subprocess.Popen(cmd, env=dict(env, HANG="1"), stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while "hanging" not in log.read_text():
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.1)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    assert os.readlink(out / "latest") == first and load_report(out / "latest")
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == [first, "latest"]
    subprocess.run(cmd, env=env, check=True, timeout=120, capture_output=True)
    # the rerun resumed s1 and s2 from the killed run's partial results and computed only s3
    assert log.read_text().split() == ["s1", "s2", "s3", "s1", "s2", "hanging", "s3"]
    rep = load_report(out / "latest")
    assert os.readlink(out / "latest") != first and rep["regressions"] == []
    assert json.loads(json.dumps(rep["sections"]["expensive"]["data"]["metrics"]))[0]["value"] == 6


def test_quick_and_full_runs_have_separate_baselines(tmp_path, fake_sections, fake_machine):
    state = {"relu0": 0.0}
    register_conventions(state)
    quick = load_report(run_nightly(tmp_path, quick=True))
    state["relu0"] = 1.0
    full = load_report(run_nightly(tmp_path, quick=False))
    assert full["comparison"]["baseline"] is None and "First full run" in full["comparison"]["label"]
    again = load_report(run_nightly(tmp_path, quick=True))
    assert again["comparison"]["baseline"]["created"] == quick["created"]
    assert [r["key"] for r in again["regressions"]] == ["relu|0|float32|cpu|eager"]


def test_ten_noisy_nightlies_stay_green_and_a_slowdown_and_a_convention_change_are_flagged(
        tmp_path, fake_sections, fake_machine):
    """Ten runs of unchanged code whose benchmark samples carry run-to-run noise (each run's level moves by up
    to 1.3x, samples spread 10%, an occasional preempted round) are all GREEN with --fail-on-regression; then
    a 2x slowdown of one benchmark and one changed convention are each flagged, and nothing else."""
    import random

    rng = random.Random(16)
    state = {"relu0": 0.0, "slow": 1.0}

    def samples(center):
        level = center * rng.uniform(1 / 1.3, 1.3)  # this run's level (load, frequency, cache)
        out = [level * math.exp(rng.gauss(0, 0.10)) for _ in range(7)]
        if rng.random() < 0.3:
            out[rng.randrange(7)] *= 8  # one preempted round
        return out

    @section("bench", "Benchmarks and conventions", order=1)
    def bench(ctx):
        ms = [{"key": "relu|0|float32|cpu|eager", "kind": "convention", "value": state["relu0"]}]
        for name, center in (("fwdbwd_over_fwd", 2.5), ("monitor_overhead", 1.8), ("step_ratio", 0.9)):
            s = samples(center * (state["slow"] if name == "monitor_overhead" else 1.0))
            ms.append({"key": name, "kind": "bench_ratio", "value": min(s), "samples": s})
        return {"data": {"metrics": ms}}

    codes = [nightly(tmp_path, "--fail-on-regression") for _ in range(10)]
    assert codes == [0] * 10
    state["slow"] = 2.0
    assert nightly(tmp_path, "--fail-on-regression") == 1
    assert [r["key"] for r in latest(tmp_path)[0]["regressions"]] == ["monitor_overhead"]
    state["slow"], state["relu0"] = 1.0, 1.0
    assert nightly(tmp_path, "--fail-on-regression") == 1
    assert [r["key"] for r in latest(tmp_path)[0]["regressions"]] == ["relu|0|float32|cpu|eager"]
