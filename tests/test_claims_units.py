"""Issue 38's systematic fixes to the decision rules: the independent unit (pairs of one draw are clustered),
significant results that decide at any power (both sides of the threshold, per rule), and n_required for every
rule. Expected values come from hand computations or from formulas written out here, never from the rules."""
from __future__ import annotations

import math
import random

import pytest

from nsverify.claims import decide
from nsverify.claims.record import Claim, ClaimError, Source, underpowered
from nsverify.claims.stats import clopper_pearson, clopper_pearson_real, design_effect, effective_counts

SRC = Source("Test (2025)", "Table 1", "a statement")


# ------------------------------------------------------------------------------------- the design effect
def test_design_effect_by_hand():
    # clusters of 4 with shares 1/2, 0, 1, 1/2: p = 1/2; MSB = 4 (0 + 1/4 + 1/4 + 0) / 3 = 2/3; MSW = (2 * 1/2 +
    # 2 * 1/2) / 12 = 1/6; n0 = 4; rho = (2/3 - 1/6) / (2/3 + 3/6) = 3/7; deff = 1 + 3 * 3/7 = 16/7
    assert design_effect([(2, 4), (0, 4), (4, 4), (2, 4)]) == pytest.approx(16 / 7)
    # every cluster all-or-nothing: total correlation, each draw counts once (deff = cluster size)
    assert design_effect([(4, 4), (0, 4), (4, 4), (0, 4), (4, 4)]) == pytest.approx(4)
    # every case agrees (share 0): rho cannot be estimated; the cautious value is the cluster size
    assert design_effect([(0, 4)] * 6) == pytest.approx(4)
    # shares more alike across clusters than binomial noise: negative rho, clipped at 1 (independent cases)
    assert design_effect([(2, 4)] * 8) == 1.0
    with pytest.raises(ValueError, match="k exceeds n"):
        design_effect([(5, 4)])


def test_clustered_interval_covers_where_the_pair_interval_does_not():
    """Beta-binomial draws (intra-draw correlation 0.5, 16 draws of 8 pairs, share 0.3): the pair-level
    Clopper-Pearson interval, which takes the 128 pairs as independent, covers the true share far less than 95%
    of the time; the Korn-Graubard interval over draws keeps close to 95%. 400 seeded replicates."""
    g = random.Random(38)
    p, rho, m, r = 0.3, 0.5, 16, 8
    a, b = p * (1 / rho - 1), (1 - p) * (1 / rho - 1)  # beta(a, b): mean p, ICC 1 / (a + b + 1) = rho
    naive = robust = 0
    for _ in range(400):
        cl = []
        for _ in range(m):
            q = g.betavariate(a, b)
            cl.append((sum(g.random() < q for _ in range(r)), r))
        k = sum(c[0] for c in cl)
        lo, hi = clopper_pearson(k, m * r)
        naive += lo <= p <= hi
        lo, hi = clopper_pearson_real(*effective_counts(cl))
        robust += lo <= p <= hi
    assert naive / 400 < 0.85
    assert robust / 400 >= 0.92


# ------------------------------------------------------------------------------------- units in the rules
def test_never_counts_draws_not_pairs():
    # 0 violations in 128 pairs of 32 draws: power 1 - 0.95^32 = 0.81 counted in draws (pairs would give 0.9986)
    d = decide.never(0, 128, what="pair", clusters=[(0, 4)] * 32)
    assert d.n == 32 and d.unit == "draw" and d.held is True and d.power == pytest.approx(1 - 0.95 ** 32)
    d = decide.never(0, 124, what="pair", clusters=[(0, 4)] * 31)
    assert d.n == 31 and d.held is None and d.n_required == 32  # 1 - 0.95^31 = 0.796
    # a counterexample still decides, and names the draws and the pairs
    d = decide.never(3, 124, what="pair", clusters=[(3, 4)] + [(0, 4)] * 30)
    assert d.held is False and d.witness and "1 counterexample(s) in 31 draws (3 of 124 pairs)" in d.reason
    with pytest.raises(decide.DecisionInputError, match="add up"):
        decide.never(0, 10, clusters=[(0, 4)] * 3)


def test_by_unit_splits_flags_draw_by_draw():
    assert decide.by_unit([1, 0, 0, 0, 1, 1, 0, 0], 4) == [(1, 4), (2, 4)]
    with pytest.raises(decide.DecisionInputError, match="whole units"):
        decide.by_unit([1, 0, 0], 2)


