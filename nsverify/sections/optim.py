"""Report section: optimizers on nonsmooth problems (INNAprop family) and the dying-ReLU study. The experiments
and their verdicts are :mod:`nsverify.papers.innaprop.repro`'s and :mod:`nsverify.papers.arnekvist.repro`'s;
this module picks the budgets and renders."""

from __future__ import annotations

import os

from nsverify.claims.provenance import gpu_file, load_measurement
from nsverify.report import figure_png, section, table
from nsverify.report.claims_table import Parts, finite_metrics

CONVEX = ("lasso", "hinge_svm", "lad", "max_affine")
COMPARED = ("AdamW", "SGD", "heavy-ball", "INNA", "INNAprop(0.1,0.9)", "INNAprop(1,1)", "INNAprop(2,2)")


def _fmt(s: dict | None, digits: int = 3) -> str:
    if not s or s.get("mean") is None:
        return "n/a"
    return f"{s['mean']:.{digits}g} [{s['lo']:.{digits}g}, {s['hi']:.{digits}g}]"


def _conv_metric(key: str, s: dict) -> dict:
    return {
        "key": key,
        "kind": "convergence",
        "value": s["mean"],
        "spread": s["spread"],
        "lo": s["lo"],
        "hi": s["hi"],
    }


def _curves_figure(results: dict):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results), figsize=(4 * len(results), 3.2), squeeze=False)
    for ax, (prob, res) in zip(axes[0], results.items()):
        for o, runs in res["runs"].items():
            key = "gap" if "gap" in runs[0] else "values"
            n = min(len(r[key]) for r in runs)
            mean = [sum(r[key][i] for r in runs) / len(runs) for i in range(n)]
            ax.semilogy(runs[0]["steps"][:n], [max(m, 1e-12) for m in mean], label=o, lw=1.2)
        ax.set_title(prob)
        ax.set_xlabel("step")
    axes[0][0].set_ylabel("f - f* (mean over seeds)")
    axes[0][-1].legend(fontsize=6)
    return figure_png(fig)


def _region_figure(rmap: dict):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    gammas = sorted({c["gamma"] for c in rmap["cells"]}, reverse=True)
    betas = sorted({c["beta"] for c in rmap["cells"]})
    grid = [
        [next(c["dead"] for c in rmap["cells"] if c["gamma"] == g and c["beta"] == b) for b in betas]
        for g in gammas
    ]
    fig, ax = plt.subplots(figsize=(5, 3.2))
    im = ax.imshow(grid, vmin=0, vmax=1, cmap="magma")
    ax.set_xticks(range(len(betas)), [f"{b:g}" for b in betas])
    ax.set_yticks(range(len(gammas)), [f"{g:g}" for g in gammas])
    ax.set_xlabel("momentum beta")
    ax.set_ylabel("target scale gamma")
    ax.set_title("share of initializations ending in the dead cone")
    fig.colorbar(im)
    return figure_png(fig)


@section(
    "optim",
    "Optimizers on nonsmooth problems and dying ReLU",
    order=60,
    description="INNAprop family on problems with known optima, precision study, dying-ReLU region map",
)
def optim_section(ctx) -> dict:
    from nsverify.papers.innaprop import repro as innaprop
    from nsverify.papers.innaprop.harness import torch_threads

    q = ctx.quick
    p = Parts()
    seeds = (0, 1) if q else (0, 1, 2, 3, 4)
    with torch_threads(1):
        ctx.progress("INNAprop identities")
        idr = innaprop.identities()
        ident = idr["runs"]
        for k, v in ident.items():
            p.metrics.append({"key": f"innaprop_vs_adamw_bitwise|{k}|cpu", "kind": "counterexample",
                              "value": v["mismatched_steps"]})
        p.claims += idr["claims"]
        results = _convergence(ctx, seeds, p)
        prec = _precision(ctx, seeds, p)
        rmap = _region_map(ctx, p)
        net = _network(ctx, p)
        sp = _speed(ctx, p)
    gpu = _gpu_step_time(p)
    summary = (
        f"INNAprop, INNA, DINAdam and the momentum variant on {len(results)} "
        f"problems x {len(seeds)} seeds. INNAprop/AdamW step time {sp['ratio']:.2f}x at {sp['n_params']:.0e} "
        f"parameters (CPU, 1 thread; target <= {innaprop.STEP_TIME_TARGET}x)."
    )
    p.metrics = finite_metrics(p.metrics)
    return p.render(summary, {
        "identities": ident, "precision": prec, "region_map": rmap, "network": net, "speed": sp, "gpu": gpu,
        "convergence": {k: {"summary": r["summary"], "steps": r["steps"], "seeds": r["seeds"]}
                        for k, r in results.items()},
    }, claims_title="Claims (Boustany, Ch.4; Arnekvist et al.)")


