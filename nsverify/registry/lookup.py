"""Reading PyTorch's rules out of the registry: the rule of an op (:func:`torch_rule`), the ops instantiated from
their ATen arguments (:func:`elementwise_for`, :func:`elementwise_by_aten`), the tie rule of an ATen selection
(:func:`selection_rule_for`), the rule of one op key (:func:`parse_op_rule`), the one mapping op -> rule
(:class:`Rules`, read by :func:`parse_rules`: it validates each op against the table, so it lives here, above
the table, and the rule vocabulary :mod:`nsverify.registry.rules` stays below it), the ``op[rule,...]``
activation syntax (:func:`parse_op_rules`) and the recorded violations (:func:`violation`)."""
from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import Iterator

from nsverify.registry.entries import THRESHOLD_RULES, threshold_for
from nsverify.registry.rules import KINK_RULES, TIE_RULES, Rule, RuleError, parse_rule, rule_item, split_items
from nsverify.registry.table import PRIMITIVES, by_aten, get, unknown_op
from nsverify.registry.types import Elementwise, Selection, Violation, installed_release, release_key

F = Fraction

#: elementwise ops that exist only through their ATen arguments (no registry entry of their own): their rules
ARGUMENT_OPS = {"threshold": THRESHOLD_RULES}


def convention_ops() -> list[str]:
    """The op keys a rule can be given for: every registry entry, and the argument-only ops (threshold)."""
    return [*PRIMITIVES, *ARGUMENT_OPS]


def _kink_count(op: str) -> int:
    return len(ARGUMENT_OPS[op]) if op in ARGUMENT_OPS else len(get(op).breakpoints)


def torch_rule(op: str):
    """PyTorch's rule for registry op ``op``: a tuple with one :class:`Rule` per kink (elementwise ops) or the
    tie :class:`Rule` (selections). This is what the rule ``torch`` stands for."""
    if op in ARGUMENT_OPS:
        return tuple(parse_rule(r, kind="kink") for r in ARGUMENT_OPS[op])
    p = get(op)
    return p.torch_rules if isinstance(p, Elementwise) else p.torch_rule


# ----------------------------------------------------------------------------------------------------
# Ops instantiated from their ATen arguments (hardtanh bounds, leaky_relu slope, threshold, clamp bounds)
# ----------------------------------------------------------------------------------------------------
def elementwise_for(base: str, args: tuple = ()) -> Elementwise:
    """The Elementwise description of ATen op ``base`` (a forward or backward op, bare name) called with scalar
    ``args`` (after the tensors), with PyTorch's rule at each kink: the entry's own instance for its arguments
    (:meth:`Elementwise.instance`: leaky_relu(slope), hardtanh(min_val, max_val) -- relu6 when the bounds are
    (0, 6) -- and clamp(min, max) built from them, the others as registered), and the argument-only op
    threshold(th, value)."""
    if base == "threshold":
        return threshold_for(*args)
    entry = elementwise_by_aten(base)
    if entry is None:
        ew = [n for n, p in PRIMITIVES.items() if isinstance(p, Elementwise)]
        raise unknown_op(base, [*ew, "threshold"], "it is not an elementwise op with kinks")
    return entry.instance(args)


def elementwise_by_aten(name: str) -> Elementwise | None:
    """The elementwise entry whose ATen forward or backward ops include ``name`` ('aten.relu.default', 'relu_',
    'hardtanh_backward'), or None. In-place overloads (``relu_``) find their op's entry."""
    base = name.removeprefix("aten.").split(".")[0]
    for cand in (base, base[:-1] if base.endswith("_") else None):
        if cand is None:
            continue
        for p in PRIMITIVES.values():
            if isinstance(p, Elementwise) and (cand in p.aten or cand in p.backward):
                return p
    return None


def selection_rule_for(aten_name: str) -> Rule:
    """PyTorch's tie rule for an ATen selection op ('max', 'max.dim', 'max_pool2d_with_indices', 'sort', ...)."""
    p = by_aten(aten_name)
    if not isinstance(p, Selection):
        sel = [n for n, q in PRIMITIVES.items() if isinstance(q, Selection)]
        raise unknown_op(aten_name, sel, "no selection entry of the registry handles this ATen op")
    return p.torch_rule


# ----------------------------------------------------------------------------------------------------
# Rules keyed by op
# ----------------------------------------------------------------------------------------------------
_PARAM_NAMES = {n for n, takes in {**KINK_RULES, **TIE_RULES}.items() if takes}


