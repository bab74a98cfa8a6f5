"""Exact ties and kinks behind a normalisation's 1/sqrt(var + eps) (issue 34, item 1).

BatchNorm and LayerNorm multiply by ``1/sqrt(var + eps)``, irrational for eps = 1e-5.  The oracle now keeps such
a value as an exact :class:`~nsverify.oracle.numbers.Surd` ``a + sum b_k sqrt(d_k)`` (docs/conditions.md, "Exact
signs behind normalisations"), so a max-pool tie or a ReLU kink behind BN is decided exactly.  The expected
values here come from mpmath at 120 digits and from PyTorch's float64 autograd, never from the oracle.
"""

from __future__ import annotations

import random
from fractions import Fraction

import mpmath
import pytest
import torch
import torch.nn as nn

import nsverify
from nsverify.oracle import module_function, verify_certificate
from nsverify.oracle.numbers import Ival, Surd, sign, sqrt_i

F = Fraction
D = torch.float64


# ------------------------------------------------------------------------------------------- the numbers
def _mp(q) -> mpmath.mpf:
    return mpmath.mpf(q.numerator) / q.denominator


def _rand_q(rng) -> Fraction:
    return F(rng.randint(-40, 40), rng.choice((1, 2, 3, 4, 7, 8, 12)))


def _rand_root(rng):
    """(exact value, mpmath value) of c * sqrt(q) for a random rational q > 0."""
    q = F(rng.randint(1, 30), rng.choice((1, 2, 3, 5, 8)))
    c = _rand_q(rng)
    return c * sqrt_i(q), _mp(c) * mpmath.sqrt(_mp(q))


def _check(x, ref):
    """x (Fraction, Surd or Ival) encloses the mpmath value ref, and an exact form has ref's sign."""
    if isinstance(x, Ival):
        assert _mp(x.lo) - mpmath.mpf(10) ** -100 <= ref <= _mp(x.hi) + mpmath.mpf(10) ** -100, (x, ref)
    else:
        assert abs(_mp(F(x)) - ref) < mpmath.mpf(10) ** -100, (x, ref)
    if abs(ref) > mpmath.mpf(10) ** -90:
        s = sign(x)
        assert s is None and not isinstance(x, Surd) or s == (1 if ref > 0 else -1), (x, ref)
    else:  # an exact 0 (ref is 0 up to mpmath's rounding): only a Fraction 0 may say so
        assert sign(x) in (0, None), (x, ref)


@pytest.mark.parametrize("seed", range(6))
def test_surd_arithmetic_against_mpmath(seed):
    mpmath.mp.dps = 120
    rng = random.Random(seed)
    for _ in range(60):
        (x, xr), (y, yr) = _rand_root(rng), _rand_root(rng)
        q = _rand_q(rng)
        cases = [(x + y, xr + yr), (x - y, xr - yr), (x * y, xr * yr), (x + q, xr + _mp(q)), (q - x, _mp(q) - xr),
                 (x * q, xr * _mp(q)), ((x + q) * (y - q), (xr + _mp(q)) * (yr - _mp(q))), (-x, -xr)]
        if q:
            cases.append((x / q, xr / _mp(q)))
        if sign(x + q) not in (0, None):
            cases.append((q / (x + q), _mp(q) / (xr + _mp(q))))
        for got, ref in cases:
            _check(got, ref)


def test_surd_zero_is_exact():
    """Identities whose value is exactly 0 give the Fraction 0 (a tie), never a thin interval."""
    r2, r3, r6, r8 = (sqrt_i(F(k)) for k in (2, 3, 6, 8))
    assert (r2 + r3) * (r2 + r3) - 5 - 2 * r6 == 0
    assert r8 - 2 * r2 == 0  # sqrt(8) and sqrt(2) are one root class
    assert sqrt_i(F(2, 3)) * sqrt_i(F(3, 2)) == 1
    eps = F(1, 100000)  # BatchNorm's default eps as a decimal rational
    s = 1 / sqrt_i(F(3, 4) + eps)
    assert isinstance(s, Surd) and s * s * (F(3, 4) + eps) == 1
    assert (F(1) - F(1, 8)) * s * F(3, 2) + F(1, 8) - ((F(1) - F(1, 8)) * s * F(3, 2) + F(1, 8)) == 0


