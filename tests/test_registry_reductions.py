"""The selection and reduction entries of issue 36, item 3: each tie case's Bouligand set derived by hand (below),
and independently from PyTorch itself -- its float64 gradient at the differentiable points x + eps * perm next to
the tie, one per ordering of the tied entries (the Bouligand set is the set of those limits); PyTorch's derivative
at the tie is the entry's recorded rule (or its recorded violation); and the exact oracle on the ops it evaluates."""
from __future__ import annotations

import itertools
import warnings
from fractions import Fraction

import pytest
import torch

import nsverify
from nsverify import registry
from nsverify.rational import in_hull

F = Fraction
D = torch.float64


def e(n, *pairs):
    """The vector of length n with the given (index, value) pairs."""
    v = [F(0)] * n
    for i, x in pairs:
        v[i] += F(x)
    return tuple(v)


# ----------------------------------------------------------------------------------------------------------
# Bouligand sets by hand: (entry, case label) -> set of gradients of sum_j cot_j op(x)_j on the adjacent pieces
# ----------------------------------------------------------------------------------------------------------
# two groups, each with a 2-way tie (weights 1 and 2): entries 0,1 tie for output 0, entries 3,4 for output 1
TWO_GROUPS = {e(5, (a, 1), (b, 2)) for a in (0, 1) for b in (3, 4)}
# amax/amin along dim 1 of [[1, 1, 0], [2, 0, 2]] (or negated): row 0 ties entries 0, 1 (weight 1), row 1 ties 3, 5
ROWS = {e(6, (a, 1), (b, 2)) for a in (0, 1) for b in (3, 5)}
# cummax of 1, 1, *, 1 (weights 1..4): y0 = x0; y1, y2 go to the larger of x0, x1; y3 to the largest of x0, x1, x3
#   x3 largest: (6,0,0,4) or (1,5,0,4); x0 largest: (10,0,0,0); x1 largest: (1,9,0,0)
CUMMAX = {e(4, (0, 6), (3, 4)), e(4, (0, 1), (1, 5), (3, 4)), e(4, (0, 10)), e(4, (0, 1), (1, 9))}
# max_pool3d(k=2, s=1) of a 2x2x3 plateau: window 0 = columns 0, 1, window 1 = columns 1, 2 (flat d*6 + h*3 + w)
W0, W1 = {0, 1, 3, 4, 6, 7, 9, 10}, {1, 2, 4, 5, 7, 8, 10, 11}
POOL3D = ({e(12, (k, 3)) for k in W0 & W1} | {e(12, (a, 1), (b, 2)) for a in W0 - W1 for b in W1}
          | {e(12, (a, 1), (b, 2)) for a in W0 for b in W1 - W0})
HAND = {
    ("amax_dim", "ties in rows"): ROWS, ("amin_dim", "ties in rows"): ROWS,
    ("amax_dim", "3 tied"): {e(3, (i, 1)) for i in range(3)}, ("amin_dim", "3 tied"): {e(3, (i, 1)) for i in range(3)},
    ("cummax", "prefix ties"): CUMMAX, ("cummin", "prefix ties"): CUMMAX,
    # the median of 5 (rank 2): any of the three tied entries can sit at rank 2
    ("quantile", "3 tied at the median"): {e(5, (i, 1)) for i in (0, 1, 2)},
    ("quantile", "3 tied, later indices"): {e(5, (i, 1)) for i in (1, 2, 3)},
    ("nanquantile", "3 tied at the median"): {e(5, (i, 1)) for i in (0, 1, 2)},
    ("nanquantile", "3 tied, later indices"): {e(5, (i, 1)) for i in (1, 2, 3)},
    ("nanmedian", "3 tied at the median"): {e(4, (i, 1)) for i in (0, 1, 2)},
    ("nanmedian_dim", "3 tied among 5"): {e(5, (i, 1)) for i in (1, 2, 3)},
    **{(f"{op}_a{d}", lab): TWO_GROUPS for op in ("scatter_reduce", "index_reduce") for d in ("max", "min")
       for lab in ("ties in both groups", "tie at the ignored self value 0")},
    ("segment_reduce_max", "ties in both groups"): TWO_GROUPS,
    ("segment_reduce_min", "ties in both groups"): TWO_GROUPS,
    # min ties entries 0, 3 (weight 1), max ties 1, 2 (weight 2)
    ("aminmax", "ties at both ends"): {e(4, (a, 1), (b, 2)) for a in (0, 3) for b in (1, 2)},
    # bag 0 = rows 0,1,2 ties rows 0, 1 (weight 1); bag 1 = rows 1, 2 is row 1 (weight 2)
    ("embedding_bag_max", "ties in overlapping bags"): {e(3, (0, 1), (1, 2)), e(3, (1, 3))},
    ("max_pool3d", "k=2 s=1 overlapping, all tied"): POOL3D,
    # windows 0-1, 1-3, 3-4 of 5 tied entries (weights 1, 2, 3), by the orderings' winners (by hand): the winner
    # of 1-3 is 1, 2 or 3; entry 1 also wins 0-1 unless 0 beats it; entry 3 also wins 3-4 unless 4 beats it
    ("adaptive_max_pool1d", "5 -> 3 (overlapping) all tied"): (
        {e(5, (1, 3), (3, 3)), e(5, (1, 3), (4, 3)), e(5, (0, 1), (1, 2), (3, 3)), e(5, (0, 1), (1, 2), (4, 3))}
        | {e(5, (a, 1), (2, 2), (b, 3)) for a in (0, 1) for b in (3, 4)}
        | {e(5, (a, 1), (3, 5)) for a in (0, 1)} | {e(5, (a, 1), (3, 2), (4, 3)) for a in (0, 1)}),
}
NEW_SELECTIONS = sorted({n for n, _ in HAND})
# PyTorch's derivative at each tie, measured on torch 2.13 CPU in float64 (eager); None: the recorded rule's vector
MEASURED = {
    ("scatter_reduce_amax", "tie at the ignored self value 0"): e(5, (0, F(1, 2)), (1, F(1, 2)), (3, F(2, 3)),
                                                                  (4, F(2, 3))),
    ("cummax", "prefix ties"): e(4, (0, 1), (1, 5), (3, 4)),  # the last tied index: (1, 5, 0, 4)
}


