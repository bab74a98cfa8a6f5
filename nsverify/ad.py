"""AD-variant ops: autograd Functions that choose the derivative at kinks and ties.

The *forward* of every op here is computed once and equals PyTorch's own op bitwise; only the backward (and
forward-mode JVP) changes.  That makes programs that compute the same function with different AD rules
comparable on one forward pass (see docs/ad.md):

* :func:`relu_s` -- ReLU with ReLU'(0) = s (Bertoin et al.'s backprop_s; the backward *multiplies* the
  upstream gradient: ``g * (1[x>0] + s 1[x==0])``).
* :func:`piecewise_linear` -- any registry activation (relu6, hardtanh, hardsigmoid, leaky_relu, ...) with a
  per-kink choice: ``"left"``, ``"right"``, ``"torch"`` (PyTorch's own side), ``("mix", lam)`` meaning
  ``(1-lam)*left + lam*right``, or any number.
* :func:`max_pool2d` / :func:`max_pool1d` -- MaxPool Jacobians (Boustany Def. 10): ``"native"`` (first
  index in row-major window order, PyTorch's), ``"minimal"`` (1/|A| on the tie set A) and ``"hybrid"``
  with beta: ``(1-beta) native + beta minimal``, for any kernel/stride/padding/dilation/ceil_mode,
  overlapping windows included (contributions of overlapping windows add up).
* :func:`normpool2d` -- window Euclidean norm with its two programs at all-zero windows.
* :func:`max_relu` -- max of a vector built from ReLUs (Boustany Fig. 3.9), one ReLU'(0) choice per ReLU.
* :func:`max1` -- the first-maximal-index loop program (Boustany Table 3.1, Després Table 1).

Backward rules that are left as ``None`` are read **at backward time** from a process-wide setting, so one
forward can be differentiated several times under different rules::

    y = net(x)                                   # modules built with ReLUVariant(), MaxPool2dVariant(2)
    with backward_rules(relu_s=0.0, maxpool="native"):
        g0 = torch.autograd.grad(y, params, retain_graph=True)
    with backward_rules(relu_s=1.0, maxpool="minimal"):
        g1 = torch.autograd.grad(y, params, retain_graph=True)

The setting is process-wide (not thread-local) on purpose: CUDA backward passes run on autograd worker
threads.
"""
from __future__ import annotations

import contextlib
from fractions import Fraction
from typing import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from nsverify.errors import NsverifyError, UnsupportedOpError

__all__ = [
    "backward_rules", "active_rules", "set_backward_rules", "relu_s", "piecewise_linear", "max_pool2d",
    "max_pool1d", "normpool2d", "max_relu", "max1", "max2", "ReLUVariant", "PiecewiseLinearVariant",
    "MaxPool2dVariant", "NormPool2dVariant", "MAXPOOL_JACOBIANS", "NORMPOOL_PROGRAMS",
]

MAXPOOL_JACOBIANS = ("native", "minimal", "hybrid")
NORMPOOL_PROGRAMS = ("P", "Q")

_DEFAULT_RULES = {"relu_s": 0.0, "maxpool": "native", "beta": 1.0, "kink": "torch", "normpool": "P"}
_ACTIVE: dict = dict(_DEFAULT_RULES)


# ----------------------------------------------------------------------------------------------------
# The backward-rule setting
# ----------------------------------------------------------------------------------------------------
def _check_rules(rules: dict) -> dict:
    unknown = set(rules) - set(_DEFAULT_RULES)
    if unknown:
        raise NsverifyError(f"unknown backward rule(s) {sorted(unknown)}; known: {sorted(_DEFAULT_RULES)}.")
    if "maxpool" in rules and rules["maxpool"] not in MAXPOOL_JACOBIANS:
        raise NsverifyError(f"maxpool Jacobian {rules['maxpool']!r} is unknown: "
                            f"use one of {MAXPOOL_JACOBIANS}.")
    if "normpool" in rules and rules["normpool"] not in NORMPOOL_PROGRAMS:
        raise NsverifyError(f"NormPool program {rules['normpool']!r} is unknown: "
                            f"use one of {NORMPOOL_PROGRAMS}.")
    for key in ("relu_s", "beta"):
        if key in rules and not isinstance(rules[key], (int, float)):
            raise NsverifyError(f"backward rule {key} must be a real number, got {rules[key]!r}.")
    if "kink" in rules:
        _check_kink_choice(rules["kink"])
    return rules


