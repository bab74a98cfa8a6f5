"""The multiplicative case (inner/outer bracket), check_module, conventions of the exact interpreter."""

from __future__ import annotations

import math
from fractions import Fraction

import torch

import nsverify
from nsverify.oracle import exact_gradient, exact_module_gradient, verify_certificate
from nsverify.oracle.membership import project

F = Fraction
Z2 = torch.zeros(2, dtype=torch.float64)


def curved(w):
    """relu(w1 - w0^2) - relu(-w1 - w0^2): the pattern |w1| < w0^2 has an empty first-order cone."""
    return torch.relu(w[1] - w[0] ** 2) - torch.relu(-w[1] - w[0] ** 2)


def _segment_distance(t, a, b) -> Fraction:
    """The exact Euclidean distance from t to the segment [a, b] (Fractions; a square root of a square)."""
    d = [y - x for x, y in zip(a, b)]
    dd = sum(x * x for x in d)
    lam = min(max(sum((x - y) * z for x, y, z in zip(t, a, d)) / dd, F(0)), F(1)) if dd else F(0)
    sq = sum((x - y - lam * z) ** 2 for x, y, z in zip(t, a, d))
    root = F(math.isqrt(sq.numerator), math.isqrt(sq.denominator))
    assert root * root == sq, f"the distance {sq}^(1/2) is not rational"
    return root


def test_bracket_inner_outer():
    v = nsverify.check_gradient(curved, Z2)
    assert not v.exact
    # certified: both sides of the two smooth kinks (0, 1), and the curved region |w1| < w0^2 (0, 0): its
    # first-order cone is empty, but along the ray w + t e0 both kink arguments are -t^2 < 0 (nsverify.oracle.jets)
    assert v.bouligand == [(F(0), F(0)), (F(0), F(1))]
    assert (F(0), F(2)) in v.outer  # the empty pattern w1 > w0^2 and -w1 > w0^2: only in the outer set
    # AD (ReLU'(0) = 0) gives (0, 0): a true Clarke subgradient (f = 0 where |w1| < w0^2), certified by that ray
    assert v.status == "member" and v.certificate["witnesses"]["0"] == {"ray": {"0": "1"}, "orders": [2, 2]}
    assert verify_certificate(v.to_json(), fn=curved)
    # (0, 3/2) lies between (0, 1) and the outer-only (0, 2): in the outer hull, 1/2 away from the inner one
    v = nsverify.check_gradient(curved, Z2, ad=[0.0, 1.5])
    assert v.status == "unknown"
    t = (F(0), F(3, 2))
    # exactly: t = (0, 1)/2 + (0, 2)/2 is in the outer hull (distance 0); the inner hull is the segment
    # [(0, 0), (0, 1)], whose nearest point to t is (0, 1) (distance 1/2)
    assert (F(0), F(1)) in v.outer and (F(0), F(2)) in v.outer
    assert tuple((a + b) / 2 for a, b in zip((F(0), F(1)), (F(0), F(2)))) == t
    exact = (F(0), _segment_distance(t, *v.bouligand))
    assert exact == (0, F(1, 2))
    # distance_bounds are floats from a float projection (Wolfe's algorithm: least squares and a norm, whose
    # last bits depend on the CPU's kernels: 2.2e-16 instead of 0 with AVX2): equal to the exact distances up to
    # float64 rounding on data of magnitude <= 2, far below 2^-40 of it
    scale = max(abs(x) for vert in [*v.outer, t] for x in vert)
    assert all(abs(got - float(want)) <= 2.0**-40 * float(scale) for got, want in zip(v.distance_bounds, exact)), \
        (v.distance_bounds, exact)


def test_bracket_member_and_not_member_are_certified():
    v = nsverify.check_gradient(curved, Z2, ad=[0.0, 1.0])
    assert v.status == "member" and verify_certificate(v.to_json())
    v = nsverify.check_gradient(curved, Z2, ad=[5.0, 5.0])
    assert v.status == "not_member" and v.certificate["over"] == "outer"
    assert verify_certificate(v.to_json())


def _net():
    m = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.ReLU(), torch.nn.Linear(3, 1)).double()
    with torch.no_grad():
        m[0].weight.copy_(torch.tensor([[1.0, 1.0], [1.0, -1.0], [0.5, 2.0]]))
        m[0].bias.copy_(torch.tensor([-2.0, 0.0, 1.0]))  # neurons 0 and 1 sit exactly at their kink
        m[2].weight.copy_(torch.tensor([[1.0, -2.0, 0.5]]))
        m[2].bias.zero_()
    X = torch.tensor([[1.0, 1.0]], dtype=torch.float64)
    y = torch.tensor([[0.0]], dtype=torch.float64)
    return m, X, y, lambda o, t: ((o - t) ** 2).mean()


