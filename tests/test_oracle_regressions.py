"""Regression tests for the soundness classes of issue 12, on adversarial programs of our own.

Each test fails on the oracle before the fix (a wrong verdict, a crash, or an unknown that exact arithmetic
decides) and states the independent reason for the expected answer.  Expected values come from the
mathematics of the program (or from PyTorch's own float64 autograd), never from the oracle's output.
"""

from __future__ import annotations

import json
import math
from fractions import Fraction

import mpmath
import pytest
import torch

import nsverify
from nsverify.errors import UnsupportedOpError
from nsverify.oracle import verify_certificate

F = Fraction
D = torch.float64


def _float_ad(fn, w):
    x = w.clone().requires_grad_(True)
    (g,) = torch.autograd.grad(fn(x), x)
    return tuple(F(v) for v in g.tolist())


# ------------------------------------------------------------------------------------------------------
# 1. smooth parts keep their exactness (no 53-bit rounding, no wrong point intervals, no merged vertices)
# ------------------------------------------------------------------------------------------------------
def test_interval_endpoints_keep_their_precision():
    """1 + 2^-60 as an interval endpoint stays 1 + 2^-60 (a 53-bit conversion made it 1)."""
    from nsverify.oracle.jsonio import dec

    x = dec({"lo": str(1 + F(1, 2**60)), "hi": str(1 + F(1, 2**59))})
    assert x.lo - 1 == F(1, 2**60) and x.hi - 1 == F(1, 2**59)


def test_close_vertices_are_not_merged_into_a_false_bracket():
    """f(w) = max(w e^1, w e^(1 + 2^-60)) at 0: the Clarke set is [e, e^(1+2^-60)]; the double nearest to e lies
    below e (e = 2.71828182845904523536..., double 2.71828182845904509080), so it is NOT a member, although both
    vertices round to it in 53 bits."""
    def f(w):
        z = w[0] * 0  # keeps the constants inside the exact evaluation
        return torch.maximum(w[0] * torch.exp(z + 1.0), w[0] * torch.exp(z + 1.0 + 2.0**-60))

    with mpmath.workdps(40):
        assert mpmath.mpf(math.e) < mpmath.e  # the tested double is below both vertices
    v = nsverify.check_gradient(f, torch.zeros(1, dtype=D), ad=torch.tensor([math.e], dtype=D))
    assert v.status == "not_member" and verify_certificate(v.to_json(), fn=f)
    above = nsverify.check_gradient(f, torch.zeros(1, dtype=D), ad=torch.tensor([math.e + 2.0**-51], dtype=D))
    assert above.status == "not_member"


def test_tiny_exp_argument_is_not_a_point():
    """exp(2^-75) = 1 + 2^-75 + 2^-151 + 2^-227/6 + ...: relu(exp(w) - 1 - 2^-75 - 2^-151) at w = 2^-75 has a
    positive argument (no kink there), so the derivative is exp(w) > 0; an exact kink (derivative 0) was invented
    when exp returned a point interval."""
    def f(w):
        return torch.relu(torch.exp(w[0]) - 1 - 2.0**-75 - 2.0**-151)

    v = nsverify.check_gradient(f, torch.tensor([2.0**-75], dtype=D))
    assert v.status != "member"  # the true Clarke set is {exp(2^-75)}: AD's exact 0 was wrongly a member
    assert not any(str(k.op) == "relu" and k.value == 0 for k in v.kinks)


def test_tanh_is_enclosed_and_decided():
    """tanh crashed (mpmath 1.3 has no iv.tanh); d/dw tanh(w) at 1/2 is 1 - tanh(1/2)^2."""
    fn = lambda w: torch.tanh(w).sum() + torch.relu(w[1])  # noqa: E731
    v = nsverify.check_gradient(fn, torch.tensor([0.5, 0.0], dtype=D))
    assert v.status == "member"
    g0 = v.exact_ad[0]
    with mpmath.workdps(80):
        true = 1 - mpmath.tanh(mpmath.mpf(1) / 2) ** 2
        lo = mpmath.mpf(g0.lo.numerator) / g0.lo.denominator
        assert lo <= true <= mpmath.mpf(g0.hi.numerator) / g0.hi.denominator


# ------------------------------------------------------------------------------------------------------
# 2. PyTorch's own tie choices (read from the float run, never assumed)
# ------------------------------------------------------------------------------------------------------
def _sorted_twice(w):
    """sum_r r sort(x)_r - sum_r r stable_sort(x)_r: identically 0, but at ties of 17 entries CPU's unstable sort
    orders tied entries differently from the stable one, so AD is not 0."""
    x = torch.stack([w[i % 3] * (1 + i % 2) for i in range(17)])
    c = torch.arange(17, dtype=w.dtype)
    return (torch.sort(x).values * c).sum() - (torch.sort(x, stable=True).values * c).sum()


