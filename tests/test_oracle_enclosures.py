"""Rigorous enclosures of every smooth function the oracle supports, checked against mpmath at 200 digits.

The enclosure must contain the 200-digit value for random and adversarial arguments (tiny, huge, negative,
non-dyadic, exactly at special points), be a Fraction only where the value is rational, and be narrow (about
2^-190 relative).  Interval arguments must enclose the function over the whole interval.
"""

from __future__ import annotations

import random
from fractions import Fraction

import mpmath
import pytest

from nsverify.oracle import numbers as N

F = Fraction


def _mp(x: Fraction):
    return mpmath.mpf(x.numerator) / x.denominator


def _args(seed: int, limit=None):
    rng = random.Random(seed)
    xs = [F(1), F(-1), F(1, 3), F(-7, 3), F(2) ** -75, F(2) ** -100, F(2) ** -227, F(2) ** -300, -F(2) ** -80,
          1 + F(2) ** -60, F(50), F(-50), F(700), F(-700), F(2) ** -52, 1 - F(2) ** -53]
    xs += [F(rng.randint(-10**6, 10**6), rng.choice([1, 7, 2**20, 10**6])) for _ in range(10)]
    xs += [rng.choice([1, -1]) * F(rng.randint(1, 1000), 2 ** rng.randint(1, 300)) for _ in range(10)]
    return [x for x in xs if limit is None or limit(x)]


