"""Kink sites with zero first-order slope: pieces certified along a ray by truncated Taylor series (jets).

Expected verdicts and Clarke sets are derived by hand in each test's docstring; every certified gradient is also
checked against PyTorch's float64 autograd at points w + 2^-k d along its witness ray, and sampled gradients near
w are checked against the listed sets (independent of the oracle's exact interpreter).
"""

from __future__ import annotations

import json
import random
from fractions import Fraction

import pytest
import sympy
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import nsverify
from nsverify.oracle import verify_certificate
from nsverify.oracle.interp import Evaluation
from nsverify.oracle.jets import certify_rays, directions, ray_piece
from nsverify.oracle.numbers import JET_ORDER, Ival, Jet, JetDeclined, exp_i, jet_sign
from nsverify.oracle.ops import kinks as ops_kinks
from nsverify.oracle.pieces import enumerate_pieces

F = Fraction
D = torch.float64
Z2 = torch.zeros(2, dtype=D)


def ring(w):
    """where(w0^2 - w1^2 > 0, w0, -w0): gradient (1, 0) where |w0| > |w1|, (-1, 0) where |w0| < |w1| -- both open
    cones touch 0, so the Clarke set is hull{(1, 0), (-1, 0)}; AD takes 0 > 0 false: (-1, 0), a member."""
    return torch.where(w[0] ** 2 - w[1] ** 2 > 0, w[0], -w[0])


def cubic(w):
    """where(w0^3 > 0, w1, -w1): (0, 1) for w0 > 0, (0, -1) for w0 < 0: Clarke hull{(0, 1), (0, -1)}; AD (0, -1)."""
    return torch.where(w[0] ** 3 > 0, w[1], -w[1])


def never(w):
    """where(w0^2 > 0, w1, -w1): w0^2 > 0 off the null set w0 = 0, so the Clarke set is {(0, 1)}; AD (0, -1) is not a
    member, but the oracle cannot prove the side w0^2 < 0 empty at second order: unknown."""
    return torch.where(w[0] ** 2 > 0, w[1], -w[1])


def two_sites(w):
    """where(w0 w1 > 0, w0, -w0) + relu(w0^2 - w1) at 0, the four regions near 0 (q1 = w0 w1, q2 = w0^2 - w1):
    q1 > 0, q2 > 0: w0 < 0, w1 < 0            gradient (1, 0) + (2 w0, -1) -> (1, -1)
    q1 > 0, q2 < 0: w0 > 0, w1 > w0^2          (1, 0)
    q1 < 0, q2 > 0: w0 > 0, w1 < 0             (-1, 0) + (2 w0, -1) -> (-1, -1)
    q1 < 0, q2 < 0: w0 < 0, w1 > w0^2          (-1, 0)
    Clarke set [-1, 1] x [-1, 0]; AD: q1 = 0 > 0 false (-1, 0), relu'(0) = 0: (-1, 0), a member."""
    return torch.where(w[0] * w[1] > 0, w[0], -w[0]) + torch.relu(w[0] ** 2 - w[1])


def autograd(fn, point) -> tuple:
    w = torch.tensor([float(x) for x in point], dtype=D, requires_grad=True)
    (g,) = torch.autograd.grad(fn(w), w)
    return tuple(g.tolist())


def along(fn, d: dict, k: int, n: int = 2) -> tuple:
    """float64 autograd at the point 2^-k d (w = 0)."""
    return autograd(fn, [F(d.get(i, 0), 2**k) for i in range(n)])


def ray_mismatches(fn, w=Z2, ks=(12, 20, 28)) -> list:
    """Every ray piece of ``fn`` at ``w`` (the candidate directions) whose gradient float64 autograd does not
    approach at 2^-k d: within 2^(3-k) (the pieces here are polynomials of degree <= 2 with small coefficients, so
    their gradients move by O(t) along the ray)."""
    ev = Evaluation(fn, w)
    bad = []
    for d in directions(ev.n):
        got = ray_piece(ev, d)
        if got is None:
            continue
        want = tuple(float(x) for x in got.gradient)
        for k in ks:
            g = along(fn, d, k, ev.n)
            if max(abs(a - b) for a, b in zip(g, want)) > 2.0 ** (3 - k):
                bad.append((d, k, want, g))
    return bad