def test_surd_copies_and_pickles():
    import copy
    import pickle

    x = sqrt_i(F(2)) + F(1, 3)
    for y in (copy.deepcopy(x), pickle.loads(pickle.dumps(x))):
        assert isinstance(y, Surd) and y == x and y - x == 0 and (y.lo, y.hi) == (x.lo, x.hi)


def test_surd_sign_of_near_zero_values():
    """Values 1e-12 and 1e-17 from 0: the sign is exact (one root: a^2 against b^2 d; two: refined enclosures)."""
    mpmath.mp.dps = 120
    x = sqrt_i(F(2)) - F(665857, 470832)  # a convergent of sqrt(2): about 1.6e-12
    assert sign(x) == (1 if mpmath.sqrt(2) - mpmath.mpf(665857) / 470832 > 0 else -1)
    y = sqrt_i(F(2)) + sqrt_i(F(3))
    for p, q in ((3146264369, 1000000000), (31462643699419736, 10**16)):
        ref = mpmath.sqrt(2) + mpmath.sqrt(3) - mpmath.mpf(p) / q
        assert sign(y - F(p, q)) == (1 if ref > 0 else -1)


# ------------------------------------------------------------------------------ BN -> ReLU -> max-pool ties
def _bn_pool_net():
    """conv (1x2 kernel) -> BatchNorm (eps = 1e-5, var 0.75) -> ReLU -> max-pool over two positions -> linear."""
    m = nn.Sequential(nn.Conv2d(1, 1, (1, 2), bias=False), nn.BatchNorm2d(1), nn.ReLU(), nn.MaxPool2d((1, 2)),
                      nn.Flatten(), nn.Linear(1, 1)).double().eval()
    with torch.no_grad():
        m[0].weight.copy_(torch.tensor([0.5, 0.25], dtype=D).reshape(1, 1, 1, 2))
        m[1].running_mean.fill_(0.125)
        m[1].running_var.fill_(0.75)
        m[1].weight.fill_(1.5)
        m[1].bias.fill_(0.125)
        m[5].weight.fill_(-0.75)
        m[5].bias.fill_(0.25)
    assert m[1].eps == 1e-5
    return m


def _mse(o, t):
    return ((o - t) ** 2).mean()


def _run(x, **kw):
    m = _bn_pool_net()
    xx = torch.tensor(x, dtype=D).reshape(1, 1, 1, 3)
    t = torch.tensor([[2.0]], dtype=D)
    fn, w = module_function(m, _mse, xx, t, "parameters")
    return nsverify.check_module(m, _mse, xx, t, progress=False, **kw), fn, w


def _certified(v, fn, status):
    assert v.status == status, (v.status, v.reason)
    check = verify_certificate(v.to_json(), fn)
    assert check, check.reason
    return v


def test_planted_exact_tie_behind_bn_is_decided():
    """Input (1, 0, 2), conv weights (1/2, 1/4): both conv outputs are 1/2 with different gradients (x = (1, 0)
    and (0, 2)), so BN's outputs (1/2 - 1/8) * 3/2 / sqrt(3/4 + 1e-5) + 1/8 are equal and irrational: an exact
    max-pool tie that matters.  On main this was "unknown" (the enclosures straddle the tie)."""
    v, fn, w = _run([1.0, 0.0, 2.0])
    _certified(v, fn, "member")
    ties = [s for s in v.kinks if s.op == "max_pool2d"]
    assert ties and isinstance(ties[0].value, Surd) and len(ties[0].slopes) == 2
    # the value is the one mpmath computes for (1/2 - 1/8) * 3/2 / sqrt(3/4 + eps) + 1/8, eps the float64 1e-5
    # taken exactly (it is not 1/10^5: the two differ at the 22nd digit here)
    mpmath.mp.dps = 60
    ref = mpmath.mpf(3) / 8 * mpmath.mpf(3) / 2 / mpmath.sqrt(mpmath.mpf(3) / 4 + _mp(F(1e-5))) + mpmath.mpf(1) / 8
    assert _mp(ties[0].value.lo) <= ref <= _mp(ties[0].value.hi)
    assert _mp(ties[0].value.hi - ties[0].value.lo) < mpmath.mpf(10) ** -50
    # the exact AD is PyTorch's float64 autograd up to its rounding
    g = torch.func.grad(fn)(w).detach()
    assert max(abs(float(a) - float(b)) for a, b in zip(v.exact_ad, g)) < 1e-12
    # PyTorch's max pool routes the gradient to the first of the tied entries: conv weight 0 gets it, weight 1 not
    assert float(g[0]) != 0 and float(g[1]) == 0
    # the other tie choice is a Clarke subgradient too (the other adjacent piece)
    _certified(_run([1.0, 0.0, 2.0], rules={"max_pool2d": "last"})[0], fn, "member")
    # every piece has the same gradient on the linear layer's bias (the output value is common): moving it by
    # 1/2 leaves the Clarke set
    bad = g.clone()
    bad[-1] += 0.5
    _certified(_run([1.0, 0.0, 2.0], ad=bad)[0], fn, "not_member")


