"""Exact linear algebra over the rationals, in ``Fraction``: the one implementation behind the oracle
(:mod:`nsverify.oracle`), the registry's Clarke sets, the premise checkers (:mod:`nsverify.papers.park.conditions`)
and the cost module (:mod:`nsverify.papers.costs`).

* Gauss-Jordan elimination (:func:`gauss_jordan`) and what it gives: :func:`solve_any`, :func:`solve_unique`,
  :func:`rank`, :func:`null_space`, :func:`independent_rows`, :func:`project_affine`;
* phase 1 of the simplex method (:func:`nonneg_feasible`): a point of ``{x >= 0 : A x = b}`` or a proof of
  emptiness, exactly;
* exact answers from floating guesses (:func:`rationalize`, :func:`nonneg_solution`): an LP solver proposes,
  these functions re-derive the answer in Fractions, and nothing is accepted unchecked;
* convex hulls: :func:`hull_weights` / :func:`in_hull` decide membership exactly, :func:`check_weights` checks a
  convex combination (the check every membership certificate goes through);
* the nearest point of a hull (:func:`nearest_point`; with the origin, the minimum-norm element of a Clarke set):
  the quadratic program solved in floats by cvxpy (:func:`hull_qp_float`), its active face solved and its
  optimality conditions checked exactly (:func:`nearest_point_kkt`): the one implementation behind the conventions'
  promised column and ``Verdict.explain()``'s nearest element.
"""
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


def dot(a: Sequence, b: Sequence):
    """<a, b>, exactly (entries may be Fractions or rigorous intervals)."""
    return sum((x * y for x, y in zip(a, b)), Fraction(0))


def rationalize(x: float, max_den: int | None = 10**6) -> Fraction:
    """The float ``x`` as a Fraction: the nearest with denominator <= ``max_den``, or exactly when None."""
    f = Fraction(x)
    return f.limit_denominator(max_den) if max_den else f


def independent_rows(rows: Sequence[Sequence]) -> list[list[Fraction]]:
    """A maximal linearly independent subset of ``rows``, greedily in their order (exact).

    Row ``i`` is kept iff it is not in the span of the rows before it: the pivot columns of the transpose."""
    if not len(rows):
        return []
    cols = [[Fraction(r[j]) for r in rows] for j in range(len(rows[0]))]
    pivots = gauss_jordan(cols)[1] if cols else []
    return [[Fraction(x) for x in rows[i]] for i in pivots]


def project_affine(M: Sequence[Sequence], b: Sequence, y0: Sequence) -> list[Fraction] | None:
    """The point of {y : M y = b} nearest to y0 (Euclidean), exactly; None if the system is inconsistent."""
    aug = independent_rows([[Fraction(x) for x in r] + [Fraction(bb)] for r, bb in zip(M, b)])
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


def nonneg_solution(M: Sequence[Sequence], b: Sequence, guess: Sequence[float], tol: float = 1e-10
                    ) -> list[Fraction] | None:
    """An exact y >= 0 with M y = b, found from a floating guess (an LP's answer), or None.

    Restricts to the guess's support, projects the rationalised guess onto the affine solution set exactly,
    and drops the most negative coordinates a few times if the projection leaves the orthant.  None means
    "not found from this guess", not "empty": :func:`nonneg_feasible` decides emptiness."""
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
            y = [Fraction(0)] * n
            for i, v in zip(support, ys):
                y[i] = v
            return y
        worst = min(range(len(ys)), key=lambda j: ys[j])
        support = [i for j, i in enumerate(support) if j != worst]
    return None


def check_weights(point: Sequence, vertices: Sequence[Sequence], weights: dict) -> bool:
    """Exact check that ``weights`` ({vertex index: weight}) are convex and reproduce ``point``.

    Floats (and intervals) are never accepted: every entry must be an int or a Fraction."""
    exact = lambda x: isinstance(x, (int, Fraction))  # noqa: E731
    if not all(exact(x) for x in weights.values()) or not all(exact(x) for v in vertices for x in v) or not all(
            exact(x) for x in point):
        return False
    if any(x < 0 for x in weights.values()) or sum(weights.values()) != 1:
        return False
    return all(sum((c * vertices[i][k] for i, c in weights.items()), Fraction(0)) == point[k]
               for k in range(len(point)))


def hull_weights(point: Sequence, vertices: Sequence[Sequence]) -> list[Fraction] | None:
    """Exact convex weights l with sum_i l_i v_i = point, or None when point is outside conv(vertices).

    Phase 1 of the simplex method on ``sum_i l_i v_i = point, sum_i l_i = 1, l >= 0`` (:func:`nonneg_feasible`),
    so the answer is a decision, not a floating-point guess; values are taken exactly (a float converts to the
    rational it represents).  Meant for tens of vertices in tens of dimensions (the registry's tie sets); the
    oracle's large sets go through the LP-guided :func:`nsverify.oracle.membership.member_weights`."""
    verts = [[Fraction(x) for x in v] for v in vertices]
    p = [Fraction(x) for x in point]
    if not verts:
        return None
    if any(len(v) != len(p) for v in verts):
        raise ValueError("in_hull: the point and every vertex must have the same length")
    rows = [[v[i] for v in verts] for i in range(len(p))] + [[Fraction(1)] * len(verts)]
    return nonneg_feasible(rows, p + [Fraction(1)])


