"""Reverse-mode exact AD: PyTorch's own autograd run on :class:`ExactTensor`.

``torch.autograd.grad`` on an ExactTensor input records the graph as usual and calls PyTorch's *backward ATen
ops* (threshold_backward, max_pool2d_with_indices_backward, convolution_backward, nll_loss_backward, ...),
which reach the exact dispatcher like any other op.  So :func:`exact_backprop` evaluates PyTorch's literal
derivative formulas -- its conventions at kinks included -- in exact arithmetic, at a cost proportional to
the program (not to the number of coordinates of w).  ``conventions`` override an op's rule at its kinks
(``{"relu": 1}``, ``{"max_pool2d": "minimal"}``, ``{"hardtanh": "right"}`` ...), exactly as in forward mode.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import torch

from nsverify.oracle import context
from nsverify.oracle.context import Ctx
from nsverify.oracle.interp import _scalar_output, point_to_fractions
from nsverify.oracle.numbers import KinkZero, sign, val
from nsverify.oracle.ops_kinks import _ad_side, _dpoly
from nsverify.oracle.ops_linear import _filled, _matmul, arr, objmap
from nsverify.oracle.ops_select import _ad_mix, pool_windows
from nsverify.oracle.ops_smooth import exp
from nsverify.oracle.tensor import ExactTensor, op, scalar
from nsverify.registry import clamp_for, elementwise_for, op_key

F = Fraction


def exact_backprop(fn, w: torch.Tensor, conventions: dict | None = None, *, return_value: bool = False):
    """PyTorch's AD of ``fn`` at ``w``, its backward formulas evaluated exactly (reverse mode)."""
    values = point_to_fractions(w)
    a = np.empty(len(values), dtype=object)
    a[:] = values
    ctx = Ctx(n=0, mode="ad", conventions=dict(conventions or {}), dtype=w.dtype)
    with ctx:
        x = ExactTensor(a.reshape(tuple(w.shape)), dtype=w.dtype, requires_grad=True)
        out = fn(x)
        y = _scalar_output(out)
        if not (isinstance(out, torch.Tensor) and out.requires_grad):
            g = tuple(F(0) for _ in values)
        else:
            (gt,) = torch.autograd.grad(out.reshape(()), x, allow_unused=True)
            g = tuple(F(0) for _ in values) if gt is None else tuple(gt.arr.reshape(-1).tolist())
    return (g, val(y)) if return_value else g


def exact_module_backprop(
    model, loss_fn, inputs, targets, wrt="parameters", conventions=None, *, return_value=False
):
    from nsverify.oracle.interp import module_function

    fn, w = module_function(model, loss_fn, inputs, targets, wrt)
    return exact_backprop(fn, w, conventions, return_value=return_value)


# ------------------------------------------------------------------------------------------ elementwise rules
def _derivative_map(x, rule):
    return objmap(rule, arr(x))


def _override(name, ew, x):
    """Derivative at x of elementwise ``ew`` with the user's convention at its kinks."""
    v = val(x)
    for i, b in enumerate(ew.breakpoints):
        s = sign(v - b)
        if s == 0:
            side = _ad_side(ew, i)
            return side if isinstance(side, Fraction) else _dpoly(ew.pieces[side].poly, b)
        if s is not None and s < 0:
            return _dpoly(ew.pieces[i].poly, v)
    return _dpoly(ew.pieces[len(ew.breakpoints)].poly, v)


def _mask_grad(grad, x, name, ew, torch_rule):
    ew_rule = (lambda v: _override(name, ew, v)) if context.convention(ew.name) is not None else torch_rule
    return arr(grad) * _derivative_map(x, ew_rule)


@op("threshold_backward")
def _threshold_backward(grad, x, threshold):
    """relu's backward reads relu's output (kink entries are tagged KinkZero); threshold's reads its input."""
    th = scalar(threshold)
    torch_rule = lambda v: F(1) if sign(val(v) - th) > 0 else F(0)  # noqa: E731
    if th == 0 and context.convention("relu") is not None:
        ew = elementwise_for("relu", ())
        at_kink = _override("relu", ew, F(0))
        return arr(grad) * objmap(lambda v: at_kink if isinstance(v, KinkZero) else torch_rule(v), arr(x))
    ew = elementwise_for("threshold", (threshold, 0))
    return _mask_grad(grad, x, "threshold", ew, torch_rule)


