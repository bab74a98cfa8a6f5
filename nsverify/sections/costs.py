"""Report section: the cost of nonsmooth AD (Boustany Ch.2) -- op-count tables, Theorem 4 scaling, the
hardness table, and measured (fwd+bwd)/fwd ratios on this machine (plus CUDA rows from
nsverify/data/gpu/costs.json). The experiments and their verdicts are :mod:`nsverify.papers.costs.repro`'s;
this module picks the budgets and renders."""

from __future__ import annotations

from nsverify.report import figure_png, section, table
from nsverify.report.claims_table import claims_table, summary_line


def _grid(quick: bool):
    if quick:
        return dict(
            depths=(1, 5, 10, 20),
            widths=(64, 256, 1024),
            depth_width=256,
            width_depth=3,
            batch=64,
            reps=5,  # >= 5 samples per side: a Mann-Whitney test between two runs can reach p < 0.01
            dtypes=("bfloat16", "float32", "float64"),
            ps=(16, 32, 64, 128, 256, 512, 1024),
        )
    return dict(
        depths=(1, 2, 3, 5, 10, 15, 20),
        widths=(64, 128, 256, 512, 1024, 2048),
        depth_width=256,
        width_depth=3,
        batch=128,
        reps=7,
        dtypes=("bfloat16", "float32", "float64"),
        ps=(16, 32, 64, 128, 256, 512, 1024),
    )


def _fmt(v, nd=3):
    return round(v, nd) if isinstance(v, float) else v


