"""Report section "Across torch releases": the conventions matrix measured on each torch release (the data shipped
in ``nsverify/data/conventions/``, written by ``nsverify releases``), release by release: the cells that changed
since the previous recorded release, with the first release that shows each change, its Clarke status on both
sides and a reproduction script. Reads the shipped data only: no network, no environment at report time."""
from __future__ import annotations

import json

from nsverify.report import section, table


def _index(data_dir) -> dict:
    try:
        return json.loads((data_dir / "index.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def _change(g: dict) -> dict:
    """One grouped change as the report's timeline plot reads it (``data["changes"]``)."""
    ch = g["change"]
    return {"release": ch.since, "op": ch.op, "case": ch.case, "rule_before": ch.before.rule,
            "rule_after": ch.after.rule, "clarke_before": ch.before.in_clarke, "clarke_after": ch.after.in_clarke,
            "cells": g["cells"]}


@section("releases", "Across torch releases: conventions that changed, and when", order=11,
         description="the conventions matrix of every recorded torch release, compared release by release")
def releases_section(ctx) -> dict:
    from nsverify.conventions import baselines
    from nsverify.conventions.claims import release_claims
    from nsverify.conventions.releases import Sweep, all_changes, change_script, format_timeline

    data_dir = baselines.DATA_DIR
    index = _index(data_dir)
    sweep = Sweep(data_dir)
    recorded = sweep.measured()
    if not recorded:
        return {"summary": f"No per-release conventions data in {data_dir}: run `nsverify releases 2.4..2.14 "
                           "--publish nsverify/data/conventions`.", "tables": [], "claims": [],
                "data": {"metrics": []}}
    failed = sweep.failures()
    rows = sweep.timeline(index.get("available", recorded))
    changes = all_changes(rows)
    grouped = [(row["release"], g) for row in rows for g in baselines.group(row["changes"])]
    prov = {rel: sweep.run(rel).meta for rel in recorded}
    table_rows = []
    for row in rows:
        rel = row["release"]
        meta = prov[rel]
        p = meta.get("provenance", {})
        gs = baselines.group(row["changes"])
        table_rows.append([rel, meta.get("torch", ""), p.get("date", ""), "-" if row["prev"] is None
                           else len(row["changes"]), "; ".join(g["text"] for g in gs) or
                           ("(first recorded release)" if row["prev"] is None else "none")])
    for rel, f in sorted(failed.items(), key=lambda kv: baselines.release_key(kv[0])):
        table_rows.append([rel, "-", "-", "not measured", f["reason"][:200]])
    table_rows.sort(key=lambda r: baselines.release_key(r[0]))
    repro_rows, scripts = [], {}
    for _rel, g in grouped:
        ch = g["change"]
        name = f"{ch.since} {ch.op} [{ch.case}] {ch.key[2]} {ch.key[4]}"
        try:
            scripts[name] = change_script(ch)
        except (ValueError, OSError, TypeError, StopIteration) as exc:
            scripts[name] = f"# no standalone script: {exc}"
        repro_rows.append([ch.op, ch.case, f"{baselines.fmt_value(ch.before)} -> {baselines.fmt_value(ch.after)}",
                           ch.since if ch.exact else f"between {ch.prev} and {ch.since}",
                           f"{ch.before.in_clarke} -> {ch.after.in_clarke}", g["cells"], name])
    tables = [table("Release by release: cells changed since the previous recorded release",
                    ["release", "torch", "measured (UTC)", "cells changed", "changes"], table_rows)]
    if repro_rows:
        tables.append(table("Each change, its first release and Clarke status (scripts in data.repro)",
                            ["op", "case", "derivative", "first release", "Clarke", "cells", "script"], repro_rows))
    claims = release_claims(recorded, changes)
    summary = (f"{len(recorded)} torch releases recorded ({recorded[0]} .. {recorded[-1]}; CPU; "
               f"{', '.join(sorted({r.mode for r in sweep.run(recorded[-1]).results.values()}))})"
               f"{'; not measured: ' + ', '.join(sorted(failed, key=baselines.release_key)) if failed else ''}. "
               f"{len(changes)} cells changed across them, in {len(grouped)} changes: "
               + ("; ".join(f"{g['change'].op} [{g['change'].case}] since {g['change'].since}" for _, g in grouped)
                  or "none") + ".")
    metrics = [{"key": f"release_changes|{row['release']}", "kind": "info", "value": len(row["changes"])}
               for row in rows if row["prev"] is not None]
    return {"summary": summary, "tables": tables, "claims": claims,
            "data": {"metrics": metrics, "timeline": format_timeline(rows, failed), "repro": scripts,
                     "releases": [row["release"] for row in rows], "changes": [_change(g) for _, g in grouped]}}
