"""Theorem 4 of Boustany, Ch.2 (Sec. 2.5.1; proof in Sec. 2.8.1): p directional derivatives at a kink cost like
a matrix product.

F(x, B, M) = (1/p) sum_i |[U B^T M x]_i| with U a p x p Sylvester-Hadamard matrix (entries +-1, orthogonal
columns of squared norm p).  On the open set S where sign(U B^T M a_i) = u_i (2.12), the directional
derivative at the kink x = 0 is F'(0; a_i) = b_i^T M a_i, so the p directional derivatives along the
columns of A sum to Tr(M A B^T), whose gradient in M is B A^T: computing them is as hard as a matrix product.

Exact pieces (Fractions) serve the property tests; :func:`measure_scaling` times p directional derivatives at
the kink against one gradient at a smooth point and fits the exponent of their ratio in p.
"""

from __future__ import annotations

import math
import random
from fractions import Fraction

from nsverify.errors import NsverifyError
from nsverify.papers.costs.program import Program
from nsverify.rational import solve_unique


def sylvester(p: int) -> list[list[int]]:
    """The p x p Sylvester-Hadamard matrix (p a power of 2)."""
    if p < 1 or p & (p - 1):
        raise NsverifyError(
            f"the Hadamard construction needs p a power of 2 (got p={p}); use 1, 2, 4, 8, ..."
        )
    H = [[1]]
    while len(H) < p:
        H = [r + r for r in H] + [r + [-v for v in r] for r in H]
    return H


def _matvec(A, x):
    return [sum(a * b for a, b in zip(row, x)) for row in A]


def _transpose(A):
    return [list(c) for c in zip(*A)]


def solve(A, b):
    """Exact solution of A y = b over Fractions; raises if A is singular."""
    y = solve_unique(A, b)
    if y is None:
        raise NsverifyError("singular matrix in the Hadamard construction: draw B and M invertible.")
    return y


def F_exact(x, B, M, U) -> Fraction:
    p = len(U)
    z = _matvec(U, _matvec(_transpose(B), _matvec(M, x)))
    return sum(abs(Fraction(v)) for v in z) / p


def directions_in_S(B, M, U, R):
    """Columns a_i with U B^T M a_i = u_i * r_i (r_i > 0 entrywise), so sign(U B^T M a_i) = u_i: (2.12)."""
    p = len(U)
    K = [
        [sum(U[i][k] * sum(B[l][k] * M[l][j] for l in range(p)) for k in range(p)) for j in range(p)]
        for i in range(p)
    ]  # U B^T M
    cols = []
    for i in range(p):
        if any(r <= 0 for r in R[i]):
            raise NsverifyError("the scales r_i must be > 0 so that the sign pattern is u_i.")
        target = [U[k][i] * R[i][k] for k in range(p)]
        cols.append(solve(K, target))
    return cols  # list of columns a_i


def directional_derivative_at_zero(B, M, U, a, t=Fraction(1, 1024)) -> Fraction:
    """One-sided difference quotient (F(t a) - F(0)) / t, exact (F is piecewise linear and positively
    homogeneous in x, so any t > 0 gives the limit)."""
    zero = [Fraction(0)] * len(a)
    return (F_exact([t * v for v in a], B, M, U) - F_exact(zero, B, M, U)) / t


def random_instance(p: int, seed: int):
    """Random integer B, M (invertible with probability 1, re-drawn otherwise) and positive scales R."""
    rng = random.Random(seed)
    U = sylvester(p)
    while True:
        B = [[rng.randint(-3, 3) for _ in range(p)] for _ in range(p)]
        M = [[rng.randint(-3, 3) for _ in range(p)] for _ in range(p)]
        R = [[Fraction(rng.randint(1, 9), rng.randint(1, 4)) for _ in range(p)] for _ in range(p)]
        try:
            A = directions_in_S(B, M, U, R)
            return U, B, M, A, R
        except NsverifyError:
            continue