@section(
    "costs",
    "Cost of nonsmooth AD: op counts, Theorem 4, hardness, measured ratios",
    order=70,
    description="~1-2 min quick",
)
def costs_section(ctx) -> dict:
    from nsverify.papers.costs import repro
    from nsverify.papers.costs.hardness import FULL_SIZES, QUICK_SIZES

    g = _grid(ctx.quick)
    metrics, claims, tables, figures = [], [], [], []

    # 1. tables 2.1-2.3 --------------------------------------------------------------------------------
    ctx.progress("tables 2.1-2.3")
    t2 = repro.tables_2()
    rows = t2["rows"]
    tables.append(
        table(
            "Tables 2.1-2.3 recomputed (omega = counted cost(backprop)/cost(P) of a one-node "
            "program; omega_pub from the published cost formulas)",
            ["table", "column", "c_nonlin", "c_ReLU", "n", "cost(g)", "published cost(g)", "omega", "omega_pub",
             "bound", "status"],
            [
                [r["table"], r["column"], r["c_nonlin"], r["c_relu"], r["n"], _fmt(r["cost_g"]), _fmt(r["pub_cost_g"]),
                 _fmt(r["omega"]), _fmt(r["omega_published_costs"]), r["bound"], r["status"]]
                for r in rows
            ],
        )
    )
    for r in rows:
        if r["bound"] is not None and (r["n"] in (None, 10)) and r["c_nonlin"] == 1:
            metrics.append({"key": f"table{r['table']}|{r['op']}|cR{r['c_relu']}|n{r['n']}", "kind": "verdict",
                            "value": r["status"]})
    claims += t2["claims"]

    # 2. interpreter properties ------------------------------------------------------------------------
    ctx.progress("interpreter properties on random programs")
    ce = ctx.checkpoint(f"interpreter-{ctx.quick}", lambda: repro.interpreter_properties(60 if ctx.quick else 400))
    for k in ("eq_2_10", "eq_2_11", "omega_b", "five_relu", "fwd_bwd", "torch"):
        metrics.append({"key": f"interpreter|{k}", "kind": "counterexample", "value": ce[k]})
    claims += ce.pop("claims")

    # 3. Theorem 4 -------------------------------------------------------------------------------------
    ctx.progress("Theorem 4 scaling")
    th4 = ctx.checkpoint(f"theorem4-{ctx.quick}", lambda: repro.theorem4(g["ps"], reps=3 if ctx.quick else 7))
    tables.append(
        table(
            "Theorem 4: p directional derivatives at the kink vs F + full gradient at a smooth point "
            "(float32, CPU)",
            ["p", "t_dirs (ms)", "t_grad (ms)", "wall ratio", "FLOP ratio"],
            [[r["p"], _fmt(r["t_dirs"] * 1e3), _fmt(r["t_grad"] * 1e3), _fmt(r["ratio_wall"]), _fmt(r["ratio_flops"])]
             for r in th4["rows"]],
        )
    )
    metrics += [
        {"key": "thm4|exponent_flops", "kind": "info", "value": th4["exponent_flops"]},
        {"key": "thm4|exponent_wall", "kind": "info", "value": th4["exponent_wall"]},
    ]
    claims += th4.pop("claims")

    # 4. hardness --------------------------------------------------------------------------------------
    ctx.progress("hardness: exact Clarke vs Proposition 4")
    hd = ctx.checkpoint(f"hardness-{ctx.quick}", lambda: repro.hardness(
        QUICK_SIZES if ctx.quick else FULL_SIZES, time_budget=60 if ctx.quick else 600,
        prop4_networks=100 if ctx.quick else 500, theorem6_instances=32 if ctx.quick else 100,
        progress=ctx.progress))
    hard = hd["rows"]
    tables.append(
        table(
            "3-SAT networks at 0: exact Clarke set (exponential) vs Proposition 4 for the AD set "
            "D^a (polynomial)",
            ["p", "clauses", "neurons", "ReLU layers", "SAT", "Clarke != {0}", "regions", "t exact Clarke (s)",
             "D^a non-singleton", "t Prop 4 (s)", "t check_gradient (s)"],
            [
                [r["p"], r["clauses"], r["neurons"], r["relu_layers"], r["sat"], r["clarke_nontrivial"], r["regions"],
                 _fmt(r["t_clarke"]) if r["t_clarke"] is not None else r["clarke_status"], r["ad_nonsingleton"],
                 _fmt(r["t_prop4"], 4), _fmt(r["t_oracle"]) if "t_oracle" in r else "-"]
                for r in hard
            ],
        )
    )
    metrics.append({"key": "hardness|clarke_vs_sat", "kind": "counterexample", "value": hd["mismatches"]})
    metrics.append({"key": "theorem6|random_formulas|mismatches", "kind": "counterexample",
                    "value": hd["theorem6"]["mismatches"]})
    metrics.append({"key": "hardness|enumeration_vs_oracle", "kind": "counterexample",
                    "value": hd["oracle_disagreements"]})
    for r in hard:
        metrics.append({"key": f"hardness|p{r['p']}n{r['clauses']}|t_clarke", "kind": "info", "value": r["t_clarke"]})
        metrics.append({"key": f"hardness|p{r['p']}n{r['clauses']}|t_prop4", "kind": "info", "value": r["t_prop4"]})
    p4 = hd["prop4"]
    metrics.append({"key": "prop4|vs_bruteforce", "kind": "counterexample", "value": p4["counterexamples"]})
    claims += hd["claims"]

    # 5. measured ratios -------------------------------------------------------------------------------
    mr = ctx.checkpoint(f"ratios-{ctx.quick}", lambda: repro.measured_ratios(g, progress=ctx.progress))
    meas, omega_depth, omega_width = mr["rows"], mr["omega_depth"], mr["omega_width"]
    for r in meas:
        key = f"ratio|{r['model']}|d{r['depth']}|w{r['width']}|{r['dtype']}|cpu"
        metrics.append({"key": key + "|wall", "kind": "bench_ratio", "value": r["wall_ratio"], "unit": "x",
                        "samples": r["ratio_samples"]})
        metrics.append({"key": key + "|flops", "kind": "info", "value": r["flop_ratio"], "unit": "x"})
    tables.append(
        table(
            "Measured (fwd+bwd)/fwd on this CPU (min over repeats, interleaved)",
            ["model", "depth", "width", "batch", "dtype", "wall ratio", "FLOP ratio", "t_fwd (ms)"],
            [[r["model"], r["depth"], r["width"], r["batch"], r["dtype"], _fmt(r["wall_ratio"], 2),
              _fmt(r["flop_ratio"], 3), _fmt(r["t_fwd"] * 1e3, 2)] for r in meas],
        )
    )
    tables.append(
        table(
            "Interpreter op-count omega of MLP programs (unit costs)",
            ["depth", "width", "omega"],
            [[d, 8, _fmt(o)] for d, o in omega_depth] + [[3, w, _fmt(o)] for w, o in omega_width],
        )
    )
    claims += mr["claims"]
    figures.append({"title": "(fwd+bwd)/fwd vs depth and width", "png": _plot(meas, omega_depth, omega_width)})

    # 6. GPU rows --------------------------------------------------------------------------------------
    gpu = _gpu_rows(repro.gpu_rows(), metrics, tables)
    fl = [r["flop_ratio"] for r in meas if r["model"] == "mlp"]
    wall = [r["wall_ratio"] for r in meas]
    tables.insert(0, claims_table(claims, "Claims (Boustany, Ch.2; and ours)"))
    summary = (
        f"Claims: {summary_line(claims)}. {len(t2['failures'])} grid points of Tables 2.2-2.3 fail; Theorem 4 "
        f"exponent (FLOPs) {th4['exponent_flops']:.2f}, wall {th4['exponent_wall']:.2f} (an illustration). "
        f"Exact Clarke at 0 agrees with SAT on {hd['theorem6']['decided']} random formulas and {len(hard)} table "
        f"instances. CPU wall-clock ratios {min(wall):.2f}-{max(wall):.2f}x; FLOP ratios "
        f"{min(fl):.2f}-{max(fl):.2f}x." + (" CUDA rows included." if gpu else " No CUDA rows (no GPU JSON).")
    )
    return {
        "summary": summary,
        "tables": tables,
        "figures": figures,
        "claims": claims,
        "data": {
            "metrics": metrics,
            "measured": meas,
            "thm4": th4,
            "hardness": hard,
            "gpu": gpu,
            "interpreter": ce,
            "prop4": p4,
            "theorem6": hd["theorem6"],
        },
    }


