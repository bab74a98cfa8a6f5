"""Interpreter properties: eqs 2.10/2.11, Theorem 3 / Corollary 2 bounds, forward = backward, torch."""

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nsverify.errors import NsverifyError, UnknownOpError
from nsverify.papers.costs import UNIT, CostModel, Program, backprop, evaluate, forprop
from nsverify.papers.costs.ops import D_RELU, OPS
from nsverify.papers.costs.randprog import ALL_OPS, RATIONAL_OPS, random_inputs, random_program

models = st.sampled_from([UNIT, CostModel(2, 0.5), CostModel(10, 0), CostModel(1, 3)])
seeds = st.integers(0, 10_000)
FEW = settings(max_examples=25, deadline=None)


@FEW
@given(seeds, st.integers(1, 4), st.integers(1, 14), models)
def test_backprop_cost_is_eq_2_10_and_bounded_by_omega_b(seed, p, n_ops, model):
    prog = random_program(seed, p, n_ops)
    rep = backprop(prog, random_inputs(seed, p), model)
    assert rep.cost_program == pytest.approx(prog.cost(model), rel=1e-12)  # eq 2.8
    assert rep.cost == pytest.approx(prog.cost_backprop_formula(model), rel=1e-12)  # eq 2.10
    assert rep.cost <= prog.omega_b(model) * rep.cost_program * (1 + 1e-12)  # Theorem 3 (i)


@FEW
@given(seeds, st.integers(1, 4), st.integers(1, 14))
def test_relu_programs_backprop_at_most_five_times_cost(seed, p, n_ops):
    prog = random_program(seed, p, n_ops, ops=D_RELU)
    assert prog.ops_used() <= set(D_RELU)
    rep = backprop(prog, random_inputs(seed, p), UNIT)
    assert rep.cost <= 5 * rep.cost_program  # Corollary 2
    assert prog.omega_b(UNIT) <= 5


@FEW
@given(seeds, st.integers(1, 4), st.integers(1, 14), models)
def test_forprop_cost_is_eq_2_11(seed, p, n_ops, model):
    prog = random_program(seed, p, n_ops)
    rep = forprop(prog, random_inputs(seed, p), model)
    assert rep.cost == pytest.approx(prog.cost_forprop_formula(model), rel=1e-12)
    assert rep.cost <= prog.omega_f(model) * rep.cost_program * (1 + 1e-12)


@FEW
@given(seeds, st.integers(1, 4), st.integers(1, 14), st.booleans())
def test_forward_and_backward_agree_exactly_even_at_kinks(seed, p, n_ops, at_zero):
    prog = random_program(seed, p, n_ops, ops=RATIONAL_OPS, exact=True)
    x = [Fraction(0)] * p if at_zero else random_inputs(seed, p, exact=True)
    try:
        b, f = backprop(prog, x), forprop(prog, x)
    except NsverifyError:  # inv(0) at a kink input: a clear error, not a wrong answer
        return
    assert b.value == f.value == evaluate(prog, x)[0]
    assert b.derivative == f.derivative  # exact Fractions: same element of D_P(x)


@FEW
@given(seeds, st.integers(1, 4), st.integers(1, 14))
def test_agrees_with_torch_autograd_float64_at_generic_points(seed, p, n_ops):
    from nsverify.papers.costs.torch_ref import torch_value_and_grad

    prog = random_program(seed, p, n_ops, ops=ALL_OPS)
    x = random_inputs(seed, p)
    rep = backprop(prog, x)
    v, g = torch_value_and_grad(prog, x)
    assert rep.value == pytest.approx(v, rel=1e-10, abs=1e-12)
    assert rep.derivative == pytest.approx(g, rel=1e-9, abs=1e-10)


def test_every_op_executes_its_declared_cost():
    for name, spec in OPS.items():
        for model in (UNIT, CostModel(3, 0.25)):
            n = spec.arity or 5
            prog = Program(n, [])
            param = {"c": 0.5, "alpha": 1.0, "patch": [[0.1 * (i - j) for j in range(5)] for i in range(5)]}
            prog.add(name, *range(n), param=param.get(spec.param))
            rep = backprop(prog, [0.75] * n, model)
            assert rep.cost_program == spec.cost_g(model, n), name
            assert rep.cost_alg1prime == spec.cost_gd(model, n), name


def test_selections_at_kinks_follow_the_thesis():
    def grad(op, x):
        prog = Program(1, [])
        prog.add(op, 0, param=1.0 if op == "elu" else None)
        return backprop(prog, [x]).derivative[0]

    assert grad("relu", 0) == 0  # Example 1
    assert grad("abs", 0) == -1  # Case 8: (-x, -1) unless x > 0
    assert grad("elu", 0.0) == 1  # Case 9: branch x >= 0


def test_bad_programs_raise_clear_errors():
    with pytest.raises(UnknownOpError, match="unknown op 'sin'"):
        Program(1, []).add("sin", 0)
    with pytest.raises(NsverifyError, match="earlier memory indices"):
        Program(2, []).add("add", 0, 2)
    with pytest.raises(NsverifyError, match="takes 2 argument"):
        Program(2, []).add("mul", 0)
    with pytest.raises(NsverifyError, match="constant parameter"):
        Program(1, []).add("mulc", 0)
    with pytest.raises(NsverifyError, match="p >= 1"):
        Program(0, [])
    prog = Program(1, [])
    prog.add("log", 0)
    with pytest.raises(NsverifyError, match="log"):
        backprop(prog, [-1.0])
    with pytest.raises(NsverifyError, match="p=1 inputs but 2"):
        backprop(prog, [1.0, 2.0])
    inv = Program(1, [])
    inv.add("inv", 0)
    with pytest.raises(NsverifyError, match="divides by zero"):
        backprop(inv, [0])
    with pytest.raises(NsverifyError, match="at least one operation"):
        backprop(Program(1, []), [1.0])
    with pytest.raises(NsverifyError, match="c_relu"):
        CostModel(1, -1)
