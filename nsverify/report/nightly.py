"""The nightly job: run the report sections it is given, compare with the previous run, write atomically.

Layout under ``--out DIR``::

    DIR/<UTC timestamp>/report.json        (schema nsverify.report/1, docs/report.md)
    DIR/<UTC timestamp>/index.html
    DIR/latest -> <UTC timestamp>          (symlink, replaced atomically)
    DIR/.scratch/<run key>/<section>-<code hash>/   (partial results kept across interrupted runs)

A run is first written into ``DIR/.tmp-<pid>-<timestamp>-*`` and renamed into place only when complete, so an
interrupted run never leaves a half-written report and ``latest`` keeps pointing at the previous one. The run
key hashes what determines a run's results (quick, --only, options, machine, torch); rerunning the same
command after an interruption therefore finds the partial results saved by ``ctx.checkpoint``.
"""
from __future__ import annotations

import datetime as _dt
import hashlib
import inspect
import json
import os
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Sequence

from nsverify.errors import NsverifyError
from nsverify.files import atomic_write_text, default_mode, json_default, make_output_dir
from nsverify.report import RunContext, Section, registered_sections
from nsverify.report.compare import (
    BENCH_POOL_RUNS,
    DEFAULT_BENCH_FACTOR,
    check_bench_factor,
    compare_reports,
    require_run,
)
from nsverify.report.history import list_runs, previous_run, same_kind_runs, trend_series
from nsverify.report.html import render_report
from nsverify.report.machine import machine_info
from nsverify.report.schema import SCHEMA, load_report, resolve_report_path, validate_metrics

__all__ = ["SCHEMA", "atomic_write_text", "build_report", "ensure_writable_dir", "given_sections", "run_nightly",
           "run_sections", "write_report", "merge_nightly", "attach_comparison", "is_red"]


def ensure_writable_dir(out: Path | str) -> Path:
    """Create the report directory ``out`` if needed; :class:`OutputDirError` (before any work) if it cannot be."""
    return make_output_dir(out, "--out")


def _source_hash(fn) -> str:
    try:
        src = Path(inspect.getsourcefile(fn)).read_bytes()
    except (TypeError, OSError):
        src = fn.__qualname__.encode()
    return hashlib.sha256(src).hexdigest()[:10]