def _plot(meas, omega_depth, omega_width) -> str:
    import matplotlib

    from nsverify.papers.costs.repro import COROLLARY2_BOUND

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), sharey=True)
    for ax, sweep, key in ((axes[0], "depth", "depth"), (axes[1], "width", "width")):
        for dt in sorted({r["dtype"] for r in meas}):
            rs = sorted((r for r in meas if r["sweep"] == sweep and r["dtype"] == dt), key=lambda r: r[key])
            ax.plot([r[key] for r in rs], [r["wall_ratio"] for r in rs], "o-", label=f"wall {dt}")
        rs = sorted(
            (r for r in meas if r["sweep"] == sweep and r["dtype"] == "float32"), key=lambda r: r[key]
        )
        ax.plot([r[key] for r in rs], [r["flop_ratio"] for r in rs], "k--", label="FLOP ratio")
        om = omega_depth if sweep == "depth" else omega_width
        ax.plot(
            [a for a, _ in om], [o for _, o in om], "s:", color="gray", label="op-count omega (small nets)"
        )
        ax.axhline(COROLLARY2_BOUND, color="red", lw=1, label=f"{COROLLARY2_BOUND}x (Cor. 2)")
        ax.set_xlabel(key)
        ax.set_xscale("log" if sweep == "width" else "linear")
        ax.set_title(f"ratio vs {key} (paper: omega_b flat in {key})")
    axes[0].set_ylabel("(fwd+bwd)/fwd")
    axes[1].legend(fontsize=7)
    return figure_png(fig)


def _gpu_rows(res: dict, metrics, tables) -> list:
    """Render :func:`nsverify.papers.costs.repro.gpu_rows`: a table titled with the file's provenance, one metric
    per row; returns the JSON rows as the file holds them."""
    if not res["rows"]:
        return []
    tables.append(
        table(
            f"CUDA rows ({res['provenance']})",
            ["model", "batch", "dtype", "wall ratio", "FLOP ratio"],
            [[r["model"], r["batch"], r["dtype"], _fmt(r["wall_ratio"], 2), _fmt(r["flop_ratio"], 3)]
             for r in res["rows"]],
        )
    )
    for r in res["rows"]:
        metrics.append({"key": f"ratio|{r['model']}|d{r.get('depth')}|w{r.get('width')}|{r['dtype']}|cuda|wall",
                        "kind": "bench_ratio", "value": r["wall_ratio"], "unit": "x"})
    return res["rows"]
