"""TieCase.directional against the definition: the one-sided difference quotient of sum_j w_j op(x + t v)_j, with
op evaluated straight from the windows (sorting the window's entries at x + t v, no tie-breaking key), exactly in
Fractions at a small t (every case is piecewise linear, so the quotient is exact once t is below the gaps)."""
from fractions import Fraction as F

import pytest

from nsverify import registry


def _value(case, x):
    out = F(0)
    for w, win in zip(case.weights, case.windows):
        vals = sorted((x[i] for i in win.indices), reverse=(win.direction == "max"))
        out += w * vals[win.rank]
    return out


def _tangents(n):
    yield tuple(F(k + 1) for k in range(n))
    yield tuple(F(n - k) for k in range(n))
    yield tuple(F((-1) ** k * (k + 1)) for k in range(n))
    yield tuple(F((3 * k) % 5 - 2) for k in range(n))


CASES = [(e.name, c) for e in registry.PRIMITIVES.values() if isinstance(e, registry.Selection) for c in e.cases]


@pytest.mark.parametrize("name,case", CASES, ids=[f"{n}-{c.label}" for n, c in CASES])
def test_directional_is_the_one_sided_quotient(name, case):
    x = case.values
    t = F(1, 10**6)
    for v in _tangents(len(x)):
        quotient = (_value(case, [a + t * b for a, b in zip(x, v)]) - _value(case, x)) / t
        assert case.directional(v) == quotient, (name, case.label, v)


def test_a_min_window_moves_the_other_way():
    # min over a tie (0, 0) along v = (1, 2): the first entry stays the minimum, derivative 1 (not 2, which a
    # max-style ordering of the tangent would pick)
    case = registry.selection_case("min tie", [0, 0], (2,), [registry.Window((0, 1), 0, "min")], "even")
    assert case.directional([1, 2]) == 1 and case.directional([2, 1]) == 1 and case.directional([-1, 3]) == -1
