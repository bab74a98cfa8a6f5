"""Exact convolution: ATen's ``convolution`` (every dimension, groups, dilation, padding; ``transposed=True`` for
``conv_transpose1d/2d/3d``) and its backward op ``convolution_backward``.

The direct convolution is one exact matmul per group over the im2col matrix.  A transposed convolution: input
entry ``i`` of channel ``ci`` adds ``x[ci, i] * weight[ci, co, t]`` to output position
``i * stride + t * dilation - padding`` of channel ``co`` (weight shape ``(C_in, C_out / groups, *kernel)``); the
output has ``(in - 1) * stride - 2 * padding + dilation * (kernel - 1) + output_padding + 1`` entries per axis.
Both directions run over the kernel offsets ``t``: for each, one exact matmul between the input (or the
gradient) and the weight slice ``weight[..., t]``, on strided views of an uncropped output buffer.
"""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np

from nsverify.errors import UnsupportedOpError
from nsverify.oracle import context
from nsverify.oracle.ops.common import arr, filled
from nsverify.oracle.ops.linalg import broadcast_chunked, matmul
from nsverify.oracle.ops.record import ExactOp

F = Fraction


# ---------------------------------------------------------------------------------------------- convolution
def _convolution(x, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    if transposed:
        return conv_transpose(x, weight, bias, stride, padding, dilation, output_padding, groups)
    x, weight = arr(x), arr(weight)
    nsp = weight.ndim - 2
    batched = x.ndim == nsp + 2
    if not batched:
        x = x[None]
    if isinstance(padding, str):
        raise UnsupportedOpError("string padding is not supported by the exact oracle; give explicit sizes")
    pad = [(0, 0), (0, 0)] + [(p, p) for p in padding]
    xp = np.pad(x, pad, constant_values=F(0)) if any(padding) else x
    N, C = xp.shape[:2]
    O, Cg = weight.shape[:2]
    spatial = xp.shape[2:]
    k = weight.shape[2:]
    out_sp = [(spatial[i] - dilation[i] * (k[i] - 1) - 1) // stride[i] + 1 for i in range(nsp)]
    og = O // groups
    out = np.empty((N, O, *out_sp), dtype=object)
    for g in range(groups):
        xs = xp[:, g * Cg : (g + 1) * Cg]
        ws = weight[g * og : (g + 1) * og].reshape(og, -1)  # (og, Cg*prod(k))
        # im2col
        cols = []
        for pos in np.ndindex(*out_sp):
            context.poll_deadline()  # one output position per step: a full-width layer has thousands
            sl = [slice(None), slice(None)] + [
                slice(pos[i] * stride[i], pos[i] * stride[i] + dilation[i] * (k[i] - 1) + 1, dilation[i])
                for i in range(nsp)
            ]
            cols.append(xs[tuple(sl)].reshape(N, -1))
        colmat = np.stack(cols, axis=2)  # (N, Cg*prod(k), P)
        res = matmul(ws[None], colmat)  # (N, og, P)
        out[:, g * og : (g + 1) * og] = res.reshape(N, og, *out_sp)
    if bias is not None:
        out = broadcast_chunked(np.add, out, arr(bias).reshape((1, O) + (1,) * nsp))
    return out if batched else out[0]


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
            cols = np.stack([xp[(slice(None), chans) + sl].reshape(N, -1) for sl in context.polled(slices)],
                            axis=1)  # (N, P, CgK)
            gws = matmul(gg.transpose(1, 0, 2).reshape(og, -1), cols.reshape(-1, cols.shape[-1]))
            gw[gr * og : (gr + 1) * og] = gws.reshape((og, Cg) + tuple(k))
        if output_mask[0]:  # input gradient: ws^T @ g gives each position's patch gradient, added back in place
            gcols = matmul(ws.T[None], gg)  # (N, CgK, P)
            for j, sl in enumerate(slices):
                context.poll_deadline()  # one exact patch addition per output position
                idx = (slice(None), chans) + sl
                gx[idx] = gx[idx] + gcols[:, :, j].reshape((N, Cg) + tuple(k))
    if any(padding):
        gx = gx[(slice(None), slice(None)) + tuple(slice(p, p + s) for p, s in zip(padding, x.shape[2:]))]
    gb = np.asarray(context.chunked_sum(g, tuple(d for d in range(g.ndim) if d != 1)), dtype=object)
    gx = (gx if batched else gx[0]) if output_mask[0] else None
    return gx, gw if output_mask[1] else None, gb if output_mask[2] else None


# ------------------------------------------------------------------------------------ transposed convolution
def _geometry(in_sp, k, stride, padding, dilation, output_padding):
    """(full, out, offsets): the uncropped buffer shape, the output shape, and per kernel offset t the slices of
    the buffer that input positions reach."""
    nsp = len(k)
    full = tuple((in_sp[i] - 1) * stride[i] + dilation[i] * (k[i] - 1) + output_padding[i] + 1 for i in range(nsp))
    out = tuple(full[i] - 2 * padding[i] for i in range(nsp))
    offsets = []
    for t in itertools.product(*[range(v) for v in k]):
        sl = tuple(slice(t[i] * dilation[i], t[i] * dilation[i] + (in_sp[i] - 1) * stride[i] + 1, stride[i])
                   for i in range(nsp))
        offsets.append((t, sl))
    return full, out, offsets


def _crop(padding, out):
    return tuple(slice(p, p + o) for p, o in zip(padding, out))


def conv_transpose(x, weight, bias, stride, padding, dilation, output_padding, groups):
    """ATen's transposed convolution, exactly (batched or not)."""
    x, weight = arr(x), arr(weight)
    nsp = weight.ndim - 2
    batched = x.ndim == nsp + 2
    if not batched:
        x = x[None]
    n, cin = x.shape[:2]
    cin_g, cout_g = cin // groups, weight.shape[1]
    in_sp = x.shape[2:]
    full, out, offsets = _geometry(in_sp, weight.shape[2:], stride, padding, dilation, output_padding)
    buf = filled((n, cout_g * groups) + full, F(0))
    for g in range(groups):
        xg = x[:, g * cin_g:(g + 1) * cin_g].reshape(n, cin_g, -1)
        chans = slice(g * cout_g, (g + 1) * cout_g)
        for t, sl in offsets:
            wt = weight[(slice(g * cin_g, (g + 1) * cin_g), slice(None)) + t]  # (cin_g, cout_g)
            contrib = matmul(wt.T[None], xg).reshape((n, cout_g) + tuple(in_sp))
            idx = (slice(None), chans) + sl
            buf[idx] = buf[idx] + contrib
    y = buf[(slice(None), slice(None)) + _crop(padding, out)]
    if bias is not None:
        y = y + arr(bias).reshape((1, -1) + (1,) * nsp)
    return y if batched else y[0]


def conv_transpose_backward(grad, x, weight, stride, padding, dilation, output_padding, groups, output_mask):
    """(grad_input, grad_weight, grad_bias) of :func:`conv_transpose`, as ATen's convolution_backward returns."""
    x, weight, g = arr(x), arr(weight), arr(grad)
    nsp = weight.ndim - 2
    batched = x.ndim == nsp + 2
    if not batched:
        x, g = x[None], g[None]
    n, cin = x.shape[:2]
    cin_g, cout_g = cin // groups, weight.shape[1]
    in_sp = x.shape[2:]
    full, out, offsets = _geometry(in_sp, weight.shape[2:], stride, padding, dilation, output_padding)
    gfull = filled(g.shape[:2] + full, F(0))
    gfull[(slice(None), slice(None)) + _crop(padding, out)] = g
    gx = filled(x.shape, F(0))
    gw = filled(weight.shape, F(0))
    for gr in range(groups):
        ci = slice(gr * cin_g, (gr + 1) * cin_g)
        xg = x[:, ci].reshape(n, cin_g, -1)
        for t, sl in offsets:
            gs = gfull[(slice(None), slice(gr * cout_g, (gr + 1) * cout_g)) + sl].reshape(n, cout_g, -1)
            wt = weight[(ci, slice(None)) + t]  # (cin_g, cout_g)
            if output_mask[0]:
                gx[:, ci] = gx[:, ci] + matmul(wt[None], gs).reshape((n, cin_g) + tuple(in_sp))
            if output_mask[1]:
                flat_x = xg.transpose(1, 0, 2).reshape(cin_g, -1)
                flat_g = gs.transpose(1, 0, 2).reshape(cout_g, -1)
                gw[(ci, slice(None)) + t] = matmul(flat_x, flat_g.T)
    gb = np.asarray(context.chunked_sum(g, tuple(d for d in range(g.ndim) if d != 1)), dtype=object)
    gx = (gx if batched else gx[0]) if output_mask[0] else None
    return gx, gw if output_mask[1] else None, gb if output_mask[2] else None


RECORDS = (
    ExactOp(("convolution",), _convolution, backward_names=("convolution_backward",), backward=_conv_backward,
            analytic=True, nodes=("ConvolutionBackward0",)),
)
