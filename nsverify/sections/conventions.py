"""Report section: the conventions matrix (what PyTorch's AD returns at every registry kink and tie), each derivative
classified as a rule of the one vocabulary and compared with the rule the registry records."""
from __future__ import annotations

from pathlib import Path

from nsverify.claims.provenance import ProvenanceError, gpu_file, load_measurement
from nsverify.conventions.claims import cuda_claim, gpu_unreadable_claim, jax_claim, matrix_claims
from nsverify.report import section, table

DTYPES = ("float16", "bfloat16", "float32", "float64")
GPU_DATA = gpu_file("conventions")


def _rule_summary(rs) -> str:
    rules = sorted({r.rule for r in rs})
    return rules[0] if len(rules) == 1 else "/".join(rules) + " *"


def _run_cells(ctx, dtypes, compile_dtypes, repro_dir) -> list:
    """Every cell in child processes (eager, func, jvp; then compile), with a heartbeat line on stderr while a
    step is silent (a compile step can be: :class:`nsverify.devices.Heartbeat`)."""
    from nsverify.conventions.isolation import run_matrix_isolated
    from nsverify.devices import Heartbeat

    with Heartbeat("evaluating the eager/func/jvp cells in a child process", prefix=f"[{ctx.section}] ") as hb:

        def progress(message, done=None, total=None):
            ctx.progress(message, done, total)
            hb.beat()

        results = run_matrix_isolated(None, dtypes, ["cpu"], ["eager", "func", "jvp"], progress=progress,
                                      repro_dir=repro_dir)
        hb.beat(f"compiling with torch.compile ({', '.join(compile_dtypes)}) in a child process")
        results += run_matrix_isolated(None, compile_dtypes, ["cpu"], ["compile"], progress=progress,
                                       repro_dir=repro_dir)
    return results


@section("conventions", "Conventions matrix: PyTorch's derivative at kinks and ties", order=10,
         description="every registry primitive x 4 dtypes x eager/func/jvp on CPU (+ compile)")
def conventions_section(ctx) -> dict:
    from nsverify import conventions as cv
    from nsverify.conventions.matrix import rules_text

    # in child processes: a crash inside torch is a crashed cell with a reproduction script, not a dead nightly
    repro_dir = ctx.scratch_file("crashed")
    # torch.compile costs about a minute per dtype on a small CPU: quick mode compiles float32 only
    compile_dtypes = ("float32",) if ctx.quick else DTYPES
    results = _run_cells(ctx, DTYPES, compile_dtypes, repro_dir)
    crashed = cv.crashed(results)

    by_case: dict = {}
    for r in results:
        by_case.setdefault((r.op, r.case), []).append(r)
    rows = []
    for (op, case), rs in by_case.items():
        f32 = next((r for r in rs if r.dtype == "float32" and r.mode == "eager"), rs[0])
        per_mode = [_rule_summary([r for r in rs if r.mode == m]) or "-" for m in cv.MODES]
        rows.append([op, case, f32.expected, f32.observed or "-", ", ".join(f"{v:.4g}" for v in f32.derivative[:8]),
                     f32.in_clarke] + per_mode + [sum(r.as_expected for r in rs), len(rs)])
    unexpected = [r for r in results if not r.as_expected and r.rule != "crashed"]
    diffs = cv.differences(results)
    compile_vs_eager = cv.differences([r for r in results if r.mode in ("eager", "compile")
                                       and r.dtype in compile_dtypes])
    ops = sorted({r.op for r in results})
    tables = [table("Rule per primitive and case (CPU; a '*' marks rules that differ across dtypes)",
                    ["op", "case", "registry rule", "observed rule (fp32 eager)", "derivative (fp32 eager)",
                     "in Clarke set"] + list(cv.MODES) + ["as expected", "evaluations"], rows)]
    if diffs:
        tables.append(table("Cases whose rule differs across dtypes/modes/devices",
                            ["op", "case", "rules (the columns that follow each)"],
                            [[d["op"], d["case"], rules_text(d["rules"])] for d in diffs]))
    if crashed:
        tables.append(_crash_table(crashed))
    claims = matrix_claims(results, unexpected, compile_vs_eager, compile_dtypes)
    jax = _jax_part(results)
    tables += jax["tables"]
    claims += jax["claims"]
    outside = sorted({(r.op, r.case) for r in results if r.in_clarke == "no"})
    gpu = _gpu_part(cv, results)
    if gpu:
        tables.append(gpu["table"])
        claims.append(gpu["claim"])
        # the GPU file also holds that machine's CPU rows; the local CPU rows above already cover those keys
        results_gpu = [r for r in gpu.get("results", []) if r.device != "cpu"]
    else:
        results_gpu = []
    summary = (f"{len(ops)} primitives, {len(by_case)} kinks/tie cases, {len(results)} evaluations on CPU "
               f"({', '.join(DTYPES)}; eager, torch.func.grad, jvp; "
               f"compile for {', '.join(compile_dtypes)}). "
               f"{len(unexpected)} differ from the expected rule; {len(diffs)} cases differ across columns; "
               f"{len(crashed)} crashed their process{_crash_note(crashed)}. "
               + "".join(f"Crash no single cell reproduces: {note}. " for note in cv.batch_crashes(results))
               + f"Outside the Clarke set: {', '.join(f'{o} ({c})' for o, c in outside) or 'none'}."
               + ("" if gpu else " No GPU data (nsverify/data/gpu/conventions.json) yet.") + " " + jax["summary"])
    metrics = cv.metrics(results) + cv.metrics(results_gpu) + [
        {"key": "unexpected_rules", "kind": "counterexample", "value": len(unexpected)},
        {"key": "outside_clarke_cases", "kind": "info", "value": len(outside)},
        {"key": "crashed_cells", "kind": "counterexample", "value": len(crashed)},
        {"key": "batch_crashes", "kind": "counterexample", "value": len(cv.batch_crashes(results))},
    ] + jax["metrics"]
    return {"summary": summary, "tables": tables, "claims": claims,
            "data": {"metrics": metrics, "differences": diffs, "unexpected": [vars(r) for r in unexpected],
                     "crashed": [vars(r) for r in crashed],
                     "outside_clarke": [m["key"] for r, m in zip(results, cv.metrics(results)) if r.in_clarke == "no"]}}