@op("hardtanh_backward")
def _hardtanh_backward(grad, x, min_val, max_val):
    lo, hi = scalar(min_val), scalar(max_val)
    ew = elementwise_for("hardtanh", (min_val, max_val))
    return _mask_grad(
        grad, x, ew.name, ew, lambda v: F(1) if sign(val(v) - lo) > 0 and sign(val(v) - hi) < 0 else F(0)
    )


@op("leaky_relu_backward")
def _leaky_backward(grad, x, negative_slope, self_is_result=False):
    a = scalar(negative_slope)
    ew = elementwise_for("leaky_relu", (negative_slope,))
    return _mask_grad(grad, x, "leaky_relu", ew, lambda v: F(1) if sign(val(v)) > 0 else a)


@op("hardsigmoid_backward")
def _hardsigmoid_backward(grad, x):
    ew = elementwise_for("hardsigmoid", ())
    return _mask_grad(
        grad,
        x,
        "hardsigmoid",
        ew,
        lambda v: F(1, 6) if sign(val(v) + 3) > 0 and sign(val(v) - 3) < 0 else F(0),
    )


@op("hardswish_backward")
def _hardswish_backward(grad, x):
    ew = elementwise_for("hardswish", ())

    def rule(v):
        if sign(val(v) + 3) <= 0:
            return F(0)
        if sign(val(v) - 3) < 0:
            return v / 3 + F(1, 2)
        return F(1)

    return _mask_grad(grad, x, "hardswish", ew, rule)


@op("clamp_backward")
def _clamp_backward(grad, x, lo=None, hi=None):  # pragma: no cover - PyTorch decomposes clamp's backward
    ew = clamp_for(lo, hi)
    return arr(grad) * objmap(lambda v: _override("clamp", ew, v), arr(x))


@op("sigmoid_backward")
def _sigmoid_backward(grad, out):
    o = arr(out)
    return arr(grad) * o * (1 - o)


@op("tanh_backward")
def _tanh_backward(grad, out):
    o = arr(out)
    return arr(grad) * (1 - o * o)


@op("softplus_backward")
def _softplus_backward(grad, x, beta, threshold):
    b, th = scalar(beta), scalar(threshold)

    def d(v):
        if sign(val(v) * b - th) > 0:
            return F(1)
        z = exp(v * b)
        return z / (z + 1)

    return arr(grad) * objmap(d, arr(x))


@op("sgn")
def _sgn(a):
    return objmap(lambda v: F(sign(val(v))), arr(a))


@op("_log_softmax_backward_data")
def _log_softmax_backward(grad, out, dim, input_dtype=None):
    g, o = arr(grad), arr(out)
    s = np.sum(g, axis=dim, keepdims=True)
    return g - objmap(exp, o) * s


@op("_softmax_backward_data")
def _softmax_backward(grad, out, dim, input_dtype=None):
    g, o = arr(grad), arr(out)
    return o * (g - np.sum(g * o, axis=dim, keepdims=True))


@op("nll_loss_backward")
def _nll_backward(grad, x, target, weight, reduction, ignore_index, total_weight):
    x = arr(x)
    batched = x.ndim == 2
    xs = x if batched else x[None]
    t = np.asarray(target).reshape(-1)
    g = arr(grad)
    out = _filled(xs.shape, F(0))
    tw = arr(total_weight)[()] if reduction == 1 else F(1)
    for n in range(xs.shape[0]):
        if int(t[n]) == ignore_index:
            continue
        wt = F(1) if weight is None else arr(weight)[int(t[n])]
        gn = g.reshape(-1)[n] if reduction == 0 else g.reshape(-1)[0]
        out[n, int(t[n])] = -wt * gn / tw
    return out if batched else out[0]