def active_rules() -> dict:
    """A copy of the backward rules currently in force."""
    return dict(_ACTIVE)


def set_backward_rules(**rules) -> None:
    """Set backward rules process-wide (prefer the :func:`backward_rules` context manager)."""
    _ACTIVE.update(_check_rules(rules))


@contextlib.contextmanager
def backward_rules(**rules):
    """Within the block, ops created with a ``None`` rule use these rules in their backward/JVP.

    Keys: ``relu_s`` (float), ``maxpool`` ("native" | "minimal" | "hybrid"), ``beta`` (float, for hybrid),
    ``kink`` (a per-kink choice for :func:`piecewise_linear`), ``normpool`` ("P" | "Q").
    """
    saved = dict(_ACTIVE)
    _ACTIVE.update(_check_rules(rules))
    try:
        yield active_rules()
    finally:
        _ACTIVE.clear()
        _ACTIVE.update(saved)


def _resolve(value, key):
    return _ACTIVE[key] if value is None else value


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
        return _relu_s_derivative_apply(x, g, float(_resolve(ctx.s, "relu_s"))), None

    @staticmethod
    def jvp(ctx, t, _s):
        (x,) = ctx.saved_tensors
        return _relu_s_derivative_apply(x, t, float(_resolve(ctx.s, "relu_s")))


def relu_s(x: torch.Tensor, s: float | None = None) -> torch.Tensor:
    """ReLU whose derivative at 0 is ``s`` (``None``: the active ``relu_s`` rule, read at backward time)."""
    if s is not None and not isinstance(s, (int, float)):
        raise NsverifyError(f"relu_s: s must be a real number or None, got {s!r}.")
    return _dynamic_guard(_ReLUS.apply, s is None)(x, None if s is None else float(s))


# ----------------------------------------------------------------------------------------------------
# Piecewise-linear (piecewise-polynomial) activations with a per-kink choice
# ----------------------------------------------------------------------------------------------------
def _check_kink_choice(choice):
    items = choice if isinstance(choice, list) else [choice]
    for c in items:
        ok = (c in ("left", "right", "torch") or isinstance(c, (int, float, Fraction))
              or (isinstance(c, tuple) and len(c) == 2 and c[0] == "mix" and isinstance(c[1], (int, float))))
        if not ok:
            raise NsverifyError(
                f"kink choice {c!r} is not understood: use 'left', 'right', 'torch', ('mix', lam) or a "
                "number (or a list with one of these per kink).")
    return choice


def _kink_value(entry, i: int, choice) -> Fraction:
    """The derivative at breakpoint i of a registry Elementwise entry under ``choice`` (exact if possible)."""
    b = entry.breakpoints[i]
    left, right = entry.one_sided(b)
    if isinstance(choice, list):
        if len(choice) != len(entry.breakpoints):
            raise NsverifyError(f"{entry.name} has {len(entry.breakpoints)} kinks but {len(choice)} choices "
                                "were given: pass one choice per kink, or a single choice for all.")
        choice = choice[i]
    if choice == "left":
        return left
    if choice == "right":
        return right
    if choice == "torch":
        return entry.torch_derivative(b)
    if isinstance(choice, tuple):
        lam = Fraction(choice[1])
        return (1 - lam) * left + lam * right
    return Fraction(choice)


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
        from nsverify import registry

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


