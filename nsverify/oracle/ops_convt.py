"""Transposed convolution (``conv_transpose1d/2d/3d``: ATen's ``convolution`` with ``transposed=True``) and its
backward, evaluated exactly.

Input entry ``i`` of channel ``ci`` adds ``x[ci, i] * weight[ci, co, t]`` to output position
``i * stride + t * dilation - padding`` of channel ``co`` (weight shape ``(C_in, C_out / groups, *kernel)``); the
output has ``(in - 1) * stride - 2 * padding + dilation * (kernel - 1) + output_padding + 1`` entries per axis.
Both directions run over the kernel offsets ``t``: for each, one exact matmul between the input (or the
gradient) and the weight slice ``weight[..., t]``, on strided views of an uncropped output buffer.
"""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np

from nsverify.oracle.ops_linear import arr, filled, matmul

F = Fraction


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
    gb = np.asarray(np.sum(g, axis=tuple(d for d in range(g.ndim) if d != 1)), dtype=object)
    gx = (gx if batched else gx[0]) if output_mask[0] else None
    return gx, gw if output_mask[1] else None, gb if output_mask[2] else None
