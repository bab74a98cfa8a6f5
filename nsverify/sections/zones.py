"""Report section: bifurcation and compensation zones (Bertoin et al.; Boustany Ch.3), scaled to a CPU. The
experiments and their verdicts are :mod:`nsverify.papers.zones.repro`'s; this module picks the budgets and
renders."""
from __future__ import annotations

import math

from nsverify.claims.stats import clopper_pearson
from nsverify.devices import torch_threads
from nsverify.report import figure_png, section, table
from nsverify.report.claims_table import Parts, share_metric

QUICK = dict(fig33=(3, 2),
             table=dict(width=0.0625, batch_size=16, datasets={"natural": (2, 2)}),
             trend=dict(batch_sizes=(8, 32), width=0.0625, draws=2, batches=1),
             dich=dict(draws=2, batches=2, batch_size=128, width=0.125, fused_too=False),
             sgd=dict(dtypes=("float64", "float32", "bfloat16"), steps=30, width=0.125, pairs32=2, pairs16=5,
                      pairs64=5),
             sweep=dict(seeds=(0,), steps=15, betas=(0.0, 1e2, 1e4)))
#: full mode: every design-determined n_required is reached (tests/test_claims_budgets.py): Fig. 3.3's tail needs
#: 132 draws and its bulk 110 at total intra-draw correlation; Table 3.2's 64-bit claim 32 draws, its 32-bit one 38
FULL = dict(fig33=(136, 4),
            table=dict(width=0.125, batch_size=64, datasets={"natural": (40, 4), "plateaus": (4, 2)}),
            trend=dict(batch_sizes=(8, 32, 128, 512), width=0.125, draws=8, batches=2),
            dich=dict(draws=42, batches=4, batch_size=128, width=1.0, fused_too=True),
            sgd=dict(dtypes=("float64", "float32", "bfloat16"), steps=200, width=1.0, pairs32=32, pairs16=8,
                     pairs64=6),
            sweep=dict(seeds=(0, 1, 2, 3, 4), steps=400, betas=(0.0, 1e2, 1e3, 1e4)))


def _hist(ax, values, label):
    import numpy as np

    logs = [math.log10(v) for v in values if v > 0]
    zeros = sum(1 for v in values if v == 0)
    if logs:
        ax.hist(logs, bins=np.linspace(-20, 4, 49), alpha=0.55, label=f"{label} ({zeros} exact zeros)")
    elif zeros:
        ax.plot([], [], label=f"{label}: all {zeros} exactly 0")


def _fig_hist(runs: dict, title: str) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.2))
    for label, values in runs.items():
        _hist(ax, values, label)
    ax.set_xlabel("log10 D (L1, batch-summed loss, eq. 3.11)")
    ax.set_ylabel("(draw, batch) pairs")
    ax.set_title(title)
    ax.legend(fontsize=6)
    return figure_png(fig)


def _fig_shares(rows: list) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.2))
    for i, (_label, k, n) in enumerate(rows):
        lo, hi = clopper_pearson(k, n)
        v = k / n if n else 0.0
        ax.errorbar([i], [v], yerr=[[v - lo], [hi - v]], fmt="o", capsize=4)
    ax.set_xticks(range(len(rows)), [r[0] for r in rows], rotation=30, ha="right", fontsize=7)
    ax.set_ylim(-0.05, 1.05)
    ax.set_ylabel("share of impacted minibatches")
    ax.set_title("Impacted share at the measured tau1 (95% Clopper-Pearson)")
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


def _g(x) -> str:
    return "-" if x is None else f"{x:.3g}"


SETTING_COLUMNS = ["data", "BN", "dtype", "pairs", "tau1 (reversed order)", "tau1 (thread count; - = not run)",
                   "impacted", "median D (sum)", "median D (mean)", "max D (sum)", "ReLU zeros/batch",
                   "tied windows/batch", "kernel path"]


def _setting_rows(settings: dict) -> list:
    rows = []
    for ds, by_bn in settings.items():
        for bn, s in by_bn.items():
            for name, d in s.items():
                rows.append([ds, bn, name, d["n"], _g(d["tau1_order"]), _g(d["tau1_threads"]),
                             f"{d['impacted']}/{d['n']}",
                             _g(d["median_D"]), _g(d["median_D_mean_reduction"]), _g(d["max_D"]),
                             f"{d['relu_zeros']:.1f}", f"{d['tied']:.0f}", d["kernel_path"]])
    return rows


@section("zones", "Bifurcation and compensation zones (Bertoin; Boustany Ch.3)", order=40,
         description="Tables 3.1/3.3, Fig 3.3, zone volumes at measured tau, batch trend, BN, Bertoin, beta sweep")