# ---------------------------------------------------------------------------------------------------------- jets
def test_jet_arithmetic_matches_sympy_series():
    """Truncated series of a rational function of t against sympy's Taylor expansion."""
    t = sympy.symbols("t")
    x = Jet((F(1), F(2), F(-1)) + (F(0),) * (JET_ORDER - 2))  # 1 + 2t - t^2
    y = Jet((F(3), F(-1), F(0), F(1)) + (F(0),) * (JET_ORDER - 3))  # 3 - t + t^3
    got = (x ** 3 - F(1, 2) * x) / y + 7 / x
    X, Y = 1 + 2 * t - t**2, 3 - t + t**3
    ser = sympy.series((X**3 - X / 2) / Y + 7 / X, t, 0, JET_ORDER + 1).removeO()
    want = [F(str(ser.coeff(t, k))) for k in range(JET_ORDER + 1)]
    assert list(got.c) == want
    assert (x ** -2).c == (x * x).inv().c


def test_jet_sign_reads_the_first_nonzero_coefficient():
    z = (F(0),) * (JET_ORDER - 2)
    assert jet_sign(Jet((F(0), F(0), F(-3)) + z)) == (-1, 2)
    assert jet_sign(Jet((F(0), F(1, 7), F(-3)) + z)) == (1, 1)
    assert jet_sign(Jet((F(0),) * (JET_ORDER + 1))) is None  # every kept coefficient zero: undecided
    assert jet_sign(Jet((F(0), Ival.of(F(-1), F(1)), F(1)) + z)) is None  # an enclosure containing 0
    assert jet_sign(Jet((F(0), Ival.of(F(1), F(2)), F(-1)) + z)) == (1, 1)


@pytest.mark.parametrize("use", [lambda j: j > 0, lambda j: bool(j), lambda j: float(j), lambda j: hash(j),
                                 lambda j: j == 0, lambda j: abs(j), lambda j: exp_i(j), lambda j: j ** F(1, 2),
                                 lambda j: j / Jet((F(0), F(1)) + (F(0),) * (JET_ORDER - 1))])
def test_a_jet_never_passes_for_a_constant(use):
    with pytest.raises(JetDeclined):
        use(Jet((F(1), F(1)) + (F(0),) * (JET_ORDER - 1)))


# ------------------------------------------------------------------------------------------------------ verdicts
@pytest.mark.parametrize("fn,clarke", [(ring, {(F(1), F(0)), (F(-1), F(0))}),
                                       (cubic, {(F(0), F(1)), (F(0), F(-1))})])
def test_second_order_ties_are_certified_members(fn, clarke):
    v = nsverify.check_gradient(fn, Z2)
    assert v.status == "member" and v.exact and set(v.bouligand) == clarke
    assert v.stats["ray_pieces"] == 2
    assert set(v.certificate["witnesses"]["0"]) == {"ray", "orders"}
    assert verify_certificate(v.to_json()) and verify_certificate(v.to_json(), fn=fn)
    # float64 autograd along each vertex's own ray (both sides): the vertices are approached
    for i, wit in v.certificate["witnesses"].items():
        d = {int(k): F(x) for k, x in wit["ray"].items()}
        assert along(fn, d, 30) == tuple(float(x) for x in v.bouligand[int(i)])
    assert ray_mismatches(fn) == []


def test_a_side_of_measure_zero_stays_unknown():
    """never(): only (0, 1) is certified (every ray has w0^2 = t^2 d0^2 >= 0); AD (0, -1) stays in the outer
    bracket -- unknown, not member (and not_member is not derived from a ray that was not found)."""
    v = nsverify.check_gradient(never, Z2)
    assert v.status == "unknown" and v.bouligand == [(F(0), F(1))]
    assert set(v.outer) == {(F(0), F(1)), (F(0), F(-1))}
    assert ray_mismatches(never) == []


