"""Is a vector in the convex hull of finitely many exact vectors?  Answered with exact certificates.

* member: convex weights lambda >= 0, sum 1, with sum lambda_i v_i = t exactly (an LP gives the support, the
  weights are re-solved in Fractions);
* not member: a rational direction h with <h, t> > max_i <h, v_i>, checked exactly (or with rigorous interval
  bounds when the vertices or t carry intervals).
Any failed exact check gives ``None`` ("unknown"), never a guess.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from nsverify.oracle.numbers import Ival, is_exact, to_float
from nsverify.rational import check_weights, dot, nonneg_solution, rationalize

F = Fraction


def _exact_vec(v) -> bool:
    return all(is_exact(x) for x in v)


def distinct(vectors) -> list:
    out, seen = [], set()
    for v in vectors:
        key = tuple((x.lo, x.hi) if isinstance(x, Ival) else x for x in v)
        if key not in seen:
            seen.add(key)
            out.append(tuple(v))
    return out


def member_weights(t, V: list) -> dict | None:
    """Exact convex weights {i: lambda_i} over V reproducing t, or None."""
    if not V or not _exact_vec(t) or not all(_exact_vec(v) for v in V):
        return None
    for i, v in enumerate(V):  # cheap exact hit
        if tuple(v) == tuple(t):
            return {i: F(1)}
    from nsverify.oracle.lp import linprog  # HiGHS directly: scipy.optimize costs ~1 s to import

    n, m = len(t), len(V)
    A = np.array([[float(v[k]) for v in V] for k in range(n)] + [[1.0] * m])
    b = np.array([float(x) for x in t] + [1.0])
    res = linprog(np.zeros(m), A_eq=A, b_eq=b, bounds=[(0, None)] * m, method="highs")
    if res.status != 0:
        return None
    M = [[v[k] for v in V] for k in range(n)] + [[F(1)] * m]
    lam = nonneg_solution(M, [F(x) for x in t] + [F(1)], list(res.x), tol=1e-12)
    if lam is None:
        return None
    w = {i: x for i, x in enumerate(lam) if x != 0}
    return w if check_weights(t, V, w) else None


def separating_direction(t, V: list):
    """A rational h with <h,t> > max <h,v> (checked exactly / rigorously), or None."""
    if not V:
        return None
    from nsverify.oracle.lp import linprog  # HiGHS directly: scipy.optimize costs ~1 s to import

    n, m = len(t), len(V)
    tf = np.array([to_float(x) for x in t])
    Vf = np.array([[to_float(x) for x in v] for v in V])
    # variables (h, s): maximise <h,t> - s  s.t.  <h, v_i> - s <= 0,  h in [-1, 1]^n
    c = np.concatenate([-tf, [1.0]])
    A_ub = np.hstack([Vf, -np.ones((m, 1))])
    res = linprog(c, A_ub=A_ub, b_ub=np.zeros(m), bounds=[(-1, 1)] * n + [(None, None)], method="highs")
    cands = []
    if res.status == 0 and -res.fun > 0:
        cands.append(res.x[:n])
    # the Euclidean projection direction is a second candidate
    p = project(tf, Vf)
    if p is not None:
        cands.append(tf - p)
    for h in cands:
        for den in (10**3, 10**6, 10**10, None):
            hr = [rationalize(x, den) for x in h]
            if margin(hr, t, V) is not None:
                return hr
    return None


def margin(h, t, V):
    """Exact (or rigorous lower bound of the) margin <h,t> - max <h,v_i> if positive, else None."""
    ok = lambda x: isinstance(x, (int, Fraction, Ival))  # noqa: E731
    if not all(ok(x) for x in h) or not all(ok(x) for x in t) or not all(ok(x) for v in V for x in v):
        return None  # floats are never accepted in a certificate
    ht = dot(h, t)
    best = None
    for v in V:
        hv = dot(h, v)
        diff = ht - hv
        lo = diff.lo if isinstance(diff, Ival) else diff
        if lo <= 0:
            return None
        best = lo if best is None else min(best, lo)
    return best


def project(t, V):
    """Euclidean projection of float t onto conv(V) (float), by Wolfe's minimum-norm-point algorithm."""
    P = np.asarray(V, dtype=float) - np.asarray(t, dtype=float)[None, :]
    return np.asarray(t, dtype=float) + _min_norm_point(P)


def _min_norm_point(P, tol=1e-12, max_iter=1000):
    """Wolfe (1976): the point of conv(rows of P) nearest to the origin."""
    j0 = int(np.argmin((P * P).sum(axis=1)))
    S, lam = [j0], np.array([1.0])
    x = P[j0].copy()
    scale = max(1.0, float(np.abs(P).max()))
    for _ in range(max_iter):
        j = int(np.argmin(P @ x))
        if x @ x - P[j] @ x <= tol * scale * scale or j in S:
            break
        S.append(j)
        lam = np.append(lam, 0.0)
        while True:  # minor cycle: affine minimiser on S, step back into the simplex if needed
            Q = P[S]
            k = len(S)
            A = np.zeros((k + 1, k + 1))
            A[:k, :k] = Q @ Q.T
            A[:k, k] = 1.0
            A[k, :k] = 1.0
            b = np.zeros(k + 1)
            b[k] = 1.0
            try:
                mu = np.linalg.lstsq(A, b, rcond=None)[0][:k]
            except np.linalg.LinAlgError:  # pragma: no cover
                return x
            if (mu > tol).all():
                lam = mu
                break
            mask = mu <= tol
            theta = min(1.0, float(np.min(lam[mask] / np.maximum(lam[mask] - mu[mask], 1e-300))))
            lam = theta * mu + (1 - theta) * lam
            keep = lam > tol
            S = [s for s, kp in zip(S, keep) if kp]
            lam = lam[keep]
            lam = lam / lam.sum()
        x = lam @ P[S]
    return x


def distance(t, V) -> float:
    if not V:
        return float("nan")
    tf = np.array([to_float(x) for x in t])
    p = project(tf, [[to_float(x) for x in v] for v in V])
    return float(np.linalg.norm(tf - p))


def interval_member_1d(t, V):
    """1-D with interval vertices: a certificate (i_below, j_above) with hi(v_i) <= t <= lo(v_j), or None."""
    tlo = t[0].lo if isinstance(t[0], Ival) else t[0]
    thi = t[0].hi if isinstance(t[0], Ival) else t[0]
    below = [i for i, v in enumerate(V) if (v[0].hi if isinstance(v[0], Ival) else v[0]) <= tlo]
    above = [i for i, v in enumerate(V) if (v[0].lo if isinstance(v[0], Ival) else v[0]) >= thi]
    if below and above:
        return below[0], above[0]
    return None
