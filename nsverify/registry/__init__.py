"""The registry of nonsmooth primitives: one data-driven table (in the style of PyTorch's OpInfo).

Everything else reads this table: the conventions matrix, the exact oracle, the AD variants, the generators and
the benchmarks. Its op names are THE op keys everywhere: the one op -> rule mapping :class:`Rules` (the oracle's
``rules=``, :func:`nsverify.ad.backward_rules`, zone programs, activation variants). Two families of entries:

* :class:`Elementwise` -- scalar functions applied entrywise, piecewise smooth with finitely many kinks.
  Each piece carries an mpmath value/derivative and, when it is a polynomial, exact rational coefficients, so
  one-sided derivatives at a kink are exact ``Fraction`` values whenever possible.
* :class:`Selection` -- max-like ops (maximum, amax, max(dim), median, max_pool, sort/topk) whose nonsmooth
  points are *ties*; the local pieces are "the output selects input i".

Every entry records PyTorch's choice as :class:`Rule` objects (:mod:`nsverify.registry.rules`, the one rule
vocabulary): one per kink (``Elementwise.torch_rules``) or one tie rule (``Selection.torch_rule``). Selections
list :class:`TieCase` instances: concrete inputs sitting exactly on a tie, with a cotangent that turns the op's
output into a scalar and the exact Bouligand gradients of the adjacent pieces (the Clarke set is their convex
hull). PyTorch derivatives outside the Clarke set are recorded as :class:`Violation` records next to the kink or
case they describe.

Modules: :mod:`~nsverify.registry.rules` (the rule vocabulary), :mod:`~nsverify.registry.types` (entry types),
:mod:`~nsverify.registry.windows` (selection windows, Bouligand pieces, pooling windows),
:mod:`~nsverify.registry.exact` (exact inputs per dtype), :mod:`~nsverify.registry.entries` (the entries),
:mod:`~nsverify.registry.table` (registration, scoped with :func:`registered`; selection by capability,
:func:`select`; lookup by name, ATen op (:func:`by_aten`), ``torch.nn`` module (:func:`by_module`,
:func:`module_instance`) and functional form (:func:`by_functional`)), :mod:`~nsverify.registry.lookup` (rules by
op, the mapping op -> rule :class:`Rules` with :func:`parse_rules`, ops built from their ATen arguments
(:func:`elementwise_for`, :func:`elementwise_by_aten`), the rule of one op key, violations) and
:mod:`~nsverify.registry.docs` (the docs' blocks generated from the table: ``python -m nsverify.registry docs
--write``). The modules form a DAG, lowest first: rules, exact, windows, types, table, entries, lookup, docs.

Each elementwise entry is the op's one record, OpInfo-style: its ATen forward and backward ops, ``nn`` modules,
functional forms, the instance of an ATen call's arguments, its exact forward and backward (the pieces) and the
families derived from them (:attr:`Elementwise.exact`, :attr:`Elementwise.piecewise_linear`,
:meth:`Elementwise.one_sided_rules`, :meth:`Elementwise.common_lambda`). The oracle dispatches the ATen ops of
the exact entries, the conventions matrix measures every entry, the strategies draw the exact ones as
activations. Every entry states its capabilities (:data:`CAPABILITIES`: fixed or learnable, exact, piecewise
linear, one-sided rules, Park et al.'s layer theorems, autograd nodes, JAX) and consumers select entries by them
with :func:`select`, never by an op's name: a new elementwise activation is one entry (and its test).
"""
from __future__ import annotations

from nsverify.registry.entries import (
    JAX_MAX_POOL2D,
    MAX_POOL2D_GEOMS,
    SELU_ALPHA,
    SELU_SCALE,
    THRESHOLD_RULES,
    all_entries,
    clamp_for,
    hardtanh_for,
    leaky_relu_for,
    prelu_for,
    threshold_for,
)
from nsverify.registry.exact import as_fraction_vec, exact_tensor, round_to_dtype
from nsverify.registry.lookup import (
    ARGUMENT_OPS,
    Rules,
    convention_ops,
    elementwise_by_aten,
    elementwise_for,
    fixed_violation,
    parse_conventions,
    parse_kink_rules,
    parse_op_rule,
    parse_op_rules,
    parse_rules,
    recorded_violations,
    selection_rule_for,
    single_rule,
    torch_rule,
    violation,
    violation_records,
)
from nsverify.registry.rules import Rule, RuleError, parse_rule, renamed_rules_argument, rule_names
from nsverify.registry.table import (
    KINDS,
    PRIMITIVES,
    by_aten,
    by_functional,
    by_module,
    get,
    module_instance,
    names,
    op_key,
    register,
    registered,
    select,
    unregister,
    version,
)
from nsverify.registry.types import (
    AD_MODES,
    CAPABILITIES,
    Elementwise,
    Piece,
    Primitive,
    RuleChange,
    Selection,
    TieCase,
    Violation,
    functional_name,
    installed_release,
    jax_function,
    lin,
    release_key,
    release_of,
    selection_case,
)
from nsverify.registry.windows import (
    MAX_PIECES,
    Window,
    adaptive_windows,
    bouligand_pieces,
    pool2d_windows,
    pool_out_size,
    rule_vectors,
)

__all__ = [
    "Rule", "RuleError", "parse_rule", "rule_names", "Rules", "parse_rules", "parse_op_rule", "renamed_rules_argument",
    "Elementwise", "Selection", "TieCase", "Violation", "Piece", "Primitive", "Window", "lin", "selection_case",
    "PRIMITIVES", "KINDS", "CAPABILITIES", "select", "register", "unregister", "registered", "version", "get", "names",
    "by_aten", "op_key",
    "by_module", "module_instance", "by_functional", "functional_name", "elementwise_by_aten", "hardtanh_for",
    "leaky_relu_for", "prelu_for", "threshold_for",
    "torch_rule", "elementwise_for", "clamp_for", "selection_rule_for", "parse_conventions", "parse_kink_rules",
    "parse_op_rules", "single_rule", "convention_ops", "ARGUMENT_OPS", "THRESHOLD_RULES", "violation",
    "recorded_violations", "violation_records", "fixed_violation", "RuleChange", "AD_MODES", "installed_release",
    "release_key", "release_of", "jax_function", "JAX_MAX_POOL2D",
    "as_fraction_vec", "exact_tensor", "round_to_dtype", "kink_inputs",
    "rule_vectors", "bouligand_pieces", "MAX_PIECES", "pool_out_size", "pool2d_windows", "adaptive_windows",
    "MAX_POOL2D_GEOMS", "SELU_ALPHA", "SELU_SCALE",
]


def kink_inputs(entry: Elementwise, dtype, device="cpu"):
    """A 1-d tensor with one entry sitting exactly on each kink of an elementwise primitive."""
    return exact_tensor(entry.breakpoints, dtype, device)


for _e in all_entries():
    register(_e)
