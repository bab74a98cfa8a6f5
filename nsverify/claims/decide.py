"""Decision rules for paper claims: every verdict of the report is one of these small functions.

Each rule takes the measurement (counts, samples or a deterministic outcome) and returns a :class:`Decision`:
``held`` (True: reproduced, False: not reproduced, None: undecided), the sample size ``n`` the decision rests on,
the **power** -- the probability that this test, at this ``n``, detects the effect the paper reports (the
alternative named by each rule) -- the smallest ``n_required`` with power >= :data:`POWER`, the estimate with its
interval, and a one-line ``reason``.

The rules share three principles:

* a claim whose premise was never exercised (0 kink touches, 0 premise cases, a run that did not learn) is
  undecided (None), never True;
* every rule counts its **independent unit** (``Decision.unit``): the (draw, batch) pairs of one parameter
  draw share the draw's parameters, so the pair rules take ``clusters`` (``[(k_i, n_i)]`` per draw) and count
  draws -- a universal or existence claim by draws with a case, a share by its Korn-Graubard effective sample
  (Korn & Graubard 1998: n / design effect, with the draws' degrees of freedom); :data:`MIN_N`, the power and
  ``n_required`` count units, never pairs;
* a **significant** result decides at any power (``Decision.significant``): an interval that excludes the
  paper's value refutes it, a rejected null confirms it, just as a counterexample refutes a universal claim
  (on >= :data:`MIN_N` units). Power matters only for a verdict resting on the *absence* of a significant
  result (a share that holds the paper's value, no violation seen): below :data:`POWER` (0.8) such a claim is
  undecided, and every rule reports the ``n_required`` (in units) that would decide it;
* a counterexample decides at any ``n``: one refutes "never" (a universal claim).  A *confirming* witness -- an
  occurrence for "occurs", both outcomes for "between" -- shows only that the event happens, while the paper's
  claim quotes a rate or a share: it decides only with n >= :data:`MIN_N` and the power to see the claimed rate
  (otherwise undecided, the witnesses named in the reason).

Significance level :data:`ALPHA` = 0.05 (one-sided where the claim has a direction); intervals are 95%.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Callable, Sequence

from nsverify.claims.stats import clopper_pearson
from nsverify.errors import NsverifyError

#: significance level of every test (one-sided where the claim has a direction)
ALPHA = 0.05
#: the least power a test needs before its verdict counts
POWER = 0.8
#: the least sample size of any statistical decision that does not rest on a witness (ours: below it a spread,
#: a share or a rank test says too little, whatever a power formula computes from it)
MIN_N = 5
#: the violation rate a "never" claim must be able to detect with power POWER when nothing else is given:
#: 5% (ours). With it a universal claim needs at least 32 premise cases.
P_ALT = 0.05
#: the least Kendall tau_b of a trend rule's effect when the paper gives no number (ours: a moderate
#: rank correlation)
TREND_EFFECT = 0.3
#: Monte Carlo size and seed of simulated power (deterministic)
SIM_RUNS, SIM_SEED = 400, 20240613
#: the names of the rules below (``Decision.rule``; a :class:`nsverify.claims.record.ClaimSpec` declares one)
RULES = ("exact", "illustration", "never", "occurs", "occurs_in_time", "never_in_time", "between", "share_above",
         "share_is",
         "trend", "ratio_vs", "greater", "no_increase", "diff_in_diff", "robust", "all_of", "not_run")


class DecisionInputError(NsverifyError, ValueError):
    """A decision rule got impossible counts or samples (negative, k > n, NaN, a probability outside [0, 1])."""


@dataclass(frozen=True)
class Decision:
    """The outcome of a decision rule (see the module docstring)."""

    rule: str
    held: bool | None
    n: int
    power: float | None
    n_required: int | None
    value: float | None = None
    lo: float | None = None
    hi: float | None = None
    interval: str = ""
    reason: str = ""
    #: True when the verdict rests on a witness (a counterexample, an occurrence), which decides at any n
    witness: bool = False
    #: what ``n`` (and ``n_required``) count: the independent unit of the test (a parameter draw, a seed, a
    #: case); the cases of one unit (the (draw, batch) pairs of one draw) are never counted as independent
    unit: str = ""
    #: True when the verdict rests on a significant test (the paper's value or the null excluded at ALPHA, on
    #: n >= MIN_N units): it decides whatever the power, which matters only for a verdict resting on the
    #: *absence* of a significant result
    significant: bool = False

    def to_json(self) -> dict:
        return asdict(self)


# ---------------------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------------------
def _count(k, n) -> tuple[int, int]:
    for name, v in (("k", k), ("n", n)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise DecisionInputError(f"{name}={v!r}: counts are integers >= 0")
    if k > n:
        raise DecisionInputError(f"k={k} exceeds n={n}: a count cannot exceed its sample size")
    return k, n


def _prob(p, name="p") -> float:
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not (0.0 <= float(p) <= 1.0):
        raise DecisionInputError(f"{name}={p!r}: a probability lies in [0, 1]")
    return float(p)


def _samples(xs, name="samples") -> list[float]:
    vals = [float(x) for x in xs]
    if any(not math.isfinite(v) for v in vals):
        raise DecisionInputError(f"{name} contain NaN or infinity: pass finite values (drop failed runs first)")
    return vals


def n_required(power_of_n: Callable[[int], float], n_max: int = 10**7) -> int | None:
    """Smallest n >= 1 with ``power_of_n(n) >= POWER`` for a power nondecreasing in n (None: not below n_max)."""
    if power_of_n(n_max) < POWER:
        return None
    lo, hi = 0, 1
    while power_of_n(hi) < POWER:
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if power_of_n(mid) < POWER else (lo, mid)
    return hi


def undecided(d: Decision, reason: str) -> Decision:
    """``d`` made undecided with ``reason`` (a premise the rule cannot see failed), keeping its n, unit, power
    and n_required."""
    from dataclasses import replace

    return replace(d, held=None, reason=reason, witness=False, significant=False)


def _cp(k: int, n: int) -> tuple[float | None, float | None, float | None]:
    if n == 0:
        return None, None, None
    lo, hi = clopper_pearson(k, n, ALPHA)
    return k / n, lo, hi


def _floor(need: int | None) -> int | None:
    """``need`` raised to :data:`MIN_N` (None stays None: no n suffices)."""
    return None if need is None else max(MIN_N, need)


def _too_few(n: int, what: str) -> str:
    return f"too few {what}s: n = {n} < {MIN_N}, the least sample any statistical decision rests on"


def _underpowered(power: float, n: int, need: int | None, what: str) -> str:
    need_s = f"needs n >= {need}" if need is not None else "no n up to 10^7 suffices"
    return f"underpowered: power {power:.2f} < {POWER} at n = {n} to detect {what} ({need_s})"


# ---------------------------------------------------------------------------------------------------------
# the independent unit: cases clustered in units (the (draw, batch) pairs of one parameter draw)
# ---------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Sample:
    """A binary sample and its independent units: ``k`` of ``n`` cases in ``units`` units of ``size`` cases on
    average; ``k_eff`` of ``n_eff`` is its Korn-Graubard effective sample (:func:`nsverify.claims.stats.
    effective_counts`; the cases themselves when they are independent) with design effect ``deff``."""

    k: int
    n: int
    units: int
    size: float
    deff: float
    k_eff: float
    n_eff: float
    unit: str
    clustered: bool

    def eff_at(self, m: int) -> int:
        """The effective (independent-case) sample of ``m`` units like these (the same size and design effect,
        the Korn-Graubard shrink at m units), as an integer for a binomial power; at least 1 case per unit when
        the units are the cases."""
        if not self.clustered:
            return m
        if m < 2:
            return 0
        from scipy.stats import norm, t

        shrink = (norm.ppf(1 - ALPHA / 2) / t.ppf(1 - ALPHA / 2, m - 1)) ** 2
        return int(m * self.size / self.deff * shrink)

    def words(self, what: str) -> str:
        if not self.clustered:
            return f"{self.k} of {self.n} {what}s"
        return (f"{self.k} of {self.n} {what}s in {self.units} {self.unit}s (design effect {self.deff:.2g}: "
                f"effective {self.k_eff:.1f} of {self.n_eff:.1f})")


def _sample(k, n, clusters, what: str, unit: str) -> _Sample:
    """Check the counts; ``clusters`` (``[(k_i, n_i)]`` per independent unit, or None when the cases are
    independent) must add up to ``(k, n)``."""
    from nsverify.claims.stats import design_effect, effective_counts

    k, n = _count(k, n)
    if clusters is None:
        return _Sample(k, n, n, 1.0, 1.0, float(k), float(n), what, False)
    try:
        cs = [_count(*c) for c in clusters]
    except TypeError:
        raise DecisionInputError(f"clusters={clusters!r}: pass one (k, n) per {unit}") from None
    if (sum(c[0] for c in cs), sum(c[1] for c in cs)) != (k, n):
        raise DecisionInputError(f"the clusters add up to {sum(c[0] for c in cs)} of {sum(c[1] for c in cs)}, "
                                 f"not k={k} of n={n}: pass the counts of the same {what}s")
    cs = [c for c in cs if c[1]]
    if not cs:
        return _Sample(0, 0, 0, 1.0, 1.0, 0.0, 0.0, unit, True)
    deff = design_effect(cs)
    k_eff, n_eff = effective_counts(cs, deff, ALPHA)
    return _Sample(k, n, len(cs), n / len(cs), deff, k_eff, n_eff, unit, True)


def by_unit(flags: Sequence[bool], size: int) -> list[tuple[int, int]]:
    """``[(k_i, n_i)]`` per unit from case flags listed unit by unit, ``size`` cases per unit (the rows of
    :func:`nsverify.papers.zones.pairs.measure_pairs` are listed draw by draw, ``batches`` per draw): the
    ``clusters`` argument of the share rules."""
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise DecisionInputError(f"size={size!r}: the cases per unit, an integer >= 1")
    flags = [bool(f) for f in flags]
    if len(flags) % size:
        raise DecisionInputError(f"{len(flags)} cases do not split into units of {size}: pass whole units")
    return [(sum(flags[i:i + size]), size) for i in range(0, len(flags), size)]


def _cp_eff(s: _Sample, alpha: float = ALPHA) -> tuple[float | None, float | None, float | None]:
    from nsverify.claims.stats import clopper_pearson_real

    if s.n == 0:
        return None, None, None
    if not s.clustered:
        lo, hi = clopper_pearson(s.k, s.n, alpha)
    else:
        lo, hi = clopper_pearson_real(s.k_eff, s.n_eff, alpha)
    return s.k / s.n, lo, hi


def _interval_name(s: _Sample) -> str:
    if s.n == 0:
        return ""
    return "Clopper-Pearson 95%" if not s.clustered else \
        f"Clopper-Pearson 95% on the Korn-Graubard effective sample (clustered by {s.unit})"


def _sig(reason: str) -> str:
    return reason + " (a significant result decides at any power)"


# ---------------------------------------------------------------------------------------------------------
# rules
# ---------------------------------------------------------------------------------------------------------
def exact(ok: bool, reason: str = "") -> Decision:
    """A deterministic computation (exact arithmetic, a bitwise comparison, a fixed grid): it gives the same
    answer on every run, so one run decides (n = 1, power 1)."""
    if type(ok).__name__ not in ("bool", "bool_"):
        raise DecisionInputError(f"exact() takes the boolean outcome of the comparison, got {ok!r}")
    return Decision("exact", bool(ok), 1, 1.0, 1, reason=reason or ("reproduced exactly" if ok else
                                                                       "the deterministic result differs"),
                    unit="computation")


def illustration(reason: str) -> Decision:
    """A claim the run can only illustrate (the measured number is fixed by construction): never decided."""
    return Decision("illustration", None, 0, None, None, reason=reason)


def not_run(experiment: str, why: str) -> Decision:
    """A paper result this machine does not measure (a GPU-scale experiment, a dataset that cannot be obtained):
    undecided, the reason naming the ``experiment`` (and the run) that would settle it and ``why`` it did not run
    here. Never a verdict: a claim the run cannot reach stays listed, not dropped or guessed."""
    if not experiment.strip() or not why.strip():
        raise DecisionInputError("not_run() needs the experiment that would settle the claim and why it did not run")
    return Decision("not_run", None, 0, None, None, reason=f"not run here ({why}); settled by: {experiment}")


def _rate_rule(rule: str, k: int, n: int, p: float, witness_held: bool, what: str, rate_text: str,
               clusters=None, unit: str = "draw") -> Decision:
    """The shared body of :func:`never` and :func:`occurs`: ``k`` witnesses among ``n`` cases; a witness decides
    (``witness_held``); their absence decides the opposite once 1 - (1 - p)^n >= POWER. With ``clusters`` the
    unit is the cluster: a unit is a witness when one of its cases is (its cases are not independent)."""
    s = _sample(k, n, clusters, what, unit)
    p = _prob(p, "rate")
    if s.clustered:
        cases = f" ({s.k} of {s.n} {what}s)"
        k, n, what = sum(c[0] > 0 for c in clusters if c[1]), s.units, unit
    else:
        cases = ""
    pw = lambda m: 1.0 - (1.0 - p) ** m  # noqa: E731
    need = _floor(n_required(pw))
    value, lo, hi = _cp(k, n)
    base = dict(rule=rule, n=n, power=pw(n), n_required=need, value=value, lo=lo, hi=hi,
                interval="Clopper-Pearson 95%" if n else "", unit=what)
    if n == 0:
        return Decision(held=None, reason=f"premise not exercised: 0 {what}s", **base)
    if k and not witness_held:
        return Decision(held=False, reason=f"{k} counterexample(s) in {n} {what}s{cases} (a counterexample "
                                           "decides at any n)", witness=True, **base)
    if k and (n < MIN_N or pw(n) < POWER):  # it occurs, but the claim is about its rate
        why = _too_few(n, what) if n < MIN_N else _underpowered(pw(n), n, need, rate_text)
        return Decision(held=None, reason=f"{k} occurrence(s) in {n} {what}s{cases} show that it occurs, not at "
                                          f"what rate: {why}", witness=True, **base)
    if k:
        return Decision(held=True, reason=f"{k} occurrence(s) in {n} {what}s{cases} (power {pw(n):.2f} at "
                                          f"{rate_text})", witness=True, **base)
    if n < MIN_N:
        return Decision(held=None, reason=_too_few(n, what), **base)
    if pw(n) < POWER:
        return Decision(held=None, reason=_underpowered(pw(n), n, need, rate_text), **base)
    return Decision(held=not witness_held, reason=f"0 {'occurrences' if witness_held else 'violations'} in {n} "
                                                  f"{what}s{cases} (power {pw(n):.2f} at {rate_text})", **base)


def never(violations: int, n: int, p_alt: float = P_ALT, what: str = "case", clusters=None,
          unit: str = "draw") -> Decision:
    """A universal claim ("X never happens when the premise holds") over ``n`` premise cases, ``violations`` of
    which break it. False on any violation (a counterexample); True when none was seen and the test had power
    >= 0.8 to see one if violations occurred at rate ``p_alt``; None otherwise (0 premise cases: premise not
    exercised). With ``clusters`` (``[(violations_i, n_i)]`` per independent ``unit``) n and the power count
    units, a unit violating when one of its cases does (a violation rate p_alt per case gives at least p_alt per
    unit, so the power is a lower bound)."""
    return _rate_rule("never", violations, n, p_alt, False, what, f"a {p_alt:.0%} violation rate", clusters, unit)


def occurs(k: int, n: int, p_paper: float, what: str = "case", whose: str = "the paper's", clusters=None,
           unit: str = "draw") -> Decision:
    """An existence claim ("X occurs", at rate ``p_paper`` in the paper): True on any occurrence; False when none
    was seen although the test had power >= 0.8 to see one at the paper's rate; None otherwise. ``whose`` names
    the rate's origin in the reason (``"our"`` when the paper gives no rate and the one tested is ours).
    ``clusters``: as in :func:`never`."""
    return _rate_rule("occurs", k, n, p_paper, True, what, f"{whose} rate {p_paper:.3g}", clusters, unit)


def occurs_in_time(events: int, exposure: float, rate_paper: float, what: str = "step") -> Decision:
    """``occurs`` for events in continuous exposure (e.g. trajectory divergences over SGD steps), with a
    Poisson model at the paper's rate per unit of exposure: power 1 - exp(-rate * exposure)."""
    if isinstance(events, bool) or not isinstance(events, int) or events < 0:
        raise DecisionInputError(f"events={events!r}: an integer >= 0")
    if not (math.isfinite(exposure) and exposure >= 0 and math.isfinite(rate_paper) and rate_paper > 0):
        raise DecisionInputError(f"exposure={exposure!r}, rate={rate_paper!r}: finite, exposure >= 0, rate > 0")
    pw = lambda m: 1.0 - math.exp(-rate_paper * m)  # noqa: E731
    need = _floor(n_required(pw))
    n = int(exposure)
    base = dict(rule="occurs_in_time", n=n, power=pw(exposure), n_required=need, value=float(events), unit=what)
    if events:
        return Decision(held=True, reason=f"{events} event(s) in {n} {what}s", witness=True, **base)
    if n < MIN_N:
        return Decision(held=None, reason=_too_few(n, what), **base)
    if pw(exposure) < POWER:
        return Decision(held=None, reason=_underpowered(pw(exposure), n, need,
                                                        f"the paper's rate {rate_paper:.3g}/{what}"), **base)
    return Decision(held=False, reason=f"no event in {n} {what}s although the paper's rate gives power "
                                       f"{pw(exposure):.2f}", **base)


