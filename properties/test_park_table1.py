"""Park, Chun and Lee's Table 1 (Sec. 1) as properties.

Theorem rows: across generated cases that satisfy the row's premise (checked by nsverify.papers.park.premises),
the exact oracle never returns not_member. Lemma rows: a search over generated inputs finds a not_member
counterexample within a budget of generated examples and shrinks it to a minimal one under the order (parameter
count, batch, total width): no one-step structural reduction smaller in that order is still a counterexample.

No assertion depends on Hypothesis's example order: which counterexample comes first, and after how many
examples, changes with the Hypothesis version (and with the torch build: Lemma 7 took 39 examples on torch 2.13
and 87 on 2.14.1 under Hypothesis 6.170.17), so the budget (1000) is several times the largest count measured
(141, Lemma 3), the theorem rows draw until enough cases meet the premise (``assume``), and the shrunk
counterexample is checked for minimality, not for one shape."""

import pytest
from hypothesis import assume, given, note
from hypothesis import strategies as st

from nsverify.papers.park import table1 as park
from nsverify.pytest_plugin import RECORDS, explain_failure

#: examples a lemma search may generate before it must have found a counterexample (counts measured: 16 to 141)
LEMMA_BUDGET = 1000
THEOREMS = [n for n, r in park.ROWS.items() if r.claim == "never_not_member"]
LEMMAS = [n for n, r in park.ROWS.items() if r.claim == "counterexample"]
_COUNTS: dict = {}


def _theorem_property(row):
    r = park.ROWS[row]

    @given(st.data())
    def prop(data):
        spec = data.draw(r.strategy(), label="network at a tie point")
        premise = r.premise(spec)
        _COUNTS.setdefault(row, {"premise": 0, "drawn": 0, "member": 0, "unknown": 0})
        _COUNTS[row]["drawn"] += 1
        assume(premise)
        _COUNTS[row]["premise"] += 1
        v = park.verdict(spec, **park.LIMITS)
        if v.status in ("member", "unknown"):
            _COUNTS[row][v.status] += 1
        note(explain_failure(spec, spec.w(), v, title=f"{r.paper}: premise holds, oracle says {v.status}"))
        assert v.status != "not_member", explain_failure(spec, spec.w(), v, title=r.paper)

    return prop


@pytest.mark.parametrize("row", THEOREMS)
def test_theorem_row_never_not_member(row):
    _theorem_property(row)()
    c = _COUNTS.get(row, {})
    RECORDS[f"park.{row}"] = (
        f"{c.get('premise', 0)} premise-satisfying cases of {c.get('drawn', 0)} drawn: "
        f"{c.get('member', 0)} member, {c.get('unknown', 0)} unknown, 0 not_member"
    )
    assert c.get("premise", 0) > 0, (
        f"{row}: no generated case satisfied the premise; the generator is too loose"
    )


@pytest.mark.parametrize("row", LEMMAS)
def test_lemma_row_counterexample_found_and_shrunk(row):
    res = park.search_counterexample(row, max_examples=LEMMA_BUDGET)
    assert res.found, f"{row}: no not_member counterexample within {res.budget} generated examples"
    RECORDS[f"park.{row}"] = (
        f"counterexample after {res.examples} generated examples; shrunk to size (params, batch, width) "
        f"{park.size_key(res.spec)} (paper: {park.size_key(park.PAPER_CASES[row])}; same shape as the "
        f"paper's: {res.paper_shape})"
    )
    assert res.examples <= LEMMA_BUDGET
    assert res.verdict.status == "not_member"
    assert res.verdict.certificate["kind"] == "separating_direction"
    assert park.size_key(res.spec) <= park.size_key(res.first), "shrinking made the counterexample larger"
    smaller = park.smaller_counterexamples(res.spec, res.still_bad)
    assert not smaller, (
        f"the shrunk counterexample {park.size_key(res.spec)} is not minimal: a one-step reduction of size "
        f"{park.size_key(smaller[0])} is still a counterexample:\n{smaller[0].describe()}"
    )


@pytest.mark.parametrize("row", LEMMAS)
def test_paper_counterexample_is_not_member(row):
    v = park.verdict(park.PAPER_CASES[row])
    assert v.status == "not_member", explain_failure(park.PAPER_CASES[row], None, v)
