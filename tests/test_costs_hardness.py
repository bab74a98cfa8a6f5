"""Hardness: Lemma 3, the 3-SAT reduction (Theorem 6), exact Clarke vs SAT, Proposition 4 vs brute force."""

import itertools
import math
import random
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nsverify.errors import NsverifyError, TooManyPieces
from nsverify.papers.costs.bouligand import bouligand_set
from nsverify.papers.costs.checks import random_relu_net
from nsverify.papers.costs.prop4 import ad_set_two, ad_set_vertices
from nsverify.papers.costs.relunet import ReluNet, max_network, sat_network, to_torch_fn
from nsverify.papers.costs.sat import brute_force_sat, random_3cnf, satisfies

FEW = settings(max_examples=12, deadline=None)


@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_lemma3_max_network(k):
    net = max_network(k)
    rng = random.Random(k)
    for _ in range(20):
        x = [Fraction(rng.randint(-20, 20), rng.randint(1, 5)) for _ in range(2**k)]
        assert net(x) == max(x)
    assert net.n_relu_layers == k
    assert max(net.widths) <= 3 * 2 ** (k - 1)
    assert net.entries() <= {-1, 0, 1}


@FEW
@given(st.integers(1, 4), st.integers(1, 9), st.integers(0, 10_000))
def test_sat_network_shape_sign_and_truth_table(p, n, seed):
    clauses = random_3cnf(p, n, seed)
    net = sat_network(clauses, p)
    n2 = 2 ** math.ceil(math.log2(n)) if n > 1 else 1
    assert net.n_relu_layers == int(math.log2(n2)) + 3  # log2(n) + 3 ReLU layers
    assert max(net.widths) <= 6 * n2  # width <= 6n
    assert net.entries() <= {-1, 0, 1}
    assert net([0] * p) == 0
    rng = random.Random(seed)
    for _ in range(10):
        assert net([Fraction(rng.randint(-9, 9), 4) for _ in range(p)]) >= 0
    for x in itertools.product((-1, 1), repeat=p):  # F(x) > 0 iff pi(b) = 1
        assert (net(list(x)) > 0) == satisfies(clauses, [v > 0 for v in x])


FORMULAS = [
    ([(1, 2, -3)], 3),
    ([(1, 1, 1), (-1, -1, -1)], 1),  # unsatisfiable
    ([(1, 2, 2), (-1, -1, -2), (1, -2, -2)], 2),  # satisfiable: x1 true, x2 false
    ([(1, 2, 2), (-1, -1, 2), (1, -2, -2), (-1, -2, -2)], 2),  # unsatisfiable
]


@pytest.mark.parametrize("clauses,p", FORMULAS)
def test_clarke_at_zero_is_nontrivial_iff_satisfiable(clauses, p):
    sat, _ = brute_force_sat(clauses, p)
    res = bouligand_set(sat_network(clauses, p), [0] * p)
    assert (not res.clarke_is_zero) == sat
    assert (len(res.gradients) >= 2) == sat


@settings(max_examples=6, deadline=None)
@given(st.integers(0, 10_000), st.integers(1, 3))
def test_clarke_vs_sat_random_small_formulas(seed, n):
    clauses = random_3cnf(3, n, seed)
    res = bouligand_set(sat_network(clauses, 3), [0, 0, 0])
    assert (not res.clarke_is_zero) == brute_force_sat(clauses, 3)[0]


def test_bouligand_enumeration_agrees_with_the_issue3_oracle():
    torch = pytest.importorskip("torch")
    oracle = pytest.importorskip("nsverify.oracle")
    for clauses, p in FORMULAS[:2]:
        net = sat_network(clauses, p)
        v = oracle.check_gradient(to_torch_fn(net), torch.zeros(p, dtype=torch.float64))
        assert v.exact
        assert {tuple(g) for g in v.bouligand} == bouligand_set(net, [0] * p).gradients


@settings(max_examples=12, deadline=None)
@given(st.integers(0, 10**6))
def test_bouligand_matches_the_issue3_oracle_on_random_networks(seed):
    torch = pytest.importorskip("torch")
    oracle = pytest.importorskip("nsverify.oracle")
    net, x = random_relu_net(random.Random(seed))
    v = oracle.check_gradient(to_torch_fn(net), torch.tensor(x, dtype=torch.float64))
    assert v.exact
    assert {tuple(g) for g in v.bouligand} == bouligand_set(net, x).gradients


def test_hardness_table_rows():
    from nsverify.papers.costs.hardness import hardness_table

    rows = hardness_table(((3, 1), (3, "unsat")), oracle_max_p=0)  # the oracle cross-check is tested above
    assert [r["sat"] for r in rows] == [True, False]
    assert [r["clarke_nontrivial"] for r in rows] == [True, False]
    assert all(r["ad_nonsingleton"] for r in rows)
    assert "t_oracle" not in rows[0]


def test_exact_enumeration_fails_clearly_past_its_limit():
    net = sat_network([(1, 2, -3), (1, 3, -2)], 3)
    with pytest.raises(TooManyPieces, match="NP-hard"):
        bouligand_set(net, [0, 0, 0], max_regions=3)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10**6))
def test_prop4_matches_brute_force_over_vertex_assignments(seed):
    net, x = random_relu_net(random.Random(seed))
    verts = ad_set_vertices(net, x)
    res = ad_set_two(net, x)
    assert res.nonsingleton == (len(verts) > 1)
    assert res.first in verts
    if res.nonsingleton:
        assert res.second in verts and res.second != res.first


@pytest.mark.parametrize("clauses,p", FORMULAS[:2])
def test_ad_set_is_nontrivial_even_where_clarke_is_zero(clauses, p):
    net = sat_network(clauses, p)
    res = ad_set_two(net, [0] * p)
    assert res.nonsingleton  # D^a(0) has two elements ...
    if len(clauses) == 1:
        assert len(ad_set_vertices(net, [0] * p)) > 1
    # ... whatever the satisfiability: Proposition 4 is polynomial, Clarke is NP-hard


def test_bad_formulas_and_networks_raise_clear_errors():
    with pytest.raises(NsverifyError, match="exactly 3"):
        sat_network([(1, 2)], 2)
    with pytest.raises(NsverifyError, match="literals are"):
        sat_network([(1, 2, 4)], 3)
    with pytest.raises(NsverifyError, match="no clause"):
        sat_network([], 3)
    with pytest.raises(NsverifyError, match="one row"):
        ReluNet([[[1, 1]], [[1], [1]]], [[True]])
    with pytest.raises(NsverifyError, match="columns"):
        ReluNet([[[1, 1]], [[1, 1]]], [[True]])
    with pytest.raises(TooManyPieces, match="ad_set_two"):
        ad_set_vertices(sat_network([(1, 2, 3)] * 2, 3), [0, 0, 0], max_free=8)
