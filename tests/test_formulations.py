"""The table of equivalent formulations: its exact Clarke sets (by hand), that its formulations are one function
(values agree at and around every point, gradients agree away from it), and what they return at the kink."""
from __future__ import annotations

from fractions import Fraction as F

import pytest
import torch

from nsverify.conventions import findings as fd
from nsverify.conventions import formulations as fm
from nsverify.errors import NsverifyError

H = F(1, 2)

#: the Bouligand gradients at each point, by hand (one entry per input of the point)
CLARKE = {
    ("relu", "x=0"): {(0,), (1,)},
    ("clamp(0, 1)", "x=0"): {(0,), (1,)},
    ("clamp(0, 1)", "x=1"): {(1,), (0,)},
    ("relu6", "x=0"): {(0,), (1,)},
    ("relu6", "x=6"): {(1,), (0,)},
    ("hardtanh", "x=-1"): {(0,), (1,)},
    ("hardtanh", "x=1"): {(1,), (0,)},
    ("abs", "x=0"): {(-1,), (1,)},
    # a = (1, 0, 2), b = (1, 3, 2), cotangent (1, 2, 3): column 1 takes b (weight 2); columns 0 and 2 tie, each
    # giving its weight to a or to b
    ("maximum(a, b)", "x == y"): {(1, 0, 3, 0, 2, 0), (1, 0, 0, 0, 2, 3), (0, 0, 3, 1, 2, 0), (0, 0, 0, 1, 2, 3)},
    # rows [1, 1, 0] (weight 1) and [2, 0, 2] (weight 2): each row's weight to one of its two maxima
    ("amax(x, dim)", "ties in rows"): {(1, 0, 0, 2, 0, 0), (1, 0, 0, 0, 0, 2), (0, 1, 0, 2, 0, 0),
                                       (0, 1, 0, 0, 0, 2)},
}
#: the promise at each point, by hand: the minimum-norm element of the hull above (every point is locally convex
#: or concave)
PROMISED = {**{k: (0,) for k in CLARKE if len(next(iter(CLARKE[k]))) == 1},
            ("maximum(a, b)", "x == y"): (H, 0, F(3, 2), H, 2, F(3, 2)),
            ("amax(x, dim)", "ties in rows"): (H, H, 0, 1, 0, 1)}

POINTS = [(g, p) for g in fm.TABLE for p in g.points]


def test_every_point_has_a_hand_derived_clarke_set():
    assert {(g.name, p.label) for g, p in POINTS} == set(CLARKE)


@pytest.mark.parametrize("group,point", POINTS, ids=lambda v: getattr(v, "name", getattr(v, "label", v)))
def test_clarke_set_and_promise_by_hand(group, point):
    key = (group.name, point.label)
    assert set(point.clarke_vertices()) == {tuple(F(v) for v in vert) for vert in CLARKE[key]}
    assert point.promise(group.name).value == tuple(F(v) for v in PROMISED[key])


def _x(point, shift=None):
    x = torch.tensor([float(v) for v in point.values], dtype=torch.float64).reshape(point.shape)
    return x if shift is None else x + shift.reshape(point.shape)


@pytest.mark.parametrize("group,point", POINTS, ids=lambda v: getattr(v, "name", getattr(v, "label", v)))
def test_formulations_are_one_function(group, point):
    """Values agree bitwise at the point and at dyadic points around it; gradients agree exactly off the kink
    (the shifts break every tie)."""
    n = len(point.values)
    shifts = [torch.zeros(n, dtype=torch.float64)] + [
        torch.tensor([s * (k + 1) / 64 for k in range(n)], dtype=torch.float64) for s in (1, -1)]
    ref = group.formulations[0]
    for sh in shifts:
        want = ref.fn(_x(point, sh))
        for f in group.formulations[1:]:
            assert torch.equal(f.fn(_x(point, sh)), want), (f.name, sh)
    for sh in shifts[1:]:
        grads = {}
        for f in group.formulations:
            x = _x(point, sh).requires_grad_(True)
            c = torch.ones(1, dtype=torch.float64) if point.cotangent is None else torch.tensor(
                [float(v) for v in point.cotangent], dtype=torch.float64)
            (g,) = torch.autograd.grad((f.fn(x) * c).sum(), x)
            grads[f.name] = g
        first = next(iter(grads.values()))
        assert all(torch.equal(g, first) for g in grads.values()), grads


