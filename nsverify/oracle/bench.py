"""Workloads for the oracle benchmarks (asv_bench/benchmarks/oracle.py, scripts/bench_oracle.py).

:func:`kink_net`: a one-hidden-layer ReLU network (2 inputs, 4 hidden units, 1 output, MSE loss) on a batch of
k samples, as a function of its first-layer parameters (12 coordinates).  Hidden unit 0 has zero incoming
weights and bias (a dead-at-initialisation unit), so its pre-activation is exactly 0 on all k samples: k
simultaneous kink sites, whose cones share the unit's 3 parameters; the other units are generic.
"""

from __future__ import annotations

import itertools
import time

import torch

from nsverify.oracle.cones import ConeStats, feasible


def kink_net(k: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    grid = torch.stack(torch.meshgrid(torch.arange(-8, 9), torch.arange(-8, 9), indexing="ij"), -1).reshape(
        -1, 2
    )
    X = grid[torch.randperm(len(grid), generator=g)[:k]].double() / 4  # k distinct dyadic inputs
    y = torch.randint(-4, 5, (k, 1), generator=g).double() / 2
    W2 = torch.tensor([[1.0, -0.5, 0.75, 2.0]], dtype=torch.float64)
    W1 = torch.randint(-4, 5, (4, 2), generator=g).double() / 2
    b1 = torch.randint(-4, 5, (4,), generator=g).double() / 2 + 0.0625  # never on a kink: generic units
    W1[0] = 0.0
    b1[0] = 0.0
    w = torch.cat([W1.reshape(-1), b1])

    def fn(wv):
        A = wv[:8].reshape(4, 2)
        b = wv[8:]
        h = torch.relu(X @ A.T + b)
        return ((h @ W2.T - y) ** 2).mean()

    return fn, w


def naive_lps(fn, w) -> tuple[int, float]:
    """Naive enumeration: one exact-certified LP per sign pattern of the k kink sites (2^k LPs)."""
    from nsverify.oracle.interp import run

    r = run(fn, w, mode="ad")
    rows = [s.slopes[0] for s in r.sites if s.slopes and s.slopes[0]]
    stats = ConeStats()
    t0 = time.perf_counter()
    for signs in itertools.product((1, -1), repeat=len(rows)):
        feasible([{i: s * c for i, c in g.items()} for s, g in zip(signs, rows)], stats)
    return stats.lps, time.perf_counter() - t0


def lenet_forward():
    """(fn, x): a LeNet-5-sized forward pass (conv 6@5x5, pool, conv 16@5x5, pool, 120, 84, 10) on one
    28x28 image with padding 2, for the exact interpreter's throughput (no derivative tracking)."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(1, 6, 5, padding=2),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(6, 16, 5),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Flatten(),
        torch.nn.Linear(400, 120),
        torch.nn.ReLU(),
        torch.nn.Linear(120, 84),
        torch.nn.ReLU(),
        torch.nn.Linear(84, 10),
    ).double()
    with torch.no_grad():
        for p in net.parameters():  # dyadic weights keep the rationals short
            p.copy_(torch.round(p * 64) / 64)
    x = torch.round(torch.rand(1, 1, 28, 28, dtype=torch.float64) * 16) / 16
    return net, x


def lenet_macs() -> int:
    return 6 * 28 * 28 * 25 + 16 * 10 * 10 * 150 + 400 * 120 + 120 * 84 + 84 * 10
