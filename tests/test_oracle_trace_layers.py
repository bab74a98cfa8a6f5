"""Park et al.'s Theorem 8 with the layers read from the autograd graph (nsverify.oracle.park.optrace): models
outside the module reading (functional ReLUs, attention, LayerNorm, training-mode BatchNorm, custom forwards).

Checked against what shares no code with it: the plain piece enumeration (``shortcuts=False``), PyTorch's own
float64 autograd on both sides of the kink along the certificate's direction, and the paper's counterexample
(Lemma 2), where the theorem's premise must fail."""
import random
from fractions import Fraction

import pytest
import torch
from torch import nn

import nsverify
from nsverify.oracle.interp import Evaluation, module_function
from nsverify.oracle.park import exact as layered

D = torch.float64


def _mse(o, t):
    return ((o - t) ** 2).mean()


def _grid(m, seed, denom=8):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(torch.round(torch.randn(p.shape, generator=g, dtype=D) * 2) / denom)
    return m


def _check(m, x, t, loss=_mse, **kw):
    return nsverify.check_module(m, loss, x, t, progress=False, time_limit=120, on_limit="unknown", **kw)


def _from_graph(v):
    return v.status == "member" and v.certificate["kind"] == "park_theorem8" and \
        v.stats.get("layers_from") == "autograd graph"


def _float_grad(m, loss, x, t, w):
    fn, _ = module_function(m, loss, x, t)
    wv = w.clone().requires_grad_(True)
    (g,) = torch.autograd.grad(fn(wv), wv)
    return g


def _assert_bouligand_along_witness(m, loss, x, t, v):
    """Independent of the oracle: PyTorch's float64 autograd just beside the point, on the witness's side, equals
    the AD at the point (the function is smooth there and AD is that side's limit), while on the other side some
    kink coordinate differs (the kink is real)."""
    fn, w = module_function(m, loss, x, t)
    d = torch.zeros_like(w)
    for L in v.certificate["layers"]:
        for k, val in L["witness"].items():
            d[int(k)] = float(Fraction(val))
    d = d / d.abs().max()
    ad = torch.tensor(v.ad, dtype=D)
    eps = 2.0 ** -20
    plus = _float_grad(m, loss, x, t, w + eps * d)
    minus = _float_grad(m, loss, x, t, w - eps * d)
    scale = 1 + ad.abs().max()
    assert (plus - ad).abs().max() <= 1e-4 * scale, (plus - ad).abs().max()
    assert (minus - ad).abs().max() > 1e-3 * scale  # the other side's gradient is another piece's


@pytest.mark.parametrize("approximate", ["tanh", "none"])
def test_transformer_head_tie_is_decided_from_the_autograd_graph(approximate):
    from nsverify.workloads.models import PreNormTransformer

    m = _grid(PreNormTransformer(4, 2, 1, classes=3, approximate=approximate).double(), 1)
    with torch.no_grad():
        m.head[0].weight[1].zero_()
        m.head[0].bias[1] = 0.0  # head unit 1 sits at its kink for every sample
    x = torch.randint(-2, 3, (2, 3, 4), generator=torch.Generator().manual_seed(1)).double()
    t = torch.tensor([0, 2])
    loss = nn.functional.cross_entropy
    v = _check(m, x, t, loss)
    assert _from_graph(v), v.stats.get("layers_declined")
    fn, _ = module_function(m, loss, x, t)
    assert nsverify.verify_certificate(v.to_json(), fn)
    assert [L["kinks"] for L in v.certificate["layers"]] == [2]
    assert "outside the graph layer model" in v.stats["layers_declined"]  # the module reading declined first
    _assert_bouligand_along_witness(m, loss, x, t, v)


def test_inplace_relu_and_a_relu_away_from_its_kink():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b, self.ln, self.h = nn.Linear(3, 4), nn.Linear(4, 4), nn.LayerNorm(4), nn.Linear(4, 2)

        def forward(self, x):
            z = torch.relu(self.a(x))  # no entry at its kink: an analytic piece of the next layer's map
            y = self.b(self.ln(z) + z)
            return self.h(y.relu_())

    m = _grid(Net().double(), 3)
    with torch.no_grad():
        m.a.bias.fill_(4.0)  # every entry of the first ReLU's input is positive
        m.b.weight[2].zero_()
        m.b.bias[2] = 0.0
    x = torch.tensor([[1.0, 0.0, -1.0], [2.0, 1.0, 0.0]], dtype=D)
    t = torch.zeros(2, 2, dtype=D)
    v = _check(m, x, t)
    assert _from_graph(v), v.stats.get("layers_declined")
    assert [L["kinks"] for L in v.certificate["layers"]] == [2]
    _assert_bouligand_along_witness(m, _mse, x, t, v)