def _pwl_spec(name: str, choice):
    from nsverify import registry

    entry = registry.get(name)
    if getattr(entry, "kind", None) != "elementwise":
        raise UnsupportedOpError(f"{name!r} is not an elementwise activation; piecewise_linear needs one of "
                                 f"{', '.join(registry.names('elementwise'))}.")
    if any(p.poly is None for p in entry.pieces):
        raise UnsupportedOpError(
            f"{name!r} has non-polynomial pieces (exp); piecewise_linear supports piecewise-polynomial "
            "activations (relu, leaky_relu, relu6, hardtanh, hardsigmoid, hardswish, abs, clamp).")
    choice = _check_kink_choice(choice)
    kinks = tuple(float(_kink_value(entry, i, choice)) for i in range(len(entry.breakpoints)))
    return (tuple(float(b) for b in entry.breakpoints), tuple(p.poly for p in entry.pieces), kinks)


def piecewise_linear(x: torch.Tensor, name: str, choice=None) -> torch.Tensor:
    """Apply registry activation ``name`` (PyTorch's forward) with the chosen derivative at each kink.

    ``choice``: "left" | "right" | "torch" | ("mix", lam) | number, or a list with one per kink; ``None``
    reads the active ``kink`` rule at backward time.  Between kinks the derivative is the piece's derivative.
    """
    if choice is None:
        spec_fn = lambda: _pwl_spec(name, _ACTIVE["kink"])  # noqa: E731
        _pwl_spec(name, "torch")  # validate the name now, not at backward time
    else:
        spec = _pwl_spec(name, choice)
        spec_fn = lambda: spec  # noqa: E731
    return _dynamic_guard(_PiecewiseLinear.apply, choice is None)(x, name, spec_fn)


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
    and fused in-place kernels (the fast path).  Everything else loops over the kh*kw kernel offsets: offset
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
            # a bool compare then one conversion is faster than comparing into a float buffer (measured);
            # the float mask is later scaled in place into the gradient, except for functorch-wrapped
            # tensors (vmap, grad), which cannot be written in place
            self.plain = not _is_wrapped(x)
            mask = xv == out.reshape(self.win_shape)
            self.maskf = mask.to(x.dtype)
            if k[0] * k[1] < 256:  # tie counts as uint8 sums of the k*k strided mask slices (cheapest)
                mu = mask.view(torch.uint8)
                count = mu[:, :, :, 0, :, 0].clone()
                for a in range(k[0]):
                    for b in range(k[1]):
                        if a or b:
                            count += mu[:, :, :, a, :, b]
                self.count = count.reshape(n, c, ho, wo)
            else:
                flat = self.maskf.reshape(n, c, ho * k[0], wo * k[1])
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
            rb = r.reshape(self.win_shape)
            masked = self.maskf.mul_(rb) if self.plain else self.maskf * rb
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
            mask = self.maskf != 0
            return torch.where(mask, tv, zero).sum((3, 5))
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


def _is_wrapped(t: torch.Tensor) -> bool:
    """Is t a functorch-wrapped tensor (inside vmap/grad/jvp transforms)?"""
    try:
        return bool(torch._C._functorch.is_functorch_wrapped_tensor(t))
    except (AttributeError, RuntimeError):  # pragma: no cover - older torch
        return False


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


