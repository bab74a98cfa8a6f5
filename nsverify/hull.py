"""Exact convex-hull membership in rational arithmetic, for the small Clarke sets of the registry.

``in_hull(point, vertices)`` decides whether ``point`` lies in conv(vertices) exactly: it runs phase 1 of the
simplex method on ``sum_i l_i v_i = p, sum_i l_i = 1, l >= 0`` over ``Fraction`` with Bland's rule (which
cannot cycle), so the answer is exact, never a floating-point guess.  Meant for tens of vertices in tens of
dimensions (tie sets of a few entries), not for large polytopes.
"""
from __future__ import annotations

from fractions import Fraction
from typing import Sequence

from nsverify.rational import nonneg_feasible

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
    # sum_j l_j v_j = point, sum_j l_j = 1, l >= 0
    rows = [[v[i] for v in verts] for i in range(dim)] + [[Fraction(1)] * len(verts)]
    return nonneg_feasible(rows, p + [Fraction(1)])


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