def test_check_module_inputs_and_parameters():
    m, X, y, loss = _net()
    vi = nsverify.check_module(m, loss, X, y, wrt="inputs")
    assert vi.exact and vi.status == "member" and len(vi.bouligand) == 4
    assert len(vi.kinks) == 2 and {k.op for k in vi.kinks} == {"relu"}
    vp = nsverify.check_module(m, loss, X, y, wrt="parameters", shortcuts=False)
    assert vp.exact and vp.status == "member"
    # the layered shortcut (Park et al.'s Theorem 5: one sample, so z_0's one column is independent) agrees
    vs = nsverify.check_module(m, loss, X, y, wrt="parameters")
    assert vs.status == "member" and vs.certificate["kind"] == "park_theorem5" and vs.exact_ad == vp.exact_ad
    assert vp.ad == tuple(float(x) for x in vp.exact_ad)
    # the exact AD matches PyTorch's autograd on this dyadic example
    m.zero_grad()
    loss(m(X), y).backward()
    flat = torch.cat([p.grad.reshape(-1) for p in m.parameters()])
    assert tuple(flat.tolist()) == vp.ad


def test_exact_module_gradient_conventions():
    m, X, y, loss = _net()
    g0 = exact_module_gradient(m, loss, X, y)
    g1 = exact_module_gradient(m, loss, X, y, rules={"relu": 1})
    gh = exact_module_gradient(m, loss, X, y, rules={"relu": F(1, 2)})
    assert g0 != g1
    assert all(a + b == 2 * c for a, b, c in zip(g0, g1, gh))  # linear in ReLU'(0) here (one kink per path)


def test_maxpool_conventions():
    x = torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=torch.float64)

    def f(w):  # a 2x2 window with a 4-way tie at w = 0
        return torch.nn.functional.max_pool2d((w[0] * x).reshape(1, 1, 2, 2) * 0 + w[0], 2).sum() + (
            torch.nn.functional.max_pool1d(torch.stack([w[0], 2 * w[0], 3 * w[1]]).reshape(1, 1, 3), 3).sum()
        )

    w = torch.zeros(2, dtype=torch.float64)
    native = exact_gradient(f, w)
    minimal = exact_gradient(f, w, rules={"max_pool2d": "minimal"})
    hybrid = exact_gradient(f, w, rules={"max_pool2d": ("hybrid", 2)})
    assert native == (F(2), F(0))  # first index: w0
    assert minimal == (F(1) + F(1, 3) * 3, F(1))  # even split over (w0, 2 w0, 3 w1)
    assert hybrid == tuple(-a + 2 * b for a, b in zip(native, minimal))


def test_wolfe_projection():
    import numpy as np

    assert np.allclose(project([0, 0], [[0, 0], [0, 1], [0, 2]]), [0, 0])
    assert np.allclose(project([1, 1], [[0, 0], [1, 0], [0, 1]]), [0.5, 0.5])
    assert np.allclose(project([5, 5], [[0, 0], [0, 1], [0, 2]]), [0, 2])


def _ce_net():
    m = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.ReLU(), torch.nn.Linear(3, 3)).double()
    with torch.no_grad():
        m[0].weight.copy_(torch.tensor([[1.0, 1.0], [1.0, -1.0], [0.5, 2.0]]))
        m[0].bias.copy_(torch.tensor([-2.0, 0.0, 1.0]))
        m[2].weight.copy_(torch.tensor([[1.0, -2.0, 0.5], [0.0, 1.0, 1.0], [1.0, 1.0, -1.0]]))
        m[2].bias.zero_()
    return m, torch.tensor([[1.0, 1.0]], dtype=torch.float64), torch.tensor([1])


def test_cross_entropy_at_kinks_certified_by_adjacent_piece():
    """Irrational gradients (log_softmax): AD's own choices form an adjacent piece -> member, exactly."""
    m, X, y = _ce_net()
    for wrt in ("inputs", "parameters"):
        v = nsverify.check_module(m, torch.nn.functional.cross_entropy, X, y, wrt=wrt, shortcuts=False)
        assert v.status == "member" and v.certificate["kind"] == "adjacent_piece"
        assert verify_certificate(v.to_json())
        assert any(hasattr(x, "lo") for x in v.exact_ad)  # really irrational
        # PyTorch's float gradient lies inside the exact intervals' neighbourhood
        assert all(abs(float(a) - b) < 1e-12 for a, b in zip(v.exact_ad, v.ad))


def test_no_adjacent_piece_for_even_split_or_mid_rules():
    """amax's even split and abs'(0) = 0 are not piece choices: no adjacent_piece certificate."""
    f = lambda w: torch.exp(torch.amax(torch.stack([w[0], -w[0]])))  # noqa: E731
    v = nsverify.check_gradient(f, torch.zeros(1, dtype=torch.float64))
    assert v.status == "member" and v.certificate["kind"] != "adjacent_piece"  # 0 in [-1, 1] (exp(0) = 1)
    from nsverify.oracle.interp import Evaluation
    from nsverify.oracle.pieces import follow_ad

    z = torch.zeros(1, dtype=torch.float64)
    assert follow_ad(Evaluation(f, z)) is None
    assert follow_ad(Evaluation(lambda w: w[0].abs(), z)) is None
    assert follow_ad(Evaluation(lambda w: torch.relu(w[0]), z)) is not None
