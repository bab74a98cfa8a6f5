"""Problems for the convergence harness: nonsmooth convex problems with f* from cvxpy, and small networks.

Each problem is built from a seed (data and initial point) and exposes ``loss(params)`` (full batch, the
objective f), ``init(dtype)`` (fresh parameter tensors), ``fstar`` (known optimum, or None) and optional
``batches(seed)`` / ``accuracy(params)`` for the networks. cvxpy and scikit-learn are imported lazily.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch

from nsverify.errors import NsverifyError


@dataclass
class Problem:
    name: str
    loss: Callable[[list[torch.Tensor]], torch.Tensor]
    init: Callable[[torch.dtype], list[torch.Tensor]]
    fstar: float | None
    kind: str = "convex"
    batches: Callable[[int], object] | None = None
    accuracy: Callable[[list[torch.Tensor]], float] | None = None
    meta: dict = field(default_factory=dict)


def _solve(build) -> float:
    try:
        import cvxpy as cp
    except ImportError as exc:  # pragma: no cover - environment dependent
        raise NsverifyError("computing f* needs cvxpy: pip install cvxpy (or skip the convex problems).") \
            from exc
    objective, constraints = build(cp)
    prob = cp.Problem(cp.Minimize(objective), constraints)
    for solver in ("CLARABEL", "ECOS", "SCS"):
        if solver in cp.installed_solvers():
            prob.solve(solver=solver)
            break
    else:  # pragma: no cover
        prob.solve()
    if prob.status not in ("optimal", "optimal_inaccurate"):
        raise NsverifyError(f"cvxpy could not solve the reference problem (status {prob.status}).")
    return float(prob.value)


def _rng_init(seed: int, shapes, scale=1.0):
    g = np.random.default_rng(seed + 10_000)
    arrays = [scale * g.standard_normal(s) for s in shapes]
    return lambda dtype: [torch.tensor(a, dtype=dtype, requires_grad=True) for a in arrays]


def lasso(seed: int, n: int = 80, d: int = 40, lam: float = 0.1) -> Problem:
    """f(x) = ||Ax - b||^2/(2n) + lam ||x||_1 with a sparse ground truth."""
    r = np.random.default_rng(seed)
    A = r.standard_normal((n, d))
    x_true = np.where(r.random(d) < 0.2, r.standard_normal(d), 0.0)
    b = A @ x_true + 0.1 * r.standard_normal(n)
    fstar = _solve(lambda cp: ((cp.sum_squares(A @ (x := cp.Variable(d)) - b) / (2 * n) + lam * cp.norm1(x)),
                               []))
    At, bt = torch.tensor(A), torch.tensor(b)

    def loss(ps):
        (x,) = ps
        return ((At.to(x.dtype) @ x - bt.to(x.dtype)) ** 2).sum() / (2 * n) + lam * x.abs().sum()

    return Problem("lasso", loss, _rng_init(seed, [(d,)]), fstar)


def hinge_svm(seed: int, n: int = 120, d: int = 10, lam: float = 0.01) -> Problem:
    """f(w, c) = mean(max(0, 1 - y (Xw + c))) + lam/2 ||w||^2 on two overlapping Gaussian classes."""
    r = np.random.default_rng(seed)
    y = np.where(r.random(n) < 0.5, -1.0, 1.0)
    X = r.standard_normal((n, d)) + 0.8 * y[:, None] * np.ones(d) / np.sqrt(d)

    def build(cp):
        w, c = cp.Variable(d), cp.Variable()
        return cp.sum(cp.pos(1 - cp.multiply(y, X @ w + c))) / n + lam / 2 * cp.sum_squares(w), []

    fstar = _solve(build)
    Xt, yt = torch.tensor(X), torch.tensor(y)

    def loss(ps):
        w, c = ps
        return torch.relu(1 - yt.to(w.dtype) * (Xt.to(w.dtype) @ w + c)).mean() + lam / 2 * (w * w).sum()

    return Problem("hinge_svm", loss, _rng_init(seed, [(d,), ()]), fstar)


def least_absolute_deviations(seed: int, n: int = 100, d: int = 20) -> Problem:
    """f(x) = mean |Ax - b| with heavy-tailed noise."""
    r = np.random.default_rng(seed)
    A = r.standard_normal((n, d))
    b = A @ r.standard_normal(d) + r.standard_t(1.5, n)
    fstar = _solve(lambda cp: (cp.norm1(A @ cp.Variable(d) - b) / n, []))
    At, bt = torch.tensor(A), torch.tensor(b)

    def loss(ps):
        (x,) = ps
        return (At.to(x.dtype) @ x - bt.to(x.dtype)).abs().mean()

    return Problem("lad", loss, _rng_init(seed, [(d,)]), fstar)


def max_affine(seed: int, m: int = 30, d: int = 10) -> Problem:
    """f(x) = max_i (a_i . x + b_i) over rows +-a_i (bounded below), a polyhedral nonsmooth function."""
    r = np.random.default_rng(seed)
    A0 = r.standard_normal((m // 2, d))
    A = np.vstack([A0, -A0 + 0.3 * r.standard_normal((m // 2, d))])
    b = r.standard_normal(A.shape[0])
    fstar = _solve(lambda cp: (cp.max(A @ (x := cp.Variable(d)) + b), [cp.norm(x, "inf") <= 1e3]))
    At, bt = torch.tensor(A), torch.tensor(b)

    def loss(ps):
        (x,) = ps
        return (At.to(x.dtype) @ x + bt.to(x.dtype)).max()

    return Problem("max_affine", loss, _rng_init(seed, [(d,)]), fstar)


def teacher_student(seed: int, n: int = 256, d: int = 8, teacher_width: int = 4, width: int = 16) -> Problem:
    """Regress a random one-hidden-layer ReLU teacher with a wider ReLU student: f* = 0 (realizable)."""
    r = np.random.default_rng(seed)
    X = r.standard_normal((n, d))
    W1, b1 = r.standard_normal((teacher_width, d)), 0.5 * r.standard_normal(teacher_width)
    w2 = r.standard_normal(teacher_width)
    y = np.maximum(X @ W1.T + b1, 0) @ w2
    Xt, yt = torch.tensor(X), torch.tensor(y)
    init = _rng_init(seed, [(width, d), (width,), (width,), ()], scale=0.5)

    def loss(ps):
        W, b, v, c = ps
        out = torch.relu(Xt.to(W.dtype) @ W.T + b) @ v + c
        return 0.5 * ((out - yt.to(W.dtype)) ** 2).mean()

    return Problem("teacher_student", loss, init, 0.0, kind="network")


def digits_mlp(seed: int, hidden: int = 32, batch: int = 64) -> Problem:
    """Cross-entropy of a 64-hidden-10 ReLU MLP on sklearn's digits (train/test split by seed); f* unknown."""
    from sklearn.model_selection import train_test_split

    from nsverify.workloads.datasets import digits64

    X, y = digits64(torch.float64)
    Xtr, Xte, ytr, yte = train_test_split(X.numpy(), y.numpy(), test_size=0.3, random_state=seed)
    Xtr_t, ytr_t, Xte_t, yte_t = (torch.tensor(Xtr), torch.tensor(ytr), torch.tensor(Xte), torch.tensor(yte))
    g = np.random.default_rng(seed + 10_000)
    arrays = [g.uniform(-1, 1, (hidden, 64)) / 8, np.zeros(hidden),
              g.uniform(-1, 1, (10, hidden)) / np.sqrt(hidden), np.zeros(10)]

    def init(dtype):
        return [torch.tensor(a, dtype=dtype, requires_grad=True) for a in arrays]

    def forward(ps, X):
        W1, b1, W2, b2 = ps
        return torch.relu(X.to(W1.dtype) @ W1.T + b1) @ W2.T + b2

    def loss(ps, X=Xtr_t, y=ytr_t):
        out = forward(ps, X)
        return torch.nn.functional.cross_entropy(out.float() if out.dtype == torch.bfloat16 else out, y)

    def batches(step_seed):
        gen = torch.Generator().manual_seed(step_seed)
        while True:
            perm = torch.randperm(len(ytr_t), generator=gen)
            for i in range(0, len(perm) - batch + 1, batch):
                idx = perm[i:i + batch]
                yield lambda ps, idx=idx: loss(ps, Xtr_t[idx], ytr_t[idx])

    def accuracy(ps):
        with torch.no_grad():
            return float((forward(ps, Xte_t).argmax(1) == yte_t).double().mean())

    return Problem("digits_mlp", loss, init, None, kind="network", batches=batches, accuracy=accuracy)


PROBLEMS: dict[str, Callable[..., Problem]] = {
    "lasso": lasso, "hinge_svm": hinge_svm, "lad": least_absolute_deviations, "max_affine": max_affine,
    "teacher_student": teacher_student, "digits_mlp": digits_mlp,
}


def make_problem(name: str, seed: int) -> Problem:
    if name not in PROBLEMS:
        raise NsverifyError(f"unknown convergence problem {name!r}; choose from {', '.join(PROBLEMS)}.")
    return PROBLEMS[name](seed)