def in_hull(point: Sequence, vertices: Sequence[Sequence]) -> bool:
    """Exact test: is ``point`` in the convex hull of ``vertices``?  (:func:`hull_weights`, re-checked.)"""
    w = hull_weights(point, vertices)
    if w is None:
        return False
    verts = [[Fraction(x) for x in v] for v in vertices]
    if not check_weights([Fraction(x) for x in point], verts, dict(enumerate(w))):  # pragma: no cover
        raise ArithmeticError("in_hull: the phase-1 weights fail the exact check (a bug in nonneg_feasible)")
    return True


def pivots_mod_p(m, p: int, limit: int | None = None) -> list[int]:
    """Pivot columns of Gauss-Jordan elimination of the integer matrix ``m`` (a numpy int64 array, entries in
    [0, p)) modulo the prime ``p``, stopping after ``limit`` pivots (default: the number of rows). ``m`` is not
    modified. r pivots modulo p prove rank >= r over the integers, hence over Q."""
    import numpy as np

    m = m.copy()
    rows, cols = m.shape
    limit = rows if limit is None else min(limit, rows)
    pivots: list[int] = []
    for c in range(cols):
        r = len(pivots)
        if r == limit:
            break
        nz = np.nonzero(m[r:, c])[0]
        if nz.size == 0:
            continue
        piv = r + int(nz[0])
        m[[r, piv]] = m[[piv, r]]
        m[r] = (m[r] * pow(int(m[r, c]), p - 2, p)) % p
        f = m[:, c].copy()
        f[r] = 0
        m = (m - (f[:, None] * m[r][None, :]) % p) % p
        pivots.append(c)
    return pivots


# ----------------------------------------------------------------------------------------------------------
# the nearest point of a convex hull (the minimum-norm element of a Clarke set)
# ----------------------------------------------------------------------------------------------------------
def hull_qp_float(vertices: Sequence[Sequence], point: Sequence | None = None) -> list[float]:
    """Convex weights ``l`` (floats) minimising ``|sum_i l_i v_i - point|`` (``point`` default: the origin): the
    quadratic program of the nearest point of conv(vertices), solved with cvxpy (Clarabel). A proposal only:
    :func:`nearest_point` confirms it exactly."""
    import cvxpy as cp
    import numpy as np

    V = np.array([[float(x) for x in v] for v in vertices], dtype=float)
    t = np.zeros(V.shape[1]) if point is None else np.array([float(x) for x in point], dtype=float)
    lam = cp.Variable(V.shape[0], nonneg=True)
    prob = cp.Problem(cp.Minimize(cp.sum_squares(V.T @ lam - t)), [cp.sum(lam) == 1])
    try:
        prob.solve(solver=cp.CLARABEL)
    except cp.error.SolverError:  # pragma: no cover - Clarabel ships with cvxpy; SCS is the fallback
        prob.solve(solver=cp.SCS, eps=1e-10)
    if lam.value is None:  # pragma: no cover
        raise ArithmeticError(f"the hull QP was not solved ({prob.status})")
    return [float(x) for x in lam.value]


def nearest_point_kkt(p: Sequence, vertices: Sequence[Sequence], point: Sequence | None = None) -> bool:
    """Exact optimality test: is ``p`` (already a point of conv(vertices)) the point of the hull nearest to
    ``point`` (default: the origin)? The condition is <v - p, p - point> >= 0 for every vertex v (the first-order
    condition of the convex QP, necessary and sufficient)."""
    t = [Fraction(0)] * len(p) if point is None else [Fraction(x) for x in point]
    d = [pi - ti for pi, ti in zip(p, t)]
    return all(dot([Fraction(x) - pi for x, pi in zip(v, p)], d) >= 0 for v in vertices)


def _face_projection(face: Sequence[Sequence[Fraction]], t: Sequence[Fraction]) -> list[Fraction] | None:
    """The point of the affine hull of ``face`` nearest to ``t``, exactly."""
    v0 = face[0]
    D = [[a - b for a, b in zip(v, v0)] for v in face[1:]]
    N = null_space(D, len(v0)) if D else [[Fraction(int(i == j)) for j in range(len(v0))] for i in range(len(v0))]
    return project_affine(N, [dot(r, v0) for r in N], t)


#: hulls with at most this many vertices are solved exactly by Wolfe's algorithm, with no float solver (the
#: conventions matrix's kinks and ties, a 17-way sort tie included); larger ones ask the float QP for their face
EXACT_HULL = 2048