def test_unstable_sort_17_uses_the_order_pytorch_returned():
    w = torch.zeros(3, dtype=D)
    ad = _float_ad(_sorted_twice, w)
    assert any(ad)  # PyTorch's float AD of this zero function is not 0 (the two sorts disagree at ties)
    v = nsverify.check_gradient(_sorted_twice, w)
    assert v.exact_ad == ad  # the exact AD is PyTorch's, not a first-index assumption
    assert v.status == "not_member"  # the Clarke set of the zero function is {0}
    assert v.bouligand == [(F(0), F(0), F(0))]


def test_topk_ties_use_the_indices_pytorch_returned():
    """topk(x, 3) - (first 3 of a stable descending sort): identically 0; topk returns later tied indices."""
    def f(w):
        x = torch.stack([w[i % 2] * (1 + i % 3) for i in range(6)])
        return torch.topk(x, 3).values.sum() - torch.sort(x, descending=True, stable=True).values[:3].sum()

    w = torch.zeros(2, dtype=D)
    v = nsverify.check_gradient(f, w)
    assert v.exact_ad == _float_ad(f, w) and any(v.exact_ad)
    assert v.status == "not_member"


def test_unreadable_tie_choice_is_unknown():
    """(3 w0)/3 + w1 and w0 + 2 w1 tie exactly at (1/10, 0) with different slopes, but the float run rounds
    (3 * 0.1)/3 to 0.10000000000000002: it never saw the tie, so PyTorch's choice at the exact tie is not
    known, and the verdict must not pretend it is."""
    def f(w):
        x = torch.stack([(3 * w[0]) / 3 + w[1], w[0] + 2 * w[1], w[0] + 5])
        return (torch.sort(x).values * torch.tensor([1.0, 2.0, 3.0], dtype=w.dtype)).sum()

    v = nsverify.check_gradient(f, torch.tensor([0.1, 0.0], dtype=D))
    assert v.status == "unknown" and "tie choice" in v.reason


# ------------------------------------------------------------------------------------------------------
# 3. crashes on supported ops
# ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name,fn,w,expected", [
    ("clamp, tensor bounds, 0-d", lambda w: torch.clamp(w[0], w[1], w[2]), (0.0, 0.0, 1.0), (1, 0, 0)),
    ("clamp, tensor bounds, 0-d tie at max", lambda w: torch.clamp(w[0], w[1], w[2]), (1.0, 0.0, 1.0), (1, 0, 0)),
    ("& of 0-d bools", lambda w: torch.where((w[0] >= 0) & (w[1] >= 0), w[0], w[1]), (1.0, 2.0), (1, 0)),
    ("| of 0-d bools", lambda w: torch.where((w[0] < 0) | (w[1] < 0), w[0], 2 * w[1]), (1.0, 2.0), (0, 2)),
    ("median", lambda w: torch.median(w), (3.0, -1.0, 2.0), (0, 0, 1)),
    ("kthvalue", lambda w: torch.kthvalue(w, 3).values, (3.0, -1.0, 2.0), (1, 0, 0)),
    ("mode, distinct entries", lambda w: torch.mode(w).values, (3.0, -1.0, 2.0), (0, 1, 0)),
])
def test_former_crashes(name, fn, w, expected):
    v = nsverify.check_gradient(fn, torch.tensor(w, dtype=D))
    assert v.status == "member" and v.exact_ad == tuple(F(x) for x in expected), v.explain()


def test_clamp_with_tensor_bounds_at_a_tie_enumerates():
    """clamp(x, lo, hi) with x == lo: the pieces x (above) and lo (below); in pieces mode this crashed looking
    the rule up by a registry name that no ATen op maps to."""
    v = nsverify.check_gradient(lambda w: torch.clamp(w[0], w[1], w[2]) * 2, torch.tensor([0.0, 0.0, 1.0], dtype=D))
    assert v.status == "member" and sorted(v.bouligand) == [(F(0), F(2), F(0)), (F(2), F(0), F(0))]


# ------------------------------------------------------------------------------------------------------
# 4. certificates: checked without crashing, bound to what they prove, re-derived from the program
# ------------------------------------------------------------------------------------------------------
def _park_lemma2(w):
    z = torch.relu(torch.stack([w[0], -w[0]]))
    return z[0] - z[1]


