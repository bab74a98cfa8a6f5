"""Exact linear algebra over the rationals (Gauss-Jordan elimination in ``Fraction``), shared by the oracle,
the premise checkers (:mod:`nsverify.papers.park.conditions`) and the cost module (:mod:`nsverify.papers.costs`)."""
from __future__ import annotations

from fractions import Fraction
from typing import Sequence


def gauss_jordan(A: Sequence[Sequence], b: Sequence | None = None) -> tuple[list[list[Fraction]], list[int]]:
    """Reduced row echelon form of ``[A | b]`` (``A`` alone when ``b`` is None), exactly.

    Returns the reduced rows (pivot rows first, each with pivot 1) and the pivot columns among A's columns;
    values are taken exactly (a float converts to the rational it represents)."""
    ncols = len(A[0]) if len(A) else 0
    M = [[Fraction(v) for v in row] + ([] if b is None else [Fraction(b[i])]) for i, row in enumerate(A)]
    pivots: list[int] = []
    r = 0
    for c in range(ncols):
        if r == len(M):
            break
        p = next((i for i in range(r, len(M)) if M[i][c] != 0), None)
        if p is None:
            continue
        M[r], M[p] = M[p], M[r]
        inv = 1 / M[r][c]
        M[r] = [x * inv for x in M[r]]
        for i in range(len(M)):
            if i != r and M[i][c] != 0:
                f = M[i][c]
                M[i] = [x - f * y for x, y in zip(M[i], M[r])]
        pivots.append(c)
        r += 1
    return M, pivots


def solve_any(A: Sequence[Sequence], b: Sequence) -> list[Fraction] | None:
    """Some exact solution of ``A x = b`` (free variables set to 0), or None when the system is inconsistent."""
    M, pivots = gauss_jordan(A, b)
    if any(row[-1] != 0 for row in M[len(pivots):]):
        return None
    x = [Fraction(0)] * (len(A[0]) if len(A) else 0)
    for i, c in enumerate(pivots):
        x[c] = M[i][-1]
    return x


def solve_unique(A: Sequence[Sequence], b: Sequence) -> list[Fraction] | None:
    """The solution of a square non-singular system ``A x = b``, exactly; None when A is singular."""
    M, pivots = gauss_jordan(A, b)
    if len(pivots) < len(A):
        return None
    return [M[i][-1] for i in range(len(A))]


def rank(rows: Sequence[Sequence]) -> int:
    """Rank over the rationals."""
    return len(gauss_jordan(rows)[1]) if len(rows) else 0


def null_space(A: Sequence[Sequence], ncols: int) -> list[list[Fraction]]:
    """A basis of {x : A x = 0} (exact reduced row echelon form)."""
    rows = [r for r in A if any(x != 0 for x in r)]
    M, pivots = gauss_jordan(rows) if rows else ([], [])
    basis = []
    for fcol in (c for c in range(ncols) if c not in pivots):
        x = [Fraction(0)] * ncols
        x[fcol] = Fraction(1)
        for i, pc in enumerate(pivots):
            x[pc] = -M[i][fcol]
        basis.append(x)
    return basis


def nonneg_feasible(A: Sequence[Sequence], b: Sequence) -> list[Fraction] | None:
    """A basic solution of ``{x >= 0 : A x = b}``, exactly, or None when the set is empty.

    Phase 1 of the simplex method with one artificial variable per row and Bland's rule (no cycling):
    minimise the sum of the artificials; the set is non-empty iff that minimum is 0."""
    n = len(A[0]) if len(A) else 0
    rows = [[Fraction(v) for v in row] + [Fraction(bv)] for row, bv in zip(A, b)]
    rows = [[-a for a in r] if r[-1] < 0 else r for r in rows]  # non-negative right-hand sides
    m = len(rows)
    # tableau columns: n structural, m artificial, rhs; the artificials form the first basis
    tab = [r[:n] + [Fraction(int(i == k)) for k in range(m)] + [r[-1]] for i, r in enumerate(rows)]
    basis = [n + i for i in range(m)]
    width = n + m
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
        if best is None:  # unbounded: impossible in phase 1 (the objective is >= 0)
            break
        r = best[1]
        piv = tab[r][enter]
        tab[r] = [a / piv for a in tab[r]]
        for i in range(m):
            if i != r and tab[i][enter] != 0:
                f = tab[i][enter]
                tab[i] = [a - f * bb for a, bb in zip(tab[i], tab[r])]
        f = cost[enter]
        cost = [a - f * bb for a, bb in zip(cost, tab[r][:width])]
        value -= f * tab[r][-1]
        basis[r] = enter
    if value != 0:
        return None
    x = [Fraction(0)] * n
    for i, bi in enumerate(basis):
        if bi < n:
            x[bi] = tab[i][-1]
    return x
