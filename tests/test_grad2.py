"""Second order at kinks and ties (issue 37): the pieces' gradients and Hessians re-derived from float64 differences
of VALUES (no AD), and PyTorch's second-order results checked against expectations derived by hand from its
first-order rules."""
from __future__ import annotations

import random
from fractions import Fraction

import pytest
import torch

from nsverify.conventions import grad2 as G
from nsverify.errors import BadArgumentError

T = 2.0 ** -8  # into a piece's open set
H = 2.0 ** -16  # difference step, far inside the piece (second differences: error ~ eps / H^2 ~ 1e-6)
TOL_G = 2.0 ** -4  # a quadratic piece's gradient moves by |Hessian| T over T; pieces differ by >= 1/2
TOL_H = 2.0 ** -6  # elu's exp piece moves by ~T; pieces' Hessians differ by >= 1/2


def _f(case, y):
    with torch.no_grad():
        return case.fn(y).item()


def _fd(case, y):
    """(gradient, Hessian) at ``y`` by central first and second differences of values."""
    n = y.numel()
    e = torch.eye(n, dtype=torch.float64) * H
    g = [(_f(case, y + e[i]) - _f(case, y - e[i])) / (2 * H) for i in range(n)]
    hs = [[(_f(case, y + e[i] + e[j]) - _f(case, y + e[i] - e[j]) - _f(case, y - e[i] + e[j])
            + _f(case, y - e[i] - e[j])) / (4 * H * H) for j in range(n)] for i in range(n)]
    return g, hs


def _x(case, shift=None):
    x = torch.tensor([float(v) for v in case.inputs], dtype=torch.float64)
    return x if shift is None else x + shift


def _near(a, b, tol):
    return all(abs(float(u) - float(v)) <= tol for u, v in zip(a, b))


def _near_h(a, b):
    return all(_near(r, s, TOL_H) for r, s in zip(a, b))


def test_at_least_ten_ops_each_with_two_pieces():
    assert len({c.op for c in G.CASES}) >= 10
    for c in G.CASES:
        assert len(c.pieces) >= 2 and len({p.hessian for p in c.pieces}) == len(c.pieces), c.name


@pytest.mark.parametrize("case", G.CASES, ids=lambda c: c.name)
def test_each_piece_is_the_one_sided_gradient_and_hessian(case):
    for p in case.pieces:
        d = torch.tensor([float(v) for v in p.direction], dtype=torch.float64)
        g, h = _fd(case, _x(case, T * d))
        assert _near(g, p.gradient, TOL_G), (case.name, p.label, g)
        assert _near_h(h, p.hessian), (case.name, p.label, h)


@pytest.mark.parametrize("case", G.CASES, ids=lambda c: c.name)
def test_no_piece_is_missing(case):
    rng = random.Random(37)
    for _ in range(12):
        d = torch.tensor([rng.gauss(0, 1) for _ in case.inputs], dtype=torch.float64)
        _, h = _fd(case, _x(case, T * d / d.norm()))
        assert any(_near_h(h, p.hessian) for p in case.pieces), (case.name, d.tolist(), h)


Q = Fraction(1, 2)
# What PyTorch's second-order AD returns, derived by hand from its first-order rules (the derivative of the
# backward formula, whose masks are constants): (Bouligand piece or None, in the hull?, consistent piece or None)
BY_HAND = {
    "relu": ("left", "yes", "left"),  # d/dx [relu(x) + x 1{x>0}] = 2 * 1{0>0} = 0
    "abs": (None, "yes", None),  # 2 sign(0) = 0: between -2 and 2, the Hessian of neither side
    "clamp": ("inside", "yes", "inside"),  # clamp passes at its bound: 2 * 1 = 2, gradient 1 + 1 = 2
    "hardtanh": ("clipped", "yes", "clipped"),  # hardtanh's mask is strict: 0; gradient hardtanh(-1) = -1
    "leaky_relu": ("left", "yes", "left"),  # 2 * slope = 1/2
    # elu's backward masks x <= 0 (gradient 1 from either side), its double backward (FunctionsManual's
    # elu_double_backward) masks x < 0: the exp piece's curvature is dropped at 0, the linear piece's Hessian 0
    "elu": ("right", "yes", "right"),
    "smooth_l1_loss": ("linear", "yes", "linear"),  # |x| < beta is strict: at |x| = beta sign(x), derivative 0
    "maximum": (None, "no", None),  # the even split: 2 (1/2,1/2)^T (1/2,1/2), off-diagonal 1/2 in no piece
    "amax": (None, "no", None),  # the same even split
    "max_dim": ("x0", "yes", "x0"),  # one index, the first
    "max_pool1d": ("x0", "yes", "x0"),
    "sort": ("x0<x1", "yes", "x0<x1"),  # a stable order keeps x0 first
    "topk": ("x0", "yes", "x0"),
    "margin_ranking_loss": ("active", "yes", "active"),  # clamp_min passes at the bound: 2 (-1,1)^T (-1,1)
}