def never_in_time(events: int, exposure: float, rate_alt: float, what: str = "step") -> Decision:
    """``never`` for continuous exposure: False on any event; True when none happened and an event rate
    ``rate_alt`` (the alternative: behaving like the case the paper contrasts with) would have produced one with
    probability >= 0.8."""
    d = occurs_in_time(events, exposure, rate_alt, what)
    if events:
        return Decision("never_in_time", False, d.n, d.power, d.n_required, d.value,
                        reason=f"{events} event(s) in {d.n} {what}s (a witness decides at any n)", witness=True,
                        unit=what)
    held = None if d.held is None else True
    reason = d.reason if held is None else f"no event in {d.n} {what}s (power {d.power:.2f} at the " \
                                           f"alternative rate {rate_alt:.3g}/{what})"
    return Decision("never_in_time", held, d.n, d.power, d.n_required, d.value, reason=reason, unit=what)


def between(k: int, n: int, p_paper: float, what: str = "case", clusters=None, unit: str = "draw") -> Decision:
    """A share strictly between 0 and 1 (the paper measured ``p_paper``): True when both outcomes were seen
    (0 < k < n); False when only one was, although at the paper's share the chance of seeing both,
    1 - p^n - (1-p)^n, is >= 0.8; None otherwise. Binomial model (independent cases); with ``clusters`` n, the
    power and n_required count units, the power at the units' effective sample (Korn-Graubard)."""
    s = _sample(k, n, clusters, what, unit)
    p = _prob(p_paper, "p_paper")
    pwc = lambda m: 1.0 - p ** m - (1.0 - p) ** m  # noqa: E731  (power at m independent cases)
    pw = lambda m: pwc(s.eff_at(m))  # noqa: E731  (power at m units)
    need = _floor(n_required(pw))
    value, lo, hi = _cp_eff(s)
    u, m = s.unit, s.units
    base = dict(rule="between", n=m, power=pw(m), n_required=need, value=value, lo=lo, hi=hi,
                interval=_interval_name(s), unit=u)
    seen = s.words(what)
    if s.n == 0:
        return Decision(held=None, reason=f"premise not exercised: 0 {what}s", **base)
    if 0 < s.k < s.n and (m < MIN_N or pw(m) < POWER):  # both outcomes seen, but the claim quotes a share
        why = _too_few(m, u) if m < MIN_N else _underpowered(pw(m), m, need, f"a share of {p:.3g}")
        return Decision(held=None, reason=f"{seen}: both outcomes seen, but {why}", witness=True, **base)
    if 0 < s.k < s.n:
        return Decision(held=True, reason=f"{seen}: both outcomes seen", witness=True, **base)
    if m < MIN_N:
        return Decision(held=None, reason=_too_few(m, u), **base)
    if pw(m) < POWER:
        return Decision(held=None, reason=_underpowered(pw(m), m, need, f"a share of {p:.3g}"), **base)
    return Decision(held=False, reason=f"{seen}: one outcome only, although a share of {p:.3g} "
                                       f"shows both with probability {pw(m):.2f}", **base)


