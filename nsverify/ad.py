"""AD-variant ops: autograd Functions that choose the derivative at kinks and ties.

The *forward* of every op here is computed once and equals PyTorch's own op bitwise; only the backward (and
forward-mode JVP) changes.  That makes programs that compute the same function with different AD rules
comparable on one forward pass (see docs/ad.md).  Every choice is a :class:`~nsverify.registry.rules.Rule` of
the one rule vocabulary (anything :func:`~nsverify.registry.rules.parse_rule` reads), keyed by the registry's
op names:

* :func:`relu_s` -- ReLU with ReLU'(0) = s (Bertoin et al.'s backprop_s; the backward *multiplies* the
  upstream gradient: ``g * (1[x>0] + s 1[x==0])``); ``s`` is a number or any kink rule (``"right"`` is 1).
* :func:`piecewise_linear` -- any piecewise-polynomial registry activation (relu6, hardtanh, hardsigmoid,
  leaky_relu, ...) with a kink rule: ``"left"``, ``"right"``, ``"inside"``, ``"mix=<lam>"`` meaning
  ``(1-lam)*left + lam*right``, a number (``"value=<d>"``) or ``"torch"`` (PyTorch's own rule); or with one
  rule per kink.
* :func:`max_pool2d` / :func:`max_pool1d` -- MaxPool Jacobians (Boustany Def. 10) as tie rules: ``"first"``
  (alias ``"native"``: the first index in row-major window order, PyTorch's), ``"even"`` (alias
  ``"minimal"``: 1/|A| on the tie set A) and ``"hybrid=<beta>"``: ``(1-beta) first + beta even``. Any
  kernel/stride/padding/dilation/ceil_mode works, overlapping windows included: their contributions add up.
* :func:`normpool2d` -- window Euclidean norm with its two programs P and Q at all-zero windows (programs, not
  kink rules: the Clarke set there is a ball).
* :func:`max_relu` -- max of a vector built from ReLUs (Boustany Fig. 3.9), one ReLU'(0) choice per ReLU.
* :func:`max_loop` -- the first-maximal-index loop program (Boustany Table 3.1's and Després Table 1's
  ``max1``), and :func:`max_reduce`, ``torch.max`` (their ``max2``). Named for the program, not the paper's
  label: Boustany's Fig. 3.9 uses ``max1`` / ``max2`` for two ReLU programs (:func:`max_relu`).

Rules that are left as ``None`` are read **at backward time** from a process-wide setting, so one
forward can be differentiated several times under different rules::

    y = net(x)                                   # modules built with ReLUVariant(), MaxPool2dVariant(2)
    with backward_rules(relu="value=0", max_pool2d="first"):
        g0 = torch.autograd.grad(y, params, retain_graph=True)
    with backward_rules(relu="value=1", max_pool2d="even"):
        g1 = torch.autograd.grad(y, params, retain_graph=True)

The setting is process-wide (not thread-local) on purpose: CUDA backward passes run on autograd worker
threads.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from fractions import Fraction
from functools import cached_property

import torch
import torch.nn.functional as F
from torch import nn

from nsverify import kernels, registry
from nsverify.errors import InexactError, NsverifyError, UnsupportedOpError
from nsverify.registry import Rule, RuleError, parse_rule

__all__ = [
    "backward_rules", "active_rules", "set_backward_rules", "relu_s", "piecewise_linear", "max_pool2d",
    "max_pool1d", "normpool2d", "max_relu", "max_loop", "max_reduce", "ReLUVariant", "PiecewiseLinearVariant",
    "MaxPool2dVariant", "NormPool2dVariant", "MAXPOOL_RULES", "POOL_OPS", "NORMPOOL_PROGRAMS", "variant_ops",
]

#: the tie rules the max-pool variants implement
MAXPOOL_RULES = ("first", "even", "hybrid=<beta>")
#: the registry's max pools that have variants here
POOL_OPS = ("max_pool2d", "max_pool1d")
#: NormPool's two programs at all-zero windows (programs, not rules: see :func:`normpool2d`)
NORMPOOL_PROGRAMS = ("P", "Q")

#: the rules set by backward_rules / set_backward_rules ({op: Rule or one Rule per kink}; unset ops read
#: PyTorch's rule from the registry), and the NormPool program
_ACTIVE: dict = {"normpool": "P"}


# ----------------------------------------------------------------------------------------------------
# The backward-rule setting
# ----------------------------------------------------------------------------------------------------
def variant_ops() -> list[str]:
    """The registry ops that have variants here: the piecewise-polynomial elementwise activations that are fixed
    functions (not prelu, whose slope is a learnable tensor) and the max pools (the keys :func:`backward_rules`
    accepts, besides ``normpool``)."""
    ew = [e.name for e in registry.select("elementwise", exact=True, fixed=True)]
    return ew + list(POOL_OPS)


def _pool_rule(rule) -> Rule:
    """A max-pool tie rule (first, even or hybrid=beta); anything else raises, naming the valid ones."""
    rule = parse_rule(rule, kind="tie")
    if rule.hybrid_beta is None:
        raise RuleError(f"the max-pool variants implement the tie rules {', '.join(MAXPOOL_RULES)} "
                        f"(aliases native, minimal); got {rule}.")
    return rule


def _check_rules(rules, by_op: dict) -> dict:
    """Validate ``backward_rules`` arguments: a :class:`~nsverify.registry.Rules` (or anything
    :func:`nsverify.registry.parse_rules` reads) and keywords, keyed by registry op names with variants here
    (``"torch"`` resolved), and the ``normpool`` program."""
    by_op = dict(by_op)
    out = {}
    if "normpool" in by_op:
        out["normpool"] = _check_program(by_op.pop("normpool"))
    parsed = registry.parse_rules(rules) | by_op
    ops = variant_ops()
    for op, rule in parsed.items():
        if op not in ops:
            raise UnsupportedOpError(f"nsverify.ad has no variant of {op}; backward_rules takes "
                                     f"{', '.join(ops)} and normpool.")
        out[op] = _pool_rule(rule) if op in POOL_OPS else rule
    return out


def _check_program(program) -> str:
    if program not in NORMPOOL_PROGRAMS:
        raise NsverifyError(f"NormPool program {program!r} is unknown: use one of {NORMPOOL_PROGRAMS}.")
    return program


def _active(op: str):
    """The rule in force for ``op``: the one set by :func:`backward_rules`, else PyTorch's (the registry)."""
    rule = _ACTIVE.get(op)
    return registry.torch_rule(op) if rule is None else rule


