"""nsverify.rational: the one exact Gauss-Jordan elimination behind solve/rank/null-space everywhere."""
from fractions import Fraction as F

from nsverify.rational import null_space, rank, solve_any, solve_unique


def test_solve_any_free_variables_zero_and_inconsistency():
    A = [[1, 2, 3], [2, 4, 6]]
    assert solve_any(A, [1, 2]) == [F(1), F(0), F(0)]
    assert solve_any(A, [1, 3]) is None  # 0 = 1 after elimination


def test_solve_unique_exact_and_singular():
    assert solve_unique([[2, 1], [1, 3]], [3, 5]) == [F(4, 5), F(7, 5)]
    assert solve_unique([[1, 2], [2, 4]], [1, 2]) is None


def test_rank_takes_floats_exactly():
    assert rank([[0.1, 0.2], [0.2, 0.4]]) == 1  # 0.2 == 2 * 0.1 exactly in binary
    assert rank([[0.1, 0.3], [1, 3]]) == 2  # 0.3 != 3 * 0.1 exactly
    assert rank([]) == 0


def test_null_space_basis_is_annihilated():
    A = [[1, 1, 0], [0, 0, 0]]
    basis = null_space(A, 3)
    assert len(basis) == 2
    assert all(sum(F(a) * x for a, x in zip(A[0], v)) == 0 for v in basis)


def test_nonneg_feasible_finds_exact_point_or_none():
    from nsverify.rational import nonneg_feasible

    x = nonneg_feasible([[1, 1, 0], [0, 1, 1]], [1, F(1, 2)])
    assert x is not None and all(v >= 0 for v in x)
    assert x[0] + x[1] == 1 and x[1] + x[2] == F(1, 2)
    assert nonneg_feasible([[1, 1]], [-1]) is None  # x >= 0 cannot sum to -1
    assert nonneg_feasible([[1, -1]], [-2]) == [F(0), F(2)]  # negative right-hand side handled
