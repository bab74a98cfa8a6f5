"""Convergence metrics (seed statistics: :func:`nsverify.claims.stats.mean_ci`).

- ``gap``: f(theta_k) - f* along a run;
- ``steps_to_target``: first step with gap <= target (None if never);
- ``steps_to_match``: the metric of Boustany, Ch.4, Table 4.4 ("steps to match AdamW"): the first step at
  which run A reaches run B's best value, and the speed-up (step of B's best) / (that step).
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
