"""Average pools, evaluated exactly: avg_pool2d/3d (avg_pool1d reaches ATen as avg_pool2d), the adaptive average
pools _adaptive_avg_pool2d/3d (adaptive_avg_pool1d reaches ATen as the 2-d one; uneven windows), nearest
upsampling (``upsample_nearest1d/2d/3d``, ``_upsample_nearest_exact1d/2d/3d``: a copy of the input entries that
PyTorch's own index arithmetic picks), and their backward ops.  The max pools, whose ties need the selection
rules, are in :mod:`.select`.

An average pool is linear: output j is the sum of the entries of its window divided by a divisor.  The windows
are the max pools' (:func:`nsverify.registry.windows.pool_window_table`, the one window geometry) or the
adaptive pools' (:func:`nsverify.registry.windows.adaptive_windows`); the divisors are ATen's (padding counted
with ``count_include_pad``, up to the padded edge; ``divisor_override`` when given).
"""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np

from nsverify.oracle import context
from nsverify.oracle.ops.common import arr, filled
from nsverify.oracle.ops.record import ExactOp
from nsverify.registry.windows import _ntuple, adaptive_windows, pool_window_table

F = Fraction


def avg_pool_geometry(spatial, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override):
    """(out_shape, table, divisors) of an average pool over a plane of shape ``spatial``: ``table[j, t]`` the
    flat index of window j's offset t (-1 on padding), ``divisors[j]`` what ATen divides window j's sum by."""
    n = len(spatial)
    out, table = pool_window_table(spatial, kernel, stride, padding, 1, ceil_mode)
    k = _ntuple(kernel, n, None)
    s = _ntuple(stride, n, k)
    p = _ntuple(padding, n, (0,) * n)
    per_dim = []
    for i in range(n):
        sizes = []
        for o in range(out[i]):
            start = o * s[i] - p[i]
            end = min(start + k[i], spatial[i] + p[i])
            clipped = min(end, spatial[i]) - max(start, 0)
            sizes.append(end - start if count_include_pad else clipped)
        per_dim.append(sizes)
    divisors = []
    for pos in np.ndindex(*out):
        if divisor_override:
            divisors.append(F(int(divisor_override)))
        else:
            d = int(np.prod([per_dim[i][pos[i]] for i in range(n)]))
            divisors.append(F(max(d, 1)))  # an empty window (ceil_mode overhang) gives 0, as in ATen
    return out, table, divisors


def adaptive_geometry(spatial, output_size):
    """(out_shape, table, divisors) of an adaptive average pool: ATen's windows along each axis (uneven where
    the sizes do not divide), ``table`` padded with -1 to the largest window, divisors the window sizes."""
    out = tuple(int(v) for v in output_size)
    wins = [adaptive_windows(int(spatial[i]), out[i]) for i in range(len(out))]
    rows, divisors = [], []
    for pos in np.ndindex(*out):
        flat = [int(np.ravel_multi_index(q, spatial)) for q in itertools.product(*[wins[i][pos[i]]
                                                                                  for i in range(len(out))])]
        rows.append(flat)
        divisors.append(F(len(flat)))
    width = max((len(r) for r in rows), default=0)
    table = np.full((len(rows), width), -1, dtype=np.int64)
    for j, r in enumerate(rows):
        table[j, : len(r)] = r
    return out, table, divisors


def _pool(x, nsp, geometry):
    """Window sums over the last ``nsp`` axes of ``x``, each divided by its divisor."""
    x = arr(x)
    lead, sp = x.shape[: x.ndim - nsp], x.shape[x.ndim - nsp:]
    out, table, divisors = geometry(sp)
    size = int(np.prod(sp))
    xs = np.concatenate([x.reshape(-1, size), filled((int(np.prod(lead)), 1), F(0))], axis=1)
    idx = np.where(table < 0, size, table)
    sums = np.asarray(np.sum(xs[:, idx], axis=2), dtype=object) if table.shape[1] else \
        filled((xs.shape[0], len(divisors)), F(0))
    inv = np.asarray([1 / d for d in divisors], dtype=object)
    return (sums * inv[None, :]).reshape(lead + tuple(out))


