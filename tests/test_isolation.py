"""Crash isolation of the conventions matrix (cells in child processes, a crash becomes a "crashed" cell with a
reproduction script), one Inductor cache per CPU capability, and the CPU kernel path in every claim's record and
in the report header (issue 24)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest
import torch

from nsverify import conventions as cv
from nsverify.conventions import inductor, isolation

ROOT = Path(__file__).resolve().parents[1]
CAP = torch.backends.cpu.get_cpu_capability().lower()


# ----------------------------------------------------------------------------------------------------------
# one Inductor cache per CPU capability
# ----------------------------------------------------------------------------------------------------------
def test_cache_dir_default_gets_a_capability_subdirectory():
    env: dict = {}
    path = inductor.capability_cache_dir(env)
    assert Path(path).name == f"nsverify-{CAP}"
    assert Path(path).parent == Path(inductor._inductor_default_dir()).resolve()
    assert env["TORCHINDUCTOR_CACHE_DIR"] == path


def test_cache_dir_of_the_user_gets_the_capability_appended(tmp_path):
    env = {"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "mine")}
    assert inductor.capability_cache_dir(env) == str(tmp_path / "mine" / f"nsverify-{CAP}")
    assert inductor.capability_cache_dir(env) == str(tmp_path / "mine" / f"nsverify-{CAP}")  # idempotent


def test_cache_dir_of_another_capability_is_replaced_by_its_sibling(tmp_path):
    other = "avx2" if CAP != "avx2" else "default"
    env = {"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / f"nsverify-{other}")}
    assert inductor.capability_cache_dir(env) == str(tmp_path / f"nsverify-{CAP}")


def test_cache_dir_follows_aten_cpu_capability(tmp_path):
    """A child under ATEN_CPU_CAPABILITY=default inherits the parent's directory and moves to its own."""
    env = dict(os.environ, ATEN_CPU_CAPABILITY="default", PYTHONPATH=str(ROOT),
               TORCHINDUCTOR_CACHE_DIR=str(tmp_path / f"nsverify-{CAP}"))
    out = subprocess.run([sys.executable, "-c", "from nsverify.conventions.inductor import capability_cache_dir;"
                          "print(capability_cache_dir())"], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == str(tmp_path / "nsverify-default")


# ----------------------------------------------------------------------------------------------------------
# isolation
# ----------------------------------------------------------------------------------------------------------
def test_isolated_results_equal_in_process_results():
    args = (["relu", "amax"], ["float32", "float64"], ["cpu"], ["eager", "func", "jvp", "compile"])
    kw = {"compile_dtypes": ["float32"], "compile_backend": "aot_eager"}
    plain = cv.run_matrix(*args, **kw)
    isolated = isolation.run_matrix_isolated(*args, **kw)
    assert [asdict(r) for r in isolated] == [asdict(r) for r in plain]
    assert not cv.matrix.crashed(isolated)


def test_crash_becomes_a_crashed_cell_with_its_script(tmp_path):
    """The test hook aborts the child on one cell: that cell is crashed, every other cell evaluated, the script
    written, the JSON lists it, and the command exits normally."""
    out = tmp_path / "m.json"
    env = dict(os.environ, PYTHONPATH=str(ROOT), **{isolation.TEST_CRASH_ENV: "abs|x=0|float32|func"})
    proc = subprocess.run([sys.executable, "-m", "nsverify.conventions", "--ops", "relu,abs", "--dtype", "float32",
                           "--modes", "eager,func", "--baseline", "none", "--json", str(out)],
                          env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(out.read_text())
    rows = {(r["op"], r["case"], r["mode"]): r for r in data["results"]}
    assert len(rows) == 4
    crashed = rows[("abs", "x=0", "func")]
    assert crashed["rule"] == "crashed" and not crashed["as_expected"]
    assert "SIGABRT" in crashed["error"]
    plain = {(r.op, r.case, r.mode): asdict(r) for r in cv.run_matrix(["relu", "abs"], ["float32"], ["cpu"],
                                                                        ["eager", "func"])}
    assert {k: r for k, r in rows.items() if k != ("abs", "x=0", "func")} == {
        k: r for k, r in plain.items() if k != ("abs", "x=0", "func")}
    assert [r["rule"] for r in rows.values()] == ["left", "even", "left", "crashed"]
    assert [(r["op"], r["mode"]) for r in data["crashed"]] == [("abs", "func")]
    assert not data["unexpected"]
    script = Path(crashed["extra"]["repro"])
    assert script.parent == tmp_path / "m-crashed"
    text = script.read_text()
    assert "crashed its process" in text and "torch.func.grad(f)(x)" in text
    compile(text, str(script), "exec")
    assert "CRASHED" in proc.stdout and "1 crashed" in proc.stdout
    # the script reproduces the cell (here no crash: the abort was the test hook's)
    ran = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0 and "derivative: [0.0]" in ran.stdout


def test_time_limit_marks_the_batch_crashed(tmp_path):
    cases = cv.build_cases(["relu"])
    rs, _ = isolation.evaluate_isolated([(c, "float32", "eager") for c in cases], "cpu", "inductor",
                                        timeout=0.01, repro_dir=tmp_path)
    assert [r.rule for r in rs] == ["crashed"]
    assert rs[0].error.startswith("timed out") and Path(rs[0].extra["repro"]).is_file()


def test_death_message_names_the_signal():
    msg = isolation._death(-signal.SIGSEGV, "x\nFatal Python error: Segmentation fault\n\nExtension modules: a")
    assert msg.startswith("killed by signal SIGSEGV (11)") and "Fatal Python error: Segmentation fault" in msg
    assert isolation._death(3, "").startswith("exited with status 3")


def test_conventions_section_survives_a_crash(tmp_path, monkeypatch):
    """The nightly's section with a crashing compile cell: it returns, shows the crashed cell with its script,
    counts it, and leaves the claims it touches undecided."""
    from nsverify.report import RunContext
    from nsverify.sections import conventions as sec

    real = cv.run_matrix
    monkeypatch.setattr(cv, "run_matrix", lambda ops, *a, **kw: real(["relu"], *a, **kw))
    # the section runs every op in child processes: relu only here (other ops' real compile differences, e.g.
    # multi_margin_loss's, would decide the claim False before the crash could leave it undecided)
    real_isolated = isolation.run_matrix_isolated
    monkeypatch.setattr(isolation, "run_matrix_isolated", lambda ops, *a, **kw: real_isolated(["relu"], *a, **kw))
    monkeypatch.setattr(sec, "DTYPES", ("float32",))
    monkeypatch.setenv(isolation.TEST_CRASH_ENV, "relu|x=0|float32|compile")
    out = sec.conventions_section(RunContext(quick=True, scratch=tmp_path, section="conventions"))
    assert "1 crashed their process" in out["summary"]
    crash_tables = [t for t in out["tables"] if t["title"].startswith("Crashed cells")]
    assert len(crash_tables) == 1 and crash_tables[0]["rows"][0][:4] == ["relu", "x=0", "float32", "compile"]
    assert Path(crash_tables[0]["rows"][0][5]).is_file()
    metrics = {m["key"]: m for m in out["data"]["metrics"]}
    assert metrics["crashed_cells"]["value"] == 1
    assert metrics["relu|x=0|float32|cpu|compile"]["value"] == "crashed"
    claims = {c["id"]: c for c in out["claims"]}
    assert claims["conventions/compile-matches-eager"]["held"] is None
    assert "crashed" in claims["conventions/compile-matches-eager"]["reason"]


# ----------------------------------------------------------------------------------------------------------
# provenance: the CPU kernel path in every claim and in the report header
# ----------------------------------------------------------------------------------------------------------
def test_every_claim_records_its_cpu_kernel_path(monkeypatch):
    from nsverify.claims import decide
    from nsverify.claims.record import ClaimSpec

    spec = ClaimSpec("t/one", "ours", "here", "a statement", "a metric", "exact", "one run", by="ours")
    monkeypatch.delenv("ATEN_CPU_CAPABILITY", raising=False)
    monkeypatch.setenv("NSVERIFY_KERNELS", "reference")
    c = spec.judge("measured", decide.exact(True))
    assert c["runtime"] == {"cpu_capability": torch.backends.cpu.get_cpu_capability(),
                            "aten_cpu_capability": None, "nsverify_kernels": "reference"}


def test_claims_under_a_forced_capability_say_so():
    code = ("from nsverify.claims import decide; from nsverify.claims.record import ClaimSpec;"
            "s = ClaimSpec('t/one', 'ours', 'here', 'st', 'm', 'exact', 'b', by='ours');"
            "import json; print(json.dumps(s.judge('x', decide.exact(True))['runtime']))")
    env = dict(os.environ, ATEN_CPU_CAPABILITY="default", PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == {"cpu_capability": "DEFAULT", "aten_cpu_capability": "default",
                                      "nsverify_kernels": env.get("NSVERIFY_KERNELS")}


def test_stored_run_claims_name_the_run_and_its_gpu():
    from nsverify.claims.record import on_stored_run

    c = on_stored_run([{"id": "a/b", "claim": "x", "runtime": {"cpu_capability": "AVX2"}}], "gpu-zones", "H100")
    assert c[0]["runtime"] == {"stored_run": "gpu-zones", "device": "H100"} and c[0]["id"] == "gpu-zones/a/b"


def test_report_header_has_the_capability(monkeypatch):
    from nsverify.report.machine import machine_info

    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
    info = machine_info()
    assert info["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert info["aten_cpu_capability"] == "avx2"


@pytest.mark.parametrize("key", ["cpu_capability", "aten_cpu_capability"])
def test_a_capability_change_is_an_environment_change(key):
    from nsverify.report.compare import _env_changes

    assert _env_changes({key: "AVX512"}, {key: "AVX2"}) == [f"{key}: 'AVX512' -> 'AVX2'"]


# ----------------------------------------------------------------------------------------------------------
# one run, two capabilities (scripts/capabilities.py)
# ----------------------------------------------------------------------------------------------------------
def _capabilities_script():
    import importlib.util

    spec = importlib.util.spec_from_file_location("capabilities_script", ROOT / "scripts" / "capabilities.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_capabilities_flags_the_claims_whose_verdict_differs():
    caps = _capabilities_script()

    def report(held_b, measured_b):
        return {"sections": {"zones": {"claims": [
            {"id": "zones/a", "claim": "A", "held": True, "measured": "2/40"},
            {"id": "zones/b", "claim": "B", "held": held_b, "measured": measured_b}]}}}

    rows = caps.claim_rows({"native": report(False, "28/40"), "avx2": report(True, "40/40")})
    by_id = {r["id"]: r for r in rows}
    assert not by_id["zones/a"]["depends"]
    assert by_id["zones/b"]["depends"]
    assert by_id["zones/b"]["by"]["native"]["verdict"] == "not reproduced"
    assert by_id["zones/b"]["by"]["avx2"]["verdict"] == "reproduced"
    text = caps.format_markdown(rows, ["native", "avx2"], "# t")
    assert "1 whose verdict depends on the CPU kernel" in text
    assert "not reproduced: 28/40 | reproduced: 40/40 | DEPENDS ON THE CPU KERNEL" in text
    # a claim reported under one capability only differs too
    rows = caps.claim_rows({"native": report(True, "x"), "avx2": {"sections": {"zones": {"claims": [
        {"id": "zones/a", "claim": "A", "held": True, "measured": "2/40"}]}}}})
    assert {r["id"]: r["depends"] for r in rows} == {"zones/a": False, "zones/b": True}


def test_a_crash_that_needs_the_cells_together_is_kept(monkeypatch, tmp_path):
    """A batch whose child dies while each half runs alone: every cell keeps its result and notes the crash."""
    cases = cv.build_cases(["relu", "abs"])
    real = isolation.run_child
    calls = []

    def child(request, timeout):
        calls.append(len(request["cells"]))
        if len(request["cells"]) == 2:
            return None, "killed by signal SIGSEGV (11)"
        return real(request, timeout)

    monkeypatch.setattr(isolation, "run_child", child)
    rs, msg = isolation.evaluate_isolated([(c, "float32", "eager") for c in cases], "cpu", "inductor",
                                          repro_dir=tmp_path)
    assert calls == [2, 1, 1]
    assert [r.rule for r in rs] == ["left", "even"]
    assert "every part ran alone" in msg and all(r.extra["batch_crash"] == msg for r in rs)
    assert cv.batch_crashes(rs) == [msg]
    assert cv.to_json(rs)["batch_crashes"] == [msg]
