"""How a framework's derivative at a kink or tie is judged: one classification for every framework (PyTorch's
matrix, :mod:`nsverify.conventions.matrix`, and JAX's, :mod:`nsverify.conventions.jax_matrix`).

A derivative arrives as exact values (the Fractions of the floats the framework returned). It is named among the
case's candidate rules of the one rule vocabulary (:func:`classify`), tested against the Clarke set of the exact
function (:func:`clarke_status`: an interval at an elementwise kink, the convex hull of the registry's exact
Bouligand pieces at a tie), compared with an expected rule (:func:`observed_rule`) and, for forward mode, with the
exact one-sided directional derivatives (:func:`directional_matches`). :func:`judge` does all of it for one cell.
Nothing here evaluates a framework: the caller passes the numbers."""
from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Callable, Sequence

import mpmath

from nsverify import registry
from nsverify.registry import Rule, parse_rule

#: the rules the matrix names a derivative at a kink by (its metric values): the one-sided derivatives and their
#: even split (the rule mix=1/2, named "even" as at a tie); at a tie the names are TieCase.rules' (first, last, even)
KINK_CANDIDATES = {"left": parse_rule("left"), "right": parse_rule("right"), "even": parse_rule("mix=1/2")}
#: ``expected`` of a cell checked against the Clarke set only (a framework whose rules the registry does not
#: record: JAX): as expected when the derivative is in the Clarke set (exactly, or as the rounding of an exact rule)
CLARKE = "clarke"


def _torch_dtype(dtype):
    from nsverify.devices import parse_dtype

    return parse_dtype(dtype) if isinstance(dtype, str) else dtype


def rounded(value, dtype) -> Fraction:
    """``value`` rounded to ``dtype`` (a name or a torch dtype) as a Python constant is: to float64, then float32
    for the 16-bit dtypes, then the dtype (:func:`nsverify.registry.round_to_dtype`)."""
    return registry.round_to_dtype(value, _torch_dtype(dtype))


def classify(vec: Sequence[Fraction], rules: dict, dtype) -> tuple[str, bool]:
    """(rule name, exact?) for a returned derivative: the first rule equal to it exactly, else the first rule
    equal to it after rounding each exact rule value to ``dtype``; "other" otherwise.  Irrational rule
    values (mpmath, e.g. selu's) only ever match after rounding."""
    vec = list(vec)
    for name, rv in rules.items():
        if [None if isinstance(v, mpmath.mpf) else Fraction(v) for v in rv] == vec:
            return name, True
    for name, rv in rules.items():
        if [rounded(v, dtype) for v in rv] == vec:
            return name, False
    for name, rv in rules.items():  # irrational constants: a framework's own rounding of the constant may differ
        if any(isinstance(v, mpmath.mpf) for v in rv) and all(
                abs(rounded(v, dtype) - g) <= 2 * ulp(v, dtype) for v, g in zip(rv, vec)):
            return name, False
    return "other", True


def ulp(v, dtype) -> Fraction:
    """The spacing of ``dtype`` numbers at |v|."""
    import torch

    info = torch.finfo(_torch_dtype(dtype))
    v = abs(float(v))
    if v == 0:
        return Fraction(info.tiny)
    return Fraction(info.eps) * Fraction(2) ** math.floor(math.log2(v))


def clarke_status(case, vec, rule: str, exact: bool) -> str:
    """"yes" (``vec`` is in the Clarke set), "rounding" (it is not, but the exact rule it rounds is) or "no"."""
    if case.kind == "elementwise":
        val = vec[0]
        left, right = registry.get(case.op).one_sided(case.values[0])
        lo, hi = min(left, right), max(left, right)
        if isinstance(lo, mpmath.mpf) or isinstance(hi, mpmath.mpf):
            inside = mpmath.mpf(val.numerator) / val.denominator
            if lo <= inside <= hi:
                return "yes"
            return "rounding" if rule != "other" else "no"
        if lo <= val <= hi:
            return "yes"
        return "rounding" if (rule != "other" and not exact) else "no"
    if case.clarke(vec):
        return "yes"
    if rule != "other" and not exact and case.clarke([Fraction(v) for v in case.rules[rule]]):
        return "rounding"
    return "no"


def candidate_rule(case, label: str) -> str | None:
    """The Rule (canonical text) a candidate name stands for ("even" at a kink is mix=1/2); None for "other"."""
    if label == "left=right":
        return str(KINK_CANDIDATES["left"])
    if label in case.rules:
        return str(KINK_CANDIDATES[label] if case.kind == "elementwise" else parse_rule(label))
    return None


def observed_rule(case, vec, label: str, expected: Rule | None, x, dtype) -> tuple[str | None, bool]:
    """(the Rule the derivative equals, as text; does it equal ``expected``?). ``expected`` None: no rule is
    expected (the Clarke set is), and the observed rule is the candidate named by ``label``."""
    if expected is not None:
        want = case.rule_vector(expected, x)
        if want is not None and classify(vec, {str(expected): want}, dtype)[0] != "other":
            return str(expected), True
    return candidate_rule(case, label), False


def directional_tangents(case, n: int) -> dict[str, list[int]]:
    """The tangents forward mode is checked along: elementwise v = +1, -1; selection v = (1, 2, ..., n) and its
    reverse (ties ordered by v)."""
    if case.kind == "elementwise":
        return {"+": [1] * n, "-": [-1] * n}
    return {"ascending": list(range(1, n + 1)), "descending": list(range(n, 0, -1))}


def directional_matches(case, n: int, jvp: Callable[[list[int]], float], dtype) -> dict:
    """Does the jvp (``jvp(tangent)``: the framework's forward-mode derivative along an integer tangent) equal the
    exact one-sided directional derivative f'(x; v), rounded to ``dtype``?  At a true kink a linear jvp can match
    at most one side."""
    out = {}
    for name, v in directional_tangents(case, n).items():
        want = case.directional(tuple(Fraction(a) for a in v))
        out[name] = Fraction(jvp(v)) == rounded(want, dtype)
    return out


@dataclass
class Verdict:
    """What :func:`judge` finds for one derivative."""

    rule: str
    in_clarke: str
    observed: str | None
    as_expected: bool


def judge(case, vec: Sequence[Fraction], dtype, expected: Rule | None, x=None, recorded=None) -> Verdict:
    """Classify the exact derivative ``vec`` of ``case`` in ``dtype``: its candidate rule, its Clarke status, the
    rule it equals and whether it is as expected -- ``expected`` (a Rule; ``x`` the input, for the rule
    ``returned``), or with ``expected`` None any element of the Clarke set (:data:`CLARKE`). ``recorded``: the
    registry's recorded violation for this case and dtype; one of kind "no" makes a derivative outside the Clarke
    set expected."""
    rule, exact = classify(vec, case.rules, dtype)
    observed, matches = observed_rule(case, vec, rule, expected, x, dtype)
    in_clarke = clarke_status(case, vec, rule, exact)
    if expected is None:
        as_expected = in_clarke != "no"
    else:
        as_expected = matches or (recorded is not None and recorded.kind == "no" and in_clarke == "no")
    return Verdict(rule, in_clarke, observed, as_expected)
