"""The Park engine's shared pieces: the one max-pool window geometry (against torch's own max-pool indices), the
one P_l test on both sides of feasibility, and the one rank test."""

from fractions import Fraction as F

import numpy as np
import pytest
import torch

from nsverify.oracle.cones import check_gordan, holds
from nsverify.oracle.park.algorithm1 import pool_index_windows
from nsverify.oracle.park.cone import p_nonempty
from nsverify.oracle.park.rank import full_column_rank, independent_columns, nonsingular
from nsverify.oracle.park.walk import activation_of, chain
from nsverify.registry.windows import pool_window_table


def _geometries(n, seed):
    rng = np.random.default_rng(seed)
    for _ in range(n):
        nsp = int(rng.integers(1, 4))
        k = tuple(int(v) for v in rng.integers(1, 4, nsp))
        d = tuple(int(v) for v in rng.integers(1, 3, nsp))
        s = tuple(int(v) for v in rng.integers(1, 4, nsp))
        p = tuple(int(rng.integers(0, v // 2 + 1)) for v in k)  # torch: padding <= kernel / 2
        sp = tuple(int(d[i] * (k[i] - 1) + 1 + rng.integers(0, 5)) for i in range(nsp))
        yield sp, k, s, p, d, bool(rng.integers(0, 2))


@pytest.mark.parametrize("seed", range(4))
def test_window_table_matches_torch_max_pool_indices(seed):
    """Random 1-, 2- and 3-d geometries with padding, dilation and ceil_mode: the table's shape is torch's output
    shape, and on inputs with distinct values torch's returned index is the maximum over the table's window."""
    pools = {1: torch.nn.functional.max_pool1d, 2: torch.nn.functional.max_pool2d, 3: torch.nn.functional.max_pool3d}
    for sp, k, s, p, d, ceil in _geometries(12, seed):
        x = torch.randperm(int(np.prod(sp)), generator=torch.Generator().manual_seed(seed)).double().reshape(1, *sp)
        out, idx = pools[len(sp)](x, k, s, p, d, ceil_mode=ceil, return_indices=True)
        shape, table = pool_window_table(sp, k, s, p, d, ceil)
        assert shape == tuple(out.shape[1:]), (sp, k, s, p, d, ceil)
        flat = x.reshape(-1)
        for j, row in enumerate(table.tolist()):
            real = [i for i in row if i >= 0]
            assert real and max(real, key=lambda i: flat[i]) == idx.reshape(-1)[j]
            assert all(0 <= i < flat.numel() for i in real)


def test_window_table_marks_padding_and_per_sample_index_windows():
    shape, table = pool_window_table((3,), 2, 2, padding=1)
    assert shape == (2,) and table.tolist() == [[-1, 0], [1, 2]]
    wins = pool_index_windows((2, 3), 2, 2, 1)  # two channels: the second plane starts at 3
    assert wins.tolist() == [[-1, 0], [1, 2], [-1, 3], [4, 5]]
    assert pool_window_table((4, 4), 2)[1].tolist()[:2] == [[0, 1, 4, 5], [2, 3, 6, 7]]  # stride None: kernel


@pytest.mark.parametrize("sparse", [False, True])
def test_p_nonempty_on_both_sides(sparse):
    def rows(dense):
        return [{j: v for j, v in enumerate(r) if v} for r in dense] if sparse else dense

    open_rows = [[1, 0, 0, 0], [1, 1, 0, 0], [0, 0, 2, -1], [0, 0, 0, -1]]  # two coordinate-disjoint groups
    r = p_nonempty(rows(open_rows))
    assert r.status == "nonempty" and r.components == 2 and r.nonempty
    assert holds([{j: F(v) for j, v in enumerate(a) if v} for a in open_rows], r.witness)
    assert (r.point is None) == sparse
    empty_rows = [[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [-1, -1, 0, 0]]  # one group empty, one open
    e = p_nonempty(rows(empty_rows))
    assert e.status == "empty" and not e.nonempty and e.point is None
    assert check_gordan([{j: F(v) for j, v in enumerate(a) if v} for a in empty_rows], e.farkas)
    assert e.farkas[2] == 0  # the open group takes no part in the certificate
    # x2 < x1 < (1 + 2^-40) x2: a cone of width 2^-40 for x2 > 0, empty for x2 < 0; decided exactly either way
    eps = F(1, 2**40)
    assert p_nonempty([[1, -1], [-1, 1 + eps], [0, 1]]).status == "nonempty"
    thin = p_nonempty([[1, -1], [-1, 1 + eps], [0, -1]])
    assert thin.status == "empty" and check_gordan([{0: F(1), 1: F(-1)}, {0: F(-1), 1: 1 + eps}, {1: F(-1)}],
                                                   thin.farkas)


def test_rank_test_float_and_exact_forms_agree():
    Z = np.empty((2, 3), dtype=object)
    Z[:] = [[F(1, 3), F(2, 3), F(0)], [F(2, 3), F(4, 3), F(1, 7)]]
    assert independent_columns(Z) == [0, 2]
    z = torch.tensor([[0.5, 1.0], [1.0, 2.0], [0.0, 0.25]], dtype=torch.float64)  # N x B, columns independent
    assert full_column_rank(z) and independent_columns(z.t()) == [0, 2]
    assert not full_column_rank(torch.tensor([[1.0, 2.0], [2.0, 4.0]]))
    assert nonsingular([[F(1, 2**60), F(0)], [F(0), F(1)]]) and not nonsingular([[1, 2], [2, 4]])
    assert independent_columns(np.empty((0, 3), dtype=object)) == [] and nonsingular([])


def test_one_activation_map_and_the_exact_chain():
    assert [activation_of("call_module", c) for c in ("ReLU", "LeakyReLU", "Hardtanh", "Tanh")] == [
        "relu", "leaky_relu", "hardtanh", None]
    assert activation_of("call_function", "relu_") == "relu" and activation_of("call_method", "abs") is None
    net = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Sequential(torch.nn.ReLU(), torch.nn.Linear(2, 1)))
    assert [n for n, _ in chain(net)] == ["0", "1.0", "1.1"]

    class Branch(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)

        def forward(self, x):
            return self.a(x) + self.b(x)

    from nsverify.errors import UnsupportedOpError

    with pytest.raises(UnsupportedOpError):
        chain(torch.nn.Sequential(Branch()))


def test_park_proxies_are_derived_from_the_registry():
    """The certificates' one-sided proxies come from the registry, one side per kink, for every activation Park's
    theorems cover. PyTorch's derivatives at the kinks (measured on torch 2.13 and 2.14): relu and leaky_relu the
    left piece's at 0; relu6, hardtanh and hardsigmoid the flat piece's at both kinks (left at the lower kink,
    right at the upper one); clamp with scalar bounds 1 at both bounds up to torch 2.13 (the inner piece: right
    at the lower bound, left at the upper one) and the flat pieces' 0 from torch 2.14 on. abs (mix=1/2, the even
    split) has no one-sided derivative and is not in the map. The fixed piecewise-linear ops added with the losses
    (measured on torch 2.13.0, 2.14.0 and 2.14.1): softshrink the flat piece's 0 at both kinks (right at -lambda,
    left at lambda); rrelu in eval mode its lower slope (left); hinge_embedding_loss and margin_ranking_loss the
    sloped piece's -1 at the margin up to torch 2.13 (left) and the flat piece's 0 from 2.14.0 on (right);
    multi_margin_loss and multilabel_margin_loss the flat piece's 0 (left) in eager mode."""
    from nsverify.oracle.certificates import park_proxies
    from nsverify.registry.types import installed_release, release_key

    before_2_14 = release_key(installed_release()) < release_key("2.14.0")
    clamp = "right,left" if before_2_14 else "left,right"
    margin = "left" if before_2_14 else "right"
    assert park_proxies() == {"relu": "left", "leaky_relu": "left", "relu6": "left,right", "hardtanh": "left,right",
                              "hardsigmoid": "left,right", "clamp": clamp, "softshrink": "right,left",
                              "rrelu": "left", "hinge_embedding_loss": margin, "margin_ranking_loss": margin,
                              "multi_margin_loss": "left", "multilabel_margin_loss": "left"}


# ------------------------------------------------------------------ every park_layer activation, every kink
# Theorems 5 and 8 select activations by the registry's capability (park_layer), with kinks at every breakpoint and
# AD's side at each from the entry's rule (Park et al., Sec. 3: the premise is per kink). Multi-kink activations,
# where the side differs from kink to kink (left at the lower one, right at the upper one), are checked against
# the plain enumeration, which shares none of the layer reading.
MULTI_KINK = ["relu6", "hardtanh", "hardsigmoid"]


class _Functional(torch.nn.Module):
    """A custom forward calling the functional form: read from the autograd graph."""

    def __init__(self, fn, nin, nh):
        super().__init__()
        self.fn, self.a, self.h = fn, torch.nn.Linear(nin, nh), torch.nn.Linear(nh, 1)

    def forward(self, x):
        return self.h(self.fn(self.a(x)))


def _act(name: str, form: str):
    from nsverify import registry
    from nsverify.ad import Activation

    e = registry.get(name)
    return getattr(torch.nn, e.modules[0])() if form == "module" else Activation(name).torch_fn()


def _planted(name: str, form: str, seed: int):
    """A 2-3-1 network whose unit j sits on a kink of the activation (alternating between its kinks) for sample j;
    three samples in R^2: Theorem 5's columns are dependent, Theorem 8 decides."""
    from nsverify import registry

    kinks = registry.get(name).kinks
    g = torch.Generator().manual_seed(seed)
    m = (torch.nn.Sequential(torch.nn.Linear(2, 3), _act(name, form), torch.nn.Linear(3, 1)) if form == "module"
         else _Functional(_act(name, form), 2, 3)).double()
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(torch.round(torch.randn(p.shape, generator=g, dtype=torch.float64) * 2) / 4)
        a = m[0] if form == "module" else m.a
        x = torch.randint(-2, 3, (3, 2), generator=g).double()
        for j in range(3):
            a.bias[j] = float(kinks[(seed + j) % len(kinks)]) - float(a.weight[j] @ x[j])
    return m, x, torch.zeros(3, 1, dtype=torch.float64)


def _mse(o, t):
    return ((o - t) ** 2).mean()


def _check(m, x, t, loss=_mse, **kw):
    import nsverify

    return nsverify.check_module(m, loss, x, t, progress=False, time_limit=120, on_limit="unknown", **kw)


@pytest.mark.parametrize("form", ["module", "functional"])
@pytest.mark.parametrize("name", MULTI_KINK)
def test_multi_kink_activations_are_decided_by_theorem8_as_the_enumeration_decides(name, form):
    import nsverify
    from nsverify import registry

    decided, seen = 0, set()
    for seed in range(3):
        m, x, t = _planted(name, form, seed)
        v = _check(m, x, t)
        ref = _check(m, x, t, shortcuts=False)
        assert ref.status != "unknown", seed
        if v.certificate is not None and v.certificate["kind"] == "park_theorem8":
            assert v.status == "member" and nsverify.verify_certificate(v)
            assert ref.status == "member", seed  # never certify what the enumeration refutes
            seen |= {s.value for s in v.kinks if s.op == name}
            decided += 1
    assert decided >= 2, decided
    assert seen == set(registry.get(name).kinks)  # both kinks touched, each with its own side


@pytest.mark.parametrize("form", ["module", "functional"])
@pytest.mark.parametrize("name", MULTI_KINK)
def test_multi_kink_lemma2_cancellation_is_not_member_at_every_kink(name, form):
    """Park et al.'s Lemma 2 construction at each kink b: samples x = 1 and x = -1 through one unit y = w x + b
    (bias frozen on the kink), loss out_1 - out_2 = sigma(b + w) - sigma(b - w), whose derivative at w = 0 is the
    non-flat side's slope, while AD takes the flat side's 0 at both samples. Theorem 8's rows are opposite: the
    layered decision declines (P_l empty) and the enumeration proves not_member."""
    from nsverify import registry
    from nsverify.oracle.interp import Evaluation, module_function
    from nsverify.oracle.park import exact as layered

    for b in registry.get(name).kinks:
        lin1 = torch.nn.Linear(1, 1).double()
        with torch.no_grad():
            lin1.weight.zero_()
            lin1.bias.fill_(float(b))
        lin1.bias.requires_grad_(False)
        m = torch.nn.Sequential(lin1, _act(name, "module")) if form == "module" else _Functional(
            _act(name, form), 1, 1)
        if form != "module":
            m.a, m.h = lin1, torch.nn.Identity()
        x = torch.tensor([[1.0], [-1.0]], dtype=torch.float64)
        t = torch.zeros(2, 1, dtype=torch.float64)

        def loss(o, _t):
            return (o[0] - o[1]).sum()

        fn, w = module_function(m, loss, x, t)
        got = layered.decide(Evaluation(fn, w), m, loss, t)
        assert isinstance(got, str) and "is empty" in got, (b, got)
        assert _check(m, x, t, loss=loss).status == "not_member", b
        assert _check(m, x, t, loss=loss, shortcuts=False).status == "not_member", b


# ------------------------------------------------------------------------------------- the module-class tables
class _Mid(torch.nn.Module):
    def __init__(self, mid):
        super().__init__()
        self.a, self.r, self.mid, self.h = torch.nn.Linear(4, 4), torch.nn.ReLU(), mid, torch.nn.Linear(4, 1)

    def forward(self, x):
        return self.h(self.mid(self.r(self.a(x))))


LINEAR_MIDS = [torch.nn.Identity(), torch.nn.Dropout(0.5).eval(), torch.nn.Flatten(), torch.nn.Unflatten(1, (4,)),
               torch.nn.AvgPool1d(1), torch.nn.AdaptiveAvgPool1d(4)]
ANALYTIC_MIDS = [torch.nn.Tanh(), torch.nn.Sigmoid(), torch.nn.GELU(), torch.nn.SiLU(), torch.nn.Softplus(),
                 torch.nn.Softmax(dim=1), torch.nn.LogSoftmax(dim=1)]


def test_one_table_of_smooth_modules_with_its_linear_and_analytic_parts():
    """One table (``layers.SMOOTH_MODULES``) in two deliberate parts: linear modules (shape ops, averages, dropout
    with its mask) keep an affine module's input exact, so both the fx walk (structure checks, monitor) and the
    exact graph reading pass them; analytic nonlinear ones (tanh, softmax, ...) belong to a layer map in Conditions
    1 and 2, so the walk skips them, but their exact values are irrational, so the exact graph reading declines
    them by name (the autograd-graph reading takes them as analytic nodes)."""
    from nsverify.oracle.park import layers
    from nsverify.oracle.park.graph import graph_layers
    from nsverify.oracle.park.walk import walk

    assert set(layers.SMOOTH_MODULES) == set(layers.LINEAR_MODULES) | set(layers.ANALYTIC_MODULES)
    assert not set(layers.LINEAR_MODULES) & set(layers.ANALYTIC_MODULES)
    assert {type(m) for m in LINEAR_MIDS} == set(layers.LINEAR_MODULES) - {torch.nn.AvgPool2d,
                                                                          torch.nn.AdaptiveAvgPool2d}
    assert {type(m) for m in ANALYTIC_MIDS} == set(layers.ANALYTIC_MODULES)
    for mid in LINEAR_MIDS + ANALYTIC_MIDS:
        net = _Mid(mid)
        assert [n.kind for n in walk(net)] == ["affine", "activation", "affine"], mid
        if type(mid) in layers.LINEAR_MODULES:
            got, _calls = graph_layers(net)
            assert [L.act_name for L in got] == ["relu", None], mid
        else:
            with pytest.raises(layers.Declined, match=f"{type(mid).__name__}.*outside the graph layer model"):
                graph_layers(net)


@pytest.mark.parametrize("name", MULTI_KINK)
def test_multi_kink_activations_are_decided_by_theorem5_when_the_samples_are_independent(name):
    """Two independent samples in R^2: Theorem 5's rank premise holds at the touched layer, whichever kink each
    pre-activation sits on (the theorem moves every entry to either side); the enumeration agrees."""
    import nsverify
    from nsverify import registry

    kinks = registry.get(name).kinks
    m = torch.nn.Sequential(torch.nn.Linear(2, 2), _act(name, "module"), torch.nn.Linear(2, 1)).double()
    x = torch.tensor([[1.0, 0.0], [1.0, 2.0]], dtype=torch.float64)
    with torch.no_grad():
        m[0].weight.copy_(torch.tensor([[0.5, -0.25], [0.25, 0.5]], dtype=torch.float64))
        m[2].weight.copy_(torch.tensor([[0.5, -0.75]], dtype=torch.float64))
        m[0].bias.copy_(torch.tensor([float(kinks[0]) - 0.5, float(kinks[1]) - 1.25], dtype=torch.float64))
    t = torch.zeros(2, 1, dtype=torch.float64)
    v = _check(m, x, t)
    assert v.status == "member" and v.certificate["kind"] == "park_theorem5", v.stats.get("layers_declined")
    assert nsverify.verify_certificate(v)
    assert {s.value for s in v.kinks if s.op == name} == set(kinks)
    assert _check(m, x, t, shortcuts=False).status == "member"


@pytest.mark.parametrize("case", ["hardtanh_0_6", "clamp_positional", "leaky_relu_slope", "clamp_keyword"])
def test_an_activation_call_is_read_with_its_own_arguments(case):
    """The autograd-graph reading takes a call's kinks from the instance its arguments describe (the registry's
    ``from_args``): ``F.hardtanh(y, 0., 6.)`` has its kinks at 0 and 6, ``torch.clamp(y, -1., 1.)`` at -1 and 1.
    Arguments the entry is not built from (``clamp(min=...)``, whose keyword is not ``clamp_for``'s) decline
    rather than fall back to a default and miss a kink."""
    import nsverify
    from nsverify.oracle.interp import Evaluation, module_function
    from nsverify.oracle.park import exact as layered

    fn, kink = {"hardtanh_0_6": (lambda y: torch.nn.functional.hardtanh(y, 0.0, 6.0), 6.0),
                "clamp_positional": (lambda y: torch.clamp(y, -1.0, 1.0), 1.0),
                "leaky_relu_slope": (lambda y: torch.nn.functional.leaky_relu(y, 0.25), 0.0),
                "clamp_keyword": (lambda y: y.clamp(min=-1.0), -1.0)}[case]
    m = _Functional(fn, 2, 2).double()
    x = torch.tensor([[1.0, 2.0]], dtype=torch.float64)
    with torch.no_grad():
        m.a.weight.copy_(torch.tensor([[0.5, 0.25], [-0.5, 0.25]], dtype=torch.float64))
        m.a.bias.copy_(torch.tensor([kink - 1.0, 0.125], dtype=torch.float64))  # unit 0 on the kink
        m.h.weight.copy_(torch.tensor([[0.75, -0.5]], dtype=torch.float64))
    t = torch.zeros(1, 1, dtype=torch.float64)
    f, w = module_function(m, _mse, x, t)
    got = layered.decide(Evaluation(f, w), m, _mse, t)
    if case == "clamp_keyword":
        assert isinstance(got, str) and "not the arguments" in got, got
        return
    assert not isinstance(got, str), got
    assert got.source == "autograd graph" and [s.value for s in got.sites] == [kink]
    v = _check(m, x, t)
    assert v.status == "member" and v.certificate["kind"] == "park_theorem8" and nsverify.verify_certificate(v)
    assert _check(m, x, t, shortcuts=False).status == "member"
