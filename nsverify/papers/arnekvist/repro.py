"""Arnekvist et al.'s dying-ReLU claims reproduced at a budget, each experiment with its judged claims.

* :func:`region_study` -- the single ReLU under heavy-ball (their Figs. 4-5): the share of initializations
  ending at the optimum or in the dead cone over target scales gamma and momenta beta, checked over the optimum
  tolerance and the extent of the initial grid (neither is printed in the paper);
* :func:`network_study` -- 200-unit ReLU regressions (their Fig. 1 and Sec. 6): dead units after training, per
  target scale gamma and optimizer, with the momentum-free controls Adam(beta1=0) and SGD.

Budgets (grid, steps, seeds, data sets) are the caller's: the report section chooses them.
"""

from __future__ import annotations

import math

from nsverify.claims import decide
from nsverify.claims.record import ClaimSpec, Threshold, spec_table
from nsverify.papers.arnekvist.dying_relu import network_experiment, region_map, stopping_reach

PAPER = "Arnekvist et al."
#: the largest spread of dead shares over beta in {0, 0.5, 0.7} still read as "behaves like beta = 0" (ours).
LIKE_BETA0_SPREAD = 0.05
#: the difference in dead share (worst layer, mean over seeds) a network claim must be able to detect (ours:
#: Arnekvist et al.'s Fig. 1 shows differences of tens of percent; no number is printed)
NETWORK_EFFECT = 0.2

#: the rise of the normalised MSE (a share of its gamma = 1 value) the MSE test must detect (ours: Fig. 1 shows the
#: normalised error growing by multiples away from gamma = 1)
MSE_EFFECT = 0.5

#: Arnekvist et al.'s claims, declared once (id, source, metric, rule, budget); the studies below judge them
CLAIMS = (
    ClaimSpec("arnekvist/fig4-majority-converges", PAPER, "Fig. 4",
              "without momentum (beta = 0) the majority of initializations still converges at the ground truth, "
              "for every target scale gamma",
              "share of initial (w_L, b) ending within the tolerance of the optimum, beta = 0", "robust",
              "grid: initializations per cell; extents x tolerances: the settings the verdict must agree over",
              paper_value="a majority (> 50%)",
              erratum="the prose of Sec. 5 ('Influence of gamma on convergence without momentum') has the "
                      "lower-left quadrant evolve towards the linear cone and then the ground truth, while the "
                      "printed simplified gradient (31)-(32), which the region map integrates, sends it to the "
                      "dead cone"),
    ClaimSpec("arnekvist/figs4-5-small-gamma-dies", PAPER, "Figs. 4-5",
              "smaller target scale gamma sends more initializations into the dead cone",
              "dead share at gamma={small:g} vs gamma={big:g}, beta = 0 and 0.9", "robust",
              "grid: initializations per cell; tolerances: the settings the verdict must agree over",
              paper_value="more dying for small gamma"),
    ClaimSpec("arnekvist/fig5-momentum", PAPER, "Fig. 5",
              "gamma={small:g}: beta <= 0.7 behaves like beta = 0, larger momentum kills more",
              "dead share over beta", "robust",
              "grid: initializations per cell; tolerances: the settings the verdict must agree over",
              paper_value="same for beta <= 0.7, worse above"),
    ClaimSpec("arnekvist/fig1-adam-small-gamma", PAPER, "Fig. 1",
              "smaller target variance gamma gives more dead ReLUs with Adam",
              "dead share (worst layer) per seed, Adam, gamma = 1e-4 vs 1", "greater",
              "seeds x data sets (pooled) per cell; steps per run; n_required depends on the measured spread across "
              "seeds"),
    ClaimSpec("arnekvist/fig1-needs-momentum", PAPER, "Fig. 1",
              "the small-gamma dying needs momentum ('only with momentum'): gamma's effect is larger with momentum",
              "interaction per seed: (dead share at gamma = 1e-4 - at gamma = 1) with momentum minus without; Adam vs "
              "Adam(beta1=0), heavy-ball vs SGD", "all_of",
              "seeds x data sets (pooled) per cell, the unit a (data set, seed); steps per run; n_required depends "
              "on the measured spread across seeds"),
    ClaimSpec("arnekvist/fig1-mse-degrades", PAPER, "Fig. 1",
              "the normalised training MSE degrades as gamma moves away from 1 (Adam)",
              "log(MSE / gamma^2) per seed, Adam, gamma = 1e-4 vs 1 (a relative rise)", "greater",
              "seeds x data sets (pooled) per cell; steps per run; n_required depends on the measured spread "
              "across seeds", paper_value="worse away from gamma = 1"),
    ClaimSpec("arnekvist/sec6-sgd-flat", PAPER, "Fig. 1 caption", "SGD does not produce more dead ReLUs at small gamma",
              "dead share per seed, SGD, gamma = 1e-4 vs 1", "no_increase",
              "seeds x data sets (pooled) per cell; steps per run; n_required depends on the measured spread across "
              "seeds"),
)
CLAIMS = CLAIMS + (
    ClaimSpec("arnekvist/sec5-complex-eigenvalues", PAPER, "Sec. 5 (eqs. 19-20)",
              "at eta = 0.1 the heavy-ball linear system has complex eigenvalues for beta > 0.67 (the paper prints "
              "'beta > 0.7', Sec. 5, and 'beta ~ 0.7', Sec. 4; checked here to two digits, which implies it)",
              "sign of the discriminant of A(eta, beta) in exact rationals, beta on a 1/1000 grid", "exact",
              "one exact computation over the grid", paper_value="complex for beta > 0.7 (~0.7)"),
    ClaimSpec("arnekvist/fig6-depth-residual", PAPER, "Fig. 6",
              "deeper networks, and residual networks with BN, get more dead units and faster",
              "dead share over training per depth, plain vs residual + BN", "not_run",
              "a depth sweep (none run here)", paper_value="more and faster"),
)
SPEC = spec_table(CLAIMS)