def zones_section(ctx) -> dict:
    # one intra-op thread: on a shared 2-core machine two threads fighting other jobs run ~10x slower
    with torch_threads(1):
        return _zones(ctx)


def _zones(ctx) -> dict:
    size = QUICK if ctx.quick else FULL
    p = Parts()
    data: dict = {}
    _exact_tables(ctx, p)
    f33 = _fig33(ctx, size, p, data)
    t32, share_rows = _table32(ctx, size, p, data)
    _batch_trend(ctx, size, p, data)
    share_rows += _dichotomy(ctx, size, p)
    _points(ctx, p, data)
    sgd = _sgd(ctx, size, p, data)
    sweep = _sweep(ctx, size, p, data)
    from nsverify.papers.zones.repro import headline_claims

    p.claims += headline_claims()  # the papers' headline results this machine does not measure (undecided)
    natural = t32["settings"].get("natural", next(iter(t32["settings"].values())))
    p.figures.append({"title": "log10 D per dtype (VGG11 native vs minimal on natural crops; LeNet-5 fp32 Fig 3.3)",
                      "png": _fig_hist({**{f"{n} {bn}": d["D"] for bn, s in natural.items() for n, d in s.items()},
                                        "LeNet-5 fp32 D(P,Q)": f33["D_diff"]}, "Backprop variation D")})
    p.figures.append({"title": "Impacted shares with 95% error bars", "png": _fig_shares(share_rows)})
    p.figures.append({"title": "Divergence curves", "png": _fig_curves(sgd, sweep)})
    gpu = _gpu(p, data)
    summary = (f"{'Quick' if ctx.quick else 'Full'} mode, CPU"
               + ("; GPU results included" if gpu is not None else "; no GPU results file") + ". "
               "D is the L1 norm of the difference of two programs' gradients of the batch-summed loss (eq. 3.11) "
               "from one forward pass (the mean reduction is D / B); tau1 is measured per network and setting from "
               "reruns of the same program; 16-bit affine layers round the product before adding the bias.")
    return p.render(summary, data, claims_title="Claims (Boustany, Ch.3; Bertoin et al.)")


def _exact_tables(ctx, p: Parts) -> None:
    """Tables 3.1, 3.3 and the 3.5.3 example (exact, float32)."""
    from nsverify.papers.zones import repro

    ctx.progress("Tables 3.1, 3.3 and the 3.5.3 example")
    t31, t33, ex = (p.collect_claims(r) for r in (repro.table_3_1(), repro.table_3_3(), repro.example_353()))
    rows = [[f"Table 3.1 {k}"] + [f"{v:.3g}" for v in vals] for k, vals in t31["rows"].items()]
    rows += [[f"Table 3.3 {k}"] + [f"{v:.3g}" for v in vals] for k, vals in t33["rows"].items()]
    p.tables.append(table("zero'(t) in float32 (Boustany Tables 3.1 and 3.3)", ["program / x"] +
                          [f"t={t:g}" for t in repro.T_VALUES], rows))
    p.metrics += [{"key": "table3.1|x1|t=0|float32", "kind": "convention", "value": t31["rows"]["x1=(1,2,3,4)"][3]},
                  {"key": "table3.1|x2|t=0|float32", "kind": "convention",
                   "value": t31["rows"]["x2=1.4*(1,1,1,1)"][3]},
                  {"key": "table3.3|x1|t=0|float32", "kind": "convention", "value": t33["rows"]["x=(1,2,3,4)"][3]},
                  {"key": "example3.5.3|D", "kind": "convention", "value": ex["D_L1"]}]


def _fig33(ctx, size: dict, p: Parts, data: dict) -> dict:
    from nsverify.papers.zones import repro

    m, r = size["fig33"]
    ctx.progress(f"Fig 3.3 analogue: LeNet-5 fp32, {m} draws x {r} batches of 128, D(P,P~) and D(P,Q)")
    f33 = p.collect_claims(repro.fig_3_3(draws=m, batches=r, memo=ctx.checkpoint))
    data["fig33"] = {k: f33[k] for k in ("D_same", "D_diff", "D_order", "median", "relative", "bulk_share",
                                         "tail_share")}
    p.tables.append(table(
        "Fig 3.3 analogue (LeNet-5, fp32, digits28, batch 128, batch-summed loss; bulk/tail split at "
        f"{repro.FIG33_TAIL_FACTOR:g} x u x ||backprop[P]||_1)",
        ["pairs", "median D(P,Q)", "largest D / (u ||g||_1)", "bulk share", "tail share", "max D(P,Q)",
         "pairs with D(P,P~) != 0 (same rerun)", "max D(P,P~) reversed order"],
        [[f33["n"], _g(f33["median"]), _g(max(f33["relative"] or [0.0])), _g(f33["bulk_share"]),
          _g(f33["tail_share"]), _g(max(f33["D_diff"])), sum(v != 0 for v in f33["D_same"]),
          _g(max(f33["D_order"]))]]))
    p.metrics.append({"key": "fig3.3|lenet5|float32|tail_share", "kind": "info", "value": f33["tail_share"]})
    return f33


