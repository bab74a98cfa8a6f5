"""Report section: bifurcation and compensation zones (Bertoin et al.; Boustany Ch.3), scaled to a CPU. The
experiments and their verdicts are :mod:`nsverify.papers.zones.repro`'s; this module picks the budgets and
renders."""
from __future__ import annotations

import math

from nsverify.report import figure_png, section, table

QUICK = dict(fig33=(3, 2), table=dict(width=0.0625, draws=3, batches=2, batch_size=16),
             trend_batches=(4, 32), trend=dict(width=0.0625, draws=3, batches=2),
             dich=dict(draws=2, batches=2, batch_size=128), sgd_steps=30, sgd_dtypes=("float64", "bfloat16"),
             sweep=dict(seeds=(0,), steps=15, betas=(0.0, 1e2, 1e4)))
FULL = dict(fig33=(16, 8), table=dict(width=0.125, draws=16, batches=4, batch_size=64),
            trend_batches=(8, 32, 128), trend=dict(width=0.125, draws=8, batches=4),
            dich=dict(draws=8, batches=8, batch_size=128), sgd_steps=200,
            sgd_dtypes=("float64", "float32", "bfloat16"),
            sweep=dict(seeds=(0, 1, 2), steps=150))


def _share_metric(key, s):
    lo, hi = s["clopper_pearson"]
    return {"key": key, "kind": "share", "value": s["value"], "lo": lo, "hi": hi}


def _hist(ax, values, label):
    import numpy as np

    logs = [math.log10(v) for v in values if v > 0]
    zeros = sum(1 for v in values if v == 0)
    if logs:
        ax.hist(logs, bins=np.linspace(-20, 1, 43), alpha=0.55, label=f"{label} ({zeros} exact zeros)")
    elif zeros:
        ax.plot([], [], label=f"{label}: all {zeros} exactly 0")


def _fig_hist(runs: dict, title: str) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.2))
    for label, values in runs.items():
        _hist(ax, values, label)
    ax.set_xlabel("log10 D (L1, mean reduction)")
    ax.set_ylabel("(draw, batch) pairs")
    ax.set_title(title)
    ax.legend(fontsize=7)
    return figure_png(fig)


def _fig_shares(rows: list) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.2))
    for i, (_label, s) in enumerate(rows):
        lo, hi = s["clopper_pearson"]
        ax.errorbar([i], [s["value"]], yerr=[[s["value"] - lo], [hi - s["value"]]], fmt="o", capsize=4)
    ax.set_xticks(range(len(rows)), [r[0] for r in rows], rotation=30, ha="right", fontsize=7)
    ax.set_ylim(-0.05, 1.05)
    ax.set_ylabel("share of impacted minibatches")
    ax.set_title("Zone volume per dtype (95% Clopper-Pearson)")
    return figure_png(fig)


def _fig_curves(sgd: dict, sweep: dict) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.2))
    for name, r in sgd.items():
        d = [max(v, 1e-30) for v in r["distance"]]
        a.semilogy(range(1, len(d) + 1), d, label=f"{name} (first diff: {r['first_divergence']})")
    a.set_xlabel("SGD step")
    a.set_ylabel("||theta_0 - theta_1||_1 (1e-30 = identical)")
    a.set_title("ReLU'(0)=0 vs 1 trajectories (MLP)")
    a.legend(fontsize=7)
    for name in sorted({r["dtype"] for r in sweep["results"]}):
        rs = [r for r in sweep["results"] if r["dtype"] == name and r["relu_s"] == 0]
        betas = sorted({r["beta"] for r in rs})
        means = [sum(r["final_loss"] for r in rs if r["beta"] == bb) / max(1, sum(r["beta"] == bb for r in rs))
                 for bb in betas]
        b.plot([math.log10(bb) if bb > 0 else -1 for bb in betas], means, "o-", label=name)
    b.set_xlabel("log10 beta (-1 = beta 0)")
    b.set_ylabel("final training loss")
    b.set_title("Hybrid MaxPool beta sweep (LeNet-5, SGD)")
    b.legend(fontsize=7)
    return figure_png(fig)


def _point_row(r: dict) -> list:
    e, f = r["exact"], r["float"]
    return [r["draw"], r["dtype"], e["zone"], e["tie_windows"], e["relu_sites"], f["tied_windows"], f["relu_zeros"],
            f["sites_created_by_rounding"], f["sites_destroyed_by_rounding"], f"{f['D']:.2e}", f["tau"], f["impacted"]]


@section("zones", "Bifurcation and compensation zones (Bertoin; Boustany Ch.3)", order=40,
         description="Tables 3.1/3.3, zone volumes per dtype, SGD divergence, beta sweep")