def eigen_claim(eta=None, grid: int = 1000) -> dict:
    """Sec. 5's linear system A = [[beta, 1 - beta], [-eta beta, 1 - eta (1 - beta)]] (eq. 20) in exact rationals:
    trace t = 1 + beta - eta (1 - beta), determinant beta, complex eigenvalues iff t^2 < 4 beta. The claim holds
    when, on the grid beta = k / grid, the complex ones are exactly those above 0.67 up to the grid's resolution
    (the exact boundary ((1 - eta) / (1 + eta))^2 = 81/121 = 0.6694 at eta = 1/10 rounds to 0.67)."""
    from fractions import Fraction as Fr

    eta = Fr(1, 10) if eta is None else Fr(eta)
    cplx = []
    for k in range(grid):
        b = Fr(k, grid)
        t = 1 + b - eta * (1 - b)
        cplx.append((t * t < 4 * b, b))
    first = next((b for c, b in cplx if c), None)
    contiguous = first is not None and all(c == (b >= first) for c, b in cplx)
    held = contiguous and round(float(first), 2) == 0.67
    return SPEC["arnekvist/sec5-complex-eigenvalues"].judge(
        f"complex for beta >= {first} = {float(first):.4f} on the 1/{grid} grid (exact boundary "
        f"{((1 - eta) / (1 + eta)) ** 2})" if first is not None else "never complex on the grid",
        decide.exact(bool(held)))


def depth_claim() -> dict:
    return SPEC["arnekvist/fig6-depth-residual"].judge("not measured", decide.not_run(
        "network_experiment over depths (e.g. 2-10 hidden layers) and a residual + BN variant, dead share tracked "
        "over 250000 steps, >= 5 seeds", "the nightly trains the one 200-unit depth of Fig. 1; the depth sweep "
                                         "needs hours of CPU per depth"))


