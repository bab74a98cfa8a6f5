"""The NaN/inf diagnosis of check_gradient (issue 35, classes (a)-(d)): every expected value is derived by hand and
checked against float64 one-sided differences of the function itself, never read off the oracle."""

from __future__ import annotations

import math
from fractions import Fraction

import mpmath
import pytest
import torch
import torch.nn.functional as Fn

import nsverify
from nsverify.errors import NondeterministicError, NonFiniteError, NotLipschitzError, UnsupportedOpError

F = Fraction
D = torch.float64


def _t(*xs):
    return torch.tensor(xs, dtype=D)


def _check(fn, w, **kw):
    return nsverify.check_gradient(fn, w, progress=False, **kw)


def _slope(fn, w, d, t):
    """One-sided difference quotient (f(w + t d) - f(w)) / t in float64."""
    d = torch.tensor(d, dtype=D)
    return (float(fn(w + t * d)) - float(fn(w))) / t


def _where_sqrt(w):
    return torch.where(w > 0, torch.sqrt(w), torch.zeros_like(w)).sum()


def _norm_by_hand(w):
    return torch.sqrt((w ** 2).sum())


# ---------------------------------------------------------------------------------- (a) Lipschitz, NaN AD: a bug
def test_where_branch_not_taken_is_a_bug_named_by_the_where():
    w = _t(-1.0)
    # f = 0 on a neighbourhood of -1 (w > 0 is false there): derivative 0 on both sides
    assert _slope(_where_sqrt, w, [1.0], 1e-6) == 0.0 and _slope(_where_sqrt, w, [-1.0], 1e-6) == 0.0
    v = _check(_where_sqrt, w)
    assert math.isnan(v.ad[0])  # PyTorch's float gradient is NaN
    assert v.status == "not_member" and v.exact
    d = v.diagnosis
    assert d.kind == "lipschitz" and not d.allowed
    assert d.op == "aten.where" and "sqrt" in d.message
    assert d.expected == (F(0),)
    assert d.nonfinite_entries == (0,)
    text = v.explain()
    assert "NaN/inf diagnosis" in text and "aten.where" in text
    assert v.to_dict()["diagnosis"]["kind"] == "lipschitz"


def test_sqrt_of_a_sum_of_squares_at_zero_is_the_two_norm():
    w = _t(0.0, 0.0)
    # the Euclidean norm: one-sided slope along d is |d| (the support function of the unit ball)
    for d in ([1.0, 0.0], [3.0, 4.0], [-1.0, 2.0]):
        assert _slope(_norm_by_hand, w, d, 1e-7) == pytest.approx(math.hypot(*d), rel=1e-12)
    v = _check(_norm_by_hand, w)
    assert all(math.isnan(x) for x in v.ad)
    assert v.status == "not_member"
    d = v.diagnosis
    assert d.kind == "lipschitz" and d.op == "aten.sqrt"
    assert d.expected == (F(0), F(0))  # the minimum-norm element of the unit ball
    assert "unit ball" in d.extra["clarke"]
    assert v.certificate["kind"] == "nonfinite_diagnosis" and v.certificate["nonfinite_entries"] == [0, 1]


def test_a_user_vector_with_nan_is_not_member_of_a_lipschitz_function():
    v = _check(_norm_by_hand, _t(0.0, 0.0), ad=[float("nan"), 0.0])
    assert v.status == "not_member" and v.tested_is == "ad" and v.diagnosis.nonfinite_entries == (0,)


