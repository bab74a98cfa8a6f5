"""Theorem 4: the Hadamard network's directional-derivative identity, P_F's cost, and the FLOP scaling."""

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nsverify.errors import NsverifyError
from nsverify.papers.costs import UNIT, backprop
from nsverify.papers.costs.hadamard import (
    F_exact,
    directional_derivative_at_zero,
    measure_scaling,
    program_PF,
    random_instance,
    sylvester,
)


@settings(max_examples=15, deadline=None)
@given(st.sampled_from([1, 2, 4]), st.integers(0, 10_000))
def test_directional_derivatives_at_the_kink_are_b_i_M_a_i(p, seed):
    U, B, M, A, R = random_instance(p, seed)
    total = Fraction(0)
    for i, a in enumerate(A):
        d = directional_derivative_at_zero(B, M, U, a)
        b_i = [B[r][i] for r in range(p)]
        Ma = [sum(M[r][c] * a[c] for c in range(p)) for r in range(p)]
        assert d == sum(x * y for x, y in zip(b_i, Ma))  # F'(0; a_i) = b_i^T M a_i
        assert d == sum(R[i]) / p
        total += d
    # sum_i F'(0; a_i) = Tr(M A B^T)
    AB = [[sum(A[k][r] * B[c][k] for k in range(p)) for c in range(p)] for r in range(p)]  # A B^T
    assert total == sum(sum(M[r][k] * AB[k][r] for k in range(p)) for r in range(p))


def test_sylvester_is_orthogonal_and_rejects_non_powers_of_two():
    U = sylvester(8)
    assert all(
        sum(U[k][i] * U[k][j] for k in range(8)) == (8 if i == j else 0) for i in range(8) for j in range(8)
    )
    with pytest.raises(NsverifyError, match="power of 2"):
        sylvester(6)


@pytest.mark.parametrize("p", [1, 2, 4])
def test_program_PF_cost_and_value(p):
    prog = program_PF(p)
    assert prog.cost(UNIT) == 6 * p * p + 2 * p <= 8 * p * p  # proof of Theorem 4 (Boustany, Sec. 2.8.1)
    U, B, M, A, _ = random_instance(p, 1)
    x = [float(v) for v in A[0]]
    flat = (
        x
        + [float(B[r][c]) for r in range(p) for c in range(p)]
        + [float(M[r][c]) for r in range(p) for c in range(p)]
    )
    rep = backprop(prog, flat)
    assert rep.value == pytest.approx(float(F_exact(A[0], B, M, U)), rel=1e-12)
    # at the kink x = 0, AD returns the selection ReLU'(0) = 0: its derivative along a_i is 0, not b_i^T M a_i
    rep0 = backprop(prog, [0.0] * p + flat[p:])
    assert all(g == 0 for g in rep0.derivative[:p])
    assert directional_derivative_at_zero(B, M, U, A[0]) > 0


def test_flop_ratio_of_p_directional_derivatives_is_3p_over_8():
    out = measure_scaling(ps=(16, 32, 64), reps=1)
    for r in out["rows"]:
        assert r["flops_dirs"] == 6 * r["p"] ** 3  # three p x p x p products
        assert r["flops_grad"] == 16 * r["p"] ** 2  # 3 mat-vecs forward, 5 backward
        assert r["ratio_flops"] == pytest.approx(3 * r["p"] / 8)
    assert out["exponent_flops"] == pytest.approx(1.0)
