"""Report section "NaN and inf at singular points": the singular-point cells of the conventions matrix
(:mod:`nsverify.conventions.singular`, docs/nan.md) measured on this machine's torch -- per program and point, the
class of the point (locally Lipschitz or not, undefined, overflow), the exact Clarke set, PyTorch's documented rule,
what PyTorch returned per dtype and mode, whether that follows the rule -- and the two claims the cells decide
(PyTorch returns the recorded classes; its reverse mode is NaN at locally Lipschitz points)."""
from __future__ import annotations

from nsverify.report import section, table

DTYPES = ("bfloat16", "float32", "float64")
MODES = ("eager", "func", "jvp")


def _rows(results) -> list[list]:
    """One row per program and point: its class, Clarke set, rule, the value class per mode (float32), whether
    every column follows the rule, and the culprit op."""
    from nsverify.conventions.singular import TABLE

    out = []
    for s in TABLE:
        cells = [r for r in results if (r.op, r.case) == (s.op, s.case)]
        per_mode = []
        for m in MODES:
            got = sorted({r.rule for r in cells if r.mode == m})
            per_mode.append("/".join(got) or "-")
        follows = {r.extra.get("follows_rule") for r in cells if r.rule != "error"}
        out.append([s.op, s.case, s.kind, s.clarke_text, s.rule_text, *per_mode,
                    "yes" if follows == {True} else "no" if follows == {False} else "partly", s.culprit or "-",
                    sum(r.as_expected for r in cells), len(cells)])
    return out


@section("nan-inf", "NaN and inf at singular points: which are bugs, and what the value should be", order=12,
         description="sqrt, norms, normalize, std, atan2, xlogy, acos/asin, the where NaN branch, a masked "
                     "softmax row, an overflowing exp: bf16/fp32/fp64 x eager/func/jvp on CPU")
def nan_section(ctx) -> dict:
    from nsverify.conventions.matrix import metrics
    from nsverify.conventions.singular import lipschitz_nonfinite, run_singular, singular_claims, summary_line

    results = run_singular(DTYPES, MODES)
    ctx.progress(f"{len(results)} singular cells measured")
    bugs = lipschitz_nonfinite(results)
    tables = [table("Singular points: the class, the exact Clarke set, PyTorch's documented rule and what its AD "
                    "returns (value class per mode over bf16/fp32/fp64; 'rule' = the rule's value)",
                    ["program", "point", "class", "Clarke set", "documented rule", *MODES, "follows the rule",
                     "culprit op", "as recorded", "evaluations"], _rows(results))]
    if bugs:
        tables.append(table("NaN/inf where the function is locally Lipschitz (bugs by the documented rule)",
                            ["program", "point", "dtype", "mode", "derivative", "culprit op"],
                            [[r.op, r.case, r.dtype, r.mode, ", ".join(f"{v:.4g}" for v in r.derivative),
                              r.extra.get("culprit") or "-"] for r in bugs]))
    unexpected = [r for r in results if not r.as_expected]
    jax_results, jax_note = _jax_cells()
    if jax_results:
        tables.append(table("JAX at the same points (float32/float64; value class per mode)",
                            ["program", "point", "class", *JAX_MODES, "as recorded", "evaluations"],
                            _jax_rows(jax_results)))
        unexpected += [r for r in jax_results if not r.as_expected]
    return {"summary": summary_line(results) + " " + (summary_line(jax_results) if jax_results else jax_note),
            "tables": tables, "claims": singular_claims(results),
            "data": {"metrics": metrics(results) + [
                {"key": "singular_lipschitz_nonfinite", "kind": "info", "value": len(bugs)},
                {"key": "singular_unexpected", "kind": "counterexample", "value": len(unexpected)}],
                "unexpected": [vars(r) for r in unexpected]}}


JAX_MODES = ("grad", "jvp", "jit")


def _jax_cells() -> tuple[list, str]:
    """JAX's singular cells when JAX is installed (the optional extra nsverify[jax]), else why not."""
    from nsverify.conventions.jax_matrix import JaxMissingError
    from nsverify.conventions.singular import run_singular_jax

    try:
        return run_singular_jax(("float32", "float64"), JAX_MODES), ""
    except JaxMissingError:
        return [], "JAX is not installed here (pip install 'nsverify[jax]'): no JAX column."


def _jax_rows(results) -> list[list]:
    rows: dict = {}
    for r in results:
        rows.setdefault((r.op, r.case), []).append(r)
    return [[op, case, cells[0].extra.get("kind"),
             *("/".join(sorted({r.rule for r in cells if r.mode == m})) or "-" for m in JAX_MODES),
             sum(r.as_expected for r in cells), len(cells)] for (op, case), cells in rows.items()]