def _tolerances(tol: float = 1e-6, eta: float = 0.1) -> dict:
    """Optimum tolerances the verdicts are checked over: 2x and 10x the distance a run stopped by the paper's
    rule (update norm < 1e-6) may keep from the optimum; and the previous, too strict 1e-2 * max(gamma, 1e-3)
    (reported only: it is below that distance for gamma <= 1e-2)."""
    r = stopping_reach(tol, eta)
    return {"2x stopping reach": 2 * r, "10x stopping reach": 10 * r,
            "1e-2*max(gamma,1e-3) (previous)": lambda g: 1e-2 * max(g, 1e-3)}


DECIDING_TOLS = ("2x stopping reach", "10x stopping reach")


def _cell(rmap, gamma, beta, tol=DECIDING_TOLS[0]):
    return next(c for c in rmap["cells"] if c["gamma"] == gamma and c["beta"] == beta)["by_tol"][tol]


def region_claims(settings: dict, strict: dict, dead: dict, n: int, notes: str = "") -> list[dict]:
    """The region map's claims. ``settings``: label (grid extent, tolerance) -> gamma -> ``{"optimum", "dead"}``
    shares at beta = 0; ``strict``: gamma -> optimum share under the previous tolerance (reported); ``dead``:
    tolerance label -> (gamma, beta) -> dead share at the main extent (the smallest and largest gamma, beta in
    0, 0.5, 0.7, 0.9, 0.99); ``n``: initial points per cell."""
    first = next(iter(settings.values()))
    gammas = sorted(first, reverse=True)
    small, big = min(gammas), max(gammas)
    fmt = lambda xs: f"{min(xs):.2f}-{max(xs):.2f}"  # noqa: E731
    opt = {g: [s[g]["optimum"] for s in settings.values()] for g in gammas}
    dd = {g: [s[g]["dead"] for s in settings.values()] for g in gammas}
    majority = {label: all(s[g]["optimum"] > 0.5 for g in gammas) for label, s in settings.items()}
    more_dead = {t: all(d[(small, b)] > d[(big, b)] for b in (0.0, 0.9)) for t, d in dead.items()}
    low = {t: [d[(small, b)] for b in (0.0, 0.5, 0.7)] for t, d in dead.items()}
    hi = {t: [d[(small, b)] for b in (0.9, 0.99)] for t, d in dead.items()}
    like0 = {t: max(low[t]) - min(low[t]) < LIKE_BETA0_SPREAD and min(hi[t]) > max(low[t]) for t in dead}
    t0 = next(iter(dead))
    d0 = dead[t0]
    return [
        SPEC["arnekvist/fig4-majority-converges"].judge(
            "optimum share per gamma over extents x tolerances: " + "; ".join(
                f"gamma={g:g}: {fmt(opt[g])} (dead {fmt(dd[g])})" for g in gammas)
            + "; with the previous tolerance 1e-2*max(gamma,1e-3): " + ", ".join(f"{strict[g]:.2f}" for g in gammas),
            decide.robust(majority, n, what="grid extent and tolerance", unit="grid point"),
            threshold=Threshold(0.5, "paper", "majority"), notes=notes,
        ),
        SPEC["arnekvist/figs4-5-small-gamma-dies"].judge(
            f"beta=0: {d0[(big, 0.0)]:.2f} vs {d0[(small, 0.0)]:.2f}; beta=0.9: {d0[(big, 0.9)]:.2f} vs "
            f"{d0[(small, 0.9)]:.2f}",
            decide.robust(more_dead, n, what="tolerance", unit="grid point"), fields={"small": small, "big": big},
        ),
        SPEC["arnekvist/fig5-momentum"].judge(
            f"dead share at beta 0/0.5/0.7: {', '.join(f'{v:.2f}' for v in low[t0])}; at 0.9/0.99: "
            f"{', '.join(f'{v:.2f}' for v in hi[t0])}",
            decide.robust(like0, n, what="tolerance", unit="grid point"), fields={"small": small},
            threshold=Threshold(LIKE_BETA0_SPREAD, "ours", "largest spread read as 'the same'"),
        ),
    ]


