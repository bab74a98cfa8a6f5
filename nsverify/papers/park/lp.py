"""Algorithm 1's emptiness test for P_l = {x : <a_k, x> > 0 for all k} (Park, Chun and Lee, Sec. 3.2).

The printed LP "max c s.t. <a_k, x> >= c" is unbounded whenever it is feasible; :func:`p_nonempty` bounds it
(-1 <= x <= 1, c <= 1), solves it with HiGHS and checks the returned point exactly in Fractions, or certifies
emptiness by an exact Farkas combination; a float answer that fails its exact check gives "unknown".
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from nsverify.rational import solve_any


@dataclass
class PResult:
    status: str  # "nonempty" | "empty" | "unknown" | "trivial" (no constraints)
    n_constraints: int
    point: list | None = None  # exact rational x with <a_k, x> > 0 for all k
    farkas: list | None = None  # exact lambda >= 0, sum 1, sum lambda_k a_k = 0
    margin: float | None = None

    @property
    def nonempty(self) -> bool:
        return self.status in ("nonempty", "trivial")


def p_nonempty(constraints) -> PResult:
    """Is P = {x : <a_k, x> > 0 for all k} non-empty?  ``constraints``: rows a_k (floats or Fractions).

    Solves max c s.t. <a_k, x> >= c, -1 <= x <= 1, c <= 1 (bounded; HiGHS via scipy), then checks the returned
    x exactly in Fractions; when the optimum is c <= 0, re-solves the Farkas system on the dual's support
    exactly. A float answer that fails its exact check gives "unknown"."""
    rows = [list(r) for r in constraints]
    if not rows:
        return PResult("trivial", 0)
    A = np.array([[float(v) for v in r] for r in rows], dtype=np.float64)
    exact = [[Fraction(v) for v in r] for r in rows]
    k, n = A.shape
    nz_cols = np.nonzero(np.any(A != 0, axis=0))[0]
    if nz_cols.size == 0:
        return _farkas_check(exact, list(range(k)), k) or PResult("unknown", k)
    As = A[:, nz_cols]
    from scipy.optimize import linprog

    m = nz_cols.size
    cvec = np.zeros(m + 1)
    cvec[-1] = -1.0
    A_ub = np.hstack([-As, np.ones((k, 1))])  # c - <a,x> <= 0
    bounds = [(-1, 1)] * m + [(None, 1)]
    res = linprog(cvec, A_ub=A_ub, b_ub=np.zeros(k), bounds=bounds, method="highs")
    if res.status != 0:
        return PResult("unknown", k)
    c = res.x[-1]
    if c > 0:
        x = res.x[:m]
        for denom in (None, 1 << 20, 1 << 10):
            xr = [
                Fraction(float(v)) if denom is None else Fraction(float(v)).limit_denominator(denom)
                for v in x
            ]
            full = [Fraction(0)] * n
            for j, col in enumerate(nz_cols):
                full[col] = xr[j]
            if all(sum((a * v for a, v in zip(r, full) if a), Fraction(0)) > 0 for r in exact):
                return PResult("nonempty", k, point=full, margin=float(c))
        return PResult("unknown", k, margin=float(c))
    marg = getattr(res, "ineqlin", None)
    lam = np.abs(marg.marginals) if marg is not None else None
    if lam is None:
        return PResult("unknown", k, margin=float(c))
    support = [i for i in range(k) if lam[i] > 1e-9]
    return _farkas_check(exact, support, k, margin=float(c)) or PResult("unknown", k, margin=float(c))


def _farkas_check(exact, support, k, margin=None) -> PResult | None:
    """Exact lambda >= 0 on ``support`` with sum 1 and sum lambda_i a_i = 0 (certifies P empty)."""
    if not support:
        return None
    n = len(exact[0])
    # unknowns lambda_s; equations: sum_s lambda_s a_s[j] = 0 for each j, sum lambda = 1
    eqs = [[exact[s][j] for s in support] + [Fraction(0)] for j in range(n)]
    eqs.append([Fraction(1)] * len(support) + [Fraction(1)])
    sol = solve_any([r[:-1] for r in eqs], [r[-1] for r in eqs])
    if sol is None or any(v < 0 for v in sol):
        return None
    lam = [Fraction(0)] * k
    for s, v in zip(support, sol):
        lam[s] = v
    # re-check
    if sum(lam) != 1 or any(sum(lam[i] * exact[i][j] for i in range(k)) != 0 for j in range(n)):
        return None
    return PResult("empty", k, farkas=lam, margin=margin)