def _pool_backward(grad, x, nsp, geometry):
    """The transpose of :func:`_pool`: each output's gradient, divided by its divisor, added to its window."""
    x, g = arr(x), arr(grad)
    lead, sp = x.shape[: x.ndim - nsp], x.shape[x.ndim - nsp:]
    _out, table, divisors = geometry(sp)
    size = int(np.prod(sp))
    rows = int(np.prod(lead))
    inv = np.asarray([1 / d for d in divisors], dtype=object)
    gd = g.reshape(rows, -1) * inv[None, :]
    gx = filled((rows, size + 1), F(0))
    idx = np.where(table < 0, size, table)
    for t in range(idx.shape[1]):
        np.add.at(gx, (slice(None), idx[:, t]), gd)
    return gx[:, :size].reshape(x.shape)


def _avg_geometry(kernel, stride, padding, ceil_mode, count_include_pad, divisor_override):
    return lambda sp: avg_pool_geometry(sp, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override)


def _avg_pool(x, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True,
              divisor_override=None):
    return _pool(x, len(_ntuple(kernel_size, _nsp(), None)),
                 _avg_geometry(kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override))


def _avg_pool_backward(grad, x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override):
    return _pool_backward(grad, x, len(_ntuple(kernel_size, _nsp(), None)),
                          _avg_geometry(kernel_size, stride, padding, ceil_mode, count_include_pad,
                                        divisor_override))


def _nsp() -> int:
    """The spatial rank of the current pool op (avg_pool2d -> 2, _adaptive_avg_pool3d_backward -> 3)."""
    return 3 if "3d" in context.current().op_name else 2


def _adaptive_avg_pool(x, output_size):
    return _pool(x, len(output_size), lambda sp: adaptive_geometry(sp, output_size))


def _adaptive_avg_pool_backward(grad, x):
    nsp = _nsp()
    output_size = arr(grad).shape[-nsp:]
    return _pool_backward(grad, x, nsp, lambda sp: adaptive_geometry(sp, output_size))


# ------------------------------------------------------------------------------------- nearest upsampling
_NEAREST = tuple(f"{p}{d}d" for p in ("upsample_nearest", "_upsample_nearest_exact") for d in (1, 2, 3))


def _nearest_sources(name: str, spatial, output_size, scales) -> np.ndarray:
    """The flat input index that each output of nearest upsampling ``name`` copies: PyTorch's own float kernel
    run on a plane of indices (its index arithmetic, rounding included, is the op's definition)."""
    import torch

    idx = torch.arange(int(np.prod(spatial)), dtype=torch.float64).reshape((1, 1) + tuple(spatial))
    src = getattr(torch.ops.aten, name).default(idx, list(output_size), *scales)
    return src.reshape(-1).numpy().astype(np.int64)


def _upsample_nearest(x, output_size, *scales):
    x = arr(x)
    nsp = len(output_size)
    lead = x.shape[: x.ndim - nsp]
    src = _nearest_sources(context.current().op_name, x.shape[x.ndim - nsp:], output_size, scales)
    return x.reshape(lead + (-1,))[..., src].reshape(lead + tuple(int(v) for v in output_size))


def _upsample_nearest_backward(grad, output_size, input_size, *scales):
    g = arr(grad)
    nsp = len(output_size)
    lead, sp = tuple(input_size[:-nsp]), tuple(int(v) for v in input_size[-nsp:])
    src = _nearest_sources(context.current().op_name[: -len("_backward")], sp, output_size, scales)
    rows = int(np.prod(lead))
    gx = filled((rows, int(np.prod(sp))), F(0))
    np.add.at(gx, (slice(None), src), g.reshape(rows, -1))
    return gx.reshape(lead + sp)


RECORDS = (
    ExactOp(("avg_pool2d", "avg_pool3d"), _avg_pool, backward_names=("avg_pool2d_backward", "avg_pool3d_backward"),
            backward=_avg_pool_backward, analytic=True, nodes=("AvgPool2DBackward0", "AvgPool3DBackward0")),
    ExactOp(("_adaptive_avg_pool2d", "_adaptive_avg_pool3d"), _adaptive_avg_pool,
            backward_names=("_adaptive_avg_pool2d_backward", "_adaptive_avg_pool3d_backward"),
            backward=_adaptive_avg_pool_backward, analytic=True,
            nodes=("AdaptiveAvgPool2DBackward0", "AdaptiveAvgPool3DBackward0")),
    ExactOp(_NEAREST, _upsample_nearest, backward_names=tuple(n + "_backward" for n in _NEAREST),
            backward=_upsample_nearest_backward, analytic=True,
            nodes=("UpsampleNearest1DBackward0", "UpsampleNearest2DBackward0", "UpsampleNearest3DBackward0")),
)
