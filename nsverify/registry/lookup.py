"""Reading PyTorch's rules out of the registry: the rule of an op (:func:`torch_rule`), the ops instantiated from
their ATen arguments (:func:`elementwise_for`, :func:`clamp_for`), the tie rule of an ATen selection
(:func:`selection_rule_for`), user rule overrides keyed by op (:func:`parse_conventions`), the ``op[rule,...]``
activation syntax (:func:`parse_op_rules`) and the recorded violations (:func:`violation`)."""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from fractions import Fraction
from typing import Iterator

from nsverify.errors import NsverifyError, UnknownOpError
from nsverify.registry.entries import THRESHOLD_RULES
from nsverify.registry.rules import KINK_RULES, TIE_RULES, Rule, RuleError, parse_rule
from nsverify.registry.table import PRIMITIVES, by_aten, get, unknown_op
from nsverify.registry.types import (
    Elementwise,
    Piece,
    Selection,
    Violation,
    installed_release,
    lin,
    release_key,
)

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
    """The Elementwise description of ATen op ``base`` called with scalar ``args`` (after the tensor), with
    PyTorch's rule at each kink: relu, abs, hardsigmoid, hardswish as registered; leaky_relu(slope),
    hardtanh(min_val, max_val) (relu6 when the bounds are (0, 6)) and threshold(th, value) built from their
    arguments."""
    if base in ("relu", "relu_"):
        return get("relu")
    if base in ("abs", "hardsigmoid", "hardswish"):
        return get(base)
    if base == "leaky_relu":
        a = F(args[0]) if args else F(1, 100)
        return dataclasses.replace(get("leaky_relu"), pieces=(lin(a), lin(1)), torch_fn=None)
    if base in ("hardtanh", "hardtanh_"):
        lo, hi = (F(args[0]) if len(args) > 0 else F(-1)), (F(args[1]) if len(args) > 1 else F(1))
        name = "relu6" if (lo, hi) == (0, 6) else "hardtanh"
        return Elementwise(name, ("hardtanh",), None, (lo, hi), (lin(0, lo), lin(1), lin(0, hi)),
                           get(name).torch_rules)
    if base == "threshold":
        th, value = F(args[0]), F(args[1])
        return Elementwise("threshold", ("threshold",), None, (th,), (lin(0, value), lin(1)),
                           torch_rule("threshold"))
    raise UnknownOpError(f"{base!r} is not an elementwise op with kinks; known: relu, abs, leaky_relu, hardtanh, "
                         "hardsigmoid, hardswish, threshold.")


def clamp_for(lo, hi) -> Elementwise:
    """clamp(x, lo, hi) with scalar bounds, either optional, with PyTorch's rule (``inside``) at each bound."""
    rules = get("clamp").torch_rules
    bps: list = []
    pieces: list[Piece] = []
    sides: list = []
    if lo is not None:
        bps.append(F(lo))
        pieces.append(lin(0, F(lo)))
        sides.append(rules[0])
    pieces.append(lin(1))
    if hi is not None:
        bps.append(F(hi))
        pieces.append(lin(0, F(hi)))
        sides.append(rules[1])
    return Elementwise("clamp", ("clamp",), None, tuple(bps), tuple(pieces), tuple(sides))


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


def parse_conventions(mapping) -> dict:
    """Validate rule overrides keyed by op: ``{"abs": "mid", "relu": "value=1/2", "max_pool2d": "hybrid=0.5"}``.

    Keys are the registry's op names (plus ``threshold``); an unknown key raises UnknownOpError listing them.
    Elementwise ops take a kink rule (applied at every kink) or a sequence with one kink rule per kink;
    selections take a tie rule; ``"torch"`` stands for PyTorch's rule. Values are anything
    :func:`~nsverify.registry.rules.parse_rule` reads. Returns ``{op: Rule or tuple of Rules}``."""
    if mapping is None:
        return {}
    if not isinstance(mapping, Mapping):
        raise NsverifyError(f"conventions must be a mapping from op name to rule, e.g. {{'relu': 'value=1'}}; got "
                            f"{type(mapping).__name__}.")
    out: dict = {}
    valid = convention_ops()
    for op, spec in mapping.items():
        if op not in valid:
            raise unknown_op(op, valid, "conventions are keyed by the registry's op names")
        try:
            if op in ARGUMENT_OPS or isinstance(get(op), Elementwise):
                out[op] = parse_kink_rules(op, spec)
            else:
                rule = parse_rule(spec, kind="tie")
                out[op] = torch_rule(op) if rule.name == "torch" else rule
        except RuleError as e:
            raise RuleError(f"{op}: {e}") from None
    return out


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
    if not rest.endswith("]"):
        raise RuleError(f"{text!r}: the rules must end with ']' (e.g. {op}[left]).")
    parts = [p.strip() for p in rest[:-1].split(",")]
    if parts == [""]:
        raise RuleError(f"{text!r}: give at least one rule inside the brackets (e.g. {op}[left]).")
    spec = parse_kink_rules(op, parts[0] if len(parts) == 1 else parts)
    n = _kink_count(op)
    return op, (spec,) * n if isinstance(spec, Rule) else spec


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