def test_several_sites_on_a_curved_program():
    v = nsverify.check_gradient(two_sites, Z2)
    clarke = {(F(1), F(-1)), (F(1), F(0)), (F(-1), F(-1)), (F(-1), F(0))}
    assert v.status == "member" and v.exact and set(v.bouligand) == clarke and v.stats["ray_pieces"] == 4
    assert verify_certificate(v.to_json(), fn=two_sites)
    assert ray_mismatches(two_sites) == []
    # independent of the oracle: float64 gradients at random points near 0 are the four vertices, up to 2 w0
    rng = random.Random(3)
    for _ in range(200):
        p = [F(rng.randint(-999, 999), 2**30) for _ in range(2)]
        g = autograd(two_sites, p)
        assert min(abs(g[0] - float(a)) + abs(g[1] - float(b)) for a, b in clarke) <= 2 * abs(float(p[0])) + 1e-12
    # a vector outside [-1, 1] x [-1, 0]: not_member, over the (now exact) Bouligand set
    bad = nsverify.check_gradient(two_sites, Z2, ad=[0.0, 0.5])
    assert bad.status == "not_member" and bad.certificate["over"] == "bouligand"
    assert verify_certificate(bad.to_json(), fn=two_sites)


def thin(w):
    """where(w0 w1 > 0, w0, -w0) + relu(w2 - 4 w3) + relu(5 w3 - w2) at 0 in R^4: the second-order site's sides
    (w0 w1 > 0 or < 0) combine with the four sign patterns of the two kink lines, all four open near 0 (two thin
    cones: 4 w3 < w2 < 5 w3 and 5 w3 < w2 < 4 w3).  Gradients (+-1, 0) x {(0, 1), (1, -4), (-1, 5), (0, 0)}: eight
    vertices; AD (-1, 0, 0, 0) is one of them."""
    return torch.where(w[0] * w[1] > 0, w[0], -w[0]) + torch.relu(w[2] - 4 * w[3]) + torch.relu(5 * w[3] - w[2])


def test_directions_inside_a_thin_first_order_cone(monkeypatch):
    from nsverify.oracle import jets

    Z4 = torch.zeros(4, dtype=D)
    clarke = {(F(s), F(0), F(a), F(b)) for s in (1, -1) for a, b in ((0, 1), (1, -4), (-1, 5), (0, 0))}
    v = nsverify.check_gradient(thin, Z4)
    assert v.status == "member" and v.exact and set(v.bouligand) == clarke
    ev = Evaluation(thin, Z4)
    en = enumerate_pieces(ev)
    assert certify_rays(ev, en.leaves) == 8
    for leaf in en.leaves:  # float64 autograd along each witness ray: exactly the vertex (the pieces are linear)
        assert along(thin, leaf.ray.direction, 20, 4) == tuple(float(x) for x in leaf.gradient)
    # the generic directions alone (|d_i| <= 3) never enter the thin cones with d0 d1 != 0
    monkeypatch.setattr(jets, "MAX_CONE_DIRECTIONS", 0)
    assert set(nsverify.check_gradient(thin, Z4).bouligand) < clarke


@pytest.mark.parametrize("fn", [
    lambda w: torch.exp(w[0]) * torch.where(w[0] ** 2 - w[1] ** 2 > 0, w[0], -w[0]),  # exp on a jet
    lambda w: torch.where(torch.tanh(w[0]) ** 2 - w[1] ** 2 > 0, w[0], -w[0]),  # tanh at a site
    lambda w: torch.where(torch.sigmoid(w[0]) * w[0] ** 2 - w[1] ** 2 > 0, w[0], -w[0]),
    lambda w: torch.sign(w[0] + 1) * torch.where(w[0] ** 2 - w[1] ** 2 > 0, w[0], -w[0]),  # sign reads a value
    lambda w: torch.nn.functional.softplus(w[0]) + torch.where(w[0] ** 2 - w[1] ** 2 > 0, w[0], -w[0]),
])
def test_the_ray_declines_what_it_does_not_know(fn):
    ev = Evaluation(fn, Z2)
    assert all(ray_piece(ev, d) is None for d in directions(2))
    v = nsverify.check_gradient(fn, Z2, on_limit="unknown")
    assert v.status == "unknown" and v.stats["ray_pieces"] == 0


def maxsq(w):
    """where(max(w0^2, w1^2) - 2 w1^2 > 0, w0, -w0): for |w0| > |w1| the quantity is w0^2 - 2 w1^2, positive iff
    |w0| > sqrt(2) |w1| (gradient (1, 0)); for |w0| < |w1| it is -w1^2 < 0 (gradient (-1, 0)).  Clarke hull{(1, 0),
    (-1, 0)}; the max's tie at 0 has identical first-order data (no branch), the comparison is second-order."""
    return torch.where(torch.maximum(w[0] ** 2, w[1] ** 2) - 2 * w[1] ** 2 > 0, w[0], -w[0])


