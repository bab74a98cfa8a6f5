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


def _clusters(clusters) -> list[tuple[int, int]]:
    out = []
    for c in clusters:
        try:
            k, n = c
        except (TypeError, ValueError):
            raise ValueError(f"cluster {c!r}: pass (k, n) per independent unit (k of its n cases)") from None
        for name, v in (("k", k), ("n", n)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValueError(f"cluster {c!r}: {name} must be an integer >= 0")
        if k > n:
            raise ValueError(f"cluster {c!r}: k exceeds n")
        if n:
            out.append((k, n))
    return out


def design_effect(clusters) -> float:
    """Kish's design effect 1 + (n0 - 1) rho of a share over clusters ``[(k_i, n_i)]`` (the cases of one cluster
    share it: the (draw, batch) pairs of one parameter draw), rho the ANOVA estimate of the intra-cluster
    correlation and n0 the ANOVA mean cluster size. Clipped to [1, n0]: 1 when the cases look independent, n0
    (every cluster counts as one case) when the correlation is total -- and n0 too when every case agrees (share
    0 or 1: rho cannot be estimated, so the cautious value is taken)."""
    cs = _clusters(clusters)
    m = len(cs)
    n = sum(c[1] for c in cs)
    if m < 2 or n == m:
        return 1.0
    n0 = (n - sum(c[1] ** 2 for c in cs) / n) / (m - 1)
    p = sum(c[0] for c in cs) / n
    if p in (0.0, 1.0):
        return max(1.0, n0)
    msb = sum(ni * (ki / ni - p) ** 2 for ki, ni in cs) / (m - 1)
    msw = sum(ki * (1 - ki / ni) for ki, ni in cs) / (n - m)
    den = msb + (n0 - 1) * msw
    rho = (msb - msw) / den if den > 0 else 1.0
    return min(max(1.0, 1.0 + (n0 - 1) * rho), max(1.0, n0))


def effective_counts(clusters, deff: float | None = None, alpha: float = 0.05) -> tuple[float, float]:
    """(k_eff, n_eff): the Korn-Graubard (1998) effective sample of a clustered share, n / deff shrunk by
    (z / t_{m-1})^2 for m clusters (the degrees of freedom are the clusters, not the cases), k_eff = share x n_eff.
    The Clopper-Pearson interval of (k_eff, n_eff) is the cluster-robust interval of the share."""
    from scipy.stats import norm, t

    cs = _clusters(clusters)
    m, n = len(cs), sum(c[1] for c in cs)
    if n == 0:
        return 0.0, 0.0
    d = design_effect(cs) if deff is None else deff
    shrink = (norm.ppf(1 - alpha / 2) / t.ppf(1 - alpha / 2, m - 1)) ** 2 if m >= 2 else 1.0
    n_eff = max(min(n / d * shrink, n), min(1.0, n))
    return sum(c[0] for c in cs) / n * n_eff, n_eff


def clopper_pearson_real(k: float, n: float, alpha: float = 0.05) -> tuple[float, float]:
    """:func:`clopper_pearson` for a real-valued (effective) count k of n (beta quantiles take real parameters)."""
    from scipy.stats import beta

    if n <= 0:
        return 0.0, 1.0
    lo = 0.0 if k <= 0 else float(beta.ppf(alpha / 2, k, n - k + 1))
    hi = 1.0 if k >= n else float(beta.ppf(1 - alpha / 2, k + 1, n - k))
    return lo, hi