@pytest.fixture(scope="module")
def measured():
    return fm.measure(dtypes=["float32", "float64", "bfloat16"], modes=["eager", "func", "jvp"])


def _at(results, group, point, name, dtype="float32", mode="eager"):
    return next(r for r in results if (r.group, r.point, r.formulation, r.dtype, r.mode) ==
                (group, point, name, dtype, mode))


def test_relu_formulations_at_zero(measured):
    # relu'(0) = 0 follows the rule (min-norm of [0, 1]); maximum(x, 0) splits evenly: 1/2, which does not
    relu = _at(measured, "relu", "x=0", "relu")
    mx = _at(measured, "relu", "x=0", "maximum(x, 0)")
    assert (relu.derivative, relu.follows) == ([0.0], "yes")
    assert (mx.derivative, mx.follows) == ([0.5], "no")
    pairs = {(d["a"], d["b"]) for d in fm.disagreements(measured) if d["group"] == "relu"}
    assert ("relu", "maximum(x, 0)") in pairs
    assert ("relu", "where(x > 0, x, 0)") not in pairs  # where takes the right-hand 0 at x == 0: also 0


def test_every_measured_derivative_is_judged_against_the_promise(measured):
    for r in measured:
        assert r.error is None, r
        prom = fm.groups([r.group])[0].point(r.point).promise(r.group)
        got = [F(v) for v in r.derivative] if all(v == v for v in r.derivative) else None  # None: a NaN
        assert r.follows in ("yes", "no"), r  # every promise here is a dyadic vector: no rounding needed
        assert (got == list(prom.value)) == (r.follows == "yes"), r


def test_maximum_pair_in_its_two_inputs(measured):
    r = _at(measured, "maximum(a, b)", "x == y", "maximum(a, b)")
    assert r.derivative == [0.5, 0.0, 1.5, 0.5, 2.0, 1.5] and r.follows == "yes"
    relu_form = _at(measured, "maximum(a, b)", "x == y", "a + relu(b - a)")  # relu'(0) = 0: all to a
    assert relu_form.derivative == [1.0, 0.0, 3.0, 0.0, 2.0, 0.0] and relu_form.follows == "no"


def test_sqrt_of_square_is_nan_where_the_rule_promises_zero(measured):
    r = _at(measured, "abs", "x=0", "sqrt(x * x)")
    assert r.derivative != r.derivative or r.derivative[0] != r.derivative[0]  # NaN
    assert r.follows == "no"


def test_formulation_findings_name_expected_and_first_release(measured):
    found = {f.id: f for f in fd.formulation_findings(measured, installed="2.13.0")}
    f = found["formulations_relu_x_0_relu_vs_maximum_x__0_"]
    assert f.expected == ["0"] and f.first_release == "2.13.0"
    assert f.sample["input"]["values"] == [0.0] and f.sample["clarke_vertices"] == [["0"], ["1"]]
    assert "2.4.1" in f.detail["history"]["relu"]  # relu is a registry cell: its recorded values come along


def test_unknown_group_and_mode_are_named():
    with pytest.raises(NsverifyError, match="choose from"):
        fm.groups(["relu7"])
    with pytest.raises(NsverifyError, match="unknown mode"):
        fm.measure(["relu"], modes=["sideways"])


@pytest.mark.slow
def test_compile_mode():
    rs = fm.measure(["relu"], dtypes=["float32"], modes=["compile"], compile_backend="aot_eager")
    assert _at(rs, "relu", "x=0", "relu", mode="compile").derivative == [0.0]