CASES = {  # name: (enclosure, 200-digit reference, domain)
    "exp": (N.exp_i, mpmath.exp, lambda x: x < 5000),
    "expm1": (N.expm1_i, mpmath.expm1, lambda x: x < 5000),
    "log": (N.log_i, mpmath.log, lambda x: x > 0),
    "log1p": (N.log1p_i, mpmath.log1p, lambda x: x > -1),
    "tanh": (N.tanh_i, mpmath.tanh, None),
    "sigmoid": (N.sigmoid_i, lambda v: 1 / (1 + mpmath.exp(-v)), None),
    "softplus": (N.softplus_i, lambda v: mpmath.log1p(mpmath.exp(v)), lambda x: x < 5000),
    "sin": (N.sin_i, mpmath.sin, None),
    "cos": (N.cos_i, mpmath.cos, None),
    "erf": (N.erf_i, mpmath.erf, None),
    "erfc": (N.erfc_i, mpmath.erfc, lambda x: abs(x) < 200),  # mpmath's own reference is slow beyond
    "sqrt": (N.sqrt_i, mpmath.sqrt, lambda x: x >= 0),
    "normal_cdf": (N.normal_cdf_i, mpmath.ncdf, lambda x: abs(x) < 60),
    "normal_pdf": (N.normal_pdf_i, mpmath.npdf, lambda x: abs(x) < 60),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_enclosure_contains_the_200_digit_value(name):
    enc, ref, dom = CASES[name]
    for x in _args(sum(map(ord, name)), dom):
        r = enc(x)
        with mpmath.workdps(200):
            v = ref(_mp(x))
            lo, hi = N.bounds(r)
            assert _mp(lo) <= v <= _mp(hi), (name, x)
            if isinstance(r, N.Ival):  # narrow: about PREC bits, relative (or absolute near 0)
                width = (_mp(hi) - _mp(lo)) / max(abs(v), mpmath.mpf(2) ** -1000)
                assert width < mpmath.mpf(2) ** -190, (name, x, width)


@pytest.mark.parametrize("name", sorted(CASES))
def test_interval_arguments_enclose_the_whole_interval(name):
    enc, ref, dom = CASES[name]
    rng = random.Random(7)
    for _ in range(12):
        a = F(rng.randint(-4000, 4000), rng.choice([16, 1000, 2**30]))
        b = a + F(rng.randint(1, 100), 2**rng.randint(4, 60))
        if dom is not None and not (dom(a) and dom(b)):
            continue
        r = enc(N.Ival.of(a, b))
        lo, hi = N.bounds(r)
        with mpmath.workdps(120):
            for t in (a, b, (a + b) / 2, a + (b - a) / 3):
                assert _mp(lo) <= ref(_mp(t)) <= _mp(hi), (name, a, b, t)


def test_exact_only_where_proved():
    assert N.exp_i(F(0)) == 1 and isinstance(N.exp_i(F(0)), F)
    assert N.log_i(F(1)) == 0 and N.sigmoid_i(F(0)) == F(1, 2) and N.tanh_i(F(0)) == 0
    assert N.sin_i(F(0)) == 0 and N.cos_i(F(0)) == 1 and N.erf_i(F(0)) == 0 and N.normal_cdf_i(F(0)) == F(1, 2)
    assert N.sqrt_i(F(9, 4)) == F(3, 2) and N.sqrt_i(F(0)) == 0
    for x in (F(2) ** -75, F(2) ** -227, F(2) ** -300, F(1, 3)):  # mpmath 1.3's iv.exp gave points here
        assert isinstance(N.exp_i(x), N.Ival) and N.exp_i(x).lo < N.exp_i(x).hi
    assert isinstance(N.sqrt_i(F(2)), N.Ival) and isinstance(N.log_i(F(2)), N.Ival)


def test_pi_and_constants():
    p = N.pi_i()
    with mpmath.workdps(200):
        assert _mp(p.lo) < mpmath.pi < _mp(p.hi)


def test_endpoints_convert_exactly():
    x = N.Ival.of(1 + F(1, 2**150), 1 + F(1, 2**149))
    assert x.lo == 1 + F(1, 2**150) and x.hi == 1 + F(1, 2**149)
    y = x * 3 - 3
    assert y.lo <= 3 * F(1, 2**150) and 3 * F(1, 2**149) <= y.hi and y.hi - y.lo < F(1, 2**140)


def test_domain_errors_are_clear():
    from nsverify.errors import InexactError

    with pytest.raises(InexactError, match="log"):
        N.log_i(F(-1))
    with pytest.raises(InexactError, match="sqrt"):
        N.sqrt_i(F(-1, 4))
    with pytest.raises(InexactError, match="not provably"):
        N.log_i(N.Ival.of(F(-1, 8), F(1, 8)))


@pytest.mark.parametrize("left_intervals", [True, False])
def test_interval_matmul_encloses_every_exact_product(left_intervals):
    # the fast product of rationals with intervals (exact endpoint products, one outward rounding per entry)
    # against exact rational products of points picked inside every input interval, endpoints included
    import numpy as np

    from nsverify.oracle import fastexact

    rng = random.Random(5)

    def rat():
        return Fraction(rng.randint(-20, 20), rng.choice([1, 2, 3, 4, 7, 8]))

    def entry(p):
        if rng.random() >= p:
            return rat()
        lo = rat()
        return N.Ival.of(lo, lo + Fraction(rng.randint(0, 5), rng.choice([3, 16, 1000])))

    def arr(shape, p):  # with p > 0, the first entry is an interval
        return np.array([entry(p if i else min(1.0, 2 * p)) for i in range(int(np.prod(shape)))],
                        dtype=object).reshape(shape)

    def pick(x, t):
        if isinstance(x, N.Ival):
            lo, hi = N.mpf_fraction(x.t[0]), N.mpf_fraction(x.t[1])
            return lo + t * (hi - lo)
        return x

    for _ in range(25):
        m, k, n = rng.randint(1, 4), rng.randint(1, 5), rng.randint(1, 4)
        a, b = (arr((2, m, k), 0.7), arr((k, n), 0.0)) if left_intervals else (arr((m, k), 0.0), arr((k, n), 0.7))
        out = fastexact.interval_matmul(a, b)
        assert out is not None and out.shape == np.matmul(a, b).shape
        for t in (Fraction(0), Fraction(1), Fraction(1, 3), None):
            tt = (lambda: Fraction(rng.randint(0, 9), 9)) if t is None else (lambda t=t: t)
            ap = np.array([pick(x, tt()) for x in a.reshape(-1)], dtype=object).reshape(a.shape)
            bp = np.array([pick(x, tt()) for x in b.reshape(-1)], dtype=object).reshape(b.shape)
            for f, p in zip(out.reshape(-1), np.matmul(ap, bp).reshape(-1)):
                if isinstance(f, N.Ival):
                    assert N.mpf_fraction(f.t[0]) <= p <= N.mpf_fraction(f.t[1])
                else:
                    assert f == p
    assert fastexact.interval_matmul(arr((2, 2), 0.0), arr((2, 2), 0.0)) is None  # no interval: not this path
