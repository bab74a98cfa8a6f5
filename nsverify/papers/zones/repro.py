"""Scaled-down reproductions of Boustany Ch.3 and Bertoin et al., each experiment with its judged claims.

Every experiment returns its results and a ``"claims"`` list (records of :func:`nsverify.papers.claims.claim`);
the ``*_claims`` functions are the decision rules, usable on results computed elsewhere (the GPU script).
Every function is deterministic (seeded) and sized by its arguments (the report section chooses the budget).
A claim that does not reproduce is reported with ``held=False``; nothing here is tuned to make it hold.
"""
from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import torch
import torch.nn.functional as F

from nsverify.papers.claims import claim
from nsverify.papers.zones.measure import program_grads, variation
from nsverify.papers.zones.rules import as_program, hybrid_program, program_label, program_params, use_rule

T_VALUES = (-1e-3, -1e-2, -1e-1, 0.0, 1e1, 1e2, 1e3)  # the columns of Tables 3.1 and 3.3


def _dzero(fn, t: float, x, dtype):
    tt = torch.tensor(t, dtype=dtype, requires_grad=True)
    (g,) = torch.autograd.grad(fn(tt * x.to(dtype)), tt)
    return float(g)


def table_3_1(dtype=torch.float32) -> dict:
    """zero(t) = max1(t x) - max2(t x); max1 = first-index max (torch.max(dim)), max2 = even split (amax)."""
    fn = lambda z: torch.max(z, dim=0).values - torch.amax(z)
    rows = {}
    for label, x in (("x1=(1,2,3,4)", torch.tensor([1.0, 2, 3, 4])), ("x2=1.4*(1,1,1,1)", torch.full((4,), 1.4))):
        rows[label] = [_dzero(fn, t, x, dtype) for t in T_VALUES]
    r1, r2 = rows["x1=(1,2,3,4)"], rows["x2=1.4*(1,1,1,1)"]
    held = (r1[3] == -1.5 and all(v == 0.0 for i, v in enumerate(r1) if i != 3)
            and all(v != 0 and abs(v) < 2.5e-7 for v in r2))
    return {"t": list(T_VALUES), "rows": rows, "claims": [claim(
        "Boustany Table 3.1 (fp32): zero'(t) = -1.5 at t=0 and 0 elsewhere for x1; ~1e-7 at every t for "
        "x2 = 1.4*(1,1,1,1)", f"x1: {r1}; x2: {[f'{v:.3g}' for v in r2]}", bool(held))]}


def _fig39_programs():
    """Figure 3.9 of Boustany, verbatim (relu2 has derivative 1 at 0)."""
    def relu(x):
        return torch.relu(x)

    def relu2(x):
        return torch.where(x >= 0, x, torch.tensor(0.0, dtype=x.dtype))

    def max01(x):
        return (x[0] + x[1]) / 2 + relu((x[0] - x[1]) / 2) + relu((x[1] - x[0]) / 2)

    def max02(x):
        return (x[0] + x[1]) / 2 + relu2((x[0] - x[1]) / 2) + relu((x[1] - x[0]) / 2)

    def max1(x):
        return max01(torch.stack([max01(x[0:2]), max01(x[2:4])]))

    def max2(x):
        return max02(torch.stack([max02(x[0:2]), max02(x[2:4])]))

    return lambda z: max1(z) - max2(z)


def table_3_3(dtype=torch.float32) -> dict:
    fn = _fig39_programs()
    rows = {}
    for label, x in (("x=(1,2,3,4)", torch.tensor([1.0, 2, 3, 4])), ("x=1.4*(1,1,1,1)", torch.full((4,), 1.4))):
        rows[label] = [_dzero(fn, t, x, dtype) for t in T_VALUES]
    r1, r2 = rows["x=(1,2,3,4)"], rows["x=1.4*(1,1,1,1)"]
    held_1 = r1[3] == 1.5 and all(v == 0.0 for i, v in enumerate(r1) if i != 3)
    held_2 = all(v != 0 and abs(v) < 2.5e-7 for v in r2)
    return {"t": list(T_VALUES), "rows": rows, "held_x1": bool(held_1), "held_x2": bool(held_2), "claims": [claim(
        "Boustany Table 3.3 (fp32, Fig 3.9 code): zero2'(0) = +1.5 for x=(1,2,3,4), 0 elsewhere; ~1e-7 at every t "
        "for x = 1.4*(1,1,1,1)", f"x=(1,2,3,4): {r1}; x=1.4*1: {[f'{v:.3g}' for v in r2]}",
        bool(held_1 and held_2))]}


