"""Is a vector in the convex hull of finitely many exact vectors?  Answered with exact certificates.

* member: convex weights lambda >= 0, sum 1, with sum lambda_i v_i = t exactly (an LP gives the support, the
  weights are re-solved in Fractions);
* not member: a rational direction h with <h, t> > max_i <h, v_i>, checked exactly (or with rigorous interval
  bounds when the vertices or t carry intervals).
When the float LP misses (a gap below its tolerance), the exact simplex decides exact vectors both ways.
Any failed exact check gives ``None`` ("unknown"), never a guess.
"""

from __future__ import annotations

import bisect
from fractions import Fraction

import numpy as np

from nsverify.oracle.context import poll_deadline
from nsverify.oracle.numbers import Ival, bounds, is_exact, overlap, to_float
from nsverify.rational import check_weights, dot, nonneg_feasible, nonneg_solution, rationalize

F = Fraction


def _exact_vec(v) -> bool:
    return all(is_exact(x) for x in v)


def distinct(vectors) -> list:
    """The vectors without repeats: equal exact vectors are merged, and so are vectors whose intervals are
    *identical* (the same enclosure, full precision); vectors whose intervals merely overlap are kept apart
    (:func:`inseparable` reports them)."""
    out, seen = [], set()
    for v in vectors:
        key = tuple((x.lo, x.hi) if isinstance(x, Ival) else ("exact", x) for x in v)
        if key not in seen:
            seen.add(key)
            out.append(tuple(v))
    return out


def inseparable(V: list) -> tuple | None:
    """(i, j), i < j, for two listed vertices that intervals cannot tell apart (every coordinate's enclosures
    overlap, one of them an interval), or None; the first such pair in index order.  Such vertices may be one
    Bouligand gradient or two: the oracle does not merge them and does not decide.

    Two exact vectors never clash, so only pairs with an interval vertex are compared, and only those whose
    enclosures overlap on the coordinate where the vertices are most spread: interval vertices by a sweep,
    exact ones by bisection (near-linear when few vertices overlap, quadratic only when all of them do)."""
    iv = [i for i, v in enumerate(V) if any(isinstance(x, Ival) for x in v)]
    if not iv or not V[0]:
        return None
    n = len(V[0])
    k = max(range(n), key=lambda c: len({bounds(v[c]) for v in V[:64]}))
    ex = sorted((i for i, v in enumerate(V) if i not in set(iv)), key=lambda i: V[i][k])
    ex_keys = [V[i][k] for i in ex]
    found = None

    def clash(i: int, j: int) -> None:
        nonlocal found
        if all(overlap(a, b) for a, b in zip(V[i], V[j])):
            pair = (min(i, j), max(i, j))
            found = pair if found is None or pair < found else found

    active: list[int] = []
    for step, i in enumerate(sorted(iv, key=lambda i: bounds(V[i][k])[0])):
        if not step & 63:
            poll_deadline()
        lo, hi = bounds(V[i][k])
        active = [j for j in active if bounds(V[j][k])[1] >= lo]
        for j in active:
            clash(i, j)
        active.append(i)
        for j in ex[bisect.bisect_left(ex_keys, lo): bisect.bisect_right(ex_keys, hi)]:
            clash(i, j)
    return found


def member_weights(t, V: list, exact: bool = False) -> dict | None:
    """Exact convex weights {i: lambda_i} over V reproducing t, or None.  The float LP proposes the support;
    when its answer does not round to exact weights, or with ``exact=True`` when it finds none, the exact
    simplex decides (then None proves t outside conv(V))."""
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
    M = [[v[k] for v in V] for k in range(n)] + [[F(1)] * m]
    lam = nonneg_solution(M, [F(x) for x in t] + [F(1)], list(res.x), tol=1e-12) if res.status == 0 else None
    if lam is None and (res.status == 0 or exact):  # the float LP's support did not round: decide exactly
        lam = nonneg_feasible(M, [F(x) for x in t] + [F(1)])
    if lam is None:
        return None
    w = {i: x for i, x in enumerate(lam) if x != 0}
    return w if check_weights(t, V, w) else None


def exact_separation(t, V: list):
    """A rational h with <h, t> > <h, v> for every v (exact vectors), or None when t is in conv(V): the open
    cone {h : <t - v, h> > 0 for all v} decided by the exact simplex (non-empty iff t is outside the hull)."""
    from nsverify.oracle.cones import exact_strict_feasible

    if not V or not _exact_vec(t) or not all(_exact_vec(v) for v in V):
        return None
    return exact_strict_feasible([[F(a) - F(b) for a, b in zip(t, v)] for v in V], len(t))


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
    if _exact_vec(t) and all(_exact_vec(v) for v in V):
        return exact_separation(t, V)  # the float LP missed a thin gap: decide exactly
    # intervals narrower than the gap: separate their midpoints exactly, then check the intervals rigorously
    mid = lambda x: (x.lo + x.hi) / 2 if isinstance(x, Ival) else x  # noqa: E731
    h = exact_separation([mid(x) for x in t], [[mid(x) for x in v] for v in V])
    return h if h is not None and margin(h, t, V) is not None else None


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
    """A bracket (i, j) when vertices i and j equal t exactly in every coordinate but one, k, and
    hi(v_i[k]) <= t[k] <= lo(v_j[k]) (rigorous interval bounds): t lies on the segment between them.  In 1-D this
    is the plain bracket; in n-D it decides membership where intervals forbid exact weights but only one
    coordinate varies.  None otherwise."""
    n = len(t)
    by_k: dict = {}
    for i, v in enumerate(V):
        diff = [m for m in range(n) if not _same_exact(v[m], t[m])]
        if len(diff) == 1 or n == 1:
            by_k.setdefault(diff[0] if diff else 0, []).append(i)
    for k, cand in by_k.items():
        tlo, thi = bounds(t[k])
        below = [i for i in cand if bounds(V[i][k])[1] <= tlo]
        above = [i for i in cand if bounds(V[i][k])[0] >= thi]
        if below and above:
            return below[0], above[0]
    return None


def _same_exact(a, b) -> bool:
    return not isinstance(a, Ival) and not isinstance(b, Ival) and a == b