@pytest.mark.parametrize("delta, winner", [(2.0**-20, 1), (-(2.0**-20), 0)])
def test_near_tie_behind_bn_is_decided(delta, winner):
    """Input (1, 0, 2 + delta): the two BN outputs differ by 3/2 * delta / 4 / sqrt(3/4 + 1e-5), no tie; the
    larger one (second entry for delta > 0) takes the gradient, as PyTorch's float64 run does."""
    v, fn, w = _run([1.0, 0.0, 2.0 + delta])
    _certified(v, fn, "member")
    assert not [s for s in v.kinks if s.op == "max_pool2d"]
    g = torch.func.grad(fn)(w).detach()
    assert float(g[winner]) != 0 and float(g[1 - winner]) == 0
    assert max(abs(float(a) - float(b)) for a, b in zip(v.exact_ad, g)) < 1e-12


def test_dead_channel_behind_bn_is_an_exact_kink():
    """A channel whose conv output equals the running mean 0 with bias 0: BN gives (0 - 0) * s + 0 = 0 exactly
    whatever s is, so ReLU sits exactly at its kink; the verdict is decided."""
    m = nn.Sequential(nn.Conv2d(1, 2, 1, bias=False), nn.BatchNorm2d(2), nn.ReLU(), nn.Flatten(),
                      nn.Linear(2, 1)).double().eval()
    with torch.no_grad():
        m[0].weight.copy_(torch.tensor([0.5, -0.75], dtype=D).reshape(2, 1, 1, 1))
        m[1].running_var.fill_(2.0)
        m[1].weight.fill_(1.5)
        m[1].bias.copy_(torch.tensor([0.0, 0.25], dtype=D))
    xx = torch.zeros(1, 1, 1, 1, dtype=D)
    t = torch.tensor([[1.0]], dtype=D)
    fn, _w = module_function(m, _mse, xx, t, "parameters")
    v = nsverify.check_module(m, _mse, xx, t, progress=False)
    _certified(v, fn, "member")
    assert any(s.op == "relu" and s.value == 0 for s in v.kinks)


def test_layer_norm_tie_is_decided():
    """LayerNorm over a row with a repeated entry: the two normalised entries are equal and irrational
    ((x - mean) / sqrt(var + eps)) with different slopes; max(dim) routes the gradient to the index PyTorch
    returns, a piece adjacent to w."""
    ln = nn.LayerNorm(3).double()

    def fn(w):
        return ln(w.reshape(1, 3)).max(dim=1).values.sum()

    w = torch.tensor([1.0, 3.0, 3.0], dtype=D)
    v = nsverify.check_gradient(fn, w, progress=False)
    _certified(v, fn, "member")
    g = torch.func.grad(fn)(w).detach()
    assert max(abs(float(a) - float(b)) for a, b in zip(v.exact_ad, g)) < 1e-12


def test_a_tie_behind_a_transcendental_value_stays_unknown():
    """Surds decide square roots only: a tie between two equal tanh values (intervals) is still "unknown", never
    guessed."""
    def fn(w):
        return torch.maximum(torch.tanh(w[0] * w[2]), torch.tanh(w[1]))

    v = nsverify.check_gradient(fn, torch.tensor([1.0, 1.0, 1.0], dtype=D), progress=False)
    assert v.status == "unknown" and "straddles" in v.reason