def example_353(k: float = 1.0, dtype=torch.float32) -> dict:
    """Section 3.5.3: l(W) = MaxPool(X * W), W = k*ones(3,3), X 4x4 with ones at (0,0) and (0,3) (the matrix is
    lost in the text; this X is the one consistent with the printed backprops): the 2x2 conv output
    [[k, k], [0, 0]] ties, native -> E11, minimal -> (E11 + E13)/2."""
    from torch import nn

    from nsverify.papers.zones.rules import MaxPool2dS

    x = torch.zeros(1, 1, 4, 4, dtype=dtype)
    x[0, 0, 0, 0] = x[0, 0, 0, 3] = 1.0
    conv = nn.Conv2d(1, 1, 3, bias=False).to(dtype)
    with torch.no_grad():
        conv.weight.fill_(k)
    model = nn.Sequential(conv, MaxPool2dS(2))
    out = model(x).sum()
    grads = {}
    for name in ("native", "minimal"):
        with use_rule(name):
            (g,) = torch.autograd.grad(out, conv.weight, retain_graph=True)
        grads[name] = g[0, 0].tolist()
    expect_p = [[1.0, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]
    expect_q = [[0.5, 0.0, 0.5], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]
    d = sum(abs(a - b) for ra, rb in zip(grads["native"], grads["minimal"]) for a, b in zip(ra, rb))
    return {"native": grads["native"], "minimal": grads["minimal"], "D_L1": d, "claims": [claim(
        "Boustany 3.5.3: backprop[P](W) = E11 (native), backprop[Q](W) = (E11+E13)/2 (minimal); W is in the "
        "bifurcation zone", f"native {grads['native'][0]}, minimal {grads['minimal'][0]}, D = {d}",
        grads["native"] == expect_p and grads["minimal"] == expect_q)]}


def fig_3_3(draws: int = 6, batches: int = 4, batch_size: int = 128, seed: int = 0) -> dict:
    """LeNet-5, fp32, digits28: D(P, P~) (same program twice) and D(P, Q) (native vs minimal maxpool)."""
    from nsverify.workloads.datasets import digits28
    from nsverify.workloads.models import lenet5

    x, y = digits28()
    same, diff = [], []
    for m in range(draws):
        torch.manual_seed(seed * 1000 + m)
        model = lenet5()
        g = torch.Generator().manual_seed(seed * 1000 + m)
        idx = torch.randperm(len(x), generator=g)[: batches * batch_size].split(batch_size)
        for b in idx:
            (gp, gq), _, _ = program_grads(model, x[b], y[b], ("native", "minimal"), "mean")
            (gp2,), _, _ = program_grads(model, x[b], y[b], ("native",), "mean")
            same.append(variation(gp, gp2))
            diff.append(variation(gp, gq))
    bulk = [d for d in diff if 0 < d <= 1e-6]
    tail = [d for d in diff if d > 1e-5]
    n = len(diff)
    held_same = all(d == 0 for d in same)
    held_pos = all(d > 0 for d in diff)
    held_bimodal = len(bulk) > n / 2 and len(tail) > 0
    return {"D_same": same, "D_diff": diff, "n": n, "bulk_share": len(bulk) / n, "tail_share": len(tail) / n,
            "held_parts": {"D(P,P~)=0": held_same, "D(P,Q)>0 everywhere": held_pos,
                           "bimodal with tail": held_bimodal},
            "claims": [claim(
                "Boustany Fig 3.3 (LeNet-5, fp32): D(P,P~) = 0; D(P,Q) > 0 for all (m,q), bimodal: bulk near machine "
                "precision (1e-8..1e-7, 98.78%) and a heavy tail (~1e-3, 1.22%)",
                f"D(P,P~)=0 on {sum(d == 0 for d in same)}/{n}; D(P,Q)>0 on {sum(d > 0 for d in diff)}/{n}; "
                f"bulk (<=1e-6) {len(bulk)}/{n}, tail (>1e-5) {len(tail)}/{n}; "
                f"median {sorted(diff)[n // 2]:.2e}, max {max(diff):.2e}",
                held_same and held_pos and held_bimodal)]}


def precision_table(model="vgg11", width=0.125, dataset="plateaus", draws=4, batches=3, batch_size=32,
                    dtypes=("bfloat16", "float32", "float64"), thresholds=None, bn=False, seed=0,
                    programs=("native", "minimal"), progress=None, resume=None) -> dict:
    """Table 3.2 analogue: shares per dtype (thresholds default to Table 3.4's VGG11 row; bf16 uses the 16-bit
    value)."""
    from nsverify.papers.zones.measure import PAPER_THRESHOLDS
    from nsverify.papers.zones.volume import VolumeConfig, estimate_volume

    taus = dict(thresholds or {**PAPER_THRESHOLDS["vgg11"], "bfloat16": PAPER_THRESHOLDS["vgg11"]["float16"]})
    cfg = VolumeConfig(model=model, width=width, bn=bn, dataset=dataset, n_data=max(256, batches * batch_size),
                       batch_size=batch_size, draws=draws, batches=batches, dtypes=list(dtypes), seed=seed,
                       programs=programs)
    return estimate_volume(cfg, taus, resume=resume, progress=progress or (lambda *a, **k: None))


def table_3_2_claims(res: dict) -> list[dict]:
    d = res["dtypes"]
    out = []
    if "float64" in d:
        p = d["float64"]["pair_share"]
        out.append(claim("Table 3.2: 64 bits -> 0% of minibatches impacted",
                         f"{p['count']}/{p['n']} (CP {p['clopper_pearson'][0]:.2f}-{p['clopper_pearson'][1]:.2f})",
                         p["count"] == 0))
    if "float32" in d:
        p = d["float32"]["pair_share"]
        out.append(claim("Table 3.2: 32 bits -> strictly between 0% and 100% of minibatches (46.67%)",
                         f"{p['count']}/{p['n']} = {p['value']:.1%} (CP {p['clopper_pearson'][0]:.2f}-"
                         f"{p['clopper_pearson'][1]:.2f})", 0 < p["count"] < p["n"]))
    for name in ("bfloat16", "float16"):
        if name in d:
            p = d[name]["pair_share"]
            out.append(claim(f"Table 3.2: 16 bits ({name}) -> 100% of minibatches impacted",
                             f"{p['count']}/{p['n']} (CP {p['clopper_pearson'][0]:.2f}-"
                             f"{p['clopper_pearson'][1]:.2f})", p["count"] == p["n"]))
    return out


def _disjoint_greater(a: dict, b: dict) -> bool | None:
    """True when a's CP interval lies above b's, False when below, None when they overlap."""
    ia, ib = a["clopper_pearson"], b["clopper_pearson"]
    if ia[0] > ib[1]:
        return True
    if ia[1] < ib[0]:
        return False
    return None


def trend_claims(by_batch: dict, bn_off: dict, bn_on: dict) -> list[dict]:
    """Fig 3.6: larger batch -> larger fp32 share; BN increases the fp32 share.  A trend counts as reproduced
    only when it is significant: the 95% Clopper-Pearson intervals of the two ends are disjoint."""
    sizes = sorted(by_batch)
    shares = [by_batch[b]["dtypes"]["float32"]["pair_share"] for b in sizes]
    mono = all(shares[i + 1]["value"] >= shares[i]["value"] for i in range(len(shares) - 1))
    sig = _disjoint_greater(shares[-1], shares[0])
    off, on = bn_off["dtypes"]["float32"]["pair_share"], bn_on["dtypes"]["float32"]["pair_share"]
    sig_bn = _disjoint_greater(on, off)
    note = lambda s: "" if s is not None else " (CP intervals overlap: not significant at this size)"
    return [
        claim("Fig 3.6: larger minibatches -> larger share of impacted minibatches at fp32",
              ", ".join(f"B={b}: {s['count']}/{s['n']}" for b, s in zip(sizes, shares)) + note(sig),
              bool(mono and sig is True)),
        claim("Fig 3.6: batch normalization increases the share of impacted minibatches at fp32",
              f"BN off {off['count']}/{off['n']}, BN on {on['count']}/{on['n']}" + note(sig_bn), sig_bn is True),
    ]


def bertoin_dichotomy(draws: int = 4, batches: int = 4, batch_size: int = 128, width: float = 0.125,
                      dtypes=("bfloat16", "float32", "float64"), seed: int = 0) -> dict:
    """MLP at init on digits28: share of minibatches where ReLU'(0)=0 and 1 give different gradients
    (any D > 0, as in Bertoin), per dtype."""
    from nsverify.papers.zones.volume import VolumeConfig, estimate_volume

    cfg = VolumeConfig(model="mlp", width=width, dataset="digits28", batch_size=batch_size, draws=draws,
                       batches=batches, dtypes=list(dtypes), programs=("native", "relu1"), seed=seed)
    res = estimate_volume(cfg, {d: 0.0 for d in dtypes}, progress=lambda *a, **k: None)
    sh = {d: res["dtypes"][d]["pair_share"] for d in dtypes}
    held = (sh.get("float64", {"count": 0})["count"] == 0
            and all(sh[d]["count"] == sh[d]["n"] for d in dtypes if d in ("bfloat16", "float16"))
            and ("float32" not in sh or sh["float32"]["count"] < sh["float32"]["n"]))
    return {"result": res, "claims": [claim(
        "Bertoin: backprop_0 vs backprop_1 differ on some minibatches in 32 bits, systematically in 16 bits, never "
        "in 64 bits (MLP at initialization)",
        "; ".join(f"{d}: {sh[d]['count']}/{sh[d]['n']} batches with D>0, mean relu zeros "
                  f"{res['dtypes'][d]['mean_relu_zeros']:.1f}" for d in dtypes), bool(held))]}


def sgd_pair(dtype, steps: int = 60, width: float = 0.125, batch_size: int = 64, lr: float = 0.05,
             seed: int = 0, rules=("native", "relu1"), model_name: str = "mlp",
             bn: bool = False) -> dict:
    """Two SGD trajectories from the same init, differing only in the backward rule; ||theta_0 - theta_1||_1
    per step and the first step at which they differ bitwise."""
    from nsverify.workloads.datasets import digits28
    from nsverify.workloads.models import build_model

    rules = [as_program(r) for r in rules]
    x, y = digits28()
    torch.manual_seed(seed)
    base = build_model(model_name, width, bn).to(dtype)
    models = [base, copy.deepcopy(base)]
    g = torch.Generator().manual_seed(seed)
    order = torch.randint(0, len(x), (steps, batch_size), generator=g)
    xs = x.to(dtype)
    dist, first, losses = [], None, [[], []]
    for step in range(steps):
        b = order[step]
        for i, model in enumerate(models):
            loss = F.cross_entropy(model(xs[b]), y[b])
            with use_rule(rules[i]):
                grads = torch.autograd.grad(loss, list(model.parameters()))
            with torch.no_grad():
                for p, gr in zip(model.parameters(), grads):
                    p -= lr * gr
            losses[i].append(loss.item())
        with torch.no_grad():
            d = sum(float((p.double() - q.double()).abs().sum()) for p, q in zip(*[m.parameters() for m in models]))
        dist.append(d)
        if first is None and d != 0:
            first = step + 1
    return {"dtype": str(dtype).removeprefix("torch."), "distance": dist, "first_divergence": first,
            "loss": losses, "rules": [program_label(r) for r in rules]}


def sgd_claims(runs: dict) -> list[dict]:
    out = []
    if "float64" in runs:
        r = runs["float64"]
        out.append(claim("Bertoin: ReLU'(0)=0 vs 1 SGD trajectories are bitwise identical in fp64",
                         f"first divergence: {r['first_divergence']} over {len(r['distance'])} steps; final L1 "
                         f"distance {r['distance'][-1]:.3g}", r["first_divergence"] is None))
    for name in ("bfloat16", "float16"):
        if name in runs:
            r = runs[name]
            out.append(claim(f"Bertoin: the two trajectories diverge in 16 bits ({name})",
                             f"first divergence at step {r['first_divergence']}; final L1 distance "
                             f"{r['distance'][-1]:.3g}", r["first_divergence"] is not None))
    return out


BETAS = (0.0, 1.0, 10.0, 1e2, 1e3, 1e4)


def training_sweep(dtypes=("float32", "bfloat16"), betas=BETAS, relu_s=(0.0, 1.0), seeds=(0, 1), steps=40,
                   batch_size=32, lr=0.1, width=0.5, progress=None) -> dict:
    """LeNet-5 on digits28 with SGD: final training loss (mean of the last 5 steps) per (dtype, beta or
    ReLU'(0), seed); 'diverged' when the loss becomes non-finite or ends above twice its initial value."""
    from nsverify.workloads.datasets import digits28
    from nsverify.workloads.models import lenet5

    x, y = digits28()
    results = []
    settings = [hybrid_program(0.0, b) for b in betas] + [hybrid_program(s, 0.0) for s in relu_s if s != 0.0]
    total = len(dtypes) * len(settings) * len(seeds)
    k = 0
    for name in dtypes:
        dtype = getattr(torch, name)
        for rule in settings:
            for seed in seeds:
                torch.manual_seed(seed)
                model = lenet5(width).to(dtype)
                g = torch.Generator().manual_seed(seed)
                losses = []
                for _ in range(steps):
                    b = torch.randint(0, len(x), (batch_size,), generator=g)
                    loss = F.cross_entropy(model(x[b].to(dtype)), y[b])
                    with use_rule(rule):
                        grads = torch.autograd.grad(loss, list(model.parameters()))
                    with torch.no_grad():
                        for p, gr in zip(model.parameters(), grads):
                            p -= lr * gr
                    losses.append(loss.item())
                    if not math.isfinite(losses[-1]):
                        break
                tail = losses[-5:]
                final = sum(tail) / len(tail)
                rs, beta = program_params(rule)
                results.append({"dtype": name, "relu_s": rs, "beta": beta, "seed": seed,
                                "final_loss": final, "initial_loss": losses[0],
                                "diverged": (not math.isfinite(final)) or final > 2 * losses[0]})
                k += 1
                if progress:
                    progress(f"sweep {name} {program_label(rule)} seed {seed}: loss {final:.3g}", k, total)
    return {"results": results, "steps": steps, "lr": lr, "betas": list(betas), "relu_s": list(relu_s)}


def sweep_claims(sweep: dict) -> list[dict]:
    rs = sweep["results"]
    out = []
    for name in sorted({r["dtype"] for r in rs}):
        small = [r for r in rs if r["dtype"] == name and r["relu_s"] == 0 and r["beta"] <= 1e2]
        big = [r for r in rs if r["dtype"] == name and r["relu_s"] == 0 and r["beta"] >= 1e3]
        div_small = sum(r["diverged"] for r in small)
        div_big = sum(r["diverged"] for r in big)
        statement = ("Boustany 3.4.2: beta >= 1e3 destabilizes 16-bit training, beta <= 1e2 stays stable"
                     if name in ("bfloat16", "float16") else
                     "Boustany 3.4.2: at 32 bits only very large beta (1e4) may destabilize training (no BN)")
        base = [r["final_loss"] for r in small if r["beta"] == 0]
        learned = bool(base) and all(r["final_loss"] < 0.9 * r["initial_loss"] for r in small if r["beta"] == 0)
        held = div_small == 0 and (div_big > 0 if name in ("bfloat16", "float16") else True)
        out.append(claim(statement, f"{name}: diverged runs beta<=1e2: {div_small}/{len(small)}, beta>=1e3: "
                                    f"{div_big}/{len(big)}; beta=0 runs "
                                    f"{'learned' if learned else 'did NOT learn (too few steps)'} in {sweep['steps']} "
                                    f"steps", bool(held)))
    return out


# ---------------------------------------------------------------------------------------------------------
# the report's experiments: runs at a budget with their claims
# ---------------------------------------------------------------------------------------------------------
def _no_memo(_key: str, fn):
    return fn()


def table_3_2(width: float, draws: int, batches: int, batch_size: int, scratch=None) -> dict:
    """Table 3.2 analogue without and with BatchNorm (VGG11 at ``width`` on plateau images):
    ``{"no_bn", "bn", "claims"}`` (claims judged on the run without BN, as in the thesis). ``scratch(name)``
    gives a resume file per run."""
    scratch = scratch or (lambda _name: None)
    kw = dict(width=width, draws=draws, batches=batches, batch_size=batch_size)
    no_bn = precision_table(**kw, resume=scratch("table32.json"))
    bn = precision_table(**kw, bn=True, resume=scratch("table32bn.json"))
    return {"no_bn": no_bn, "bn": bn, "claims": table_3_2_claims(no_bn)}


def fig_3_6(batch_sizes, width: float, draws: int, batches: int, scratch=None) -> dict:
    """Fig 3.6's trends at fp32: the impacted share per batch size, and without/with BatchNorm at the largest
    batch size: ``{"by_batch": {B: result}, "bn_off", "bn_on", "claims"}``."""
    scratch = scratch or (lambda _name: None)
    kw = dict(width=width, draws=draws, batches=batches, dtypes=("float32",))
    by_batch = {b: precision_table(**kw, batch_size=b, resume=scratch(f"trend_b{b}.json")) for b in batch_sizes}
    off = by_batch[batch_sizes[-1]]
    on = precision_table(**kw, batch_size=batch_sizes[-1], bn=True, resume=scratch("trend_bn.json"))
    return {"by_batch": by_batch, "bn_off": off, "bn_on": on, "claims": trend_claims(by_batch, off, on)}


def exact_vs_float_points(draws: int = 2, per_draw: int = 4, width: float = 0.5) -> list[dict]:
    """Both views of LeNet-5 points on digits28 (``per_draw`` digits per draw), per dtype: the exact zone of the
    point rounded to the dtype and what the float computation saw, with Table 3.4's LeNet-5 thresholds (bf16
    uses the 16-bit value)."""
    from nsverify.papers.zones.exact import point_report
    from nsverify.papers.zones.measure import PAPER_THRESHOLDS
    from nsverify.workloads.datasets import digits28
    from nsverify.workloads.models import lenet5

    taus = {**PAPER_THRESHOLDS["lenet5"], "bfloat16": PAPER_THRESHOLDS["lenet5"]["float16"]}
    x, y = digits28()
    rows = []
    for draw in range(draws):
        torch.manual_seed(draw)
        sl = slice(per_draw * draw, per_draw * draw + per_draw)
        rep = point_report(lenet5(width=width), x[sl], y[sl], ("bfloat16", "float32", "float64"), taus)
        for name, v in rep["dtypes"].items():
            rows.append({"draw": draw, "dtype": name, "exact": v["exact"], "float": v["float"]})
    return rows


def sgd_trajectories(dtypes, steps: int, memo=None) -> dict:
    """:func:`sgd_pair` per dtype, ``{"runs": {dtype: result}, "claims"}``; ``memo(key, fn)`` may cache each
    run (the report's checkpoints)."""
    memo = memo or _no_memo
    runs = {name: memo(f"sgd-{name}-{steps}", lambda name=name: sgd_pair(getattr(torch, name), steps=steps))
            for name in dtypes}
    return {"runs": runs, "claims": sgd_claims(runs)}


def beta_sweep(seeds, steps: int, betas=BETAS, progress=None) -> dict:
    """:func:`training_sweep` with its claims (Boustany 3.4.2): ``{**sweep, "claims"}``."""
    sweep = training_sweep(seeds=seeds, steps=steps, betas=betas, progress=progress)
    return {**sweep, "claims": sweep_claims(sweep)}


GPU_JSON = Path(__file__).resolve().parents[2] / "data" / "gpu" / "zones.json"


def gpu_results(path=GPU_JSON) -> dict | None:
    """The full-width results committed by ``scripts/gpu/zones.py`` (None without the file):
    ``{"raw", "device", "torch", "rows", "shares", "claims"}``; each row is (dtype, BN, tau of Table 3.4,
    impacted pairs, max D, measured tau1, tau2, pairs with D above the measured tau1)."""
    path = Path(path)
    if not path.exists():
        return None
    gpu = json.loads(path.read_text())
    rows = []
    for bn in ("noBN", "BN"):
        for name, d in gpu.get("volumes", {}).get(bn, {}).get("dtypes", {}).items():
            t = gpu.get("taus", {}).get(f"{name}|{bn}", {})
            ps = d["pair_share"]
            above_t1 = sum(v > (t.get("tau1") or 0.0) for v in d["D"])
            rows.append({"dtype": name, "bn": bn, "tau": gpu["volumes"][bn]["thresholds"][name],
                         "impacted": f"{ps['count']}/{ps['n']}", "max_D": d["max_D"], "tau1": t.get("tau1"),
                         "tau2": t.get("tau2"), "above_tau1": f"{above_t1}/{len(d['D'])}"})
    claims = [claim("[GPU] " + c["claim"], c["measured"], c["held"]) for c in gpu.get("claims", [])]
    return {"raw": gpu, "device": gpu.get("device"), "torch": gpu.get("torch"), "rows": rows,
            "shares": gpu.get("shares", {}), "claims": claims}
