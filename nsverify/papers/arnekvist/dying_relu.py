"""Dying ReLU (Arnekvist et al.): dead-unit metric, single-ReLU theory, region map, network experiment.

Equation, section and figure numbers are those of Arnekvist et al.

- :func:`dead_units`: a unit (output feature / channel) of a ReLU layer is *dead* on a data set when its
  output is 0 on every input of that set (Sec. 3, "all inputs are negative"). Shares per layer and the
  worst layer (the quantity of Fig. 6).
- Linear system (eqs (19)-(20)): :func:`heavy_ball_matrix`, :func:`eigen_facts`.
- Single ReLU with Gaussian inputs: :func:`activation_probability` = Phi(b/||w||) (eq (23)),
  :func:`in_dead_cone` with the corrected sign (dead iff b/||w|| < Phi^-1(eps); the sentence after eq (23)
  prints it swapped), :func:`single_relu_grad` (eqs (27)-(29)).
- :func:`region_map`: fraction of initializations (w_L, b) that reach the optimum or end in the dead cone,
  over target scales gamma and momenta beta (Figs. 4-5), with heavy-ball (6)-(7), eta = 0.1.
- :func:`network_experiment`: 200-unit ReLU regression on diabetes / Friedman targets scaled by gamma.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from nsverify.errors import NsverifyError

RELU_TYPES = (torch.nn.ReLU, torch.nn.ReLU6)


# ------------------------------------------------------------------------------------------ dead-unit metric
def dead_units(model: torch.nn.Module, inputs, batch_size: int = 4096) -> dict:
    """Share of dead units per ReLU module of ``model`` on ``inputs`` (a tensor, or an iterable of batches).

    A unit is the index along dim 1 of the module's output (a feature of a Linear layer, a channel of a conv);
    it is dead when that output is exactly 0 at every position of every input.
    """
    layers = [(n, m) for n, m in model.named_modules() if isinstance(m, RELU_TYPES)]
    if not layers:
        raise NsverifyError("dead_units found no torch.nn.ReLU/ReLU6 module in the model; use "
                            "nn.ReLU modules "
                            "(not F.relu) so that their outputs can be observed.")
    alive: dict[str, torch.Tensor] = {}

    def hook(name):
        def fn(_m, _inp, out):
            if out.dim() < 2:
                raise NsverifyError(f"ReLU module {name!r} produced a {out.dim()}-D output; dead_units needs "
                                    "a batch dimension and a unit dimension (dim 1).")
            active = (out != 0).transpose(0, 1).reshape(out.shape[1], -1).any(dim=1)
            alive[name] = active if name not in alive else alive[name] | active
        return fn

    handles = [m.register_forward_hook(hook(n)) for n, m in layers]
    n_inputs = 0
    try:
        with torch.no_grad():
            batches = inputs.split(batch_size) if torch.is_tensor(inputs) else inputs
            for xb in batches:
                n_inputs += len(xb)
                model(xb)
    finally:
        for h in handles:
            h.remove()
    if n_inputs == 0:
        raise NsverifyError("dead_units got no inputs: pass a non-empty evaluation set.")
    out = []
    for name, _ in layers:
        if name not in alive:
            raise NsverifyError(f"ReLU module {name!r} was never called in forward; dead units are "
                                "undefined.")
        a = alive[name]
        out.append({"layer": name, "units": int(a.numel()), "dead": int((~a).sum()),
                    "share": float((~a).sum()) / a.numel()})
    worst = max(out, key=lambda r: r["share"])
    total = sum(r["units"] for r in out)
    return {"layers": out, "worst_layer": worst["layer"], "worst_share": worst["share"],
            "overall_share": sum(r["dead"] for r in out) / total, "n_inputs": n_inputs}


# ------------------------------------------------------------------------------------------ linear system
def heavy_ball_matrix(eta, beta):
    """A of eq (20): (m, a) <- A (m, a) for heavy-ball (6)-(7) on the affine model (gradient = a)."""
    return [[beta, 1 - beta], [-eta * beta, 1 - eta * (1 - beta)]]


def complex_eigen_interval(eta):
    """Open interval of beta where A has complex eigenvalues: (((1-eta)/(1+eta))^2, 1), for 0 < eta < 1."""
    return ((1 - eta) / (1 + eta)) ** 2, 1


def eigen_facts(eta, beta, dps: int = 50) -> dict:
    """Eigenvalues of A with mpmath at ``dps`` digits: {"eigs", "complex", "moduli"}."""
    import mpmath

    with mpmath.workdps(dps):
        A = mpmath.matrix(heavy_ball_matrix(mpmath.mpf(eta), mpmath.mpf(beta)))
        eigs = mpmath.eig(A, left=False, right=False)
        cplx = any(abs(mpmath.im(e)) > mpmath.mpf(10) ** (-dps // 2) for e in eigs)
        return {"eigs": eigs, "complex": cplx, "moduli": [abs(e) for e in eigs]}


def heavy_ball_as_torch_sgd(params, eta: float, beta: float) -> torch.optim.SGD:
    """Eqs (6)-(7) (m <- beta m + (1-beta) g, theta <- theta - eta m) are torch's
    SGD(lr=eta(1-beta), momentum=beta).

    (torch's buffer is m/(1-beta); SGD(lr=eta, dampening=beta) is *not* the same: its first step uses the
    undamped gradient.)
    """
    return torch.optim.SGD(params, lr=eta * (1 - beta), momentum=beta)


# ------------------------------------------------------------------------------------------ single ReLU
def _ndtr(x):
    from scipy.special import ndtr

    return ndtr(x)


def _npdf(x):
    return np.exp(-0.5 * np.square(x)) / math.sqrt(2 * math.pi)


def activation_probability(w, b) -> float:
    """P(w.x + b > 0) for x ~ N(0, I): Phi(b/||w||) (eq (23)); for w = 0 it is 1 if b > 0 else 0."""
    nw = float(np.linalg.norm(np.asarray(w, dtype=float)))
    if nw == 0:
        return 1.0 if b > 0 else 0.0
    return float(_ndtr(b / nw))


def in_dead_cone(w, b, eps: float = 0.01) -> bool:
    """Dead per eq (15): P(active) < eps, i.e. b/||w|| < Phi^-1(eps) (negative for eps < 1/2).

    The sentence after eq (23) prints b/||w|| < -Phi^-1(eps), which classifies e.g. (w, b) = (e_1, 0) --
    active half the time -- as dead; the linear cone is b/||w|| > -Phi^-1(eps) (it prints Phi^-1(eps)).
    """
    if not 0 < eps < 0.5:
        raise NsverifyError(f"eps={eps} must lie in (0, 0.5) for the dead cone to be a proper cone.")
    return activation_probability(w, b) < eps


def in_linear_cone(w, b, eps: float = 0.01) -> bool:
    return activation_probability(w, b) > 1 - eps


def single_relu_grad(w, b, Gamma, Delta) -> tuple[np.ndarray, float]:
    """Exact gradient of eq (24), L = E[1{w.x+b>0} (a.x + c)^2 / 2], a = w - Gamma, c = b - Delta,
    x ~ N(0, I).

    Uses (27)-(29) in the basis rotated by a Householder reflection U with U w = ||w|| e_L.
    """
    w, Gamma = np.asarray(w, dtype=float), np.asarray(Gamma, dtype=float)
    L, nw = w.size, float(np.linalg.norm(w))
    if nw == 0:
        raise NsverifyError("single_relu_grad needs w != 0 (at w = 0 the ReLU is constant in x).")
    e = np.zeros(L)
    e[-1] = 1.0
    u = w / nw - e
    U = np.eye(L) if np.linalg.norm(u) < 1e-15 else np.eye(L) - 2 * np.outer(u, u) / (u @ u)
    a_t, c, t = U @ (w - Gamma), b - Delta, b / nw
    Phi, phi = float(_ndtr(t)), float(_npdf(t))
    g_rot = a_t * Phi
    g_rot[-1] = a_t[-1] * Phi + (c - a_t[-1] * t) * phi
    return U.T @ g_rot, a_t[-1] * phi + c * Phi


def single_relu_grad_quadrature(w, b, Gamma, Delta) -> tuple[np.ndarray, float]:
    """The same gradient by 2-D numerical integration (L = 2), splitting at the line w.x + b = 0."""
    from scipy import integrate

    w, Gamma = np.asarray(w, dtype=float), np.asarray(Gamma, dtype=float)
    if w.size != 2 or w[1] == 0:
        raise NsverifyError("single_relu_grad_quadrature handles L = 2 with w[1] != 0.")
    a, c = w - Gamma, b - Delta
    dens = lambda x1, x2: math.exp(-(x1 * x1 + x2 * x2) / 2) / (2 * math.pi)
    thr = lambda x1: (-b - w[0] * x1) / w[1]
    lo, hi = (thr, lambda x1: math.inf) if w[1] > 0 else (lambda x1: -math.inf, thr)
    out = []
    err = lambda x2, x1: a[0] * x1 + a[1] * x2 + c
    for f in (lambda x2, x1: err(x2, x1) * x1, lambda x2, x1: err(x2, x1) * x2, err):
        val, _ = integrate.dblquad(lambda x2, x1, f=f: f(x2, x1) * dens(x1, x2), -np.inf, np.inf, lo, hi,
                                   epsabs=1e-11, epsrel=1e-10)
        out.append(val)
    return np.array(out[:2]), out[2]


# ------------------------------------------------------------------------------------------ region map
def stopping_reach(tol: float = 1e-6, eta: float = 0.1) -> float:
    """How far from the optimum a run stopped by ``|update| < tol`` may sit: |update| = eta |gradient| near the
    optimum, and the gradient of (31)-(32) at the optimum (b = delta = 0) has Jacobian [[Phi(0), phi(0)],
    [phi(0), Phi(0)]], whose smallest eigenvalue is 1/2 - 1/sqrt(2 pi) ~ 0.101: distance <= tol / (eta * 0.101)."""
    lam = 0.5 - 1.0 / math.sqrt(2.0 * math.pi)
    return tol / (eta * lam)


def _heavy_ball_runs(gamma, beta, W0, B0, eta, max_steps, tol, delta):
    """Final (w, b) and the still-moving mask of heavy-ball (6)-(7) from every initial point (vectorised)."""
    w, b = W0.copy(), B0.copy()
    mw, mb = np.zeros_like(w), np.zeros_like(b)
    active = np.ones(w.shape, dtype=bool)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        for _ in range(max_steps):
            if not active.any():
                break
            nw = np.abs(w)
            t = np.where(nw > 0, b / np.where(nw > 0, nw, 1), np.where(b > 0, np.inf, -np.inf))
            Phi, phi = _ndtr(t), np.where(np.isfinite(t), _npdf(np.where(np.isfinite(t), t, 0)), 0.0)
            rho = np.sign(w)
            aL, c = w - gamma, b - delta
            tphi = np.where(np.isfinite(t), t * phi, 0.0)
            gw = aL * Phi + rho * c * phi - aL * tphi
            gb = rho * aL * phi + c * Phi
            mw_new = beta * mw + (1 - beta) * gw
            mb_new = beta * mb + (1 - beta) * gb
            dw, db = eta * mw_new, eta * mb_new
            mw, mb = np.where(active, mw_new, mw), np.where(active, mb_new, mb)
            w, b = np.where(active, w - dw, w), np.where(active, b - db, b)
            active &= np.hypot(dw, db) >= tol
    return w, b, active


def region_map(gammas=(1.0, 1e-1, 1e-2, 1e-3), betas=(0.0, 0.5, 0.7, 0.9, 0.99), *, grid: int = 21,
               extent: float = 2.0, eta: float = 0.1, max_steps: int = 20000, tol: float = 1e-6,
               eps: float = 0.01, delta: float = 0.0, optimum_tols: dict | None = None) -> dict:
    """Heavy-ball (eqs (6)-(7)) on the single ReLU with the simplified 2-D gradient (31)-(32), target
    gamma x_L.

    Initial points: a grid x grid lattice of (w_L, b) in [-extent, extent]^2 (w_L = 0 excluded). A run stops
    when its update norm is < tol (Arnekvist et al.: 1e-6) or after max_steps. Outcome: "optimum" (within the
    tolerance of (gamma, delta)), "dead" (in the dead cone, P(active) < eps), "other". ``optimum_tols`` maps a
    label to a distance (or to a function of gamma giving it); the shares under each are in ``cell["by_tol"]``,
    and ``optimum``/``dead``/``other`` use the first (default: twice :func:`stopping_reach`, the distance a
    stopped run may keep from the optimum).
    """
    tols = optimum_tols or {"2x stopping reach": 2 * stopping_reach(tol, eta)}
    vals = np.linspace(-extent, extent, grid)
    W0, B0 = np.meshgrid(vals, vals)
    keep = W0 != 0
    W0, B0 = W0[keep], B0[keep]
    results = []
    for gamma in gammas:
        for beta in betas:
            w, b, active = _heavy_ball_runs(gamma, beta, W0, B0, eta, max_steps, tol, delta)
            dist = np.hypot(w - gamma, b - delta)
            nw = np.abs(w)
            with np.errstate(divide="ignore", invalid="ignore"):
                p_act = np.where(nw > 0, _ndtr(b / np.where(nw > 0, nw, 1)), (b > 0).astype(float))
            by_tol = {}
            for label, t in tols.items():
                t = t(gamma) if callable(t) else t
                near = dist < t
                dead = (p_act < eps) & ~near
                by_tol[label] = {"tolerance": float(t), "optimum": float(near.mean()), "dead": float(dead.mean()),
                                 "other": float(1 - near.mean() - dead.mean())}
            first = by_tol[next(iter(tols))]
            results.append({"gamma": gamma, "beta": beta, "optimum": first["optimum"], "dead": first["dead"],
                            "other": first["other"], "n_inits": int(w.size), "unconverged": float(active.mean()),
                            "by_tol": by_tol})
    return {"eta": eta, "grid": grid, "extent": extent, "max_steps": max_steps, "eps": eps,
            "tolerances": list(tols), "cells": results}


# ------------------------------------------------------------------------------------------ network experimen
def _dataset(name: str, seed: int):
    from sklearn.datasets import load_diabetes, make_friedman1

    if name == "diabetes":
        X, y = load_diabetes(return_X_y=True)
    elif name == "friedman":
        X, y = make_friedman1(n_samples=500, n_features=10, noise=0.5, random_state=seed)
    else:
        raise NsverifyError(f"unknown data set {name!r}; use 'diabetes' or 'friedman'.")
    X = (X - X.mean(0)) / X.std(0)
    y = (y - y.mean()) / y.std()
    return torch.tensor(X, dtype=torch.float32), torch.tensor(y, dtype=torch.float32)


NETWORK_OPTIMIZERS = {
    "Adam": lambda ps: torch.optim.Adam(ps, lr=1e-3),
    "Adam(beta1=0)": lambda ps: torch.optim.Adam(ps, lr=1e-3, betas=(0.0, 0.999)),
    "SGD": lambda ps: torch.optim.SGD(ps, lr=1e-2),
    "heavy-ball": lambda ps: heavy_ball_as_torch_sgd(ps, eta=1e-2, beta=0.9),
}


def regression_mlp(n_in: int, hidden: int = 200, seed: int = 0) -> torch.nn.Sequential:
    """App. A, eq (33): w^T relu(Wx + b1) + b2 with U(-1/sqrt(fan_in), 1/sqrt(fan_in)) initialization."""
    g = torch.Generator().manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(n_in, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 1))
    with torch.no_grad():
        for lin, fan in ((model[0], n_in), (model[2], hidden)):
            for t in (lin.weight, lin.bias):
                t.uniform_(-1 / math.sqrt(fan), 1 / math.sqrt(fan), generator=g)
    return model


def _check_optimizer(name: str) -> None:
    if name not in NETWORK_OPTIMIZERS:
        raise NsverifyError(f"unknown optimizer {name!r}; choose from {', '.join(NETWORK_OPTIMIZERS)}.")


def network_run(dataset: str, gamma: float, optimizer: str, seed: int, steps: int, batch: int = 64) -> dict:
    _check_optimizer(optimizer)
    X, y = _dataset(dataset, seed)
    y = gamma * y
    model = regression_mlp(X.shape[1], seed=seed)
    opt = NETWORK_OPTIMIZERS[optimizer](list(model.parameters()))
    gen = torch.Generator().manual_seed(seed + 1)
    perm, pos = torch.randperm(len(y), generator=gen), 0
    for _ in range(steps):
        if pos + batch > len(y):
            perm, pos = torch.randperm(len(y), generator=gen), 0
        idx = perm[pos:pos + batch]
        pos += batch
        opt.zero_grad()
        loss = 0.5 * ((model(X[idx]).squeeze(1) - y[idx]) ** 2).mean()
        loss.backward()
        opt.step()
    with torch.no_grad():
        mse = float(((model(X).squeeze(1) - y) ** 2).mean())
    d = dead_units(model, X)
    return {"dataset": dataset, "gamma": gamma, "optimizer": optimizer, "seed": seed, "steps": steps,
            "dead_share": d["worst_share"], "mse_over_gamma2": mse / gamma ** 2}


def _network_run_one_thread(args: tuple) -> dict:
    """:func:`network_run` in a worker process, on one intra-op thread (as in the parent's optim section)."""
    torch.set_num_threads(1)
    return network_run(*args)


def network_experiment(datasets=("diabetes", "friedman"), gammas=(1.0, 1e-2, 1e-4),
                       optimizers=tuple(NETWORK_OPTIMIZERS), seeds=(0, 1, 2), steps: int = 50000,
                       progress=None, cache=None, combos=None, workers: int = 1) -> list[dict]:
    """Dead shares over datasets x gammas x optimizers (or the explicit ``combos`` of (dataset, gamma,
    optimizer)) with seeds (mean and 95% CI).

    ``cache``: optional JSON file path; finished runs are stored there and reused, so an interrupted long run
    (Arnekvist et al. train 250000 steps; units start dying after ~1e4 steps here) resumes where it stopped.
    ``workers`` > 1 runs the missing runs in that many worker processes (each run is seeded by its own
    generators, so the results do not depend on where it ran).
    """
    import json
    from pathlib import Path

    from nsverify.claims.stats import mean_ci
    from nsverify.files import atomic_write_text

    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise NsverifyError(f"workers={workers!r}: give an integer >= 1")
    combos = list(combos) if combos is not None else [(d, g, o) for d in datasets for g in gammas for o in optimizers]
    for _d, _g, o in combos:  # before any run: a long study must not fail hours in
        _check_optimizer(o)
    done = {}
    if cache is not None and Path(cache).exists():
        done = json.loads(Path(cache).read_text())
    key = lambda d, g, o, s: f"{d}|{g!r}|{o}|{s}|{steps}"  # noqa: E731
    todo = [(d, g, o, s, steps) for d, g, o in combos for s in seeds if key(d, g, o, s) not in done]

    def record(finished):
        """Store each (args, result) of ``finished`` (and the cache file) as it arrives."""
        for i, (args, result) in enumerate(finished, 1):
            done[key(*args[:4])] = result
            if cache is not None:
                atomic_write_text(Path(cache), json.dumps(done))
            if progress:
                progress(f"dying ReLU {args[0]} gamma={args[1]:g} {args[2]} seed {args[3]}: dead share "
                         f"{result['dead_share']:.3f}", i, len(todo))

    if workers == 1 or len(todo) < 2:
        record((args, network_run(*args)) for args in todo)
    else:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor, as_completed

        with ProcessPoolExecutor(min(workers, len(todo)), mp_context=multiprocessing.get_context("spawn")) as ex:
            futures = {ex.submit(_network_run_one_thread, args): args for args in todo}
            record((futures[fut], fut.result()) for fut in as_completed(futures))

    rows = []
    for d, g, o in combos:
        runs = [done[key(d, g, o, s)] for s in seeds]
        rows.append({"dataset": d, "gamma": g, "optimizer": o,
                     "dead_share": mean_ci([r["dead_share"] for r in runs]),
                     "mse_over_gamma2": mean_ci([r["mse_over_gamma2"] for r in runs]),
                     "per_seed": [r["dead_share"] for r in runs],
                     "mse_per_seed": [r["mse_over_gamma2"] for r in runs]})
    return rows