def amaxsq(w):
    """maxsq() with the max as a reduction (amax over a stacked vector): the same function."""
    return torch.where(torch.stack([w[0] ** 2, w[1] ** 2]).amax() - 2 * w[1] ** 2 > 0, w[0], -w[0])


def max_and_product(w):
    """where(w0 w1 > 0, w0, -w0) + max(w0, w1): in the quadrants w0 w1 > 0 the gradient is (1, 0) + (1, 0) or
    (0, 1) by the larger entry: (2, 0) and (1, 1) (both occur in each of them); w0 > 0 > w1: (-1, 0) + (1, 0) =
    (0, 0); w0 < 0 < w1: (-1, 1).  AD: (-1, 0) + (1/2, 1/2) (maximum splits its tie evenly) = (-1/2, 1/2),
    the midpoint of (0, 0) and (-1, 1): a member."""
    return torch.where(w[0] * w[1] > 0, w[0], -w[0]) + torch.maximum(w[0], w[1])


@pytest.mark.parametrize("fn,clarke", [
    (maxsq, {(F(1), F(0)), (F(-1), F(0))}), (amaxsq, {(F(1), F(0)), (F(-1), F(0))}),
    (max_and_product, {(F(2), F(0)), (F(1), F(1)), (F(0), F(0)), (F(-1), F(1))})])
def test_selections_on_a_ray(fn, clarke):
    v = nsverify.check_gradient(fn, Z2)
    assert v.status == "member" and v.exact and set(v.bouligand) == clarke
    assert verify_certificate(v.to_json(), fn=fn)
    assert ray_mismatches(fn) == []


def test_a_tie_that_persists_stays_unknown():
    """where(max(w0^2, w1^2) - w1^2 > 0, w0, -w0): where |w0| < |w1| the quantity is identically 0 (the comparison
    is false on an open set: (-1, 0) is a Clarke gradient), but no ray gives it a strict sign: only (1, 0) is
    certified, AD (-1, 0) stays unknown."""
    fn = lambda w: torch.where(torch.maximum(w[0] ** 2, w[1] ** 2) - w[1] ** 2 > 0, w[0], -w[0])  # noqa: E731
    v = nsverify.check_gradient(fn, Z2)
    assert v.status == "unknown" and v.bouligand == [(F(1), F(0))]


def test_ray_witness_tampering_is_caught():
    v = nsverify.check_gradient(cubic, Z2)
    rec = v.to_dict()
    wit = rec["certificate"]["witnesses"]["0"]
    assert wit == {"ray": {"0": "-1"}, "orders": [3]}
    for bad in ({"ray": {"0": "1"}, "orders": [3]},  # the other side: another gradient
                {"ray": {"0": "-1"}, "orders": [2]},  # another order
                {"ray": {"1": "1"}, "orders": [3]}):  # w0^3 = 0 along e1: undecided
        r2 = json.loads(json.dumps(rec))
        r2["certificate"]["witnesses"]["0"] = bad
        assert verify_certificate(r2) and not verify_certificate(r2, fn=cubic)
    for bad in ({"ray": {}, "orders": [3]}, {"ray": {"0": "-1"}}, {"ray": {"0": "-1"}, "orders": "3"},
                {"ray": {"0": "-1"}, "orders": [99]}, {"ray": {"0": 0.5}, "orders": [3]},
                {"ray": {"0": "-1"}, "orders": [3], "x": 1}, {"ray": ["-1"], "orders": [3]}):
        r2 = json.loads(json.dumps(rec))
        r2["certificate"]["witnesses"]["0"] = bad
        assert not verify_certificate(r2) and not verify_certificate(r2, fn=cubic)


# ------------------------------------------------------------------------------------------------ property test
_MONOMIALS = [(2, 0), (1, 1), (0, 2), (3, 0), (2, 1), (1, 2), (0, 3)]  # degree >= 2: zero gradient at 0


def _poly(coeffs, w0, w1):
    return sum(c * w0 ** i * w1 ** j for c, (i, j) in zip(coeffs, _MONOMIALS) if c)


