"""Exact convex-hull membership in rational arithmetic, for the small Clarke sets of the registry.

``in_hull(point, vertices)`` decides whether ``point`` lies in conv(vertices) exactly: it runs phase 1 of the
simplex method on ``sum_i l_i v_i = p, sum_i l_i = 1, l >= 0`` over ``Fraction`` with Bland's rule (which
cannot cycle), so the answer is exact, never a floating-point guess.  Meant for tens of vertices in tens of
dimensions (tie sets of a few entries), not for large polytopes.
"""
from __future__ import annotations

from fractions import Fraction
from typing import Sequence

Vec = Sequence[Fraction]


def _as_fracs(v) -> list[Fraction]:
    return [Fraction(x) for x in v]


def hull_weights(point: Vec, vertices: Sequence[Vec]) -> list[Fraction] | None:
    """Convex weights l (exact) with sum_i l_i v_i = point, or ``None`` if point is outside conv(vertices)."""
    verts = [_as_fracs(v) for v in vertices]
    p = _as_fracs(point)
    if not verts:
        return None
    dim = len(p)
    if any(len(v) != dim for v in verts):
        raise ValueError("in_hull: the point and every vertex must have the same length")
    n = len(verts)
    # rows: one per coordinate plus the sum-to-one row; make the right-hand sides non-negative
    rows = [[verts[j][i] for j in range(n)] + [p[i]] for i in range(dim)]
    rows.append([Fraction(1)] * n + [Fraction(1)])
    rows = [[-a for a in r] if r[-1] < 0 else r for r in rows]
    m = len(rows)
    # tableau columns: n structural, m artificial, rhs
    tab = [r[:n] + [Fraction(int(i == k)) for k in range(m)] + [r[-1]] for i, r in enumerate(rows)]
    basis = [n + i for i in range(m)]
    width = n + m
    # objective: minimise the sum of artificials -> reduced costs c_j = -sum of column over rows
    cost = [-sum(tab[i][j] for i in range(m)) for j in range(n)] + [Fraction(0)] * m
    value = -sum(tab[i][-1] for i in range(m))
    while True:
        enter = next((j for j in range(width) if cost[j] < 0), None)  # Bland: smallest index
        if enter is None:
            break
        best = None
        for i in range(m):
            a = tab[i][enter]
            if a > 0:
                ratio = tab[i][-1] / a
                if best is None or ratio < best[0] or (ratio == best[0] and basis[i] < basis[best[1]]):
                    best = (ratio, i)
        if best is None:  # unbounded: impossible for phase 1 (objective >= 0)
            break
        r = best[1]
        piv = tab[r][enter]
        tab[r] = [a / piv for a in tab[r]]
        for i in range(m):
            if i != r and tab[i][enter] != 0:
                f = tab[i][enter]
                tab[i] = [a - f * b for a, b in zip(tab[i], tab[r])]
        f = cost[enter]
        cost = [a - f * b for a, b in zip(cost, tab[r][:width])]
        value -= f * tab[r][-1]
        basis[r] = enter
    if value != 0:
        return None
    weights = [Fraction(0)] * n
    for i, b in enumerate(basis):
        if b < n:
            weights[b] = tab[i][-1]
    return weights


def in_hull(point: Vec, vertices: Sequence[Vec]) -> bool:
    """Exact test: is ``point`` in the convex hull of ``vertices``?"""
    w = hull_weights(point, vertices)
    if w is None:
        return False
    # certificate check: the weights really reproduce the point (guards against any tableau slip)
    p = _as_fracs(point)
    verts = [_as_fracs(v) for v in vertices]
    ok = sum(w) == 1 and all(x >= 0 for x in w)
    ok = ok and all(sum(w[j] * verts[j][i] for j in range(len(verts))) == p[i] for i in range(len(p)))
    if not ok:  # pragma: no cover - would be a bug in the simplex above
        raise AssertionError("in_hull: phase-1 weights fail the exact check")
    return True


def in_interval(value, lo, hi) -> bool:
    """1-d Clarke sets are intervals."""
    return lo <= value <= hi