def run_key(quick: bool, only: list[str] | None, options: dict | None, machine: dict) -> str:
    """What makes two attempts "the same run" for resuming: options, machine and torch (not the clock)."""
    blob = json.dumps({"quick": bool(quick), "only": sorted(only or []), "options": options or {},
                       "machine": machine.get("machine_id"), "torch": machine.get("torch")},
                      sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def given_sections(sections: Sequence[Section] | None) -> list[Section]:
    """``sections``, or (``None``) the sections registered so far; an empty choice is an error, not an empty
    report (pass :func:`nsverify.sections.load_sections`'s list to run the report's sections)."""
    chosen = list(sections) if sections is not None else registered_sections()
    if not chosen:
        raise NsverifyError("no report section to run: pass sections=nsverify.sections.load_sections() "
                            "(the nightly command does).")
    return chosen


def run_sections(quick: bool, only: list[str] | None = None, scratch: Path | None = None,
                 options: dict | None = None, stream=None, sections: Sequence[Section] | None = None) -> dict:
    """Run ``sections`` (default: the sections registered so far, see :func:`given_sections`); a section that
    raises is recorded as failed with its traceback.

    A section whose ``data["metrics"]`` breaks the metric schema is recorded as failed too, with the reason.
    Exceptions that are not ``Exception`` (KeyboardInterrupt, SystemExit) stop the whole run.
    """
    stream = stream or sys.stderr
    sections = given_sections(sections)
    if only:
        known = {s.name for s in sections}
        unknown = [n for n in only if n not in known]
        if unknown:
            raise NsverifyError(f"unknown report section(s) {unknown}; known: {sorted(known)}. "
                                f"Fix the names given to --only.")
        sections = [s for s in sections if s.name in only]
    results: dict[str, dict] = {}
    for i, sec in enumerate(sections, 1):
        print(f"== [{i}/{len(sections)}] {sec.title}", file=stream, flush=True)
        ctx = RunContext(quick=quick, scratch=scratch, section=sec.name, options=dict(options or {}),
                         stream=stream, code_hash=_source_hash(sec.fn))
        t0 = time.monotonic()
        try:
            res = sec.fn(ctx) or {}
            if not isinstance(res, dict):
                raise TypeError(f"section {sec.name} returned {type(res).__name__}, expected dict")
            res = json.loads(json.dumps(res, default=json_default))
            if "metrics" in (res.get("data") or {}):
                validate_metrics(res["data"]["metrics"], f"sections.{sec.name}.data.metrics")
            res.setdefault("status", "ok")
        except Exception:  # a failing section must not lose the others
            res = {"status": "failed", "traceback": traceback.format_exc()}
            print(f"   section {sec.name} FAILED:\n{res['traceback']}", file=stream, flush=True)
        res["title"] = sec.title
        res["seconds"] = round(time.monotonic() - t0, 3)
        res["_scratch"] = f"{sec.name}-{ctx.code_hash}"
        results[sec.name] = res
    return results


def utc_stamp() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")


def build_report(sections: dict, quick: bool, machine: dict | None = None) -> dict:
    report = {
        "schema": SCHEMA,
        "kind": "run",
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="microseconds"),
        "quick": quick,
        "machine": machine or machine_info(),
        "sections": {n: {k: v for k, v in s.items() if k != "_scratch"} for n, s in sections.items()},
        "regressions": [],
    }
    _monitor_overhead_side_by_side(report["sections"])
    return report


def _monitor_overhead_side_by_side(sections: dict) -> None:
    """Hook: the park section (when it ran) gets the training monitor's overhead on the CPU and on the GPU side by
    side, each with its run's date and commit, against Park et al.'s 1.77x on the GPU at full width
    (:func:`nsverify.papers.park.overhead.side_by_side` of the stored CPU run and the newest stored GPU run)."""
    sec = sections.get("park")
    if not isinstance(sec, dict) or not isinstance(sec.get("tables"), list):
        return
    from nsverify.papers.park.overhead import cpu_overhead_run, newest_gpu_run, side_by_side
    from nsverify.report import table

    title = "Monitor overhead on CPU and GPU side by side (stored runs, with their dates; the GPU run is the newest)"
    try:
        t = side_by_side(cpu_overhead_run(), newest_gpu_run())
    except NsverifyError as exc:  # a stored run without its provenance: the table says so, the nightly goes on
        t = {"columns": ["stored runs"], "rows": [[str(exc)]]}
    sec["tables"] = [*sec["tables"], table(title, t["columns"], t["rows"])]


def attach_comparison(report: dict, out: Path, baseline: Path | str | None = None,
                      bench_factor: float = DEFAULT_BENCH_FACTOR, stream=None) -> dict:
    """Compare ``report`` with ``baseline`` (or the previous run on this machine in ``out``); add trends."""
    runs = list_runs(out, stream=stream)
    mid = report["machine"]["machine_id"]
    base = None
    same = same_kind_runs(runs, mid, report["quick"])
    history: list[dict] = []
    if baseline is not None:
        base = (str(resolve_report_path(baseline)), load_report(baseline))
    else:
        prev = previous_run(runs, mid, report["quick"])
        if prev is not None:
            base = (str(prev[0]), prev[1])
            # bench_ratio samples are tested against the pooled samples of the last few runs
            history = [rep for _, rep in same[:-1]][-(BENCH_POOL_RUNS - 1):]
    if base is None:
        mode = "quick" if report["quick"] else "full"
        report["comparison"] = {"label": f"First {mode} run on this machine: nothing to compare with.",
                                "same_machine": True, "environment_changes": [], "regressions": [],
                                "changes": [], "baseline": None, "bench_factor": bench_factor}
    else:
        report["comparison"] = compare_reports(base[1], report, bench_factor, base_path=base[0], history=history)
    report["regressions"] = report["comparison"]["regressions"]
    report["trends"] = trend_series([rep for _, rep in same] + [report])
    return report