def _binom_sf(k: int, n: int, p: float) -> float:
    """P[X >= k], X ~ Bin(n, p)."""
    from scipy.stats import binom

    return float(binom.sf(k - 1, n, p))


def share_above(k: int, n: int, bound: float, p_paper: float, what: str = "case", clusters=None,
                unit: str = "draw") -> Decision:
    """The share exceeds ``bound`` (the paper measured ``p_paper`` > bound): exact one-sided binomial test of
    H0: share <= bound (the one-sided Clopper-Pearson bound above ``bound``). True when H0 is rejected at ALPHA
    (significant: decides at any power on >= MIN_N units); False when the share is significantly *below* the
    bound, or not above it although the test had power >= 0.8 at the paper's share; None otherwise. With
    ``clusters`` the test runs on the Korn-Graubard effective sample and n, the power and n_required count
    units."""
    s = _sample(k, n, clusters, what, unit)
    bound, p = _prob(bound, "bound"), _prob(p_paper, "p_paper")
    if p <= bound:
        raise DecisionInputError(f"p_paper={p} must exceed bound={bound} for a test of 'share > bound'")

    def critical(m):  # smallest count rejecting H0 at ALPHA (m + 1: never)
        lo, hi = 0, m + 1
        while lo < hi:
            mid = (lo + hi) // 2
            lo, hi = (mid + 1, hi) if _binom_sf(mid, m, bound) >= ALPHA else (lo, mid)
        return lo

    pwc = lambda m: 0.0 if m == 0 else (_binom_sf(critical(m), m, p) if critical(m) <= m else 0.0)  # noqa: E731
    pw = lambda m: pwc(s.eff_at(m))  # noqa: E731
    need = _floor(n_required(pw, n_max=10**5))
    value, lo, hi = _cp_eff(s)
    _, lo1, hi1 = _cp_eff(s, 2 * ALPHA)  # one-sided 95% bounds
    u, m = s.unit, s.units
    base = dict(rule="share_above", n=m, power=pw(m), n_required=need, value=value, lo=lo, hi=hi,
                interval=_interval_name(s), unit=u)
    if s.n == 0:
        return Decision(held=None, reason=f"premise not exercised: 0 {what}s", **base)
    seen = s.words(what)
    if m < MIN_N:
        return Decision(held=None, reason=f"{seen}: " + _too_few(m, u), **base)
    if lo1 > bound:
        return Decision(held=True, reason=_sig(f"{seen}: share > {bound:g} (one-sided 95% lower bound "
                                               f"{lo1:.3g})"), significant=True, **base)
    if hi1 < bound:
        return Decision(held=False, reason=_sig(f"{seen}: share < {bound:g} (one-sided 95% upper bound "
                                                f"{hi1:.3g})"), significant=True, **base)
    if pw(m) < POWER:
        return Decision(held=None, reason=_underpowered(pw(m), m, need, f"the paper's share {p:.3g}")
                        + f": {seen}", **base)
    return Decision(held=False, reason=f"{seen}: not above {bound:g} (one-sided lower bound {lo1:.3g}) although "
                                       f"power at the paper's share {p:.3g} is {pw(m):.2f}", **base)


