"""Report section "Oracle": known-answer table of the exact Clarke oracle (the papers' cases and their claims:
:mod:`nsverify.papers.known_answers`), fuzzing counts, pruning numbers."""

from __future__ import annotations

from nsverify.report import section, table


@section(
    "oracle",
    "Oracle: exact Clarke membership of AD outputs",
    order=20,
    description="known answers (Park, Despres, Boustany), fuzzing, pruning",
)
def oracle_section(ctx) -> dict:
    import nsverify
    from nsverify.papers.cases import CASES, kink_net
    from nsverify.papers.known_answers import format_clarke, format_vector, known_answers
    from nsverify.reference.fuzz import run_fuzz, summarize

    ka = known_answers(progress=ctx.progress)
    rows, metrics, claims = [], [], list(ka["claims"])
    from nsverify.papers.despres.repro import despres

    n_assoc = int(ctx.options.get("despres_cases", 40 if ctx.quick else 200))
    ctx.progress(f"Despres Sec. 5: AD against the associated gradient on {n_assoc} networks at exact ties")
    assoc = despres(n_assoc)
    claims += assoc["claims"]
    metrics.append({"key": "despres|associated|differ", "kind": "counterexample", "value": assoc["counts"]["differ"]})
    for k in ka["cases"]:
        case, v = k["case"], k["verdict"]
        rows.append(
            [
                case.name,
                case.source,
                case.expected,
                v.status,
                format_vector(v.ad),
                format_clarke(v),
                (v.certificate or {}).get("kind", "-"),
                "yes" if k["rechecked"] else "NO",
            ]
        )
        metrics.append({"key": f"verdict|{case.name}", "kind": "verdict", "value": v.status})
    n_fuzz = int(ctx.options.get("oracle_fuzz", 20 if ctx.quick else 150))
    ctx.progress(f"fuzzing {n_fuzz} random programs against the independent reference")
    fz = summarize(run_fuzz(n_fuzz, seed=2026, depth=3 if ctx.quick else 4, samples=6,
                            time_limit=5.0 if ctx.quick else 30.0, progress=ctx.progress))
    metrics.append({"key": "fuzz|disagreements", "kind": "counterexample", "value": fz["disagreements"]})
    metrics.append({"key": "fuzz|unknown", "kind": "info", "value": fz["unknown"]})
    n_vec = int(ctx.options.get("oracle_fuzz_vector", 10 if ctx.quick else 60))
    ctx.progress(f"fuzzing {n_vec} random programs with LayerNorm and attention nodes")
    fzv = summarize(run_fuzz(n_vec, seed=2026, depth=3, samples=6, time_limit=5.0 if ctx.quick else 30.0,
                             progress=ctx.progress, vector_nodes=True))
    metrics.append({"key": "fuzz_vector|disagreements", "kind": "counterexample", "value": fzv["disagreements"]})
    metrics.append({"key": "fuzz_vector|unknown", "kind": "info", "value": fzv["unknown"]})
    metrics.append({"key": "fuzz_vector|tie_decided", "kind": "info", "value": fzv["vector_tie_decided"]})
    ctx.progress("pruning on the kink network (k = 8, 12)")
    prune = []
    for k in ctx.options.get("oracle_prune_ks", (8, 12) if not ctx.quick else (8,)):
        fn, w = kink_net(k)
        v = nsverify.check_gradient(fn, w)
        prune.append(
            [
                k,
                v.stats["pieces"],
                v.stats["lps"],
                2**k,
                round(2**k / max(1, v.stats["lps"]), 1),
                round(v.stats["seconds"], 2),
            ]
        )
        metrics.append({"key": f"prune|k{k}|lps", "kind": "info", "value": v.stats["lps"]})
    mismatch = [r[0] for r in rows if r[2] != r[3]]
    summary = (
        f"{len(CASES)} known cases: {len(CASES) - len(mismatch)} give the expected verdict"
        + (f" (MISMATCH: {', '.join(mismatch)})" if mismatch else "")
        + f"; every certificate re-checked exactly from JSON. Fuzzing {fz['programs']} random programs at "
        f"exact ties against an independent reference ({fz['nearby_points']} generic nearby points): "
        f"{fz['disagreements']} disagreements, {fz['unknown']} unknown; {fzv['programs']} more with LayerNorm and "
        f"attention nodes ({fzv['vector_tie_programs']} meeting a kink or tie at their outputs, "
        f"{fzv['vector_tie_decided']} of them decided): {fzv['disagreements']} disagreements, "
        f"{fzv['unknown']} unknown."
    )
    ac = assoc["counts"]
    summary += (f" Despres Sec. 5: AD equals the associated gradient on {ac['compared'] - ac['differ']} of "
                f"{ac['compared']} networks at exact ties.")
    return {"summary": summary, "tables": _tables(rows, fz, prune, fzv), "claims": claims,
            "data": {"metrics": metrics, "fuzz": fz, "fuzz_vector": fzv, "despres": ac}}


def _tables(rows: list, fz: dict, prune: list, fzv: dict) -> list:
    """The known-answer, fuzzing (scalar nodes; with LayerNorm and attention nodes) and pruning tables."""
    return [
        table("Known answers",
              ["case", "source", "expected", "verdict", "AD (PyTorch, float)", "Clarke set", "certificate",
               "re-checked"], rows),
        table("Fuzzing (first row: scalar nodes; second: with LayerNorm and attention nodes)", list(fz.keys()),
              [[v if not isinstance(v, dict) else ", ".join(f"{k}: {n}" for k, n in v.items()) or "-"
                for v in f.values()] for f in (fz, fzv)]),
        table("Pruning (one-hidden-layer ReLU net, first-layer parameters, k kinks)",
              ["k", "pieces", "LPs", "naive LPs (2^k)", "ratio", "seconds"], prune),
    ]