@pytest.mark.parametrize("mode", G.MODES)
def test_second_order_results_match_the_hand_derivations(mode):
    cells = {c.case: c for c in G.run_grad2(list(BY_HAND), [mode])}
    for name, want in BY_HAND.items():
        c = cells[name]
        assert c.error is None, (name, mode, c.error)
        assert (c.bouligand, c.in_hull, c.consistent) == want, (name, mode, c.hessian)
    assert cells["maximum"].hessian == [[0.5, 0.5], [0.5, 0.5]]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_the_hand_derivations_hold_in_every_dtype(dtype):
    """Every Hessian here is a small dyadic matrix, exact in every dtype: the same verdicts."""
    cells = {c.case: c for c in G.run_grad2(list(BY_HAND), ["double_backward", "fwd_over_rev"], [dtype])}
    for name, want in BY_HAND.items():
        assert (cells[name].bouligand, cells[name].in_hull, cells[name].consistent) == want, (name, dtype)
    (mm,) = [c for c in G.run_grad2(["multi_margin_loss"], ["double_backward"], [dtype])]
    assert mm.error  # float32: no double backward; 16-bit: no CPU kernel at all -- recorded, not raised


def test_multi_margin_loss_second_order_is_refused_and_said_so():
    cells = G.run_grad2(["multi_margin_loss"])
    assert all(c.error and c.in_hull == "n/a" for c in cells)
    (a,) = G.agreement(cells)
    assert a["agree"] is None and set(a["errors"]) == set(G.MODES)


def test_reverse_over_reverse_and_forward_over_reverse_agree_exactly():
    agree = {a["case"]: a["agree"] for a in G.agreement(G.run_grad2(list(BY_HAND)))}
    assert agree == {name: True for name in BY_HAND}


def test_judge_is_exact_and_agreement_can_fail():
    case = G.get("abs")
    assert G.judge_hessian(case, [0], [[2]]) == ("right", "yes", "right")
    assert G.judge_hessian(case, [1], [[2]]) == ("right", "yes", None)  # the gradient of no piece with it
    assert G.judge_hessian(case, [0], [[Fraction(5, 2)]]) == (None, "no", None)
    rows = [G.Cell2("abs", "abs", "float64", "double_backward", [[0.0]], [0.0], None, "yes", None),
            G.Cell2("abs", "abs", "float64", "fwd_over_rev", [[2.0]], [0.0], "right", "yes", "right")]
    assert G.agreement(rows)[0]["agree"] is False


def test_bad_mode_names_the_choices():
    with pytest.raises(BadArgumentError, match="choose from"):
        G.run_grad2(None, ["triple_backward"])
    with pytest.raises(BadArgumentError, match="choose from"):
        G.run_grad2(["nope"])


def test_cli_grad2_json(tmp_path):
    import json

    from nsverify.conventions.cli import main_conventions

    out = tmp_path / "g.json"
    assert main_conventions(["--grad2", "--dtype", "float64", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert len(data["grad2"]) == len(G.CASES) * len(G.MODES)
    assert {a["case"] for a in data["grad2_agreement"]} == {c.name for c in G.CASES}
