"""The registry: exact one-sided derivatives, Clarke sets, exact kink inputs, selection semantics."""
from fractions import Fraction

import mpmath
import pytest
import torch

from nsverify import registry
from nsverify.errors import InexactError, TooManyPieces, UnknownOpError
from nsverify.rational import hull_weights, in_hull

DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64]
REQUIRED = ["relu", "leaky_relu", "relu6", "hardtanh", "hardsigmoid", "hardswish", "elu", "selu", "abs",
            "clamp", "clamp_tensor", "maximum", "minimum", "amax", "amin", "max", "min", "max_dim", "min_dim",
            "median", "max_pool1d", "max_pool2d", "adaptive_max_pool2d", "sort", "topk"]


def test_required_primitives_are_registered():
    assert set(REQUIRED) <= set(registry.names())
    assert len(registry.names("elementwise")) >= 10


def _mp(v):
    return mpmath.mpf(v.numerator) / v.denominator if isinstance(v, Fraction) else mpmath.mpf(v)


@pytest.mark.parametrize("name", registry.names("elementwise"))
def test_one_sided_derivatives_match_mpmath_difference_quotients(name):
    entry = registry.get(name)
    with mpmath.workdps(60):
        h = mpmath.mpf(10) ** -30
        for b in entry.breakpoints:
            left, right = entry.one_sided(b)
            x = _mp(b)
            fx = entry.mp_value(x)
            dq_left = (fx - entry.mp_value(x - h)) / h
            dq_right = (entry.mp_value(x + h) - fx) / h
            assert abs(dq_left - _mp(left)) < mpmath.mpf(10) ** -25, (name, b, "left")
            assert abs(dq_right - _mp(right)) < mpmath.mpf(10) ** -25, (name, b, "right")
            lo, hi = entry.clarke(b)
            assert _mp(lo) == min(_mp(left), _mp(right)) and _mp(hi) == max(_mp(left), _mp(right))
        # and the value is continuous at each kink (a Lipschitz piecewise function)
        for b in entry.breakpoints:
            assert abs(entry.mp_value(_mp(b) - h) - entry.mp_value(_mp(b))) < mpmath.mpf(10) ** -25


def test_exact_values_where_rational():
    assert registry.get("hardswish").one_sided(Fraction(3)) == (Fraction(3, 2), Fraction(1))
    assert registry.get("hardswish").one_sided(Fraction(-3)) == (Fraction(0), Fraction(-1, 2))
    assert registry.get("hardsigmoid").one_sided(Fraction(-3)) == (Fraction(0), Fraction(1, 6))
    assert registry.get("leaky_relu").one_sided(Fraction(0)) == (Fraction(1, 100), Fraction(1))
    left, right = registry.get("selu").one_sided(Fraction(0))
    with mpmath.workdps(40):
        assert isinstance(left, mpmath.mpf) and abs(left - registry.SELU_SCALE * registry.SELU_ALPHA) < 1e-35


@pytest.mark.parametrize("dtype", DTYPES)
def test_kink_inputs_are_exact_in_every_dtype(dtype):
    for name in registry.names("elementwise"):
        entry = registry.get(name)
        x = registry.kink_inputs(entry, dtype)
        assert x.dtype == dtype
        assert [Fraction(v) for v in x.double().tolist()] == list(entry.breakpoints)
    for name in registry.names("selection"):
        for case in registry.get(name).cases:
            t = case.tensor(dtype)
            assert [Fraction(v) for v in t.double().flatten().tolist()] == list(case.values)


def test_inexact_values_raise():
    with pytest.raises(InexactError, match="not exactly representable"):
        registry.exact_tensor([Fraction(1, 3)], torch.float32)
    with pytest.raises(InexactError):
        registry.exact_tensor([2049], torch.float16)
    with pytest.raises(InexactError):
        registry.exact_tensor([257], torch.bfloat16)