def _affine_min_norm(Q: Sequence[Sequence[Fraction]]) -> list[Fraction] | None:
    """Affine weights ``w`` (sum 1, any sign) of the point of aff(Q) nearest to the origin, exactly; None when Q's
    points are affinely dependent. The optimality system [Q Q^T 1; 1^T 0] [w; mu] = [0; 1]."""
    k = len(Q)
    A = [[dot(Q[i], Q[j]) for j in range(k)] + [Fraction(1)] for i in range(k)] + [[Fraction(1)] * k + [Fraction(0)]]
    sol = solve_unique(A, [Fraction(0)] * k + [Fraction(1)])
    return None if sol is None else sol[:k]


def _wolfe(verts: Sequence[Sequence[Fraction]], t: Sequence[Fraction], max_iter: int = 10_000
           ) -> tuple[list[Fraction], list[Fraction]] | None:
    """Wolfe's minimum-norm-point algorithm (Wolfe 1976) in exact arithmetic: the point of conv(verts) nearest to
    ``t`` and convex weights, or None when it does not finish in ``max_iter`` steps (a degenerate hull)."""
    P = [[a - b for a, b in zip(v, t)] for v in verts]
    j = min(range(len(P)), key=lambda i: dot(P[i], P[i]))
    lam = {j: Fraction(1)}

    def point():
        return [sum((lam[i] * P[i][c] for i in lam), Fraction(0)) for c in range(len(t))]

    x = point()
    for _ in range(max_iter):
        k = min(range(len(P)), key=lambda i: dot(x, P[i]))
        if dot(x, P[k]) >= dot(x, x):  # <x, v - x> >= 0 for every vertex: x is the nearest point
            weights = [lam.get(i, Fraction(0)) for i in range(len(P))]
            return [xc + tc for xc, tc in zip(x, t)], weights
        if k in lam:
            return None
        lam[k] = Fraction(0)
        for _ in range(max_iter):  # minor cycle: the nearest point of the affine hull, or a step towards it
            S = list(lam)
            w = _affine_min_norm([P[i] for i in S])
            if w is None:
                return None
            if all(wi >= 0 for wi in w):
                lam = {i: wi for i, wi in zip(S, w) if wi > 0}
                break
            theta = min(lam[i] / (lam[i] - wi) for i, wi in zip(S, w) if wi < 0)
            lam = {i: (1 - theta) * lam[i] + theta * wi for i, wi in zip(S, w)}
            lam = {i: li for i, li in lam.items() if li > 0}
        else:
            return None
        x = point()
    return None


def nearest_point(vertices: Sequence[Sequence], point: Sequence | None = None
                  ) -> tuple[list[Fraction], list[Fraction]] | None:
    """The point of conv(vertices) nearest to ``point`` (default: the origin, i.e. the minimum-norm element of
    the hull) and convex weights reproducing it, both exact, or None when the float proposal could not be
    confirmed (then nothing is claimed).

    A hull of at most :data:`EXACT_HULL` vertices is solved by Wolfe's algorithm in exact arithmetic (no solver;
    :func:`_wolfe`). Otherwise the QP is solved in floats (:func:`hull_qp_float`, cvxpy) and its active face (the
    vertices with a weight above a tolerance, tried at several tolerances) is then solved exactly: the projection
    onto the face's affine hull (:func:`project_affine`), convex weights for it (:func:`hull_weights`: the
    projection lies in the face), and the optimality condition over every vertex (:func:`nearest_point_kkt`). A
    returned point is exact and checked; the floats only choose the face."""
    verts = [tuple(Fraction(x) for x in v) for v in vertices]
    if not verts:
        return None
    verts = list(dict.fromkeys(verts))
    t = [Fraction(0)] * len(verts[0]) if point is None else [Fraction(x) for x in point]
    if any(len(v) != len(t) for v in verts):
        raise ValueError("nearest_point: the point and every vertex must have the same length")
    closest = min(verts, key=lambda v: dot([a - b for a, b in zip(v, t)], [a - b for a, b in zip(v, t)]))
    if nearest_point_kkt(list(closest), verts, t):  # the nearest vertex (no QP needed: a one-sided rule's answer)
        return list(closest), [Fraction(int(u == closest)) for u in verts]
    if len(verts) <= EXACT_HULL:
        found = _wolfe(verts, t)
        if found is None or not nearest_point_kkt(found[0], verts, t):
            return None
        if not check_weights(found[0], [list(v) for v in verts], dict(enumerate(found[1]))):  # pragma: no cover
            return None
        return found
    lam = hull_qp_float(verts, t)
    tried = set()
    for tol in (1e-7, 1e-5, 1e-9, 1e-3, 1e-11):
        face = tuple(i for i, x in enumerate(lam) if x > tol)
        if not face or face in tried:
            continue
        tried.add(face)
        p = _face_projection([verts[i] for i in face], t)
        if p is None:
            continue
        w = hull_weights(p, [verts[i] for i in face])
        if w is None or not nearest_point_kkt(p, verts, t):
            continue
        weights = [Fraction(0)] * len(verts)
        for i, wi in zip(face, w):
            weights[i] = wi
        if not check_weights(p, [list(v) for v in verts], dict(enumerate(weights))):  # pragma: no cover
            continue
        return p, weights
    return None