def test_checker_returns_false_on_renamed_kind_and_bad_index():
    v = nsverify.check_gradient(lambda w: torch.relu(w[0]), torch.zeros(1, dtype=D))
    rec = json.loads(v.to_json())
    renamed = dict(rec, certificate=dict(rec["certificate"], kind="adjacent_piece"))
    out_of_range = dict(rec, certificate=dict(rec["certificate"], weights={"7": "1"}))
    for bad in (renamed, out_of_range):
        check = verify_certificate(bad)
        assert not check and check.reason


def test_adjacent_piece_binds_tested():
    """relu(w0) exp(w1) at (0, 1/2): AD's own piece (w0 < 0) certifies membership with irrational values; changing
    the tested vector must invalidate it."""
    fn = lambda w: torch.relu(w[0]) * torch.exp(w[1]) + torch.exp(w[1])  # noqa: E731
    v = nsverify.check_gradient(fn, torch.tensor([0.0, 0.5], dtype=D))
    assert v.status == "member" and v.certificate["kind"] == "adjacent_piece"
    rec = json.loads(v.to_json())
    assert verify_certificate(rec)
    forged = dict(rec, tested=["1", rec["tested"][1]])  # neither piece has the w0-derivative 1 (0 and e^(1/2))
    assert not verify_certificate(forged)
    assert verify_certificate(rec, fn=fn) and not verify_certificate(forged, fn=fn)


def test_certificate_is_checked_against_the_program_not_only_its_own_vertices():
    """Park et al., Lemma 2 (relu(w) - relu(-w) = w: AD 0, Clarke set {1}).  A forged record lists the vertices
    (-1) and (1), so AD's 0 = (-1)/2 + (1)/2 'is a member' by the JSON alone; replaying the program along the
    witness of vertex 0 re-derives the gradient 1, not -1, and rejects it."""
    v = nsverify.check_gradient(_park_lemma2, torch.zeros(1, dtype=D))
    rec = json.loads(v.to_json())
    forged = dict(rec, status="member", bouligand=[["-1"], ["1"]], outer=[["-1"], ["1"]],
                  certificate={"kind": "convex_weights", "weights": {"0": "1/2", "1": "1/2"},
                               "witnesses": {"0": {"0": "-1"}, "1": {"0": "1"}}})
    assert verify_certificate(forged)  # the JSON-only check trusts the listed vertices (documented)
    check = verify_certificate(forged, fn=_park_lemma2)
    assert not check and "vertex 0" in check.reason


# ------------------------------------------------------------------------------------------------------
# 5. borderline cases decided exactly instead of "unknown"
# ------------------------------------------------------------------------------------------------------
def test_thin_cone_is_decided_exactly():
    """max(w0, -w0, -2^-32 w1) at 0: the third entry wins on a cone of width 2^-32 around -e_1 (below the float
    LP's 1e-9 cut-off), so (0, -2^-32) is a Bouligand gradient and a member."""
    eps = 2.0**-32
    fn = lambda w: torch.max(torch.stack([w[0], -w[0], -eps * w[1]]))  # noqa: E731
    v = nsverify.check_gradient(fn, torch.zeros(2, dtype=D), ad=torch.tensor([0.0, -eps], dtype=D))
    assert v.status == "member" and v.exact and (F(0), -F(1, 2**32)) in v.bouligand
    assert verify_certificate(v.to_json(), fn=fn)


def test_second_order_tie_is_not_an_unknown():
    """maximum(w0^2, 0) + w0 equals w0 + w0^2 near 0 (w0^2 >= 0): its gradient is 1 at 0.  The two tied entries
    differ only at second order, so every nearby gradient is the same either way."""
    fn = lambda w: torch.maximum(w[0] * w[0], torch.zeros((), dtype=w.dtype)) + w[0]  # noqa: E731
    v = nsverify.check_gradient(fn, torch.zeros(1, dtype=D))
    assert v.status == "member" and v.bouligand == [(F(1),)]


def test_division_by_an_integer_stays_exact():
    """mse_loss's mean divides a forward-mode value by the element count (a Python int): the gradient must stay
    a Fraction (1/3 is not a float), or a float would decide membership."""
    X = torch.tensor([[0.0, -1.0], [-1.0, 1.5], [2.0, 1.5]], dtype=D)
    y = torch.tensor([[-1.0], [-0.5], [0.0]], dtype=D)
    fn = lambda w: torch.nn.functional.mse_loss(torch.relu(X @ w[:2].reshape(2, 1) + w[2]), y)  # noqa: E731
    v = nsverify.check_gradient(fn, torch.tensor([0.5, 0.0, 0.0], dtype=D), progress=False)
    assert all(type(x) is F for vert in v.bouligand for x in vert) and all(type(x) is F for x in v.tested)
    assert v.status == "member" and verify_certificate(v.to_json(), fn=fn)