def _cp_rejects(m: int, p: float):
    """For every count 0..m: whether the Clopper-Pearson 95% interval of count/m excludes ``p`` (numpy bools)."""
    import numpy as np
    from scipy.stats import beta

    ks = np.arange(m + 1)
    with np.errstate(all="ignore"):
        lo = np.where(ks == 0, 0.0, beta.ppf(ALPHA / 2, np.maximum(ks, 1), m - ks + 1))
        hi = np.where(ks == m, 1.0, beta.ppf(1 - ALPHA / 2, ks + 1, np.maximum(m - ks, 1)))
    return ks, (p < lo) | (p > hi)


def share_is_power(m: int, p: float, delta: float) -> float:
    """Power of :func:`share_is`'s test at ``m`` cases: the least, over the true shares p - delta and p + delta
    (those inside [0, 1]), of the chance that the Clopper-Pearson interval excludes ``p``."""
    from scipy.stats import binom

    if m < 1:
        return 0.0
    ks, rej = _cp_rejects(m, p)
    alts = [q for q in (p - delta, p + delta) if 0.0 <= q <= 1.0]
    return min(float((binom.pmf(ks, m, q) * rej).sum()) for q in alts)


def share_is(k: int, n: int, p_paper: float, delta: float, what: str = "case", clusters=None,
             unit: str = "draw") -> Decision:
    """The share is the paper's ``p_paper`` (a measured percentage, not a bound): two-sided exact test of H0:
    share = p_paper by the Clopper-Pearson 95% interval. False when the interval excludes ``p_paper`` (a
    significant exclusion: it decides at any power, on >= MIN_N units); True when it holds it and the test had
    power >= 0.8 to exclude it were the true share ``delta`` away (on either side); None otherwise. With
    ``clusters`` the interval is the Korn-Graubard one and n, the power and n_required count units."""
    s = _sample(k, n, clusters, what, unit)
    p, delta = _prob(p_paper, "p_paper"), _prob(delta, "delta")
    if not 0 < delta < 1:
        raise DecisionInputError(f"delta={delta!r}: the departure to detect lies in (0, 1)")
    pw = lambda m: share_is_power(s.eff_at(m), p, delta)  # noqa: E731
    need = _floor(n_required(pw, n_max=20000))
    value, lo, hi = _cp_eff(s)
    u, m = s.unit, s.units
    base = dict(rule="share_is", n=m, power=pw(m), n_required=need, value=value, lo=lo, hi=hi,
                interval=_interval_name(s), unit=u)
    if s.n == 0:
        return Decision(held=None, reason=f"premise not exercised: 0 {what}s", **base)
    measured = f"{s.words(what)} = {s.k / s.n:.1%} [{lo:.1%}, {hi:.1%}]"
    if m < MIN_N:
        return Decision(held=None, reason=_too_few(m, u) + f": {measured}", **base)
    if not lo <= p <= hi:
        return Decision(held=False, reason=_sig(f"{measured} excludes the paper's {p:.2%}"), significant=True,
                        **base)
    if pw(m) < POWER:
        return Decision(held=None, reason=_underpowered(pw(m), m, need, f"a share {delta:g} away from the "
                                                                         f"paper's {p:.2%}") + f": {measured}",
                        **base)
    return Decision(held=True, reason=f"{measured} holds the paper's {p:.2%}", **base)


