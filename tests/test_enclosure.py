"""The enclosure engine (nsverify.oracle.enclosure) and the enclosed Theorem 8 route (nsverify.oracle.park.enclosed):
every enclosure contains the value computed independently in 60-digit mpmath; exact zeros and provenance ties are
found; the route decides member only in its premises and declines otherwise (both sides of each premise)."""

from __future__ import annotations

import json
import math
import time

import mpmath
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import nsverify
from nsverify.oracle import enclosure
from nsverify.oracle.certificates import verify_certificate
from nsverify.oracle.interp import module_function
from nsverify.oracle.park import enclosed

mpmath.mp.dps = 60


class Tiny(nn.Module):
    """conv -> BatchNorm (eval) -> ReLU -> max pool -> linear, plus a residual sum before the ReLU."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 3, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(3)
        self.skip = nn.Conv2d(2, 3, 1)
        self.fc = nn.Linear(3 * 2 * 2, 2)

    def forward(self, x):
        y = self.bn(self.conv(x)) + self.skip(x)
        z = F.max_pool2d(torch.relu(y), 2)
        return self.fc(z.flatten(1))


def _tiny(seed=0):
    torch.manual_seed(seed)
    m = Tiny()
    with torch.no_grad():
        m.bn.running_mean.uniform_(-0.5, 0.5)
        m.bn.running_var.uniform_(0.1, 2.0)
        m.bn.weight.uniform_(0.5, 1.5)
        m.bn.bias.uniform_(-0.2, 0.2)
    return m.eval()


def _mp(t):
    return [[mpmath.mpf(float(v)) for v in row] for row in t.detach().double().reshape(t.shape[0], -1).tolist()]


def _reference(m: Tiny, x: torch.Tensor):
    """The pre-activation (B, 3, 4, 4) and the logits in 60-digit arithmetic, loop by loop (no torch kernels)."""
    X = x.double().tolist()
    W = m.conv.weight.double().tolist()
    S, Sb = m.skip.weight.double().tolist(), m.skip.bias.double().tolist()
    g, b = m.bn.weight.double().tolist(), m.bn.bias.double().tolist()
    rm, rv, eps = m.bn.running_mean.double().tolist(), m.bn.running_var.double().tolist(), m.bn.eps
    B, H = x.shape[0], x.shape[2]
    pre = [[[[None] * H for _ in range(H)] for _ in range(3)] for _ in range(B)]
    for n in range(B):
        for c in range(3):
            s = mpmath.mpf(g[c]) / mpmath.sqrt(mpmath.mpf(rv[c]) + mpmath.mpf(eps))
            for i in range(H):
                for j in range(H):
                    acc = mpmath.mpf(0)
                    for ci in range(2):
                        for di in range(3):
                            for dj in range(3):
                                ii, jj = i + di - 1, j + dj - 1
                                if 0 <= ii < H and 0 <= jj < H:
                                    acc += mpmath.mpf(W[c][ci][di][dj]) * mpmath.mpf(X[n][ci][ii][jj])
                    skip = mpmath.mpf(Sb[c]) + sum(mpmath.mpf(S[c][ci][0][0]) * mpmath.mpf(X[n][ci][i][j])
                                                   for ci in range(2))
                    pre[n][c][i][j] = (acc - mpmath.mpf(rm[c])) * s + mpmath.mpf(b[c]) + skip
    fw, fb = m.fc.weight.double().tolist(), m.fc.bias.double().tolist()
    logits = []
    for n in range(B):
        z = []
        for c in range(3):
            for i in range(0, H, 2):
                for j in range(0, H, 2):
                    z.append(max(max(pre[n][c][i + a][j + d], 0) for a in (0, 1) for d in (0, 1)))
        logits.append([mpmath.mpf(fb[k]) + sum(mpmath.mpf(fw[k][q]) * z[q] for q in range(len(z))) for k in range(2)])
    return pre, logits


def _inside(mid: float, rad: float, ref, lo: float = 0.0, tail: float = 0.0) -> bool:
    c = mpmath.mpf(mid) + mpmath.mpf(lo) + mpmath.mpf(tail)  # a triple-double's centre, exactly (60 digits)
    return c - mpmath.mpf(rad) <= ref <= c + mpmath.mpf(rad)


@pytest.mark.parametrize("bits", enclosure.PRECISION_BITS)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_every_enclosure_contains_the_60_digit_value(dtype, bits):
    m = _tiny().to(dtype)
    x = torch.randn(2, 2, 4, 4).to(dtype)
    fn, w = module_function(m, lambda o, t: o.sum(), x, None)
    res, eng = enclosure.enclose(fn, w, bits)
    pre_ref, logit_ref = _reference(m, x)
    relu_in = next(rec for t, rec in eng.recs.values() if id(t) == res.relus[0].input_id)
    mids, rads, lows, tails = relu_in.mid, relu_in.rad, relu_in.lo, relu_in.tail
    checked = 0
    for idx in torch.cartesian_prod(*(torch.arange(s) for s in mids.shape)).tolist():
        n, c, i, j = idx
        r = 0.0 if rads is None else float(rads[n, c, i, j])
        lo = 0.0 if lows is None else float(lows[n, c, i, j])
        tl = 0.0 if tails is None else float(tails[n, c, i, j])
        assert _inside(float(mids[n, c, i, j]), r, pre_ref[n][c][i][j], lo, tl), idx
        # rigorous, and as tight as the precision: 2^-104 or 2^-157 of the tensor's largest entry, times growth
        assert r <= 2.0 ** (-bits + 12) * (1 + abs(float(mids[n, c, i, j])))
        checked += 1
    assert checked == 2 * 3 * 4 * 4 and res.relus[0].undecided == 0


@pytest.mark.parametrize("precise", [False, True])
def test_float64_and_double_double_enclosures_both_contain_the_value(precise, monkeypatch):
    """The plain float64 rules (Engine.precise False) and the double-double ones, on the same network."""
    m = _tiny().double()
    x = torch.randn(2, 2, 4, 4, dtype=torch.float64)
    fn, w = module_function(m, lambda o, t: o.sum(), x, None)
    monkeypatch.setattr(enclosure.Engine, "precise", precise, raising=False)
    orig = enclosure.Engine.__init__

    def init(self, w, *args):
        orig(self, w, *args)
        self.precise = precise

    monkeypatch.setattr(enclosure.Engine, "__init__", init)
    res, eng = enclosure.enclose(fn, w)
    pre_ref, _ = _reference(m, x)
    rec = next(r for t, r in eng.recs.values() if id(t) == res.relus[0].input_id)
    assert (rec.lo is not None) == precise
    for n, c, i, j in torch.cartesian_prod(*(torch.arange(s) for s in rec.mid.shape)).tolist():
        r = 0.0 if rec.rad is None else float(rec.rad[n, c, i, j])
        lo = 0.0 if rec.lo is None else float(rec.lo[n, c, i, j])
        tl = 0.0 if rec.tail is None else float(rec.tail[n, c, i, j])
        assert _inside(float(rec.mid[n, c, i, j]), r, pre_ref[n][c][i][j], lo, tl)


def test_exp_is_as_accurate_as_the_enclosures_assume():
    g = torch.Generator().manual_seed(1)
    x = torch.cat([torch.rand(20000, generator=g, dtype=torch.float64) * 1400 - 700,
                   torch.randn(20000, generator=g, dtype=torch.float64)])
    got = torch.exp(x).tolist()
    worst = max(abs(mpmath.mpf(v) / mpmath.exp(mpmath.mpf(float(a))) - 1) for a, v in zip(x.tolist(), got))
    assert worst < enclosure.LIBM / 8  # a margin of 8 over the measured error


def test_a_dead_channel_is_an_exact_kink_behind_an_irrational_batchnorm():
    m = _tiny()
    with torch.no_grad():
        m.conv.weight[1].zero_()
        m.skip.weight[1].zero_()
        m.skip.bias[1] = 0.0
        m.bn.running_mean[1] = 0.0
        m.bn.bias[1] = 0.0  # (0 - 0) * gamma / sqrt(var + eps) + 0 + 0: exactly 0 whatever the irrational scale
    x = torch.randn(2, 2, 4, 4, dtype=torch.float64)
    fn, w = module_function(m.double(), lambda o, t: o.sum(), x, None)
    res, _ = enclosure.enclose(fn, w)
    touches = res.relus[0].touches
    assert int(touches.sum()) == 2 * 4 * 4 and bool(touches[:, 1].all()) and not bool(touches[:, [0, 2]].any())
    pool = res.pools[0]
    assert pool.zero_ad == 2 * 2 * 2 and pool.mixed == 0  # the dead channel's windows: all at the kink


def test_equal_input_windows_are_one_function_and_their_ties_are_not_kinks():
    m = _tiny()
    x = torch.zeros(1, 2, 4, 4, dtype=torch.float64)
    x[..., :2, :] = 0.75  # identical windows inside each constant block: ties of identical functions
    fn, w = module_function(m.double(), lambda o, t: o.sum(), x, None)
    res, eng = enclosure.enclose(fn, w)
    assert res.pools[0].tied > 0 and res.pools[0].mixed == 0 and res.pools[0].identical > 0


# ---------------------------------------------------------------------------------------------- the route
def _mlp(dead=(7,), seed=0, hidden=100):
    torch.manual_seed(seed)
    m = nn.Sequential(nn.Linear(200, hidden), nn.ReLU(), nn.Linear(hidden, 3))
    with torch.no_grad():
        for u in dead:
            m[0].weight[u].zero_()
            m[0].bias[u] = 0.0
    return m, F.cross_entropy, torch.randn(4, 200), torch.tensor([0, 1, 2, 0])


def test_a_dead_unit_is_member_by_the_enclosed_theorem_8_and_replays():
    m, loss, x, y = _mlp()
    v = nsverify.check_module(m, loss, x, y, progress=False)
    assert v.status == "member" and v.certificate["kind"] == "park_theorem8_enclosed"
    assert v.stats["kink_touches"] == 4 and v.tested == () and v.exact_ad is None
    (layer,) = v.certificate["layers"]
    bias0 = 200 * 100  # the first Linear's bias follows its weight in the flattened parameters
    assert layer["direction"] == {str(bias0 + 7): -1} and layer["channels"] == [7]
    assert verify_certificate(v.to_json())
    fn, w = module_function(m, loss, x, y)
    assert verify_certificate(v, fn)
    # AD's gradient on the dead unit's row is 0, the gradient of the piece where the unit stays off (independent:
    # PyTorch's float gradient with the unit removed, on the other coordinates)
    g = torch.tensor(v.ad)
    assert bool((g[7 * 200:8 * 200] == 0).all()) and float(g[bias0 + 7]) == 0.0


def test_the_json_check_rejects_a_tampered_direction():
    m, loss, x, y = _mlp()
    rec = json.loads(nsverify.check_module(m, loss, x, y, progress=False).to_json())
    for bad in ({"20007": 2}, {"20007": 0}, {}, {"-1": -1}):
        r = json.loads(json.dumps(rec))
        r["certificate"]["layers"][0]["direction"] = bad
        assert not verify_certificate(r)
    r = json.loads(json.dumps(rec))
    r["certificate"]["proxies"] = {"relu": "right"}
    assert not verify_certificate(r)


def _route(m, loss, x, y):
    fn, w = module_function(m, loss, x, y)
    return enclosed.decide(fn, w)


def test_lemma_2s_pair_is_never_member_by_the_route():
    """relu(y) - relu(-y) = y: AD's 0 is not a Clarke subgradient (Park et al., Lemma 2). The second ReLU's input
    has no own additive parameter (its bias enters negated through another op), so the route declines."""

    class Pair(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(200, 120)

        def forward(self, x):
            y = self.lin(x)
            return torch.relu(y) - torch.relu(-y)

    torch.manual_seed(0)
    m = Pair()
    with torch.no_grad():
        m.lin.weight[3].zero_()
        m.lin.bias[3] = 0.0
    got = _route(m, lambda o, t: o.sum(), torch.randn(4, 200), None)
    assert isinstance(got, str) and "Lemma 2 pair" in got  # y is a layer's output: no one-coordinate certificate


def test_a_touch_without_its_own_bias_declines():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(200, 120, bias=False), nn.ReLU(), nn.Linear(120, 3))
    with torch.no_grad():
        m[0].weight[5].zero_()
    got = _route(m, F.cross_entropy, torch.randn(4, 200), torch.tensor([0, 1, 2, 0]))
    assert isinstance(got, str) and "no own additive parameter" in got


def test_a_shared_bias_declines():
    class Shared(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(200, 120)
            self.out = nn.Linear(120, 3)

        def forward(self, x):
            return self.out(torch.relu(self.lin(x))) + self.lin.bias.sum()

    torch.manual_seed(0)
    m = Shared()
    with torch.no_grad():
        m.lin.weight[5].zero_()
        m.lin.bias[5] = 0.0
    got = _route(m, F.cross_entropy, torch.randn(4, 200), torch.tensor([0, 1, 2, 0]))
    assert isinstance(got, str) and "more than one op" in got


def test_a_near_kink_is_not_a_kink():
    """A pre-activation of 2^-40 (not 0): never a touch; decided positive when its enclosure excludes 0."""
    m, loss, x, y = _mlp(dead=())
    with torch.no_grad():
        m[0].weight[7].zero_()
        m[0].bias[7] = 2.0 ** -40
    got = _route(m, loss, x, y)
    assert not isinstance(got, str) and got.layers == []


def test_the_route_answers_within_the_time_limit():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(3, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
                      nn.Conv2d(64, 64, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(64 * 16 * 16, 10)).eval()
    x, y = torch.randn(2, 3, 32, 32), torch.tensor([1, 2])
    t = time.perf_counter()
    v = nsverify.check_module(m, F.cross_entropy, x, y, progress=False, time_limit=2, on_limit="unknown")
    assert time.perf_counter() - t <= 1.1 * 2 + 1
    assert v.status in ("member", "unknown")


def test_a_detached_dependent_value_declines():
    """w.detach() inside fn: AD ignores a path the function has, so the route must not decide (never member)."""
    m, loss, x, y = _mlp()
    fn, w = module_function(m, loss, x, y)
    got = enclosed.decide(lambda v: fn(v) + (v.detach() * v).sum(), w)
    assert isinstance(got, str) and "detach" in got


def test_nsverify_s_own_relu_variant_declines():
    """A ReLU inside a custom autograd.Function (nsverify's ReLUVariant): its backward is not PyTorch's rule."""
    from nsverify.ad import ReLUVariant

    m, loss, x, y = _mlp()
    m[1] = ReLUVariant()
    got = _route(m, loss, x, y)
    assert isinstance(got, str)


def test_layer_norm_and_softmax_enclosures_contain_the_60_digit_value():
    """LayerNorm -> linear -> masked softmax -> ReLU input, against a 60-digit loop-by-loop reference."""
    torch.manual_seed(3)
    ln, lin = nn.LayerNorm(4).double(), nn.Linear(4, 3).double()
    with torch.no_grad():
        ln.weight.uniform_(0.5, 1.5)
        ln.bias.uniform_(-0.3, 0.3)
    x = torch.randn(3, 4, dtype=torch.float64)
    mask = torch.tensor([[False, True, False], [False, False, False], [True, False, False]])

    def fn(wv):
        g, b, W, c = wv[:4], wv[4:8], wv[8:20].reshape(3, 4), wv[20:23]
        y = F.layer_norm(x, (4,), g, b) @ W.T + c
        p = y.masked_fill(mask, float("-inf")).softmax(-1)
        return torch.relu(p - 0.25).sum()

    w = torch.cat([ln.weight.detach(), ln.bias.detach(), lin.weight.detach().reshape(-1), lin.bias.detach()])
    res, eng = enclosure.enclose(fn, w)
    rec = next(r for t, r in eng.recs.values() if id(t) == res.relus[0].input_id)
    g, b, W, c = (w[:4].tolist(), w[4:8].tolist(), w[8:20].reshape(3, 4).tolist(), w[20:23].tolist())
    for i in range(3):
        xs = [mpmath.mpf(v) for v in x[i].tolist()]
        mu = sum(xs) / 4
        var = sum((v - mu) ** 2 for v in xs) / 4
        h = [(v - mu) / mpmath.sqrt(var + mpmath.mpf(1e-5)) * mpmath.mpf(g[k]) + mpmath.mpf(b[k])
             for k, v in enumerate(xs)]
        y = [sum(mpmath.mpf(W[j][k]) * h[k] for k in range(4)) + mpmath.mpf(c[j]) for j in range(3)]
        ex = [mpmath.mpf(0) if mask[i, j] else mpmath.exp(y[j]) for j in range(3)]
        p = [v / sum(ex) for v in ex]
        for j in range(3):
            r = 0.0 if rec.rad is None else float(rec.rad[i, j])
            lo = 0.0 if rec.lo is None else float(rec.lo[i, j])
            tl = 0.0 if rec.tail is None else float(rec.tail[i, j])
            assert _inside(float(rec.mid[i, j]), r, p[j] - mpmath.mpf(0.25), lo, tl), (i, j)
            assert r < 1e-25


@pytest.mark.parametrize("cin,k", [(3, 3), (64, 3), (512, 3)])
def test_slice_products_are_computed_exactly_by_float64_convolution(cin, k):
    """Every product of two slices (Ozaki et al.'s condition b_x + b_w + ceil(log2 n) + 1 <= 53) equals the
    integer convolution of the slices' integer coefficients, computed independently in int64 (unfold + matmul)."""
    from nsverify.oracle import ddarith as dd

    g = torch.Generator().manual_seed(cin)
    x = torch.randn(1, cin, 6, 6, generator=g, dtype=torch.float64)
    xl = x * 2.0 ** -60 * torch.rand(x.shape, generator=g, dtype=torch.float64)
    w = ((torch.rand(4, cin, k, k, generator=g, dtype=torch.float64) * 2 - 1) / math.sqrt(cin * k * k)).float().double()
    n = cin * k * k
    bx, kx, bw, kw = dd.plan(n, dd.weight_bits(w, (1, 2, 3)))
    Ex, Ew = dd.exponent(x), dd.exponent(w, (1, 2, 3))
    xs, xrem = dd.slices(x, xl, Ex, bx, kx)
    ws, wrem = dd.slices(w, torch.zeros_like(w), Ew, bw, kw)
    assert not bool(wrem.any())  # float32 weights are covered exactly
    assert float(xrem.max()) <= float(torch.exp2(Ex - bx * kx))
    for i, a in enumerate(xs):
        for j, b in enumerate(ws):
            ga, gb = torch.exp2(Ex - bx * (i + 1)), torch.exp2(Ew - bw * (j + 1))
            ai, bi = (a / ga).round().long(), (b / gb).round().long()
            assert bool((ai.double() * ga == a).all()) and bool((bi.double() * gb == b).all())
            cols = F.unfold(ai.double(), k, padding=1).long()  # (1, cin*k*k, L): exact small integers
            exact = torch.einsum("ok,bkl->bol", bi.reshape(4, -1), cols).reshape(1, 4, 6, 6)
            got = F.conv2d(a, b, padding=1)
            assert bool((got == exact.double() * ga * gb.reshape(1, 4, 1, 1)).all()), (i, j)


def test_double_double_primitives_are_exact():
    from nsverify.oracle import ddarith as dd

    g = torch.Generator().manual_seed(5)
    a = torch.randn(1000, generator=g, dtype=torch.float64) * torch.exp2(torch.randint(-30, 30, (1000,), generator=g))
    b = torch.randn(1000, generator=g, dtype=torch.float64)
    s, e = dd.two_sum(a, b)
    p, q = dd.two_prod(a, b)
    for k in range(0, 1000, 97):
        fa, fb = F_(a[k]), F_(b[k])
        assert F_(s[k]) + F_(e[k]) == fa + fb and F_(p[k]) + F_(q[k]) == fa * fb


def F_(t):
    from fractions import Fraction

    return Fraction(float(t))


# ------------------------------------------------------------------------------------- Lemma 2 (not_member)
def _lemma2_mlp(param=None, index=0):
    from nsverify.workloads.models import lemma2_logit

    m, loss, x, y = _mlp()
    return lemma2_logit(m, logit=1, param=param, index=index), loss, x, y


def _one_sided(model, loss, x, y, name, index, h=2.0 ** -20):
    """The true partial derivative along one parameter entry, by float64 one-sided differences on both sides
    (independent of the oracle: relu(u) - relu(-u) = u, so both sides agree)."""
    import copy

    m = copy.deepcopy(model).double()
    p = dict(m.named_parameters())[name]
    vals = []
    for s in (h, -h):
        with torch.no_grad():
            p.view(-1)[index] += s
            vals.append(float(loss(m(x.double()), y)))
            p.view(-1)[index] -= s
    f0 = float(loss(m(x.double()), y))
    return (vals[0] - f0) / h, (f0 - vals[1]) / h


def test_park_lemma_2_on_a_logit_is_not_member_with_the_missed_derivative():
    m, loss, x, y = _lemma2_mlp()
    v = nsverify.check_module(m, loss, x, y, progress=False)
    assert v.status == "not_member" and v.certificate["kind"] == "lemma2_pair", v.reason
    j = v.certificate["coordinate"]
    assert j == 0  # the wrapper's own parameter u comes first in named_parameters()
    right, left = _one_sided(m, loss, x, y, "u", 0)
    lo, hi = (float(t) for t in v.certificate["delta"])
    assert v.ad[j] == 0.0  # PyTorch takes relu'(0) = 0 in both ReLUs
    for d in (right, left):  # the truth (AD's 0 plus the missed part) lies in the certified enclosure
        assert lo - 1e-6 <= d <= hi + 1e-6
    assert verify_certificate(v.to_json())
    assert "Lemma 2" in v.explain().splitlines()[1] and f"coordinate {j}" in v.explain()
    fn, w = module_function(m, loss, x, y)
    assert verify_certificate(v, fn)
    bad = json.loads(v.to_json())
    bad["certificate"]["delta"] = ["-0.1", "0.1"]  # an enclosure that contains 0 proves nothing
    assert not verify_certificate(bad)


def test_lemma_2_on_an_existing_bias_entry():
    m, loss, x, y = _lemma2_mlp(param="2.bias", index=1)
    v = nsverify.check_module(m, loss, x, y, progress=False)
    assert v.status == "not_member", v.reason
    assert v.certificate["coordinate"] == 200 * 100 + 100 + 100 * 3 + 1  # the second Linear's bias, entry 1


def test_lemma_2_whose_coordinate_reaches_another_kink_declines():
    """u = (first layer's bias of the dead unit) - c: that coordinate also moves the dead unit's kink, so its
    partial derivative is not continuous: no one-coordinate certificate (never a wrong not_member)."""
    m, loss, x, y = _lemma2_mlp(param="0.bias", index=7)
    fn, w = module_function(m, loss, x, y)
    got = enclosed.decide(fn, w)
    assert isinstance(got, str) and "also reaches ReLU call" in got


# ----------------------------------------------------------------------- the two routes never contradict
def _small_cases():
    from nsverify.workloads.models import lemma2_logit

    out = []
    for seed in range(3):
        torch.manual_seed(seed)
        m = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 3)).double()
        with torch.no_grad():
            m[0].weight[seed].zero_()
            m[0].bias[seed] = 0.0  # a dead unit
            if seed == 2:
                m[2].weight[1].zero_()
                m[2].bias[1] = 0.0  # a second touched layer
        x, y = torch.randn(3, 6, dtype=torch.float64), torch.tensor([0, 1, 2])
        out.append((m, F.cross_entropy, x, y))
        out.append((lemma2_logit(m, logit=seed), F.cross_entropy, x, y))
    torch.manual_seed(7)
    c = nn.Sequential(nn.Conv2d(1, 2, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(8, 2)).double()
    with torch.no_grad():
        c[0].weight[0].zero_()
        c[0].bias[0] = 0.0
    xi = torch.zeros(2, 1, 4, 4, dtype=torch.float64)
    xi[:, :, :2] = 0.5  # constant blocks: ties between identical functions
    out.append((c, F.cross_entropy, xi, torch.tensor([0, 1])))
    return out


@pytest.mark.slow  # the exact route takes 10-60 s per case
@pytest.mark.parametrize("case", range(7))
def test_the_enclosed_route_never_contradicts_the_exact_route(case):
    m, loss, x, y = _small_cases()[case]
    fn, w = module_function(m, loss, x, y)
    got = enclosed.decide(fn, w)
    assert not isinstance(got, str), got  # every case here is in the route's premises
    exact = nsverify.check_module(m, loss, x, y, progress=False, time_limit=120, on_limit="unknown")
    if isinstance(got, enclosed.Lemma2Pair):
        assert exact.status in ("not_member", "unknown"), exact.reason
    else:
        assert exact.status in ("member", "unknown"), exact.reason


def test_an_undecided_entry_of_a_lemma_2_pair_declines(monkeypatch):
    """y's enclosure straddles 0 without being the point 0: it may be an exact 0 where AD gives 0 and the identity
    1, so neither member nor not_member may be claimed."""
    m, loss, x, y = _lemma2_mlp()
    orig = enclosure._dd_bounds

    def widened(hi, lo, r):  # pretend the pair's input is known only to within 1e-3
        a, b = orig(hi, lo, r)
        scalar = hi.numel() == 1
        return (torch.where(torch.tensor(scalar), a - 1e-3, a), torch.where(torch.tensor(scalar), b + 1e-3, b))

    monkeypatch.setattr(enclosure, "_dd_bounds", widened)
    with torch.no_grad():
        m.u.fill_(2.0 ** -30)  # not 0: so not a touch, and its enclosure now straddles 0
        m.c.fill_(0.0)
    fn, w = module_function(m, loss, x, y)
    got = enclosed.decide(fn, w)
    assert isinstance(got, str) and "pair relu(y) - relu(-y)" in got


def test_an_in_place_relu_is_decided_like_the_out_of_place_one():
    m, loss, x, y = _mlp()
    m2, *_ = _mlp()
    m2[1] = nn.ReLU(inplace=True)
    a, b = _route(m, loss, x, y), _route(m2, loss, x, y)
    assert not isinstance(b, str), b
    assert [(L.kinks, L.channels, L.direction) for L in a.layers] == [(L.kinks, L.channels, L.direction)
                                                                      for L in b.layers]
    v = nsverify.check_module(m2, loss, x, y, progress=False)
    assert v.status == "member" and v.certificate["kind"] == "park_theorem8_enclosed"


def test_an_in_place_relu_after_a_value_read_twice_declines():
    """y = x @ W + b read by the ReLU and by a sum: the bias is not the layer's own parameter (in place or not)."""

    class Twice(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin, self.out = nn.Linear(200, 120), nn.Linear(120, 3)

        def forward(self, x):
            y = self.lin(x)
            s = y.sum()
            return self.out(torch.relu_(y)) + s

    torch.manual_seed(0)
    m = Twice()
    with torch.no_grad():
        m.lin.weight[5].zero_()
        m.lin.bias[5] = 0.0
    got = _route(m, F.cross_entropy, torch.randn(4, 200), torch.tensor([0, 1, 2, 0]))
    assert isinstance(got, str) and "read more than once" in got


def test_a_stop_after_an_undecided_sign_reports_the_sign_first(monkeypatch):
    """An undecided ReLU entry widens everything after it until some later op cannot go on: the reason names the
    undecided sign (the cause), then the stop."""
    m, loss, x, y = _mlp(dead=())
    orig = enclosure._dd_bounds

    def widened(hi, lo, r):
        a, b = orig(hi, lo, r)
        return a - 1e3, b + 1e3  # every ReLU entry undecided

    monkeypatch.setattr(enclosure, "_dd_bounds", widened)
    fn, w = module_function(m, loss, x, y)
    got = enclosed.decide(lambda v: fn(v) + torch.abs(v).sum(), w)  # abs: not in the enclosure table
    assert isinstance(got, str) and got.startswith("enclosures: ReLU call") and "then: aten.abs" in got


# ----------------------------------------------------------------------------------- triple-double (issue 34 (b))
def _triples(g, n, spread):
    """Random triples (hi, lo, tail), normalised (|lo| <= ulp(hi), |tail| <= ulp(lo)) or not (spread False)."""
    hi = torch.randn(n, generator=g, dtype=torch.float64) * torch.exp2(torch.randint(-20, 20, (n,), generator=g))
    scale = (2.0 ** -53, 2.0 ** -106) if spread else (2.0 ** -20, 2.0 ** -40)
    lo = hi * scale[0] * torch.randn(n, generator=g, dtype=torch.float64)
    tail = hi * scale[1] * torch.randn(n, generator=g, dtype=torch.float64)
    zero = torch.rand(n, generator=g) < 0.1
    return tuple(torch.where(zero, torch.zeros_like(t), t) for t in (hi, lo, tail))


@pytest.mark.parametrize("spread", [True, False])
def test_triple_double_sums_and_products_are_within_their_error_bounds(spread):
    """td_add and td_mul against exact rational arithmetic (Fractions): |exact - (hi + lo + tail)| <= err, and
    the bound is of triple-double size (2^-150 of the result) for normalised operands."""
    from nsverify.oracle import ddarith as dd

    g = torch.Generator().manual_seed(11)
    a, b = _triples(g, 400, spread), _triples(g, 400, spread)
    from fractions import Fraction

    for fn, exact, size in ((dd.td_add, lambda x, y: x + y, lambda x, y: abs(x) + abs(y)),
                            (dd.td_mul, lambda x, y: x * y, lambda x, y: abs(x * y))):
        *out, err = fn(a, b)
        for k in range(400):
            av, bv = sum(F_(t[k]) for t in a), sum(F_(t[k]) for t in b)
            got = sum(F_(t[k]) for t in out)
            assert abs(exact(av, bv) - got) <= F_(err[k]), (fn.__name__, k)
            if spread:  # of triple-double size: 2^-150 of the operands' size
                assert F_(err[k]) <= size(av, bv) * Fraction(1, 2 ** 150), (fn.__name__, k)


def test_slices_of_a_triple_keep_its_exact_value():
    """The slices of hi + lo + tail plus the remainder are the value: sum(slices) is within the remainder bound."""
    from nsverify.oracle import ddarith as dd

    g = torch.Generator().manual_seed(12)
    h, lo, tl = _triples(g, 200, True)
    E = dd.exponent(h)
    parts, rem = dd.slices(h, lo, E, 20, 8, tail=tl)
    for k in range(200):
        v = F_(h[k]) + F_(lo[k]) + F_(tl[k])
        assert abs(v - sum(F_(p[k]) for p in parts)) <= F_(rem[k])
    assert float(rem.max()) <= 2.0 ** (float(E) - 160 + 1)  # 8 slices of 20 bits: 160 bits of the largest entry


def _bn_train_net(seed=0):
    torch.manual_seed(seed)
    m = nn.Sequential(nn.Conv2d(2, 3, 3, padding=1, bias=False), nn.BatchNorm2d(3), nn.ReLU())
    with torch.no_grad():
        m[1].weight.uniform_(0.5, 1.5)
        m[1].bias.uniform_(-0.2, 0.2)
    return m.train()


@pytest.mark.parametrize("bits", enclosure.PRECISION_BITS)
def test_training_mode_batchnorm_encloses_the_60_digit_value(bits):
    """conv -> BatchNorm with batch statistics (biased variance, eps = 1e-5): every pre-activation's enclosure
    contains the value computed in 60-digit mpmath from the batch, loop by loop; at 157 bits it is triple-double
    tight."""
    m = _bn_train_net()
    x = torch.randn(3, 2, 4, 4)
    fn, w = module_function(m, lambda o, t: o.sum(), x, None)
    res, eng = enclosure.enclose(fn, w, bits)
    rec = next(r for t, r in eng.recs.values() if id(t) == res.relus[0].input_id)
    X, W = x.double().tolist(), m[0].weight.double().tolist()
    g, b, eps = m[1].weight.double().tolist(), m[1].bias.double().tolist(), m[1].eps
    conv = [[[[sum(mpmath.mpf(W[c][ci][di][dj]) * mpmath.mpf(X[n][ci][i + di - 1][j + dj - 1])
                   for ci in range(2) for di in range(3) for dj in range(3)
                   if 0 <= i + di - 1 < 4 and 0 <= j + dj - 1 < 4) for j in range(4)] for i in range(4)]
             for c in range(3)] for n in range(3)]
    for c in range(3):
        vals = [conv[n][c][i][j] for n in range(3) for i in range(4) for j in range(4)]
        mu = sum(vals) / len(vals)
        var = sum((v - mu) ** 2 for v in vals) / len(vals)
        s = mpmath.mpf(g[c]) / mpmath.sqrt(var + mpmath.mpf(eps))
        for n in range(3):
            for i in range(4):
                for j in range(4):
                    ref = (conv[n][c][i][j] - mu) * s + mpmath.mpf(b[c])
                    r = 0.0 if rec.rad is None else float(rec.rad[n, c, i, j])
                    lo = 0.0 if rec.lo is None else float(rec.lo[n, c, i, j])
                    tl = 0.0 if rec.tail is None else float(rec.tail[n, c, i, j])
                    assert _inside(float(rec.mid[n, c, i, j]), r, ref, lo, tl), (n, c, i, j)
                    assert r <= 2.0 ** (-bits + 16)


def test_a_sign_undecided_at_the_first_precision_is_decided_at_the_next(monkeypatch):
    """relu(x w - 1) with x = 1 + 2^-50: the pre-activation is 2^-50, below what 40 bits of x keep (a radius of
    2^-40), within what 104 keep; decide() runs again at the next precision and answers there."""
    x = torch.tensor([[1.0 + 2.0 ** -50, 0.5]], dtype=torch.float64)

    def fn(v):
        return torch.relu(x @ v[:2].reshape(2, 1) + v[2:]).sum()

    w = torch.tensor([1.0, 0.0, -1.0], dtype=torch.float64)
    monkeypatch.setattr(enclosed, "PRECISION_BITS", (40,))
    got = enclosed.decide(fn, w)
    assert isinstance(got, str) and "contains 0 but is not the point 0" in got
    monkeypatch.setattr(enclosed, "PRECISION_BITS", (40, 104))
    got = enclosed.decide(fn, w)
    assert isinstance(got, enclosed.Enclosed) and got.stats["enclosure_bits"] == 104 and got.layers == []


def test_ties_and_zeros_of_the_program_dtype_alone_are_counted_as_such():
    """Entries whose exact values differ but round to one float32 (a max-pool window [1 + 2^-30, 1]) or to 0 (a
    ReLU input 2^-200): counted as ties of float32 alone, not as kinks; the verdict's question says so."""
    c1 = torch.tensor([1.0, 1.0]).reshape(1, 1, 1, 2)
    c2 = torch.tensor([1.0, 0.0]).reshape(1, 1, 1, 2)

    def fn(v):
        y = v[0] * c1 + v[1] * c2  # exactly (1 + 2^-30, 1); in float32 both 1
        return F.max_pool2d(y, (1, 2)).sum() + torch.relu(v[2] * v[3])  # 2^-200: 0 in float32

    w = torch.tensor([1.0, 2.0 ** -30, 2.0 ** -100, 2.0 ** -100], dtype=torch.float32)
    got = enclosed.decide(fn, w)
    assert isinstance(got, enclosed.Enclosed) and got.layers == []
    assert got.stats["float_only_ties"] == {"relu": 1, "max_pool": 1}
    assert got.pools[0].tied == 0  # the exact values do not tie
    from nsverify.oracle.api import _float_only_text

    text = _float_only_text(got.stats, w.dtype)
    assert "1 ReLU inputs are 0 and 1 max-pool windows tie only once rounded to float32" in text
    assert _float_only_text({"float_only_ties": {"relu": 0, "max_pool": 0}}, w.dtype) == ""
