"""Robust side-by-side timing on a shared machine: interleaved repeats, minimum over repeats, a minimum total
time per function, and (on CPU) one intra-op thread so that other load does not stall a thread pool."""
from __future__ import annotations

import time
from typing import Callable, Sequence

from nsverify.devices import torch_threads

cpu_threads = torch_threads  # one implementation, in nsverify.devices


def interleaved_min(fns: Sequence[Callable[[], object]], reps: int = 5, min_total: float = 0.05,
                    max_reps: int = 200, warmup: int = 1,
                    sync: Callable[[], None] | None = None) -> list[float]:
    """Run the functions round-robin (warmup, then at least ``reps`` rounds and until each has accumulated
    ``min_total`` seconds, at most ``max_reps`` rounds); return each one's minimum time."""
    sync = sync or (lambda: None)
    for _ in range(warmup):
        for fn in fns:
            fn()
    best = [float("inf")] * len(fns)
    total = [0.0] * len(fns)
    rounds = 0
    while rounds < max_reps and (rounds < reps or min(total) < min_total):
        for i, fn in enumerate(fns):
            sync()
            t0 = time.perf_counter()
            fn()
            sync()
            dt = time.perf_counter() - t0
            best[i] = min(best[i], dt)
            total[i] += dt
        rounds += 1
    return best