@pytest.mark.parametrize("dtype", DTYPES)
def test_leaky_relu_slope_rounding_is_honest(dtype):
    """0.01 is not dyadic: PyTorch returns 0.01 rounded to the dtype (through float32 for 16-bit kernels)."""
    x = torch.zeros(1, dtype=dtype, requires_grad=True)
    (g,) = torch.autograd.grad(torch.nn.functional.leaky_relu(x).sum(), x)
    got = Fraction(g.item())
    assert got != Fraction(1, 100)
    assert got == registry.round_to_dtype(Fraction(1, 100), dtype)


@pytest.mark.parametrize("name", [n for n in registry.names("selection")])
def test_selection_cases_are_consistent(name):
    entry = registry.get(name)
    assert entry.cases, name
    for case in entry.cases:
        x = case.tensor(torch.float64)
        y = entry.torch_fn(x, **case.extra).flatten()
        # the forward value of each output is the window's selected (rank-r) entry
        for j, win in enumerate(case.windows):
            vals = sorted((case.values[i] for i in win.indices), reverse=win.direction == "max")
            assert Fraction(y[j].item()) == vals[win.rank], (name, case.label, j)
        # Bouligand pieces are gradients of the tie; the even split is in the Clarke set
        assert len(case.pieces) >= 1
        assert case.in_clarke(case.rules["even"]), (name, case.label)
        for rule in ("first", "last"):
            assert case.in_clarke(case.rules[rule]), (name, case.label, rule)
        assert case.torch_rule in set(case.rules) | {"other"}


def test_bouligand_pieces_of_a_max():
    case = registry.selection_case("t", [1, 1, 0], (3,), [registry.Window((0, 1, 2))], "even")
    assert set(case.pieces) == {(1, 0, 0), (0, 1, 0)}
    assert case.rules["even"] == (Fraction(1, 2), Fraction(1, 2), 0)
    assert case.directional([1, 2, 0]) == 2 and case.directional([2, 1, 0]) == 2
    assert case.directional([-1, -2, 0]) == -1


def test_too_many_pieces_is_a_clear_error():
    with pytest.raises(TooManyPieces, match="orderings"):
        registry.selection_case("big", [0] * 12, (12,), [registry.Window(tuple(range(12)), r, "max")
                                                          for r in range(12)], "first")


def test_hull_membership_is_exact():
    square = [(1, 0), (-1, 0), (0, 1), (0, -1)]
    assert in_hull((0, 0), square) and in_hull((Fraction(1, 2), Fraction(1, 2)), square)
    assert not in_hull((Fraction(1, 2), Fraction(1, 2) + Fraction(1, 10**12)), square)
    simplex = [(1, 0, 0), (0, 1, 0), (0, 0, 1)]
    w = hull_weights((Fraction(1, 3),) * 3, simplex)
    assert w == [Fraction(1, 3)] * 3
    assert not in_hull((Fraction(1, 3), Fraction(1, 3), Fraction(1, 3) + Fraction(1, 2**30)), simplex)
    assert not in_hull((0.0, 0.0, 0.0), simplex)  # torch's clamp-tensor zero is outside such a set
    assert in_hull((2, 2), [(1, 1), (3, 3)]) and not in_hull((2, 3), [(1, 1), (3, 3)])


def test_lookup_and_errors():
    with pytest.raises(UnknownOpError, match="Did you mean"):
        registry.get("reluu")
    assert registry.by_aten("aten.relu.default").name == "relu"
    assert registry.by_aten("aten.max.dim").name == "max_dim"
    assert registry.by_aten("aten.max.default").name == "max"
    assert registry.by_aten("aten.mm.default") is None


def test_pool_windows_match_pytorch_output_sizes():
    for h, w, geom in [(7, 8, dict(kernel=3, stride=2, padding=1)), (7, 8, dict(kernel=2, ceil_mode=True)),
                       (9, 9, dict(kernel=(2, 3), stride=(1, 2), padding=(1, 1), dilation=(2, 1)))]:
        (ho, wo), wins = registry.pool2d_windows(h, w, **geom)
        g = dict(geom)
        k = g.pop("kernel")
        out = torch.nn.functional.max_pool2d(torch.zeros(1, 1, h, w), k, **g)
        assert out.shape[-2:] == (ho, wo) and len(wins) == ho * wo
    assert [list(r) for r in registry.adaptive_windows(3, 2)] == [[0, 1], [1, 2]]