def _kendall(x, y) -> tuple[float, float]:
    from scipy.stats import kendalltau

    r = kendalltau(x, y, alternative="greater")
    tau, pval = float(r.statistic), float(r.pvalue)
    if not math.isfinite(tau):  # constant y: no evidence of a trend
        return 0.0, 1.0
    return tau, pval


def simulated_trend_power(x: Sequence[float], effect: float = TREND_EFFECT, runs: int = SIM_RUNS,
                          seed: int = SIM_SEED) -> float:
    """Power of the one-sided Kendall test at the design ``x`` when (x, y) follow a Gaussian copula whose
    Kendall tau is ``effect`` (Pearson rho = sin(pi tau / 2)); deterministic (seeded Monte Carlo)."""
    import numpy as np
    from scipy.stats import rankdata

    x = np.asarray(x, dtype=float)
    if len(x) < 3 or len(set(x.tolist())) < 2:
        return 0.0
    rho = math.sin(math.pi * effect / 2)
    g = np.random.default_rng(seed)
    # latent normal scores of x (ties in x stay ties: they are the design's groups)
    zx = (rankdata(x) - 0.5) / len(x)
    from scipy.stats import norm

    zx = norm.ppf(zx)
    zx = (zx - zx.mean()) / (zx.std() or 1.0)
    hits = 0
    for _ in range(runs):
        y = rho * zx + math.sqrt(1 - rho * rho) * g.standard_normal(len(x))
        hits += _kendall(x, y)[1] < ALPHA
    return hits / runs


def trend_n_required(x: Sequence[float], effect: float = TREND_EFFECT, n_max: int = 2000) -> int | None:
    """The least number of points, spread evenly over the design's x levels (its distinct values, cycled), at
    which :func:`simulated_trend_power` reaches POWER (None: not up to ``n_max``)."""
    levels = sorted(set(float(v) for v in x))
    if len(levels) < 2:
        return None
    design = lambda m: [levels[i % len(levels)] for i in range(m)]  # noqa: E731
    return _floor(n_required(lambda m: simulated_trend_power(design(m), effect) if m >= 3 else 0.0, n_max))


def trend(x: Sequence[float], y: Sequence[float], effect: float = TREND_EFFECT, what: str = "pair") -> Decision:
    """y increases with x: one-sided Kendall tau_b test (scipy.stats.kendalltau, ties handled). True when
    significant at ALPHA with tau > 0, False when significant the other way (a decreasing trend), both at any
    power on >= MIN_N points; False when not significant although the design had power >= 0.8 to detect a
    Kendall tau of ``effect``; None otherwise. Power by simulation on the same x design; n_required by
    :func:`trend_n_required`. Each (x, y) point must be an independent unit (``what`` names it)."""
    xs, ys = _samples(x, "x"), _samples(y, "y")
    if len(xs) != len(ys):
        raise DecisionInputError(f"trend() got {len(xs)} x values and {len(ys)} y values: pass pairs")
    n = len(xs)
    tau, pval = _kendall(xs, ys) if n >= 3 else (0.0, 1.0)
    p_down = _kendall(xs, [-v for v in ys])[1] if n >= 3 else 1.0
    power = simulated_trend_power(xs, effect)
    need = trend_n_required(xs, effect)
    base = dict(rule="trend", n=n, power=power, n_required=need, value=tau, interval=f"Kendall tau_b, one-sided "
                                                                                        f"p = {pval:.2g}", unit=what)
    if n < 3 or len(set(xs)) < 2:
        return Decision(held=None, reason="premise not exercised: fewer than 3 points or a single x value", **base)
    if n < MIN_N:
        return Decision(held=None, reason=_too_few(n, what), **base)
    if pval < ALPHA and tau > 0:
        return Decision(held=True, reason=_sig(f"Kendall tau_b = {tau:.2f}, one-sided p = {pval:.2g} over {n} "
                                               f"{what}s"), significant=True, **base)
    if p_down < ALPHA and tau < 0:
        return Decision(held=False, reason=_sig(f"a significant decrease: Kendall tau_b = {tau:.2f}, one-sided "
                                                f"p = {p_down:.2g} over {n} {what}s"), significant=True, **base)
    if power < POWER:
        return Decision(held=None, reason=_underpowered(power, n, need, f"a Kendall tau of {effect}")
                        + f" (measured tau_b = {tau:.2f}, p = {pval:.2g})", **base)
    return Decision(held=False, reason=f"no significant increase: tau_b = {tau:.2f}, p = {pval:.2g}, although the "
                                       f"power to detect tau = {effect} is {power:.2f}", **base)