def is_red(report: dict) -> bool:
    """Red = a regression, or a failed section."""
    if report["regressions"]:
        return True
    secs = report["sections"].values()
    return any(s.get("status") == "failed" for s in secs)


def _remove_stale_tmp(out: Path) -> None:
    """Remove ``.tmp-<pid>-*`` directories left by killed runs (their pid is gone)."""
    for p in out.glob(".tmp-*"):
        parts = p.name.split("-")
        try:
            pid = int(parts[1])
        except (IndexError, ValueError):
            continue
        if pid == os.getpid():
            continue
        try:
            os.kill(pid, 0)
            continue  # still running
        except ProcessLookupError:
            shutil.rmtree(p, ignore_errors=True)
        except PermissionError:
            continue


def write_report(out: Path, report: dict, stamp: str | None = None) -> Path:
    """Write ``report`` as ``out/<stamp>/{report.json,index.html}`` atomically and repoint ``out/latest``."""
    out = ensure_writable_dir(out)
    _remove_stale_tmp(out)
    stamp = stamp or utc_stamp()
    final = out / stamp
    n = 1
    while final.exists():
        final = out / f"{stamp}-{n}"
        n += 1
    tmp = Path(tempfile.mkdtemp(dir=out, prefix=f".tmp-{os.getpid()}-{final.name}-"))
    try:
        atomic_write_text(tmp / "report.json", json.dumps(report, indent=1, default=json_default))
        atomic_write_text(tmp / "index.html", render_report(report))
        os.chmod(tmp, default_mode(directory=True))  # mkdtemp makes it 0700; the umask decides, as for mkdir
        os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    link_tmp = out / f".latest-{os.getpid()}"
    if link_tmp.is_symlink() or link_tmp.exists():
        link_tmp.unlink()
    os.symlink(final.name, link_tmp)
    os.replace(link_tmp, out / "latest")
    return final


def run_nightly(out: Path | str = "reports", quick: bool = False, only: list[str] | None = None,
                options: dict | None = None, stream=None, baseline: Path | str | None = None,
                bench_factor: float = DEFAULT_BENCH_FACTOR, sections: Sequence[Section] | None = None) -> Path:
    """Run ``sections`` (``nsverify nightly`` passes :func:`nsverify.sections.load_sections`'s; default: the
    sections registered so far), compare, and write the report; returns the run directory."""
    check_bench_factor(bench_factor)
    sections = given_sections(sections)
    out = ensure_writable_dir(Path(out))
    if baseline is not None:  # a bad baseline fails before hours of work
        require_run(load_report(baseline), "--baseline")
    machine = machine_info()
    scratch = out / ".scratch" / run_key(quick, only, options, machine)
    results = run_sections(quick=quick, only=only, scratch=scratch, options=options, stream=stream,
                           sections=sections)
    report = attach_comparison(build_report(results, quick, machine), out, baseline, bench_factor, stream)
    run_dir = write_report(out, report)
    for sec in results.values():  # completed sections need no partial results any more
        if sec.get("status") == "ok":
            shutil.rmtree(scratch / sec["_scratch"], ignore_errors=True)
    if scratch.is_dir() and not any(scratch.iterdir()):
        scratch.rmdir()
    return run_dir


def merge_nightly(out: Path | str, dirs: list[Path | str]) -> Path:
    """Merge the runs in ``dirs`` (several machines) into one report written under ``out``."""
    from nsverify.report.merge import merge_reports

    out = ensure_writable_dir(Path(out))
    return write_report(out, merge_reports(dirs), stamp=utc_stamp() + "-merged")
