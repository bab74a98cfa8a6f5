"""Small floating-point LPs through highspy directly (scipy's ``linprog`` only when highspy is missing).

``scipy.optimize`` costs about a second to import on the 2-core machine, more than the rest of a first oracle
call; highspy (the solver scipy's ``method="highs"`` wraps) is already loaded for the cone LPs.  Only a floating
answer: every caller re-checks it exactly (convex weights re-solved in Fractions, separating directions
rationalised and verified).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

_SOLVER: list = []


@dataclass
class LPResult:
    """The fields of scipy's OptimizeResult that the oracle reads."""

    status: int  # 0: optimal; anything else: no answer
    x: np.ndarray | None = None
    fun: float | None = None


def highs():
    """``(highspy, a silent highspy.Highs instance)`` shared by every LP of the process, or None without
    highspy.  The constructor's banner (printed on the C-level stdout) is swallowed."""
    if not _SOLVER:
        try:
            import highspy

            fd = os.dup(1)  # the constructor prints a banner on the C-level stdout
            try:
                with open(os.devnull, "w") as null:
                    os.dup2(null.fileno(), 1)
                    h = highspy.Highs()
            finally:
                os.dup2(fd, 1)
                os.close(fd)
            h.setOptionValue("output_flag", False)
            _SOLVER.append((highspy, h))
        except Exception:  # pragma: no cover - scipy fallback
            _SOLVER.append(None)
    return _SOLVER[0]


def run(h) -> None:
    """``h.run()`` within the oracle call's hard time limit: HiGHS gets the seconds left as its own
    ``time_limit`` (one solve is a single C call no Python poll can interrupt), and a solve stopped by it ends the
    call like every other poll (:class:`~nsverify.oracle.context.TimeLimitExceeded`)."""
    from nsverify.oracle.context import poll_deadline, remaining

    poll_deadline()
    left = remaining()
    h.setOptionValue("time_limit", left)
    try:
        h.run()
    finally:
        h.setOptionValue("time_limit", float("inf"))
    poll_deadline()


def linprog(c, A_ub=None, b_ub=None, A_eq=None, b_eq=None, bounds=None, method: str = "highs") -> LPResult:
    """min c.x  s.t.  A_ub x <= b_ub,  A_eq x = b_eq,  bounds[i] = (lo, hi) (None: unbounded); scipy's signature
    (``method`` is accepted for it and ignored: this is HiGHS)."""
    c = np.asarray(c, dtype=float)
    n = c.size
    rows = []
    if A_ub is not None and len(A_ub):
        A = np.asarray(A_ub, dtype=float).reshape(-1, n)
        rows += [(A[i], -np.inf, float(b)) for i, b in enumerate(np.asarray(b_ub, dtype=float))]
    if A_eq is not None and len(A_eq):
        A = np.asarray(A_eq, dtype=float).reshape(-1, n)
        rows += [(A[i], float(b), float(b)) for i, b in enumerate(np.asarray(b_eq, dtype=float))]
    bounds = bounds if bounds is not None else [(0, None)] * n
    hs = highs()
    if hs is None:  # pragma: no cover - only without highspy
        from scipy.optimize import linprog as scipy_linprog

        res = scipy_linprog(c, A_ub=A_ub, b_ub=b_ub, A_eq=A_eq, b_eq=b_eq, bounds=bounds, method="highs")
        return LPResult(res.status, res.x, res.fun)
    highspy, h = hs
    inf = highspy.kHighsInf
    h.clearModel()
    lp = highspy.HighsLp()
    lp.num_col_, lp.num_row_ = n, len(rows)
    lp.col_cost_ = c
    lp.col_lower_ = np.array([-inf if lo is None else float(lo) for lo, _ in bounds])
    lp.col_upper_ = np.array([inf if hi is None else float(hi) for _, hi in bounds])
    lp.row_lower_ = np.array([-inf if lo == -np.inf else lo for _, lo, _ in rows], dtype=float)
    lp.row_upper_ = np.array([hi for _, _, hi in rows], dtype=float)
    if not rows:
        lp.a_matrix_.start_ = np.zeros(n + 1, dtype=np.int32)
    else:
        M = np.vstack([r for r, _, _ in rows])
        lp.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
        lp.a_matrix_.start_ = np.arange(0, M.size + 1, n)
        lp.a_matrix_.index_ = np.tile(np.arange(n), len(rows))
        lp.a_matrix_.value_ = np.ascontiguousarray(M).reshape(-1)
    h.passModel(lp)
    run(h)
    if h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
        return LPResult(2)
    return LPResult(0, np.asarray(h.getSolution().col_value), h.getInfo().objective_function_value)