def test_share_rules_count_units_and_their_power_counts_units():
    # 6 pairs from 3 draws (the quick report's Fig. 3.3 bulk): below MIN_N draws, whatever the pairs say
    d = decide.share_is(6, 6, 0.9878, 0.05, what="pair", clusters=[(2, 2)] * 3)
    assert d.held is None and d.n == 3 and d.unit == "draw" and "too few draws" in d.reason
    # all-or-nothing draws: the effective sample is about the number of draws, so the power is the draws'
    allornone = [(4, 4)] * 36 + [(0, 4)] * 4  # 90% of draws
    d = decide.share_is(144, 160, 0.9, 0.25, what="pair", clusters=allornone)
    indep = decide.share_is(144, 160, 0.9, 0.25, what="pair")
    assert d.n == 40 and indep.n == 160 and d.power < indep.power
    # n_required is in draws: 40 all-or-nothing draws are about 40 effective cases, so the draws needed are
    # about the independent-case n_required (within the Korn-Graubard degrees-of-freedom shrink)
    assert d.n_required is not None and indep.n_required <= d.n_required <= 1.2 * indep.n_required + 2


# ------------------------------------------------------------------ a significant result decides (both sides)
def test_share_is_exclusion_decides_at_low_power_but_not_below_min_n():
    # 2 of 32 = 6.2% [0.8%, 20.8%] against Table 3.2's 46.67% (issue 38's GPU example): power 0.74 < 0.8
    lo, hi = clopper_pearson(2, 32)
    assert hi < 0.4667
    d = decide.share_is(2, 32, 0.4667, 0.25)
    assert d.power < 0.8 and d.held is False and d.significant
    # the same share from 4 cases: still an exclusion? 0 of 4: [0, 60%] holds 46.67%: undecided
    assert decide.share_is(0, 4, 0.4667, 0.25).held is None
    # an exclusion on 4 units does not decide (MIN_N), on 5 it does: 0 of 4 vs 0.999, 0 of 5 vs 0.999
    assert decide.share_is(0, 4, 0.999, 0.25).held is None
    assert decide.share_is(0, 5, 0.999, 0.25).held is False


def test_share_above_both_sides_decide_by_significance():
    # 9 of 10 vs bound 1/2: P[X >= 9 | n=10, 1/2] = 11/1024 = 0.011 < 0.05: significant above
    assert sum(math.comb(10, i) for i in (9, 10)) / 1024 < 0.05
    d = decide.share_above(9, 10, 0.5, 0.55)  # power at the paper's 0.55 is tiny
    assert d.power < 0.8 and d.held is True and d.significant
    # 1 of 10: P[X <= 1 | 1/2] = 11/1024: significantly below the bound
    d = decide.share_above(1, 10, 0.5, 0.55)
    assert d.held is False and d.significant
    # 6 of 10: neither side, power < 0.8: undecided
    assert decide.share_above(6, 10, 0.5, 0.55).held is None


def test_greater_both_sides_and_n_required():
    from scipy.stats import nct, t

    a, b = [1.0, 1.1, 0.9, 1.05], [0.0, 0.1, -0.1, 0.05]
    d = decide.greater(a, b, effect=0.01)  # an effect of 0.01 at sd ~0.08: power tiny
    assert d.power < 0.8 and d.held is True and d.significant
    d = decide.greater(b, a, effect=0.01)
    assert d.held is False and d.significant
    d = decide.greater([0.5, 0.6, 0.4, 0.55], [0.5, 0.45, 0.6, 0.5], effect=0.01)
    assert d.held is None and d.n_required is not None and "needs n >=" in d.reason
    # n_required (both arms) against the one-sided t-test power written out here (per arm m, d = effect / sd /
    # sqrt(2), df = m - 1, noncentrality d sqrt(m))
    xa, xb = [0.5, 0.6, 0.4, 0.55], [0.5, 0.45, 0.6, 0.5]
    va = sum((v - sum(xa) / 4) ** 2 for v in xa) / 3
    vb = sum((v - sum(xb) / 4) ** 2 for v in xb) / 3
    dd = 0.1 / math.sqrt((va + vb) / 2) / math.sqrt(2)
    power = lambda m: nct.sf(t.ppf(0.95, m - 1), m - 1, dd * math.sqrt(m))  # noqa: E731
    per_arm = next(m for m in range(2, 10**4) if power(m) >= 0.8)
    assert decide.greater(xa, xb, effect=0.1).n_required == max(5, 2 * per_arm)


