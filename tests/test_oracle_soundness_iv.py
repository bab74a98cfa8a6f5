"""Soundness, fourth round: programs that differentiate inside fn, jumps at ties, and the JSON-only certificate check.

A derivative of a kink is a step: relu'(u) is 0 for u < 0 and 1 for u > 0. A program that reads it -- a gradient
penalty (WGAN-GP), a Hessian-vector product, ``create_graph=True``, ``jacrev`` inside fn -- jumps where u depends on
w and sits exactly at the kink, so fn is discontinuous there and has no Clarke set (Clarke's subdifferential needs a
locally Lipschitz function): the oracle refuses, it never answers member or not_member. Off the kink the step is
locally constant and the oracle decides as usual; the expected values there are derived by hand in each test.
A comparison at a tie selecting between values that differ there (``torch.where(w > 0, 1., 0.)`` at 0) jumps too.
"""
from __future__ import annotations

import json
from fractions import Fraction

import pytest
import torch
import torch.nn.functional as tF
from torch import nn

import nsverify
from nsverify.errors import UnsupportedOpError
from nsverify.oracle import certificates
from nsverify.oracle.certificates import KINDS, verify_certificate
from nsverify.oracle.interp import exact_forward
from nsverify.oracle.jsonio import enc

F = Fraction
D = torch.float64
JUMP = "discontinuous at w"


def _w(*xs) -> torch.Tensor:
    return torch.tensor([float(x) for x in xs], dtype=D)


def _check(fn, w, **kw):
    return nsverify.check_gradient(fn, w, progress=False, **kw)


# ------------------------------------------------------------------------------ a gradient penalty (WGAN-GP)
def _critic(w, x):
    """A one-unit ReLU critic: c * relu(a * x + b) with w = (a, b, c)."""
    return w[2] * torch.relu(w[0] * x + w[1])


def _penalty_func_grad(w):
    """(d critic / dx - 1)^2 at x = 1, the input gradient taken with torch.func.grad inside fn."""
    g = torch.func.grad(lambda x: _critic(w, x))(torch.tensor(1.0, dtype=D))
    return (g - 1) ** 2


def _penalty_create_graph(w):
    """The same penalty through torch.autograd.grad(..., create_graph=True)."""
    x = torch.tensor(1.0, dtype=D, requires_grad=True)
    (g,) = torch.autograd.grad(_critic(w, x), x, create_graph=True)
    return (g - 1) ** 2


PENALTIES = [_penalty_func_grad, _penalty_create_graph]


@pytest.mark.parametrize("rules", [None, {"relu": 1}])
@pytest.mark.parametrize("penalty", PENALTIES)
def test_gradient_penalty_at_a_kink_is_refused(penalty, rules):
    """a * 1 + b = 0: the penalty is (0 - 1)^2 = 1 at w and for a + b < 0, but (3 - 1)^2 = 4 for a + b > 0
    (also with the rule ReLU'(0) = 1, which only moves the value at w to one side)."""
    with pytest.raises(UnsupportedOpError, match=f"{JUMP}: the derivative of relu at a kink is a step; no Clarke"):
        _check(penalty, _w(1, -1, 3), rules=rules)


@pytest.mark.parametrize("penalty", PENALTIES)
def test_gradient_penalty_off_a_kink_is_decided_exactly(penalty):
    """a + b = 3/2 > 0: the penalty is (c a - 1)^2 near w, with gradient (2 (ca - 1) c, 0, 2 (ca - 1) a) =
    (12, 0, 4) at (1, 1/2, 3); a + b = -1 < 0: the unit is dead, the penalty is the constant 1."""
    v = _check(penalty, _w(1, F(1, 2), 3))
    assert v.status == "member" and v.exact and v.exact_ad == (12, 0, 4) and v.value == 4
    v = _check(penalty, _w(1, -2, 3))
    assert v.status == "member" and v.exact_ad == (0, 0, 0) and v.value == 1