@pytest.mark.parametrize("conv,status", [({"abs": "value=2", "relu": "value=1/2"}, "not_member"),
                                         ({"abs": "value=1/2"}, "member"), ({"relu": "value=3"}, "not_member")])
def test_conventions_decide_the_exact_ad(conv, status):
    """The conventions a user names are the AD under test, for every op (PyTorch's backward formulas would
    silently use abs'(0) = 0 and relu'(0) = 0 and answer member).  |x| + relu(x) at 0: the Clarke set is
    [-1, 2] per coordinate (slopes -1 and 1 + 1)."""
    fn = lambda w: w.abs().sum() + torch.relu(w).sum()  # noqa: E731
    v = nsverify.check_gradient(fn, torch.zeros(2, dtype=D), rules=conv, progress=False)
    assert v.status == status and v.exact
    assert verify_certificate(v.to_json(), fn=fn) or status == "not_member"


def test_cone_rows_beyond_the_float_range_are_decided_exactly():
    """A cone row whose entries all underflow to 0.0 as floats (2^-1100) made the float LP divide 0 by 0; such
    cones are decided by the exact simplex, both ways."""
    import warnings

    from nsverify.oracle.cones import ConeStats, feasible, holds

    tiny = F(1, 2**1100)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        kind, d = feasible([{0: tiny}, {0: F(1), 1: F(-1)}], ConeStats())
        assert kind == "open" and holds([{0: tiny}, {0: F(1), 1: F(-1)}], d)
        kind, y = feasible([{0: tiny}, {0: -tiny}], ConeStats())
        assert kind == "empty" and y[0] > 0 and y[1] > 0


def test_integer_matmul_with_a_zero_operand_and_huge_entries():
    """fastexact's int64 path was chosen when one operand was all zeros (bound 0) even if the other's integers
    exceed int64 (a Park section run crashed with OverflowError)."""
    import numpy as np

    from nsverify.oracle import fastexact

    a = np.array([[F(2**70 + 1, 3), F(1)]], dtype=object)
    b = np.array([[F(0)], [F(0)]], dtype=object)
    assert fastexact.matmul(a, b).tolist() == [[F(0)]]
    c = np.array([[F(1)], [F(2**65)]], dtype=object)
    assert fastexact.matmul(a, c).tolist() == [[F(2**70 + 1, 3) + F(2**65)]]


def _row(w, consts):
    return torch.stack([w[0], *(torch.tensor(c, dtype=w.dtype) for c in consts), w[1]])


def test_mode_with_a_repeated_constant_is_locally_constant():
    """torch.mode over (w0, 1, 1, w1) at w = (1/2, 2): the constant 1 repeats and w0, w1 are apart from every
    other entry, so near w the mode is 1: f = mode * w1 + relu(w0 - 1/2) is w1 + relu(w0 - 1/2) there, Clarke set
    hull{(0, 1), (1, 1)} by hand, checked against float64 autograd on both sides of w0 = 1/2."""
    def f(w):
        return torch.mode(_row(w, (1.0, 1.0))).values * w[1] + torch.relu(w[0] - 0.5)

    w = torch.tensor([0.5, 2.0], dtype=torch.float64)
    v = nsverify.check_gradient(f, w)
    assert v.status == "member" and v.exact
    assert sorted(tuple(b) for b in v.bouligand) == [(0, 1), (1, 1)]
    for t in (1e-6, -1e-6):
        x = (w + torch.tensor([t, 0.0], dtype=torch.float64)).requires_grad_(True)
        f(x).backward()
        assert tuple(x.grad.tolist()) in ((0.0, 1.0), (1.0, 1.0))
    assert nsverify.check_gradient(f, w, ad=(Fraction(1, 2), 1)).status == "member"
    assert nsverify.check_gradient(f, w, ad=(0, 2)).status == "not_member"


@pytest.mark.parametrize("w0, consts", [(1.0, (1.0, 1.0)), (0.5, (1.0, 3.0)), (0.5, (0.5, 1.0))])
def test_mode_refuses_where_an_entry_that_depends_on_w_is_repeated(w0, consts):
    """An entry depending on w that equals another (a constant's repeat, or another w entry): mode jumps there."""
    w = torch.tensor([w0, 0.5 if consts == (1.0, 3.0) else 2.0], dtype=torch.float64)
    with pytest.raises(UnsupportedOpError, match="discontinuous"):
        nsverify.check_gradient(lambda x: torch.mode(_row(x, consts)).values, w)
