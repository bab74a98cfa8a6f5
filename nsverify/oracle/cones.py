"""Is the open cone {d : <a_i, d> > 0 for all i} non-empty?  Decided by a small LP, answered exactly.

The LP (bounded box, strict margin t):  maximise t  s.t.  <a_i, d> >= t,  -1 <= d <= 1,  t <= 1.
* t* > 0: the LP's direction d is rationalised and checked exactly (``<a_i, d> > 0`` in Fractions): a
  *witness*.
* t* = 0: the LP's dual gives y >= 0, sum y = 1, A^T y = 0 (Gordan's alternative, which proves the open cone
  empty); it is re-solved exactly on its support and checked.
* a borderline LP (a margin too small for the float solver, e.g. a cone of width 2^-32): the exact phase-1
  simplex decides it, with a witness or an exact Gordan certificate.
Only rows with interval coefficients can stay uncertain (``None``), never a guess.

:func:`feasible` takes sparse rows and may answer "uncertain" (the piece enumerator then keeps the option in its
outer bracket).  :func:`strict_feasible` takes dense rows and always decides: when the float LP gives no exact
certificate, the exact phase-1 simplex (:func:`exact_strict_feasible`) does.  The cost module's exact Bouligand
sets (:mod:`nsverify.papers.costs.bouligand`) use it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Sequence

from nsverify.rational import nonneg_feasible, nonneg_solution, null_space, rationalize

F = Fraction


@dataclass
class ConeStats:
    lps: int = 0
    witness_reuse: int = 0
    gordan: int = 0
    nogood_reuse: int = 0
    uncertain: int = 0
    exact_lps: int = 0  # borderline LPs decided by the exact simplex
    lp_seconds: float = 0.0
    notes: list = field(default_factory=list)


def holds(rows: list[dict], d: dict | None) -> bool:
    """Exact check that every <a_i, d> > 0 (d sparse dict; None = no direction yet)."""
    if d is None:
        return not rows
    if not all(isinstance(x, (int, Fraction)) for x in d.values()):
        return False  # floats are never accepted in a certificate
    get = d.get
    return all(_positive(sum([c * get(k, 0) for k, c in a.items()])) for a in rows)  # ints stay ints


def _positive(x) -> bool:
    """Exactly positive (int/Fraction), or provably positive (interval entirely above 0)."""
    if type(x) is int:
        return x > 0
    from nsverify.oracle.numbers import Ival, sign

    if isinstance(x, Ival):
        return sign(x) == 1
    if isinstance(x, (int, Fraction)):
        return x > 0
    return False


def primitive(row: dict) -> dict:
    """The positive multiple of a rational row with coprime integer entries (same open half-space)."""
    import math

    if not all(isinstance(c, (int, Fraction)) for c in row.values()):
        from nsverify.oracle.numbers import sign

        if len(row) == 1:  # a single interval coefficient of known sign: the half-space is exactly +-e_k
            (k, c), = row.items()
            if sign(c) in (1, -1):
                return {k: sign(c)}
        return row  # interval coefficients: kept as they are (witnesses are checked rigorously)
    den = 1
    for c in row.values():
        den = den * c.denominator // math.gcd(den, c.denominator) if isinstance(c, Fraction) else den
    ints = {k: int(c * den) for k, c in row.items()}
    g = 0
    for v in ints.values():
        g = math.gcd(g, v)
    return {k: v // g for k, v in ints.items()} if g > 1 else ints


def feasible(rows: list[dict], stats: ConeStats):
    """('open', witness d) | ('empty', Gordan y) | (None, reason).  ``rows`` are sparse dicts of Fractions."""
    import time

    import numpy as np

    if any(not a for a in rows):
        i = next(i for i, a in enumerate(rows) if not a)
        return "empty", [F(1) if j == i else F(0) for j in range(len(rows))]
    exact_rows = all(isinstance(c, (int, Fraction)) for a in rows for c in a.values())
    y = opposite_pair(rows) if exact_rows else None
    if y is not None:
        stats.gordan += 1
        return "empty", y
    cols = sorted({k for a in rows for k in a})
    idx = {k: j for j, k in enumerate(cols)}
    m, n = len(rows), len(cols)
    A = np.zeros((m, n))
    for i, a in enumerate(rows):
        for k, c in a.items():
            A[i, idx[k]] = float(c)
    scale = np.abs(A).max(axis=1)
    if not (np.all(np.isfinite(scale)) and np.all(scale > 0)):  # a row under- or overflows as floats
        if exact_rows:
            return _exact_decision(rows, cols, stats)
        stats.uncertain += 1
        return None, "a cone row is outside the float range (no float LP; interval rows)"
    A = A / scale[:, None]
    # variables (d_1..d_n, t): minimise -t  s.t.  -A d + t <= 0
    c = np.zeros(n + 1)
    c[-1] = -1.0
    A_ub = np.hstack([-A, np.ones((m, 1))])
    t0 = time.perf_counter()
    solved = _solve_margin_lp(c, A_ub, n)
    stats.lp_seconds += time.perf_counter() - t0
    stats.lps += 1
    if solved is None:
        if exact_rows:
            return _exact_decision(rows, cols, stats)
        stats.uncertain += 1
        return None, "the LP solver did not reach an optimum"
    x, y_float, t = solved
    if t > 0:  # even a margin far below the LP's tolerance may rationalise to an exact witness
        for den in (10**4, 10**8, None):
            d = primitive({cols[j]: rationalize(x[j], den) for j in range(n) if x[j] != 0})
            if holds(rows, d):
                return "open", d
    # Gordan certificate from the dual of the margin constraints
    y = _gordan(rows, cols, y_float) if exact_rows else None
    if y is not None:
        stats.gordan += 1
        return "empty", y
    if exact_rows:  # a borderline LP (margin near 0): decide it in exact rational arithmetic
        return _exact_decision(rows, cols, stats)
    stats.uncertain += 1
    return None, f"LP margin {t:.3g} but no exact certificate either way (interval rows)"


def _exact_decision(rows, cols, stats):
    """('open', witness) or ('empty', Gordan y) by the exact phase-1 simplex (never uncertain)."""
    stats.exact_lps += 1
    d = exact_strict_feasible([[a.get(k, F(0)) for k in cols] for a in rows], len(cols))
    if d is not None:
        return "open", primitive({cols[j]: v for j, v in enumerate(d) if v != 0})
    stats.gordan += 1
    return "empty", exact_gordan(rows)


def _highs():
    """The process's one silent highspy.Highs (see :func:`nsverify.oracle.lp.highs`; solves go through
    :func:`nsverify.oracle.lp.run`, within the call's time limit), or None."""
    from nsverify.oracle.lp import highs

    return highs()