def test_a_stream_that_bypasses_an_activation_is_held_fixed():
    """A post-norm encoder-style residual stream: the first map's parameters reach both ReLUs' inputs without an
    activation between (outside Park's disjoint layers); directions in the other parameters still decide."""

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.p, self.a, self.b, self.h = nn.Linear(3, 3), nn.Linear(3, 3), nn.Linear(3, 3), nn.Linear(3, 1)

        def forward(self, x):
            s = self.p(x)
            y = s + self.b(torch.relu(self.a(s)))
            return self.h(torch.relu(y))

    m = _grid(Net().double(), 6)
    with torch.no_grad():
        m.a.weight[1].zero_()
        m.a.bias[1] = 0.0  # first ReLU's unit 1 at its kink
        m.b.weight[0].zero_()
        m.b.bias[0] = 0.0
        m.p.weight[0].zero_()
        m.p.bias[0] = 0.0  # second ReLU's unit 0: s_0 + b_0(.) = 0
        m.h.weight.fill_(0.5)
        m.b.weight[:, 1] = 0.5  # the first kink reaches the loss
    x = torch.tensor([[1.0, 0.0, -1.0], [2.0, 1.0, 1.0]], dtype=D)
    t = torch.zeros(2, 1, dtype=D)
    v = _check(m, x, t)
    assert _from_graph(v), v.stats.get("layers_declined")
    assert sorted(L["kinks"] for L in v.certificate["layers"]) == [2, 2]
    _assert_bouligand_along_witness(m, _mse, x, t, v)
    assert _check(m, x, t, shortcuts=False).status != "not_member"


def test_instance_norm_and_repeat():
    """InstanceNorm2d runs through aten.repeat (its affine parameters tiled over the batch): exact, equal to
    torch's own repeat; a ReLU behind it at a tie is decided."""
    from nsverify.oracle.interp import exact_forward

    a = torch.arange(6, dtype=D).reshape(2, 3) / 4
    got = exact_forward(lambda t: t.repeat(2, 1, 3), a)
    assert torch.tensor([[[float(v) for v in r] for r in b] for b in got], dtype=D).equal(a.repeat(2, 1, 3))

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.c, self.n, self.h = nn.Conv2d(1, 2, 3, padding=1), nn.InstanceNorm2d(2, affine=True), nn.Linear(32, 1)

        def forward(self, x):
            return self.h(torch.relu(self.n(self.c(x))).flatten(1))

    m = _grid(Net().double(), 7)
    with torch.no_grad():
        m.c.weight[1].zero_()
        m.c.bias[1] = 0.0  # channel 1 is constant before the norm: normalized to 0, beta = 0 puts it at the kink
        m.n.bias[1] = 0.0
        m.n.weight.fill_(1.0)
        m.n.bias[0] = 0.5  # channel 0 stays off its kink
    x = torch.randint(-2, 3, (2, 1, 4, 4), generator=torch.Generator().manual_seed(7)).double()
    t = torch.zeros(2, 1, dtype=D)
    v = _check(m, x, t)
    assert _from_graph(v), v.stats.get("layers_declined")
    assert [L["kinks"] for L in v.certificate["layers"]] == [32]


class PoolNet(nn.Module):
    """conv - BatchNorm (default eps: every value behind it an interval) - ReLU - 2x2 max pool - a ReLU head."""

    def __init__(self):
        super().__init__()
        self.c, self.bn, self.h, self.o = nn.Conv2d(1, 2, 3, padding=1), nn.BatchNorm2d(2), nn.Linear(8, 2), \
            nn.Linear(2, 1)

    def forward(self, x):
        z = nn.functional.max_pool2d(torch.relu(self.bn(self.c(x))), 2)
        return self.o(torch.relu(self.h(z.flatten(1))))


def _pool_net(seed):
    m = _grid(PoolNet().double(), seed).eval()
    with torch.no_grad():
        m.bn.running_var.fill_(1.0)
        m.bn.running_mean.zero_()
        m.bn.weight.fill_(1.0)
        m.bn.bias[1] = -8.0  # channel 1 dead: every window of it ties at ReLU's 0
        m.c.weight[0].zero_()
        m.c.weight[0, 0, 1, 1] = 1.0  # channel 0 is its input (distinct values: no tie above 0)
        m.c.bias[0] = 0.0
        m.bn.bias[0] = 0.0
        m.h.weight[0].zero_()
        m.h.bias[0] = 0.0  # the head's unit 0 at its kink
        m.o.weight.fill_(0.5)
    return m


