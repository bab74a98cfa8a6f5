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
                                 setting=key)
    park = overhead_claims(raw["park_overhead"], "natural") if raw.get("park_overhead") else []
    text = describe(prov)
    if len(raw.get("runs") or []) > 1:  # a run stopped by its time limit, finished by `claims.py --resume`
        text += "; " + "; ".join(f"resumed {describe(r['provenance'])} for {', '.join(r['parts'])}"
                                 for r in raw["runs"][1:])
    return {"provenance": text, "dry_run": bool(raw.get("dry_run")),
            "zones": {"settings": settings, "bertoin": bertoin,
                      "claims": on_stored_run(claims, "gpu-claims", prov["device"])},
            "park": {"overhead": raw.get("park_overhead", {}),
                     "claims": on_stored_run(park, "gpu-claims", prov["device"])}}
