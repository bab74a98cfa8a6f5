"""Report section: optimizers on nonsmooth problems (INNAprop family) and the dying-ReLU study."""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch

from nsverify.report import figure_png, section, table

CONVEX = ("lasso", "hinge_svm", "lad", "max_affine")
COMPARED = ("AdamW", "SGD", "heavy-ball", "INNA", "INNAprop(0.1,0.9)", "INNAprop(1,1)", "INNAprop(2,2)")
GPU_JSON = Path(__file__).resolve().parent.parent / "data" / "gpu" / "optim.json"


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


def _claim(claim: str, measured: str, held) -> dict:
    return {"claim": claim, "measured": measured, "held": held}


def _cell(rmap, gamma, beta):
    return next(c for c in rmap["cells"] if c["gamma"] == gamma and c["beta"] == beta)


def _network_claims(net: list[dict], datasets, nsteps: int) -> list[dict]:
    by = {(r["dataset"], r["gamma"], r["optimizer"]): r["dead_share"]["mean"] for r in net}
    anything = any(v > 0 for v in by.values())
    note = "" if anything else f" (no unit died in {nsteps} steps: too short; full mode trains 50000)"
    fmt = lambda o, g: ", ".join(f"{d} {by[(d, g, o)]:.2f}" for d in datasets)
    small_more = all(by[(d, 1e-4, "Adam")] > by[(d, 1.0, "Adam")] for d in datasets)
    no_mom_less = all(by[(d, 1e-4, "Adam(beta1=0)")] < by[(d, 1e-4, "Adam")] for d in datasets)
    hb_more = all(by[(d, 1e-4, "heavy-ball")] > by[(d, 1e-4, "SGD")] for d in datasets)
    return [
        _claim("networks: smaller target variance gamma gives more dead ReLUs with Adam (003 Fig. 1)",
               f"Adam dead share gamma=1e-4: {fmt('Adam', 1e-4)}; gamma=1: {fmt('Adam', 1.0)}" + note,
               small_more if anything else None),
        _claim("networks: the small-gamma dying needs momentum (003 Fig. 1: 'only with momentum')",
               f"gamma=1e-4: Adam(beta1=0) {fmt('Adam(beta1=0)', 1e-4)} vs Adam {fmt('Adam', 1e-4)}; "
               f"heavy-ball {fmt('heavy-ball', 1e-4)} vs SGD {fmt('SGD', 1e-4)}" + note,
               (no_mom_less and hb_more) if anything else None),
        _claim("networks: SGD does not produce more dead ReLUs at small gamma (003 Sec. 6)",
               f"SGD dead share gamma=1e-4: {fmt('SGD', 1e-4)}; gamma=1: {fmt('SGD', 1.0)}" + note,
               all(by[(d, 1e-4, "SGD")] <= by[(d, 1.0, "SGD")] for d in datasets) if anything else None),
    ]


