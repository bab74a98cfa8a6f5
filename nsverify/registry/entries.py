"""The registry's entries: every nonsmooth primitive with PyTorch's rule at its kinks or ties (measured on torch
2.13 CPU; ``nsverify conventions`` re-measures them) and the recorded violations next to the case they describe.
"""
from __future__ import annotations

import dataclasses
from fractions import Fraction
from typing import Sequence

import mpmath

from nsverify.registry.types import (
    Elementwise,
    Piece,
    RuleChange,
    Selection,
    Violation,
    functional_name,
    lin,
    selection_case,
)
from nsverify.registry.windows import Window, adaptive_windows, pool2d_windows

F = Fraction

with mpmath.workdps(40):
    SELU_ALPHA = mpmath.mpf("1.6732632423543772848170429916717")
    SELU_SCALE = mpmath.mpf("1.0507009873554804934193349852946")

#: PyTorch's rule at the kink of ``threshold(x, th, value)`` (an op instantiated from its arguments only, see
#: :func:`nsverify.registry.elementwise_for`): threshold_backward passes the gradient where x > th, so the
#: derivative at x == th is the left piece's (the constant ``value``)
THRESHOLD_RULES = ("left",)

_THIRD = Violation(
    "rounding",
    "even split over 3 tied entries: 1/3 is not representable in binary floating point, so the float gradient "
    "is the exact rule rounded (it lies just outside the exact Clarke set)")


# ----------------------------------------------------------------------------------------------------
# Elementwise entries
# ----------------------------------------------------------------------------------------------------
def _const(c) -> Piece:
    return Piece(poly=(F(c),))


def _mp_exp_piece(scale, alpha) -> Piece:
    """scale * alpha * (exp(x) - 1), the negative branch of elu/selu (mpmath; not rational)."""
    return Piece(mp=lambda x: scale * alpha * (mpmath.exp(x) - 1),
                 dmp=lambda x: scale * alpha * mpmath.exp(x))


def _fn_names(*names: str) -> tuple[str, ...]:
    return tuple(functional_name(n) for n in names)


def leaky_relu_for(negative_slope=0.01, *_) -> Elementwise:
    """leaky_relu with slope ``negative_slope`` (ATen's argument; its default is the double 0.01, whose exact
    value is not 1/100): PyTorch's rule at 0 (the left piece's slope)."""
    from nsverify.registry.table import get

    return dataclasses.replace(get("leaky_relu"), pieces=(lin(F(negative_slope)), lin(1)), torch_fn=None)


def prelu_for(weight=0.25, *_) -> Elementwise:
    """prelu with the one slope ``weight`` below 0 (a number, or a tensor with one entry, such as the weight of
    ``nn.PReLU()``): PyTorch's rules at 0 (reverse mode the left piece's slope, forward mode the right piece's).
    A weight with one slope per channel is not one elementwise function: it raises UnsupportedOpError (the oracle
    evaluates ``aten._prelu_kernel`` with the tensor itself, :mod:`nsverify.oracle.ops.kinks`)."""
    from nsverify.errors import UnsupportedOpError
    from nsverify.registry.table import get

    if hasattr(weight, "numel"):
        if weight.numel() != 1:
            raise UnsupportedOpError(
                f"prelu with {weight.numel()} slopes (num_parameters={weight.numel()}, one per channel) is not one "
                "elementwise function of the registry; check it with nsverify.check_module / check_gradient, whose "
                "exact interpreter evaluates aten._prelu_kernel with the weight tensor, or use num_parameters=1.")
        weight = float(weight.detach().reshape(-1)[0])
    return dataclasses.replace(get("prelu"), pieces=(lin(F(weight)), lin(1)), torch_fn=None)


def prelu_fn(t, weight=0.25):
    """The registry's prelu as a function of one tensor: F.prelu with one slope ``weight`` (nn.PReLU's default
    initial value 0.25)."""
    import torch

    return torch.nn.functional.prelu(t, torch.full((1,), weight, dtype=t.dtype, device=t.device))


