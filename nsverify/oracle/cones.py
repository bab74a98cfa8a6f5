"""Is the open cone {d : <a_i, d> > 0 for all i} non-empty?  Decided by a small LP, answered exactly.

The LP (bounded box, strict margin t):  maximise t  s.t.  <a_i, d> >= t,  -1 <= d <= 1,  t <= 1.
* t* > 0: the LP's direction d is rationalised and checked exactly (``<a_i, d> > 0`` in Fractions): a
  *witness*.
* t* = 0: the LP's dual gives y >= 0, sum y = 1, A^T y = 0 (Gordan's alternative, which proves the open cone
  empty); it is re-solved exactly on its support and checked.
If neither exact check passes, the answer is ``None`` (uncertain), never a guess.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction

from .linalg import nonneg_solution, rationalize, sdot

F = Fraction


@dataclass
class ConeStats:
    lps: int = 0
    witness_reuse: int = 0
    gordan: int = 0
    uncertain: int = 0
    lp_seconds: float = 0.0
    notes: list = field(default_factory=list)


def holds(rows: list[dict], d: dict | None) -> bool:
    """Exact check that every <a_i, d> > 0 (d sparse dict; None = no direction yet)."""
    if d is None:
        return not rows
    return all(sdot(a, _Dense(d)) > 0 for a in rows)


class _Dense:
    """Sparse dict read as a dense vector (missing entries are 0)."""

    __slots__ = ("d",)

    def __init__(self, d):
        self.d = d

    def __getitem__(self, k):
        return self.d.get(k, 0)


def feasible(rows: list[dict], stats: ConeStats):
    """('open', witness d) | ('empty', Gordan y) | (None, reason).  ``rows`` are sparse dicts of Fractions."""
    import time

    import numpy as np
    from scipy.optimize import linprog

    if any(not a for a in rows):
        return "empty", {"zero_row": next(i for i, a in enumerate(rows) if not a)}
    cols = sorted({k for a in rows for k in a})
    idx = {k: j for j, k in enumerate(cols)}
    m, n = len(rows), len(cols)
    A = np.zeros((m, n))
    for i, a in enumerate(rows):
        for k, c in a.items():
            A[i, idx[k]] = float(c)
    scale = np.abs(A).max(axis=1)
    A = A / scale[:, None]
    # variables (d_1..d_n, t): minimise -t  s.t.  -A d + t <= 0
    c = np.zeros(n + 1)
    c[-1] = -1.0
    A_ub = np.hstack([-A, np.ones((m, 1))])
    bounds = [(-1.0, 1.0)] * n + [(None, 1.0)]
    t0 = time.perf_counter()
    res = linprog(c, A_ub=A_ub, b_ub=np.zeros(m), bounds=bounds, method="highs")
    stats.lp_seconds += time.perf_counter() - t0
    stats.lps += 1
    if res.status != 0:
        stats.uncertain += 1
        return None, f"LP status {res.status}: {res.message}"
    t = -res.fun
    if t > 1e-9:
        for den in (10**4, 10**8, None):
            d = {cols[j]: rationalize(res.x[j], den) for j in range(n) if res.x[j] != 0}
            if holds(rows, d):
                return "open", d
    # Gordan certificate from the dual of the margin constraints
    y_float = -np.asarray(res.ineqlin.marginals)
    y = _gordan(rows, cols, y_float)
    if y is not None:
        stats.gordan += 1
        return "empty", y
    stats.uncertain += 1
    return None, f"LP margin {t:.3g} but no exact certificate either way"


def _gordan(rows, cols, y_float):
    """Exact y >= 0, sum y = 1, sum_i y_i a_i = 0, or None."""
    M = [[a.get(k, F(0)) for a in rows] for k in cols] + [[F(1)] * len(rows)]
    b = [F(0)] * len(cols) + [F(1)]
    y = nonneg_solution(M, b, list(y_float))
    if y is None or not check_gordan(rows, y):
        return None
    return y


def check_gordan(rows: list[dict], y: list) -> bool:
    """Exact re-check that y proves {d : A d > 0} empty."""
    if len(y) != len(rows) or any(v < 0 for v in y) or sum(y) != 1:
        return False
    cols = {k for a in rows for k in a}
    return all(sum((yi * a.get(k, 0) for yi, a in zip(y, rows)), F(0)) == 0 for k in cols)