class _MaxPool2d(torch.autograd.Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(x, geom, jacobian, beta):
        k, s, p, d, ceil_mode = geom
        return F.max_pool2d(x, k, s, p, d, ceil_mode=ceil_mode, return_indices=True)

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, geom, jacobian, beta = inputs
        out, idx = output
        ctx.mark_non_differentiable(idx)
        ctx.save_for_backward(x, out, idx)
        ctx.save_for_forward(x, out, idx)
        ctx.geom, ctx.jacobian, ctx.beta = geom, jacobian, beta

    @staticmethod
    def backward(ctx, g, _gidx):
        x, out, idx = ctx.saved_tensors
        jac = _resolve(ctx.jacobian, "maxpool")
        beta = float(_resolve(ctx.beta, "beta"))
        return _maxpool_vjp(g.contiguous(), x, out, idx, ctx.geom, jac, beta), None, None, None

    @staticmethod
    def jvp(ctx, t, _g, _j, _b):
        x, out, idx = ctx.saved_tensors
        jac = _resolve(ctx.jacobian, "maxpool")
        beta = float(_resolve(ctx.beta, "beta"))
        return _maxpool_jvp(t, x, out, idx, ctx.geom, jac, beta), None


def max_pool2d(x: torch.Tensor, kernel_size, stride=None, padding=0, dilation=1, ceil_mode: bool = False,
               jacobian: str | None = None, beta: float | None = None) -> torch.Tensor:
    """``F.max_pool2d`` (same forward, bitwise) with the chosen Jacobian in the backward.

    ``jacobian``: "native" | "minimal" | "hybrid" (``None``: the active ``maxpool`` rule at backward time);
    ``beta``: hybrid weight (``None``: the active ``beta`` rule).  Input (N, C, H, W) or (C, H, W).
    """
    if jacobian is not None and jacobian not in MAXPOOL_JACOBIANS:
        raise NsverifyError(f"maxpool Jacobian {jacobian!r} is unknown: use one of {MAXPOOL_JACOBIANS}.")
    if beta is not None and not isinstance(beta, (int, float)):
        raise NsverifyError(f"beta must be a real number or None, got {beta!r}.")
    if x.dim() not in (3, 4):
        raise NsverifyError(f"max_pool2d expects a (N, C, H, W) or (C, H, W) tensor, "
                            f"got shape {tuple(x.shape)}.")
    k = _pair(kernel_size, "kernel_size")
    s = k if stride is None or stride == [] else _pair(stride, "stride")
    geom = (k, s, _pair(padding, "padding"), _pair(dilation, "dilation"), bool(ceil_mode))
    unbatched = x.dim() == 3
    xb = x.unsqueeze(0) if unbatched else x
    fn = _dynamic_guard(_MaxPool2d.apply, jacobian is None or (jacobian == "hybrid" and beta is None))
    out, _ = fn(xb, geom, jacobian, None if beta is None else float(beta))
    return out.squeeze(0) if unbatched else out


def max_pool1d(x: torch.Tensor, kernel_size: int, stride=None, padding=0, dilation=1, ceil_mode=False,
               jacobian: str | None = None, beta: float | None = None) -> torch.Tensor:
    """``F.max_pool1d`` with the chosen Jacobian (input (N, C, L) or (C, L))."""
    if x.dim() not in (2, 3):
        raise NsverifyError(f"max_pool1d expects a (N, C, L) or (C, L) tensor, got shape {tuple(x.shape)}.")
    one = lambda v: (1, v if isinstance(v, int) else int(v[0]))  # noqa: E731
    out = max_pool2d(x.unsqueeze(-2), one(kernel_size), None if stride is None else one(stride),
                     (0, padding if isinstance(padding, int) else padding[0]), one(dilation), ceil_mode,
                     jacobian, beta)
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
        at_zero = tv[:, :, :, 0, :, 0] if _resolve(ctx.program, "normpool") == "Q" else torch.zeros_like(out)
        return torch.where(zero_win, at_zero, smooth)

    @staticmethod
    def backward(ctx, g):
        x, out = ctx.saved_tensors
        k = ctx.k
        n, c, ho, wo = out.shape
        prog = _resolve(ctx.program, "normpool")
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


def normpool2d(x: torch.Tensor, kernel_size, program: str | None = None) -> torch.Tensor:
    """Non-overlapping window Euclidean norm (NormPool, Boustany L1502-1510), computed once.

    The function is smooth except on all-zero windows, where its Clarke set is the unit ball.  The two
    programs differ only there: ``"P"`` returns 0 (the minimal-norm element), ``"Q"`` returns the unit vector
    on the window's first entry (the NormPool analogue of the native maxpool choice).  The thesis does not
    spell the two programs out; this pairing is our reading (docs/ad.md).
    """
    if program is not None and program not in NORMPOOL_PROGRAMS:
        raise NsverifyError(f"NormPool program {program!r} is unknown: use one of {NORMPOOL_PROGRAMS}.")
    if x.dim() != 4:
        raise NsverifyError(f"normpool2d expects an (N, C, H, W) tensor, got shape {tuple(x.shape)}.")
    return _dynamic_guard(_NormPool2d.apply, program is None)(x, _pair(kernel_size, "kernel_size"), program)


# ----------------------------------------------------------------------------------------------------
# max programs (Boustany Fig. 3.2 / 3.9, Després Table 1)
# ----------------------------------------------------------------------------------------------------
def max1(x: torch.Tensor) -> torch.Tensor:
    """The loop program ``res = x[0]; for i: if x[i] > res: res = x[i]`` (AD: the first maximal index)."""
    if x.dim() != 1 or x.numel() == 0:
        raise NsverifyError(f"max1 expects a non-empty 1-d tensor, got shape {tuple(x.shape)}.")
    res = x[0]
    for i in range(1, x.shape[0]):
        if x[i] > res:
            res = x[i]
    return res


def max2(x: torch.Tensor) -> torch.Tensor:
    """``torch.max(x)``: PyTorch's full reduction (AD: even split over the tie set)."""
    return torch.max(x)


def max_relu(x: torch.Tensor, s: float | Sequence[float | None] | None = None) -> torch.Tensor:
    """max of a 1-d vector as a pairwise tree of ReLU programs (Boustany Fig. 3.9, L1473-1491)::

        max0(a, b) = (a + b) / 2 + relu_{s1}((a - b) / 2) + relu_{s2}((b - a) / 2)

    ``s``: one ReLU'(0) for every ReLU (a number), or a sequence with one per ReLU in evaluation order
    (2 per pair node: s1, s2), ``None`` entries reading the active rule.  Fig. 3.9's ``max1`` is ``s=0``,
    its ``max2`` (``relu2 = where(x >= 0, x, 0)`` first) is ``s=[1, 0, 1, 0, 1, 0]`` for 4 entries.
    """
    if x.dim() != 1 or x.numel() == 0:
        raise NsverifyError(f"max_relu expects a non-empty 1-d tensor, got shape {tuple(x.shape)}.")
    n_relus = 2 * (x.numel() - 1)
    ss = [s] * n_relus if s is None or isinstance(s, (int, float)) else list(s)
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
    """``nn.ReLU`` with ReLU'(0) = s (``None``: the active rule at backward time)."""

    def __init__(self, s: float | None = None):
        super().__init__()
        self.s = s

    def forward(self, x):
        return relu_s(x, self.s)

    def extra_repr(self):
        return f"s={self.s}"


class PiecewiseLinearVariant(nn.Module):
    """A registry activation (e.g. "relu6") with a per-kink derivative choice (``None``: the active rule)."""

    def __init__(self, name: str, choice=None):
        super().__init__()
        _pwl_spec(name, "torch" if choice is None else choice)
        self.name, self.choice = name, choice

    def forward(self, x):
        return piecewise_linear(x, self.name, self.choice)

    def extra_repr(self):
        return f"{self.name}, choice={self.choice!r}"


class MaxPool2dVariant(nn.Module):
    """``nn.MaxPool2d`` with a chosen Jacobian (``None`` jacobian/beta: the active rules at backward time)."""

    def __init__(self, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
                 jacobian: str | None = None, beta: float | None = None):
        super().__init__()
        if jacobian is not None and jacobian not in MAXPOOL_JACOBIANS:
            raise NsverifyError(f"maxpool Jacobian {jacobian!r} is unknown: use one of {MAXPOOL_JACOBIANS}.")
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding
        self.dilation, self.ceil_mode, self.jacobian, self.beta = dilation, ceil_mode, jacobian, beta

    def forward(self, x):
        return max_pool2d(x, self.kernel_size, self.stride, self.padding, self.dilation, self.ceil_mode,
                          self.jacobian, self.beta)

    def extra_repr(self):
        return (f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
                f"dilation={self.dilation}, jacobian={self.jacobian}, beta={self.beta}")


class NormPool2dVariant(nn.Module):
    """NormPool (window L2 norm) with program "P" or "Q" at all-zero windows (``None``: the active rule)."""

    def __init__(self, kernel_size, program: str | None = None):
        super().__init__()
        self.kernel_size, self.program = kernel_size, program

    def forward(self, x):
        return normpool2d(x, self.kernel_size, self.program)