def hardtanh_for(min_val=-1.0, max_val=1.0, *_) -> Elementwise:
    """hardtanh with bounds (min_val, max_val): relu6's rules (and name) for the bounds (0, 6), hardtanh's
    otherwise."""
    from nsverify.registry.table import get

    lo, hi = F(min_val), F(max_val)
    name = "relu6" if (lo, hi) == (0, 6) else "hardtanh"
    return Elementwise(name, ("hardtanh",), None, (lo, hi), (lin(0, lo), lin(1), lin(0, hi)),
                       get(name).torch_rules, backward=("hardtanh_backward",),
                       autograd_nodes=("HardtanhBackward0",))


def threshold_for(threshold, value=0, *_) -> Elementwise:
    """threshold(x, th, value) = x where x > th, else value: an op that exists only through its ATen arguments,
    with PyTorch's rule (:data:`THRESHOLD_RULES`)."""
    th, v = F(threshold), F(value)
    return Elementwise("threshold", ("threshold",), None, (th,), (lin(0, v), lin(1)), THRESHOLD_RULES,
                       backward=("threshold_backward",), autograd_nodes=("ThresholdBackward0",))


def clamp_for(lo=None, hi=None, *_) -> Elementwise:
    """clamp(x, lo, hi) with scalar bounds, either optional, with PyTorch's rule (``inside``) at each bound."""
    from nsverify.registry.table import get

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
    return Elementwise("clamp", ("clamp",), None, tuple(bps), tuple(pieces), tuple(sides),
                      autograd_nodes=("ClampBackward1",))