@section(
    "optim",
    "Optimizers on nonsmooth problems and dying ReLU",
    order=60,
    description="INNAprop family on problems with known optima, precision study, dying-ReLU region map",
)
def optim_section(ctx) -> dict:
    from nsverify.papers.arnekvist.dying_relu import network_experiment, region_map
    from nsverify.papers.innaprop import compare, precision_study
    from nsverify.papers.innaprop.checks import adamw_mismatches, step_time_ratio
    from nsverify.papers.innaprop.harness import torch_threads

    q = ctx.quick
    metrics, claims, tables, figures = [], [], [], []
    with torch_threads(1):
        # -- identities ------------------------------------------------------------------------------------
        ctx.progress("INNAprop identities")
        cases = {"1,1|float32": (1.0, 1.0, torch.float32), "1,1|float64": (1.0, 1.0, torch.float64),
                 "0.5,2|float32": (0.5, 2.0, torch.float32), "0.25,4|float64": (0.25, 4.0, torch.float64),
                 "1/0.09,0.09|float64": (1 / 0.09, 0.09, torch.float64)}
        ident = {k: adamw_mismatches(a, b, dtype=dt) for k, (a, b, dt) in cases.items()}
        bad = {k: v["mismatched_steps"] for k, v in ident.items()}
        for k, v in ident.items():
            metrics.append({"key": f"innaprop_vs_adamw_bitwise|{k}|cpu", "kind": "counterexample",
                            "value": v["mismatched_steps"]})
        claims.append(
            _claim(
                "INNAprop with alpha = beta = 1 is AdamW with beta1 = 0 (001 Remark 13)",
                f"single-tensor paths, {ident['1,1|float32']['steps']} steps: mismatched steps float32 "
                f"{bad['1,1|float32']}, float64 {bad['1,1|float64']}; "
                f"psi stayed 0: {ident['1,1|float32']['psi_zero']}",
                bad["1,1|float32"] == 0 == bad["1,1|float64"],
            )
        )
        claims.append(
            _claim(
                "alpha = 1/beta gives AdamW(lr*beta, beta1=0), exactly for beta a power of 2",
                f"mismatched steps: beta=2 float32 {bad['0.5,2|float32']}, beta=4 float64 "
                f"{bad['0.25,4|float64']}; beta=0.09 (fl(fl(1/beta)*beta) != 1, so psi_0 != 0) float64 "
                f"{bad['1/0.09,0.09|float64']}",
                bad["0.5,2|float32"] == 0 == bad["0.25,4|float64"],
            )
        )
        claims.append(
            _claim(
                "DINAdam Algorithm 6 (memory-saving form) is the recursion (4.28)-(4.29)",
                "only with theta <- theta - lr (m~ + alpha beta g)/...; the printed minus sign "
                "(4.31, 4.34, Alg. 6) gives a different method (tests/test_optim_forms.py)",
                False,
            )
        )

        # -- convergence -----------------------------------------------------------------------------------
        seeds = (0, 1) if q else (0, 1, 2, 3, 4)
        steps = 300 if q else 2000
        problems = CONVEX + ("teacher_student",) + (() if q else ("digits_mlp",))
        results = {}
        for i, prob in enumerate(problems):
            ctx.progress(f"convergence {prob}", i, len(problems))
            results[prob] = compare(
                prob, list(COMPARED), seeds=seeds, steps=steps, record_every=max(1, steps // 60), target=1e-2
            )
        rows = []
        for prob, res in results.items():
            for o, s in res["summary"].items():
                rows.append(
                    [
                        prob,
                        o,
                        _fmt(s["final"]),
                        _fmt(s.get("speedup_vs_baseline")),
                        f"{s.get('matched_baseline', '-')}/{len(seeds)}" if o != "AdamW" else "-",
                        _fmt(s.get("accuracy")),
                    ]
                )
                metrics.append(_conv_metric(f"{prob}|{o}|final", s["final"]))
        tables.append(
            table(
                f"Final f - f* (mean [95% CI] over {len(seeds)} seeds, {steps} steps, cosine schedule; "
                "digits: final train loss); speed-up = AdamW's best step / first step reaching "
                "AdamW's best (Table 4.4 metric)",
                ["problem", "optimizer", "final gap", "speed-up vs AdamW", "matched AdamW", "test acc"],
                rows,
            )
        )
        figures.append({"title": "Convergence curves (mean over seeds)", "png": _curves_figure(results)})
        fast = [
            p
            for p in results
            if (results[p]["summary"]["INNAprop(0.1,0.9)"].get("speedup_vs_baseline") or {}).get("mean")
            not in (None,)
            and results[p]["summary"]["INNAprop(0.1,0.9)"]["speedup_vs_baseline"]["mean"] > 1
        ]
        claims.append(
            _claim(
                "INNAprop(0.1,0.9) reaches AdamW's best loss in fewer steps (Table 4.4, GPT-2)",
                f"on {len(fast)}/{len(results)} small nonsmooth problems here ({', '.join(fast)})",
                None if 0 < len(fast) < len(results) else len(fast) == len(results),
            )
        )

        # -- precision -------------------------------------------------------------------------------------
        ctx.progress("precision study")
        prec = precision_study("hinge_svm", seeds=seeds, steps=400 if q else 3000)
        prows = []
        for k, v in prec.items():
            o, dt = k.split("|")
            prows.append(
                [o, dt, _fmt(v["final_gap"]), _fmt(v["max_dev_from_float64"]), _fmt(v["late_progress"])]
            )
            metrics.append(_conv_metric(f"precision|{k}|final", v["final_gap"]))
        tables.append(
            table(
                "Precision study (hinge SVM, lr 1e-3 cosine to 0, alpha=0.1, beta=0.9)",
                ["optimizer", "dtype", "final gap", "max |f - f_float64|", "late progress"],
                prows,
            )
        )
        m32 = prec["INNApropMomentum(0.1,0.9)|float32"]["max_dev_from_float64"]["mean"]
        i32 = prec["INNAprop(0.1,0.9)|float32"]["max_dev_from_float64"]["mean"]
        mbf = prec["INNApropMomentum(0.1,0.9)|bfloat16"]["max_dev_from_float64"]["mean"]
        ibf = prec["INNAprop(0.1,0.9)|bfloat16"]["max_dev_from_float64"]["mean"]
        claims.append(
            _claim(
                "the momentum variant (4.21)-(4.23) is poorly scaled (gamma^2) at 32 bits or less "
                "(001 L2187-2193)",
                f"float32 deviation from float64: momentum {m32:.2g} vs INNAprop {i32:.2g}; "
                f"bfloat16: {mbf:.2g} vs {ibf:.2g} (both stall in bfloat16: updates below half an ulp "
                "of the parameters)",
                m32 > 10 * i32 and mbf > 2 * ibf,
            )
        )

        # -- region map ------------------------------------------------------------------------------------
        ctx.progress("dying ReLU region map")
        rmap = region_map(grid=11 if q else 31, max_steps=3000 if q else 20000)
        rrows = [
            [
                c["gamma"],
                c["beta"],
                round(c["optimum"], 3),
                round(c["dead"], 3),
                round(c["other"], 3),
                round(c["unconverged"], 3),
            ]
            for c in rmap["cells"]
        ]
        for c in rmap["cells"]:
            metrics.append(
                {
                    "key": f"region|gamma={c['gamma']:g}|beta={c['beta']:g}|dead",
                    "kind": "share",
                    "value": c["dead"],
                    "lo": c["dead"],
                    "hi": c["dead"],
                }
            )
        tables.append(
            table(
                f"Single-ReLU region map: heavy-ball eta={rmap['eta']}, {rmap['cells'][0]['n_inits']} "
                "initial (w_L, b) per cell",
                ["gamma", "beta", "optimum", "dead cone", "other", "unconverged"],
                rrows,
            )
        )
        figures.append({"title": "Dead-cone share over gamma x beta", "png": _region_figure(rmap)})
        d_small = [_cell(rmap, 1e-3, b)["dead"] for b in (0.0, 0.9)]
        d_big = [_cell(rmap, 1.0, b)["dead"] for b in (0.0, 0.9)]
        claims.append(
            _claim(
                "single ReLU: smaller target scale gamma sends more initializations into the dead cone",
                f"dead share gamma=1 vs 1e-3: beta=0 {d_big[0]:.2f} vs {d_small[0]:.2f}; beta=0.9 "
                f"{d_big[1]:.2f} vs {d_small[1]:.2f}",
                d_small[0] > d_big[0] and d_small[1] > d_big[1],
            )
        )
        low = [_cell(rmap, 1e-3, b)["dead"] for b in (0.0, 0.5, 0.7)]
        hi = [_cell(rmap, 1e-3, b)["dead"] for b in (0.9, 0.99)]
        claims.append(
            _claim(
                "single ReLU, gamma=1e-3: beta <= 0.7 behaves like beta = 0, larger momentum kills more "
                "(003 Fig. 5)",
                f"dead share at beta 0/0.5/0.7: {low}; at 0.9/0.99: {hi}",
                max(low) - min(low) < 0.05 and min(hi) > max(low),
            )
        )

        # -- network experiment ----------------------------------------------------------------------------
        nsteps = 500 if q else 50000
        datasets = ("diabetes",) if q else ("diabetes", "friedman")
        cache = None if q else ctx.scratch_file("dying_relu.json")
        net = network_experiment(datasets=datasets, seeds=(0, 1) if q else (0, 1, 2), steps=nsteps,
                                 progress=ctx.progress, cache=cache)
        nrows = []
        for r in net:
            s = r["dead_share"]
            nrows.append([r["dataset"], r["gamma"], r["optimizer"], _fmt(s), r["per_seed"],
                          _fmt(r["mse_over_gamma2"])])
            metrics.append({"key": f"dead|{r['dataset']}|gamma={r['gamma']:g}|{r['optimizer']}|{nsteps}",
                            "kind": "share", "value": s["mean"], "lo": max(0.0, s["lo"]),
                            "hi": min(1.0, s["hi"])})
        tables.append(table(f"Dead-unit share (worst layer, 200 hidden units, {nsteps} steps, batch 64; "
                            "003 trained 250000 steps)",
                            ["data", "gamma", "optimizer", "dead share", "per seed", "MSE / gamma^2"], nrows))
        claims.extend(_network_claims(net, datasets, nsteps))
        # -- speed -----------------------------------------------------------------------------------------
        ctx.progress("step time ratio")
        sp = step_time_ratio(1_000_000 if q else 10_000_000, reps=5, rounds=5)
        metrics.append(
            {
                "key": f"innaprop_over_adamw_step|{sp['n_params']}|float32|cpu",
                "kind": "bench_ratio",
                "value": sp["ratio"],
            }
        )
        metrics.append(
            {
                "key": "state_bytes_per_param|innaprop_minus_adamw",
                "kind": "counterexample",
                "value": int(sp["state_bytes_per_param"]["innaprop"] != sp["state_bytes_per_param"]["adamw"]),
            }
        )
    gpu = None
    if GPU_JSON.exists():
        gpu = json.loads(GPU_JSON.read_text())
        tables.append(
            table(
                "GPU step time (scripts/gpu/optim.py)",
                ["n params", "dtype", "AdamW ms", "INNAprop ms", "ratio"],
                [
                    [
                        r["n_params"],
                        r["dtype"],
                        round(r["adamw_s"] * 1e3, 3),
                        round(r["innaprop_s"] * 1e3, 3),
                        round(r["ratio"], 3),
                    ]
                    for r in gpu.get("results", [])
                ],
            )
        )
    held = sum(c["held"] is True for c in claims)
    summary = (
        f"INNAprop, INNA, DINAdam and the momentum variant on {len(results)} problems x {len(seeds)} seeds; "
        f"{held}/{len(claims)} paper claims held (see claims; 'None' = mixed). INNAprop/AdamW step time "
        f"{sp['ratio']:.2f}x at {sp['n_params']:.0e} parameters (CPU, 1 thread; target <= 1.15x)."
    )
    return {
        "summary": summary,
        "tables": tables,
        "figures": figures,
        "claims": claims,
        "data": {
            "metrics": [
                m
                for m in metrics
                if m["value"] is not None and not (isinstance(m["value"], float) and math.isnan(m["value"]))
            ],
            "identities": ident,
            "precision": prec,
            "region_map": rmap,
            "network": net,
            "speed": sp,
            "gpu": gpu,
            "convergence": {
                p: {"summary": r["summary"], "steps": r["steps"], "seeds": r["seeds"]}
                for p, r in results.items()
            },
        },
    }