def _convergence(ctx, seeds, p: Parts) -> dict:
    from nsverify.papers.innaprop import repro as innaprop

    q = ctx.quick
    steps = 300 if q else 2000
    problems = CONVEX + ("teacher_student",) + (() if q else ("digits_mlp",))
    conv = ctx.checkpoint(f"convergence-{q}", lambda: innaprop.convergence(problems, COMPARED, seeds=seeds,
                                                                            steps=steps, progress=ctx.progress))
    results = conv["results"]
    rows = []
    for prob, res in results.items():
        for o, s in res["summary"].items():
            rows.append([prob, o, _fmt(s["final"]), _fmt(s.get("speedup_vs_baseline")),
                         f"{s.get('matched_baseline', '-')}/{len(seeds)}" if o != "AdamW" else "-",
                         _fmt(s.get("accuracy"))])
            p.metrics.append(_conv_metric(f"{prob}|{o}|final", s["final"]))
    p.tables.append(table(
        f"Final f - f* (mean [95% CI] over {len(seeds)} seeds, {steps} steps, cosine schedule; "
        "digits: final train loss); speed-up = AdamW's best step / first step reaching "
        "AdamW's best (Table 4.4 metric)",
        ["problem", "optimizer", "final gap", "speed-up vs AdamW", "matched AdamW", "test acc"], rows))
    p.figures.append({"title": "Convergence curves (mean over seeds)", "png": _curves_figure(results)})
    p.claims += conv["claims"]
    return results


def _precision(ctx, seeds, p: Parts) -> dict:
    from nsverify.papers.innaprop import repro as innaprop

    ctx.progress("precision study")
    q = ctx.quick
    pr = ctx.checkpoint(f"precision-{q}", lambda: innaprop.precision(seeds, steps=400 if q else 3000))
    prec = pr["results"]
    prows = []
    for k, v in prec.items():
        o, dt = k.split("|")
        prows.append([o, dt, _fmt(v["final_gap"]), _fmt(v["max_dev_from_float64"]), _fmt(v["late_progress"])])
        p.metrics.append(_conv_metric(f"precision|{k}|final", v["final_gap"]))
    p.tables.append(table("Precision study (hinge SVM, lr 1e-3 cosine to 0, alpha=0.1, beta=0.9)",
                          ["optimizer", "dtype", "final gap", "max |f - f_float64|", "late progress"], prows))
    p.claims += pr["claims"]
    return prec