def test_float32_only_tie_behind_bn_is_reported_and_the_exact_order_used():
    """float32: the conv outputs 1/2 and 1/4 * (2 + 2^-22) = 1/2 + 2^-24 differ, but after BN (bias 64, so the
    outputs sit near 64.65 where a float32 ulp is 2^-17) they round to one float32: a tie that exists only in
    floats.  The exact program orders them (BN is increasing: gamma > 0), so its AD routes the gradient to entry
    1, while PyTorch's float32 run picks entry 0.  The verdict answers the exact question at the float32 point and
    reports the tie as float-only."""
    m = _bn_pool_net().float()
    with torch.no_grad():
        m[1].bias.fill_(64.0)
    xx = torch.tensor([1.0, 0.0, 2.0 + 2.0**-22], dtype=torch.float32).reshape(1, 1, 1, 3)
    t = torch.tensor([[2.0]], dtype=torch.float32)
    y = m[:3](xx).detach().reshape(-1)
    assert y[0] == y[1]  # the float32 tie (PyTorch's own forward)
    fn, w = module_function(m, _mse, xx, t, "parameters")
    g_float = torch.func.grad(fn)(w).detach()
    assert float(g_float[0]) != 0 and float(g_float[1]) == 0  # PyTorch's float32 run: entry 0
    v = nsverify.check_module(m, _mse, xx, t, progress=False)
    _certified(v, fn, "member")
    assert v.exact_ad[0] == 0 and v.exact_ad[1] != 0  # the exact program: entry 1 is the strict max
    assert any(s.op == "max_pool2d" and s.extra.get("float_only") for s in v.kinks)
    text = v.explain()
    assert "float32 point" in text and "seen only by the float32 computation" in text


class _TinyResNet(nn.Module):
    """ResNet-shaped: stem conv -> BatchNorm -> ReLU -> max pool (3, 2, 1), one basic block with BatchNorm and an
    identity shortcut, average-pool head.  2 channels: the exact trace stays seconds."""

    def __init__(self, c: int = 2):
        super().__init__()
        from nsverify.workloads.models import BasicBlock

        self.stem = nn.Sequential(nn.Conv2d(3, c, 3, 1, 1, bias=False), nn.BatchNorm2d(c), nn.ReLU(),
                                  nn.MaxPool2d(3, 2, 1))
        self.block = BasicBlock(c, c, 1, True)
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c, 3))

    def forward(self, x):
        return self.head(self.block(self.stem(x)))


@pytest.mark.slow  # about 30 s on the loaded 2-core machine (the not_member's replay included)
def test_resnet_shaped_net_with_default_eps_is_decided():
    """float64, weights on a 1/8 grid, BatchNorm eval with the default eps = 1e-5 and dyadic running statistics,
    an integer image: the stem's max pool meets an exact tie between BN outputs (irrational, different slopes),
    which main answered "straddles"; now member, and a vector moved on the head's bias is not_member (every piece
    has the same logits at w, so the same bias gradient)."""
    import torch.nn.functional as tF

    m = _TinyResNet().double().eval()
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(torch.randint(-4, 5, p.shape, generator=g).to(D) / 8)
        for b in m.modules():
            if isinstance(b, nn.BatchNorm2d):
                b.running_mean.copy_(torch.randint(-2, 3, b.running_mean.shape, generator=g).to(D) / 4)
                b.running_var.copy_(torch.randint(1, 8, b.running_var.shape, generator=g).to(D) / 4)
    x = torch.randint(0, 3, (1, 3, 6, 6), generator=g).to(D)
    y = torch.tensor([1])
    fn, w = module_function(m, tF.cross_entropy, x, y, "parameters")
    v = nsverify.check_module(m, tF.cross_entropy, x, y, time_limit=60, progress=False)
    _certified(v, fn, "member")
    assert any(s.op == "max_pool2d" and isinstance(s.value, Surd) and len(s.slopes) == 2 for s in v.kinks)
    gf = torch.func.grad(fn)(w).detach()
    assert max(abs(float(a) - float(b)) for a, b in zip(v.exact_ad, gf)) < 1e-12
    bad = gf.clone()
    bad[-1] += 0.5
    _certified(nsverify.check_module(m, tF.cross_entropy, x, y, ad=bad, time_limit=60, progress=False), fn,
               "not_member")