def _t_power(n: int, effect_over_sd: float, one_sided: bool = True) -> float:
    """Power of a one-sample (or paired) one-sided t test at level ALPHA for a standardized effect d."""
    from scipy.stats import nct, t

    if n < 2:
        return 0.0
    if math.isinf(effect_over_sd):
        return 1.0
    df = n - 1
    crit = t.ppf(1 - ALPHA, df)
    return float(nct.sf(crit, df, effect_over_sd * math.sqrt(n)))


def _mean_ci(vals: list[float]) -> tuple[float, float, float, float]:
    """(mean, sd, lo, hi): two-sided 90% t-interval (i.e. one-sided 95% bounds)."""
    from scipy.stats import t

    n = len(vals)
    mean = sum(vals) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in vals) / (n - 1)) if n > 1 else 0.0
    half = t.ppf(1 - ALPHA, n - 1) * sd / math.sqrt(n) if n > 1 else math.inf
    return mean, sd, mean - half, mean + half


def ratio_vs(log_ratios: Sequence[float], threshold: float, below: bool = True, margin: float = 1.25,
             what: str = "sample", effect: bool = False) -> Decision:
    """A measured ratio (from paired samples, e.g. interleaved timings) lies below (``below``) or above a
    ``threshold``: one-sided t bounds on the mean log ratio. True when the bound clears the threshold on the
    claimed side, False when it clears it on the other side (both significant: they decide at any power on
    >= MIN_N samples), None when the interval holds the threshold (the power to resolve a true ratio ``margin``
    times away from the threshold, at the measured spread, is reported with it). ``value``/``lo``/``hi`` are
    ratios (geometric mean and its bounds). With ``effect`` (a claimed effect of at least ``margin``, not a
    bound), True also needs the geometric mean to reach the threshold moved by ``margin`` on the claimed side,
    and an interval that stays short of it is False: the paper's effect size is ruled out."""
    vals = _samples(log_ratios, "log ratios")
    if not (math.isfinite(threshold) and threshold > 0 and margin > 1):
        raise DecisionInputError(f"threshold={threshold!r} must be > 0 and margin={margin!r} > 1")
    n = len(vals)
    if n < 2:
        return Decision("ratio_vs", None, n, None, None, reason=f"premise not exercised: {n} {what}(s), a "
                                                                  f"spread needs >= 2", unit=what)
    mean, sd, lo, hi = _mean_ci(vals)
    if n < MIN_N or sd == 0 or len(set(vals)) == 1:  # no power from a constant sample or from a handful
        why = _too_few(n, what) if n < MIN_N else f"zero variance over {n} {what}s: no power can be computed"
        # the n it needs, from the spread measured (rough with a handful; none without a spread)
        need = None if sd == 0 else _floor(n_required(lambda m: _t_power(m, math.log(margin) / sd), n_max=10**5))
        if need is not None:
            why += f"; about {need} {what}s at the measured spread"
        return Decision("ratio_vs", None, n, None, need, math.exp(mean), math.exp(lo), math.exp(hi),
                        "one-sided 95% t bounds on the log ratio", reason=f"{why} (ratio {math.exp(mean):.3g})",
                        unit=what)
    d = math.log(margin) / sd
    power = _t_power(n, d)
    need = _floor(n_required(lambda m: _t_power(m, d), n_max=10**5))
    base = dict(rule="ratio_vs", n=n, power=power, n_required=need, value=math.exp(mean), lo=math.exp(lo),
                hi=math.exp(hi), interval="one-sided 95% t bounds on the log ratio", unit=what)
    side, other = ("below", "above") if below else ("above", "below")
    lt = math.log(threshold)
    claimed = hi < lt if below else lo > lt
    opposite = lo > lt if below else hi < lt
    measured = f"ratio {math.exp(mean):.3g} [{math.exp(lo):.3g}, {math.exp(hi):.3g}]"
    short = ""  # why an effect claim failed although the interval is on the claimed side of the threshold
    effect_sig = True  # without an effect size, clearing the threshold is the claim itself
    if effect:  # the claimed side must also reach the effect's size, and an interval short of it rules it out
        lm = lt - math.log(margin) if below else lt + math.log(margin)
        size = f"the claimed effect {math.exp(lm):.3g} ({margin:g}x {side} {threshold:g})"
        reached = mean <= lm if below else mean >= lm
        ruled_out = lo > lm if below else hi < lm
        effect_sig = hi < lm if below else lo > lm  # the effect's size itself cleared at 5%
        if claimed and not reached:
            short = f"{measured} {side} {threshold:g} but short of {size}"
        if not opposite and ruled_out:
            short = f"{measured}: the interval stays short of {size}"
        claimed = claimed and reached
        opposite = opposite or ruled_out
    if claimed and effect_sig:
        return Decision(held=True, reason=_sig(f"{measured} {side} {threshold:g}"), significant=True, **base)
    if opposite:
        return Decision(held=False, reason=_sig(short or f"{measured} {other} {threshold:g}"), significant=True,
                        **base)
    if claimed and power >= POWER:  # the effect reached on average, the power to resolve it at hand
        return Decision(held=True, reason=f"{measured} {side} {threshold:g}, reaching {size} on average (power "
                                          f"{power:.2f})", **base)
    if power < POWER:
        return Decision(held=None, reason=_underpowered(power, n, need, f"a ratio {margin:g}x from "
                                                                        f"{threshold:g}") + f": {measured}", **base)
    if short:
        return Decision(held=None, reason=short, **base)
    return Decision(held=None, reason=f"the interval [{math.exp(lo):.3g}, {math.exp(hi):.3g}] holds {threshold:g}",
                    **base)


