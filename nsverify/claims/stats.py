"""Confidence intervals used by every paper reproduction (one place for the statistics).

* :func:`wilson` -- the Wilson score interval of a binomial share (Park et al.'s Table 2 tie shares);
* :func:`clopper_pearson` -- the exact two-sided binomial interval;
* :func:`hoeffding_margin`, :func:`mcdiarmid_margin`, :func:`share_intervals` -- the two zone shares of
  Boustany, Ch.3 (Appendix "Details on Monte Carlo sampling", eqs 3.17-3.18):

  - share of draws with an impacted batch (eq 3.17): draws are iid, so Hoeffding (margin
    sqrt(ln(2/a)/(2M))) and the exact Clopper-Pearson interval apply;
  - share of impacted (draw, batch) pairs (eq 3.18): pairs of one draw share the parameters, so the thesis
    uses McDiarmid (margin sqrt((1/M + 1/R) ln(2/a) / 2)); Hoeffding with n = M R and Clopper-Pearson are
    given too but assume independent pairs (valid only when the batches are independent of each other and of
    the draw's effect, which is optimistic);
* :func:`mean_ci` -- mean and Student-t interval over seeds (optimizer runs, dead-unit shares).
"""
from __future__ import annotations

import math
from typing import Sequence


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float, float]:
    """(share, lo, hi): the Wilson score interval of k successes out of n (z = 1.96: 95%); (0, 0, 1) for n = 0."""
    if n == 0:
        return 0.0, 0.0, 1.0
    p = k / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return p, max(0.0, c - h), min(1.0, c + h)


def hoeffding_margin(n: int, alpha: float = 0.05) -> float:
    return math.sqrt(math.log(2 / alpha) / (2 * n)) if n else 1.0


def mcdiarmid_margin(m: int, r: int, alpha: float = 0.05) -> float:
    return math.sqrt(0.5 * (1 / m + 1 / r) * math.log(2 / alpha)) if m and r else 1.0


def _binom_cdf(k: int, n: int, p: float) -> float:
    """P[X <= k] for X ~ Bin(n, p), summed in log space."""
    if p <= 0:
        return 1.0
    if p >= 1:
        return 1.0 if k >= n else 0.0
    lp, lq = math.log(p), math.log1p(-p)
    terms = [math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * lp + (n - i) * lq
             for i in range(k + 1)]
    top = max(terms)
    return min(1.0, math.exp(top) * sum(math.exp(t - top) for t in terms))


def clopper_pearson(k: int, n: int, alpha: float = 0.05) -> tuple[float, float]:
    """Exact two-sided (1 - alpha) binomial interval for k successes out of n."""
    if n == 0:
        return 0.0, 1.0
    try:
        from scipy.stats import beta

        lo = 0.0 if k == 0 else float(beta.ppf(alpha / 2, k, n - k + 1))
        hi = 1.0 if k == n else float(beta.ppf(1 - alpha / 2, k + 1, n - k))
        return lo, hi
    except ImportError:  # pragma: no cover - the GPU box may lack scipy
        pass

    def solve(f, target):
        a, b = 0.0, 1.0
        for _ in range(60):
            mid = (a + b) / 2
            a, b = (mid, b) if f(mid) > target else (a, mid)
        return (a + b) / 2

    lo = 0.0 if k == 0 else solve(lambda p: _binom_cdf(k - 1, n, p), 1 - alpha / 2)
    hi = 1.0 if k == n else solve(lambda p: _binom_cdf(k, n, p), alpha / 2)
    return lo, hi


def share_intervals(k: int, n: int, alpha: float = 0.05, m: int | None = None, r: int | None = None) -> dict:
    """value, and lo/hi for Hoeffding, Clopper-Pearson and (when m, r are given) McDiarmid."""
    p = k / n if n else float("nan")
    out = {"count": k, "n": n, "value": p}
    h = hoeffding_margin(n, alpha)
    out["hoeffding"] = [max(0.0, p - h), min(1.0, p + h)]
    out["clopper_pearson"] = list(clopper_pearson(k, n, alpha))
    if m is not None and r is not None:
        md = mcdiarmid_margin(m, r, alpha)
        out["mcdiarmid"] = [max(0.0, p - md), min(1.0, p + md)]
    return out


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