def active_rules() -> dict:
    """The backward rules currently in force: ``{op: Rule (or one Rule per kink)}`` for every op with a variant
    (PyTorch's rule where none was set), and the ``normpool`` program."""
    return {**{op: _active(op) for op in variant_ops()}, "normpool": _ACTIVE["normpool"]}


def set_backward_rules(rules=None, /, **by_op) -> None:
    """Set backward rules process-wide (prefer the :func:`backward_rules` context manager)."""
    _ACTIVE.update(_check_rules(rules, by_op))


@contextlib.contextmanager
def backward_rules(rules=None, /, **by_op):
    """Within the block, ops created with a ``None`` rule use these rules in their backward/JVP.

    ``rules``: a :class:`nsverify.registry.Rules` (op -> rule, e.g. a zone program) or anything
    :func:`nsverify.registry.parse_rules` reads; keywords add or replace rules (``backward_rules(relu=1)``).
    Keys are registry op names: ``relu`` (a kink rule: ``"value=1"``, ``1``, ``"right"``, ...), any other
    piecewise-polynomial activation (a kink rule, or one per kink, for :func:`piecewise_linear`),
    ``max_pool2d`` / ``max_pool1d`` (``"first"``, ``"even"``, ``"hybrid=<beta>"``; aliases ``"native"``,
    ``"minimal"``), and ``normpool`` ("P" | "Q"). ``"torch"`` is PyTorch's rule. Other keys raise an error
    listing the valid ones.
    """
    saved = dict(_ACTIVE)
    _ACTIVE.update(_check_rules(rules, by_op))
    try:
        yield active_rules()
    finally:
        _ACTIVE.clear()
        _ACTIVE.update(saved)


def _dynamic_guard(fn, dynamic: bool):
    """Rules read at backward time cannot be baked into a compiled graph: run such ops eagerly under
    torch.compile (a graph break), so that they keep reading the active rule."""
    if dynamic:
        return torch.compiler.disable(fn, recursive=False)
    return fn


# ----------------------------------------------------------------------------------------------------
# ReLU with ReLU'(0) = s
# ----------------------------------------------------------------------------------------------------
def _relu_s_derivative_apply(x, g, s):
    """g * (1[x>0] + s 1[x==0]); NaN inputs propagate g like PyTorch's threshold_backward.

    PyTorch's own fused kernel does the x != 0 part; the zero entries (rare in real data) are patched only
    when present (always, under vmap/tracing, where their presence cannot be inspected)."""
    out = torch.ops.aten.threshold_backward(g, x, 0)
    if s == 0:
        return out
    at_zero = x == 0
    if not _might_be_true(at_zero):
        return out
    return torch.where(at_zero, g * s if s != 1 else g, out)