def single_rule(spec) -> bool:
    """Is ``spec`` one rule (rather than a sequence with one rule per kink)?"""
    if isinstance(spec, list):
        return False
    return not isinstance(spec, tuple) or (len(spec) == 2 and isinstance(spec[0], str) and spec[0] in _PARAM_NAMES)


def parse_kink_rules(op: str, spec):
    """The kink rule(s) for elementwise op ``op``: one :class:`Rule` for every kink, or a tuple with one per kink
    (``"torch"``: PyTorch's, from the registry). Raises RuleError naming the valid rules otherwise."""
    if single_rule(spec):
        rule = parse_rule(spec, kind="kink")
        return torch_rule(op) if rule.name == "torch" else rule
    rules = tuple(parse_rule(r, kind="kink") for r in spec)
    n = _kink_count(op)
    if len(rules) != n and not (op == "clamp" and len(rules) == 1):
        raise RuleError(f"{op} has {n} kinks but {len(rules)} rules were given: give one rule for every kink, or "
                        f"a sequence with one rule per kink.")
    torch = torch_rule(op)
    return tuple(torch[i] if r.name == "torch" else r for i, r in enumerate(rules))


def parse_op_rule(op: str, spec):
    """The rule of op key ``op`` (what :class:`Rules` holds for it): a kink rule, or one
    per kink, for an elementwise op; the tie rule for a selection; ``"torch"`` resolved to PyTorch's. Raises
    UnknownOpError for an op that is not a key, RuleError naming the valid rules otherwise."""
    valid = convention_ops()
    if op not in valid:
        raise unknown_op(op, valid, "rules are keyed by the registry's op names")
    try:
        if op in ARGUMENT_OPS or isinstance(get(op), Elementwise):
            return parse_kink_rules(op, spec)
        rule = parse_rule(spec, kind="tie")
        return torch_rule(op) if rule.name == "torch" else rule
    except RuleError as e:
        raise RuleError(f"{op}: {e}") from None


def parse_conventions(mapping) -> Rules:
    """Deprecated spelling of :func:`parse_rules` (kept for one release)."""
    import warnings

    warnings.warn("registry.parse_conventions is deprecated: use registry.parse_rules (op -> rule).",
                  DeprecationWarning, stacklevel=2)
    return parse_rules(mapping)


def parse_op_rules(text: str) -> tuple[str, tuple[Rule, ...] | None]:
    """An elementwise op with optional per-kink rules: ``"relu"`` -> ("relu", None) (PyTorch's rules),
    ``"relu[value=1/2]"`` (one rule for every kink), ``"hardtanh[left,right]"`` (one rule per kink).
    Returns (op, one Rule per kink, or None)."""
    s = str(text).strip()
    op, bracket, rest = s.partition("[")
    op = op.strip()
    if op not in PRIMITIVES or not isinstance(PRIMITIVES[op], Elementwise):
        ew = [n for n, p in PRIMITIVES.items() if isinstance(p, Elementwise)]
        raise unknown_op(op or s, ew, "write an activation as an elementwise registry op, optionally with rules "
                                      "at its kinks: op or op[rule,...], e.g. relu[value=1/2] or hardtanh[left,right]")
    if not bracket:
        return op, None
    spec = parse_kink_rules(op, rule_item(s)[1])
    n = _kink_count(op)
    return op, (spec,) * n if isinstance(spec, Rule) else spec


# ----------------------------------------------------------------------------------------------------
# op -> rule: the one mapping type, validated against the table
# ----------------------------------------------------------------------------------------------------
def _rule_text(value) -> str:
    return ",".join(str(r) for r in value) if isinstance(value, tuple) else str(value)


