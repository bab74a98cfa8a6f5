"""nsverify.rational: the one exact Gauss-Jordan elimination behind solve/rank/null-space everywhere."""
from fractions import Fraction as F

import pytest

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


def test_independent_rows_keeps_the_first_rows_that_add_rank():
    from nsverify.rational import independent_rows

    rows = [[1, 2], [2, 4], [0, 1], [1, 1]]
    assert independent_rows(rows) == [[F(1), F(2)], [F(0), F(1)]]  # [2, 4] = 2 [1, 2]; [1, 1] in the span
    assert independent_rows([]) == [] and independent_rows([[0, 0]]) == []


def test_project_affine_is_the_exact_nearest_point():
    from nsverify.rational import project_affine

    # the line x + y = 1: the nearest point to (1, 1) is (1/2, 1/2); the duplicate row changes nothing
    assert project_affine([[1, 1], [2, 2]], [1, 2], [F(1), F(1)]) == [F(1, 2), F(1, 2)]
    assert project_affine([[1, 1], [1, 1]], [1, 2], [F(0), F(0)]) is None  # x + y = 1 and = 2


def test_nonneg_solution_from_a_float_guess():
    from nsverify.rational import nonneg_solution

    # y1 + y2 + y3 = 1, y1 - y3 = 0: the guess (0.3334, 0.3332, 0.3334) rounds onto the exact (1/3, 1/3, 1/3)
    y = nonneg_solution([[1, 1, 1], [1, 0, -1]], [F(1), F(0)], [0.3334, 0.3332, 0.3334])
    assert y is not None and sum(y) == 1 and y[0] == y[2] and all(v >= 0 for v in y)
    assert nonneg_solution([[1, 1]], [F(-1)], [0.5, 0.5]) is None  # no y >= 0 sums to -1


def test_hull_weights_and_check_weights_agree():
    from nsverify.rational import check_weights, hull_weights, in_hull

    square = [(1, 0), (-1, 0), (0, 1), (0, -1)]
    w = hull_weights((F(1, 4), F(1, 4)), square)
    assert w is not None and check_weights((F(1, 4), F(1, 4)), square, dict(enumerate(w)))
    assert not check_weights((F(1, 4), F(1, 4)), square, {0: 0.25, 2: 0.75})  # floats are never accepted
    assert not check_weights((F(1, 4), F(1, 4)), square, {0: F(1, 2), 2: F(1, 2)})  # reproduces (1/2, 1/2)
    assert in_hull((0, 0), square) and not in_hull((1, 1), square)
    with pytest.raises(ValueError, match="same length"):
        in_hull((0, 0, 0), square)


def test_pivots_mod_p_rank_equals_the_exact_rank():
    """Modular elimination (shared by Park's rank test and the layered oracle shortcut) against the exact
    Fraction rank, on small integer matrices with deliberate dependencies; ``limit`` stops early."""
    import random

    import numpy as np

    from nsverify.rational import pivots_mod_p, rank

    p = 2147483629
    rng = random.Random(3)
    for _ in range(40):
        r, c = rng.randint(1, 5), rng.randint(1, 6)
        rows = [[rng.randint(-3, 3) for _ in range(c)] for _ in range(r)]
        if r > 1 and rng.random() < 0.5:  # a dependent row
            rows[-1] = [a + 2 * b for a, b in zip(rows[0], rows[1])]
        m = np.array(rows, dtype=np.int64) % p
        piv = pivots_mod_p(m, p)
        assert len(piv) == rank(rows) and piv == sorted(piv)
        assert len(pivots_mod_p(m, p, limit=1)) == min(1, rank(rows))
        assert (m == np.array(rows, dtype=np.int64) % p).all()  # not modified
