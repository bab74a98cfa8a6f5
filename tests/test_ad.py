"""AD-variant ops: forwards equal PyTorch's bitwise, backwards match their definitions exactly."""
from fractions import Fraction

import pytest
import torch
import torch.nn.functional as F

from nsverify import ad, kernels, registry
from nsverify.errors import NsverifyError, UnknownOpError, UnsupportedOpError
from nsverify.registry import RuleError, parse_rule, pool2d_windows

DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64]
DEVICES = ["cpu", pytest.param("cuda", marks=[pytest.mark.cuda, pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA GPU")])]


def fr(t: torch.Tensor) -> list[Fraction]:
    return [Fraction(v) for v in t.detach().double().flatten().tolist()]


def exact_in(dtype, values) -> bool:
    t = torch.tensor([float(v) for v in values], dtype=torch.float64).to(dtype)
    return fr(t) == [Fraction(v) for v in values]


# ----------------------------------------------------------------------------------------------------------
# relu_s
# ----------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("s", [0.0, 1.0, 0.5, -2.0, 0.375])
def test_relu_s_backward_is_its_definition(dtype, s, device):
    xs = [-2, -0.5, 0, 0, 0.25, 3]
    gs = [3, -1.5, 3, -0.75, 2, 0.5]  # upstream gradients != 1: the backward must multiply them
    x = torch.tensor(xs, dtype=dtype, device=device, requires_grad=True)
    g = torch.tensor(gs, dtype=dtype, device=device)
    y = ad.relu_s(x, s)
    assert torch.equal(y, torch.relu(x))
    (gx,) = torch.autograd.grad(y, x, g)
    want = [Fraction(gi) * ((1 if xi > 0 else 0) + Fraction(s) * (1 if xi == 0 else 0))
            for xi, gi in zip(xs, gs)]
    assert exact_in(dtype, want)
    assert fr(gx) == want


def test_relu_s_multiplies_upstream_gradient_regression():
    """A public implementation returns the constant s at zero entries instead of s * grad."""
    x = torch.zeros(3, requires_grad=True)
    (gx,) = torch.autograd.grad(ad.relu_s(x, 0.5), x, torch.tensor([4.0, -2.0, 0.0]))
    assert gx.tolist() == [2.0, -1.0, 0.0]


def test_relu_s_nan_and_inf_like_pytorch():
    x = torch.tensor([float("nan"), -1.0, 2.0], requires_grad=True)
    g = torch.tensor([1.0, float("inf"), 1.0])
    (a,) = torch.autograd.grad(ad.relu_s(x, 0.0), x, g)
    (b,) = torch.autograd.grad(torch.relu(x), x, g)
    assert torch.equal(a.isnan(), b.isnan()) and torch.equal(a.nan_to_num(), b.nan_to_num())


# ----------------------------------------------------------------------------------------------------------
# one forward, several backward rules
# ----------------------------------------------------------------------------------------------------------
def test_rules_are_read_at_backward_time():
    x = torch.tensor([-1.0, 0.0, 0.0, 2.0], requires_grad=True)
    pool_in = torch.tensor([[[[1.0, 1.0], [1.0, 0.0]]]], requires_grad=True)
    relu = ad.ReLUVariant()
    pool = ad.MaxPool2dVariant(2)
    y = relu(x).sum() + pool(pool_in).sum()
    got = {}
    for s, rule in [(0.0, "native"), (1.0, "minimal"), (0.25, "hybrid=2")]:
        with ad.backward_rules(relu=s, max_pool2d=rule):
            got[s] = torch.autograd.grad(y, (x, pool_in), retain_graph=True)
    assert got[0.0][0].tolist() == [0, 0, 0, 1] and got[1.0][0].tolist() == [0, 1, 1, 1]
    assert got[0.25][0].tolist() == [0, 0.25, 0.25, 1]
    assert got[0.0][1].flatten().tolist() == [1, 0, 0, 0]
    assert got[1.0][1].flatten().tolist() == [Fraction(1, 3), Fraction(1, 3), Fraction(1, 3), 0] or \
        torch.allclose(got[1.0][1].flatten(), torch.tensor([1 / 3, 1 / 3, 1 / 3, 0]))
    # hybrid beta=2: first (1-2)*1 + 2/3, others 2/3
    assert torch.allclose(got[0.25][1].flatten(), torch.tensor([-1 + 2 / 3, 2 / 3, 2 / 3, 0]))
    assert ad.active_rules()["relu"] == registry.torch_rule("relu") == (parse_rule("left"),)  # restored
    assert ad.active_rules()["max_pool2d"] == parse_rule("first")


def test_explicit_rules_override_the_active_setting():
    x = torch.zeros(2, requires_grad=True)
    y = ad.relu_s(x, 1.0).sum()
    with ad.backward_rules(relu=0.0):
        (g,) = torch.autograd.grad(y, x)
    assert g.tolist() == [1.0, 1.0]


@pytest.mark.parametrize("bad, valid", [
    (dict(max_pool2d="avg"), "Valid rules"), (dict(relu="one"), "Valid rules"), (dict(relu="first"), "kink rules"),
    (dict(max_pool2d="last"), "first, even, hybrid"), (dict(max="even"), "max_pool2d"),
    (dict(nonsense=1), "Known ops"), (dict(relu_s=0.0), "Known ops"), (dict(maxpool="native"), "max_pool2d"),
    (dict(hardtanh="up"), "Valid rules"), (dict(hardtanh=["left"]), "one rule per kink"),
    (dict(normpool="R"), "P"),
])
def test_bad_rules_raise_and_name_the_valid_ones(bad, valid):
    with pytest.raises(NsverifyError, match=valid):
        with ad.backward_rules(**bad):
            pass


def test_rules_accept_every_spelling_of_the_vocabulary():
    x = torch.tensor([0.0, 6.0], requires_grad=True)
    pool_in = torch.tensor([[[[1.0, 1.0], [1.0, 0.0]]]], requires_grad=True)
    y = ad.ReLUVariant()(x).sum() + ad.PiecewiseLinearVariant("relu6")(x).sum() + ad.MaxPool2dVariant(2)(pool_in).sum()
    for relu in ["value=1", 1, "right", ("mix", 1), "mix=1"]:
        for pool in ["even", "minimal", "min_norm", ("hybrid", 1)]:
            with ad.backward_rules(relu=relu, relu6=["right", "left"], max_pool2d=pool):
                gx, gp = torch.autograd.grad(y, (x, pool_in), retain_graph=True)
            # relu'(0) = 1 (x=6: 1), relu6 inside at both kinks: 1 and 1
            assert gx.tolist() == [2.0, 2.0], (relu, pool)
            assert torch.allclose(gp.flatten(), torch.tensor([1 / 3, 1 / 3, 1 / 3, 0])), (relu, pool)
    with ad.backward_rules(relu6="torch", max_pool2d="torch", relu="torch"):
        gx, gp = torch.autograd.grad(y, (x, pool_in))
    assert gx.tolist() == [0.0, 1.0] and gp.flatten().tolist() == [1.0, 0, 0, 0]  # PyTorch's rules


def test_bad_arguments_raise_clear_errors():
    with pytest.raises(RuleError, match="Valid rules: first, last, even"):
        ad.max_pool2d(torch.zeros(1, 1, 2, 2), 2, rule="avg")
    with pytest.raises(RuleError, match="first, even, hybrid"):
        ad.MaxPool2dVariant(2, rule="returned")
    with pytest.raises(RuleError, match="relu_s: .*kink rules"):
        ad.relu_s(torch.zeros(2), "even")
    with pytest.raises(UnknownOpError):
        ad.piecewise_linear(torch.zeros(2), "relu7")
    with pytest.raises(UnsupportedOpError, match="non-polynomial"):
        ad.piecewise_linear(torch.zeros(2), "selu")
    with pytest.raises(NsverifyError, match="one rule per kink"):
        ad.piecewise_linear(torch.zeros(2, requires_grad=True), "relu6", ["left"])
    with pytest.raises(NsverifyError, match="ReLUs"):
        ad.max_relu(torch.zeros(4), [0.0, 1.0])
    with pytest.raises(NsverifyError, match="1-d"):
        ad.max_loop(torch.zeros(2, 2))


def test_max1_max2_are_deprecated_names_of_max_loop_max_reduce():
    """ad.max1 / ad.max2 clashed with Boustany Fig. 3.9's max1 / max2 (two ReLU programs): renamed."""
    for old, new in (("max1", ad.max_loop), ("max2", ad.max_reduce)):
        with pytest.warns(DeprecationWarning, match=new.__name__):
            assert getattr(ad, old) is new
    with pytest.raises(AttributeError):
        ad.max3  # noqa: B018


# ----------------------------------------------------------------------------------------------------------
# piecewise-linear activations
# ----------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ["relu", "relu6", "hardtanh", "hardsigmoid", "abs", "clamp"])
def test_piecewise_linear_choices(name, dtype):
    from nsverify.registry import get

    entry = get(name)
    bps = list(entry.breakpoints)
    x = torch.tensor([float(b) for b in bps], dtype=dtype, requires_grad=True)
    g = torch.full_like(x, 2.0)
    y = ad.piecewise_linear(x, name, "torch")
    assert torch.equal(y, entry.torch_fn(x.detach(), **entry.kwargs))
    (gt,) = torch.autograd.grad(y, x, g)
    (gref,) = torch.autograd.grad(entry.torch_fn(x, **entry.kwargs), x, g)
    assert torch.equal(gt, gref)  # "torch" reproduces PyTorch at every kink
    for choice in ["left", "right", ("mix", 0.25), 0.75]:
        (gc,) = torch.autograd.grad(ad.piecewise_linear(x, name, choice), x, g)
        want = []
        for b in bps:
            left, right = entry.one_sided(b)
            if isinstance(choice, str):
                v = {"left": left, "right": right}[choice]
            elif isinstance(choice, tuple):
                v = Fraction(3, 4) * left + Fraction(1, 4) * right
            else:
                v = Fraction(choice)
            want.append(2 * v)
        if exact_in(dtype, want):
            assert fr(gc) == want, (name, choice)
        else:  # hardsigmoid's 1/6: one rounding of the exact value (multiplication in the compute type)
            eps = Fraction(torch.finfo(dtype).eps)
            assert all(abs(a - b) <= eps * abs(b) for a, b in zip(fr(gc), want)), (name, choice)


@pytest.mark.parametrize("name", ["relu6", "hardtanh", "hardswish", "leaky_relu", "relu", "abs"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.float64])
def test_piecewise_linear_matches_pytorch_everywhere(name, dtype):
    from nsverify.registry import get

    entry = get(name)
    x = torch.linspace(-8, 8, 257, dtype=dtype).requires_grad_()
    g = torch.linspace(-2, 3, 257, dtype=dtype)
    (a,) = torch.autograd.grad(ad.piecewise_linear(x, name, "torch"), x, g)
    (b,) = torch.autograd.grad(entry.torch_fn(x, **entry.kwargs), x, g)
    if name == "hardswish":  # PyTorch's middle piece is g * (x / 3 + 0.5); ours g * (1/2 + x/3) by Horner
        assert torch.allclose(a.double(), b.double(), rtol=0, atol=4 * torch.finfo(dtype).eps * 8)
    else:
        assert torch.equal(a, b)


def test_piecewise_linear_per_kink_list_and_active_rule():
    x = torch.tensor([0.0, 6.0], requires_grad=True)
    (g,) = torch.autograd.grad(ad.piecewise_linear(x, "relu6", ["right", "left"]).sum(), x)
    assert g.tolist() == [1.0, 1.0]
    y = ad.PiecewiseLinearVariant("relu6")(x).sum()
    with ad.backward_rules(relu6=("mix", 0.5)):
        (g,) = torch.autograd.grad(y, x)
    assert g.tolist() == [0.5, 0.5]


# ----------------------------------------------------------------------------------------------------------
# max_pool2d variants against an exact reference built from the definitions (Boustany Def. 10)
# ----------------------------------------------------------------------------------------------------------
GEOMS = [
    dict(kernel_size=2),
    dict(kernel_size=3, stride=1),  # overlapping
    dict(kernel_size=3, stride=2, padding=1, dilation=2),
    dict(kernel_size=2, ceil_mode=True),
    dict(kernel_size=(2, 3), stride=(1, 2), padding=(1, 1)),
]


def reference_pool_grad(x2d, gout, geom, jac, beta):
    """Exact per-plane VJP from the definitions, in Fractions."""
    h, w = len(x2d), len(x2d[0])
    flat = [v for row in x2d for v in row]
    (ho, wo), wins = pool2d_windows(h, w, geom["kernel_size"], geom.get("stride"), geom.get("padding", 0),
                                    geom.get("dilation", 1), geom.get("ceil_mode", False))
    grad = [Fraction(0)] * (h * w)
    for j, win in enumerate(wins):
        m = max(flat[i] for i in win)
        tie = [i for i in win if flat[i] == m]
        g = gout[j]
        native = {tie[0]: g}
        minimal = {i: g / len(tie) for i in tie}
        for i in tie:
            if jac == "native":
                grad[i] += native.get(i, 0)
            elif jac == "minimal":
                grad[i] += minimal[i]
            else:
                grad[i] += (1 - beta) * native.get(i, 0) + beta * minimal[i]
    return (ho, wo), wins, grad


@pytest.fixture(params=["reference", "auto"])
def kernel_mode(request):
    """Both backward paths: the pure-PyTorch reference and the fused kernel (nsverify.kernels) where it builds."""
    with kernels.use(request.param):
        yield request.param


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("jac,beta", [("native", None), ("minimal", None), ("hybrid", Fraction(1, 2)),
                                      ("hybrid", Fraction(4)), ("hybrid", Fraction(-1, 4))])
@pytest.mark.parametrize("gi", range(len(GEOMS)))
def test_maxpool_variants_exact(gi, jac, beta, dtype, kernel_mode):
    geom = GEOMS[gi]
    gen = torch.Generator().manual_seed(gi)
    h, w = 7, 8
    xi = torch.randint(0, 3, (2, h, w), generator=gen)  # many ties
    x = xi.to(dtype).unsqueeze(0).requires_grad_()
    ref = F.max_pool2d(x, **geom)
    y = ad.max_pool2d(x, **geom, rule=jac if beta is None else ("hybrid", float(beta)))
    assert torch.equal(y, ref)
    gouts, wants = [], []
    for c in range(2):
        plane = [[Fraction(int(v)) for v in row] for row in xi[c].tolist()]
        (ho, wo), wins, _ = reference_pool_grad(plane, [Fraction(1)] * 10_000, geom, "native", 0)
        # upstream gradient chosen so that every term is dyadic: g_j = |tie set| * k_j / 4
        counts = [sum(1 for i in win if plane[i // w][i % w] == max(plane[t // w][t % w] for t in win))
                  for win in wins]
        ks = torch.randint(-3, 4, (len(wins),), generator=gen).tolist()
        gout = [Fraction(cnt * k, 4) for cnt, k in zip(counts, ks)]
        gouts.append(gout)
        wants += reference_pool_grad(plane, gout, geom, jac, beta if beta is not None else 1)[2]
    g = torch.tensor([[float(v) for v in go] for go in gouts], dtype=dtype).reshape(ref.shape)
    (gx,) = torch.autograd.grad(y, x, g)
    assert exact_in(dtype, wants)
    assert fr(gx) == wants
    if jac == "native":
        (gn,) = torch.autograd.grad(ref, x, g)
        assert torch.equal(gx, gn)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_maxpool_minimal_non_dyadic_split_is_correctly_rounded(dtype, kernel_mode):
    x = torch.tensor([[[[1.0, 1.0], [1.0, 0.0]]]], dtype=dtype, requires_grad=True)
    (gx,) = torch.autograd.grad(ad.max_pool2d(x, 2, rule="minimal"), x,
                                torch.ones(1, 1, 1, 1, dtype=dtype))
    third = torch.tensor(float(Fraction(1, 3)), dtype=torch.float64).to(dtype)
    assert gx.flatten().tolist() == [third.item()] * 3 + [0.0]


@pytest.mark.parametrize("beta", [1.0, 10.0, 100.0, 1e3, 1e4])
def test_hybrid_forward_is_max_bitwise_in_float16(beta):
    gen = torch.Generator().manual_seed(1)
    x = (torch.rand(2, 3, 8, 8, generator=gen) * 100).to(torch.float16)
    x[0, 0, :2, :2] = 7.5  # a tie
    y = ad.max_pool2d(x, 2, rule=("hybrid", beta))
    assert torch.equal(y, F.max_pool2d(x, 2))
    # the two-forward implementation (Boustany, Ch.3, Def 10) does corrupt it (so this test can fail):
    naive = (1 - beta) * F.max_pool2d(x, 2) + beta * F.max_pool2d(x, 2)
    if beta >= 100:
        assert not torch.equal(naive, F.max_pool2d(x, 2))


def test_hybrid_tie_free_windows_get_exactly_g(kernel_mode):
    x = torch.tensor([[[[1.0, 2.0], [3.0, 4.0]]]], dtype=torch.float16, requires_grad=True)
    (gx,) = torch.autograd.grad(ad.max_pool2d(x, 2, rule="hybrid=1e4"), x,
                                torch.tensor([[[[0.1]]]], dtype=torch.float16))
    assert gx.flatten().tolist() == [0, 0, 0, torch.tensor(0.1, dtype=torch.float16).item()]


def test_maxpool_nan_window_falls_back_to_native(kernel_mode):
    x = torch.tensor([[[[float("nan"), 1.0], [1.0, 0.0]]]], requires_grad=True)
    for rule in ["minimal", "hybrid=3"]:
        (gx,) = torch.autograd.grad(ad.max_pool2d(x, 2, rule=rule), x, torch.ones(1, 1, 1, 1))
        assert gx.flatten().tolist() == [1.0, 0.0, 0.0, 0.0]


def test_maxpool1d_and_unbatched():
    x = torch.tensor([[0.0, 0.0, 1.0, 1.0]], requires_grad=True)
    y = ad.max_pool1d(x, 2, stride=1, rule="minimal")
    assert torch.equal(y, F.max_pool1d(x, 2, stride=1))
    (gx,) = torch.autograd.grad(y.sum(), x)
    assert gx.tolist() == [[0.5, 0.5, 1.5, 0.5]]  # windows (0,0), (0,1), (1,1)
    x3 = torch.zeros(1, 2, 2, requires_grad=True)
    (gx,) = torch.autograd.grad(ad.max_pool2d(x3, 2, rule="minimal").sum(), x3)
    assert gx.flatten().tolist() == [0.25] * 4


# ----------------------------------------------------------------------------------------------------------
# torch.func, forward mode, compile
# ----------------------------------------------------------------------------------------------------------
def test_torch_func_grad_vmap_and_jvp():
    x = torch.tensor([[[[1.0, 1.0], [0.0, 1.0]]]])
    for rule, want in [("native", [1, 0, 0, 0]), ("minimal", [1 / 3, 1 / 3, 0, 1 / 3]),
                       ("hybrid=2", [-1 + 2 / 3, 2 / 3, 0, 2 / 3])]:
        def f(t, rule=rule):
            return ad.max_pool2d(t, 2, rule=rule)

        g = torch.func.grad(lambda t: f(t).sum())(x)
        assert torch.allclose(g.flatten(), torch.tensor(want, dtype=torch.float32))
        batched = torch.func.vmap(torch.func.grad(lambda t: f(t).sum()))(torch.stack([x, x]))
        assert torch.allclose(batched[1].flatten(), torch.tensor(want, dtype=torch.float32))
        # forward mode: the same Jacobian applied to a tangent; tangent ones -> sum of the row
        _, jv = torch.func.jvp(f, (x,), (torch.ones_like(x),))
        assert torch.allclose(jv.flatten(), torch.tensor([float(sum(want))]))
    gr = torch.func.grad(lambda t: ad.relu_s(t, 0.5).sum())(torch.tensor([0.0, 1.0, -1.0]))
    assert gr.tolist() == [0.5, 1.0, 0.0]
    _, jv = torch.func.jvp(lambda t: ad.piecewise_linear(t, "relu6", "right"), (torch.tensor([0.0, 6.0]),),
                           (torch.ones(2),))
    assert jv.tolist() == [1.0, 0.0]


def test_jvp_overlapping_padded_matches_vjp_transpose():
    gen = torch.Generator().manual_seed(3)
    x = torch.randint(0, 2, (1, 1, 5, 6), generator=gen).double()
    geom = dict(kernel_size=3, stride=2, padding=1)
    for jac in ["native", "minimal", "hybrid=3"]:
        f = lambda t, jac=jac: ad.max_pool2d(t, **geom, rule=jac)  # noqa: E731
        jac_rev = torch.autograd.functional.jacobian(f, x).reshape(-1, x.numel())
        jac_fwd = torch.stack([torch.func.jvp(f, (x,), (e.reshape(x.shape),))[1].flatten()
                               for e in torch.eye(x.numel(), dtype=torch.float64)], 1)
        assert torch.equal(jac_rev, jac_fwd), jac


@pytest.mark.parametrize("device", DEVICES)
def test_all_dtypes_run_on_device(device):
    for dtype in DTYPES:
        x = torch.zeros(1, 1, 4, 4, dtype=dtype, device=device, requires_grad=True)
        (g,) = torch.autograd.grad(ad.max_pool2d(x, 2, rule="minimal").sum(), x)
        assert g.dtype == dtype and g.sum().item() == 4
        (g,) = torch.autograd.grad(ad.relu_s(x, 1.0).sum(), x)
        assert g.sum().item() == 16


def test_torch_compile_works_or_raises_clearly():
    def f(t):
        return ad.relu_s(t, None).sum() + ad.max_pool2d(t.reshape(1, 1, 2, 2), 2, rule="minimal").sum()

    compiled = torch.compile(f, backend="eager")
    x = torch.zeros(4, requires_grad=True)
    y = compiled(x)
    with ad.backward_rules(relu=1.0):
        (g,) = torch.autograd.grad(y, x, retain_graph=True)
    assert g.tolist() == [1.25] * 4  # the rule is still read at backward time under compile
    with ad.backward_rules(relu=0.0):
        (g,) = torch.autograd.grad(y, x)
    assert g.tolist() == [0.25] * 4


# ----------------------------------------------------------------------------------------------------------
# NormPool, max programs, paper tables
# ----------------------------------------------------------------------------------------------------------
def test_normpool_programs():
    x = torch.tensor([[[[0.0, 0.0, 3.0, 0.0], [0.0, 0.0, 0.0, 4.0]]]], requires_grad=True)
    y = ad.NormPool2dVariant(2)(x)
    assert y.flatten().tolist() == [0.0, 5.0]
    with ad.backward_rules(normpool="P"):
        (gp,) = torch.autograd.grad(y.sum(), x, retain_graph=True)
    with ad.backward_rules(normpool="Q"):
        (gq,) = torch.autograd.grad(y.sum(), x)
    want = torch.tensor([0, 0, 0.6, 0, 0, 0, 0, 0.8])
    assert torch.equal(gp.flatten(), want)
    want[0] = 1.0
    assert torch.equal(gq.flatten(), want)
    # forward mode: the same Jacobian rows applied to a tangent (window j = columns 2j, 2j+1)
    tangent = torch.arange(1.0, 9.0).reshape(x.shape)
    for prog, g in [("P", gp), ("Q", gq)]:
        _, jv = torch.func.jvp(lambda t, prog=prog: ad.normpool2d(t, 2, prog), (x.detach(),), (tangent,))
        prod = (g * tangent).reshape(2, 2, 2)  # rows, windows, columns in the window
        assert torch.allclose(jv.flatten(), prod.sum((0, 2)))


def test_max_relu_choices():
    x = torch.zeros(4, requires_grad=True)
    (g0,) = torch.autograd.grad(ad.max_relu(x, 0.0), x)
    assert g0.tolist() == [0.25] * 4
    (g1,) = torch.autograd.grad(ad.max_relu(x, [1.0, 0.0] * 3), x)
    assert g1.tolist() == [1.0, 0.0, 0.0, 0.0]
    y = torch.tensor([1.0, 5.0, 2.0])
    assert ad.max_relu(y).item() == 5.0 and ad.max_loop(y).item() == 5.0


TS = [-1e-3, -1e-2, -1e-1, 0.0, 1e1, 1e2, 1e3]


def _zero_grad(program, x, t):
    tt = torch.tensor(t, dtype=torch.float32, requires_grad=True)
    (g,) = torch.autograd.grad(program(tt * x), tt)
    return g.item()


def test_boustany_table_3_1_float32():
    """zero(t) = max1(t x) - max2(t x) (Boustany Ch.3, Table 3.1): -1.5 at t=0 for x=(1,2,3,4), 0 elsewhere; for
    x = 1.4 (1,1,1,1) about 1e-7 at every t (the thesis: 5.96e-8 = 2^-24)."""
    zero = lambda z: ad.max_loop(z) - ad.max_reduce(z)  # noqa: E731
    x1 = torch.tensor([1.0, 2.0, 3.0, 4.0])
    assert [_zero_grad(zero, x1, t) for t in TS] == [0, 0, 0, -1.5, 0, 0, 0]
    x2 = 1.4 * torch.ones(4)
    vals = [_zero_grad(zero, x2, t) for t in TS]
    assert all(abs(v) == 2.0**-24 for v in vals), vals  # measured: -2^-24 (the table prints 10^-7)


def test_boustany_table_3_3_float32():
    """zero_2 with ReLU-built max programs (Boustany Ch.3, the code of Fig. 3.9 and Table 3.3): +1.5 at t=0
    for x=(1,2,3,4)."""
    zero2 = lambda z: ad.max_relu(z, 0.0) - ad.max_relu(z, [1.0, 0.0] * 3)  # noqa: E731
    x1 = torch.tensor([1.0, 2.0, 3.0, 4.0])
    assert [_zero_grad(zero2, x1, t) for t in TS] == [0, 0, 0, 1.5, 0, 0, 0]
    vals = [_zero_grad(zero2, 1.4 * torch.ones(4), t) for t in TS]
    assert all(abs(v) == 2.0**-24 for v in vals), vals


def test_despres_table_2():
    """f(t) = max1(t x) - max2(t x), x = (1,2,3,4) (Després, Sec. 4.3, Table 2)."""
    zero = lambda z: ad.max_loop(z) - ad.max_reduce(z)  # noqa: E731
    x = torch.tensor([1.0, 2.0, 3.0, 4.0])
    ts = [-1, -0.5, -0.01, 0, 0.01, 0.5, 1]
    assert [_zero_grad(zero, x, t) for t in ts] == [0, 0, 0, -1.5, 0, 0, 0]


def test_despres_table_3():
    """f(t) = maxpool1d(t, 4t) - maxpool1d(4t, t), MaxPool1d(2, stride=1) (Després, Sec. 4.4, Table 3): -3 at t = 0."""
    ts = [-1, -0.5, -0.01, 0, 0.01, 0.5, 1]

    def f(tt):
        a = torch.stack([tt, 4 * tt]).reshape(1, 1, 2)
        b = torch.stack([4 * tt, tt]).reshape(1, 1, 2)
        return (F.max_pool1d(a, 2, stride=1) - F.max_pool1d(b, 2, stride=1)).sum()

    got = []
    for t in ts:
        tt = torch.tensor(float(t), requires_grad=True)
        got.append(torch.autograd.grad(f(tt), tt)[0].item())
    assert got == [0, 0, 0, -3, 0, 0, 0]
    # the minimal Jacobian removes it: (1/2,1/2).(1,4) - (1/2,1/2).(4,1) = 0
    tt = torch.tensor(0.0, requires_grad=True)
    a = torch.stack([tt, 4 * tt]).reshape(1, 1, 2)
    b = torch.stack([4 * tt, tt]).reshape(1, 1, 2)
    y = ad.max_pool1d(a, 2, stride=1, rule="minimal") - ad.max_pool1d(b, 2, stride=1, rule="minimal")
    assert torch.autograd.grad(y.sum(), tt)[0].item() == 0.0
