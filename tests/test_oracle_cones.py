"""Open cones {d : C d > 0}: the one exact decision behind the piece enumerator and the cost module's Bouligand
sets.  Every answer comes with an exact witness or an exact Gordan certificate."""

from __future__ import annotations

import itertools
import random
from fractions import Fraction as F

from nsverify.oracle.cones import ConeStats, check_gordan, exact_strict_feasible, feasible, holds, strict_feasible


def _strict(C, d):
    return all(sum(F(c) * x for c, x in zip(row, d)) > 0 for row in C)


def test_strict_feasible_witness_or_none():
    assert _strict([[1, 0], [1, 1]], strict_feasible([[1, 0], [1, 1]], 2))
    assert strict_feasible([[1, 2], [-1, -2]], 2) is None  # opposite half-spaces
    # three directions that positively span the plane: Gordan's alternative y = (1, 1, 1) / 3
    C = [[2, 0], [-1, 1], [-1, -1]]
    assert strict_feasible(C, 2) is None and exact_strict_feasible(C, 2) is None
    assert strict_feasible([], 3) == [0, 0, 0]
    assert strict_feasible([[0, 0]], 2) is None  # 0 > 0 is false


def test_float_lp_path_and_exact_simplex_decide_the_same():
    """Random small integer systems: the LP-guided answer and the exact simplex agree, and each witness holds."""
    rng = random.Random(3)
    for _ in range(60):
        p, m = rng.randint(1, 3), rng.randint(1, 5)
        C = [[rng.randint(-2, 2) for _ in range(p)] for _ in range(m)]
        fast, slow = strict_feasible(C, p), exact_strict_feasible(C, p)
        assert (fast is None) == (slow is None), C
        for d in (fast, slow):
            assert d is None or _strict(C, d)


def test_feasible_gives_exact_certificates():
    stats = ConeStats()
    res, d = feasible([{0: F(1)}, {0: F(1), 1: F(-3)}], stats)
    assert res == "open" and holds([{0: F(1)}, {0: F(1), 1: F(-3)}], d)
    rows = [{0: F(2)}, {0: F(-1), 1: F(1)}, {0: F(-1), 1: F(-1)}]
    res, y = feasible(rows, stats)
    assert res == "empty" and check_gordan(rows, y)
    assert not holds(rows[:1], {0: 0.5})  # a float direction is never a certificate


def test_bruteforce_sign_patterns_match_strict_feasible():
    """The open cones of the 4 lines through 0 in the plane: exactly 8 sign patterns are realised (2 per line)."""
    lines = [[1, 0], [0, 1], [1, 1], [1, -1]]
    realised = sum(strict_feasible([[s * c for c in row] for s, row in zip(signs, lines)], 2) is not None
                   for signs in itertools.product((1, -1), repeat=4))
    assert realised == 8