def test_gradient_penalty_of_a_batch_refuses_only_the_sample_on_the_kink():
    """Two samples x = 1 and x = 2 through one unit: at (a, b) = (1, -2) the second sample's pre-activation is 0
    (refused); at (1, -1/2) both are positive, the penalty is sum_x (c a - 1)^2 = 2 (c a - 1)^2."""
    def fn(w):
        x = torch.tensor([1.0, 2.0], dtype=D, requires_grad=True)
        (g,) = torch.autograd.grad(_critic(w, x).sum(), x, create_graph=True)
        return ((g - 1) ** 2).sum()

    with pytest.raises(UnsupportedOpError, match=JUMP):
        _check(fn, _w(1, -2, 3))
    v = _check(fn, _w(1, F(-1, 2), 3))
    assert v.status == "member" and v.exact_ad == (24, 0, 8)


class _PenaltyModule(nn.Module):
    """A critic Linear(1, 2), ReLU, Linear(2, 1) whose forward returns its input-gradient penalty (g - 1)^2."""

    def __init__(self, b0: float):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(1, 2), nn.ReLU(), nn.Linear(2, 1)).double()
        with torch.no_grad():
            self.net[0].weight.copy_(torch.tensor([[1.0], [2.0]]))
            self.net[0].bias.copy_(torch.tensor([b0, 0.5]))
            self.net[2].weight.copy_(torch.tensor([[3.0, 1.0]]))
            self.net[2].bias.zero_()

    def forward(self, x):
        x = x.detach().requires_grad_(True)
        (g,) = torch.autograd.grad(self.net(x).sum(), x, create_graph=True)
        return (g - 1) ** 2


@pytest.mark.parametrize("shortcuts", [True, False])
def test_check_module_of_a_penalty_module(shortcuts):
    """x = 1: unit 0's pre-activation 1 + b0 is 0 for b0 = -1 (refused, also where Park's layered decision is
    tried first); for b0 = -1/2 both units are alive, g = 3 * 1 + 1 * 2 = 5 and the penalty (g - 1)^2 = 16 has
    gradient 2 (g - 1) dg = 8 x (W2_0, W2_1, 0, 0, W1_0, W1_1, 0) = (24, 8, 0, 0, 8, 16, 0) in the order of
    named_parameters()."""
    x = torch.tensor([[1.0]], dtype=D)
    loss = lambda o, t: o.sum()  # noqa: E731
    with pytest.raises(UnsupportedOpError, match=JUMP):
        nsverify.check_module(_PenaltyModule(-1.0), loss, x, None, progress=False, shortcuts=shortcuts)
    v = nsverify.check_module(_PenaltyModule(-0.5), loss, x, None, progress=False, shortcuts=shortcuts)
    assert v.status == "member" and v.exact_ad == (24, 8, 0, 0, 8, 16, 0) and v.value == 16


# ---------------------------------------------------------------------------------- Hessian-vector products
def _hvp_sum(w):
    """sum(H u) for f = sum(relu(w)^3) / 6 and u = (1, ..., 1), by reverse over reverse: H u = relu(w), so the
    program is sum(relu(w)) off the kinks."""
    f = (torch.relu(w) ** 3).sum() / 6
    (g,) = torch.autograd.grad(f, w, create_graph=True)
    (hu,) = torch.autograd.grad((g * torch.ones_like(w)).sum(), w, create_graph=True)
    return hu.sum()


def _hvp_entry(w):
    return _hvp_sum(w.clone().requires_grad_(True))


def test_hessian_vector_product_off_the_kinks_is_decided():
    v = _check(_hvp_entry, _w(F(1, 2), -1, 2))
    assert v.status == "member" and v.exact_ad == (1, 0, 1) and v.value == F(5, 2)


def test_hessian_vector_product_at_a_kink_is_refused():
    """At w_1 = 0 the pieces of relu's step are read where its argument depends on w (here times a factor that
    is 0 at w but not constant): refused, never decided from one side."""
    with pytest.raises(UnsupportedOpError, match="relu"):
        _check(_hvp_entry, _w(F(1, 2), 0, 2))


# --------------------------------------------------------------------------------------- jacrev inside fn
def _jacobian_trace(w):
    """trace of the Jacobian of v -> relu(v) * v: 2 relu(v) on the diagonal (0 where v < 0)."""
    return torch.func.jacrev(lambda v: torch.relu(v) * v)(w).diagonal().sum()