@op("mse_loss_backward")
def _mse_backward(grad, x, target, reduction):
    d = arr(x) - arr(target)
    scale = F(2, d.size) if reduction == 1 else F(2)
    return d * arr(grad) * scale


# ------------------------------------------------------------------------------------------------ max pool
@op("max_pool2d_with_indices_backward", "max_pool3d_with_indices_backward")
def _max_pool_backward(grad, x, kernel_size, stride, padding, dilation, ceil_mode, indices):
    name = context.current().op_name.replace("_with_indices_backward", "")
    x, g = arr(x), arr(grad)
    out = _filled(x.shape, F(0))
    rule = context.convention(op_key(name))
    for pos, win in pool_windows(name, x.shape, kernel_size, stride, padding, dilation, ceil_mode):
        gi = g[pos]
        if rule is None or rule.name == "first":
            # PyTorch's formula: the gradient goes to the recorded index (first maximum in window order)
            target = int(np.asarray(indices)[pos])
            q = next(q for q, flat in win if flat == target)
            out[q] = out[q] + gi
            continue
        cands = [x[q] for q, _ in win]
        best = max(range(len(cands)), key=lambda i: float(val(cands[i])))
        tied = [i for i in range(len(cands)) if sign(val(cands[i]) - val(cands[best])) == 0]
        from nsverify.oracle.numbers import Aff

        unit = [Aff(F(0), {i: F(1)}) for i in range(len(cands))]
        mixed, _ = _ad_mix(unit, tied, rule)
        for i, c in mixed.g.items():
            q = win[i][0]
            out[q] = out[q] + c * gi
    return out


@op("adaptive_max_pool2d_backward")
def _adaptive_max_pool_backward(grad, x, indices):
    """PyTorch's formula: each output's gradient goes to its recorded index (conventions: native only)."""
    x, g = arr(x), arr(grad)
    conv = context.convention("adaptive_max_pool2d")
    if conv is not None and conv.name != "first":
        from nsverify.errors import UnsupportedOpError

        raise UnsupportedOpError(
            "adaptive_max_pool2d: only the native (first index) convention is supported in reverse mode; use "
            "exact_gradient (forward mode) for other conventions")
    out = _filled(x.shape, F(0))
    nsp = 2
    lead = x.shape[:-nsp]
    flat_out = out.reshape(lead + (-1,))
    ind = np.asarray(indices)
    for pos in np.ndindex(*g.shape):
        L = pos[:-nsp]
        flat_out[L + (int(ind[pos]),)] = flat_out[L + (int(ind[pos]),)] + g[pos]
    return flat_out.reshape(x.shape)


# ---------------------------------------------------------------------------------------------- convolution
@op("convolution_backward")
def _conv_backward(
    grad, x, weight, bias_sizes, stride, padding, dilation, transposed, output_padding, groups, output_mask
):
    x, weight, g = arr(x), arr(weight), arr(grad)
    nsp = weight.ndim - 2
    batched = x.ndim == nsp + 2
    if not batched:
        x, g = x[None], g[None]
    xp = np.pad(x, [(0, 0), (0, 0)] + [(p, p) for p in padding], constant_values=F(0)) if any(padding) else x
    N = xp.shape[0]
    O, Cg = weight.shape[:2]
    k = weight.shape[2:]
    out_sp = g.shape[2:]
    og = O // groups
    gx = _filled(xp.shape, F(0))
    gw = _filled(weight.shape, F(0))
    for gr in range(groups):
        ws = weight[gr * og : (gr + 1) * og].reshape(og, -1)
        gws = np.empty(ws.shape, dtype=object)
        gws[:] = F(0)
        for pos in np.ndindex(*out_sp):
            sl = tuple(
                slice(pos[i] * stride[i], pos[i] * stride[i] + dilation[i] * (k[i] - 1) + 1, dilation[i])
                for i in range(nsp)
            )
            patch = xp[(slice(None), slice(gr * Cg, (gr + 1) * Cg)) + sl].reshape(N, -1)  # (N, Cg*K)
            gpos = g[(slice(None), slice(gr * og, (gr + 1) * og)) + pos]  # (N, og)
            gws = gws + _matmul(gpos.T, patch)
            gpatch = _matmul(gpos, ws).reshape((N, Cg) + tuple(k))
            idx = (slice(None), slice(gr * Cg, (gr + 1) * Cg)) + sl
            gx[idx] = gx[idx] + gpatch
        gw[gr * og : (gr + 1) * og] = gws.reshape((og, Cg) + tuple(k))
    if any(padding):
        gx = gx[(slice(None), slice(None)) + tuple(slice(p, p + s) for p, s in zip(padding, x.shape[2:]))]
    gb = np.asarray(np.sum(g, axis=tuple(d for d in range(g.ndim) if d != 1)), dtype=object)
    gx = (gx if batched else gx[0]) if output_mask[0] else None
    return gx, gw if output_mask[1] else None, gb if output_mask[2] else None


