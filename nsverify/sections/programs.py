"""Report section "Programs": ties and kinks on computed operands inside compiled programs, and second order at
kinks (issue 37). It runs :mod:`nsverify.conventions.programs` (every program in eager, torch.func.grad, jvp,
deterministic, aot_eager and Inductor; the compiled cells in child processes; with JAX installed also jax_grad and
jax_jit of each program's JAX twin, :mod:`nsverify.conventions.programs_jax`) and :mod:`nsverify.conventions.grad2`,
and hands the findings to the report's first screen (``data["program_findings"]``, read by
:mod:`nsverify.report.program_findings`)."""
from __future__ import annotations

from nsverify.report import section, table


def gradient_text(values, shown: int = 6) -> str:
    """A cell's returned gradient for the table: its first ``shown`` entries, floats to 4 significant digits; a
    non-finite cell stores its entries as text ("nan", "inf"), printed as they are."""
    return ", ".join(f"{v:.4g}" if isinstance(v, (int, float)) else str(v) for v in values[:shown])


@section("programs", "Programs: ties on computed operands in compiled regions; second order at kinks", order=12,
         description="matmul -> amax, conv -> relu -> max_pool, attention -> softmax -> max, ... in eager, func, jvp, "
                     "deterministic, aot_eager and Inductor; double backward and forward-over-reverse at kinks")
def programs_section(ctx) -> dict:
    from nsverify.conventions import grad2, programs

    # quick: float32 and float16 (the 16-bit dtype where a stored tied value is rounded: square_* under Inductor)
    dtypes = ("float32", "float16") if ctx.quick else programs.DEFAULT_DTYPES
    cells = programs.run_programs(None, dtypes, ["cpu"], programs.DEFAULT_MODES,
                                  repro_dir=ctx.scratch_file("program-scripts"),
                                  progress=lambda msg: ctx.progress(msg))
    from nsverify.conventions import programs_jax  # the JAX column: jax.grad and jax.jit of each twin, when installed

    jax_line = "JAX is not installed here (pip install 'nsverify[jax]'): no JAX cells."
    if programs_jax.available():
        cells += programs.run_programs(None, dtypes, ["cpu"], programs.JAX_MODES)
        jax_line = programs_jax.summary(cells) + "."
    findings = programs.program_findings(cells, script_dir=ctx.scratch_file("program-findings"))
    g2 = grad2.run_grad2()
    agree = grad2.agreement(g2)
    rows = [[c.program, c.dtype, c.mode, c.piece, c.in_clarke, gradient_text(c.gradient), c.error or ""]
            for c in cells]
    h_rows = [[c.case, c.op, c.mode, c.bouligand or "none", c.in_hull, c.consistent or "none", c.error or ""]
              for c in g2]
    outside = [c for c in cells if c.in_clarke == "no"]
    t_out = [c for c in outside if c.mode not in programs.JAX_MODES]
    not_bouligand = sorted({c.case for c in g2 if c.error is None and c.bouligand is None})
    disagree = [a["case"] for a in agree if a["agree"] is False]
    summary = (f"{len(programs.PROGRAMS)} programs x {len(dtypes)} dtype(s) x {len(programs.DEFAULT_MODES)} modes on "
               f"CPU: {len(t_out)} cells outside the Clarke set, {len(findings)} findings (modes that disagree or "
               f"leave the Clarke set). Second order ({len(grad2.CASES)} cases, {len(grad2.MODES)} modes, float64): "
               f"the Hessian of no piece for {', '.join(not_bouligand) or 'none'}; reverse-over-reverse and "
               f"forward-over-reverse disagree for {', '.join(disagree) or 'none'}. {jax_line}")
    cuda = cuda_cells()
    if cuda is not None:
        summary += " " + cuda["line"]
    metrics = [{"key": "program_findings", "kind": "info", "value": len(findings)},
               {"key": "program_cells_outside_clarke", "kind": "counterexample", "value": len(outside)},
               {"key": "grad2_not_bouligand", "kind": "info", "value": len(not_bouligand)}]
    return {"summary": summary, "claims": [],
            "tables": [table("Program cells (piece: the Bouligand gradient returned; hull: inside the Clarke set, no "
                             "piece)", ["program", "dtype", "mode", "piece", "in Clarke", "gradient", "error"], rows),
                       table("Findings", ["program", "finding"], [[f["program"], programs.finding_line(f)]
                                                                  for f in findings]),
                       table("Second order at kinks and ties", ["case", "op", "mode", "Bouligand Hessian of",
                                                                "in hull", "same piece as the gradient", "error"],
                             h_rows)]
            + ([cuda["table"]] if cuda is not None else []),
            "data": {"metrics": metrics, "program_findings": findings}}


#: the stored CUDA run of the programs (``nsverify conventions --device cuda --programs --json``, on a lent GPU)
GPU_PROGRAMS = "programs"


def cuda_cells(path=None) -> dict | None:
    """The stored CUDA run of the programs (``nsverify/data/gpu/programs.json``), or None without one: a summary
    line with its provenance (GPU, torch, date, commit) and the findings' table. A file without its provenance
    raises :class:`~nsverify.claims.provenance.ProvenanceError`."""
    from nsverify.claims.provenance import gpu_file, load_measurement
    from nsverify.conventions import programs

    data = load_measurement(path or gpu_file(GPU_PROGRAMS))
    if data is None:
        return None
    prov, cells = data["provenance"], data["programs"]
    outside = [c for c in cells if c["in_clarke"] == "no"]
    nonfinite = [c for c in outside if c["piece"] == "nonfinite"]
    refused = [c for c in cells if c["piece"] == "error"]
    commit = (prov.get("commit") or "?")[:7]
    line = (f"On CUDA (stored run: {prov['device']}, torch {prov['torch']}, {prov['date'][:10]}, commit {commit}): "
            f"{len(cells)} cells, {len(outside)} outside the Clarke set ({len(nonfinite)} of them non-finite), "
            f"{len(refused)} refused by the framework, {len(data['findings'])} findings.")
    rows = [[f["program"], programs.finding_line(f)] for f in data["findings"]]
    return {"line": line, "table": table(f"Findings on CUDA ({prov['device']}, torch {prov['torch']}, "
                                         f"{prov['date'][:10]})", ["program", "finding"], rows),
            "cells": len(cells), "outside": len(outside), "nonfinite": len(nonfinite), "refused": len(refused)}