def _program(sites):
    """sum_j where(m_j(w) > 0, a_j . w, b_j . w) with m_j = q_j or max(q_j, p_j), q_j and p_j small polynomials
    with no term below degree 2 (the max ties at 0 with identical first-order data: the ray trace orders them)."""

    def fn(w):
        out = torch.zeros((), dtype=w.dtype)
        for coeffs, other, a, b in sites:
            m = _poly(coeffs, w[0], w[1])
            if other is not None:
                m = torch.maximum(m, _poly(other, w[0], w[1]))
            out = out + torch.where(m > 0, a[0] * w[0] + a[1] * w[1], b[0] * w[0] + b[1] * w[1])
        return out

    return fn


def _exact_m(site, p):
    coeffs, other, _, _ = site
    m = _poly(coeffs, p[0], p[1])
    return m if other is None else max(m, _poly(other, p[0], p[1]))


_coeffs = st.lists(st.integers(-2, 2), min_size=len(_MONOMIALS), max_size=len(_MONOMIALS)).filter(any)
_site = st.tuples(_coeffs, st.one_of(st.none(), _coeffs), st.tuples(st.integers(-2, 2), st.integers(-2, 2)),
                  st.tuples(st.integers(-2, 2), st.integers(-2, 2)))


@settings(max_examples=25, deadline=None)
@given(st.lists(_site, min_size=1, max_size=2), st.tuples(st.integers(-3, 3), st.integers(-3, 3)))
def test_random_polynomial_sites_against_float_autograd(sites, vector):
    """Every certified piece is approached along its witness ray by float64 autograd (exactly: the pieces are
    linear); every gradient sampled near 0 is an outer vector; for the exact AD and a random vector, a member
    verdict weighs only gradients float64 autograd confirmed, a not_member's h separates the tested vector from
    every sampled gradient."""
    fn = _program(sites)
    ev = Evaluation(fn, Z2)
    en = enumerate_pieces(ev)
    certify_rays(ev, en.leaves)
    confirmed = set()
    for leaf in en.leaves:
        if leaf.ray is not None:
            for k in (20, 28):
                assert along(fn, leaf.ray.direction, k) == tuple(float(x) for x in leaf.gradient)
            confirmed.add(tuple(float(x) for x in leaf.gradient))
    rng = random.Random(0)
    sampled = set()
    for _ in range(60):
        p = [F(rng.randint(-999, 999), 2**24) for _ in range(2)]
        if all(_exact_m(site, p) != 0 for site in sites):
            sampled.add(autograd(fn, p))
    for ad in (None, [float(x) for x in vector]):
        v = nsverify.check_gradient(fn, Z2, ad=ad)
        assert set(v.bouligand) == {tuple(lf.gradient) for lf in en.leaves if lf.inner}
        assert sampled <= {tuple(float(x) for x in g) for g in v.outer}
        if v.status == "member":
            assert verify_certificate(v.to_json(), fn=fn)
            lam = {int(i): F(x) for i, x in v.certificate["weights"].items()}
            assert all(sum(lam[i] * v.bouligand[i][c] for i in lam) == v.tested[c] for c in range(2))
            assert all(tuple(float(x) for x in v.bouligand[i]) in confirmed | sampled for i in lam)
        elif v.status == "not_member":
            h = [F(x) for x in v.certificate["h"]]
            top = sum(a * b for a, b in zip(h, v.tested))
            assert all(sum(a * F(b) for a, b in zip(h, g)) < top for g in sampled)


# --------------------------------------------------------------------------------------------------- mutation
def _last_nonzero(q):
    """A wrong sign rule: the *last* non-zero kept coefficient instead of the first."""
    got = None
    for k, c in enumerate(q.c):
        if c != 0:
            got = (1 if c > 0 else -1, k)
    return got


def test_a_wrong_sign_rule_is_caught(monkeypatch):
    """where(w0^2 - w0^3 > 0, w1, -w1): q = t^2 (1 -+ t) > 0 along +-e0, so Clarke = {(0, 1)} and AD (0, -1) is not
    certified (unknown).  With the mutant rule the ray +e0 reads -t^3 and certifies (0, -1): a wrong member,
    which the float64 check along the ray catches."""
    fn = lambda w: torch.where(w[0] ** 2 - w[0] ** 3 > 0, w[1], -w[1])  # noqa: E731
    assert ray_mismatches(fn) == []
    assert nsverify.check_gradient(fn, Z2).status == "unknown"
    monkeypatch.setattr(ops_kinks, "jet_sign", _last_nonzero)
    assert ray_mismatches(fn) != []
    assert nsverify.check_gradient(fn, Z2).status == "member"  # the wrong verdict the check above exposes