def test_jacrev_inside_fn_off_the_kinks_is_decided():
    """sum 2 relu(w_i) at (1/2, -1, 2) is 5, gradient (2, 0, 2): jacrev's basis, written through
    ``diagonal().fill_(1)``, must reach the exact tensor (a read-only diagonal would leave it 0)."""
    v = _check(_jacobian_trace, _w(F(1, 2), -1, 2))
    assert v.status == "member" and v.exact_ad == (2, 0, 2) and v.value == 5


def test_jacrev_inside_fn_at_a_kink_is_refused():
    with pytest.raises(UnsupportedOpError, match=JUMP):
        _check(lambda w: torch.func.jacrev(torch.relu)(w).sum(), _w(0, 1))


@pytest.mark.parametrize("offset,dims", [(0, (0, 1)), (1, (0, 1)), (-1, (0, 1)), (0, (1, 2)), (2, (-1, 0)),
                                         (-2, (2, 1))])
def test_diagonal_is_exact(offset, dims):
    """aten.diagonal (and its backward) against PyTorch's on a 3-d tensor of exact values."""
    x = torch.arange(2 * 3 * 4, dtype=D).reshape(2, 3, 4) / 8 - 1
    got = exact_forward(lambda t: torch.diagonal(t, offset, *dims), x)
    assert got.tolist() == _fr(torch.diagonal(x, offset, *dims).tolist())

    def fn(w):
        return (torch.diagonal(w.reshape(2, 3, 4), offset, *dims) ** 2).sum()

    wx = x.reshape(-1).clone().requires_grad_(True)
    (want_g,) = torch.autograd.grad(fn(wx), wx)
    v = _check(fn, x.reshape(-1))
    assert v.status == "member" and v.exact_ad == tuple(F(g) for g in want_g.tolist())


def _fr(x):
    return [_fr(y) for y in x] if isinstance(x, list) else F(x)


def test_in_place_writes_through_a_diagonal_reach_the_tensor():
    def fn(w):
        m = torch.zeros(3, 3, dtype=D) * w[0]  # an exact tensor
        m.diagonal().copy_(w)
        return (m * torch.arange(9, dtype=D).reshape(3, 3)).sum()

    v = _check(fn, _w(1, 2, 3))
    assert v.exact_ad == (0, 4, 8) and v.value == 0 * 1 + 4 * 2 + 8 * 3


# --------------------------------------------------------------------------- other steps: registry backward ops
@pytest.mark.parametrize("act,kink,off", [
    (tF.hardtanh, 1, F(1, 2)),  # hardtanh_backward: a step of 1 at +-1
    (lambda u: tF.leaky_relu(u, 0.25), 0, F(-1, 2)),  # leaky_relu_backward: a step 1/4 -> 1 at 0
    (lambda u: tF.threshold(u, 0.5, 0.0), F(1, 2), 1),  # threshold_backward on its input
    (tF.relu6, 6, 1),  # hardtanh_backward with bounds 0 and 6
])
def test_double_backward_through_a_kink_is_refused_and_decided_off_it(act, kink, off):
    """fn(w) = w * act'(w) (act's derivative, taken inside fn): a step at the kink, a multiple of w elsewhere."""
    def fn(w):
        (d,) = torch.autograd.grad(act(w).sum(), w, create_graph=True)
        return (w * d).sum()

    def entry(w):
        return fn(w.clone().requires_grad_(True))

    with pytest.raises(UnsupportedOpError, match=JUMP):
        _check(entry, _w(kink))
    wx = _w(off).requires_grad_(True)
    slope = torch.autograd.grad(act(wx).sum(), wx)[0].item()
    v = _check(entry, _w(off))
    assert v.status == "member" and v.exact_ad == (F(slope),) and v.value == F(slope) * off


def test_double_backward_through_abs_at_its_kink_is_refused():
    """abs's backward is grad * sgn(x): sgn of a value that depends on w, exactly 0 at w."""
    def fn(w):
        (d,) = torch.autograd.grad(torch.abs(w).sum(), w, create_graph=True)
        return (w * d).sum()

    with pytest.raises(UnsupportedOpError, match=f"{JUMP}: sign"):
        _check(lambda w: fn(w.clone().requires_grad_(True)), _w(0))


