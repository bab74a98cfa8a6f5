"""The hardness table (Boustany, Ch.2, Theorems 5-6 and Proposition 4): over instance size, the exact Clarke
set at 0 of the 3-SAT network (exponential) against Proposition 4 for the AD conservative set (polynomial),
each with its time."""

from __future__ import annotations

import time

from nsverify.errors import NsverifyError, TooManyPieces
from nsverify.papers.costs.bouligand import bouligand_set
from nsverify.papers.costs.prop4 import ad_set_two
from nsverify.papers.costs.relunet import sat_network
from nsverify.papers.costs.sat import brute_force_sat, random_3cnf, unsat_core

QUICK_SIZES = ((3, 1), (3, 2), (3, 4), (3, "unsat"), (4, 4), (4, 8))
FULL_SIZES = QUICK_SIZES + ((5, 8), (5, 16), (6, 16))


def hardness_table(
    sizes=QUICK_SIZES, seed: int = 0, max_regions: int = 5000, time_budget: float | None = None, progress=None,
    oracle_max_p: int = 3,
) -> list[dict]:
    """One row per (p variables, n clauses; n = "unsat": the 8-clause unsatisfiable core on 3 variables):
    network size, SAT (brute force), exact Clarke at 0 with its time and region count, Proposition 4's
    verdict for D^a(0) with its time.  Sizes whose exact enumeration passes ``max_regions`` are reported as
    such (the limit is the point of Theorem 6).  For p <= ``oracle_max_p`` the issue-3 oracle
    ``nsverify.check_gradient`` is timed too, and its Bouligand set compared with ours (``oracle_agrees``)."""
    rows = []
    t_start = time.perf_counter()
    for idx, (p, n) in enumerate(sizes):
        if progress:
            progress(f"hardness p={p} n={n}", idx, len(sizes))
        clauses = unsat_core() if n == "unsat" else random_3cnf(p, n, seed + 97 * idx)
        n = len(clauses)
        net = sat_network(clauses, p)
        sat, _ = brute_force_sat(clauses, p)
        t0 = time.perf_counter()
        res = ad_set_two(net, [0] * p)
        t_prop4 = time.perf_counter() - t0
        row = dict(
            p=p,
            clauses=n,
            neurons=net.n_neurons,
            relu_layers=net.n_relu_layers,
            size=net.size(),
            sat=sat,
            ad_nonsingleton=res.nonsingleton,
            t_prop4=t_prop4,
        )
        over = time_budget is not None and time.perf_counter() - t_start > time_budget
        if over:
            row.update(clarke_nontrivial=None, regions=None, t_clarke=None, clarke_status="skipped (budget)")
        else:
            t0 = time.perf_counter()
            try:
                b = bouligand_set(net, [0] * p, max_regions=max_regions)
                row.update(
                    clarke_nontrivial=not b.clarke_is_zero,
                    regions=b.regions,
                    lp_calls=b.lp_calls,
                    t_clarke=time.perf_counter() - t0,
                    clarke_status="exact",
                )
            except TooManyPieces:
                row.update(
                    clarke_nontrivial=None,
                    regions=f">{max_regions}",
                    t_clarke=time.perf_counter() - t0,
                    clarke_status="too many regions",
                )
        row.update(_oracle(net, p, b.gradients if row["clarke_status"] == "exact" else None)
                   if p <= oracle_max_p and not over else {})
        rows.append(row)
    return rows


def _oracle(net, p, gradients) -> dict:
    try:
        import torch

        from nsverify.oracle import check_gradient
    except ImportError:  # the oracle lives on another branch until merged, or torch is absent
        return {}
    from nsverify.papers.costs.relunet import to_torch_fn

    t0 = time.perf_counter()
    v = check_gradient(to_torch_fn(net), torch.zeros(p, dtype=torch.float64), max_pieces=20_000,
                       on_limit="unknown")
    agrees = None if gradients is None or not v.exact else {tuple(g) for g in v.bouligand} == gradients
    return dict(t_oracle=time.perf_counter() - t0, oracle_exact=v.exact, oracle_agrees=agrees)


def theorem6_sample(count: int, seed: int = 1000, p: int = 3, max_clauses: int = 8,
                    max_regions: int = 5000) -> dict:
    """Theorem 6 on ``count`` random small 3-CNF formulas on p = 3 variables, half of them unsatisfiable (the
    8-clause core, shuffled, its clauses' literals permuted) and half random with 1..``max_clauses`` clauses
    (almost always satisfiable): exact Clarke at 0 against brute-force SAT. ``{"instances", "decided",
    "mismatches", "sat"}`` (``decided``: instances whose enumeration stayed under ``max_regions``)."""
    import random

    if p != 3:
        raise NsverifyError("theorem6_sample draws formulas on p = 3 variables (its unsatisfiable half is the "
                            "3-variable core)")
    g = random.Random(seed)
    decided = mismatches = n_sat = 0
    for i in range(count):
        if i % 2:
            clauses = [tuple(g.sample(c, 3)) for c in unsat_core()]
            g.shuffle(clauses)
        else:
            clauses = random_3cnf(p, g.randint(1, max_clauses), seed + 131 * i)
        net = sat_network(clauses, p)
        sat, _ = brute_force_sat(clauses, p)
        n_sat += sat
        try:
            b = bouligand_set(net, [0] * p, max_regions=max_regions)
        except TooManyPieces:
            continue
        decided += 1
        mismatches += (not b.clarke_is_zero) != sat
    return {"instances": count, "decided": decided, "mismatches": mismatches, "sat": n_sat}
