"""``nsverify nightly --merge DIR...``: combine runs taken on several machines into one report.

The merged report (``"kind": "merged"``) keeps every machine's section results side by side under
``sections[name]["machines"][label]``; the HTML shows one column per machine. Differences between machines are
shown as such and are never regressions; each input run's own regressions (against its own machine's
baseline) are carried over, prefixed with the machine label.
"""
from __future__ import annotations

import datetime as _dt
from pathlib import Path

from nsverify.errors import ReportFormatError
from nsverify.report.schema import SCHEMA, load_report, resolve_report_path


def machine_label(machine: dict) -> str:
    """A short column label: ``host (GPU model)`` or ``host (CPU model)``."""
    hw = machine.get("gpu") or machine.get("cpu") or "unknown hardware"
    return f"{machine.get('hostname', '?')} ({hw})"


def load_sources(paths: list[Path | str]) -> list[tuple[str, dict]]:
    """Load the runs to merge: at least two, each a single-machine run, no two from the same machine."""
    if len(paths) < 2:
        raise ReportFormatError("--merge needs at least two run directories (for example the CPU box's and "
                                "the GPU box's reports/latest).")
    loaded = []
    seen: dict[str, str] = {}
    for p in paths:
        src = str(resolve_report_path(p))
        rep = load_report(p)
        if rep.get("kind", "run") != "run":
            raise ReportFormatError(f"{src} is itself a merged report; merge the single-machine runs "
                                    f"instead.")
        mid = rep["machine"]["machine_id"]
        if mid in seen:
            raise ReportFormatError(f"{src} and {seen[mid]} come from the same machine ({mid!r}); --merge "
                                    f"combines different machines. Use `nsverify compare A B` for two runs "
                                    f"of one machine.")
        seen[mid] = src
        loaded.append((src, rep))
    return loaded


def merge_reports(paths: list[Path | str]) -> dict:
    """Load each run (a run directory, its report.json, or a reports root) and merge them."""
    loaded = load_sources(paths)
    labels: list[str] = []
    for _, rep in loaded:
        label = machine_label(rep["machine"])
        n, base = 2, label
        while label in labels:
            label, n = f"{base} #{n}", n + 1
        labels.append(label)
    sections: dict[str, dict] = {}
    regressions = []
    for label, (_, rep) in zip(labels, loaded):
        for name, sec in rep["sections"].items():
            entry = sections.setdefault(name, {"title": sec.get("title", name), "status": "ok",
                                               "machines": {}})
            entry["machines"][label] = sec
            if sec.get("status") == "failed":
                entry["status"] = "failed"
        for r in rep["regressions"]:
            regressions.append({**r, "machine": label, "message": f"[{label}] {r['message']}"})
    return {
        "schema": SCHEMA,
        "kind": "merged",
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "quick": any(rep.get("quick") for _, rep in loaded),
        "machine": {"machines": {label: rep["machine"] for label, (_, rep) in zip(labels, loaded)}},
        "sources": [{"label": label, "path": src, "created": rep["created"],
                     "machine_id": rep["machine"]["machine_id"]}
                    for label, (src, rep) in zip(labels, loaded)],
        "sections": sections,
        "regressions": regressions,
    }
