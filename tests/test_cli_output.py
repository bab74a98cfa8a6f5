"""What the commands print and write around the work (issue 25): --json directories made before any work,
``conventions`` compared with the previous recorded release by default, ``compare`` naming A and B, the resume
hint and status 130 after Ctrl-C, and heartbeat lines during long silent steps."""
from __future__ import annotations

import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nsverify import cli
from nsverify.conventions import baselines
from nsverify.conventions.cli import comparisons
from nsverify.devices import Heartbeat
from nsverify.report.nightly import write_report
from tests.report_fakes import FAKE_MACHINE, standard_metrics

ROOT = Path(__file__).resolve().parents[1]
CONV = ["conventions", "--ops", "relu", "--dtype", "float32", "--modes", "eager"]
ZONES = ["zones", "volume", "--model", "mlp", "--width", "0.03", "--draws", "1", "--batches", "1",
         "--batch-size", "8", "--n-data", "16", "--dtypes", "float32", "--tau", "float32=1e-9"]


# -- --json into a directory that does not exist ------------------------------------------------------------------
@pytest.mark.parametrize("argv", [CONV, ZONES], ids=["conventions", "zones volume"])
def test_json_into_missing_directories_creates_them(argv, tmp_path, capsys):
    out = tmp_path / "new" / "deeper" / "r.json"
    assert cli.main([*argv, "--json", str(out)]) == 0, capsys.readouterr().err
    assert json.loads(out.read_text())


@pytest.mark.parametrize("argv", [CONV, ZONES], ids=["conventions", "zones volume"])
def test_json_where_no_directory_can_be_made_fails_before_any_work(argv, tmp_path, capsys, monkeypatch):
    """Refused up front (exit 2, one line): a directory that cannot be created at the time the work starts."""
    import nsverify.conventions.matrix as matrix
    import nsverify.papers.zones.volume as volume

    monkeypatch.setattr(matrix, "run_matrix", lambda *a, **k: pytest.fail("work started"))
    monkeypatch.setattr(volume, "estimate_volume", lambda *a, **k: pytest.fail("work started"))
    blocker = tmp_path / "blocker"
    real_mkdir = Path.mkdir

    def refuse(self, *a, **k):  # the parent check passed while parsing; creating it now fails (a race, quota)
        if str(self).startswith(str(blocker)):
            raise PermissionError(13, "Permission denied")
        return real_mkdir(self, *a, **k)

    monkeypatch.setattr(Path, "mkdir", refuse)
    code = cli.main([*argv, "--json", str(blocker / "sub" / "r.json")])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "cannot create it (Permission denied)" in err


# -- conventions: what changed since the previous recorded release -------------------------------------------------
def test_comparisons_by_default_previous_release_then_own_baseline(tmp_path):
    runs = comparisons("auto", "2.13.0")
    assert [(k, r.release) for k, r in runs] == [("previous", "2.12.1"), ("baseline", "2.13.0")]
    for rel in ("2.12.1", "2.14.1"):  # recorded files elsewhere: 2.13.0 has no own baseline there
        shutil.copy(baselines.DATA_DIR / f"{rel}.json", tmp_path / f"{rel}.json")
    assert [(k, r.release) for k, r in comparisons("auto", "2.13.0", tmp_path)] == [("previous", "2.12.1")]
    assert [(k, r.release) for k, r in comparisons("auto", "2.14.1", tmp_path)] == [
        ("previous", "2.12.1"), ("baseline", "2.14.1")]
    assert comparisons("auto", "2.11.0", tmp_path) == []
    assert comparisons("none", "2.13.0") == []
    assert [(k, r.release) for k, r in comparisons("2.12.1", "2.13.0")] == [("baseline", "2.12.1")]
    path = str(tmp_path / "2.14.1.json")
    assert [(k, r.source) for k, r in comparisons(path, "2.13.0")] == [("baseline", path)]


def test_conventions_shows_the_changes_since_the_previous_release(capsys, monkeypatch):
    monkeypatch.setattr(baselines, "installed_release", lambda: "2.13.0")
    assert cli.main([*CONV, "--json", "-"]) == 0
    meta = json.loads(capsys.readouterr().out)["meta"]
    assert meta["previous_release"]["release"] == "2.12.1" and meta["baseline"]["release"] == "2.13.0"
    assert cli.main(CONV) == 0
    out = capsys.readouterr().out
    since = out.index("Changes since the previous recorded release, torch 2.12.1")
    assert "to torch 2.13.0: " in out[since:] and out.index("Differences from the baseline torch 2.13.0") > since