def test_diff_in_diff_both_sides_and_n_required():
    # 6 per cell: fp32 0 -> 6, fp64 0 -> 0: z large, significant although the power formula is computed on 24
    d = decide.diff_in_diff((6, 6), (0, 6), (0, 6), (0, 6), 0.3, design=(0.0, 0.0))
    assert d.held is True and d.significant
    d = decide.diff_in_diff((0, 6), (6, 6), (0, 6), (0, 6), 0.3, design=(0.0, 0.0))
    assert d.held is False and d.significant
    # nothing moves: undecided at low power, with the n (pairs, all cells) that would decide
    d = decide.diff_in_diff((1, 6), (1, 6), (1, 6), (1, 6), 0.3, design=(0.17, 0.17))
    assert d.held is None and d.n_required is not None and d.n_required > 24
    # at that n (cells scaled alike) the rule's power reaches 0.8: 4 cells of n_required / 4
    m = -(-d.n_required // 4)
    big = decide.diff_in_diff((m // 6, m), (m // 6, m), (m // 6, m), (m // 6, m), 0.3, design=(0.17, 0.17))
    assert big.power >= 0.8 - 0.02 and big.held is False
    # clustered cells: n counts draws
    cl = decide.diff_in_diff([(4, 4)] * 5, [(0, 4)] * 5, [(0, 4)] * 5, [(0, 4)] * 5, 0.3)
    assert cl.n == 20 and cl.unit == "draw"


def test_trend_both_sides_and_n_required():
    x = [8, 32, 128, 512] * 4
    up = [float(v) + 0.1 * i for i, v in enumerate(x)]
    down = [-v for v in up]
    assert decide.trend(x, up).held is True and decide.trend(x, up).significant
    d = decide.trend(x, down)
    assert d.held is False and d.significant and "significant decrease" in d.reason
    flat = decide.trend([8, 32, 128, 512] * 2, [1.0, 2.0, 1.5, 1.2, 0.7, 1.9, 1.1, 1.6])
    assert flat.held is None and flat.n_required is not None
    # the power at n_required points spread evenly over the 4 levels reaches 0.8, one point fewer does not
    levels = [8, 32, 128, 512]
    need = flat.n_required
    assert decide.simulated_trend_power([levels[i % 4] for i in range(need)]) >= 0.8
    assert decide.simulated_trend_power([levels[i % 4] for i in range(need - 1)]) < 0.8


def test_ratio_vs_effect_claim_needs_the_effect_itself_significant():
    """An effect claim (Table 4.4's "at least 1.2x") is not confirmed by an interval that clears 1 but not 1.2:
    [1.04, 1.51] around 1.26 at low power is undecided (the quick report had called it reproduced)."""
    xs = [math.log(v) for v in (1.0, 1.6, 1.15, 1.55, 1.05, 1.5)]  # geometric mean 1.28, one-sided [1.08, 1.53]
    d = decide.ratio_vs(xs, 1.0, below=False, margin=1.2, effect=True)
    assert d.lo > 1.0 and d.lo < 1.2 and d.power < 0.8
    assert d.held is None
    tight = [math.log(1.5) + 0.01 * (i % 3) for i in range(6)]
    d = decide.ratio_vs(tight, 1.0, below=False, margin=1.2, effect=True)
    assert d.lo > 1.2 and d.held is True and d.significant


def test_ratio_vs_significant_at_low_power():
    g = random.Random(3)
    far = [math.log(3.0) + g.gauss(0, 0.3) for _ in range(5)]
    d = decide.ratio_vs(far, 1.77, below=True, margin=1.01)  # margin 1% at sd 0.3: power ~0.06
    assert d.power < 0.8 and d.held is False and d.significant
    d = decide.ratio_vs([-v for v in far], 1.77, below=True, margin=1.01)
    assert d.held is True and d.significant


def test_every_statistical_rule_reports_n_required_and_unit():
    rules = [decide.never(0, 10), decide.occurs(0, 10, 0.1), decide.between(0, 10, 0.3),
             decide.share_above(6, 10, 0.5, 0.6), decide.share_is(4, 10, 0.4, 0.2),
             decide.trend([1, 2, 3, 4, 5, 6], [1, 3, 2, 5, 4, 6]),
             decide.greater([1.0, 1.2, 0.9, 1.1], [1.0, 0.8, 1.1, 0.95], 0.05),
             decide.diff_in_diff((3, 10), (2, 10), (1, 10), (1, 10), 0.3),
             decide.ratio_vs([0.1, 0.3, 0.2, 0.25, 0.15], 1.5)]
    for d in rules:
        assert d.n_required is not None, d
        assert d.unit, d
        assert "10^7" not in d.reason


# ------------------------------------------------------------------------------------- the record's checks
def test_claim_accepts_a_significant_verdict_on_min_n_units_only():
    ok = decide.Decision("share_is", False, 5, 0.3, 40, reason="excluded", unit="draw", significant=True)
    c = Claim(SRC, "m", "x", ok).to_json()
    assert c["unit"] == "draw" and c["significant"] is True and underpowered([c]) == []
    with pytest.raises(ClaimError, match="significant test on n = 4"):
        Claim(SRC, "m", "x", decide.Decision("share_is", False, 4, 0.3, 40, reason="r", unit="draw",
                                             significant=True))
    assert underpowered([{**c, "n": 4}])
    # without significance the power is still required
    with pytest.raises(ClaimError, match="power"):
        Claim(SRC, "m", "x", decide.Decision("share_is", True, 5, 0.3, 40, reason="r", unit="draw"))


def test_the_claims_tables_show_the_unit_n_counts():
    from nsverify.report.claims_table import _n_text, claim_row

    c = {"n": 8, "n_required": 32, "unit": "draw", "held": None, "claim": "s", "power": 0.3}
    assert _n_text(c) == "8 / 32 draws"
    assert "8 draws (32)" in claim_row(c)
    assert _n_text({"n": 1, "n_required": None}) == "1"  # a record without a unit (older reports) reads as before
