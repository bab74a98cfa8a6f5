"""The GPU run of the claim ledger (``scripts/gpu/claims.py`` -> ``nsverify/data/gpu/claims.json``), judged with
the same rules as the CPU runs: full-width VGG11 on natural crops (Table 3.2, BN), Bertoin's dichotomy with the
784-2048^3-10 MLP in float16, and the monitor's overhead on a ResNet18.

:func:`load` returns None without the file; the zones and park sections add its claims, marked ``[GPU]``, and
its provenance (device, torch, date, command) to their tables.
"""
from __future__ import annotations

from pathlib import Path

from nsverify.claims.provenance import describe, gpu_file, load_measurement
from nsverify.claims.record import on_stored_run

CLAIMS_JSON = gpu_file("claims")
PERF_JSON = gpu_file("perf")
#: the network and width of Park et al.'s App. J.2 overhead (ResNet18 on CIFAR-10): the monitor claim judged on a
#: stored GPU run reads this entry of its ``monitor`` list
MONITOR_NETWORK = ("resnet18", 1.0)


def newest_monitor_run(claims_run: dict | None, perf_path: Path | str = PERF_JSON) -> dict | None:
    """The stored GPU perf run (``scripts/gpu/perf.py``) when it is newer than ``claims_run`` and measured the
    monitor on :data:`MONITOR_NETWORK`: ``{"overhead": {network: {"per_step"}}, "commit", "date", "text",
    "others"}``; None otherwise. The monitor was rewritten between the two runs: only the newest one judges it."""
    from nsverify.claims.provenance import load_measurement

    perf = load_measurement(perf_path, require_provenance=False)
    if not perf or not perf.get("monitor") or perf.get("dry_run"):
        return None
    prov = perf.get("provenance") or {}
    date = prov.get("date_utc") or prov.get("date") or ""
    older = (claims_run or {}).get("provenance", {}).get("date", "")
    if claims_run is not None and not (date and older and date > older):
        return None
    entry = next((m for m in perf["monitor"] if (m.get("model"), m.get("width")) == MONITOR_NETWORK), None)
    if entry is None:
        return None
    steps = [{"plain_s": r["plain_s"], "monitored_s": r["monitored_s"], "tied": r.get("tied_windows_all", 0),
              "tied_positive": r.get("tied_windows", 0)} for r in entry["per_step"]]
    commit = (prov.get("git_commit") or "")[:7]
    text = (f"{prov.get('gpu') or prov.get('device')}, torch {prov.get('torch')}, {date}, commit {commit}, "
            f"`{prov.get('command')}`")
    others = ", ".join(f"{m['model']} width {m['width']:g}: x{m['ratio']:.2f}" for m in perf["monitor"]
                       if (m.get("model"), m.get("width")) != MONITOR_NETWORK)
    return {"overhead": {"ResNet18": {"per_step": steps}}, "commit": commit, "date": date, "text": text,
            "others": others, "device": prov.get("gpu") or prov.get("device")}


def load(path: Path | str = CLAIMS_JSON) -> dict | None:
    """``{"provenance", "zones": {"settings", "bertoin", "claims"}, "park": {"overhead", "claims"}}`` or None."""
    from nsverify.papers.park.repro import overhead_claims
    from nsverify.papers.zones.repro import bertoin_claims, bn_claim, setting_summary, table_3_2_claims

    raw = load_measurement(path)
    if raw is None:
        return None
    prov = raw["provenance"]
    sizes = raw.get("sizes", {})
    settings = {ds: {bn: setting_summary(res) for bn, res in by_bn.items()}
                for ds, by_bn in raw.get("settings", {}).items()}
    claims = []
    if "natural" in settings:
        label = f"VGG11 width {sizes.get('width')}, natural crops, batch {sizes.get('batch')}, {prov['device']}"
        s = settings["natural"]
        # the 16-bit rerun with the ReLU'(0) = 0 / 1 pair (tau2, Sec. 3.3.2) replaces the 16-bit rows when present
        claims += table_3_2_claims({**s["noBN"], **s.get("noBN16", {})}, label)
        if "BN" in s:
            claims.append(bn_claim(s["noBN"], s["BN"], label))
    bertoin = {k: setting_summary(v) for k, v in raw.get("bertoin", {}).items()}
    for key, s in bertoin.items():
        claims += bertoin_claims(s, f"MLP width {sizes.get('mlp_width')} x 2048, {key} kernels, {prov['device']}",
                                 setting=key, path=f"{key} CUDA")
    on_gpu = f"the stored GPU run's networks on {{data}} inputs ({prov['device']})"
    park = overhead_claims(raw["park_overhead"], "natural", on_gpu) if raw.get("park_overhead") else []
    newer, park_fresh = newest_monitor_run(raw), []
    if newer is not None:  # the monitor was rewritten since: this run's overhead is stale, the newest one judges
        why = (f"stale: measured before the monitor's rewrite (this run {prov['date']}, commit "
               f"{(prov.get('commit') or '')[:7]}); the newest run ({newer['text']}) judges it")
        park = [{**c, "held": None, "verdict": "undecided", "reason": f"{why}; this run's rule said {c['verdict']}: "
                                                                      f"{c['reason']}"} for c in park]
        fresh = overhead_claims(newer["overhead"], "natural")
        fresh = [{**c, "notes": f"newest GPU run {newer['text']}; other networks of that run: {newer['others']}"}
                 for c in fresh]
        park_fresh = on_stored_run(fresh, f"gpu-perf@{newer['commit']}", newer["device"])
    text = describe(prov)
    if len(raw.get("runs") or []) > 1:  # a run stopped by its time limit, finished by `claims.py --resume`
        text += "; " + "; ".join(f"resumed {describe(r['provenance'])} for {', '.join(r['parts'])}"
                                 for r in raw["runs"][1:])
    return {"provenance": text, "dry_run": bool(raw.get("dry_run")),
            "zones": {"settings": settings, "bertoin": bertoin,
                      "claims": on_stored_run(claims, "gpu-claims", prov["device"])},
            "park": {"overhead": raw.get("park_overhead", {}),
                     "claims": on_stored_run(park, "gpu-claims", prov["device"]) + park_fresh}}