def region_study(grid: int, max_steps: int, extents=(2.0,)) -> dict:
    """:func:`region_map` (eta = 0.1) at ``extents[0]`` (every beta) and at the other ``extents`` (beta = 0 only),
    with its claims: ``{**region_map, "beta0_by_extent", "claims"}``."""
    tols = _tolerances()
    main, others = extents[0], extents[1:]
    rmap = region_map(grid=grid, max_steps=max_steps, extent=main, optimum_tols=tols)
    gammas = sorted({c["gamma"] for c in rmap["cells"]}, reverse=True)
    by_extent = {main: rmap}
    for e in others:
        by_extent[e] = region_map(gammas=tuple(gammas), betas=(0.0,), grid=grid, max_steps=max_steps, extent=e,
                                  optimum_tols=tols)
    settings = {f"extent {e:g}, {t}": {g: _cell(m, g, 0.0, t) for g in gammas}
                for e, m in by_extent.items() for t in DECIDING_TOLS}
    strict = {g: _cell(rmap, g, 0.0, "1e-2*max(gamma,1e-3) (previous)")["optimum"] for g in gammas}
    by_tol = {t: {(g, b): _cell(rmap, g, b, t)["dead"] for g in (min(gammas), max(gammas))
                  for b in (0.0, 0.5, 0.7, 0.9, 0.99)} for t in DECIDING_TOLS}
    n = rmap["cells"][0]["n_inits"]
    notes = (f"grid {grid}x{grid} over [-e, e]^2 for e in {', '.join(f'{e:g}' for e in extents)}; stop at update "
             f"norm < 1e-6 or {max_steps} steps; optimum tolerances {', '.join(DECIDING_TOLS)} (stopping reach "
             f"{stopping_reach():.2g})")
    claims = region_claims(settings, strict, by_tol, n, notes)
    beta0 = {f"{e:g}": [{"gamma": g, **{t: _cell(m, g, 0.0, t) for t in tols}} for g in gammas]
             for e, m in by_extent.items()}
    return {**rmap, "beta0_by_extent": beta0, "claims": claims}