# ---------------------------------------------------------------------------------------- sign and where
def test_sign_of_w_at_zero_is_refused_and_decided_elsewhere():
    with pytest.raises(UnsupportedOpError, match=f"{JUMP}: sign"):
        _check(lambda w: torch.sign(w).sum(), _w(0))
    with pytest.raises(UnsupportedOpError, match=JUMP):  # second order: w^2 depends on w although its slope is 0
        _check(lambda w: torch.sign(w * w).sum(), _w(0))
    v = _check(lambda w: (torch.sign(w) * w).sum(), _w(F(1, 2), -1))  # |w|
    assert v.status == "member" and v.exact_ad == (1, -1)


def test_where_on_a_tie_that_jumps_is_refused():
    """where(w > 0, 1, 0) is 0 at 0 and 1 for w > 0: the piece w > 0 tends to 1, not f(0) = 0."""
    with pytest.raises(UnsupportedOpError, match=f"{JUMP}: f\\(w\\) = 0, but on the piece .* tends to 1"):
        _check(lambda w: torch.where(w > 0, 1.0, 0.0).sum(), _w(0))
    with pytest.raises(UnsupportedOpError, match=JUMP):  # ge: f(0) = 1, the piece w < 0 tends to 0
        _check(lambda w: torch.where(w[0] >= w[1], 2 * w[0] + 1, w[1]).sum(), _w(0, 0))


def test_where_on_a_tie_that_is_continuous_is_still_decided():
    """where(w > 0, w, 0) = relu(w): Clarke set [0, 1] at 0, AD's 0 is a member."""
    v = _check(lambda w: torch.where(w > 0, w, 0.0).sum(), _w(0))
    assert v.status == "member" and v.exact and sorted(v.bouligand) == [(0,), (1,)]
    v = _check(lambda w: torch.where(w > 0, 1.0, 0.0).sum() + w.sum(), _w(F(1, 2)))  # off the tie: constant step
    assert v.status == "member" and v.exact_ad == (1,)


def test_a_jump_on_an_uncertified_piece_is_unknown():
    """w^2 > 0 at 0: a second-order tie whose pieces the first-order cones cannot certify; on the piece where
    the comparison holds the value tends to 1, not f(0) = 0: "unknown", never member."""
    v = _check(lambda w: torch.where(w * w > 0, 1.0, 0.0).sum() + w.sum(), _w(0), on_limit="unknown")
    assert v.status == "unknown" and "may be discontinuous at w" in v.reason


def test_max_pool_index_routing_a_gradient_inside_fn_at_a_tie_is_refused():
    """The gradient of max(w_0, w_1) read inside fn routes 1 to the winner: at a tie the pieces' values differ."""
    def fn(w):
        (g,) = torch.autograd.grad(torch.max(w), w, create_graph=True)
        return g[0] * 3 + g[1]

    def entry(w):
        return fn(w.clone().requires_grad_(True))

    with pytest.raises(UnsupportedOpError, match=JUMP):
        _check(entry, _w(1, 1))
    v = _check(entry, _w(2, 1))
    assert v.status == "member" and v.exact_ad == (0, 0) and v.value == 3


# ------------------------------------------------------------------------------------- PReLU to JSON
def test_prelu_verdict_at_a_kink_serialises_and_round_trips():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(2, 2), nn.PReLU()).double()
    with torch.no_grad():
        model[0].weight.copy_(torch.tensor([[1.0, -1.0], [0.5, 0.25]]))
        model[0].bias.zero_()
    x = torch.tensor([[1.0, 1.0]], dtype=D)  # unit 0's pre-activation is exactly 0: a kink
    v = nsverify.check_module(model, lambda out, y: out.sum(), x, None, progress=False)
    assert any(k.op == "prelu" for k in v.kinks)
    assert all(k.float_tie is None or type(k.float_tie) is bool for k in v.kinks)
    text = json.dumps(json.loads(v.to_json()))
    assert v.status in ("member", "not_member")
    assert verify_certificate(text), verify_certificate(text)
    assert verify_certificate(v.to_dict(), fn=nsverify.oracle.module_function(
        model, lambda out, y: out.sum(), x, None)[0])


