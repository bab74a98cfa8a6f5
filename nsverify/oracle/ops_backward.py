"""PyTorch's backward ATen ops, evaluated exactly: the reverse mode of the exact interpreter.

``torch.autograd.grad`` on an ExactTensor input records the graph as usual and calls PyTorch's *backward ATen
ops* (threshold_backward, convolution_backward, nll_loss_backward, ...), which reach the exact dispatcher like
any other op.  So :meth:`nsverify.oracle.interp.Evaluation.reverse` evaluates PyTorch's literal derivative
formulas -- its rules at kinks included -- in exact arithmetic, at a cost proportional to the program
(not to the number of coordinates of w).  ``rules=`` override an op's rule at its kinks (``{"relu": 1}``,
``{"max_pool2d": "minimal"}``, ``{"hardtanh": "right"}`` ...), exactly as in forward mode.  The max-pool
backward ops live with the max-pool forward ops and their tie rules in :mod:`nsverify.oracle.ops_select`.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from nsverify import registry
from nsverify.oracle import context
from nsverify.oracle.numbers import Aff, KinkZero, sign, val
from nsverify.oracle.ops_convt import conv_transpose_backward
from nsverify.oracle.ops_kinks import ad_derivative, check_steps, elementwise_backward
from nsverify.oracle.ops_linear import arr, filled, matmul, objmap
from nsverify.oracle.ops_smooth import exp, gelu_derivative, silu
from nsverify.oracle.tensor import op, scalar
from nsverify.registry import threshold_for

F = Fraction


# ------------------------------------------------------------------------------------------ elementwise rules
# The backward ops of the registry's elementwise entries (leaky_relu_backward, hardtanh_backward,
# hardsigmoid_backward, hardswish_backward, ...) are read from the registry on dispatch
# (nsverify.oracle.ops_kinks.RegistryOps). threshold_backward is shared by relu and the argument-only threshold.
@op("threshold_backward")
def _threshold_backward(grad, x, threshold):
    """relu's backward reads relu's output (kink entries are tagged KinkZero); threshold's reads its input."""
    ew = threshold_for(threshold, 0)
    relu = scalar(threshold) == 0
    if relu and context.given_rule("relu") is not None:
        check_steps(ew, grad, x, "relu")
        at_kink = ad_derivative(registry.get("relu"), F(0))
        return arr(grad) * objmap(lambda v: at_kink if isinstance(v, KinkZero) else
                                  ad_derivative(ew, val(v), given=False), arr(x))
    return elementwise_backward(ew, grad, x, "relu" if relu else None)


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


def _der(fn, x):
    """The derivative of a smooth scalar function at the value x (reverse mode: a plain number), read off a
    forward-mode probe x + d (exact, or enclosed)."""
    return fn(Aff(x, {0: F(1)})).g.get(0, F(0))


@op("gelu_backward")
def _gelu_backward(grad, x, approximate="none"):
    return arr(grad) * objmap(lambda v: gelu_derivative(val(v), approximate), arr(x))


@op("silu_backward")
def _silu_backward(grad, x):
    return arr(grad) * objmap(lambda v: _der(silu, val(v)), arr(x))


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
    out = filled(xs.shape, F(0))
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


# ---------------------------------------------------------------------------------------------- convolution
@op("convolution_backward")
def _conv_backward(
    grad, x, weight, bias_sizes, stride, padding, dilation, transposed, output_padding, groups, output_mask
):
    if transposed:
        return conv_transpose_backward(grad, x, weight, stride, padding, dilation, output_padding, groups,
                                       output_mask)
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
    gx = filled(xp.shape, F(0))
    gw = filled(weight.shape, F(0))
    positions = list(np.ndindex(*out_sp))
    slices = [tuple(slice(pos[i] * stride[i], pos[i] * stride[i] + dilation[i] * (k[i] - 1) + 1, dilation[i])
                    for i in range(nsp)) for pos in positions]
    for gr in range(groups):
        ws = weight[gr * og : (gr + 1) * og].reshape(og, -1)
        chans = slice(gr * Cg, (gr + 1) * Cg)
        gg = g[:, gr * og : (gr + 1) * og].reshape(N, og, -1)  # (N, og, P)
        if output_mask[1]:  # weight gradient: sum_n g_n @ cols_n^T, one matmul over the im2col matrix
            cols = np.stack([xp[(slice(None), chans) + sl].reshape(N, -1) for sl in slices], axis=1)  # (N, P, CgK)
            gws = matmul(gg.transpose(1, 0, 2).reshape(og, -1), cols.reshape(-1, cols.shape[-1]))
            gw[gr * og : (gr + 1) * og] = gws.reshape((og, Cg) + tuple(k))
        if output_mask[0]:  # input gradient: ws^T @ g gives each position's patch gradient, added back in place
            gcols = matmul(ws.T[None], gg)  # (N, CgK, P)
            for j, sl in enumerate(slices):
                idx = (slice(None), chans) + sl
                gx[idx] = gx[idx] + gcols[:, :, j].reshape((N, Cg) + tuple(k))
    if any(padding):
        gx = gx[(slice(None), slice(None)) + tuple(slice(p, p + s) for p, s in zip(padding, x.shape[2:]))]
    gb = np.asarray(np.sum(g, axis=tuple(d for d in range(g.ndim) if d != 1)), dtype=object)
    gx = (gx if batched else gx[0]) if output_mask[0] else None
    return gx, gw if output_mask[1] else None, gb if output_mask[2] else None


# ------------------------------------------------------------------------------------- indexing backward ops
@op("select_backward")
def _select_backward(grad, input_sizes, dim, index):
    out = filled(tuple(input_sizes), F(0))
    sl = [slice(None)] * len(input_sizes)
    sl[dim] = index
    g = arr(grad)
    out[tuple(sl)] = g if g.ndim else g[()]
    return out


@op("slice_backward")
def _slice_backward(grad, input_sizes, dim, start, end, step):
    out = filled(tuple(input_sizes), F(0))
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
    return filled(tuple(size), F(0))


@op("new_ones")
def _new_ones(a, size, **kw):
    return filled(tuple(size), F(1))


@op("new_full")
def _new_full(a, size, fill_value, **kw):
    return filled(tuple(size), scalar(fill_value))


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