def elementwise_entries():
    import torch
    import torch.nn.functional as tF

    yield Elementwise("relu", ("relu", "relu_", "threshold_backward"), torch.relu, (F(0),),
                      (_const(0), lin(1)), ("left",), doc="max(x, 0); PyTorch: relu'(0) = 0",
                      backward=("threshold_backward",), modules=("ReLU",),
                      functionals=_fn_names("F.relu", "F.relu_", "torch.relu", "torch.relu_", "T.relu", "T.relu_"),
                      jax="jax.nn.relu(x)",
                      autograd_nodes=("ReluBackward0",), backward_reads_output=True)
    yield Elementwise("leaky_relu", ("leaky_relu", "leaky_relu_"), tF.leaky_relu, (F(0),),
                      (lin(F(1, 100)), lin(1)), ("left",), kwargs={"negative_slope": 0.01},
                      doc="slope 1/100 below 0; the real slope is not dyadic: in a float dtype the slope "
                          "PyTorch uses (and returns at 0) is 0.01 rounded to the dtype's compute type "
                          "(see :func:`round_to_dtype`)",
                      violations={F(0): (Violation(
                          "rounding", "the left derivative 0.01 (registry value: the float64 0.01) is rounded to "
                          "float32 (bfloat16 and float16 round it upward, into the Clarke interval [0.01, 1])",
                          ("float32",)),)},
                      backward=("leaky_relu_backward",), modules=("LeakyReLU",),
                      functionals=_fn_names("F.leaky_relu", "F.leaky_relu_"), from_args=leaky_relu_for,
                      jax="jax.nn.leaky_relu(x, negative_slope=0.01)",
                      autograd_nodes=("LeakyReluBackward0", "LeakyReluBackward1"))
    yield Elementwise("prelu", ("prelu", "_prelu_kernel"), prelu_fn, (F(0),), (lin(F(1, 4)), lin(1)), ("left",),
                      kwargs={"weight": 0.25}, mode_rules={"jvp": ("right",)}, learnable="weight",
                      doc="x where x > 0, else weight * x, with a learnable weight (one slope, or one per channel: "
                          "dim 1 of the input); the entry's pieces are those of one slope 1/4 (nn.PReLU's initial "
                          "value). PyTorch (torch 2.13, tools/autograd/derivatives.yaml and the CPU kernel): the "
                          "backward kernel _prelu_kernel_backward tests x > 0, so at x == 0 grad_input is "
                          "weight * grad (the left piece) and grad_weight is x * grad = 0; forward mode tests "
                          "x >= 0 and takes the right piece (derivative 1). Both lie in the Clarke interval",
                      backward=("_prelu_kernel_backward",), modules=("PReLU",),
                      functionals=_fn_names("F.prelu", "torch.prelu", "T.prelu"), from_args=prelu_for,
                      jax_note="JAX has no PReLU: jax.nn has no parametric ReLU (flax and haiku build it from "
                               "jnp.where or leaky_relu with a learned slope, not a JAX op)",
                      autograd_nodes=("PreluKernelBackward0",))
    yield Elementwise("relu6", ("relu6",), tF.relu6, (F(0), F(6)),
                      (_const(0), lin(1), _const(6)), ("left", "right"), modules=("ReLU6",),
                      functionals=_fn_names("F.relu6"), jax="jax.nn.relu6(x)",
                      doc="min(max(x, 0), 6); PyTorch runs it as hardtanh(x, 0, 6) (aten.hardtanh, "
                          "hardtanh_backward)",
                      autograd_nodes=("HardtanhBackward0",))
    yield Elementwise("hardtanh", ("hardtanh", "hardtanh_"), tF.hardtanh, (F(-1), F(1)),
                      (_const(-1), lin(1), _const(1)), ("left", "right"), backward=("hardtanh_backward",),
                      modules=("Hardtanh",), functionals=_fn_names("F.hardtanh", "F.hardtanh_"),
                      from_args=hardtanh_for, jax="jax.nn.hard_tanh(x)",
                      autograd_nodes=("HardtanhBackward0",))
    yield Elementwise("hardsigmoid", ("hardsigmoid",), tF.hardsigmoid, (F(-3), F(3)),
                      (_const(0), lin(F(1, 6), F(1, 2)), _const(1)), ("left", "right"),
                      backward=("hardsigmoid_backward",), modules=("Hardsigmoid",),
                      functionals=_fn_names("F.hardsigmoid"), jax="jax.nn.hard_sigmoid(x)",
                      autograd_nodes=("HardsigmoidBackward0",))
    yield Elementwise("hardswish", ("hardswish",), tF.hardswish, (F(-3), F(3)),
                      (_const(0), Piece(poly=(F(0), F(1, 2), F(1, 6))), lin(1)), ("left", "right"),
                      doc="x * relu6(x + 3) / 6: derivative at -3 and 3 the inner piece's (-1/2, 3/2) up to torch "
                          "2.7, the outer pieces' (0, 1) from torch 2.8 on",
                      rule_changes=(RuleChange("2.8.0", ("right", "left"), ("left", "right"),
                                               note="hardswish's derivative at -3 and 3: -1/2 -> 0 and 3/2 -> 1 "
                                                    "(measured by nsverify releases)"),),
                      backward=("hardswish_backward",), modules=("Hardswish",), functionals=_fn_names("F.hardswish"),
                      jax="jax.nn.hard_swish(x)",
                      autograd_nodes=("HardswishBackward0",))
    yield Elementwise("elu", ("elu",), tF.elu, (F(0),), (_mp_exp_piece(1, 1), lin(1)), ("left",),
                      kwargs={"alpha": 1.0},
                      doc="alpha = 1: both one-sided derivatives are 1 (C^1, a piece boundary, no kink)",
                      backward=("elu_backward",), modules=("ELU",), functionals=_fn_names("F.elu", "F.elu_"),
                      jax="jax.nn.elu(x, alpha=1.0)",
                      autograd_nodes=("EluBackward0", "EluBackward1"))
    yield Elementwise("selu", ("selu",), tF.selu, (F(0),),
                      (_mp_exp_piece(SELU_SCALE, SELU_ALPHA), Piece(mp=lambda x: SELU_SCALE * x,
                                                                     dmp=lambda x: SELU_SCALE)),
                      ("left",), doc="left derivative scale*alpha ~ 1.7581, right scale ~ 1.0507 (mpmath); PyTorch "
                                     "runs it as aten.elu with scale arguments",
                      modules=("SELU",), functionals=_fn_names("F.selu", "F.selu_", "torch.selu", "torch.selu_"),
                      jax="jax.nn.selu(x)",
                      autograd_nodes=("EluBackward0", "EluBackward1"))
    yield Elementwise("abs", ("abs", "abs_"), torch.abs, (F(0),), (lin(-1), lin(1)), ("mix=1/2",),
                      doc="PyTorch: abs'(0) = sgn(0) = 0, the even split of -1 and 1 (the minimal-norm element); "
                          "its backward is grad * sgn(x) (aten.sgn, no backward op of its own)",
                      functionals=_fn_names("torch.abs", "torch.abs_", "torch.absolute", "T.abs", "T.abs_"),
                      jax="jnp.abs(x)",
                      autograd_nodes=("AbsBackward0",))
    yield Elementwise("clamp", ("clamp", "clamp_", "clip"), torch.clamp, (F(0), F(1)),
                      (_const(0), lin(1), _const(1)), ("inside", "inside"), kwargs={"min": 0.0, "max": 1.0},
                      doc="clamp(x, 0, 1) with scalar bounds: derivative 1 at both bounds up to torch 2.13 (unlike "
                          "hardtanh), 0 from torch 2.14 on (like hardtanh)",
                      rule_changes=(RuleChange("2.14.0", ("inside", "inside"), ("left", "right"),
                                               note="clamp's derivative at its scalar bounds: 1 -> 0"),),
                      functionals=_fn_names("torch.clamp", "torch.clip", "T.clamp", "T.clip"), from_args=clamp_for,
                      shared_with="clamp_tensor", jax="jnp.clip(x, 0.0, 1.0)", autograd_nodes=("ClampBackward1",))