def test_max_pool_ties_at_relu_zero_and_untied_windows():
    m = _pool_net(8)
    x = torch.stack([torch.arange(16, dtype=D) - 5, 10 - torch.arange(16, dtype=D)]).reshape(2, 1, 4, 4)
    t = torch.zeros(2, 1, dtype=D)
    v = _check(m, x, t)
    assert _from_graph(v), v.stats.get("layers_declined")
    _assert_bouligand_along_witness(m, _mse, x, t, v)


def test_max_pool_tie_at_a_positive_value_declines():
    m = _pool_net(8)
    with torch.no_grad():
        m.c.weight.zero_()
        m.c.bias.fill_(1.0)  # channel 0 constant and positive: every window ties above 0
        m.bn.eps, m.bn.running_var[:] = 2.0 ** -10, 1 - 2.0 ** -10  # an exact norm: the tie is decided
    x = torch.ones(1, 1, 4, 4, dtype=D)
    t = torch.zeros(1, 1, dtype=D)
    fn, w = module_function(m, _mse, x, t)
    got = layered.decide(Evaluation(fn, w), m, _mse, t)
    assert isinstance(got, str) and "is not 0 at every tied entry" in got, got


def test_a_power_of_a_positive_base_is_analytic():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b, self.h = nn.Linear(2, 2), nn.Linear(2, 2), nn.Linear(2, 1)

        def forward(self, x):
            return self.h(torch.relu(self.b((self.a(x) ** 2 + 1) ** 0.5)))

    m = _grid(Net().double(), 4)
    with torch.no_grad():
        m.b.weight[0].zero_()
        m.b.bias[0] = 0.0
        m.h.weight[0, 0] = 0.5  # the kink unit reaches the loss
    x = torch.tensor([[1.0, -1.0]], dtype=D)
    t = torch.zeros(1, 1, dtype=D)
    v = _check(m, x, t)
    assert _from_graph(v), v.stats.get("layers_declined")
    _assert_bouligand_along_witness(m, _mse, x, t, v)


def test_leaky_relu_and_training_mode_batch_norm():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.bn, self.h = nn.Linear(2, 3), nn.BatchNorm1d(3), nn.Linear(3, 1)

        def forward(self, x):
            return self.h(nn.functional.leaky_relu(self.bn(self.a(x)), 0.25))

    m = _grid(Net().double(), 5).train()
    with torch.no_grad():
        m.bn.bias[1] = 0.0
        m.a.weight[1] = torch.tensor([1.0, 0.0], dtype=D)  # batch-normalized (1, 0, -1): the middle sample at 0
    x = torch.tensor([[1.0, 2.0], [0.0, 1.0], [-1.0, 3.0]], dtype=D)
    t = torch.zeros(3, 1, dtype=D)
    v = _check(m, x, t)
    assert _from_graph(v), v.stats.get("layers_declined")
    _assert_bouligand_along_witness(m, _mse, x, t, v)