# -------------------------------------------------------------------------------- (b) not locally Lipschitz
@pytest.mark.parametrize("name, fn, w, op", [
    ("sqrt at 0", lambda w: torch.sqrt(w).sum(), _t(0.0), "aten.sqrt"),
    ("|w|^0.5", lambda w: w.abs().pow(0.5).sum(), _t(0.0), "aten.pow"),
    ("atan2 at the origin", lambda w: torch.atan2(w[0], w[1]), _t(0.0, 0.0), "aten.atan2"),
    ("xlogy at 0", lambda w: torch.xlogy(w, w).sum(), _t(0.0), "aten.xlogy"),
    ("acos at 1", lambda w: torch.acos(w).sum(), _t(1.0), "aten.acos"),
    ("division crossing 0", lambda w: (1 / w).sum(), _t(0.0), None),
])
def test_not_lipschitz_is_an_error_naming_the_op(name, fn, w, op):
    with pytest.raises(NotLipschitzError, match="not locally Lipschitz") as info:
        _check(fn, w)
    d = info.value.diagnosis
    assert d.kind == "not_lipschitz" and d.allowed
    if op is not None:
        assert d.op == op


def test_the_not_lipschitz_cases_really_have_unbounded_slopes_or_jumps():
    # float64 one-sided differences: slopes grow without bound (sqrt, |w|^0.5, x log x, acos) or the value jumps
    t1, t2 = 1e-6, 1e-10
    for fn, w, d in ((lambda w: torch.sqrt(w).sum(), _t(0.0), [1.0]),
                     (lambda w: w.abs().pow(0.5).sum(), _t(0.0), [-1.0]),
                     (lambda w: torch.acos(w).sum(), _t(1.0), [-1.0])):
        assert abs(_slope(fn, w, d, t2)) > 50 * abs(_slope(fn, w, d, t1))
    xlx = lambda w: torch.xlogy(w, w).sum()  # noqa: E731
    assert _slope(xlx, _t(0.0), [1.0], t2) < _slope(xlx, _t(0.0), [1.0], t1) - 5  # log t -> -inf
    at = lambda w: torch.atan2(w[0], w[1])  # noqa: E731
    assert abs(float(at(_t(1e-9, 1e-9))) - float(at(_t(-1e-9, -1e-9)))) == pytest.approx(math.pi)


def test_an_integer_count_is_refused_as_discontinuous():
    with pytest.raises(UnsupportedOpError, match="integer-valued output"):
        _check(lambda w: (w > 0).sum(), _t(0.0))
    with pytest.raises(UnsupportedOpError, match="integer-valued output"):
        _check(lambda w: (w > 0).sum(), _t(1.0))  # never decided, even where it is locally constant
    with pytest.raises(UnsupportedOpError, match="discontinuous"):
        _check(lambda w: (w > 0).sum().double(), _t(0.0))  # a count made float: it jumps at 0


def test_nondeterminism_message_says_what_differs():
    calls = []

    def fn(w):
        calls.append(1)
        y = w.sum() * 0 + 1
        return y if len(calls) == 1 else y.float()

    with pytest.raises(NondeterministicError) as info:
        _check(fn, _t(1.0))
    msg = str(info.value)
    assert "torch.float32" in msg and "torch.float64" in msg


# ----------------------------------------------------------------------------------- (c) undefined value at w
@pytest.mark.parametrize("name, fn, w", [
    ("normalize(eps=0) at 0", lambda w: Fn.normalize(w, dim=0, eps=0).sum(), _t(0.0, 0.0)),
    ("layer_norm(eps=0) of a constant row", lambda w: Fn.layer_norm(w.reshape(1, 3), (3,), eps=0).sum(),
     _t(1.0, 1.0, 1.0)),
    ("a fully masked softmax row",
     lambda w: torch.softmax(w.masked_fill(torch.tensor([True, True]), float("-inf")), 0).sum(), _t(1.0, 2.0)),
])
def test_undefined_value_is_an_error_with_the_fix(name, fn, w):
    assert math.isnan(float(fn(w)))  # the value itself is NaN at w (0/0)
    with pytest.raises(NonFiniteError) as info:
        _check(fn, w)
    d = info.value.diagnosis
    assert d is not None and d.kind == "undefined" and d.allowed