def program_PF(p: int) -> Program:
    """P_F on {+, x, ReLU, +c, xc}: inputs x (p), B (p*p, row-major), M (p*p); cost 6p^2 + 2p (proof of
    Theorem 4, Sec. 2.8.1)."""
    U = sylvester(p)
    prog = Program(p + 2 * p * p, [])
    X = list(range(p))
    Bi = lambda r, c: p + r * p + c
    Mi = lambda r, c: p + p * p + r * p + c

    def dot(terms):
        acc = None
        for t in terms:
            acc = t if acc is None else prog.add("add", acc, t)
        return acc

    y = [dot([prog.add("mul", Mi(r, c), X[c]) for c in range(p)]) for r in range(p)]  # M x
    z = [dot([prog.add("mul", Bi(c, r), y[c]) for c in range(p)]) for r in range(p)]  # B^T y
    w = [dot([prog.add("mulc", z[c], param=U[r][c]) for c in range(p)]) for r in range(p)]  # U z
    absv = []
    for v in w:
        neg = prog.add("mulc", v, param=-1)
        absv.append(prog.add("add", prog.add("relu", v), prog.add("relu", neg)))
    prog.add("mulc", dot(absv), param=1.0 / p)
    return prog


# ---------------- cost-scaling measurement ----------------


def _fit_exponent(ps, ratios) -> float:
    xs = [math.log(p) for p in ps]
    ys = [math.log(r) for r in ratios]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((a - mx) * (b - my) for a, b in zip(xs, ys)) / sum((a - mx) ** 2 for a in xs)


def measure_scaling(
    ps=(16, 32, 64, 128, 256, 512, 1024), reps: int = 5, dtype=None, seed: int = 0, fit_min_p: int = 64,
    threads: int | None = 1,
) -> dict:
    """Time p directional derivatives at the kink x = 0 (3 matrix-matrix products, the natural program)
    against F and its full gradient at a smooth point (3 matrix-vector products and their backward), side by
    side.

    Returns per-p wall-clock and FLOP ratios (FLOPs from torch.utils.flop_counter) and fitted exponents."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from nsverify.devices import time_side_by_side, torch_threads

    if len(ps) < 2:
        raise NsverifyError(f"fitting an exponent needs at least two sizes p, got {list(ps)}.")
    dtype = dtype or torch.float32
    g = torch.Generator().manual_seed(seed)
    rows = []
    for p in ps:
        U = torch.tensor(sylvester(p), dtype=dtype)
        B = torch.randn(p, p, generator=g, dtype=dtype)
        M = torch.randn(p, p, generator=g, dtype=dtype)
        A = torch.randn(p, p, generator=g, dtype=dtype)
        x = torch.randn(p, 1, generator=g, dtype=dtype)

        def dirs(U=U, B=B, M=M, A=A, p=p):
            return (U @ (B.T @ (M @ A))).abs().sum(0) / p

        def grad(U=U, B=B, M=M, x=x, p=p):
            xx, BB, MM = (t.detach().requires_grad_(True) for t in (x, B, M))
            out = (U @ (BB.T @ (MM @ xx))).abs().sum() / p
            return torch.autograd.grad(out, (xx, BB, MM))

        with torch_threads(threads):
            t = time_side_by_side({"dirs": dirs, "grad": grad}, repeat=reps, min_time=0.05)
        td, tg = t.stat("dirs"), t.stat("grad")
        with FlopCounterMode(display=False) as fc:
            dirs()
        fd = fc.get_total_flops()
        with FlopCounterMode(display=False) as fc:
            grad()
        fg = fc.get_total_flops()
        rows.append(
            dict(
                p=p,
                t_dirs=td,
                t_grad=tg,
                ratio_wall=td / tg,
                flops_dirs=fd,
                flops_grad=fg,
                ratio_flops=fd / fg,
            )
        )
    fit_from = [r for r in rows if r["p"] >= fit_min_p]
    if len(fit_from) < 2:
        fit_from = rows
    return dict(
        rows=rows,
        exponent_wall=_fit_exponent([r["p"] for r in fit_from], [r["ratio_wall"] for r in fit_from]),
        exponent_flops=_fit_exponent([r["p"] for r in fit_from], [r["ratio_flops"] for r in fit_from]),
        fit_range=[fit_from[0]["p"], fit_from[-1]["p"]],
        dtype=str(dtype).removeprefix("torch."),
    )