def _jax_part(torch_results) -> dict:
    """PyTorch (this run) and JAX (the newest recorded release) side by side (:mod:`nsverify.conventions.sidebyside`):
    one table, differing rows and rows outside the Clarke set highlighted, and the claim that JAX stays in it."""
    from nsverify.conventions import sidebyside as sbs

    run, missing = sbs.newest_jax_run()
    if run is None:
        return {"tables": [], "claims": [], "metrics": [],
                "summary": "No recorded JAX run (nsverify/data/conventions/jax): run `nsverify releases --framework "
                           "jax ... --publish nsverify/data/conventions/jax`."}
    jax_results = list(run.results.values())
    rows, classes = sbs.table_rows(torch_results, jax_results, missing)
    ps = sbs.pairs(torch_results, jax_results)
    differ = [p for p in ps if p.differs]
    out_jax = [r for r in jax_results if r.in_clarke == "no"]
    import torch

    title = (f"PyTorch {torch.__version__} vs JAX {run.meta.get('version')} (recorded "
             f"{run.meta.get('provenance', {}).get('date', '?')}): {len(differ)} of {len(ps)} paired cells differ "
             f"(modes {', '.join(f'{a}/{b}' for a, b in sbs.MODE_PAIRS)}); highlighted: DIFFERS, OUTSIDE the "
             "Clarke set")
    tab = table(title, sbs.COLUMNS, rows)
    tab["row_classes"] = classes
    claim = jax_claim(jax_results, run.meta.get("version"))
    ops_differ = sorted({(p.op, p.case) for p in differ})
    return {"tables": [tab], "claims": [claim],
            "metrics": [{"key": "torch_jax_differing_cells", "kind": "info", "value": len(differ)},
                        {"key": "jax_outside_clarke_cells", "kind": "counterexample", "value": len(out_jax)}],
            "summary": f"Side by side with JAX {run.meta.get('version')}: {len(differ)} of {len(ps)} paired cells "
                       f"differ, in {len(ops_differ)} cases ({', '.join(f'{o} [{c}]' for o, c in ops_differ)}); "
                       f"{len(out_jax)} JAX cells outside the Clarke set; no JAX counterpart: "
                       f"{', '.join(m['op'] for m in missing) or 'none'}."}


def _crash_note(crashed) -> str:
    return f" (reproduction scripts in {Path(crashed[0].extra['repro']).parent})" if crashed else ""


def _crash_table(crashed):
    """The cells whose evaluation killed its child process, with why and the script that reproduces each."""
    return table(f"Crashed cells: {len(crashed)} evaluation(s) killed their child process (a crash inside torch)",
                 ["op", "case", "dtype", "mode", "why", "reproduction script"],
                 [[r.op, r.case, r.dtype, r.mode, r.error, r.extra.get("repro", "")] for r in crashed])


def _gpu_part(cv, cpu_results) -> dict | None:
    """Compare with the GPU run committed under nsverify/data/gpu/conventions.json, if present."""
    try:
        data = load_measurement(GPU_DATA, require_provenance=False)
        if data is None:
            return None
        gpu = [cv.Result(**{k: v for k, v in r.items() if k in cv.Result.__dataclass_fields__})
               for r in data["results"]]
    except (ProvenanceError, KeyError, TypeError) as exc:
        return {"table": table("GPU data", ["problem"], [[f"unreadable {GPU_DATA.name}: {exc}"]]),
                "claim": gpu_unreadable_claim(str(exc))}
    # the stored run's own CPU rows (same torch, same machine) are the comparison; this run's CPU rows (another
    # torch release, perhaps) only when the stored run has none
    import torch

    own = [r for r in gpu if r.device == "cpu"]
    cuda = [r for r in gpu if r.device != "cpu"]
    ref_rows, ref = ((own, f"the stored run's own CPU rows, torch {data.get('torch')}") if own else
                     (cpu_results, f"this run's CPU rows, torch {torch.__version__}"))
    cpu = {(r.op, r.case, r.dtype, r.mode): r.rule for r in ref_rows}
    rows, differ, compared = [], 0, 0
    for r in cuda:
        c = cpu.get((r.op, r.case, r.dtype, r.mode))
        if c is None:
            continue
        compared += 1
        if c != r.rule:
            differ += 1
            rows.append([r.op, r.case, r.dtype, r.mode, c, r.rule])
    meta = data.get("meta", {})
    title = (f"CUDA vs CPU ({meta.get('device_name', 'GPU')}, torch {data.get('torch')}, against {ref}): "
             f"{differ} of {compared} matched evaluations differ")
    return {"results": gpu, "table": table(title, ["op", "case", "dtype", "mode", "cpu", "cuda"], rows),
            "claim": cuda_claim(differ, compared, meta.get("device_name", "GPU"), data.get("torch"), ref)}