# ----------------------------------------------------------------------------------------------------
# Selection entries
# ----------------------------------------------------------------------------------------------------
def _pool_windows_2d(h, w, **geom) -> list[Window]:
    _, wins = pool2d_windows(h, w, **geom)
    return [Window(tuple(win)) for win in wins]


def selection_entries():
    import torch
    import torch.nn.functional as tF

    W, case = Window, selection_case
    # --- binary elementwise max/min: input rows (x, y), output j compares x_j and y_j
    pair = lambda n, d: [W((j, n + j), 0, d) for j in range(n)]  # noqa: E731
    yield Selection("maximum", ("maximum", "fmax"), lambda t: torch.maximum(t[0], t[1]), "even", lambda: (
        case("x == y", [1, 0, 2, 1, 3, 2], (2, 3), pair(3, "max"), "even", cotangent=[1, 2, 3]),),
        packing="pair", doc="torch.maximum(x, y): 1/2 to each side at x == y",
        jax="jnp.maximum(x[0], x[1])", autograd_nodes=("MaximumBackward0", "FmaxBackward0"))
    yield Selection("minimum", ("minimum", "fmin"), lambda t: torch.minimum(t[0], t[1]), "even", lambda: (
        case("x == y", [1, 0, 2, 1, -3, 2], (2, 3), pair(3, "min"), "even", cotangent=[1, 2, 3]),),
        packing="pair", jax="jnp.minimum(x[0], x[1])", autograd_nodes=("MinimumBackward0", "FminBackward0"))
    # --- full reductions: even split
    for name, fn, d, node in [("amax", torch.amax, "max", "AmaxBackward0"),
                              ("amin", torch.amin, "min", "AminBackward0"),
                              ("max", torch.max, "max", "MaxBackward1"), ("min", torch.min, "min", "MinBackward1")]:
        yield Selection(name, (name,), (lambda f: lambda t: f(t))(fn), "even", _reduction_cases(d),
                        doc=f"torch.{name}(x), full reduction: even split over the tie set (minimal norm)",
                        jax=f"jnp.{d}(x)", autograd_nodes=(node,))
    # --- reductions along a dim: first index
    rows = lambda r, c, d: [W(tuple(i * c + j for j in range(c)), 0, d) for i in range(r)]  # noqa: E731
    yield Selection("max_dim", ("max.dim",), lambda t: torch.max(t, 1).values, "first", lambda: (
        case("ties in rows", [1, 1, 0, 2, 0, 2], (2, 3), rows(2, 3, "max"), "first", cotangent=[1, 2]),
        case("all tied", [0, 0, 0, 0], (1, 4), rows(1, 4, "max"), "first")),
        kwargs={"dim": 1}, doc="torch.max(x, dim): the first maximal index",
        jax="jnp.max(x, axis=1)", autograd_nodes=("MaxBackward0",))
    yield Selection("min_dim", ("min.dim",), lambda t: torch.min(t, 1).values, "first", lambda: (
        case("ties in rows", [1, 1, 2, 0, 3, 0], (2, 3), rows(2, 3, "min"), "first", cotangent=[1, 2]),),
        kwargs={"dim": 1}, doc="torch.min(x, dim): the first minimal index",
        jax="jnp.min(x, axis=1)", autograd_nodes=("MinBackward0",))
    yield Selection("median", ("median",), lambda t: torch.median(t), "even", lambda: (
        case("3 tied at the median", [1, 1, 1, 2], (4,), [W((0, 1, 2, 3), 1, "min")], "even",
             violations=(_THIRD,)),
        case("all tied", [0, 0, 0, 0], (4,), [W((0, 1, 2, 3), 1, "min")], "even")),
        doc="torch.median(x) (lower median): even split over the entries equal to it (measured, torch 2.13); "
            "JAX: jnp.quantile(x, 0.5, method='lower'), the same function (jnp.median averages the two middle "
            "entries of an even count: another function)",
        jax="jnp.quantile(x, 0.5, method='lower')", autograd_nodes=("MedianBackward0",))
    yield Selection("median_dim", ("median.dim",), lambda t: torch.median(t, 1).values, "first", lambda: (
        case("3 tied", [1, 1, 1], (1, 3), [W((0, 1, 2), 1, "min")], "first"),
        case("3 tied among 5", [2, 1, 1, 1, 0], (1, 5), [W((0, 1, 2, 3, 4), 2, "min")], "first")),
        kwargs={"dim": 1}, doc="torch.median(x, dim): the gradient goes to the returned index, the one a "
                              "stable ascending sort puts at the median rank (measured on CPU, torch 2.13)",
        jax="jnp.quantile(x, 0.5, axis=1, method='lower')", autograd_nodes=("MedianBackward1",))
    # --- pooling: first index in row-major window order, overlapping windows accumulate
    yield Selection("max_pool1d", ("max_pool1d", "max_pool1d_with_indices"),
                    lambda t: tF.max_pool1d(t.reshape(1, 1, -1), 2, stride=1).flatten(), "first", lambda: (
                        case("overlapping k=2 s=1", [0, 0, 1, 1], (4,),
                             _pool_windows_2d(1, 4, kernel=(1, 2), stride=(1, 1)), "first",
                             cotangent=[1, 2, 3]),
                        case("Despres (t, 4t) at t=0", [0, 0], (2,),
                             _pool_windows_2d(1, 2, kernel=(1, 2), stride=(1, 1)), "first")),
                    kwargs={"kernel_size": 2, "stride": 1},
                    doc="F.max_pool1d; when its input requires grad PyTorch runs it as max_pool2d_with_indices, "
                        "so the oracle sees (and keys) it as max_pool2d",
                    jax="lax.reduce_window(x, -jnp.inf, lax.max, (2,), (1,), 'VALID')",
                    autograd_nodes=("MaxPool2DWithIndicesBackward0",))
    yield Selection("max_pool2d", ("max_pool2d", "max_pool2d_with_indices", "max_pool3d",
                                   "max_pool3d_with_indices"), _max_pool2d_case_fn, "first",
                    _max_pool2d_cases, doc="first index in row-major window order; overlapping windows add "
                    "up. Also the key of ATen's 3-d max pool (the same first-index rule). torch_fn(t, geom=...) "
                    "takes the case's geometry (case.extra); JAX: lax.reduce_window with lax.max",
                    jax=JAX_MAX_POOL2D,
                    autograd_nodes=("MaxPool2DWithIndicesBackward0", "MaxPool3DWithIndicesBackward0"))
    yield Selection("adaptive_max_pool2d", ("adaptive_max_pool2d", "adaptive_max_pool1d"),
                    lambda t: tF.adaptive_max_pool2d(t.reshape(1, 1, 3, 3), 2).flatten(), "first", lambda: (
                        case("3x3 -> 2x2 (overlapping) all tied", [0] * 9, (3, 3), _adaptive_windows_2d(3, 2),
                             "first", cotangent=[1, 2, 3, 1]),),
                    kwargs={"output_size": 2}, doc="F.adaptive_max_pool1d runs as adaptive_max_pool2d",
                    jax_note="JAX has no adaptive pooling: neither jax.lax, jax.numpy nor jax.nn has one (the "
                             "windows would be hand-built reduce_window calls, not a JAX op)",
                    autograd_nodes=("AdaptiveMaxPool2DBackward0",))
    # --- sort / topk
    yield Selection("sort", ("sort",), lambda t: torch.sort(t).values, "first", lambda: (
        case("3 tied", [1, 0, 1, 1], (4,), [W((0, 1, 2, 3), r, "min") for r in range(4)], "first",
             cotangent=[1, 2, 3, 4]),),
        doc="ascending sort: tied entries keep their index order (measured, torch 2.13 CPU)",
        jax="jnp.sort(x)", autograd_nodes=("SortBackward0",))
    yield Selection("topk", ("topk",), lambda t: torch.topk(t, 2).values, "returned", lambda: (
        case("3 tied, k=2", [1, 0, 1, 1], (4,), [W((0, 1, 2, 3), r, "max") for r in range(2)], "returned",
             cotangent=[1, 2]),),
        kwargs={"k": 2}, indices_fn=lambda t: torch.topk(t, 2).indices.flatten().tolist(),
        doc="topk at ties returns later indices in ascending order (measured, torch 2.13 CPU): a Bouligand "
            "piece, but neither the first- nor the last-index rule; the gradient goes to the returned indices",
        jax="lax.top_k(x, 2)[0]", autograd_nodes=("TopkBackward0",))
    s17 = [5, 1, 9, 3, 3, 12, 0, 7, 3, 14, 2, 11, 8, 13, 15, 16, 10]  # 17 entries, 3 tied (value 3)
    yield Selection("sort_unstable", ("sort",), lambda t: torch.sort(t, stable=False).values, "returned", lambda: (
        case("17 entries, 3 tied", s17, (17,), [W(tuple(range(17)), r, "min") for r in range(17)], "returned",
             cotangent=list(range(1, 18))),),
        indices_fn=lambda t: torch.sort(t, stable=False).indices.flatten().tolist(),
        doc="torch.sort(x) (unstable, the default): from 17 entries on, tied entries come out in another order "
            "than their index order (measured, torch 2.13 CPU: the three tied 3s at indices 8, 4, 3); the gradient "
            "goes to the returned indices",
        jax="lax.sort(x, is_stable=False)", autograd_nodes=("SortBackward1",))
    yield Selection("topk_smallest", ("topk",), lambda t: torch.topk(t, 2, largest=False).values, "returned",
                    lambda: (case("3 tied, k=2", [0, 1, 0, 0], (4,), [W((0, 1, 2, 3), r, "min") for r in range(2)],
                                  "returned", cotangent=[1, 2]),),
                    kwargs={"k": 2, "largest": False},
                    indices_fn=lambda t: torch.topk(t, 2, largest=False).indices.flatten().tolist(),
                    doc="topk(largest=False) at ties: the gradient goes to the returned indices (later ones, "
                        "measured on torch 2.13 CPU)",
                    jax="-lax.top_k(-x, 2)[0]", autograd_nodes=("TopkBackward0",))
    yield Selection("kthvalue", ("kthvalue",), lambda t: torch.kthvalue(t, 2).values, "returned", lambda: (
        case("3 tied at k=2", [1, 1, 1, 2], (4,), [W((0, 1, 2, 3), 1, "min")], "returned"),),
        kwargs={"k": 2}, indices_fn=lambda t: [int(torch.kthvalue(t, 2).indices)],
        doc="torch.kthvalue(x, k) at ties: the gradient goes to the returned index; JAX: jnp.partition(x, k - 1)"
            "[k - 1] (JAX has no kthvalue)",
        jax="jnp.partition(x, 1)[1]", autograd_nodes=("KthvalueBackward0",))
    # --- clamp with tensor bounds = median of (x, min, max) when min <= max
    med3 = lambda n: [W((j, n + j, 2 * n + j), 1, "max") for j in range(n)]  # noqa: E731
    yield Selection("clamp_tensor", (), lambda t: torch.clamp(t[0], t[1], t[2]), "inside", lambda: (
        case("x == min, x == max", [0, 1, 2, 0, 0, 0, 1, 1, 3], (3, 3), med3(3), "inside",
             cotangent=[1, 2, 3], rule_changes=(RuleChange(
                 "2.14.0", "inside", "even", note="an even split between x and the bound it equals"),)),
        case("min == max > x", [2, 3, 3], (3, 1), med3(1), "inside", mode_rules={"jvp": "last"},
             rule_changes=(RuleChange("2.14.0", "inside", "last", modes=("eager", "func", "compile"),
                                      note="reverse mode routes the gradient to the min argument, as jvp did"),),
             violations=(Violation(
                 "no", "torch.clamp(x, min=t, max=t) with x < t: the output equals the bounds, but PyTorch's "
                 "backward routes the gradient to neither bound and returns (0, 0, 0); every Bouligand gradient "
                 "of the real function puts weight 1 on the min or on the max argument", until="2.14.0"),))),
        packing="triple", rule_changes=(RuleChange("2.14.0", "inside", "even"),),
        doc="torch.clamp(x, min_tensor, max_tensor) (aten.clamp.Tensor). Up to torch 2.13: the whole gradient "
        "goes to x at x == min or x == max (like the scalar clamp); when min == max > x it is 0 for every input, "
        "outside the Clarke set conv{e_min, e_max}, while forward mode (jvp) returns e_min, inside it. From "
        "torch 2.14: an even split between x and the bound it equals, and e_min (a Clarke subgradient) in every "
        "mode when min == max > x (measured on CPU)",
        jax="jnp.clip(x[0], x[1], x[2])", autograd_nodes=("ClampBackward0",))


