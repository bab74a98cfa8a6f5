"""The nightly job: run every registered report section, write report.json + index.html atomically.

Layout under ``--out DIR``::

    DIR/<UTC timestamp>/report.json
    DIR/<UTC timestamp>/index.html
    DIR/latest -> <UTC timestamp>          (symlink, replaced atomically)
    DIR/.scratch/<section>/...             (partial results kept across interrupted runs)

A run is first written into ``DIR/.tmp-<timestamp>`` and renamed into place only when complete, so an
interrupted run never leaves a half-written report and ``latest`` keeps pointing at the previous one.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path

from ..errors import OutputDirError
from . import RunContext, load_sections
from .html import render_report
from .machine import machine_info

SCHEMA = "nsverify.report/1"


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same directory and ``os.replace``."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def ensure_writable_dir(out: Path) -> Path:
    out = Path(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / f".write-probe-{os.getpid()}"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise OutputDirError(
            f"cannot write the report to {str(out)!r}: {exc.strerror or exc}. "
            f"Choose a writable directory with --out DIR (for example --out ./reports).") from exc
    return out


def _json_default(obj):
    try:
        import numpy as np

        if isinstance(obj, np.generic):
            return obj.item()
        if isinstance(obj, np.ndarray):
            return obj.tolist()
    except ImportError:  # pragma: no cover
        pass
    from fractions import Fraction

    if isinstance(obj, Fraction):
        return str(obj)
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    raise TypeError(f"report sections must return JSON-able data; got {type(obj).__name__}")


def run_sections(quick: bool, only: list[str] | None = None, scratch: Path | None = None,
                 options: dict | None = None, stream=None) -> dict:
    """Run the registered sections; a section that raises is recorded as failed with its traceback."""
    stream = stream or sys.stderr
    sections = load_sections()
    if only:
        known = {s.name for s in sections}
        unknown = [n for n in only if n not in known]
        if unknown:
            raise ValueError(f"unknown report section(s) {unknown}; known: {sorted(known)}")
        sections = [s for s in sections if s.name in only]
    results: dict[str, dict] = {}
    for i, sec in enumerate(sections, 1):
        print(f"== [{i}/{len(sections)}] {sec.title}", file=stream, flush=True)
        ctx = RunContext(quick=quick, scratch=scratch, section=sec.name, options=dict(options or {}), stream=stream)
        t0 = time.monotonic()
        try:
            res = sec.fn(ctx) or {}
            if not isinstance(res, dict):
                raise TypeError(f"section {sec.name} returned {type(res).__name__}, expected dict")
            json.dumps(res, default=_json_default)  # fail here, inside the section, if not JSON-able
            res = json.loads(json.dumps(res, default=_json_default))
            res.setdefault("status", "ok")
        except Exception:  # a failing section must not lose the others
            res = {"status": "failed", "traceback": traceback.format_exc()}
            print(f"   section {sec.name} FAILED:\n{res['traceback']}", file=stream, flush=True)
        res["title"] = sec.title
        res["seconds"] = round(time.monotonic() - t0, 3)
        results[sec.name] = res
    return results


def utc_stamp() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")


def build_report(sections: dict, quick: bool) -> dict:
    return {
        "schema": SCHEMA,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "quick": quick,
        "machine": machine_info(),
        "sections": sections,
        "regressions": [],
    }


def write_report(out: Path, report: dict, stamp: str | None = None) -> Path:
    """Write ``report`` as ``out/<stamp>/{report.json,index.html}`` atomically and repoint ``out/latest``."""
    out = ensure_writable_dir(out)
    stamp = stamp or utc_stamp()
    final = out / stamp
    n = 1
    while final.exists():
        final = out / f"{stamp}-{n}"
        n += 1
    tmp = Path(tempfile.mkdtemp(dir=out, prefix=f".tmp-{final.name}-"))
    try:
        atomic_write_text(tmp / "report.json", json.dumps(report, indent=1, default=_json_default))
        atomic_write_text(tmp / "index.html", render_report(report))
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
                options: dict | None = None, stream=None) -> Path:
    """Run every registered section and write the report; returns the run directory."""
    out = ensure_writable_dir(Path(out))
    scratch = out / ".scratch"
    sections = run_sections(quick=quick, only=only, scratch=scratch, options=options, stream=stream)
    report = build_report(sections, quick)
    return write_report(out, report)