class Rules(Mapping):
    """The one mapping from an op key to its rule: ``{op: Rule}`` or ``{op: (Rule per kink, ...)}``, validated
    against the registry (unknown ops and rules of the wrong kind raise, ``"torch"`` is resolved to PyTorch's
    rule). Immutable and hashable; equal to any mapping with the same items. Build one with :func:`parse_rules`
    (or ``Rules(mapping)``, ``Rules(relu="value=1")``); ``str(rules)`` is its text form
    (``"relu[value=1/2]; max_pool2d[even]"``), which :func:`parse_rules` reads back."""

    __slots__ = ("_map",)

    def __init__(self, rules=None, /, **by_op):
        if isinstance(rules, Rules) and not by_op:
            self._map = rules._map
            return
        spec = dict(_items(rules))
        spec.update(by_op)
        self._map = {op: parse_op_rule(op, value) for op, value in spec.items()}

    def __getitem__(self, op: str):
        return self._map[op]

    def __iter__(self) -> Iterator[str]:
        return iter(self._map)

    def __len__(self) -> int:
        return len(self._map)

    def __hash__(self) -> int:
        return hash(frozenset(self._map.items()))

    def __or__(self, other) -> Rules:
        """These rules with ``other``'s (any form :func:`parse_rules` reads) added or replacing them."""
        return Rules({**self._map, **parse_rules(other)._map})

    def __str__(self) -> str:
        return "; ".join(f"{op}[{_rule_text(v)}]" for op, v in self._map.items())

    def __repr__(self) -> str:
        return f"Rules({str(self)!r})"


def _items(spec) -> Iterator[tuple[str, object]]:
    if spec is None:
        return
    if isinstance(spec, Mapping):
        yield from spec.items()
    elif isinstance(spec, str):
        yield from (rule_item(t) for t in split_items(spec))
    elif isinstance(spec, (list, tuple)) and all(isinstance(t, str) for t in spec):
        for t in spec:
            yield from _items(t)
    else:
        raise RuleError(f"rules must be a mapping from op name to rule, e.g. {{'relu': 'value=1'}}, or its text "
                        f"'relu[value=1]'; got {type(spec).__name__}.")


def parse_rules(spec=None, /, **by_op) -> Rules:
    """The one parser of op -> rule: a :class:`Rules` from a mapping (``{"abs": "mid", "relu": "value=1/2",
    "max_pool2d": "hybrid=0.5", "hardtanh": ["left", "right"]}``), keywords, the text form
    (``"relu[value=1/2]; max_pool2d[even]"``), a list of such items, another Rules, or None (no rule given).

    Keys are the registry's op names (plus ``threshold``); an unknown key raises UnknownOpError listing them.
    Elementwise ops take a kink rule (applied at every kink) or a sequence with one kink rule per kink;
    selections take a tie rule; ``"torch"`` stands for PyTorch's rule. Rules are anything :func:`parse_rule`
    reads."""
    if isinstance(spec, Rules) and not by_op:
        return spec
    return Rules(spec, **by_op)


# ----------------------------------------------------------------------------------------------------
# Recorded violations
# ----------------------------------------------------------------------------------------------------
def recorded_violations() -> Iterator[tuple[str, str, Violation]]:
    """Every recorded violation as (op, case label, Violation)."""
    for name, p in PRIMITIVES.items():
        if isinstance(p, Elementwise):
            for i, b in enumerate(p.breakpoints):
                for v in p.violations.get(b, ()):
                    yield name, p.kink_label(i), v
        else:
            for c in p.cases:
                for v in c.violations:
                    yield name, c.label, v


def violation_records(op: str, case: str) -> tuple[Violation, ...]:
    """Every violation recorded at the case labelled ``case`` of registry op ``op``, whatever its dtypes and
    releases (empty when none, or when the op has no such case)."""
    p = get(op)
    if isinstance(p, Elementwise):
        i = next((i for i in range(len(p.breakpoints)) if p.kink_label(i) == case), None)
        return () if i is None else tuple(p.violations.get(p.breakpoints[i], ()))
    c = next((c for c in p.cases if c.label == case), None)
    return () if c is None else tuple(c.violations)


def violation(op: str, case: str, dtype: str, release: str | None = None) -> Violation | None:
    """The recorded violation of registry op ``op`` at the case labelled ``case`` in dtype ``dtype`` (a name
    such as "float32") and torch ``release`` (default: the installed one), or None."""
    return next((v for v in violation_records(op, case) if v.applies(dtype, release)), None)


def fixed_violation(op: str, case: str, dtype: str, release: str | None = None) -> Violation | None:
    """A violation recorded for this case and dtype whose release range ended at or before ``release`` (default:
    the installed one): PyTorch fixed it in ``Violation.until``. None when there is none."""
    rel = release or installed_release()
    return next((v for v in violation_records(op, case) if v.in_dtype(dtype) and v.until is not None
                 and release_key(rel) >= release_key(v.until)), None)