def _solve_margin_lp(c, A_ub, n):
    """min c.x s.t. A_ub x <= 0, x[:n] in [-1, 1], x[n] <= 1: (x, y >= 0 duals of A_ub, -optimum) or None.

    highspy directly (about 4x less overhead than scipy's linprog on these tiny LPs), else scipy's HiGHS.
    Only a floating answer: the caller re-verifies everything exactly.
    """
    import numpy as np

    from nsverify.oracle.lp import run

    m = A_ub.shape[0]
    hs = _highs()
    if hs is not None:
        highspy, h = hs
        h.clearModel()
        lp = highspy.HighsLp()
        lp.num_col_, lp.num_row_ = n + 1, m
        lp.col_cost_ = np.asarray(c, dtype=float)
        lp.col_lower_ = np.r_[-np.ones(n), -highspy.kHighsInf]
        lp.col_upper_ = np.r_[np.ones(n), 1.0]
        lp.row_lower_ = np.full(m, -highspy.kHighsInf)
        lp.row_upper_ = np.zeros(m)
        lp.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
        lp.a_matrix_.start_ = np.arange(0, m * (n + 1) + 1, n + 1)
        lp.a_matrix_.index_ = np.tile(np.arange(n + 1), m)
        lp.a_matrix_.value_ = np.ascontiguousarray(A_ub, dtype=float).reshape(-1)
        h.passModel(lp)
        run(h)
        if h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
            return None
        sol = h.getSolution()
        return (np.asarray(sol.col_value), -np.asarray(sol.row_dual), -h.getInfo().objective_function_value)
    from scipy.optimize import linprog

    res = linprog(c, A_ub=A_ub, b_ub=np.zeros(m), bounds=[(-1.0, 1.0)] * n + [(None, 1.0)], method="highs")
    if res.status != 0:
        return None
    return res.x, -np.asarray(res.ineqlin.marginals), -res.fun


