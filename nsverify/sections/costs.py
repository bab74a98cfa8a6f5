"""Report section: the cost of nonsmooth AD (Boustany Ch.2) -- op-count tables, Theorem 4 scaling, the
hardness table, and measured (fwd+bwd)/fwd ratios on this machine (plus CUDA rows from
nsverify/data/gpu/costs.json). The experiments and their verdicts are :mod:`nsverify.papers.costs.repro`'s;
this module picks the budgets and renders."""

from __future__ import annotations

from nsverify.report import figure_png, section, table
from nsverify.report.claims_table import Parts


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

    g = _grid(ctx.quick)
    p = Parts()
    t2 = _tables_2(ctx, p)
    ctx.progress("interpreter properties on random programs")
    ce = ctx.checkpoint(f"interpreter-{ctx.quick}", lambda: repro.interpreter_properties(60 if ctx.quick else 400))
    for k in ("eq_2_10", "eq_2_11", "omega_b", "five_relu", "fwd_bwd", "torch"):
        p.metrics.append({"key": f"interpreter|{k}", "kind": "counterexample", "value": ce[k]})
    p.claims += ce.pop("claims")
    th4 = _theorem4(ctx, g, p)
    hd = _hardness(ctx, p)
    meas = _ratios(ctx, g, p)
    gpu = _gpu_rows(repro.gpu_rows(), p.metrics, p.tables)
    fl = [r["flop_ratio"] for r in meas if r["model"] == "mlp"]
    wall = [r["wall_ratio"] for r in meas]
    summary = (
        f"{len(t2['failures'])} grid points of Tables 2.2-2.3 fail; Theorem 4 "
        f"exponent (FLOPs) {th4['exponent_flops']:.2f}, wall {th4['exponent_wall']:.2f} (an illustration). "
        f"Exact Clarke at 0 agrees with SAT on {hd['theorem6']['decided']} random formulas and {len(hd['rows'])} "
        f"table instances. CPU wall-clock ratios {min(wall):.2f}-{max(wall):.2f}x; FLOP ratios "
        f"{min(fl):.2f}-{max(fl):.2f}x." + (" CUDA rows included." if gpu else " No CUDA rows (no GPU JSON).")
    )
    return p.render(summary, {"measured": meas, "thm4": th4, "hardness": hd["rows"], "gpu": gpu, "interpreter": ce,
                              "prop4": hd["prop4"], "theorem6": hd["theorem6"]},
                    claims_title="Claims (Boustany, Ch.2; and ours)")


def _tables_2(ctx, p: Parts) -> dict:
    """Tables 2.1-2.3 recomputed: their table, one verdict metric per graded n = 10 point."""
    from nsverify.papers.costs import repro

    ctx.progress("tables 2.1-2.3")
    t2 = p.collect_claims(repro.tables_2())
    rows = t2["rows"]
    p.tables.append(table(
        "Tables 2.1-2.3 recomputed (omega = counted cost(backprop)/cost(P) of a one-node "
        "program; omega_pub from the published cost formulas)",
        ["table", "column", "c_nonlin", "c_ReLU", "n", "cost(g)", "published cost(g)", "omega", "omega_pub",
         "bound", "status"],
        [[r["table"], r["column"], r["c_nonlin"], r["c_relu"], r["n"], _fmt(r["cost_g"]), _fmt(r["pub_cost_g"]),
          _fmt(r["omega"]), _fmt(r["omega_published_costs"]), r["bound"], r["status"]] for r in rows]))
    for r in rows:
        if r["bound"] is not None and (r["n"] in (None, 10)) and r["c_nonlin"] == 1:
            p.metrics.append({"key": f"table{r['table']}|{r['op']}|cR{r['c_relu']}|n{r['n']}", "kind": "verdict",
                              "value": r["status"]})
    return t2


def _theorem4(ctx, g: dict, p: Parts) -> dict:
    from nsverify.papers.costs import repro

    ctx.progress("Theorem 4 scaling")
    th4 = ctx.checkpoint(f"theorem4-{ctx.quick}", lambda: repro.theorem4(g["ps"], reps=3 if ctx.quick else 7))
    p.tables.append(table(
        "Theorem 4: p directional derivatives at the kink vs F + full gradient at a smooth point (float32, CPU)",
        ["p", "t_dirs (ms)", "t_grad (ms)", "wall ratio", "FLOP ratio"],
        [[r["p"], _fmt(r["t_dirs"] * 1e3), _fmt(r["t_grad"] * 1e3), _fmt(r["ratio_wall"]), _fmt(r["ratio_flops"])]
         for r in th4["rows"]]))
    p.metrics += [{"key": "thm4|exponent_flops", "kind": "info", "value": th4["exponent_flops"]},
                  {"key": "thm4|exponent_wall", "kind": "info", "value": th4["exponent_wall"]}]
    p.claims += th4.pop("claims")
    return th4


