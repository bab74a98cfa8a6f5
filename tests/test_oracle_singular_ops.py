"""The exact ops at singular points (nsverify/oracle/ops/singular.py): norms at 0 with their Clarke sets (a ball, an
ellipsoid), std at a constant input, normalize at 0, |w|^1.5, and atan2/acos/asin/cosh/sinh/xlogy away from and
at their singular points.  Expected values are derived by hand; float64 one-sided differences check them."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
import torch
import torch.nn.functional as Fn

import nsverify
from nsverify.errors import NonFiniteError, NotLipschitzError
from nsverify.oracle.interp import exact_forward
from nsverify.oracle.numbers import Ival

F = Fraction
D = torch.float64


def _t(*xs):
    return torch.tensor(xs, dtype=D)


def _check(fn, w, **kw):
    return nsverify.check_gradient(fn, w, progress=False, **kw)


def _slope(fn, w, d, t=1e-7):
    d = torch.tensor(d, dtype=D)
    return (float(fn(w + t * d)) - float(fn(w))) / t


def _contains(x, ref: float) -> bool:
    if isinstance(x, Ival):
        return float(x.lo) <= ref <= float(x.hi) and float(x.hi - x.lo) < 1e-30
    return float(x) == ref


_ZERO_TARGET = torch.zeros(1, 2, dtype=D)
NORMS = {
    "vector_norm": lambda w: torch.linalg.vector_norm(w),
    "norm": lambda w: torch.norm(w),
    "dist": lambda w: torch.dist(w, torch.zeros(2, dtype=D)),
    "cdist": lambda w: torch.cdist(w.reshape(1, 2), _ZERO_TARGET).sum(),
}


@pytest.mark.parametrize("name", NORMS)
def test_two_norm_at_zero_has_the_unit_ball(name):
    fn, w = NORMS[name], _t(0.0, 0.0)
    for d in ([3.0, 4.0], [-1.0, 0.5]):  # one-sided slope |d|: the unit ball's support function
        assert _slope(fn, w, d) == pytest.approx(math.hypot(*d), rel=1e-12)
    v = _check(fn, w)
    assert v.ad == (0.0, 0.0) and v.status == "member" and v.diagnosis is None  # PyTorch's 0: the min-norm element
    assert _check(fn, w, ad=[F(3, 5), F(4, 5)]).status == "member"  # on the unit sphere, exactly
    assert _check(fn, w, ad=[F(3, 5), F(4, 5) + F(1, 10**9)]).status == "not_member"
    assert _check(fn, w, ad=[F(-1, 2), F(1, 2)]).status == "member"


def test_two_norm_away_from_zero_is_smooth():
    w = _t(3.0, 4.0)
    v = _check(NORMS["vector_norm"], w)
    assert v.status == "member" and v.exact_ad == (F(3, 5), F(4, 5))  # w / |w|, |w| = 5 exactly
    g = _check(NORMS["cdist"], w).exact_ad
    assert g == (F(3, 5), F(4, 5))  # cdist's own backward op, evaluated exactly


def test_a_weighted_norm_has_an_ellipsoid():
    c = _t(1.0, 2.0)
    fn = lambda w: torch.sqrt(((w * c) ** 2).sum())  # noqa: E731  sqrt(w0^2 + 4 w1^2)
    w = _t(0.0, 0.0)
    assert _slope(fn, w, [0.0, 1.0]) == pytest.approx(2.0, rel=1e-12)  # support value 2 along e1: y = (0, 2)
    assert _check(fn, w, ad=[0.0, 2.0]).status == "member"
    assert _check(fn, w, ad=[0.0, 2.0 + 2 ** -30]).status == "not_member"
    assert _check(fn, w, ad=[1.0, 0.0]).status == "member"
    assert _check(fn, w, ad=[F(3, 5), F(8, 5)]).status == "member"  # 9/25 + 64/100 = 1: the boundary
    assert _check(fn, w, ad=[F(3, 5), F(8, 5) + F(1, 1000)]).status == "not_member"


def test_std_of_a_constant_vector():
    w = _t(1.0, 1.0, 1.0)
    fn = torch.std
    # std(c + t d) = t std(d): along d = (1, -1, 0) the slope is sqrt(2 / 2) = 1
    assert _slope(fn, w, [1.0, -1.0, 0.0]) == pytest.approx(1.0, rel=1e-9)
    v = _check(fn, w)
    assert v.status == "member" and v.ad == (0.0, 0.0, 0.0)
    # Clarke set {P u / sqrt(2) : |u| <= 1} (P centres): y with sum 0 and 2 |y|^2 <= 1
    assert _check(fn, w, ad=[F(1, 2), F(-1, 2), 0]).status == "member"  # its support value 1 along d above
    assert _check(fn, w, ad=[F(1, 2), F(-1, 2), F(1, 100)]).status == "not_member"  # not centred
    assert _check(fn, w, ad=[F(51, 100), F(-51, 100), 0]).status == "not_member"  # outside the ball


def test_normalize_at_zero_is_linear_below_eps():
    fn = lambda w: Fn.normalize(w, dim=0).sum()  # noqa: E731
    w = _t(0.0, 0.0)
    assert _slope(fn, w, [1.0, 2.0], 1e-15) == pytest.approx(3e12, rel=1e-6)  # sum(w) / eps while |w| < eps
    v = _check(fn, w)
    eps = F(1e-12)
    assert v.status == "member" and v.exact_ad == (1 / eps, 1 / eps)


def test_abs_pow_one_and_a_half_is_flat_at_zero():
    fn = lambda w: w.abs().pow(1.5).sum()  # noqa: E731
    w = _t(0.0)
    assert abs(_slope(fn, w, [1.0], 1e-8)) < 1e-3 and abs(_slope(fn, w, [-1.0], 1e-8)) < 1e-3
    v = _check(fn, w)
    assert v.status == "member" and v.exact_ad == (F(0),)
    assert _check(fn, w, ad=[F(1, 1000)]).status == "not_member"


def test_pow_one_and_a_half_without_abs_is_undefined_on_one_side():
    with pytest.raises(NotLipschitzError):
        _check(lambda w: w.pow(1.5).sum(), _t(0.0))


def test_atan2_away_from_the_origin_is_exact():
    fn = lambda w: torch.atan2(w[0], w[1])  # noqa: E731
    w = _t(1.0, 2.0)
    v = _check(fn, w)
    # d/dy = x / (x^2 + y^2) = 2/5, d/dx = -y / (x^2 + y^2) = -1/5
    assert v.status == "member" and v.exact_ad == (F(2, 5), F(-1, 5))
    assert _slope(fn, w, [1.0, 0.0]) == pytest.approx(0.4, rel=1e-6)
    assert _contains(exact_forward(lambda x: torch.atan2(x[0], x[1]), w), math.atan2(1.0, 2.0))


def test_atan2_on_its_branch_cut():
    # y = +0 held constant, x < 0: the value is pi near w, the derivative 0
    fn = lambda w: torch.atan2(torch.zeros(1, dtype=D), w).sum()  # noqa: E731
    v = _check(fn, _t(-1.0))
    assert v.status == "member" and v.exact_ad == (F(0),)
    with pytest.raises(NotLipschitzError, match="branch cut"):  # y moving across 0 at x < 0: a jump of 2 pi
        _check(lambda w: torch.atan2(w, -torch.ones(1, dtype=D)).sum(), _t(0.0))


@pytest.mark.parametrize("op, der", [
    (torch.acos, lambda x: -1 / math.sqrt(1 - x * x)),
    (torch.asin, lambda x: 1 / math.sqrt(1 - x * x)),
    (torch.cosh, math.sinh),
    (torch.sinh, math.cosh),
    (torch.atan, lambda x: 1 / (1 + x * x)),
])
def test_smooth_ops_interior(op, der):
    for x in (0.5, -0.25):
        v = _check(lambda w: op(w).sum(), _t(x))
        assert v.status == "member"
        assert _contains(v.exact_ad[0], der(x)) or abs(float(v.exact_ad[0]) - der(x)) < 1e-15
        assert _contains(exact_forward(lambda y: op(y).sum(), _t(x)), float(op(_t(x)).sum())) or \
            abs(float(exact_forward(lambda y: op(y).sum(), _t(x))) - float(op(_t(x)).sum())) < 1e-15


def test_exact_values_at_special_points():
    assert exact_forward(lambda y: torch.cosh(y).sum(), _t(0.0)) == 1
    assert exact_forward(lambda y: torch.sinh(y).sum(), _t(0.0)) == 0
    assert exact_forward(lambda y: torch.asin(y).sum(), _t(0.0)) == 0
    assert _contains(exact_forward(lambda y: torch.acos(y).sum(), _t(0.0)), math.pi / 2)


def test_xlogy():
    # x log y at x = w = 3, y = 2: derivative log 2
    v = _check(lambda w: torch.xlogy(w, torch.full((1,), 2.0, dtype=D)).sum(), _t(3.0))
    assert v.status == "member" and _contains(v.exact_ad[0], math.log(2.0))
    # x = 0 held constant: xlogy is 0 near w whatever y does (derivative 0); PyTorch's backward x / y is 0/0 = NaN
    fn = lambda w: torch.xlogy(torch.zeros(1, dtype=D), w).sum()  # noqa: E731
    assert _slope(fn, _t(0.0), [1.0]) == 0.0 and _slope(fn, _t(0.0), [-1.0]) == 0.0
    v = _check(fn, _t(0.0))
    assert math.isnan(v.ad[0]) and v.status == "not_member"
    assert v.diagnosis.kind == "lipschitz" and v.diagnosis.expected == (F(0),) and v.diagnosis.op == "aten.xlogy"
    v = _check(fn, _t(1.0))  # y > 0: x / y = 0, finite
    assert v.status == "member" and v.exact_ad == (F(0),)


def test_an_undefined_branch_not_taken_is_harmless_and_at_the_output_is_an_error():
    f = lambda w: torch.where(w < 1, torch.acos(w), torch.zeros_like(w)).sum()  # noqa: E731
    v = _check(f, _t(2.0))  # acos(2) is NaN, but the where takes 0 near 2: derivative 0
    assert v.status == "not_member" and v.diagnosis.kind == "lipschitz" and v.diagnosis.expected == (F(0),)
    with pytest.raises(NonFiniteError) as info:
        _check(lambda w: torch.sqrt(w).sum(), _t(-1.0))
    assert info.value.diagnosis.kind == "undefined"


def test_one_over_a_norm_at_zero_is_a_pole():
    with pytest.raises(NotLipschitzError):
        _check(lambda w: 1 / torch.linalg.vector_norm(w), _t(0.0, 0.0))


def test_norm_ball_certificates_are_rechecked_exactly():
    import json

    fn, w = NORMS["vector_norm"], _t(0.0, 0.0)
    v = _check(fn, w, ad=[F(3, 5), F(4, 5)])
    assert v.certificate["kind"] == "norm_ball"
    assert nsverify.verify_certificate(v.to_json()) and nsverify.verify_certificate(v, fn)
    d = json.loads(v.to_json())
    d["certificate"]["member"], d["status"] = False, "not_member"
    assert not nsverify.verify_certificate(d)  # (3/5, 4/5) is in the unit ball
    d = json.loads(v.to_json())
    d["certificate"]["scale"] = "1/2"
    assert not nsverify.verify_certificate(d)  # |(3/5, 4/5)| / (1/2) = 2 > 1
    assert not nsverify.verify_certificate(v, lambda w: 2 * torch.linalg.vector_norm(w))  # the replay differs


def test_nonfinite_certificates_are_rechecked():
    import json

    fn = lambda w: torch.sqrt((w ** 2).sum())  # noqa: E731
    v = _check(fn, _t(0.0, 0.0))
    assert v.certificate["kind"] == "nonfinite_diagnosis"
    assert nsverify.verify_certificate(v.to_json()) and nsverify.verify_certificate(v, fn)
    d = json.loads(v.to_json())
    d["tested"] = ["0", "0"]
    assert not nsverify.verify_certificate(d)  # a finite vector: the certificate proves nothing about it
    assert not nsverify.verify_certificate(v, lambda w: torch.sqrt(w).sum())  # not Lipschitz at 0: no replay