def _region_map(ctx, p: Parts) -> dict:
    from nsverify.papers.arnekvist import repro as arnekvist

    ctx.progress("dying ReLU region map")
    q = ctx.quick
    rmap = ctx.checkpoint(f"region-{q}", lambda: arnekvist.region_study(
        grid=11 if q else 31, max_steps=3000 if q else 20000, extents=(2.0,) if q else (2.0, 1.0, 4.0)))
    region_claims = rmap.pop("claims")
    rrows = [[c["gamma"], c["beta"], round(c["optimum"], 3), round(c["dead"], 3), round(c["other"], 3),
              round(c["unconverged"], 3)] for c in rmap["cells"]]
    for c in rmap["cells"]:
        p.metrics.append({"key": f"region|gamma={c['gamma']:g}|beta={c['beta']:g}|dead", "kind": "share",
                          "value": c["dead"], "lo": c["dead"], "hi": c["dead"]})
    p.tables.append(table(
        f"Single-ReLU region map: heavy-ball eta={rmap['eta']}, {rmap['cells'][0]['n_inits']} "
        f"initial (w_L, b) per cell over [-{rmap['extent']:g}, {rmap['extent']:g}]^2, optimum tolerance: "
        f"{rmap['tolerances'][0]}",
        ["gamma", "beta", "optimum", "dead cone", "other", "unconverged"], rrows))
    p.tables.append(table(
        "Region map at beta = 0: optimum / dead shares per grid extent and optimum tolerance",
        ["extent", "gamma"] + [f"{t}: optimum / dead" for t in rmap["tolerances"]],
        [[e, c["gamma"]] + [f"{c[t]['optimum']:.2f} / {c[t]['dead']:.2f}" for t in rmap["tolerances"]]
         for e, cells in rmap["beta0_by_extent"].items() for c in cells]))
    p.figures.append({"title": "Dead-cone share over gamma x beta", "png": _region_figure(rmap)})
    p.claims += region_claims
    return rmap


def _network(ctx, p: Parts) -> list:
    from nsverify.papers.arnekvist import repro as arnekvist

    q = ctx.quick
    nsteps = 500 if q else 50000
    datasets = ("diabetes",)
    cache = ctx.scratch_file("dying_relu.json")
    nst = arnekvist.network_study(datasets, (0, 1) if q else (0, 1, 2), nsteps, progress=ctx.progress,
                                  cache=cache, workers=1 if q else min(4, os.cpu_count() or 1))
    net = nst["rows"]
    nrows = []
    for r in net:
        s = r["dead_share"]
        nrows.append([r["dataset"], r["gamma"], r["optimizer"], _fmt(s), r["per_seed"], _fmt(r["mse_over_gamma2"])])
        p.metrics.append({"key": f"dead|{r['dataset']}|gamma={r['gamma']:g}|{r['optimizer']}|{nsteps}",
                          "kind": "share", "value": s["mean"], "lo": max(0.0, s["lo"]), "hi": min(1.0, s["hi"])})
    p.tables.append(table(f"Dead-unit share (worst layer, 200 hidden units, {nsteps} steps, batch 64; "
                          "Arnekvist et al. trained 250000 steps)",
                          ["data", "gamma", "optimizer", "dead share", "per seed", "MSE / gamma^2"], nrows))
    p.claims += nst["claims"]
    return net


def _speed(ctx, p: Parts) -> dict:
    from nsverify.papers.innaprop.checks import step_time_ratio

    ctx.progress("step time ratio")
    sp = step_time_ratio(1_000_000 if ctx.quick else 10_000_000, reps=5, rounds=5)
    p.metrics.append({"key": f"innaprop_over_adamw_step|{sp['n_params']}|float32|cpu", "kind": "bench_ratio",
                      "value": sp["ratio"], "samples": sp["ratio_samples"]})
    p.metrics.append({"key": "state_bytes_per_param|innaprop_minus_adamw", "kind": "counterexample",
                      "value": int(sp["state_bytes_per_param"]["innaprop"] != sp["state_bytes_per_param"]["adamw"])})
    return sp


def _gpu_step_time(p: Parts) -> dict | None:
    """The stored GPU run of scripts/gpu/optim.py (None without it) and its table."""
    gpu = load_measurement(gpu_file("optim"), require_provenance=False)
    if gpu is not None:
        p.tables.append(table(
            "GPU step time (scripts/gpu/optim.py)", ["n params", "dtype", "AdamW ms", "INNAprop ms", "ratio"],
            [[r["n_params"], r["dtype"], round(r["adamw_s"] * 1e3, 3), round(r["innaprop_s"] * 1e3, 3),
              round(r["ratio"], 3)] for r in gpu.get("results", [])]))
    return gpu