def test_to_json_accepts_numpy_scalars():
    import numpy as np

    v = _check(lambda w: torch.relu(w).sum(), _w(0))
    v.stats["np"] = np.float64(0.5)
    v.kinks[0].float_tie = np.bool_(True)
    v.kinks[0].extra["n"] = np.int64(3)
    d = json.loads(v.to_json())
    assert d["stats"]["np"] == 0.5 and d["kinks"][0]["float_tie"] is True and d["kinks"][0]["extra"]["n"] == 3


# ------------------------------------------------------------------ the JSON-only check: the tested vector
def _mlp() -> nn.Module:
    """Linear(2, 3), ReLU, Linear(3, 1): units 0 and 1 at their kink for the input (1, 1)."""
    m = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1)).double()
    with torch.no_grad():
        m[0].weight.copy_(torch.tensor([[1.0, 1.0], [1.0, -1.0], [0.5, 2.0]]))
        m[0].bias.copy_(torch.tensor([-2.0, 0.0, 1.0]))
        m[2].weight.copy_(torch.tensor([[1.0, -2.0, 0.5]]))
        m[2].bias.zero_()
    return m


def _records() -> dict:
    """One valid record per certificate kind the tests can produce (kind -> record dict)."""
    out = {}

    def add(v):
        if v.certificate:
            out.setdefault((v.certificate["kind"], v.tested_is), v.to_dict())

    relu2 = lambda w: torch.relu(w[0]) + torch.relu(w[1])  # noqa: E731
    add(_check(lambda w: torch.relu(w).sum(), _w(0)))  # convex weights
    add(_check(lambda w: torch.relu(w).sum(), _w(0), ad=[F(1, 3)]))  # convex weights, the caller's vector
    add(_check(lambda w: torch.relu(w).sum(), _w(0), ad=[2]))  # separating direction
    add(_check(lambda w: torch.relu(w).sum() * -1, _w(0), shortcuts=False))
    add(_check(relu2, _w(0, 0)))  # block product
    add(_check(relu2, _w(0, 0), ad=[2, 0]))  # block product, not_member
    add(_check(lambda w: w[0].abs() + torch.sin(w[0] + 0.5), _w(0)))  # interval bracket (irrational Clarke set)
    add(_check(lambda w: torch.relu(w[0]) * torch.exp(w[1]) + torch.exp(w[1]), _w(0, F(1, 2))))  # adjacent piece
    loss = lambda o, t: (o ** 2).mean()  # noqa: E731
    for x in ([[1.0, 1.0]], [[1.0, 1.0], [2.0, 2.0]]):  # Park et al.'s Theorems 5 and 8
        add(nsverify.check_module(_mlp(), loss, torch.tensor(x, dtype=D), None, progress=False))
    add(_check(lambda w: torch.linalg.vector_norm(w), _w(0, 0)))  # norm ball (a norm at its zero)
    add(_check(lambda w: torch.sqrt((w ** 2).sum()), _w(0, 0), ad=[float("nan"), 0]))  # NaN of a Lipschitz function
    add(nsverify.check_module(*_dead_unit_mlp(), progress=False))  # Theorem 8 from enclosures (>= 20,000 parameters)
    from nsverify.workloads.models import lemma2_logit

    m, loss, x, y = _dead_unit_mlp()
    add(nsverify.check_module(lemma2_logit(m, logit=1), loss, x, y, progress=False))  # Lemma 2 (not_member)
    return out


def _dead_unit_mlp():
    """A float32 MLP past the enclosure route's size, one hidden unit dead (its row and bias 0: an exact kink)."""
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(200, 100), torch.nn.ReLU(), torch.nn.Linear(100, 3))
    with torch.no_grad():
        m[0].weight[7].zero_()
        m[0].bias[7] = 0.0
    return m, torch.nn.functional.cross_entropy, torch.randn(4, 200), torch.tensor([0, 1, 2, 0])


@pytest.fixture(scope="module")
def records():
    return _records()


def test_the_tests_produce_every_certificate_kind(records):
    assert {kind for kind, _ in records} == set(KINDS)
    assert ("convex_weights", "ad") in records and ("separating_direction", "ad") in records


