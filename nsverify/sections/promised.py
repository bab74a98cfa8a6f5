"""Report section "What PyTorch promises": the documented rule's promise at every conventions cell, across the
recorded torch and JAX releases (the shipped data: no environment at report time), and the equivalent
formulations measured on the installed torch; the findings (each promise break and each disagreeing pair, with its
first release and reproduction script) go to ``data.findings`` and ``data.repro``, and the report's first screen
lists them (:func:`nsverify.report.html.findings_list`)."""
from __future__ import annotations

from nsverify.report import section, table


def _release_rows(framework: str) -> list[list]:
    """Per recorded release: how many cells follow the promise, by status."""
    from nsverify.conventions import baselines as bl
    from nsverify.conventions.promised import FOLLOWS, annotate

    data_dir = bl.DATA_DIRS[framework]
    rows = []
    for rel in bl.recorded_releases(data_dir):
        rs = list(bl.load_cached(rel, data_dir).results.values())
        annotate(rs, framework)
        rows.append([framework, rel] + [sum(r.follows == k for r in rs) for k in FOLLOWS])
    return rows


def _history_rows(hist: list[dict]) -> list[list]:
    return [[h["framework"], h["op"], h["case"], h["promised"]["text"], ",".join(f"{v:.4g}" for v in h["derivative"]),
             f"{h['dtype']}/{h['mode']}", h["first_release"] + (" (oldest recorded)" if h["first_is_oldest"] else ""),
             h["follows_from"] or "-", h["cells"]] for h in hist]


def _classes(form_results) -> list[list]:
    """Per group and point: the formulations grouped by the derivative they return (float32 eager)."""
    by: dict = {}
    for r in form_results:
        if r.dtype == "float32" and r.mode == "eager":
            key = "error" if r.error else ",".join(f"{v:.4g}" for v in r.derivative)
            by.setdefault((r.group, r.point), {}).setdefault((key, r.follows), []).append(r.formulation)
    return [[g, p, v, fol, ", ".join(names)] for (g, p), cls in by.items() for (v, fol), names in cls.items()]


@section("promised", "What PyTorch promises: the documented rule, and equivalent formulations", order=12,
         description="the documented rule at every recorded conventions cell; the formulation table on this torch")
def promised_section(ctx) -> dict:
    from nsverify.conventions import findings as fd
    from nsverify.conventions import formulations as fm
    from nsverify.conventions.baselines import recorded_releases
    from nsverify.conventions.claims import promise_claims

    hist = fd.promise_history("torch") + fd.promise_history("jax")
    dtypes = ("float32",) if ctx.quick else fm.DTYPES
    forms = ctx.checkpoint("formulations", lambda: [vars(r) for r in fm.measure(dtypes=dtypes)])
    forms = [fm.FormResult(**r) for r in forms]
    found = fd.promise_findings(hist) + fd.formulation_findings(forms)
    breaking = [h for h in hist if h["now"] == "breaks"]
    fixed = [h for h in hist if h["now"] == "follows"]
    pairs = fm.disagreements(forms)
    summary = (f"PyTorch's documented rule (autograd notes, 'Gradients for non-differentiable functions'): the "
               f"gradient; at a locally convex (concave) kink or tie the sub- (super-)gradient of minimum norm, "
               f"computed exactly in the space of each cell's inputs. {len(breaking)} cases break it in the newest "
               f"recorded release ({', '.join(sorted({h['framework'] for h in breaking})) or 'none'}); "
               f"{len(fixed)} broke it and follow it now ("
               + ("; ".join(f"{h['op']} [{h['case']}] from {h['follows_from']}" for h in fixed) or "none")
               + f"). Equivalent formulations ({len(fm.TABLE)} groups, {', '.join(dtypes)}; eager, func, jvp): "
               f"{len(pairs)} pairs disagree. {len(found)} findings, each with a reproduction script.")
    tables = [table("Cases that break the promise: promised value (exact), what the framework returns, first and "
                    "last release", ["framework", "op", "case", "promised", "got", "column", "first release",
                                     "follows from", "cells"], _history_rows(hist)),
              table("Cells that follow the promise, per recorded release",
                    ["framework", "release", "yes", "rounding", "no", "not covered", "n/a"],
                    _release_rows("torch") + _release_rows("jax")),
              table("Equivalent formulations at their kinks and ties (float32, eager): who returns what",
                    ["group", "point", "derivative", "follows the promise", "formulations"], _classes(forms))]
    metrics = [{"key": f"promised|{h['framework']}|{h['op']}|{h['case']}", "kind": "convention", "value": h["now"]}
               for h in hist]
    claims = promise_claims([h for h in hist if h["framework"] == "torch"], recorded_releases(),
                            next((r.derivative for r in forms if (r.group, r.point, r.formulation, r.dtype, r.mode)
                                  == ("relu", "x=0", "maximum(x, 0)", "float32", "eager")), None))
    metrics.append({"key": "promised|formulation_pairs_disagreeing", "kind": "info", "value": len(pairs)})
    return {"summary": summary, "tables": tables, "claims": claims,
            "data": {"metrics": metrics, "findings": [f.to_json() for f in found],
                     "repro": {f.id: f.script for f in found}}}