# ------------------------------------------------------------------------------------- indexing backward ops
@op("select_backward")
def _select_backward(grad, input_sizes, dim, index):
    out = _filled(tuple(input_sizes), F(0))
    sl = [slice(None)] * len(input_sizes)
    sl[dim] = index
    g = arr(grad)
    out[tuple(sl)] = g if g.ndim else g[()]
    return out


@op("slice_backward")
def _slice_backward(grad, input_sizes, dim, start, end, step):
    out = _filled(tuple(input_sizes), F(0))
    sl = [slice(None)] * len(input_sizes)
    sl[dim] = slice(start, end, step)
    out[tuple(sl)] = arr(grad)
    return out


@op("isnan", "isinf", "isneginf", "isposinf")
def _isnan(a):  # exact values are finite by construction
    return np.zeros(np.shape(a), dtype=bool)


@op("isfinite")
def _isfinite(a):
    return np.ones(np.shape(a), dtype=bool)


@op("new_zeros", "new_empty")
def _new_zeros(a, size, **kw):
    return _filled(tuple(size), F(0))


@op("new_ones")
def _new_ones(a, size, **kw):
    return _filled(tuple(size), F(1))


@op("new_full")
def _new_full(a, size, fill_value, **kw):
    return _filled(tuple(size), scalar(fill_value))


@op("masked_fill")
def _masked_fill(a, mask, value):
    v = scalar(value) if not isinstance(value, np.ndarray) else value[()]
    return np.asarray(np.where(np.asarray(mask).astype(bool), v, arr(a)), dtype=object)


@op("scatter")
def _scatter(a, dim, index, src=None, value=None, reduce=None):
    out = arr(a).copy()
    index = np.asarray(index)
    s = arr(src) if src is not None else None
    for pos in np.ndindex(*index.shape):
        tgt = list(pos)
        tgt[dim] = int(index[pos])
        out[tuple(tgt)] = s[pos] if s is not None else scalar(value)
    return out


@op("scatter_add")
def _scatter_add(a, dim, index, src):
    out = arr(a).copy()
    index = np.asarray(index)
    s = arr(src)
    for pos in np.ndindex(*index.shape):
        tgt = list(pos)
        tgt[dim] = int(index[pos])
        out[tuple(tgt)] = out[tuple(tgt)] + s[pos]
    return out


@op("gather")
def _gather(a, dim, index, sparse_grad=False):
    a = arr(a)
    index = np.asarray(index)
    out = np.empty(index.shape, dtype=object)
    for pos in np.ndindex(*index.shape):
        src = list(pos)
        src[dim] = int(index[pos])
        out[pos] = a[tuple(src)]
    return out


@op("index_put")
def _index_put(a, indices, values, accumulate=False):
    out = arr(a).copy()
    idx = tuple(slice(None) if i is None else np.asarray(i) for i in indices)
    if accumulate:
        np.add.at(out, idx, arr(values))
    else:
        out[idx] = arr(values)
    return out


@op("_unsafe_index_put")
def _unsafe_index_put(a, indices, values, accumulate=False):
    return _index_put(a, indices, values, accumulate)
