"""The rule vocabulary (nsverify.registry.rules): parsing, aliases, canonical text, and what each rule gives
at a kink and at a tie. Expected values are worked out by hand from the definitions (Boustany Defs 8-10;
Bertoin et al.'s ReLU'(0) = s)."""
from fractions import Fraction as F

import pytest

from nsverify.errors import NsverifyError
from nsverify.registry.rules import Rule, RuleError, parse_rule


@pytest.mark.parametrize("text, name, param", [
    ("left", "left", None), ("right", "right", None), ("inside", "inside", None),
    ("mix=1/2", "mix", F(1, 2)), ("mix=0.25", "mix", F(1, 4)), ("mid", "mix", F(1, 2)),
    ("value=0", "value", F(0)), ("value=-1.5", "value", F(-3, 2)), ("0", "value", F(0)),
    ("first", "first", None), ("native", "first", None), ("last", "last", None),
    ("even", "even", None), ("minimal", "even", None), ("min_norm", "even", None),
    ("hybrid=0.5", "hybrid", F(1, 2)), ("hybrid=1e3", "hybrid", F(1000)), ("returned", "returned", None),
    ("torch", "torch", None), (" left ", "left", None),
])
def test_parse_text(text, name, param):
    r = parse_rule(text)
    assert (r.name, r.param) == (name, param)
    assert parse_rule(str(r)) == r  # canonical text round-trips


@pytest.mark.parametrize("spec, expected", [
    (0, Rule("value", F(0))), (0.5, Rule("value", F(1, 2))), (F(1, 3), Rule("value", F(1, 3))),
    (("mix", 0.5), Rule("mix", F(1, 2))), (("hybrid", 2), Rule("hybrid", F(2))),
    (Rule("left"), Rule("left")),
])
def test_parse_other_forms(spec, expected):
    assert parse_rule(spec) == expected


@pytest.mark.parametrize("bad", ["lft", "mix", "mix=abc", "hybrid", "left=1", "foo=1", "", True, None, [1],
                                 float("nan"), float("inf"), ("mix", "x")])
def test_bad_rules_name_the_valid_ones(bad):
    with pytest.raises(RuleError) as e:
        parse_rule(bad)
    assert isinstance(e.value, NsverifyError)
    msg = str(e.value).lower()
    assert any(word in msg for word in ("valid rules", "not a number", "needs", "takes no", "finite"))


def test_typo_suggests_the_name():
    with pytest.raises(RuleError, match="Did you mean left"):
        parse_rule("lefft")


def test_kind_check():
    assert parse_rule("mid", kind="kink").name == "mix"
    with pytest.raises(RuleError, match="tie rule"):
        parse_rule("first", kind="kink")
    with pytest.raises(RuleError, match="kink rule"):
        parse_rule("left", kind="tie")


def test_kink_derivatives():
    # abs at 0: left -1, right 1
    assert parse_rule("left").kink_derivative(-1, 1) == -1
    assert parse_rule("right").kink_derivative(-1, 1) == 1
    assert parse_rule("mid").kink_derivative(F(-1), F(1)) == 0
    assert parse_rule("mix=1/4").kink_derivative(F(-1), F(1)) == F(-1, 2)
    # relu at 0: left 0, right 1; ReLU'(0) = s is value=s, which equals mix=s there
    for s in (F(0), F(1, 2), F(1)):
        assert parse_rule(("mix", s)).kink_derivative(F(0), F(1)) == parse_rule(s).kink_derivative(F(0), F(1)) == s
    # clamp(x, 0, 1) at 0: left 0, right 1, middle piece 1
    assert parse_rule("inside").kink_derivative(F(0), F(1), inside=F(1)) == 1
    with pytest.raises(RuleError):
        parse_rule("inside").kink_derivative(0, 1)
    with pytest.raises(RuleError):
        parse_rule("first").kink_derivative(0, 1)


def test_kink_side():
    assert parse_rule("left").kink_side() == -1 == parse_rule("mix=0").kink_side()
    assert parse_rule("right").kink_side() == 1 == parse_rule("mix=1").kink_side()
    assert parse_rule("mid").kink_side() is None and parse_rule("value=0").kink_side() is None


def test_tie_weights():
    tied = [2, 5, 7]
    assert parse_rule("first").tie_weights(tied) == {2: 1}
    assert parse_rule("last").tie_weights(tied) == {7: 1}
    assert parse_rule("even").tie_weights(tied) == {2: F(1, 3), 5: F(1, 3), 7: F(1, 3)}
    # hybrid(1/2) = 1/2 first + 1/2 even: 1/2 + 1/6 on the first, 1/6 on the others
    assert parse_rule("hybrid=1/2").tie_weights(tied) == {2: F(2, 3), 5: F(1, 6), 7: F(1, 6)}
    assert parse_rule("hybrid=0").tie_weights(tied) == parse_rule("first").tie_weights(tied)
    assert parse_rule("hybrid=1").tie_weights(tied) == parse_rule("even").tie_weights(tied)
    # beta > 1 leaves the Clarke set: a negative weight on the first index
    assert parse_rule("hybrid=2").tie_weights(tied)[2] == 1 - 2 + F(2, 3)
    assert parse_rule("returned").tie_weights(tied, returned=5) == {5: 1}
    with pytest.raises(RuleError, match="returned"):
        parse_rule("returned").tie_weights(tied)
    with pytest.raises(RuleError, match="kink rule"):
        parse_rule("left").tie_weights(tied)
    for r in ("first", "last", "even", "hybrid=0.3"):
        assert sum(parse_rule(r).tie_weights(tied).values()) == 1
