"""Arnekvist et al.'s dying-ReLU claims reproduced at a budget, each experiment with its judged claims.

* :func:`region_study` -- the single ReLU under heavy-ball (their Figs. 4-5): the share of initializations
  ending in the dead cone over target scales gamma and momenta beta;
* :func:`network_study` -- 200-unit ReLU regressions (their Fig. 1 and Sec. 6): dead units after training, per
  target scale gamma and optimizer, with the momentum-free controls Adam(beta1=0) and SGD.

Budgets (grid, steps, seeds, data sets) are the caller's: the report section chooses them.
"""

from __future__ import annotations

from nsverify.papers.arnekvist.dying_relu import network_experiment, region_map
from nsverify.papers.claims import claim

#: the largest spread of dead shares over beta in {0, 0.5, 0.7} still read as "behaves like beta = 0" (ours).
LIKE_BETA0_SPREAD = 0.05


def _cell(rmap, gamma, beta):
    return next(c for c in rmap["cells"] if c["gamma"] == gamma and c["beta"] == beta)


def region_study(grid: int, max_steps: int) -> dict:
    """:func:`region_map` (eta = 0.1) with its claims: ``{**region_map, "claims"}``."""
    rmap = region_map(grid=grid, max_steps=max_steps)
    d_small = [_cell(rmap, 1e-3, b)["dead"] for b in (0.0, 0.9)]
    d_big = [_cell(rmap, 1.0, b)["dead"] for b in (0.0, 0.9)]
    low = [_cell(rmap, 1e-3, b)["dead"] for b in (0.0, 0.5, 0.7)]
    hi = [_cell(rmap, 1e-3, b)["dead"] for b in (0.9, 0.99)]
    claims = [
        claim(
            "single ReLU: smaller target scale gamma sends more initializations into the dead cone",
            f"dead share gamma=1 vs 1e-3: beta=0 {d_big[0]:.2f} vs {d_small[0]:.2f}; beta=0.9 {d_big[1]:.2f} vs "
            f"{d_small[1]:.2f}",
            d_small[0] > d_big[0] and d_small[1] > d_big[1],
        ),
        claim(
            "single ReLU, gamma=1e-3: beta <= 0.7 behaves like beta = 0, larger momentum kills more "
            "(Arnekvist et al., Fig. 5)",
            f"dead share at beta 0/0.5/0.7: {low}; at 0.9/0.99: {hi}",
            max(low) - min(low) < LIKE_BETA0_SPREAD and min(hi) > max(low),
        ),
    ]
    return {**rmap, "claims": claims}


def _network_claims(net: list[dict], datasets, nsteps: int) -> list[dict]:
    by = {(r["dataset"], r["gamma"], r["optimizer"]): r["dead_share"]["mean"] for r in net}
    anything = any(v > 0 for v in by.values())
    note = "" if anything else f" (no unit died in {nsteps} steps: too short; full mode trains 50000)"
    fmt = lambda o, g: ", ".join(f"{d} {by[(d, g, o)]:.2f}" for d in datasets)  # noqa: E731
    small_more = all(by[(d, 1e-4, "Adam")] > by[(d, 1.0, "Adam")] for d in datasets)
    no_mom_less = all(by[(d, 1e-4, "Adam(beta1=0)")] < by[(d, 1e-4, "Adam")] for d in datasets)
    hb_more = all(by[(d, 1e-4, "heavy-ball")] > by[(d, 1e-4, "SGD")] for d in datasets)
    sgd_flat = all(by[(d, 1e-4, "SGD")] <= by[(d, 1.0, "SGD")] for d in datasets)
    return [
        claim("networks: smaller target variance gamma gives more dead ReLUs with Adam (Arnekvist et al., Fig. 1)",
              f"Adam dead share gamma=1e-4: {fmt('Adam', 1e-4)}; gamma=1: {fmt('Adam', 1.0)}" + note,
              small_more if anything else None),
        claim("networks: the small-gamma dying needs momentum (Arnekvist et al., Fig. 1: 'only with momentum')",
              f"gamma=1e-4: Adam(beta1=0) {fmt('Adam(beta1=0)', 1e-4)} vs Adam {fmt('Adam', 1e-4)}; "
              f"heavy-ball {fmt('heavy-ball', 1e-4)} vs SGD {fmt('SGD', 1e-4)}" + note,
              (no_mom_less and hb_more) if anything else None),
        claim("networks: SGD does not produce more dead ReLUs at small gamma (Arnekvist et al., Sec. 6)",
              f"SGD dead share gamma=1e-4: {fmt('SGD', 1e-4)}; gamma=1: {fmt('SGD', 1.0)}" + note,
              sgd_flat if anything else None),
    ]


def network_study(datasets, seeds, steps: int, progress=None, cache=None) -> dict:
    """:func:`network_experiment` with its claims: ``{"rows", "claims"}``; ``cache`` resumes finished runs."""
    net = network_experiment(datasets=datasets, seeds=seeds, steps=steps, progress=progress, cache=cache)
    return {"rows": net, "claims": _network_claims(net, datasets, steps)}
