"""Run optimizers on problems with seeds and dtypes; collect curves and metrics."""
from __future__ import annotations

import math

import torch

from nsverify.claims.stats import mean_ci
from nsverify.devices import parse_dtype, torch_threads  # noqa: F401 (re-exported)
from nsverify.errors import NsverifyError
from nsverify.optim import INNA, INNAprop, INNApropMomentum
from nsverify.papers.innaprop.metrics import steps_to_match, steps_to_target
from nsverify.papers.innaprop.problems import Problem, make_problem


def _sgd(ps, lr, momentum=0.0):
    # heavy-ball as in Arnekvist (6)-(7) with eta = lr/(1-beta) is SGD(lr, momentum) -- see
    # nsverify.papers.arnekvist.dying_relu
    return torch.optim.SGD(ps, lr=lr, momentum=momentum)


#: optimizer name -> (factory(params, lr), lr family). Adaptive methods share one step size, SGD-type another.
OPTIMIZERS = {
    "AdamW": (lambda ps, lr: torch.optim.AdamW(ps, lr=lr, weight_decay=0.0), "adaptive"),
    "SGD": (lambda ps, lr: _sgd(ps, lr), "sgd"),
    "heavy-ball": (lambda ps, lr: _sgd(ps, lr * 0.1, momentum=0.9), "sgd"),
    "INNA": (lambda ps, lr: INNA(ps, lr=lr, alpha=0.5, beta=0.1), "sgd"),
    "INNAprop(0.1,0.9)": (lambda ps, lr: INNAprop(ps, lr=lr, alpha=0.1, beta=0.9, weight_decay=0.0),
                          "adaptive"),
    "INNAprop(1,1)": (lambda ps, lr: INNAprop(ps, lr=lr, alpha=1.0, beta=1.0, weight_decay=0.0), "adaptive"),
    "INNAprop(2,2)": (lambda ps, lr: INNAprop(ps, lr=lr, alpha=2.0, beta=2.0, weight_decay=0.0), "adaptive"),
    "INNApropMomentum(0.1,0.9)": (lambda ps, lr: INNApropMomentum(ps, lr=lr, alpha=0.1, beta=0.9),
                                  "adaptive"),
}
#: default step sizes per problem and family (cosine-annealed to 0 over the run)
LR = {"adaptive": 0.02, "sgd": 0.02}
LR_NETWORK = {"adaptive": 0.01, "sgd": 0.1}




def run_one(problem: Problem, optimizer: str, steps: int, *, dtype="float64", seed: int = 0,
            lr: float | None = None, record_every: int = 1, schedule: str = "cosine") -> dict:
    """One run; returns {"steps", "values" (full-batch f), "gap", "final", "accuracy"}."""
    if optimizer not in OPTIMIZERS:
        raise NsverifyError(f"unknown optimizer {optimizer!r}; choose from {', '.join(OPTIMIZERS)}.")
    if steps < 1:
        raise NsverifyError(f"steps={steps} must be >= 1.")
    dt = parse_dtype(dtype)
    factory, family = OPTIMIZERS[optimizer]
    if lr is None:
        lr = (LR_NETWORK if problem.kind == "network" else LR)[family]
    torch.manual_seed(seed)
    ps = problem.init(dt)
    opt = factory(ps, lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=steps) if schedule == "cosine" else None
    batches = problem.batches(seed) if problem.batches is not None else None
    rec_steps, values = [], []

    def record(k):
        with torch.no_grad():  # the objective is always evaluated in float64, whatever the run's dtype
            v = float(problem.loss([p.detach().double() for p in ps]))
        rec_steps.append(k)
        values.append(v if math.isfinite(v) else math.inf)

    record(0)
    for k in range(1, steps + 1):
        opt.zero_grad()
        f = next(batches) if batches is not None else problem.loss
        f(ps).backward()
        opt.step()
        if sched is not None:
            sched.step()
        if k % record_every == 0 or k == steps:
            record(k)
    out = {"optimizer": optimizer, "problem": problem.name, "dtype": str(dtype), "seed": seed, "lr": lr,
           "steps": rec_steps, "values": values, "final": values[-1]}
    if problem.fstar is not None:
        out["gap"] = [v - problem.fstar for v in values]
        out["best_gap"] = min(out["gap"])
    if problem.accuracy is not None:
        out["accuracy"] = problem.accuracy(ps)
    return out


