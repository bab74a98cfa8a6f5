"""The stored history under a reports directory: find the previous run on this machine, build trend series.

Runs live in ``OUT/<UTC stamp>/report.json``. Directories whose name starts with ``.`` (temporary and scratch
directories) are never read. A run directory whose report.json is corrupted or foreign is skipped with a
warning, never executed.
"""
from __future__ import annotations

import math
import sys
from pathlib import Path

from nsverify.errors import ReportFormatError
from nsverify.report.schema import load_report

#: trend plots show at most this many stored runs (the newest)
HISTORY_LIMIT = 30
TREND_KINDS = ("share", "convergence", "bench_ratio", "counterexample")


def list_runs(out: Path | str, limit: int = HISTORY_LIMIT, stream=None) -> list[tuple[Path, dict]]:
    """The newest ``limit`` valid single-machine runs in ``out``, oldest first."""
    out = Path(out)
    if not out.is_dir():
        return []
    dirs = sorted((p for p in out.iterdir() if p.is_dir() and not p.is_symlink()
                   and not p.name.startswith(".") and (p / "report.json").is_file()), key=lambda p: p.name)
    runs = []
    for d in dirs[-limit * 3:]:
        try:
            rep = load_report(d / "report.json")
        except ReportFormatError as exc:
            print(f"nsverify: skipping stored run: {exc}", file=stream or sys.stderr)
            continue
        if rep.get("kind", "run") == "run":
            runs.append((d, rep))
    runs.sort(key=lambda r: (r[1]["created"], r[0].name))
    return runs[-limit:]


def same_kind_runs(runs: list[tuple[Path, dict]], machine_id: str, quick: bool) -> list[tuple[Path, dict]]:
    """The runs taken on ``machine_id`` in the same mode (``--quick`` runs are compared with quick runs)."""
    return [r for r in runs if r[1]["machine"].get("machine_id") == machine_id
            and bool(r[1].get("quick")) == bool(quick)]


def previous_run(runs: list[tuple[Path, dict]], machine_id: str, quick: bool) -> tuple[Path, dict] | None:
    """The newest run of ``runs`` on ``machine_id`` in the same mode (None on a machine's first run)."""
    same = same_kind_runs(runs, machine_id, quick)
    return same[-1] if same else None


def trend_series(runs: list[dict]) -> dict[str, list[dict]]:
    """Per section, the numeric metrics over ``runs`` (oldest first, the current run last).

    Returns ``{section: [{"key", "kind", "points": [[created, value, lo, hi], ...]}]}`` where lo/hi are the
    interval (share) or value -/+ spread (convergence), else equal to value. Non-finite values are dropped.
    """
    out: dict[str, dict[str, dict]] = {}
    for rep in runs:
        for name, sec in rep["sections"].items():
            for m in (sec.get("data") or {}).get("metrics", []):
                if m["kind"] not in TREND_KINDS or not isinstance(m["value"], (int, float)):
                    continue
                v = float(m["value"])
                if not math.isfinite(v):
                    continue
                lo, hi = v, v
                if m["kind"] == "share":
                    lo, hi = float(m["lo"]), float(m["hi"])
                elif m["kind"] == "convergence":
                    lo, hi = v - float(m["spread"]), v + float(m["spread"])
                series = out.setdefault(name, {}).setdefault(m["key"], {"key": m["key"], "kind": m["kind"],
                                                                       "points": []})
                series["points"].append([rep["created"], v, lo, hi])
    return {name: list(s.values()) for name, s in out.items()}