class Lemma2(nn.Module):
    """Park et al.'s Lemma 2 (App. D.2): tau(X, w) = (Xw, -Xw), ReLU, loss x1 - x2 -- no bias, batch one; at
    w = 0 the function is w itself (Clarke set {1}) but AD returns 0."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.zeros(1, dtype=D))

    def forward(self, x):
        return torch.relu(torch.cat([x * self.w, -(x * self.w)]))


def test_lemma2_declines_and_the_enumeration_refutes():
    m = Lemma2()
    x = torch.ones(1, dtype=D)
    v = _check(m, x, None, loss=lambda o, t: o[0] - o[1])
    assert "P_l restricted to the exactly rational coordinates is empty" in v.stats["layers_declined"]
    assert v.status == "not_member"


@pytest.mark.parametrize("case", ["detach", "mask", "item", "abs", "hardswish", "tied", "custom", "sqrt_pow",
                                  "pow_at_zero", "aten_mask"])
def test_what_the_autograd_graph_reading_declines(case):
    why = {"detach": "cut from autograd", "mask": "boolean or integer tensor", "item": "data-dependent control flow",
           "abs": "AbsBackward0", "hardswish": "HardswishBackward0", "tied": "no other layer's directly",
           "custom": "cut from autograd", "sqrt_pow": "non-integer exponent of a base that is not positive",
           "pow_at_zero": "non-integer exponent", "aten_mask": "aten.gt computes a boolean"}
    """Each of these hides a branch from the graph, changes what AD computes, or breaks Park's layer model: the
    reading must decline (the enumeration then decides)."""

    class Ident(torch.autograd.Function):  # a custom backward: AD's value is whatever it returns
        @staticmethod
        def forward(ctx, x):
            return x.clone()

        @staticmethod
        def backward(ctx, g):
            return 2 * g

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.h = nn.Linear(2, 2), nn.Linear(2, 1)

        def forward(self, x):
            y = self.a(x)
            if case == "detach":
                y = y + (y * y - y).detach()  # a straight-through estimator
            elif case == "mask":
                y = y * (y > 0)
            elif case == "aten_mask":  # an ATen op called directly bypasses torch functions
                y = y * torch.ops.aten.gt(y, 0)
            elif case == "item":
                y = y * 2 if y.sum().item() > 0 else y
            elif case == "abs":
                y = y.abs()
            elif case == "hardswish":  # kinks at -3 and 3, a curved piece between: not Park's layer activation
                y = nn.functional.hardswish(y)
            elif case == "tied":
                y = nn.functional.linear(torch.relu(y), self.a.weight)
            elif case == "custom":
                y = Ident.apply(y)
            elif case == "sqrt_pow":
                y = (y * y) ** 0.5
            elif case == "pow_at_zero":  # C^1 but not analytic at 0, where one entry sits
                y = (y * y) ** 1.5
            return self.h(torch.relu(y))

    m = _grid(Net().double(), 2)
    with torch.no_grad():
        m.a.weight[0].zero_()
        m.a.bias[0] = 0.0  # a kink in every variant
    x = torch.tensor([[1.0, 2.0]], dtype=D)
    t = torch.zeros(1, 1, dtype=D)
    fn, w = module_function(m, _mse, x, t)
    got = layered.decide(Evaluation(fn, w), m, _mse, t)
    assert isinstance(got, str) and "layers read from the autograd graph: " in got and why[case] in got, got


def _fuzz_net(seed):
    """A random tiny residual MLP with a functional forward (outside the module reading), kinks planted by zero
    rows and biases, biases sometimes absent (then Theorem 8's cone may be empty)."""
    rng = random.Random(seed)
    bias = rng.random() < 0.6

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.p = nn.Linear(2, 2) if rng.random() < 0.5 else None  # a stream that bypasses the first ReLU
            self.a = nn.Linear(2, 2, bias=bias)
            self.b = nn.Linear(2, 2, bias=rng.random() < 0.5)
            self.h = nn.Linear(2, 1, bias=False)
            self.skip = rng.random() < 0.5

        def forward(self, x):
            s = x if self.p is None else self.p(x)
            z = torch.relu(self.a(s))
            y = self.b(z) + (z if self.skip else 0) + (0 if self.p is None else s)
            return self.h(nn.functional.relu(y))

    m = _grid(Net().double(), seed, denom=2)
    with torch.no_grad():
        for lin in (m.a, m.b):
            if rng.random() < 0.6:
                r = rng.randrange(2)
                lin.weight[r].zero_()
                if lin.bias is not None:
                    lin.bias[r] = 0.0
    x = torch.tensor([[rng.choice((-1, 0, 1)) for _ in range(2)] for _ in range(rng.choice((1, 2)))], dtype=D)
    return m, x, torch.zeros(x.shape[0], 1, dtype=D)


def test_autograd_graph_layers_never_contradict_the_enumeration():
    decided, declined_empty = 0, 0
    for seed in range(40):
        m, x, t = _fuzz_net(seed)
        v = _check(m, x, t)
        ref = _check(m, x, t, shortcuts=False)
        if _from_graph(v):
            assert ref.status != "not_member", seed
            decided += ref.status == "member"
        elif "empty" in v.stats.get("layers_declined", ""):
            declined_empty += 1
    assert decided >= 8, decided  # enough points where both decided for the comparison to mean something
    assert declined_empty >= 1, declined_empty  # and the premise fails somewhere (no bias, opposite rows)


def test_a_failure_inside_the_reading_declines_and_the_plain_path_decides(monkeypatch):
    """The shortcut never decides on a broken reading: an internal error becomes a decline with its reason."""
    from nsverify.oracle.park import optrace

    def broken(*a, **k):
        raise RuntimeError("boom")

    monkeypatch.setattr(optrace, "_analyse", broken)
    m = _fuzz_net(3)[0]
    x = torch.tensor([[0.0, 1.0]], dtype=D)
    t = torch.zeros(1, 1, dtype=D)
    fn, w = module_function(m, _mse, x, t)
    got = layered.decide(Evaluation(fn, w), m, _mse, t)
    assert isinstance(got, str) and "the graph could not be read (RuntimeError: boom)" in got, got
    v = _check(m, x, t)
    assert not _from_graph(v) and v.status == _check(m, x, t, shortcuts=False).status