def compare(problem_name: str, optimizers: list[str], *, seeds=(0, 1, 2), steps: int = 500, dtype="float64",
            record_every: int = 10, target: float = 1e-3, baseline: str = "AdamW", progress=None) -> dict:
    """Run every optimizer on every seed; summarize with mean and 95% CI over seeds."""
    runs = {o: [] for o in optimizers}
    total = len(optimizers) * len(seeds)
    for i, seed in enumerate(seeds):
        problem = make_problem(problem_name, seed)
        for j, o in enumerate(optimizers):
            if progress:
                progress(f"{problem_name} {o} seed {seed}", i * len(optimizers) + j, total)
            runs[o].append(run_one(problem, o, steps, dtype=dtype, seed=seed, record_every=record_every))
    summary = {}
    for o, rs in runs.items():
        key = "gap" if "gap" in rs[0] else "values"
        s = {"final": mean_ci([r[key][-1] for r in rs]), "best": mean_ci([min(r[key]) for r in rs])}
        if "gap" in rs[0]:
            hits = [steps_to_target(r["gap"], target, r["steps"]) for r in rs]
            s["steps_to_target"] = mean_ci([h for h in hits if h is not None])
            s["reached_target"] = sum(h is not None for h in hits)
        if "accuracy" in rs[0]:
            s["accuracy"] = mean_ci([r["accuracy"] for r in rs])
        if baseline in runs and o != baseline:
            m = [steps_to_match(r[key], b[key], r["steps"]) for r, b in zip(rs, runs[baseline])]
            s["steps_to_match_baseline"] = mean_ci([k for k, _ in m if k is not None])
            s["speedup_vs_baseline"] = mean_ci([x for _, x in m if x is not None and math.isfinite(x)])
            s["matched_baseline"] = sum(k is not None for k, _ in m)
            # per seed, for decision rules: an unmatched run counts with the largest speed-up it could still
            # have (best step of the baseline / steps run), which is below 1
            s["speedup_samples"] = [
                (x if x is not None and math.isfinite(x) else (_best_step(b[key], b["steps"]) / max(1, k or 1)))
                if k is not None else _best_step(b[key], b["steps"]) / r["steps"][-1]
                for (k, x), r, b in zip(m, rs, runs[baseline])]
        summary[o] = s
    return {"problem": problem_name, "seeds": list(seeds), "steps": steps, "dtype": str(dtype),
            "target": target,
            "summary": summary, "runs": runs}


def _best_step(values, steps) -> int:
    return steps[list(values).index(min(values))]


def _maxdev(r: dict, ref: dict) -> float:
    return max(abs(a - b) for a, b in zip(r["values"], ref["values"]))


def precision_study(problem_name: str = "hinge_svm", *, seeds=(0, 1, 2), steps: int = 1000, lr: float = 1e-3,
                    dtypes=("float64", "float32", "bfloat16"),
                    optimizers=("INNAprop(0.1,0.9)", "INNApropMomentum(0.1,0.9)"), progress=None) -> dict:
    """INNAprop against its momentum variant per dtype (cosine schedule to 0, lr 1e-3, as for Boustany, Ch.4,
    Fig. 4.10).

    For each (optimizer, dtype): the final gap, the largest distance of the objective from the same
    optimizer's float64 run, and the late progress (gap at 75% of the run minus final gap; <= 0 means it stopped
    improving). The objective is evaluated in float64 for every dtype.
    """
    out = {}
    every = max(1, steps // 100)
    problems = {seed: make_problem(problem_name, seed) for seed in seeds}
    for o in optimizers:
        one = lambda s, dt, o=o: run_one(problems[s], o, steps, dtype=dt, seed=s, lr=lr, record_every=every)
        ref = {s: one(s, "float64") for s in seeds}
        for dt in dtypes:
            runs = {s: ref[s] if dt == "float64" else one(s, dt) for s in seeds}
            q = [len(r["gap"]) * 3 // 4 for r in runs.values()]
            out[f"{o}|{dt}"] = {
                "final_gap": mean_ci([r["gap"][-1] for r in runs.values()]),
                "max_dev_from_float64": mean_ci([_maxdev(r, ref[s]) for s, r in runs.items()]),
                "max_dev_samples": [_maxdev(r, ref[s]) for s, r in runs.items()],
                "late_progress": mean_ci([r["gap"][k] - r["gap"][-1] for k, r in zip(q, runs.values())]),
                "late_progress_samples": [r["gap"][k] - r["gap"][-1] for k, r in zip(q, runs.values())],
            }
            if progress:
                progress(f"precision {o} {dt}")
    return out