def _tampered(record: dict) -> list:
    """Copies of ``record`` whose tested vector no longer is the vector the record names."""
    def copy(**changes):
        r = json.loads(json.dumps(record))
        r.update(changes)
        return r

    out = [copy(tested_is="the_exact_ad"), copy(tested_is=None)]
    if record["certificate"]["kind"] in ("park_theorem8_enclosed", "lemma2_pair"):  # the exact AD as a rule
        return out + [copy(tested=["0"]), copy(exact_ad=["0"]), copy(tested=["0"], exact_ad=["0"])]
    if record["tested_is"] == "ad":  # the caller's vector, relabelled as the exact AD it is not
        return out + [copy(tested_is="exact_ad")]
    t = [F(x) if isinstance(x, str) else x for x in record["tested"]]
    for k in range(len(t)):  # each exact entry moved off the exact AD (an enclosure moved as a whole)
        bad = list(t)
        bad[k] = t[k] + 1 if isinstance(t[k], F) else {"lo": enc(F(t[k]["lo"]) + 1), "hi": enc(F(t[k]["hi"]) + 1)}
        out.append(copy(tested=[enc(x) if isinstance(x, F) else x for x in bad]))
    out.append(copy(exact_ad=None))
    out.append(copy(exact_ad=record["exact_ad"][:-1]))  # a malformed exact AD: False, never an exception
    return out


def test_every_kind_rejects_a_tested_vector_that_is_not_the_one_it_names(records):
    for kind, rec in records.items():
        assert verify_certificate(rec), (kind, verify_certificate(rec))
        for bad in _tampered(rec):
            got = verify_certificate(bad)
            assert not got, (kind, bad["tested"], bad.get("tested_is"), got)
            assert not verify_certificate(json.dumps(bad))


def test_park_theorem8_tested_vector_contradicting_its_exact_ad_is_rejected(records):
    """The 18 hidden records: park_theorem8 with ``tested`` changed against the record's own ``exact_ad``."""
    for kind in ("park_theorem8", "park_theorem5"):
        rec = json.loads(json.dumps(records[kind, "exact_ad"]))
        rec["tested"] = enc([F(x) + 1 for x in rec["tested"]])
        got = verify_certificate(rec)
        assert not got and "exact_ad" in got.reason


def test_kinds_are_built_once():
    import inspect

    src = inspect.getsource(certificates)
    assert src.count("KINDS[") == 0 and src.count("KINDS = ") == 1
    assert set(KINDS) == {"convex_weights", "interval_bracket", "adjacent_piece", "separating_direction",
                          "block_product", "park_theorem8", "park_theorem5", "norm_ball", "nonfinite_diagnosis",
                          "park_theorem8_enclosed", "lemma2_pair"}


# --------------------------------------------------------------------------------------------------------------
# Park certificates name the sides of the activations they used, multi-kink ones included
def _relu6_at_a_kink():
    from torch import nn

    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(2, 3), nn.ReLU6(), nn.Linear(3, 1)).double()
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(torch.round(torch.randn(p.shape) * 4) / 4)
        m[0].bias[0] = -(m[0].weight[0] @ torch.tensor([1.0, 1.0], dtype=torch.float64))  # unit 0 at relu6's 0
    x = torch.tensor([[1.0, 1.0]], dtype=torch.float64)
    return nsverify.check_module(m, torch.nn.functional.mse_loss, x, torch.zeros(1, 1, dtype=torch.float64),
                                 wrt="parameters")


def test_a_park_certificate_records_the_sides_of_each_kinked_activation_and_they_are_checked():
    v = _relu6_at_a_kink()
    assert v.status == "member" and v.certificate["kind"] in ("park_theorem5", "park_theorem8")
    # relu6 = hardtanh(0, 6): PyTorch's derivative is the left piece's at 0 and the right piece's at 6
    assert v.certificate["proxies"] == {"relu6": "left,right"}
    rec = v.to_json()
    assert nsverify.verify_certificate(rec)
    for bad in ({"relu6": "right,left"}, {"relu6": "left"}, {"relu6": "left,right", "abs": "left"}):
        tampered = json.loads(rec)
        tampered["certificate"]["proxies"] = bad
        assert not nsverify.verify_certificate(json.dumps(tampered)), bad