def _network_claims(net: list[dict], datasets, nsteps: int) -> list[dict]:
    seeds = {(r["dataset"], r["gamma"], r["optimizer"]): r["per_seed"] for r in net}
    by = {k: sum(v) / len(v) for k, v in seeds.items()}

    def pooled(o, g):
        return [x for d in datasets for x in seeds.get((d, g, o), [])]

    anything = any(v > 0 for v in by.values())
    fmt = lambda o, g: ", ".join(f"{d} {by[(d, g, o)]:.2f}" for d in datasets if (d, g, o) in by)  # noqa: E731

    def premise(dec):
        if anything:
            return dec
        return decide.undecided(dec, f"premise not exercised: no unit died in any setting in {nsteps} steps")

    small_more = premise(decide.greater(pooled("Adam", 1e-4), pooled("Adam", 1.0), NETWORK_EFFECT))
    def effect_of_gamma(o):  # per (data set, seed): dead share at gamma = 1e-4 minus at gamma = 1
        return [a - b for a, b in zip(pooled(o, 1e-4), pooled(o, 1.0))]

    momentum = premise(decide.all_of({
        "Adam vs Adam(beta1=0)": decide.greater(effect_of_gamma("Adam"), effect_of_gamma("Adam(beta1=0)"),
                                                NETWORK_EFFECT),
        "heavy-ball vs SGD": decide.greater(effect_of_gamma("heavy-ball"), effect_of_gamma("SGD"),
                                            NETWORK_EFFECT)}))
    mse = {(r["dataset"], r["gamma"], r["optimizer"]): r.get("mse_per_seed") or [] for r in net}
    mse_pooled = lambda o, g: [x for d in datasets for x in mse.get((d, g, o), [])]  # noqa: E731
    mse_small, mse_big = mse_pooled("Adam", 1e-4), mse_pooled("Adam", 1.0)
    # judged on log(MSE / gamma^2): a relative rise (the arms differ by orders of magnitude, and the spread of the
    # large arm would swamp an absolute effect scaled to the small one), so the power and n_required are
    # those of a (1 + MSE_EFFECT)-fold rise at the measured spread of the logs
    log = lambda xs: [math.log(max(v, 5e-324)) for v in xs]  # noqa: E731  (an MSE of exactly 0: the least float)
    sgd_flat = premise(decide.no_increase(pooled("SGD", 1e-4), pooled("SGD", 1.0), NETWORK_EFFECT))
    th = Threshold(NETWORK_EFFECT, "ours", "difference in dead share the test must detect")
    note = f"{nsteps} steps (Arnekvist et al. trained 250000); seeds pooled over {', '.join(datasets)}"
    return [
        SPEC["arnekvist/fig1-adam-small-gamma"].judge(
               f"gamma=1e-4: {fmt('Adam', 1e-4)}; gamma=1: {fmt('Adam', 1.0)}", small_more, threshold=th,
               notes=note),
        SPEC["arnekvist/fig1-needs-momentum"].judge(
               f"gamma = 1e-4 / 1: Adam {fmt('Adam', 1e-4)} / {fmt('Adam', 1.0)}; Adam(beta1=0) "
               f"{fmt('Adam(beta1=0)', 1e-4)} / {fmt('Adam(beta1=0)', 1.0)}; heavy-ball {fmt('heavy-ball', 1e-4)} / "
               f"{fmt('heavy-ball', 1.0)}; SGD {fmt('SGD', 1e-4)} / {fmt('SGD', 1.0)}", momentum, threshold=th,
               notes=note),
        SPEC["arnekvist/fig1-mse-degrades"].judge(
               f"MSE / gamma^2 per seed: gamma=1e-4 {', '.join(f'{v:.3g}' for v in mse_small)}; gamma=1 "
               f"{', '.join(f'{v:.3g}' for v in mse_big)}",
               decide.greater(log(mse_small), log(mse_big), math.log(1 + MSE_EFFECT)),
               threshold=Threshold(MSE_EFFECT, "ours", "the relative rise of MSE / gamma^2 the test must detect "
                                                       "(judged on its logarithm)"),
               notes=note),
        SPEC["arnekvist/sec6-sgd-flat"].judge(
               f"gamma=1e-4: {fmt('SGD', 1e-4)}; gamma=1: {fmt('SGD', 1.0)}", sgd_flat, threshold=th, notes=note),
    ]


#: the (gamma, optimizer) cells the claims read
NETWORK_CELLS = ((1.0, "Adam"), (1e-4, "Adam"), (1e-4, "Adam(beta1=0)"), (1.0, "Adam(beta1=0)"), (1e-4, "heavy-ball"),
                 (1.0, "heavy-ball"), (1e-4, "SGD"), (1.0, "SGD"))


def network_study(datasets, seeds, steps: int, progress=None, cache=None, cells=NETWORK_CELLS,
                  workers: int = 1) -> dict:
    """:func:`network_experiment` on ``cells`` with its claims: ``{"rows", "claims"}``; ``cache`` resumes
    finished runs; ``workers`` processes run them."""
    rows = network_experiment(datasets=datasets, seeds=seeds, steps=steps, progress=progress, cache=cache,
                              combos=[(d, g, o) for d in datasets for g, o in cells], workers=workers)
    return {"rows": rows, "claims": _network_claims(rows, datasets, steps) + [eigen_claim(), depth_claim()]}