def zones_section(ctx) -> dict:
    from nsverify.papers.zones import repro as repro

    size = QUICK if ctx.quick else FULL
    claims, tables, figures, metrics = [], [], [], []
    data: dict = {}

    ctx.progress("Tables 3.1, 3.3 and the 3.5.3 example")
    t31, t33, ex = repro.table_3_1(), repro.table_3_3(), repro.example_353()
    for r in (t31, t33, ex):
        claims += r["claims"]
    rows = [[f"Table 3.1 {k}"] + [f"{v:.3g}" for v in vals] for k, vals in t31["rows"].items()]
    rows += [[f"Table 3.3 {k}"] + [f"{v:.3g}" for v in vals] for k, vals in t33["rows"].items()]
    tables.append(table("zero'(t) in float32 (Boustany Tables 3.1 and 3.3)", ["program / x"] +
                        [f"t={t:g}" for t in repro.T_VALUES], rows))
    metrics += [{"key": "table3.1|x1|t=0|float32", "kind": "convention", "value": t31["rows"]["x1=(1,2,3,4)"][3]},
                {"key": "table3.1|x2|t=0|float32", "kind": "convention",
                 "value": t31["rows"]["x2=1.4*(1,1,1,1)"][3]},
                {"key": "table3.3|x1|t=0|float32", "kind": "convention", "value": t33["rows"]["x=(1,2,3,4)"][3]},
                {"key": "example3.5.3|D", "kind": "convention", "value": ex["D_L1"]}]

    ctx.progress("Fig 3.3 analogue: LeNet-5 fp32, D(P,P~) and D(P,Q)")
    m, r = size["fig33"]
    f33 = ctx.checkpoint(f"fig33-{m}x{r}", lambda: repro.fig_3_3(draws=m, batches=r))
    claims += f33["claims"]
    data["fig33"] = {k: f33[k] for k in ("D_same", "D_diff", "bulk_share", "tail_share", "held_parts")}
    metrics.append({"key": "fig3.3|lenet5|float32|tail_share", "kind": "info", "value": f33["tail_share"]})

    ctx.progress("Table 3.2 analogue: VGG11 (narrow) on plateau images, bf16/fp32/fp64, without and with BN", 0, 3)
    tcfg = size["table"]
    t32run = repro.table_3_2(**tcfg, scratch=ctx.scratch_file)
    t32, t32bn = t32run["no_bn"], t32run["bn"]
    claims += t32run["claims"]
    share_rows, trows = [], []
    for label, res in (("no BN", t32), ("BN", t32bn)):
        for name, d in res["dtypes"].items():
            ps, ds = d["pair_share"], d["draw_share"]
            share_rows.append((f"{name} {label}", ps))
            trows.append([name, label, res["thresholds"][name], f"{ds['count']}/{ds['n']}",
                          f"{ps['count']}/{ps['n']}", f"{ps['value']:.2f} [{ps['clopper_pearson'][0]:.2f}, "
                          f"{ps['clopper_pearson'][1]:.2f}]", f"[{ps['mcdiarmid'][0]:.2f}, {ps['mcdiarmid'][1]:.2f}]",
                          f"{d['max_D']:.2e}", f"{d['mean_tied_windows']:.0f}", f"{d['mean_relu_zeros']:.1f}"])
            metrics.append(_share_metric(f"table3.2|vgg11|{name}|{label.replace(' ', '')}|pairs", ps))
            metrics.append(_share_metric(f"table3.2|vgg11|{name}|{label.replace(' ', '')}|draws", ds))
    tables.append(table(
        f"Table 3.2 analogue: VGG11 width {tcfg['width']}, plateau images, batch {tcfg['batch_size']}, "
        f"native vs minimal maxpool (tau = Table 3.4 VGG11 row; bf16 uses the 16-bit value)",
        ["dtype", "BN", "tau", "draws impacted", "pairs impacted", "pair share [CP 95%]", "McDiarmid",
         "max D", "tied windows/batch (float view)", "ReLU zeros/batch (float view)"], trows))
    data["table32"] = {"no_bn": t32, "bn": t32bn}

    ctx.progress("Fig 3.6 trends: batch size and BN (fp32)", 2, 3)
    f36 = repro.fig_3_6(size["trend_batches"], **size["trend"], scratch=ctx.scratch_file)
    claims += f36["claims"]
    data["trends"] = {"by_batch": {str(b): v["dtypes"]["float32"]["pair_share"] for b, v in f36["by_batch"].items()},
                      "bn_off": f36["bn_off"]["dtypes"]["float32"]["pair_share"],
                      "bn_on": f36["bn_on"]["dtypes"]["float32"]["pair_share"]}

    ctx.progress("Bertoin dichotomy: MLP at init, ReLU'(0)=0 vs 1")
    dich = ctx.checkpoint(f"dichotomy-{size['dich']}", lambda: repro.bertoin_dichotomy(**size["dich"]))
    claims += dich["claims"]
    for name, d in dich["result"]["dtypes"].items():
        metrics.append(_share_metric(f"bertoin|mlp|{name}|pairs_D>0", d["pair_share"]))
        share_rows.append((f"{name} MLP relu", d["pair_share"]))

    trows = [[name, "not measurable on CPU (deterministic kernels)", d["min_nonzero_D"],
              f"{d['pair_share']['count']}/{d['pair_share']['n']}"] for name, d in dich["result"]["dtypes"].items()]
    tables.append(table("Thresholds (MLP at init, digits28): tau1 = max D(P,P~), tau2 = min non-zero D(ReLU'(0)=0, 1)"
                        " (None: no kink was hit, so ReLU'(0) never mattered)",
                        ["dtype", "tau1", "tau2", "batches with D(R0,R1) > 0"], trows))

    ctx.progress("Exact classification vs float view (LeNet-5 width 0.5, 4 digits, 2 draws)")
    pts = ctx.checkpoint("points-lenet5", lambda: [_point_row(r) for r in repro.exact_vs_float_points()])
    tables.append(table(
        "Both views of each point: exact zone of the point rounded to the dtype (exact rational arithmetic, "
        "programs E0=(ReLU'(0)=0, native) vs E1=(ReLU'(0)=1, minimal)) and what the float computation saw",
        ["draw", "dtype", "exact zone", "exact ties", "exact ReLU zeros", "float ties", "float ReLU zeros",
         "sites created by rounding", "destroyed", "float D(E0,E1)", "tau", "float impacted"], pts))
    data["points"] = pts

    ctx.progress("SGD trajectories ReLU'(0)=0 vs 1")
    sgd_run = repro.sgd_trajectories(size["sgd_dtypes"], size["sgd_steps"], memo=ctx.checkpoint)
    sgd = sgd_run["runs"]
    claims += sgd_run["claims"]
    data["sgd"] = sgd
    for name, r in sgd.items():
        metrics.append({"key": f"sgd|mlp|{name}|first_divergence", "kind": "info", "value": r["first_divergence"]})

    ctx.progress("Training sweep over beta and ReLU'(0)")
    sweep = ctx.checkpoint(f"sweep-{size['sweep']}", lambda: repro.beta_sweep(
        **size["sweep"], progress=lambda msg, i, n: ctx.progress(msg, i, n)))
    claims += sweep.pop("claims")
    data["sweep"] = sweep
    tables.append(table("Training sweep (LeNet-5 width 0.5, digits28, SGD lr 0.05): final training loss",
                        ["dtype", "ReLU'(0)", "beta", "seed", "initial loss", "final loss", "diverged"],
                        [[r["dtype"], r["relu_s"], r["beta"], r["seed"], round(r["initial_loss"], 4),
                          round(r["final_loss"], 4), r["diverged"]] for r in sweep["results"]]))

    figures.append({"title": "log10 D per dtype (VGG11 analogue, native vs minimal; LeNet-5 fp32 Fig 3.3)",
                    "png": _fig_hist({**{f"{n} no BN": d["D"] for n, d in t32["dtypes"].items()},
                                      **{f"{n} BN": d["D"] for n, d in t32bn["dtypes"].items()},
                                      "LeNet-5 fp32 D(P,Q)": f33["D_diff"]},
                                     "Backprop variation D")})
    figures.append({"title": "Zone shares per dtype with 95% error bars", "png": _fig_shares(share_rows)})
    figures.append({"title": "Divergence curves", "png": _fig_curves(sgd, sweep)})

    gpu = repro.gpu_results()
    if gpu is not None:
        data["gpu"] = gpu["raw"]
        claims += gpu["claims"]
        tables.append(table(f"GPU ({gpu['device']}, torch {gpu['torch']}, TF32 off): full-width VGG11 on "
                            f"plateau images, batch 128, native vs minimal maxpool",
                            ["dtype", "BN", "tau (Table 3.4)", "pairs impacted", "max D", "tau1 (measured)",
                             "tau2 (measured)", "pairs with D > tau1"],
                            [[g["dtype"], g["bn"], g["tau"], g["impacted"], f"{g['max_D']:.2e}", g["tau1"], g["tau2"],
                              g["above_tau1"]] for g in gpu["rows"]]))
        for key, s in gpu["shares"].items():
            metrics.append({"key": f"gpu|{key}", "kind": "share", "value": s["value"],
                            "lo": s["clopper_pearson"][0], "hi": s["clopper_pearson"][1]})
    held = sum(bool(c["held"]) for c in claims)
    summary = (f"{held}/{len(claims)} paper claims held at this scale ({'quick' if ctx.quick else 'full'} mode, "
               f"CPU). Exact ties come from flat backgrounds, zero padding and duplicated patches; D is the L1 norm "
               f"of the difference of two programs' gradients from one forward pass. tau1 is not measurable on CPU "
               f"(deterministic kernels)" + ("; GPU results included." if gpu is not None else
                                             "; no GPU results file (nsverify/data/gpu/zones.json)."))
    data["metrics"] = metrics
    return {"summary": summary, "tables": tables, "figures": figures, "claims": claims, "data": data}