def _greater_need(xa: list[float], xb: list[float], effect: float) -> int | None:
    """The units (both arms, equal halves) a one-sided Welch test needs for power 0.8 at ``effect``, at the
    spread of ``xa`` and ``xb`` (None without a spread: fewer than 2 samples in an arm, or none varies)."""
    if len(xa) < 2 or len(xb) < 2:
        return None
    var = lambda x: sum((v - sum(x) / len(x)) ** 2 for v in x) / (len(x) - 1)  # noqa: E731
    sd = math.sqrt((var(xa) + var(xb)) / 2)
    if sd == 0:
        return None
    d = effect / sd / math.sqrt(2)
    per_arm = n_required(lambda m: _t_power(m, d), n_max=10**5)
    return None if per_arm is None else _floor(2 * per_arm)


def greater(a: Sequence[float], b: Sequence[float], effect: float, what: str = "seed") -> Decision:
    """mean(a) > mean(b) over independent runs (seeds, the unit): one-sided Welch t test. True when significant;
    False when significant the other way (mean(a) < mean(b)) or not significant although power >= 0.8 to detect
    a difference ``effect`` (the paper's, at the measured spread); None otherwise. n_required: the seeds (both
    arms, equal halves) the power needs."""
    from scipy.stats import ttest_ind

    xa, xb = _samples(a, "a"), _samples(b, "b")
    na, nb = len(xa), len(xb)
    n = na + nb
    if na < 3 or nb < 3 or n < MIN_N:  # a variance from 2 samples gives no usable power: no verdict, but the
        # n it needs is reported, estimated from that spread (rough; issue 38: every rule reports its n_required)
        need = _greater_need(xa, xb, effect)
        est = "" if need is None else f"; about {need} {what}s in all at the measured spread"
        return Decision("greater", None, n, None, need, reason=f"too few {what}s: {na} and {nb} (>= 3 each and "
                                                                 f">= {MIN_N} in all: no power from the spread "
                                                                 f"of 2 samples){est}", unit=what)
    ma, mb = sum(xa) / na, sum(xb) / nb
    va = sum((v - ma) ** 2 for v in xa) / (na - 1)
    vb = sum((v - mb) ** 2 for v in xb) / (nb - 1)
    se = math.sqrt(va / na + vb / nb)
    diff = ma - mb
    if se == 0:  # every sample equal within its arm (e.g. every share 0): no variance, no power
        return Decision("greater", None, n, None, None, diff, diff, diff, "difference of means",
                        reason=f"zero variance in both arms ({na}+{nb} {what}s, difference {diff:.3g}): no power "
                               f"can be computed", unit=what)
    pval = float(ttest_ind(xa, xb, equal_var=False, alternative="greater").pvalue)
    p_less = float(ttest_ind(xa, xb, equal_var=False, alternative="less").pvalue)
    sd = math.sqrt((va + vb) / 2)
    d = effect / sd / math.sqrt(2)
    power = _t_power(min(na, nb), d)
    per_arm = n_required(lambda m: _t_power(m, d), n_max=10**5)
    need = None if per_arm is None else _floor(2 * per_arm)
    base = dict(rule="greater", n=n, power=power, n_required=need, value=diff, lo=diff - 1.645 * se,
                hi=diff + 1.645 * se, interval="difference of means, one-sided 95% Welch bounds", unit=what)
    if pval < ALPHA and diff > 0:
        return Decision(held=True, reason=_sig(f"difference {diff:.3g} > 0 (one-sided p = {pval:.2g}, {na}+{nb} "
                                               f"{what}s)"), significant=True, **base)
    if p_less < ALPHA and diff < 0:
        return Decision(held=False, reason=_sig(f"difference {diff:.3g} < 0 (one-sided p = {p_less:.2g}, "
                                                f"{na}+{nb} {what}s)"), significant=True, **base)
    if power < POWER:
        return Decision(held=None, reason=_underpowered(power, n, need, f"a difference of {effect:g}")
                        + f" (measured {diff:.3g}, p = {pval:.2g})", **base)
    return Decision(held=False, reason=f"difference {diff:.3g} not significant (p = {pval:.2g}) although power "
                                       f"to detect {effect:g} is {power:.2f}", **base)


def no_increase(a: Sequence[float], b: Sequence[float], effect: float, what: str = "seed") -> Decision:
    """mean(a) is not larger than mean(b) (a claim of *no* effect): the mirror of :func:`greater`. False when
    a > b significantly (decides at any power); True when a < b significantly, or when not significant with
    power >= 0.8 to detect a difference ``effect``; None otherwise."""
    d = greater(a, b, effect, what)
    held = None if d.held is None else not d.held
    reason = d.reason if held is None else (f"no significant increase ({d.reason})" if held else
                                            f"a significant increase ({d.reason})")
    return Decision("no_increase", held, d.n, d.power, d.n_required, d.value, d.lo, d.hi, d.interval, reason,
                    unit=d.unit, significant=d.significant)


def _cell(c, name: str):
    """One diff_in_diff cell: ``(k, n)`` of independent cases, or ``[(k_i, n_i)]`` per unit (clustered)."""
    if isinstance(c, tuple) and len(c) == 2 and all(isinstance(v, int) and not isinstance(v, bool) for v in c):
        return _sample(c[0], c[1], None, "case", "case")
    if isinstance(c, (list, tuple)):
        cs = [tuple(x) for x in c]
        return _sample(sum(x[0] for x in cs), sum(x[1] for x in cs), cs, "pair", "draw")
    raise DecisionInputError(f"diff_in_diff cell {name}={c!r}: pass (k, n) or a list of (k_i, n_i) per unit")