# --------------------------------------------------------------------------------------------- (d) overflow
@pytest.mark.parametrize("fn, exact", [
    (lambda w: torch.exp(1000 * w).sum(), lambda: 1000 * mpmath.exp(1000)),
    (lambda w: torch.cosh(800 * w).sum(), lambda: 800 * mpmath.sinh(800)),
])
def test_overflow_keeps_the_exact_verdict_and_reports_the_magnitude(fn, exact):
    v = _check(fn, _t(1.0))
    assert math.isinf(v.ad[0])
    assert v.status == "member"  # a smooth function: its exact AD is its gradient
    d = v.diagnosis
    assert d.kind == "overflow" and d.magnitude is not None
    with mpmath.workdps(200):
        ref = exact()
        lo, hi = (d.magnitude.lo, d.magnitude.hi) if hasattr(d.magnitude, "lo") else (d.magnitude, d.magnitude)
        assert mpmath.mpf(lo.numerator) / lo.denominator <= ref <= mpmath.mpf(hi.numerator) / hi.denominator
    assert "overflowed" in v.explain()


def test_finite_ad_has_no_diagnosis():
    v = _check(lambda w: torch.relu(w).sum(), _t(0.0))
    assert v.status == "member" and v.diagnosis is None


def test_a_steep_branch_not_taken_is_harmless():
    # sqrt at 0 is not Lipschitz, but w > 5 is false near 0: f = 0 there, and PyTorch's 0 x inf = NaN is a bug
    fn = lambda w: torch.where(w > 5, torch.sqrt(w), torch.zeros_like(w)).sum()  # noqa: E731
    assert _slope(fn, _t(0.0), [1.0], 1e-6) == 0.0
    v = _check(fn, _t(0.0))
    assert math.isnan(v.ad[0]) and v.status == "not_member" and v.diagnosis.expected == (F(0),)


def test_singular_values_that_may_cancel_are_never_decided():
    # sqrt(relu(w)) - sqrt(relu(w)) is 0 everywhere (Lipschitz): two steep parts must not be called "not Lipschitz"
    fn = lambda w: (torch.sqrt(torch.relu(w)) - torch.sqrt(torch.relu(w))).sum()  # noqa: E731
    v = _check(fn, _t(0.0))
    assert v.status == "unknown" and "not decided" in v.reason


def test_a_finite_vector_next_to_a_nan_gradient_is_judged_and_the_nan_noted():
    v = _check(_norm_by_hand, _t(0.0, 0.0), ad=[F(3, 5), F(4, 5)])
    assert v.status == "member" and v.diagnosis is None  # the unit ball holds (3/5, 4/5)
    assert any("without ad=" in n for n in v.stats["notes"])


def test_check_module_diagnoses_a_where_guarded_sqrt():
    m = torch.nn.Linear(1, 1).double()
    with torch.no_grad():
        m.weight.fill_(1.0)
        m.bias.fill_(-2.0)
    x = torch.ones(1, 1, dtype=D)  # pre-activation -1: the where takes 0, sqrt(-1) is the branch not taken

    def loss(out, _):
        return torch.where(out > 0, torch.sqrt(out), torch.zeros_like(out)).sum()

    v = nsverify.check_module(m, loss, x, None, progress=False)
    assert v.status == "not_member" and v.diagnosis.kind == "lipschitz"
    assert v.diagnosis.op == "aten.where" and v.diagnosis.expected == (F(0), F(0))


def test_a_float_ad_record_must_test_its_own_float_gradient():
    import json

    v = _check(_norm_by_hand, _t(0.0, 0.0))
    d = json.loads(v.to_json())
    assert d["tested_is"] == "float_ad" and nsverify.verify_certificate(d)
    d["ad"] = [0.0, float("nan")]  # the record's float gradient no longer has NaN in entry 0
    assert not nsverify.verify_certificate(d)
    w = _t(1.0, 1.0, 1.0)
    d = json.loads(_check(torch.std, w).to_json())  # a norm ball tested with PyTorch's float gradient
    assert d["tested_is"] == "float_ad" and nsverify.verify_certificate(d)
    d["tested"] = ["1/2", "-1/2", "0"]  # a member, but not PyTorch's gradient (0, 0, 0)
    assert not nsverify.verify_certificate(d)
