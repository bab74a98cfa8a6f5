"""nsverify.claims.stats (intervals shared by the paper reproductions); the claim record: tests/test_claims.py."""
from __future__ import annotations

import pytest

from nsverify.claims.stats import clopper_pearson, wilson


@pytest.mark.parametrize("k, n", [(5, 10), (0, 7), (3, 200), (200, 200), (1, 1)])
def test_wilson_matches_scipy(k, n):
    from scipy.stats import binomtest, norm

    ref = binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
    p, lo, hi = wilson(k, n, z=norm.ppf(0.975))
    assert p == k / n
    assert lo == pytest.approx(ref.low, abs=1e-12) and hi == pytest.approx(ref.high, abs=1e-12)


def test_wilson_textbook_value_and_empty_sample():
    # k = 5 of n = 10 at z = 1.96: centre (0.5 + z^2/20) / (1 + z^2/10) = 0.5, half-width
    # 1.96 sqrt(0.025 + z^2/400) / (1 + z^2/10) = 0.26341
    _, lo, hi = wilson(5, 10)
    assert lo == pytest.approx(0.5 - 0.26341, abs=1e-5) and hi == pytest.approx(0.5 + 0.26341, abs=1e-5)
    assert wilson(0, 0) == (0.0, 0.0, 1.0)


def test_wilson_is_narrower_than_clopper_pearson_inside():
    # Clopper-Pearson is conservative: at k = n/2 its interval contains Wilson's
    _, wlo, whi = wilson(20, 40)
    clo, chi = clopper_pearson(20, 40)
    assert clo < wlo < 0.5 < whi < chi