def test_conventions_with_an_explicit_baseline_file_shows_only_that(tmp_path, capsys):
    path = tmp_path / "base.json"
    shutil.copy(baselines.DATA_DIR / "2.12.1.json", path)
    assert cli.main([*CONV, "--baseline", str(path)]) == 0
    out = capsys.readouterr().out
    assert "Differences from the baseline torch 2.12.1" in out and "Changes since" not in out


# -- compare names its runs ---------------------------------------------------------------------------------------
def test_compare_names_a_and_b(tmp_path, capsys):
    def rep(created, commit, host):
        machine = dict(FAKE_MACHINE, hostname=host, commit=commit, machine_id=f"{host}|Fake CPU 9000|no-gpu")
        return {"schema": "nsverify.report/1", "kind": "run", "created": created, "quick": True, "machine": machine,
                "regressions": [], "sections": {"s": {"title": "S", "status": "ok",
                                                      "data": {"metrics": standard_metrics()}}}}
    a = write_report(tmp_path / "ra", rep("2026-01-01T00:00:00+00:00", "abc123def456", "box"), stamp="a")
    b = write_report(tmp_path / "rb", rep("2026-02-01T00:00:00+00:00", None, "other"), stamp="b")
    assert cli.main(["compare", str(a), str(b)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == (f"A (baseline): run 2026-01-01T00:00:00+00:00, commit abc123def456, machine box "
                        f"(Fake CPU 9000, no GPU, torch 2.13.0), quick; {a}")
    assert lines[1].startswith("B (judged): run 2026-02-01T00:00:00+00:00, commit not recorded, machine other ")
    assert cli.main(["compare", str(a), str(b), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["a"]["commit"] == "abc123def456" and data["b"]["hostname"] == "other"


def test_reports_record_the_commit():
    from nsverify.report.machine import machine_info

    commit = machine_info()["commit"]
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    assert commit is None or head.startswith(commit.removesuffix("-dirty"))


# -- Ctrl-C -------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("argv,kept", [
    (["nightly", "--out", "{OUT}", "--quick"], "{OUT}/.scratch"),
    (["releases", "2.13", "--out", "{OUT}"], "{OUT}"),
    ([*ZONES, "--resume", "{OUT}/partial.json"], "{OUT}/partial.json"),
])
def test_interrupt_prints_the_resume_hint_and_exits_130(argv, kept, tmp_path, capsys, monkeypatch):
    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "run_command", interrupted)
    argv = [a.replace("{OUT}", str(tmp_path)) for a in argv]
    assert cli.main(argv) == 130
    err = capsys.readouterr().err.strip()
    where = kept.replace("{OUT}", str(tmp_path))
    assert err.endswith(f": interrupted: rerun the same command to resume (finished parts are kept in {where})")
    assert len(err.splitlines()) == 1


def test_interrupt_without_resume_file_says_nothing_was_kept(capsys, monkeypatch):
    monkeypatch.setattr(cli, "run_command", lambda args: (_ for _ in ()).throw(KeyboardInterrupt))
    assert cli.main(ZONES) == 130
    assert "no draw was kept: give --resume FILE" in capsys.readouterr().err


def test_sigint_to_a_running_zones_volume(tmp_path):
    """The console command itself, interrupted by SIGINT once its first draw is saved."""
    partial = tmp_path / "partial.json"
    argv = [*ZONES, "--draws", "100000", "--resume", str(partial)]
    # the default SIGINT disposition, as at a terminal: a test run started in the background by a shell inherits
    # SIGINT ignored, and Python then installs no KeyboardInterrupt handler in the child
    proc = subprocess.Popen([sys.executable, "-m", "nsverify", *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)},
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 240
        while not partial.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert partial.exists(), proc.communicate(timeout=60)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert err.strip().splitlines()[-1] == (f"nsverify zones volume: interrupted: rerun the same command to resume "
                                            f"(finished parts are kept in {partial})")
    assert "Traceback" not in err and json.loads(partial.read_text())["draws"]


# -- heartbeat ----------------------------------------------------------------------------------------------------
def test_heartbeat_prints_while_a_step_runs_and_stops_after():
    stream = io.StringIO()
    with Heartbeat("compiling X", every=0.05, prefix="[t] ", stream=stream) as hb:
        time.sleep(0.3)
        hb.beat("linking X")
        time.sleep(0.2)
    time.sleep(0.15)
    lines = stream.getvalue().splitlines()
    assert lines and lines[0].startswith("[t] still compiling X ... ") and lines[0].endswith(" s")
    assert lines[-1].startswith("[t] still linking X ... ")
    n = len(lines)
    time.sleep(0.15)
    assert len(stream.getvalue().splitlines()) == n  # nothing after the block


def test_no_heartbeat_for_a_short_step():
    stream = io.StringIO()
    with Heartbeat("compiling X", every=5, stream=stream):
        pass
    assert stream.getvalue() == ""


def test_conventions_heartbeat_names_the_step(capsys, monkeypatch):
    import nsverify.conventions.matrix as matrix
    import nsverify.devices as devices

    real = devices.Heartbeat
    monkeypatch.setattr(devices, "Heartbeat", lambda what, **k: real(what, **{**k, "every": 0.05}))
    slow = matrix.run_matrix

    def run_matrix(*a, **k):
        time.sleep(0.3)  # a silent step, as torch.compile is
        return slow(*a, **k)

    monkeypatch.setattr(matrix, "run_matrix", run_matrix)
    assert cli.main([*CONV, "--baseline", "none"]) == 0
    err = capsys.readouterr().err
    assert "[conventions] still running step 1/1 (float32 on cpu) ... " in err


def test_nightly_conventions_section_has_a_heartbeat_during_its_silent_compile(capsys, monkeypatch):
    """The conventions section's child-process steps (a torch.compile minute says nothing) print a heartbeat line
    naming the step, as the ``conventions`` command does (issue 40, item 4)."""
    import nsverify.conventions.isolation as isolation
    import nsverify.devices as devices
    from nsverify.sections.conventions import _run_cells

    real = devices.Heartbeat
    monkeypatch.setattr(devices, "Heartbeat", lambda what, **k: real(what, **{**k, "every": 0.05}))
    calls = []

    def run_matrix_isolated(ops, dtypes, devs, modes, progress=None, repro_dir=None):
        calls.append(modes)
        progress(f"{len(dtypes)} dtypes, modes {','.join(modes)}", 1, 1)
        time.sleep(0.3)  # a silent step, as torch.compile is
        return [modes[0]]

    monkeypatch.setattr(isolation, "run_matrix_isolated", run_matrix_isolated)

    class Ctx:
        section = "conventions"

        def progress(self, message, done=None, total=None):
            print(f"[conventions {done}/{total}] {message}", file=sys.stderr)

    assert _run_cells(Ctx(), ("float32",), ("float32",), None) == ["eager", "compile"]
    err = capsys.readouterr().err
    assert calls == [["eager", "func", "jvp"], ["compile"]]
    assert "[conventions] still evaluating the eager/func/jvp cells in a child process ... " in err
    assert "[conventions] still compiling with torch.compile (float32) in a child process ... " in err


def test_compare_says_when_a_file_is_not_a_run_and_when_a_and_b_are_one_run(tmp_path, capsys):
    """``compare README.md reports``: the file is not a report run (nothing to delete); ``compare latest latest``
    says that A and B are the same run (issue 40, item 9)."""
    rep = {"schema": "nsverify.report/1", "kind": "run", "created": "2026-01-01T00:00:00+00:00", "quick": True,
           "machine": dict(FAKE_MACHINE), "regressions": [],
           "sections": {"s": {"title": "S", "status": "ok", "data": {"metrics": standard_metrics()}}}}
    run = write_report(tmp_path / "reports", rep, stamp="a")
    readme = tmp_path / "README.md"
    readme.write_text("# nsverify\n")
    assert cli.main(["compare", str(readme), str(tmp_path / "reports")]) == 2
    err = capsys.readouterr().err
    assert "README.md is not a report run" in err and "Delete" not in err
    assert cli.main(["compare", str(tmp_path / "reports"), str(run)]) == 0
    err = capsys.readouterr().err
    assert "A and B are the same run" in err and "pass an earlier run as A" in err


@pytest.mark.parametrize("name", ["ReLU", "nn.ReLU", "torch.relu", "F.relu", "torch.nn.functional.relu",
                                  "aten.relu.default"])
def test_ops_named_as_pytorch_names_them_get_a_did_you_mean(name, capsys):
    assert cli.main(["conventions", "--ops", name, "--dtype", "float32", "--modes", "eager"]) == 2
    err = capsys.readouterr().err
    assert f"unknown op {name!r}" in err and "Did you mean relu?" in err


def test_did_you_mean_finds_module_classes_and_other_cases():
    from nsverify.registry.table import registry_name

    assert registry_name("nn.LeakyReLU") == "leaky_relu" and registry_name("MaxPool2d") == "max_pool2d"
    assert registry_name("torch.max") == "max" and registry_name("Hardtanh") == "hardtanh"
    assert registry_name("sin") is None and registry_name("torch.sin") is None