def _hardness(ctx, p: Parts) -> dict:
    from nsverify.papers.costs import repro
    from nsverify.papers.costs.hardness import FULL_SIZES, QUICK_SIZES

    ctx.progress("hardness: exact Clarke vs Proposition 4")
    hd = ctx.checkpoint(f"hardness-{ctx.quick}", lambda: repro.hardness(
        QUICK_SIZES if ctx.quick else FULL_SIZES, time_budget=60 if ctx.quick else 600,
        prop4_networks=100 if ctx.quick else 500, theorem6_instances=32 if ctx.quick else 100,
        progress=ctx.progress))
    hard = hd["rows"]
    p.tables.append(table(
        "3-SAT networks at 0: exact Clarke set (exponential) vs Proposition 4 for the AD set D^a (polynomial)",
        ["p", "clauses", "neurons", "ReLU layers", "SAT", "Clarke != {0}", "regions", "t exact Clarke (s)",
         "D^a non-singleton", "t Prop 4 (s)", "t check_gradient (s)"],
        [[r["p"], r["clauses"], r["neurons"], r["relu_layers"], r["sat"], r["clarke_nontrivial"], r["regions"],
          _fmt(r["t_clarke"]) if r["t_clarke"] is not None else r["clarke_status"], r["ad_nonsingleton"],
          _fmt(r["t_prop4"], 4), _fmt(r["t_oracle"]) if "t_oracle" in r else "-"] for r in hard]))
    p.metrics += [{"key": "hardness|clarke_vs_sat", "kind": "counterexample", "value": hd["mismatches"]},
                  {"key": "theorem6|random_formulas|mismatches", "kind": "counterexample",
                   "value": hd["theorem6"]["mismatches"]},
                  {"key": "hardness|enumeration_vs_oracle", "kind": "counterexample",
                   "value": hd["oracle_disagreements"]}]
    for r in hard:
        p.metrics.append({"key": f"hardness|p{r['p']}n{r['clauses']}|t_clarke", "kind": "info", "value": r["t_clarke"]})
        p.metrics.append({"key": f"hardness|p{r['p']}n{r['clauses']}|t_prop4", "kind": "info", "value": r["t_prop4"]})
    p.metrics.append({"key": "prop4|vs_bruteforce", "kind": "counterexample", "value": hd["prop4"]["counterexamples"]})
    p.claims += hd["claims"]
    return hd


def _ratios(ctx, g: dict, p: Parts) -> list:
    """Measured (fwd+bwd)/fwd ratios and op-count omegas: two tables, a figure, the rows."""
    from nsverify.papers.costs import repro

    mr = ctx.checkpoint(f"ratios-{ctx.quick}", lambda: repro.measured_ratios(g, progress=ctx.progress))
    meas, omega_depth, omega_width = mr["rows"], mr["omega_depth"], mr["omega_width"]
    for r in meas:
        key = f"ratio|{r['model']}|d{r['depth']}|w{r['width']}|{r['dtype']}|cpu"
        p.metrics.append({"key": key + "|wall", "kind": "bench_ratio", "value": r["wall_ratio"], "unit": "x",
                          "samples": r["ratio_samples"]})
        p.metrics.append({"key": key + "|flops", "kind": "info", "value": r["flop_ratio"], "unit": "x"})
    p.tables.append(table(
        "Measured (fwd+bwd)/fwd on this CPU (min over repeats, interleaved)",
        ["model", "depth", "width", "batch", "dtype", "wall ratio", "FLOP ratio", "t_fwd (ms)"],
        [[r["model"], r["depth"], r["width"], r["batch"], r["dtype"], _fmt(r["wall_ratio"], 2),
          _fmt(r["flop_ratio"], 3), _fmt(r["t_fwd"] * 1e3, 2)] for r in meas]))
    p.tables.append(table("Interpreter op-count omega of MLP programs (unit costs)", ["depth", "width", "omega"],
                          [[d, 8, _fmt(o)] for d, o in omega_depth] + [[3, w, _fmt(o)] for w, o in omega_width]))
    p.claims += mr["claims"]
    p.figures.append({"title": "(fwd+bwd)/fwd vs depth and width", "png": _plot(meas, omega_depth, omega_width)})
    return meas


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
