"""Exact linear algebra in Fractions: dot products, rationalisation, and re-solving LP answers exactly."""

from __future__ import annotations

from fractions import Fraction
from typing import Sequence

from nsverify.rational import null_space, solve_unique  # noqa: F401 (null_space is re-exported)

F = Fraction


def dot(a: Sequence, b: Sequence):
    return sum((x * y for x, y in zip(a, b)), F(0))


def sdot(g: dict, d: Sequence):
    """<g, d> for a sparse dict g."""
    return sum((c * d[k] for k, c in g.items()), F(0))


def rationalize(x: float, max_den: int | None = 10**6) -> Fraction:
    f = F(x)
    return f.limit_denominator(max_den) if max_den else f


def rref_rows(rows: list[list[Fraction]]) -> list[list[Fraction]]:
    """A maximal linearly independent subset of ``rows`` (exact Gaussian elimination)."""
    basis: list[list[Fraction]] = []  # echelon copies
    pivots: list[int] = []
    keep = []
    for r in rows:
        r = [F(x) for x in r]
        v = list(r)
        for b, p in zip(basis, pivots):
            if v[p] != 0:
                c = v[p] / b[p]
                v = [x - c * y for x, y in zip(v, b)]
        p = next((i for i, x in enumerate(v) if x != 0), None)
        if p is not None:
            basis.append(v)
            pivots.append(p)
            keep.append(list(r))
    return keep




def project_affine(M: list[list[Fraction]], b: list[Fraction], y0: list[Fraction]) -> list[Fraction] | None:
    """The point of {y : M y = b} nearest to y0, exactly (None if the system is inconsistent)."""
    aug = rref_rows([[F(x) for x in r] + [F(bb)] for r, bb in zip(M, b)])
    rows = [r[:-1] for r in aug]
    if any(all(x == 0 for x in r) for r in rows):
        return None  # 0 = nonzero: inconsistent
    if not rows:
        return list(y0)
    rhs = [r[-1] for r in aug]
    G = [[dot(r, s) for s in rows] for r in rows]
    resid = [dot(r, y0) - c for r, c in zip(rows, rhs)]
    lam = solve_unique(G, resid)
    if lam is None:
        return None
    y = list(y0)
    for lj, r in zip(lam, rows):
        if lj:
            y = [yi - lj * ri for yi, ri in zip(y, r)]
    return y


def nonneg_solution(
    M: list[list[Fraction]], b: list[Fraction], guess: Sequence[float], tol: float = 1e-10
) -> list[Fraction] | None:
    """An exact y >= 0 with M y = b, found from a floating guess (an LP's answer), or None.

    Restricts to the guess's support, projects the rationalised guess onto the affine solution set exactly,
    and drops the most negative coordinates a few times if the projection leaves the orthant.
    """
    n = len(guess)
    support = [i for i in range(n) if guess[i] > tol]
    for _ in range(max(3, n)):
        if not support:
            return None
        Ms = [[row[i] for i in support] for row in M]
        y0 = [rationalize(guess[i], 10**12) for i in support]
        ys = project_affine(Ms, b, y0)
        if ys is None:
            return None
        if all(v >= 0 for v in ys):
            y = [F(0)] * n
            for i, v in zip(support, ys):
                y[i] = v
            return y
        worst = min(range(len(ys)), key=lambda j: ys[j])
        support = [i for j, i in enumerate(support) if j != worst]
    return None