def _rounded(vec):
    """An exact vector as float64 holds it (1/3 and 2/3 are not dyadic)."""
    return tuple(registry.round_to_dtype(F(x), D) for x in vec)


def _case(name, label):
    return next(c for c in registry.get(name).cases if c.label == label)


def _loss(entry, case, x):
    cot = torch.tensor([float(w) for w in case.weights], dtype=x.dtype)
    return (entry.torch_fn(x, **case.extra).flatten() * cot).sum()


def _grad(entry, case, x):
    x = x.clone().requires_grad_(True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # index_reduce's beta note
        (g,) = torch.autograd.grad(_loss(entry, case, x), x)
    return tuple(F(v) for v in g.flatten().tolist())


def test_every_new_entry_has_its_hand_sets():
    assert set(NEW_SELECTIONS) <= set(registry.names("selection"))
    for name in NEW_SELECTIONS:
        assert {c.label for c in registry.get(name).cases} == {lab for n, lab in HAND if n == name}, name


@pytest.mark.parametrize("name, label", sorted(HAND))
def test_bouligand_set_by_hand(name, label):
    assert set(_case(name, label).pieces) == HAND[(name, label)]


def _tied_orderings(values, limit=400):
    """Perturbations ranking the tied entries of each value group (all of them, or ``limit`` seeded draws)."""
    groups: dict = {}
    for i, v in enumerate(values):
        groups.setdefault(v, []).append(i)
    tied = [g for g in groups.values() if len(g) > 1]
    total = 1
    for g in tied:
        total *= len(list(itertools.permutations(g))) if len(g) <= 6 else 10**9
    if total <= limit:
        yield from itertools.product(*[itertools.permutations(g) for g in tied])
        return
    gen = torch.Generator().manual_seed(0)
    for _ in range(limit):
        yield tuple(tuple(g[int(k)] for k in torch.randperm(len(g), generator=gen)) for g in tied)


@pytest.mark.parametrize("name, label", sorted(HAND))
def test_pytorchs_gradients_next_to_the_tie_are_the_hand_pieces(name, label):
    """PyTorch's float64 gradient at x + 2^-10 (rank + 1) (a differentiable point: the tie broken in one order) is a
    Bouligand gradient; over every ordering of the tied entries (a seeded sample for max_pool3d's 12) they make up
    exactly the hand set."""
    entry, case = registry.get(name), _case(name, label)
    x0 = case.tensor(D)
    seen = set()
    for perms in _tied_orderings(case.values):
        bump = torch.zeros(len(case.values), dtype=D)
        for perm in perms:
            for r, i in enumerate(perm):
                bump[i] = (r + 1) * 2.0 ** -10  # every tied entry moves (off the ignored self value 0 too)
        seen.add(_grad(entry, case, x0 + bump.reshape(x0.shape)))
    assert seen <= HAND[(name, label)]
    if len(HAND[(name, label)]) <= 12:
        assert seen == HAND[(name, label)]


@pytest.mark.parametrize("name, label", sorted(HAND))
def test_pytorchs_derivative_at_the_tie_is_the_recorded_rule(name, label):
    entry, case = registry.get(name), _case(name, label)
    x = case.tensor(D)
    got = _grad(entry, case, x)
    want = case.rule_vector(case.torch_rule, entry.indices_fn(x) if entry.indices_fn else None)
    if (name, label) in MEASURED:
        assert got == _rounded(MEASURED[(name, label)])
    v = case.violation("float64")
    if v is not None and v.kind == "no":
        assert not in_hull(got, HAND[(name, label)])  # outside the Clarke set (the hull of the hand pieces)
        assert got != want
    elif v is not None:  # "rounding": the exact even split over 3, rounded to float64
        assert v.kind == "rounding" and got == _rounded(want) != want and in_hull(want, HAND[(name, label)])
    else:
        assert got == want, (name, label, got, want)
        assert in_hull(got, HAND[(name, label)])


def test_scatter_reduce_counts_the_ignored_self_entry():
    """The recorded violation, by hand: scatter_reduce(amax, include_self=False) into zeros where group 1's
    values tie at 0, the ignored self value: PyTorch gives each of the 2 tied sources 2/3 of the weight 2 (it counts
    self as a third tied entry), total 4/3; every Clarke element (the hull of (2, 0) and (0, 2) on those two
    entries) has total 2. Forward mode splits evenly, inside."""
    for name in ("scatter_reduce_amax", "scatter_reduce_amin", "index_reduce_amax", "index_reduce_amin"):
        entry, case = registry.get(name), _case(name, "tie at the ignored self value 0")
        got = _grad(entry, case, case.tensor(D))
        assert got[3:] == _rounded((F(2, 3), F(2, 3))), name
        assert not in_hull(got, HAND[(name, "tie at the ignored self value 0")])
        assert case.violation("float32").kind == "no" and case.rule_for("jvp").name == "even"
    entry, case = registry.get("scatter_reduce_amax"), _case("scatter_reduce_amax", "tie at the ignored self value 0")
    x = case.tensor(D)
    jv = [torch.func.jvp(lambda t: _loss(entry, case, t), (x,), (torch.eye(5, dtype=D)[i],))[1].item()
          for i in range(5)]
    assert [F(v) for v in jv] == [F(1, 2), F(1, 2), 0, 1, 1]


# ----------------------------------------------------------------------------------------------------------
# the exact oracle on the ops it evaluates
# ----------------------------------------------------------------------------------------------------------
ORACLE = ["amax_dim", "amin_dim", "max_pool3d", "adaptive_max_pool1d", "cummax", "cummin", "quantile", "nanquantile",
          "nanmedian", "nanmedian_dim", "scatter_reduce_amax", "scatter_reduce_amin", "aminmax", "index_reduce_amax",
          "index_reduce_amin", "segment_reduce_max", "segment_reduce_min"]
#: the ops the exact oracle does not evaluate yet: it says so by name (UnsupportedOpError), never guesses
NOT_IN_THE_ORACLE = {"embedding_bag_max": "_embedding_bag"}


@pytest.mark.parametrize("name", ORACLE)
def test_oracle_member_with_the_hand_bouligand_set(name):
    entry = registry.get(name)
    case = entry.cases[0]

    def fn(w):
        return _loss(entry, case, w.reshape(case.shape))

    v = nsverify.check_gradient(fn, case.tensor(D).flatten())
    assert v.status == "member" and v.exact
    assert {tuple(F(c) for c in g) for g in v.bouligand} == HAND[(name, case.label)]
    want = _grad(entry, case, case.tensor(D))  # PyTorch's float64 gradient (1/3 rounded for nanmedian)
    assert _rounded(v.exact_ad) == want


def test_oracle_not_member_where_scatter_reduce_counts_the_ignored_self():
    """The recorded violation, decided by the oracle from PyTorch's backward formula evaluated exactly: AD
    (1/2, 1/2, 0, 2/3, 2/3) is outside the hull of the hand pieces, with a re-checkable certificate."""
    for name in ("scatter_reduce_amax", "scatter_reduce_amin", "index_reduce_amax", "index_reduce_amin"):
        entry, case = registry.get(name), _case(name, "tie at the ignored self value 0")
        v = nsverify.check_gradient(lambda w, en=entry, c=case: _loss(en, c, w), case.tensor(D))
        assert v.status == "not_member" and v.exact, name
        assert v.exact_ad == e(5, (0, F(1, 2)), (1, F(1, 2)), (3, F(2, 3)), (4, F(2, 3)))
        assert {tuple(F(c) for c in g) for g in v.bouligand} == HAND[(name, case.label)]
        assert nsverify.oracle.verify_certificate(v.to_json())


@pytest.mark.parametrize("name", sorted(NOT_IN_THE_ORACLE))
def test_oracle_names_the_ops_it_does_not_evaluate(name):
    entry = registry.get(name)
    case = entry.cases[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        with pytest.raises(nsverify.NsverifyError, match=f"aten.{NOT_IN_THE_ORACLE[name]}"):
            nsverify.check_gradient(lambda w: _loss(entry, case, w), case.tensor(D))


def test_oracle_rules_given_for_cummax():
    """rules= keys cummax's tie rule: ``first`` gives the piece where x0 wins every prefix, (10, 0, 0, 0)."""
    entry, case = registry.get("cummax"), _case("cummax", "prefix ties")
    v = nsverify.check_gradient(lambda w: _loss(entry, case, w), case.tensor(D), rules={"cummax": "first"})
    assert v.status == "member" and v.exact_ad == e(4, (0, 10))


def test_oracle_not_member_amax_dim_against_max_dim():
    """amax(x, 1) - max(x, 1).values of one row (w0, w1) at (0, 0): the zero function, Clarke set {(0, 0)}; AD
    splits evenly for amax and takes the first index for max: (1/2, 1/2) - (1, 0) = (-1/2, 1/2), not_member."""
    v = nsverify.check_gradient(lambda w: (torch.amax(w.reshape(1, 2), 1) - torch.max(w.reshape(1, 2), 1).values)
                                .sum(), torch.zeros(2, dtype=D))
    assert v.status == "not_member" and v.exact and v.exact_ad == (F(-1, 2), F(1, 2))
    assert {tuple(F(c) for c in g) for g in v.bouligand} == {(F(0), F(0))}
    assert nsverify.oracle.verify_certificate(v.to_json())


_Y = torch.tensor([[1.0, 0.5, 1.0, -2.0], [0.25, 0.25, 3.0, 3.0], [-1.0, 2.0, 2.0, 0.5]], dtype=D)
REDUCTION_PROGRAMS = {  # reductions along other dims, with ties among the reduced entries
    "index_reduce amax dim 1": lambda w: (torch.full((3, 2), -9.0, dtype=D).index_reduce(
        1, torch.tensor([0, 1, 0, 1]), w.reshape(3, 4), "amax") * torch.tensor([1.0, 2.0], dtype=D)).sum(),
    "index_reduce amin dim 0": lambda w: (torch.full((2, 4), 9.0, dtype=D).index_reduce(
        0, torch.tensor([1, 1, 0]), w.reshape(3, 4), "amin", include_self=False) * torch.arange(1.0, 9.0, dtype=D)
        .reshape(2, 4)).sum(),
    "scatter_reduce amax dim 1": lambda w: (torch.full((3, 2), -9.0, dtype=D).scatter_reduce(
        1, torch.tensor([[0, 0, 1, 1]] * 3), w.reshape(3, 4), "amax") * torch.tensor([1.0, 2.0], dtype=D)).sum(),
    "segment_reduce max offsets": lambda w: (torch.segment_reduce(w, "max", offsets=torch.tensor([0, 4, 6, 12]))
                                             * torch.tensor([1.0, 2.0, 3.0], dtype=D)).sum(),
    "cummin dim 1": lambda w: (torch.cummin(w.reshape(3, 4), 1).values * torch.arange(1.0, 13.0, dtype=D)
                               .reshape(3, 4)).sum(),
}


@pytest.mark.parametrize("label", sorted(REDUCTION_PROGRAMS))
def test_oracle_reductions_agree_with_pytorch(label):
    """Exact reverse mode (PyTorch's backward formula evaluated exactly) = PyTorch's float64 gradient, and the
    verdict is member: every tie here is split evenly or given to one entry, inside the Clarke set."""
    from nsverify.oracle.interp import exact_backprop

    fn = REDUCTION_PROGRAMS[label]
    w = _Y.flatten().clone()
    wt = w.clone().requires_grad_(True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        (want,) = torch.autograd.grad(fn(wt), wt)
        rev = exact_backprop(fn, w)
        v = nsverify.check_gradient(fn, w)
    assert [float(x) for x in rev] == want.tolist(), label
    assert v.status == "member" and v.exact, label