def _table32(ctx, size: dict, p: Parts, data: dict) -> tuple[dict, list]:
    from nsverify.papers.zones import repro

    tcfg = size["table"]
    ctx.progress(f"Table 3.2 analogue: VGG11 width {tcfg['width']}, tau1 measured per setting")
    t32 = p.collect_claims(repro.table_3_2(memo=ctx.checkpoint, progress=ctx.progress, **tcfg))
    data["table32"] = t32["settings"]
    p.tables.append(table(
        f"Table 3.2 analogue: VGG11 width {tcfg['width']}, batch {tcfg['batch_size']}, native vs minimal max pool; "
        f"impacted = D(P,Q) > tau1, tau1 = largest D(P,P~) of the setting's reruns (the same program on the batch "
        f"in reversed order); claims judged on the natural crops", SETTING_COLUMNS, _setting_rows(t32["settings"])))
    share_rows = []
    for ds, by_bn in t32["settings"].items():
        for bn, s in by_bn.items():
            for name, d in s.items():
                share_rows.append((f"{name} {bn} {ds}", d["impacted"], d["n"]))
                p.metrics.append(share_metric(f"table3.2|vgg11|{ds}|{name}|{bn}|impacted", d["impacted"], d["n"]))
    return t32, share_rows


def _batch_trend(ctx, size: dict, p: Parts, data: dict) -> None:
    from nsverify.papers.zones import repro

    ctx.progress("Fig 3.6 batch-size trend (fp32, Kendall)")
    f36 = p.collect_claims(repro.fig_3_6_batch(memo=ctx.checkpoint, progress=ctx.progress, **size["trend"]))
    data["trend"] = f36
    imp = f36.get("impacted", {})
    p.tables.append(table("Fig 3.6 batch-size trend: impacted pairs at tau1 measured per B, and D(P,Q) per pair "
                          "(VGG11, fp32, natural crops)",
                          ["B", "pairs", "tau1(B)", "impacted", "median D (sum)", "median D (mean)"],
                          [[b, len(v), _g(imp[b][2]) if b in imp else "-",
                            f"{imp[b][0]}/{imp[b][1]}" if b in imp else "-", _g(sorted(v)[len(v) // 2]),
                            _g(sorted(v)[len(v) // 2] / int(b))] for b, v in f36["by_batch"].items()]))
    p.metrics.append({"key": "fig3.6|batch|kendall_tau", "kind": "info", "value": f36["kendall"]["value"]})


def _dichotomy(ctx, size: dict, p: Parts) -> list:
    """Bertoin's dichotomy: its table and share metrics; returns its rows for the shares figure."""
    from nsverify.papers.zones import repro

    ctx.progress("Bertoin dichotomy: MLP at init, ReLU'(0)=0 vs 1, 16-bit affine layers emulated")
    dich = p.collect_claims(repro.bertoin_dichotomy(memo=ctx.checkpoint, progress=ctx.progress, **size["dich"]))
    drows, share_rows = [], []
    for label, res in (("", dich["result"]), (" (fused CPU kernel)", dich.get("fused") or {})):
        for name, d in res.items():
            k = sum(v > 0 for v in d["D"])
            nz = [v for v in d["D"] if v > 0]
            drows.append([name + label, d["kernel_path"], f"{k}/{d['n']}", f"{d['relu_zeros']:.1f}",
                          _g(min(nz) if nz else None)])
            if not label:
                p.metrics.append(share_metric(f"bertoin|mlp|{name}|pairs_D>0", k, d["n"]))
                share_rows.append((f"{name} MLP relu", k, d["n"]))
    p.tables.append(table(f"Bertoin dichotomy (MLP width {size['dich']['width']} x 2048, digits28, batch "
                          f"{size['dich']['batch_size']}, at initialization)",
                          ["dtype", "kernel path", "minibatches with D(R0,R1) > 0", "ReLU zeros per batch",
                           "tau2 = min non-zero D(R0,R1)"], drows))
    return share_rows


def _points(ctx, p: Parts, data: dict) -> None:
    from nsverify.papers.zones import repro

    ctx.progress("Exact classification vs float view (LeNet-5 width 0.5, 4 digits, 2 draws)")
    pts = ctx.checkpoint("points-lenet5", lambda: [_point_row(r) for r in repro.exact_vs_float_points()])
    p.tables.append(table(
        "Both views of each point: exact zone of the point rounded to the dtype (exact rational arithmetic, "
        "programs E0=(ReLU'(0)=0, native) vs E1=(ReLU'(0)=1, minimal)) and what the float computation saw",
        ["draw", "dtype", "exact zone", "exact ties", "exact ReLU zeros", "float ties", "float ReLU zeros",
         "sites created by rounding", "destroyed", "float D(E0,E1)", "tau", "float impacted"], pts))
    data["points"] = pts


def _sgd(ctx, size: dict, p: Parts, data: dict) -> dict:
    from nsverify.papers.zones import repro

    sg = size["sgd"]
    ctx.progress(f"SGD trajectories ReLU'(0)=0 vs 1, {sg['steps']} steps")
    sgd = p.collect_claims(repro.sgd_trajectories(sg["dtypes"], sg["steps"], width=sg["width"],
                                                  memo=ctx.checkpoint, pairs32=sg.get("pairs32", 1),
                                                  pairs16=sg.get("pairs16"), pairs64=sg.get("pairs64")))["runs"]
    data["sgd"] = sgd
    p.tables.append(table(f"SGD trajectories, ReLU'(0) = 0 vs 1 (MLP width {sg['width']} x 2048, digits28)",
                          ["dtype", "kernel path", "steps", "first bitwise difference", "final L1 distance"],
                          [[n, r["kernel_path"], len(r["distance"]), r["first_divergence"], _g(r["distance"][-1])]
                           for n, r in sgd.items()]))
    for name, r in sgd.items():
        p.metrics.append({"key": f"sgd|mlp|{name}|first_divergence", "kind": "info", "value": r["first_divergence"]})
    return sgd


def _sweep(ctx, size: dict, p: Parts, data: dict) -> dict:
    from nsverify.papers.zones import repro

    ctx.progress("Training sweep over beta")
    sweep = repro.beta_sweep(memo=ctx.checkpoint, progress=lambda msg, i, n: ctx.progress(msg, i, n),
                             **size["sweep"])
    p.claims += sweep.pop("claims")
    data["sweep"] = sweep
    p.tables.append(table(
        "Training sweep (LeNet-5 width 0.5, digits28, SGD lr 0.1, batch 32): final training loss",
        ["dtype", "ReLU'(0)", "beta", "seed", "initial loss", "final loss", "learned",
         "non-finite or final >= initial", "late-loss std (oscillation)", "kernel path"],
        [[r["dtype"], r["relu_s"], r["beta"], r["seed"], _g(r["initial_loss"]), _g(r["final_loss"]),
          r["learned"], r["diverged"], _g(r.get("late_std")), r["kernel_path"]] for r in sweep["results"]]))
    return sweep


def _gpu(p: Parts, data: dict) -> dict | None:
    """The stored GPU runs (scripts/gpu/zones.py, scripts/gpu/claims.py): their tables, metrics and claims."""
    from nsverify.claims.record import on_stored_run
    from nsverify.papers import gpu_claims
    from nsverify.papers.zones import repro

    gpu = repro.gpu_results()
    run = gpu_claims.load()
    if gpu is not None:
        data["gpu"] = {k: v for k, v in gpu["raw"].items() if k != "claims"}
        # the older zones run predates the current experiment (its claims are stale); once the claims run of the
        # current design exists, it decides the GPU claims and the old table stays for the record only
        superseded = run is not None and repro.stale_design(gpu["raw"])
        if not superseded:
            p.claims += on_stored_run(gpu["claims"], "gpu-zones", gpu["raw"]["provenance"].get("device"))
        note = " (superseded by the GPU claims run below: this run predates the current experiment)" \
            if superseded else ""
        p.tables.append(table(f"GPU ({gpu['provenance']}){note}: full-width VGG11, native vs minimal max pool, "
                              f"tau1 from reruns with nondeterministic kernels",
                              ["dtype", "BN", "tau1 (measured)", "reruns differing", "tau2", "impacted", "max D"],
                              [[g["dtype"], g["bn"], _g(g["tau1"]), g["tau1_reruns_differing"], _g(g["tau2"]),
                                g["impacted"], _g(g["max_D"])] for g in gpu["rows"]]))
        for key, s in gpu["shares"].items():
            p.metrics.append({"key": f"gpu|{key}", "kind": "share", "value": s["value"],
                              "lo": s["clopper_pearson"][0], "hi": s["clopper_pearson"][1]})
    if run is not None:
        p.claims += run["zones"]["claims"]
        p.tables.append(table(f"GPU claims run ({run['provenance']}): VGG11 on natural crops, Bertoin's MLP",
                              SETTING_COLUMNS[:5] + ["tau1 (rerun)"] + SETTING_COLUMNS[6:],
                              _setting_rows(run["zones"]["settings"])))
    return gpu
