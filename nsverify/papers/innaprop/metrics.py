"""Convergence metrics and seed statistics.

- ``gap``: f(theta_k) - f* along a run;
- ``steps_to_target``: first step with gap <= target (None if never);
- ``steps_to_match``: Table 4.4's metric (001 L1922-1932): the first step at which run A reaches run B's best
  value, and the speed-up (step of B's best) / (that step);
- ``mean_ci``: mean and a two-sided 95% Student-t interval over seeds (lo = hi = mean for one seed).
"""
from __future__ import annotations

import math
from typing import Sequence


def steps_to_target(values: Sequence[float], target: float, steps: Sequence[int] | None = None) -> int | None:
    steps = list(range(len(values))) if steps is None else list(steps)
    for k, v in zip(steps, values):
        if v <= target:
            return k
    return None


def steps_to_match(values_a: Sequence[float], values_b: Sequence[float],
                   steps: Sequence[int] | None = None) -> tuple[int | None, float | None]:
    """(first step where A <= min(B), speed-up = step of B's best / that step); (None, None) if never."""
    steps = list(range(len(values_b))) if steps is None else list(steps)
    best_b = min(values_b)
    k_best_b = steps[list(values_b).index(best_b)]
    k = steps_to_target(values_a, best_b, steps)
    if k is None:
        return None, None
    return k, (k_best_b / k if k > 0 else math.inf)


def mean_ci(xs: Sequence[float], level: float = 0.95) -> dict:
    """Mean, 95% t-interval, spread (max - min) and n over seeds; non-finite values are counted only."""
    vals = [float(x) for x in xs if x is not None and math.isfinite(float(x))]
    n = len(vals)
    out = {"n": n, "n_failed": len(xs) - n}
    if n == 0:
        return {**out, "mean": None, "lo": None, "hi": None, "spread": None}
    mean = sum(vals) / n
    if n == 1:
        return {**out, "mean": mean, "lo": mean, "hi": mean, "spread": 0.0}
    from scipy.stats import t

    sd = math.sqrt(sum((v - mean) ** 2 for v in vals) / (n - 1))
    half = t.ppf(0.5 + level / 2, n - 1) * sd / math.sqrt(n)
    return {**out, "mean": mean, "lo": mean - half, "hi": mean + half, "spread": max(vals) - min(vals)}