class _ReLUS(torch.autograd.Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(x, s):
        return torch.relu(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, s = inputs
        ctx.save_for_backward(x)
        ctx.save_for_forward(x)
        ctx.s = s

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return _relu_s_derivative_apply(x, g, _relu_value(ctx.s)), None

    @staticmethod
    def jvp(ctx, t, _s):
        (x,) = ctx.saved_tensors
        return _relu_s_derivative_apply(x, t, _relu_value(ctx.s))


def _relu_value(s) -> float:
    """ReLU'(0) under ``s`` (a float, or None: the active ``relu`` rule)."""
    if s is not None:
        return s
    rule = _active("relu")
    return float(registry.get("relu").kink_derivative(0, rule[0] if isinstance(rule, tuple) else rule))


def relu_s(x: torch.Tensor, s=None) -> torch.Tensor:
    """ReLU whose derivative at 0 is ``s``: a number or any kink rule (``"left"`` is 0, ``"right"`` 1,
    ``"mix=1/4"`` 1/4); ``None``: the active ``relu`` rule, read at backward time."""
    if s is not None:
        try:
            s = float(registry.get("relu").kink_derivative(0, parse_rule(s, kind="kink")))
        except RuleError as e:
            raise RuleError(f"relu_s: {e}") from None
    return _dynamic_guard(_ReLUS.apply, s is None)(x, s)


# ----------------------------------------------------------------------------------------------------
# Piecewise-linear (piecewise-polynomial) activations with a per-kink choice
# ----------------------------------------------------------------------------------------------------
def _poly_derivative(x, poly):
    """Derivative of a polynomial piece at x, in x's dtype (Horner); constants for constant derivatives."""
    coeffs = [k * c for k, c in enumerate(poly) if k]
    if not coeffs:
        return 0.0
    if len(coeffs) == 1:
        return float(coeffs[0])
    out = torch.full_like(x, float(coeffs[-1]))
    for c in reversed(coeffs[:-1]):
        out = out * x + float(c)
    return out


def _pwl_apply(x, g, spec):
    """g * d(x): piece derivatives between kinks, the chosen values at kinks."""
    breakpoints, polys, kinks = spec
    zero = torch.zeros((), dtype=g.dtype, device=g.device)

    def times(d):
        if isinstance(d, float):
            return zero if d == 0 else (g if d == 1 else g * d)
        return g * d

    out = times(_poly_derivative(x, polys[-1]))
    for b, poly, kv in reversed(list(zip(breakpoints, polys[:-1], kinks))):
        out = torch.where(x < b, times(_poly_derivative(x, poly)), torch.where(x == b, times(kv), out))
    return out


class _PiecewiseLinear(torch.autograd.Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(x, name, spec_fn):
        entry = registry.get(name)
        return entry.torch_fn(x, **entry.kwargs)

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, _name, spec_fn = inputs
        ctx.save_for_backward(x)
        ctx.save_for_forward(x)
        ctx.spec_fn = spec_fn

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return _pwl_apply(x, g, ctx.spec_fn()), None, None

    @staticmethod
    def jvp(ctx, t, _n, _s):
        (x,) = ctx.saved_tensors
        return _pwl_apply(x, t, ctx.spec_fn())


def _pwl_entry(name: str):
    entry = registry.get(name)
    if getattr(entry, "kind", None) != "elementwise":
        raise UnsupportedOpError(f"{name!r} is not an elementwise activation; piecewise_linear needs one of "
                                 f"{', '.join(registry.names('elementwise'))}.")
    if any(p.poly is None for p in entry.pieces):
        raise UnsupportedOpError(
            f"{name!r} has non-polynomial pieces (exp); piecewise_linear supports piecewise-polynomial "
            "activations (relu, leaky_relu, relu6, hardtanh, hardsigmoid, hardswish, abs, clamp).")
    if not entry.fixed:
        raise UnsupportedOpError(
            f"{name!r} has a learnable {entry.learnable} tensor: piecewise_linear applies fixed activations. Use "
            "leaky_relu with the slope as negative_slope (a fixed slope), or torch.nn.PReLU itself.")
    return entry


def _pwl_spec(name: str, rule):
    """(breakpoints, piece polynomials, derivative at each kink) of activation ``name`` under ``rule`` (one kink
    rule, or one per kink; parsed with :func:`nsverify.registry.parse_kink_rules`)."""
    entry = _pwl_entry(name)
    rules = registry.parse_kink_rules(name, rule)
    rules = rules if isinstance(rules, tuple) else (rules,) * len(entry.breakpoints)
    kinks = tuple(float(entry.kink_derivative(i, r)) for i, r in enumerate(rules))
    return (tuple(float(b) for b in entry.breakpoints), tuple(p.poly for p in entry.pieces), kinks)


def piecewise_linear(x: torch.Tensor, name: str, rule=None) -> torch.Tensor:
    """Apply registry activation ``name`` (PyTorch's forward) with the chosen derivative at each kink.

    ``rule``: a kink rule ("left" | "right" | "inside" | "mix=<lam>" | a number | "torch") for every kink, or a
    list with one per kink; ``None`` reads the active rule for ``name`` at backward time.  Between kinks the
    derivative is the piece's derivative.
    """
    if rule is None:
        _pwl_entry(name)  # validate the name now, not at backward time
        spec_fn = lambda: _pwl_spec(name, _active(name))  # noqa: E731
    else:
        spec = _pwl_spec(name, rule)
        spec_fn = lambda: spec  # noqa: E731
    return _dynamic_guard(_PiecewiseLinear.apply, rule is None)(x, name, spec_fn)


# ----------------------------------------------------------------------------------------------------
# MaxPool with native / minimal / hybrid Jacobians
# ----------------------------------------------------------------------------------------------------
def _pair(v, name):
    if isinstance(v, int):
        return (v, v)
    v = tuple(int(a) for a in v)
    if len(v) != 2:
        raise NsverifyError(f"max_pool2d: {name} must be an int or a pair, got {v!r}.")
    return v


class _TieWindows:
    """The tie sets of every pooling window: ``count`` (|A_j| per output, 0 for NaN windows), ``spread(r)``
    (the input-grid sum over windows of ``r_j`` on A_j -- overlapping windows add up) and ``gather(t)``
    (per window, the sum of ``t`` over A_j).

    Non-overlapping windows inside the input (stride = kernel, no padding/dilation) use a 6-d view of x
    (the fast path).  Everything else loops over the kh*kw kernel offsets: offset
    (a, b) of every window is one strided slice of the NaN-padded input, so no im2col copy is made;
    padding never ties (NaN compares unequal) and a window whose max is NaN has count 0.
    """

    def __init__(self, x, out, k, s, p, d):
        self.x, self.out, self.k, self.s, self.p, self.d = x, out, k, s, p, d
        n, c, ho, wo = out.shape
        self.fast = (s == k and p == (0, 0) and d == (1, 1) and ho * k[0] <= x.shape[-2]
                     and wo * k[1] <= x.shape[-1])
        if self.fast:
            self.view_shape = (n, c, ho, k[0], wo, k[1])
            self.win_shape = (n, c, ho, 1, wo, 1)
            xv = x[..., : ho * k[0], : wo * k[1]].reshape(self.view_shape)
            mask = self.mask = xv == out.reshape(self.win_shape)
            if k[0] * k[1] < 256:  # tie counts as uint8 sums of the k*k strided mask slices (cheapest)
                mu = mask.view(torch.uint8)
                count = mu[:, :, :, 0, :, 0].clone()
                for a in range(k[0]):
                    for b in range(k[1]):
                        if a or b:
                            count += mu[:, :, :, a, :, b]
                self.count = count.reshape(n, c, ho, wo)
            else:
                flat = mask.to(x.dtype).reshape(n, c, ho * k[0], wo * k[1])
                self.count = F.avg_pool2d(flat, k, divisor_override=1)
        else:
            hp = (ho - 1) * s[0] + d[0] * (k[0] - 1) + 1
            wp = (wo - 1) * s[1] + d[1] * (k[1] - 1) + 1
            h, w = x.shape[-2:]
            self.padded = (hp, wp, h, w)
            pad = (p[1], max(0, wp - w - p[1]), p[0], max(0, hp - h - p[0]))
            xp = F.pad(x, pad, value=float("nan"))[..., :hp, :wp]
            self.masks = [self._slice(xp, a, b) == out for a in range(k[0]) for b in range(k[1])]
            count = self.masks[0].to(x.dtype)
            for m in self.masks[1:]:
                count = count + m
            self.count = count

    def _slice(self, t, a, b):
        (ho, wo), s, d = self.out.shape[-2:], self.s, self.d
        r0, c0 = a * d[0], b * d[1]
        return t[..., r0: r0 + (ho - 1) * s[0] + 1: s[0], c0: c0 + (wo - 1) * s[1] + 1: s[1]]

    def spread(self, r):
        """sum_j r_j 1[A_j] on the input grid (r: one value per output, with r = 0 on NaN windows)."""
        x, k = self.x, self.k
        if self.fast:
            # where, not mask * r: an infinite or NaN r must not reach the window's other entries (0 * inf)
            masked = torch.where(self.mask, r.reshape(self.win_shape), torch.zeros((), dtype=r.dtype, device=r.device))
            grid = masked.reshape(x.shape[:-2] + (self.view_shape[2] * k[0], self.view_shape[4] * k[1]))
            if grid.shape[-2:] == x.shape[-2:]:
                return grid
            return F.pad(grid, (0, x.shape[-1] - grid.shape[-1], 0, x.shape[-2] - grid.shape[-2]))
        hp, wp, h, w = self.padded
        p = self.p
        size = x.shape[:-2] + (max(hp, h + p[0]), max(wp, w + p[1]))
        grid = torch.zeros(size, dtype=r.dtype, device=r.device)
        zero = torch.zeros((), dtype=r.dtype, device=r.device)
        i = 0
        for a in range(k[0]):
            for b in range(k[1]):
                view = self._slice(grid, a, b)
                view.add_(torch.where(self.masks[i], r, zero))
                i += 1
        return grid[..., p[0]: p[0] + h, p[1]: p[1] + w]

    def gather(self, t):
        """Per window, the sum of t over its tie set."""
        zero = torch.zeros((), dtype=t.dtype, device=t.device)
        if self.fast:
            n, c, ho, kh, wo, kw = self.view_shape
            tv = t[..., : ho * kh, : wo * kw].reshape(self.view_shape)
            return torch.where(self.mask, tv, zero).sum((3, 5))
        hp, wp, h, w = self.padded
        p = self.p
        pad = (p[1], max(0, wp - w - p[1]), p[0], max(0, hp - h - p[0]))
        tp = F.pad(t, pad)[..., :hp, :wp]
        total = torch.zeros_like(self.out, dtype=t.dtype)
        i = 0
        for a in range(self.k[0]):
            for b in range(self.k[1]):
                total = total + torch.where(self.masks[i], self._slice(tp, a, b), zero)
                i += 1
        return total


def _native_bwd(g, x, idx, k, s, p, d, ceil_mode):
    return torch.ops.aten.max_pool2d_with_indices_backward(g, x, list(k), list(s), list(p), list(d),
                                                           ceil_mode, idx)


def _might_be_true(t: torch.Tensor) -> bool:
    """bool(t.any()) for plain tensors; True when the value cannot be inspected (vmap, tracing)."""
    try:
        return bool(t.any())
    except Exception:  # functorch-wrapped or fake tensors: take the general path
        return True


def _add_at_first_index(grad, vals, idx):
    """grad[first index of window j] += vals_j (in place; grad is fresh)."""
    flat = grad.reshape(grad.shape[:-2] + (-1,))
    flat.scatter_add_(-1, idx.reshape(idx.shape[:-2] + (-1,)), vals.reshape(vals.shape[:-2] + (-1,)))
    return flat.reshape(grad.shape)


def _maxpool_vjp(g, x, out, idx, geom, jacobian, beta):
    k, s, p, d, ceil_mode = geom
    if jacobian == "native":
        return _native_bwd(g, x, idx, k, s, p, d, ceil_mode)
    fused = kernels.maxpool2d_tie_backward(g, x, out, idx, geom, jacobian, beta)
    if fused is not None:  # the C++ (CPU) or Triton (CUDA) kernel; equal to the reference below
        return fused
    return _maxpool_vjp_reference(g, x, out, idx, geom, jacobian, beta)


def _maxpool_vjp_reference(g, x, out, idx, geom, jacobian, beta):
    """The pure-PyTorch minimal / hybrid VJP: the reference the fused kernels (nsverify.kernels) are tested
    against, and their fallback."""
    k, s, p, d, _ceil_mode = geom
    win = _TieWindows(x, out, k, s, p, d)
    count = win.count
    nan_win = count == 0  # windows whose max is NaN: fall back to the native index
    zero = torch.zeros((), dtype=g.dtype, device=g.device)
    if jacobian == "minimal":
        grad = win.spread(torch.where(nan_win, zero, g / count))
        if _might_be_true(nan_win):
            grad = _add_at_first_index(grad, torch.where(nan_win, g, zero), idx)
        return grad
    # hybrid: (1-beta) native + beta minimal; exactly g on tie-free windows
    one = count == 1
    tied = torch.where(one, g, (g * beta) / count) if beta != 1 else g / count
    grad = win.spread(torch.where(nan_win, zero, tied))
    native_part = torch.where(one, zero, torch.where(nan_win, g, g * (1 - beta)))
    return _add_at_first_index(grad, native_part, idx)


def _maxpool_jvp(t, x, out, idx, geom, jacobian, beta):
    """Forward-mode counterpart: the same Jacobian applied to a tangent (transpose of the VJP)."""
    k, s, p, d, ceil_mode = geom
    native = t.flatten(-2).gather(-1, idx.flatten(-2)).reshape(out.shape)
    if jacobian == "native":
        return native
    win = _TieWindows(x, out, k, s, p, d)
    summed, cnt = win.gather(t), win.count
    if jacobian == "minimal":
        return torch.where(cnt == 0, native, summed / cnt)
    # same arithmetic as the VJP: (t beta) / |A| on the tie set, plus (1 - beta) t on the first index
    return torch.where(cnt <= 1, native, (summed * beta) / cnt + native * (1 - beta))


def _pool_program(rule) -> tuple[str, float | None]:
    """(jacobian, beta) of a max-pool tie rule: first -> the native kernel, even -> minimal, hybrid=beta."""
    if rule.name == "first":
        return "native", None
    if rule.name == "even":
        return "minimal", None
    return "hybrid", float(rule.hybrid_beta)


class _MaxPool2d(torch.autograd.Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(x, geom, rule, key):
        k, s, p, d, ceil_mode = geom
        return F.max_pool2d(x, k, s, p, d, ceil_mode=ceil_mode, return_indices=True)

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, geom, rule, key = inputs
        out, idx = output
        ctx.mark_non_differentiable(idx)
        ctx.save_for_backward(x, out, idx)
        ctx.save_for_forward(x, out, idx)
        ctx.geom, ctx.rule, ctx.key = geom, rule, key

    @staticmethod
    def backward(ctx, g, _gidx):
        x, out, idx = ctx.saved_tensors
        jac, beta = _pool_program(_active(ctx.key) if ctx.rule is None else ctx.rule)
        return _maxpool_vjp(g.contiguous(), x, out, idx, ctx.geom, jac, beta), None, None, None

    @staticmethod
    def jvp(ctx, t, _g, _r, _k):
        x, out, idx = ctx.saved_tensors
        jac, beta = _pool_program(_active(ctx.key) if ctx.rule is None else ctx.rule)
        return _maxpool_jvp(t, x, out, idx, ctx.geom, jac, beta), None


def max_pool2d(x: torch.Tensor, kernel_size, stride=None, padding=0, dilation=1, ceil_mode: bool = False,
               rule=None, *, _key: str = "max_pool2d") -> torch.Tensor:
    """``F.max_pool2d`` (same forward, bitwise) with the chosen Jacobian in the backward.

    ``rule``: a max-pool tie rule -- "first" (alias "native"), "even" (alias "minimal") or "hybrid=<beta>" /
    ``("hybrid", beta)``; ``None``: the active ``max_pool2d`` rule at backward time.  Input (N, C, H, W) or
    (C, H, W).
    """
    rule = None if rule is None else _pool_rule(rule)
    if x.dim() not in (3, 4):
        raise NsverifyError(f"max_pool2d expects a (N, C, H, W) or (C, H, W) tensor, "
                            f"got shape {tuple(x.shape)}.")
    k = _pair(kernel_size, "kernel_size")
    s = k if stride is None or stride == [] else _pair(stride, "stride")
    geom = (k, s, _pair(padding, "padding"), _pair(dilation, "dilation"), bool(ceil_mode))
    unbatched = x.dim() == 3
    xb = x.unsqueeze(0) if unbatched else x
    out, _ = _dynamic_guard(_MaxPool2d.apply, rule is None)(xb, geom, rule, _key)
    return out.squeeze(0) if unbatched else out


def max_pool1d(x: torch.Tensor, kernel_size: int, stride=None, padding=0, dilation=1, ceil_mode=False,
               rule=None) -> torch.Tensor:
    """``F.max_pool1d`` with the chosen Jacobian (input (N, C, L) or (C, L)); ``rule`` as in :func:`max_pool2d`,
    ``None``: the active ``max_pool1d`` rule at backward time."""
    if x.dim() not in (2, 3):
        raise NsverifyError(f"max_pool1d expects a (N, C, L) or (C, L) tensor, got shape {tuple(x.shape)}.")
    one = lambda v: (1, v if isinstance(v, int) else int(v[0]))  # noqa: E731
    out = max_pool2d(x.unsqueeze(-2), one(kernel_size), None if stride is None else one(stride),
                     (0, padding if isinstance(padding, int) else padding[0]), one(dilation), ceil_mode,
                     rule, _key="max_pool1d")
    return out.squeeze(-2)


# ----------------------------------------------------------------------------------------------------
# NormPool
# ----------------------------------------------------------------------------------------------------
class _NormPool2d(torch.autograd.Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(x, k, program):
        n, c, h, w = x.shape
        ho, wo = h // k[0], w // k[1]
        xv = x[..., : ho * k[0], : wo * k[1]].reshape(n, c, ho, k[0], wo, k[1])
        return (xv * xv).sum((3, 5)).sqrt()

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, k, program = inputs
        ctx.save_for_backward(x, output)
        ctx.save_for_forward(x, output)
        ctx.k, ctx.program = k, program

    @staticmethod
    def jvp(ctx, t, _k, _p):
        x, out = ctx.saved_tensors
        k = ctx.k
        n, c, ho, wo = out.shape
        crop = lambda a: a[..., : ho * k[0], : wo * k[1]].reshape(n, c, ho, k[0], wo, k[1])  # noqa: E731
        xv, tv = crop(x), crop(t)
        zero_win = out == 0
        smooth = (xv * tv).sum((3, 5)) / torch.where(zero_win, 1, out)
        at_zero = tv[:, :, :, 0, :, 0] if _normpool_program(ctx.program) == "Q" else torch.zeros_like(out)
        return torch.where(zero_win, at_zero, smooth)

    @staticmethod
    def backward(ctx, g):
        x, out = ctx.saved_tensors
        k = ctx.k
        n, c, ho, wo = out.shape
        prog = _normpool_program(ctx.program)
        xv = x[..., : ho * k[0], : wo * k[1]].reshape(n, c, ho, k[0], wo, k[1])
        ob = out.reshape(n, c, ho, 1, wo, 1)
        gb = g.reshape(n, c, ho, 1, wo, 1)
        zero_win = ob == 0
        grad = torch.where(zero_win, 0, gb * xv / torch.where(zero_win, 1, ob))
        if prog == "Q":  # e_first on all-zero windows: a unit vector, in the Clarke set (the unit ball)
            first = torch.zeros_like(xv)
            first[:, :, :, 0, :, 0] = 1
            grad = torch.where(zero_win, gb * first, grad)
        grad = grad.reshape(n, c, ho * k[0], wo * k[1])
        return F.pad(grad, (0, x.shape[-1] - wo * k[1], 0, x.shape[-2] - ho * k[0])), None, None


def _normpool_program(program: str | None) -> str:
    return _ACTIVE["normpool"] if program is None else program


def normpool2d(x: torch.Tensor, kernel_size, program: str | None = None) -> torch.Tensor:
    """Non-overlapping window Euclidean norm (NormPool, Boustany Sec. 3.5.2), computed once.

    The function is smooth except on all-zero windows, where its Clarke set is the unit ball.  The two
    programs differ only there: ``"P"`` returns 0 (the minimal-norm element), ``"Q"`` returns the unit vector
    on the window's first entry (the NormPool analogue of the native maxpool choice).  The thesis does not
    spell the two programs out; this pairing is our reading (docs/ad.md). P and Q are programs, not kink or tie
    rules (the Clarke set at an all-zero window is the unit ball, not an interval or a simplex), so they stay
    outside the rule vocabulary: ``backward_rules(normpool="Q")``.
    """
    if program is not None:
        _check_program(program)
    if x.dim() != 4:
        raise NsverifyError(f"normpool2d expects an (N, C, H, W) tensor, got shape {tuple(x.shape)}.")
    return _dynamic_guard(_NormPool2d.apply, program is None)(x, _pair(kernel_size, "kernel_size"), program)


# ----------------------------------------------------------------------------------------------------
# max programs (Boustany Fig. 3.2 / 3.9, Després Table 1)
# ----------------------------------------------------------------------------------------------------
def max_loop(x: torch.Tensor) -> torch.Tensor:
    """The loop program ``res = x[0]; for i: if x[i] > res: res = x[i]`` (AD: the first maximal index; Boustany
    Table 3.1's and Després Table 1's ``max1``)."""
    if x.dim() != 1 or x.numel() == 0:
        raise NsverifyError(f"max_loop expects a non-empty 1-d tensor, got shape {tuple(x.shape)}.")
    res = x[0]
    for i in range(1, x.shape[0]):
        if x[i] > res:
            res = x[i]
    return res


def max_reduce(x: torch.Tensor) -> torch.Tensor:
    """``torch.max(x)``: PyTorch's full reduction (AD: even split over the tie set; Boustany Table 3.1's and
    Després Table 1's ``max2``)."""
    return torch.max(x)


def max_relu(x: torch.Tensor, s=None) -> torch.Tensor:
    """max of a 1-d vector as a pairwise tree of ReLU programs (Boustany Ch.3, the code of Fig. 3.9)::

        max0(a, b) = (a + b) / 2 + relu_{s1}((a - b) / 2) + relu_{s2}((b - a) / 2)

    ``s``: one ReLU'(0) for every ReLU (a number or a kink rule, as in :func:`relu_s`), or a sequence with one
    per ReLU in evaluation order (2 per pair node: s1, s2), ``None`` entries reading the active rule.  Fig.
    3.9's ``max1`` is ``s=0``, its ``max2`` (``relu2 = where(x >= 0, x, 0)`` first) is ``s=[1, 0, 1, 0, 1, 0]``
    for 4 entries.
    """
    if x.dim() != 1 or x.numel() == 0:
        raise NsverifyError(f"max_relu expects a non-empty 1-d tensor, got shape {tuple(x.shape)}.")
    n_relus = 2 * (x.numel() - 1)
    ss = [s] * n_relus if s is None or registry.single_rule(s) else list(s)
    if len(ss) != n_relus:
        raise NsverifyError(f"max_relu of {x.numel()} entries uses {n_relus} ReLUs; got {len(ss)} choices.")
    it = iter(ss)

    def pair(a, b):
        return (a + b) / 2 + relu_s((a - b) / 2, next(it)) + relu_s((b - a) / 2, next(it))

    level = list(x.unbind(0))
    while len(level) > 1:
        nxt = [pair(level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]
        if len(level) % 2:
            nxt.append(level[-1])
        level = nxt
    return level[0]


# ----------------------------------------------------------------------------------------------------
# nn.Module wrappers
# ----------------------------------------------------------------------------------------------------
class ReLUVariant(nn.Module):
    """``nn.ReLU`` with ReLU'(0) given by ``rule`` (a number or kink rule, as in :func:`relu_s`; ``None``: the
    active ``relu`` rule at backward time)."""

    def __init__(self, rule=None):
        super().__init__()
        if rule is not None:
            relu_s(torch.zeros(0), rule)  # validate now
        self.rule = rule

    def forward(self, x):
        return relu_s(x, self.rule)

    def extra_repr(self):
        return f"rule={self.rule}"


class PiecewiseLinearVariant(nn.Module):
    """A registry activation (e.g. "relu6") with a kink rule, or one per kink (``None``: the active rule)."""

    def __init__(self, name: str, rule=None):
        super().__init__()
        _pwl_spec(name, "torch" if rule is None else rule)
        self.name, self.rule = name, rule

    def forward(self, x):
        return piecewise_linear(x, self.name, self.rule)

    def extra_repr(self):
        return f"{self.name}, rule={self.rule!r}"


class MaxPool2dVariant(nn.Module):
    """``nn.MaxPool2d`` with a chosen tie rule (first, even, hybrid=<beta>; ``None``: the active ``max_pool2d``
    rule at backward time)."""

    def __init__(self, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, rule=None):
        super().__init__()
        self.rule = None if rule is None else _pool_rule(rule)
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding
        self.dilation, self.ceil_mode = dilation, ceil_mode

    def forward(self, x):
        return max_pool2d(x, self.kernel_size, self.stride, self.padding, self.dilation, self.ceil_mode,
                          self.rule)

    def extra_repr(self):
        return (f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
                f"dilation={self.dilation}, rule={self.rule}")


class NormPool2dVariant(nn.Module):
    """NormPool (window L2 norm) with program "P" or "Q" at all-zero windows (``None``: the active rule)."""

    def __init__(self, kernel_size, program: str | None = None):
        super().__init__()
        self.kernel_size, self.program = kernel_size, program

    def forward(self, x):
        return normpool2d(x, self.kernel_size, self.program)


#: the names max_loop / max_reduce had before (they clashed with Boustany Fig. 3.9's max1 / max2): kept one release
_RENAMED = {"max1": "max_loop", "max2": "max_reduce"}


def __getattr__(name):
    if name in _RENAMED:
        import warnings

        warnings.warn(f"nsverify.ad.{name} is deprecated: use nsverify.ad.{_RENAMED[name]}.", DeprecationWarning,
                      stacklevel=2)
        return globals()[_RENAMED[name]]
    raise AttributeError(f"module 'nsverify.ad' has no attribute {name!r}")


# --------------------------------------------------------------------------------------------------------------
# A layer's activation: a registry op with PyTorch's rules, or an AD variant of one. Network specifications
# (nsverify.strategies), Park et al.'s layer engine (nsverify.oracle.park), the monitor and the premise checkers
# all name a layer's activation this way.
# --------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Activation:
    """A pointwise activation: ``identity``, a registry elementwise op with PyTorch's rules at its kinks, or an AD
    variant of one: the op with its rules in brackets, in the one rule vocabulary
    (:func:`nsverify.registry.parse_op_rules`).

    ``key`` forms: ``"identity"``, ``"relu"`` (registry name: PyTorch's rules), ``"relu[value=1/2]"`` (one rule
    for every kink: ReLU'(0) = 1/2, Bertoin et al.'s backprop_s), ``"hardtanh[left,right]"`` (one rule per kink:
    ``left``, ``right``, ``inside``, ``mix=<lam>`` = (1-lam) left + lam right, ``value=<d>`` or a number).
    """

    key: str

    def __post_init__(self):
        if self.key != "identity":
            self._parsed  # noqa: B018  (validate the key now: unknown ops and rules raise here)

    @cached_property
    def _parsed(self):
        return registry.parse_op_rules(self.key)

    @property
    def base(self) -> str:
        """The registry op key (or ``identity``)."""
        return "identity" if self.key == "identity" else self._parsed[0]

    @property
    def variant(self) -> bool:
        """Does the key give its own rules (an AD variant), rather than PyTorch's?"""
        return self.key != "identity" and self._parsed[1] is not None

    @property
    def rules(self) -> tuple:
        """The rule AD uses at each kink (:class:`~nsverify.registry.rules.Rule`; PyTorch's unless a variant)."""
        p = self.primitive()
        if p is None:
            return ()
        return self._parsed[1] if self.variant else p.torch_rules

    def primitive(self):
        return None if self.base == "identity" else registry.get(self.base)

    @property
    def breakpoints(self) -> tuple[Fraction, ...]:
        p = self.primitive()
        return () if p is None else tuple(p.breakpoints)

    def exact(self, y: Fraction) -> Fraction:
        p = self.primitive()
        if p is None:
            return y
        piece = p.pieces[p.piece_index(y, +1)]
        if not piece.exact:
            raise InexactError(f"activation {self.key!r} has a non-polynomial piece at {y}: no exact value")
        return Fraction(p.value(y))

    def ad_derivatives(self) -> tuple[Fraction, ...]:
        """The derivative this activation's AD uses at each breakpoint (exact)."""
        p = self.primitive()
        if p is None:
            return ()
        return tuple(Fraction(p.kink_derivative(i, r)) for i, r in enumerate(self.rules))

    def flat_low(self) -> Fraction | None:
        """A point on a constant lowest piece ("dead" region), or None when the activation has none."""
        p = self.primitive()
        if p is None or not p.breakpoints:
            return None
        if p.pieces[0].constant:
            return p.breakpoints[0] - 1
        return None

    def torch_fn(self):
        if self.key == "identity":
            return lambda x: x
        if self.variant:
            return _variant_fn(self)
        p = self.primitive()
        fn, kw = p.torch_fn, dict(p.kwargs)
        return (lambda x: fn(x, **kw)) if kw else fn


def _variant_fn(act: Activation):
    """AD-variant activations come from :mod:`nsverify.ad`: ReLU through relu_s, the others through
    piecewise_linear."""
    if act.base == "relu":
        s = float(act.ad_derivatives()[0])
        return lambda x: relu_s(x, s)
    name, rules = act.base, act.rules
    return lambda x: piecewise_linear(x, name, rules)
