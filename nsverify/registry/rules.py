"""The one vocabulary for *what AD picks at a kink or a tie*: :class:`Rule` (one choice) with its parser
:func:`parse_rule`. The mapping op -> rule, :class:`~nsverify.registry.lookup.Rules` with its parser
:func:`~nsverify.registry.lookup.parse_rules`, lives in :mod:`nsverify.registry.lookup`: it validates each op
against the table, and this module sits below the table (the entries' types read it).

Every part of nsverify that names such a choice uses these types: the registry (PyTorch's measured rule per op),
the oracle's ``rules=`` (:func:`nsverify.check_gradient`), :func:`nsverify.ad.backward_rules`, the zone
programs (:func:`nsverify.papers.zones.rules.as_program`), the generators' AD variants
(:meth:`nsverify.strategies.netspec.NetSpec.rules`), the conventions matrix and the report. "Conventions" means
one thing only: PyTorch's measured behaviour (the conventions matrix); a choice someone makes is a rule.

At a **kink** of an elementwise op (left derivative ``l``, right derivative ``r``):

=================  ==========================================================================================
``left``           ``l``
``right``          ``r``
``inside``         the derivative of the piece between the two outer kinks (clamp: 1 at both bounds)
``mix=λ``          ``(1 - λ) l + λ r`` (``mid`` is ``mix=1/2``: the even split; for abs it is 0)
``value=d``        the fixed number ``d`` (Bertoin et al.'s ReLU'(0) = s is ``value=s``)
=================  ==========================================================================================

At a **tie** of a selection op (max, max-pool, sort, ...; tied entries ``A`` in PyTorch's scan order):

=================  ==========================================================================================
``first``          all weight to the first tied index (``native``: PyTorch's max-pool; Boustany Def 8)
``last``           all weight to the last tied index
``even``           ``1/|A|`` to each tied entry (``minimal``: Boustany Def 9, the minimal-norm choice)
``hybrid=β``       ``(1 - β) first + β even`` (Boustany Def 10; β > 1 is conservative but not Clarke)
``returned``       all weight to the index PyTorch returned in the float run (sort, topk, median: read it,
                   never assume it)
``inside``         all weight to the clamped input x (clamp with tensor bounds at x == min or x == max): the
                   middle piece, as ``inside`` at a scalar clamp's kink
=================  ==========================================================================================

The hybrid family contains two of the others: ``first`` is ``hybrid=0`` and ``even`` is ``hybrid=1``
(:attr:`Rule.hybrid_beta`).

``torch`` stands for "the rule the registry records for this op" and is resolved with
:func:`nsverify.registry.torch_rule`. Numbers are accepted where a rule is expected and mean ``value=d``;
``("mix", λ)`` and ``("hybrid", β)`` tuples are accepted too. Parameters are kept exact (``Fraction``).

Park, Chun and Lee's λ (Sec. 3, Theorems 4 and 6) is a ``mix=λ`` rule: the derivative at a kink is
``(1 - λ) D^- + λ D^+``, the weight λ on the RIGHT derivative, and their one-sided "sides" are ``left`` and
``right`` (:meth:`Rule.kink_side`). PyTorch's relu (``left``) has λ = 0, abs (``mix=1/2``) has λ = 1/2.

**op -> rule.** :class:`~nsverify.registry.lookup.Rules` is the one mapping type from an op key to its rule:
ONE key scheme, the registry's op names (``"relu"``, ``"leaky_relu"``, ``"max_pool2d"``; an ATen overload is
the registry entry that handles it, ``max.dim`` -> ``"max_dim"``, :func:`nsverify.registry.op_key`; keyword
variants are the op's own instance, e.g. ``nn.Hardtanh(0, 6)`` is ``"relu6"``), plus the argument-only op
``"threshold"``. An elementwise op maps to one :class:`Rule` for every kink or a tuple with one Rule per kink; a
selection maps to its tie Rule. Its text form is ``op[rule]`` / ``op[rule,rule]`` items separated by ``;``
(``"relu[value=1/2]; max_pool2d[even]"``, read by :func:`split_items` and :func:`rule_item` here), the same
``op[rule,...]`` form as the AD-variant activations of the generators.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from fractions import Fraction
from typing import Sequence

from nsverify.errors import NsverifyError

__all__ = ["Rule", "parse_rule", "RuleError", "KINK_RULES", "TIE_RULES", "ALIASES", "rule_names", "rule_item",
           "split_items", "renamed_rules_argument"]

#: rules at a kink of an elementwise op; the value says whether the rule takes a parameter
KINK_RULES = {"left": False, "right": False, "inside": False, "mix": True, "value": True}
#: rules at a tie of a selection op
TIE_RULES = {"first": False, "last": False, "even": False, "hybrid": True, "returned": False, "inside": False}
#: other names accepted by the parser, and the rule each one means
ALIASES = {
    "mid": ("mix", Fraction(1, 2)),
    "native": ("first", None),
    "minimal": ("even", None),
    "min_norm": ("even", None),
}


class RuleError(NsverifyError, ValueError):
    """A rule name or parameter that the vocabulary does not know."""


def rule_names(kind: str | None = None) -> list[str]:
    """The names :func:`parse_rule` accepts (``kind``: "kink", "tie" or None for both), for messages."""
    kink = [f"{n}=<number>" if p else n for n, p in KINK_RULES.items()] + ["mid", "<number> (= value=<number>)"]
    tie = [f"{n}=<number>" if p else n for n, p in TIE_RULES.items()] + ["native", "minimal", "min_norm"]
    names = (kink if kind != "tie" else []) + (tie if kind != "kink" else []) + ["torch"]
    return list(dict.fromkeys(names))  # "inside" is both a kink and a tie rule: list it once


@dataclass(frozen=True)
class Rule:
    """What AD picks at a kink (``left``, ``right``, ``inside``, ``mix=λ``, ``value=d``) or at a tie
    (``first``, ``last``, ``even``, ``hybrid=β``, ``returned``, ``inside``). Build one with :func:`parse_rule`;
    ``str(rule)`` is its canonical text and parses back to an equal rule."""

    name: str
    param: Fraction | None = None

    def __post_init__(self):
        takes = {**KINK_RULES, **TIE_RULES}.get(self.name)
        if takes is None and self.name != "torch":
            raise RuleError(f"unknown rule {self.name!r}; valid rules: {', '.join(rule_names())}.")
        if bool(takes) != (self.param is not None):
            fix = f"write e.g. '{self.name}=1/2'" if takes else f"write '{self.name}'"
            raise RuleError(f"rule {self.name!r} {'needs a' if takes else 'takes no'} parameter; {fix}.")

    # ------------------------------------------------------------------ kinds
    @property
    def at_kink(self) -> bool:
        return self.name in KINK_RULES

    @property
    def at_tie(self) -> bool:
        return self.name in TIE_RULES

    @property
    def hybrid_beta(self) -> Fraction | None:
        """β when this tie rule belongs to the hybrid family (``first`` = 0, ``even`` = 1, ``hybrid=β``), else
        None (Boustany Def 10)."""
        return {"first": Fraction(0), "even": Fraction(1), "hybrid": self.param}.get(self.name)

    def __str__(self) -> str:
        return self.name if self.param is None else f"{self.name}={self.param}"

    def __repr__(self) -> str:
        return f"Rule({str(self)!r})"

    # ------------------------------------------------------------------ semantics
    def kink_derivative(self, left, right, inside=None):
        """The derivative this rule gives at a kink with one-sided derivatives ``left`` and ``right``
        (``inside``: the derivative of the middle piece, for ``inside``). Exact when the inputs are."""
        if self.name == "left":
            return left
        if self.name == "right":
            return right
        if self.name == "inside":
            if inside is None:
                raise RuleError("rule 'inside' needs the middle piece (it applies to clamp-like ops only)")
            return inside
        if self.name == "mix":
            lam = self.param
            return left + lam * (right - left) if lam != 0 else left
        if self.name == "value":
            return self.param
        raise RuleError(f"{self} is a tie rule, not a kink rule; kink rules: {', '.join(rule_names('kink'))}.")

    def kink_side(self) -> int | None:
        """-1 (left piece), +1 (right piece) when this rule is a one-sided derivative whatever the op, else None
        (``mix=0`` is left and ``mix=1`` is right)."""
        if self.name == "left" or (self.name == "mix" and self.param == 0):
            return -1
        if self.name == "right" or (self.name == "mix" and self.param == 1):
            return +1
        return None

    def tie_weights(self, tied: Sequence[int], returned: int | None = None,
                    inside: int | None = None) -> dict[int, Fraction]:
        """Weights this rule puts on the tied entries ``tied`` (indices in PyTorch's scan order; the first is
        the first tied index). ``returned``: the index PyTorch returned (needed by ``returned``); ``inside``:
        the index of the clamped input x (needed by ``inside``)."""
        tied = list(tied)
        if not tied:
            raise RuleError("a tie needs at least one tied entry")
        if self.name == "first":
            return {tied[0]: Fraction(1)}
        if self.name == "last":
            return {tied[-1]: Fraction(1)}
        if self.name == "returned":
            if returned is None or returned not in tied:
                raise RuleError(f"rule 'returned' needs the index PyTorch returned among the tied entries "
                                f"{tied} (got {returned!r})")
            return {returned: Fraction(1)}
        if self.name == "inside":
            if inside is None or inside not in tied:
                raise RuleError(f"rule 'inside' needs the clamped input among the tied entries {tied} "
                                f"(got {inside!r}); it applies to clamp with tensor bounds only")
            return {inside: Fraction(1)}
        n = len(tied)
        if self.name == "even":
            return {i: Fraction(1, n) for i in tied}
        if self.name == "hybrid":
            b = self.param
            out = {i: b / n for i in tied}
            out[tied[0]] += 1 - b
            return {i: w for i, w in out.items() if w != 0}
        raise RuleError(f"{self} is a kink rule, not a tie rule; tie rules: {', '.join(rule_names('tie'))}.")


def _number(text) -> Fraction:
    if isinstance(text, bool):
        raise RuleError(f"{text!r} is not a number")
    if isinstance(text, (int, Fraction)):
        return Fraction(text)
    if isinstance(text, float):
        if text != text or text in (float("inf"), float("-inf")):
            raise RuleError(f"a rule parameter must be finite, not {text!r}")
        return Fraction(text)
    s = str(text).strip()
    try:
        return Fraction(s)
    except (ValueError, ZeroDivisionError):
        try:
            return _number(float(s))
        except ValueError:
            raise RuleError(f"{text!r} is not a number (write e.g. 0.5, 1/2 or 1e3)") from None


def parse_rule(spec, kind: str | None = None) -> Rule:
    """A :class:`Rule` from its text (``"left"``, ``"mix=1/2"``, ``"hybrid=0.5"``, ``"value=0"``, an alias such
    as ``"mid"``, ``"native"``, ``"minimal"``), a number (``value=d``), a ``("mix", λ)`` /
    ``("hybrid", β)`` tuple, or a Rule. ``kind`` ("kink" or "tie") rejects a rule of the other kind.
    Raises :class:`RuleError` naming the valid rules otherwise."""
    if isinstance(spec, Rule):
        rule = spec
    elif isinstance(spec, (int, float, Fraction)) and not isinstance(spec, bool):
        rule = Rule("value", _number(spec))
    elif isinstance(spec, tuple) and len(spec) == 2 and isinstance(spec[0], str):
        rule = Rule(ALIASES.get(spec[0], (spec[0],))[0], _number(spec[1]))
    elif isinstance(spec, str):
        text = spec.strip()
        name, eq, param = text.partition("=")
        name = name.strip()
        if eq:
            if name not in KINK_RULES and name not in TIE_RULES:
                raise RuleError(f"unknown rule {spec!r}; valid rules: {', '.join(rule_names(kind))}.")
            rule = Rule(name, _number(param))
        elif name in ALIASES:
            rule = Rule(*ALIASES[name])
        elif name in KINK_RULES or name in TIE_RULES or name == "torch":
            rule = Rule(name)
        else:
            try:
                rule = Rule("value", _number(name))
            except RuleError:
                import difflib

                close = difflib.get_close_matches(name, [*KINK_RULES, *TIE_RULES, *ALIASES, "torch"], n=2)
                hint = f" Did you mean {' or '.join(close)}?" if close else ""
                raise RuleError(f"unknown rule {spec!r}.{hint} Valid rules: {', '.join(rule_names(kind))}.") from None
    else:
        raise RuleError(f"cannot read a rule from {spec!r} ({type(spec).__name__}); valid rules: "
                        f"{', '.join(rule_names(kind))}.")
    if kind == "kink" and not rule.at_kink and rule.name != "torch":
        raise RuleError(f"{rule} is a tie rule, but this op has kinks; kink rules: {', '.join(rule_names('kink'))}.")
    if kind == "tie" and not rule.at_tie and rule.name != "torch":
        raise RuleError(f"{rule} is a kink rule, but this op has ties; tie rules: {', '.join(rule_names('tie'))}.")
    return rule


# ----------------------------------------------------------------------------------------------------
# the text form of op -> rule items (read into Rules by nsverify.registry.lookup.parse_rules)
# ----------------------------------------------------------------------------------------------------
def split_items(text: str) -> list[str]:
    """``"relu[left]; hardtanh[left,right]"`` -> its items (``;`` or a comma outside brackets separates)."""
    items, depth, cur = [], 0, ""
    for ch in text:
        depth += (ch == "[") - (ch == "]")
        if depth == 0 and ch in ";,":
            items.append(cur)
            cur = ""
        else:
            cur += ch
    return [i.strip() for i in [*items, cur] if i.strip()]


def rule_item(text: str) -> tuple[str, object]:
    """One ``op[rule]`` / ``op[rule,rule,...]`` item -> (op, rule spec: one rule text or a list, one per kink)."""
    op, bracket, rest = text.partition("[")
    op = op.strip()
    if not bracket or not rest.rstrip().endswith("]"):
        raise RuleError(f"{text!r}: write an op with its rule in brackets, e.g. relu[value=1/2] or "
                        f"hardtanh[left,right] (items separated by ';').")
    parts = [p.strip() for p in rest.rstrip()[:-1].split(",")]
    if parts == [""]:
        raise RuleError(f"{text!r}: give at least one rule inside the brackets (e.g. {op}[left]).")
    return op, parts[0] if len(parts) == 1 else parts


def renamed_rules_argument(rules, conventions, where: str):
    """The ``rules=`` argument of ``where`` given its deprecated spelling ``conventions=`` (kept for one release
    with a DeprecationWarning; "conventions" now means PyTorch's measured behaviour only)."""
    if conventions is None:
        return rules
    if rules is not None:
        raise RuleError(f"{where} got both rules= and its deprecated alias conventions=; pass rules= only.")
    warnings.warn(f"{where}(conventions=...) is deprecated: pass rules=... (the same mapping op -> rule).",
                  DeprecationWarning, stacklevel=3)
    return conventions