def _gordan(rows, cols, y_float):
    """Exact y >= 0, sum y = 1, sum_i y_i a_i = 0, or None.

    First the exact null space of the rows on the LP's support (a basic dual solution has a one-dimensional
    one: no rounding involved); otherwise the rationalised LP answer projected exactly.
    """
    top = max(y_float) if len(y_float) else 0
    support = [i for i, v in enumerate(y_float) if v > 1e-9 * max(top, 1e-300)]
    ns = null_space([[rows[i].get(k, F(0)) for i in support] for k in cols], len(support))
    if len(ns) == 1:
        v = ns[0]
        tot = sum(v)
        if tot != 0:
            v = [x / tot for x in v]
            if all(x >= 0 for x in v):
                y = [F(0)] * len(rows)
                for i, x in zip(support, v):
                    y[i] = x
                if check_gordan(rows, y):
                    return y
    M = [[a.get(k, F(0)) for a in rows] for k in cols] + [[F(1)] * len(rows)]
    b = [F(0)] * len(cols) + [F(1)]
    y = nonneg_solution(M, b, list(y_float))
    if y is None or not check_gordan(rows, y):
        return None
    return y


def exact_gordan(rows: list[dict]) -> list[Fraction]:
    """An exact Gordan certificate y >= 0, sum y = 1, A^T y = 0 for rows whose open cone is empty (decided by
    the exact simplex: such a y exists iff the cone is empty)."""
    cols = sorted({k for a in rows for k in a})
    M = [[a.get(k, F(0)) for a in rows] for k in cols] + [[F(1)] * len(rows)]
    y = nonneg_feasible(M, [F(0)] * len(cols) + [F(1)])
    if y is None or not check_gordan(rows, y):  # pragma: no cover - Gordan's alternative
        raise ArithmeticError("the exact simplex found the open cone empty but no Gordan certificate")
    return y


def opposite_pair(rows: list[dict]):
    """A Gordan certificate without any LP when the last row is a negative multiple of an earlier one."""
    r = rows[-1]
    if not r:
        return None
    k0 = next(iter(r))
    for i, a in enumerate(rows[:-1]):
        if a.keys() != r.keys() or a[k0] == 0:
            continue
        c = r[k0] / a[k0]
        if c < 0 and all(r[k] == c * a[k] for k in r):
            y = [F(0)] * len(rows)
            y[i], y[-1] = -c / (1 - c), 1 / (1 - c)
            return y if check_gordan(rows, y) else None
    return None


def check_gordan(rows: list[dict], y: list) -> bool:
    """Exact re-check that y proves {d : A d > 0} empty."""
    if len(y) != len(rows) or not all(isinstance(v, (int, Fraction)) for v in y):
        return False  # floats are never accepted in a certificate
    if any(v < 0 for v in y) or sum(y) != 1:
        return False
    cols = {k for a in rows for k in a}
    return all(sum((yi * a.get(k, 0) for yi, a in zip(y, rows)), F(0)) == 0 for k in cols)


def strict_feasible(C: Sequence[Sequence], p: int) -> list[Fraction] | None:
    """A d with C d > 0 exactly (dense, length ``p``), or None when no such d exists.

    The float LP of :func:`feasible` proposes a witness or a Gordan certificate, and either is checked exactly;
    when neither certifies, :func:`exact_strict_feasible` decides."""
    if not len(C):
        return [F(0)] * p
    rows = [{j: F(c) for j, c in enumerate(row) if c != 0} for row in C]
    res, cert = feasible(rows, ConeStats())
    if res == "open":
        return [F(cert.get(j, 0)) for j in range(p)]
    if res == "empty":
        return None
    return exact_strict_feasible(C, p)


def exact_strict_feasible(C: Sequence[Sequence], p: int) -> list[Fraction] | None:
    """Decide C d > 0 with the exact phase-1 simplex (Bland's rule, so it terminates): C d >= 1 is feasible
    iff C d > 0 is (scale any strict solution).  Slow, but never uncertain."""
    m = len(C)
    if m == 0:
        return [F(0)] * p
    # variables d+ (p), d- (p), surplus s (m) >= 0 with  C d+ - C d- - s = 1
    rows = [[F(v) for v in row] + [-F(v) for v in row] + [F(-int(i == k)) for k in range(m)]
            for i, row in enumerate(C)]
    x = nonneg_feasible(rows, [F(1)] * m)
    if x is None:
        return None
    d = [x[k] - x[p + k] for k in range(p)]
    if not all(sum(F(c) * v for c, v in zip(row, d)) > 0 for row in C):  # pragma: no cover - exact re-check
        raise ArithmeticError("exact simplex returned a non-strict witness (a bug in nonneg_feasible)")
    return d