def _reduction_cases(d: str):
    """Tie cases of a full max (d="max") or min reduction."""
    big = 3 if d == "max" else -3
    full = [Window((0, 1, 2, 3), 0, d)]
    return lambda: (selection_case("2 ties", [1, big, big, 0], (2, 2), full, "even"),
                    selection_case("3 ties", [big, big, 0, big], (4,), full, "even", violations=(_THIRD,)),
                    selection_case("all tied", [0, 0, 0, 0], (4,), full, "even"))


def _adaptive_windows_2d(n: int, out: int) -> list[Window]:
    a = adaptive_windows(n, out)
    return [Window(tuple(r * n + c for r in a[i] for c in a[j])) for i in range(out) for j in range(out)]


#: max_pool2d in JAX: lax.reduce_window with lax.max from the Python scalar -inf (as flax's max_pool calls it), in
#: the geometry ``geom`` of the case (its ``extra``: kernel, and stride (default: the kernel), padding, dilation)
JAX_MAX_POOL2D = ("lax.reduce_window(x, -jnp.inf, lax.max, (geom['kernel'],) * 2, "
                  "(geom.get('stride', geom['kernel']),) * 2, ((geom.get('padding', 0),) * 2,) * 2, "
                  "window_dilation=(geom.get('dilation', 1),) * 2).flatten()")
