"""Exact rational feasibility of a homogeneous strict system {d : c . d > 0 for all rows c} (phase-1 simplex
over fractions.Fraction with Bland's rule, so it terminates and is exact).

The system is feasible iff C d >= 1 is (scale any strict solution).  Used by :mod:`.bouligand` to decide which
activation patterns of a ReLU network are realised by open regions.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Sequence

from nsverify.rational import nonneg_feasible, solve_any


def strict_feasible(C: Sequence[Sequence[Fraction]], p: int) -> list[Fraction] | None:
    """Return d with C d > 0 (exactly), or None if no such d exists.  ``p`` is the dimension of d.

    A floating-point LP (HiGHS) proposes a witness d or a Gordan certificate y >= 0, y != 0, C^T y = 0; either
    is re-derived and checked in exact arithmetic.  When neither certifies, the exact simplex decides."""
    cert = _float_certificate(C, p)
    if cert is not None:
        return cert[1] if cert[0] else None
    return exact_strict_feasible(C, p)


def _float_certificate(C, p):
    try:
        import numpy as np
        from scipy.optimize import linprog
    except ImportError:  # pragma: no cover - scipy is a dependency
        return None
    A = np.array([[float(v) for v in row] for row in C])
    m = len(C)
    # maximise t subject to C d >= t, -1 <= d <= 1, t <= 1
    res = linprog(
        np.r_[np.zeros(p), -1.0],
        A_ub=np.c_[-A, np.ones(m)],
        b_ub=np.zeros(m),
        bounds=[(-1, 1)] * p + [(None, 1)],
        method="highs",
    )
    if res.status == 0 and -res.fun > 1e-7:
        d = [Fraction(v).limit_denominator(10**6) for v in res.x[:p]]
        if all(sum(Fraction(c) * v for c, v in zip(row, d)) > 0 for row in C):
            return True, d
        return None
    # Gordan: y >= 0, sum y = 1, C^T y = 0
    res = linprog(
        np.zeros(m),
        A_eq=np.r_[A.T, np.ones((1, m))],
        b_eq=np.r_[np.zeros(p), 1.0],
        bounds=[(0, None)] * m,
        method="highs",
    )
    if res.status != 0:
        return None
    support = [i for i in range(m) if res.x[i] > 1e-9]
    y = solve_any(
        [[Fraction(C[i][j]) for i in support] for j in range(p)] + [[Fraction(1)] * len(support)],
        [Fraction(0)] * p + [Fraction(1)],
    )
    if y is None or any(v < 0 for v in y):
        return None
    if any(sum(Fraction(C[i][j]) * v for i, v in zip(support, y)) != 0 for j in range(p)) or sum(y) != 1:
        return None
    return False, None


def exact_strict_feasible(C: Sequence[Sequence[Fraction]], p: int) -> list[Fraction] | None:
    """The exact phase-1 simplex (Bland's rule) deciding C d >= 1."""
    m = len(C)
    if m == 0:
        return [Fraction(0)] * p
    # variables d+ (p), d- (p), surplus s (m) >= 0 with  C d+ - C d- - s = 1
    rows = [[Fraction(v) for v in row] + [-Fraction(v) for v in row] + [Fraction(-int(i == k)) for k in range(m)]
            for i, row in enumerate(C)]
    x = nonneg_feasible(rows, [Fraction(1)] * m)
    if x is None:
        return None
    d = [x[k] - x[p + k] for k in range(p)]
    if not all(sum(c * v for c, v in zip(row, d)) > 0 for row in C):  # exact re-check of the witness
        raise ArithmeticError("exact simplex returned a non-strict witness (bug)")
    return d