def diff_in_diff(on_a, off_a, on_b, off_b, effect: float, design: tuple[float, float] | None = None,
                 what: str = "pair") -> Decision:
    """A treatment raises share A more than share B (e.g. batch norm raises the fp32 impacted share more than the
    fp64 one): (pA_on - pA_off) - (pB_on - pB_off) > 0 by a one-sided z test (Agresti-Caffo adjusted shares).
    Each cell is ``(k, n)`` (independent cases) or ``[(k_i, n_i)]`` per unit (the pairs of one draw: each
    cell's variance is then inflated by its design effect, and n counts units). True when significant; False
    when significant the other way, or not significant although power >= 0.8 to detect ``effect``; None
    otherwise. The power's variance comes from ``design`` = (share A without, share B without), with A's share
    raised by ``effect`` and B's unchanged (the paper's alternative); without it, from shares of 1/2 (the
    largest variance). n_required: the units (in all four cells, each scaled alike) the power needs."""
    from scipy.stats import norm

    cells = [_cell(c, nm) for c, nm in ((on_a, "on_a"), (off_a, "off_a"), (on_b, "on_b"), (off_b, "off_b"))]
    n = sum(c.units for c in cells)
    unit = cells[0].unit
    if any(c.n == 0 for c in cells):
        return Decision("diff_in_diff", None, n, 0.0, None, reason="premise not exercised: an empty cell",
                        unit=unit)
    # Agresti-Caffo on the effective samples (independent cases: the counts themselves)
    adj = [((c.k_eff + 0.5) / (c.n_eff + 1), c.n_eff + 1) for c in cells]
    sh = [c.k / c.n for c in cells]
    est = (sh[0] - sh[1]) - (sh[2] - sh[3])
    dadj = (adj[0][0] - adj[1][0]) - (adj[2][0] - adj[3][0])
    se = math.sqrt(sum(p * (1 - p) / m for p, m in adj))
    z = dadj / se
    pval, p_down = float(norm.sf(z)), float(norm.cdf(z))
    if design is None:
        shares = (0.5, 0.5, 0.5, 0.5)
    else:
        pa, pb = (_prob(v, "design share") for v in design)
        shares = (min(1.0, pa + effect), pa, pb, pb)
    zc = float(norm.ppf(1 - ALPHA))

    def power_at(scale: float) -> float:  # every cell's units multiplied by scale
        var = 0.0
        for p, c in zip(shares, cells):
            m = max(2, int(round(c.units * scale)))
            var += max(p * (1 - p), 1e-12) / max(1, c.eff_at(m))
        return float(norm.sf(zc - effect / math.sqrt(var)))

    power = power_at(1.0)
    k = n_required(lambda m: power_at(m / n), n_max=10**6)
    need = _floor(k)
    base = dict(rule="diff_in_diff", n=n, power=power, n_required=need, value=est, lo=float(dadj - zc * se),
                hi=float(dadj + zc * se), interval="one-sided 95% z bounds (Agresti-Caffo" +
                (", design-effect adjusted)" if cells[0].clustered else ")"), unit=unit)
    if n < MIN_N:
        return Decision(held=None, reason=_too_few(n, unit), **base)
    if pval < ALPHA:
        return Decision(held=True, reason=_sig(f"difference of shifts {est:.2f} > 0 (one-sided p = {pval:.2g})"),
                        significant=True, **base)
    if p_down < ALPHA:
        return Decision(held=False, reason=_sig(f"difference of shifts {est:.2f} < 0 (one-sided p = "
                                                f"{p_down:.2g})"), significant=True, **base)
    if power < POWER:
        return Decision(held=None, reason=_underpowered(power, n, need, f"a difference of shifts of {effect:g}")
                        + f" (measured {est:.2f}, p = {pval:.2g})", **base)
    return Decision(held=False, reason=f"difference of shifts {est:.2f} not significant (p = {pval:.2g}) although "
                                       f"power to detect {effect:g} is {power:.2f}", **base)


def robust(outcomes: dict, n: int, what: str = "setting", unit: str | None = None) -> Decision:
    """A deterministic computation repeated over settings the paper does not pin down (a tolerance, a grid
    extent): ``outcomes`` maps each setting's label to its boolean verdict. True when every setting agrees on
    True, False when every one says False, None when they disagree (the verdict depends on the setting). ``n``:
    the points each computation covers (a grid), reported only, in ``unit`` (e.g. "grid point"; the settings'
    name ``what`` when None)."""
    if not outcomes:
        raise DecisionInputError("robust() needs at least one setting's outcome")
    vals = {str(k): bool(v) for k, v in outcomes.items()}
    trues = [k for k, v in vals.items() if v]
    if len(trues) == len(vals):
        return Decision("robust", True, n, 1.0, 1, reason=f"holds in all {len(vals)} {what}s", unit=unit or what)
    if not trues:
        return Decision("robust", False, n, 1.0, 1, reason=f"fails in all {len(vals)} {what}s", unit=unit or what)
    falses = [k for k, v in vals.items() if not v]
    return Decision("robust", None, n, 1.0, 1, reason=f"depends on the {what}: holds for {', '.join(trues)}; "
                                                      f"fails for {', '.join(falses)}", unit=unit or what)


def all_of(parts: dict[str, Decision]) -> Decision:
    """A conjunction of decisions (one claim with several parts): False if any part is False, None if any is
    None (and none False), else True. The power, n and n_required are those of the parts that decide: the
    False parts when False, every part otherwise (the weakest one)."""
    if not parts:
        raise DecisionInputError("all_of() needs at least one part")
    vals = list(parts.values())
    falses = [d for d in vals if d.held is False]
    held = False if falses else (None if any(d.held is None for d in vals) else True)
    deciding = falses or vals
    weakest = min(deciding, key=lambda d: (d.power if d.power is not None else 2.0))
    powers = [d.power for d in deciding if d.power is not None]
    if held is False:
        witness = any(d.witness for d in falses)
        significant = not witness and any(d.significant for d in falses)
    else:
        witness = held is True and any(d.witness for d in vals)
        powered = lambda d: d.power is not None and d.power >= POWER and d.n >= (d.n_required or 0)  # noqa: E731
        significant = held is True and any(d.significant for d in vals) and \
            all(d.significant or d.witness or powered(d) for d in vals)
    bad = [f"{k}: {d.reason}" for k, d in parts.items() if d.held is not True]
    reason = "; ".join(bad) if bad else "every part holds: " + "; ".join(f"{k}: {d.reason}" for k, d in parts.items())
    # n and n_required come from one part (the weakest), never the least n of one part against the largest
    # n_required of another: every deciding part met its own n_required
    significant = significant and weakest.n >= MIN_N  # the record's n is the weakest part's
    units = sorted({d.unit for d in vals if d.unit})
    return Decision("all_of", held, weakest.n, min(powers) if powers else None, weakest.n_required,
                    reason=reason, witness=witness, unit=weakest.unit or "/".join(units), significant=significant)