MAX_POOL2D_GEOMS = (("k=2 non-overlapping", 4, 4, {"kernel": 2}),
                    ("k=3 s=1 overlapping", 4, 4, {"kernel": 3, "stride": 1}),
                    ("k=3 s=2 p=1", 4, 4, {"kernel": 3, "stride": 2, "padding": 1}),
                    ("k=2 s=1 dilation=2", 4, 4, {"kernel": 2, "stride": 1, "dilation": 2}))


def _max_pool2d_cases():
    out = []
    for label, h, w, geom in MAX_POOL2D_GEOMS:
        # a plateau filling the top-left window, one more 1 at the corner, zeros elsewhere: ties everywhere
        vals = [int((i < 2 and j < 2) or (i == h - 1 and j == w - 1)) for i in range(h) for j in range(w)]
        wins = _pool_windows_2d(h, w, **geom)
        cot = [(k % 3) + 1 for k in range(len(wins))]
        out.append(selection_case(label, vals, (h, w), wins, "first", cotangent=cot, geom=geom))
    return tuple(out)


def _max_pool2d_case_fn(t, geom=None):
    import torch.nn.functional as tF

    g = dict(geom or {"kernel": 2})
    k = g.pop("kernel")
    return tF.max_pool2d(t.reshape(1, 1, *t.shape[-2:]), k, **g).flatten()


def all_entries() -> Sequence:
    from nsverify.registry.entries_losses import loss_entries
    from nsverify.registry.entries_reductions import reduction_entries
    from nsverify.registry.entries_shrink import shrink_entries

    return [*elementwise_entries(), *shrink_entries(), *loss_entries(), *selection_entries(), *reduction_entries()]
