"""Normalisation layers, evaluated exactly: batch norm (eval and training mode; instance norm reaches ATen as
batch norm), layer norm, group norm, and their backward ops; the moments var, std, var_mean, std_mean.

Each normalises ``x`` over groups of entries: ``xhat = (x - mean) * rstd`` with ``rstd = 1 / sqrt(var + eps)``
(biased variance), then applies a per-channel (or per-element) affine map ``xhat * weight + bias``.

* **batch norm, eval mode**: mean and variance are the running statistics (constants), so the layer is an
  affine map of ``x``; ``rstd`` is a Fraction when ``var + eps`` is the square of a rational (e.g. ``eps = 0``,
  or ``var = 1 - eps`` with a dyadic ``eps``), else the exact root ``sqrt(v) / v`` of the rational ``v = var + eps``
  (:class:`~nsverify.oracle.numbers.Surd`, also a rigorous interval), so equal inputs give equal outputs and
  every tie or kink behind the layer has an exact sign (docs/conditions.md, "Exact signs behind normalisations").
  ``(x - mean)`` is formed first, so an entry equal to the running mean maps exactly to ``bias``.
* **batch norm, training mode; layer norm; group norm**: batch (group) statistics -- smooth in ``x``
  where ``var + eps > 0``; with rational entries the variance is rational and ``rstd`` a Surd as above, else
  (entries already intervals) enclosed.  Where the variance may be 0 with ``eps = 0``
  (a kink of sqrt) the oracle raises :class:`~nsverify.errors.InexactError` (its answer is "unknown").

The running statistics that PyTorch's training-mode batch norm updates in place are buffers of the module (plain
tensors): the float run updates them; the exact run does not write exact values into them.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from nsverify.oracle.context import chunked_sum
from nsverify.oracle.ops.common import arr, objmap, scalar
from nsverify.oracle.ops.linalg import broadcast_chunked
from nsverify.oracle.ops.record import ExactOp
from nsverify.oracle.ops.smooth import rsqrt, sqrt

F = Fraction


def _sub(a, b):
    """``a - b`` (broadcast) in chunks with deadline polls between them: a full-width normalisation's millions of
    entries are no single uninterruptible numpy call (every entry is the same exact operation)."""
    return broadcast_chunked(np.subtract, np.asarray(a, dtype=object), np.asarray(b, dtype=object))


def _mul(a, b):
    """``a * b`` (broadcast), in polled chunks like :func:`_sub`."""
    return broadcast_chunked(np.multiply, np.asarray(a, dtype=object), np.asarray(b, dtype=object))


def _add(a, b):
    """``a + b`` (broadcast), in polled chunks like :func:`_sub`."""
    return broadcast_chunked(np.add, np.asarray(a, dtype=object), np.asarray(b, dtype=object))


def _sum(a, axis, keepdims=False) -> np.ndarray:
    """An object-array sum in polled pieces (:func:`nsverify.oracle.context.chunked_sum`), as an object array."""
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    return np.asarray(chunked_sum(a, tuple(d % a.ndim for d in axes), keepdims), dtype=object)


def _empty() -> np.ndarray:
    return np.empty((0,), dtype=object)


def group_stats(xg: np.ndarray, eps):
    """Mean and 1/sqrt(var + eps) of each row of ``xg`` (G, M) (biased variance): two object arrays (G,)."""
    m = xg.shape[1]
    mean = _sum(xg, 1) * F(1, m)
    d = _sub(xg, mean[:, None])
    var = _sum(_mul(d, d), 1) * F(1, m)
    e = scalar(eps)
    return mean, objmap(lambda v: rsqrt(v + e), var)


def _normalise_rows(xg, mean, rstd):
    """(x - mean) * rstd row by row: the difference first, so an entry equal to its mean gives an exact 0."""
    return _mul(_sub(xg, mean[:, None]), rstd[:, None])


def _grad_rows(gy, xg, mean, rstd):
    """d/dx of the normalisation, row by row: rstd * (gy - mean(gy) - xhat * mean(gy * xhat)), where gy is the
    gradient with respect to xhat."""
    m = xg.shape[1]
    xhat = _normalise_rows(xg, mean, rstd)
    mg = _sum(gy, 1) * F(1, m)
    mgx = _sum(_mul(gy, xhat), 1) * F(1, m)
    return _mul(rstd[:, None], _sub(_sub(gy, mg[:, None]), _mul(xhat, mgx[:, None])))


def _affine(y, weight, bias, shape):
    """y * weight + bias, the parameters reshaped to broadcast as ``shape``."""
    if weight is not None:
        y = _mul(y, arr(weight).reshape(shape))
    if bias is not None:
        y = _add(y, arr(bias).reshape(shape))
    return y


def _sum_except(a: np.ndarray, keep: tuple) -> np.ndarray:
    return _sum(a, tuple(d for d in range(a.ndim) if d not in keep))


# ------------------------------------------------------------------------------------------------ batch norm
def _channels_first(x: np.ndarray) -> np.ndarray:
    """(N, C, *spatial) -> (C, N * prod(spatial))."""
    return np.moveaxis(x, 1, 0).reshape(x.shape[1], -1)


def _from_channels(yg: np.ndarray, shape) -> np.ndarray:
    moved = (shape[1], shape[0]) + tuple(shape[2:])
    return np.moveaxis(yg.reshape(moved), 0, 1)


def _cshape(x) -> tuple:
    return (1, -1) + (1,) * (x.ndim - 2)


def batch_norm(x, weight, bias, running_mean, running_var, training, eps):
    """(out, save_mean, save_invstd) as PyTorch's native_batch_norm returns them (empty stats in eval mode)."""
    x = arr(x)
    if training:
        xg = _channels_first(x)
        mean, rstd = group_stats(xg, eps)
        y = _from_channels(_normalise_rows(xg, mean, rstd), x.shape)
        return _affine(y, weight, bias, _cshape(x)), mean, rstd
    rm, rv = arr(running_mean), arr(running_var)
    e = scalar(eps)
    rstd = objmap(lambda v: rsqrt(v + e), rv)
    y = _mul(_sub(x, rm.reshape(_cshape(x))), rstd.reshape(_cshape(x)))
    return _affine(y, weight, bias, _cshape(x)), _empty(), _empty()


def _native_batch_norm(x, weight, bias, running_mean, running_var, training, momentum, eps):
    return batch_norm(x, weight, bias, running_mean, running_var, training, eps)


def _native_batch_norm_no_stats(x, weight, bias, training, momentum, eps):
    return batch_norm(x, weight, bias, None, None, True, eps)


def _native_batch_norm_no_training(x, weight, bias, running_mean, running_var, momentum, eps):
    return batch_norm(x, weight, bias, running_mean, running_var, False, eps)


def _native_batch_norm_backward(grad, x, weight, running_mean, running_var, save_mean, save_invstd, train, eps,
                                output_mask):
    x, g = arr(x), arr(grad)
    cs = _cshape(x)
    if train:
        mean, rstd = arr(save_mean), arr(save_invstd)
    else:
        mean, e = arr(running_mean), scalar(eps)
        rstd = objmap(lambda v: rsqrt(v + e), arr(running_var))
    xhat = _mul(_sub(x, mean.reshape(cs)), rstd.reshape(cs))
    gw = _sum_except(_mul(g, xhat), (1,)) if output_mask[1] else None
    gb = _sum_except(g, (1,)) if output_mask[2] else None
    gx = None
    if output_mask[0]:
        gy = g if weight is None else _mul(g, arr(weight).reshape(cs))
        if train:
            gx = _from_channels(_grad_rows(_channels_first(gy), _channels_first(x), mean, rstd), x.shape)
        else:
            gx = _mul(gy, rstd.reshape(cs))
    return gx, gw, gb


# ------------------------------------------------------------------------------------------------ layer norm
def _native_layer_norm(x, normalized_shape, weight, bias, eps):
    x = arr(x)
    k = len(normalized_shape)
    lead = x.shape[: x.ndim - k]
    xg = x.reshape(int(np.prod(lead, dtype=np.int64)), -1)
    mean, rstd = group_stats(xg, eps)
    y = _normalise_rows(xg, mean, rstd).reshape(x.shape)
    stat_shape = lead + (1,) * k
    return _affine(y, weight, bias, tuple(normalized_shape)), mean.reshape(stat_shape), rstd.reshape(stat_shape)


def _native_layer_norm_backward(grad, x, normalized_shape, mean, rstd, weight, bias, output_mask):
    x, g = arr(x), arr(grad)
    k = len(normalized_shape)
    rows = int(np.prod(x.shape[: x.ndim - k], dtype=np.int64))
    mean, rstd = arr(mean).reshape(-1), arr(rstd).reshape(-1)
    xg, gg = x.reshape(rows, -1), g.reshape(rows, -1)
    gx = gw = gb = None
    if output_mask[0]:
        gy = gg if weight is None else _mul(gg, arr(weight).reshape(1, -1))
        gx = _grad_rows(gy, xg, mean, rstd).reshape(x.shape)
    if output_mask[1] and weight is not None:
        gw = _sum(_mul(gg, _normalise_rows(xg, mean, rstd)), 0).reshape(tuple(normalized_shape))
    if output_mask[2] and bias is not None:
        gb = _sum(gg, 0).reshape(tuple(normalized_shape))
    return gx, gw, gb


# ------------------------------------------------------------------------------------------------ group norm
def _native_group_norm(x, weight, bias, n, c, hxw, group, eps):
    x = arr(x)
    xg = x.reshape(n * group, -1)
    mean, rstd = group_stats(xg, eps)
    y = _normalise_rows(xg, mean, rstd).reshape(x.shape)
    return _affine(y, weight, bias, _cshape(x)), mean.reshape(n, group), rstd.reshape(n, group)


def _native_group_norm_backward(grad, x, mean, rstd, weight, n, c, hxw, group, output_mask):
    x, g = arr(x), arr(grad)
    cs = _cshape(x)
    mean, rstd = arr(mean).reshape(-1), arr(rstd).reshape(-1)
    xg = x.reshape(n * group, -1)
    gx = gw = gb = None
    if output_mask[0]:
        gy = g if weight is None else _mul(g, arr(weight).reshape(cs))
        gx = _grad_rows(gy.reshape(n * group, -1), xg, mean, rstd).reshape(x.shape)
    if output_mask[1] and weight is not None:
        gw = _sum_except(_mul(g, _normalise_rows(xg, mean, rstd).reshape(x.shape)), (1,))
    if output_mask[2]:
        gb = _sum_except(g, (1,))
    return gx, gw, gb



# ------------------------------------------------------------------------------------------- moments (var, std)
def _moments(x, dim, correction, keepdim):
    """(var, mean) over ``dim`` (None: every axis) with Bessel's ``correction`` (default 1), as torch.var_mean
    computes them: sum((x - mean)^2) / (count - correction); a count not above the correction divides by 0."""
    x = arr(x)
    if dim is None or isinstance(dim, (list, tuple)) and not dim:
        dims = tuple(range(x.ndim))
    else:
        dims = tuple(sorted({d % x.ndim for d in ([dim] if isinstance(dim, int) else dim)}))
    count = int(np.prod([x.shape[d] for d in dims]))
    c = F(1) if correction is None else scalar(correction)
    mean = _sum(x, dims, keepdims=True) * F(1, count)
    d = _sub(x, mean)
    var = _sum(_mul(d, d), dims, keepdims=keepdim) * (1 / max(F(0), count - c))
    var = np.asarray(var, dtype=object)  # a full reduction: numpy hands back the scalar
    return var, (mean if keepdim else mean.reshape(var.shape))


def _var(x, dim=None, unbiased=None, correction=None, keepdim=False):
    return _moments(x, dim, _correction(unbiased, correction), keepdim)[0]


def _std(x, dim=None, unbiased=None, correction=None, keepdim=False):
    return objmap(sqrt, _var(x, dim, unbiased, correction, keepdim))


def _var_mean(x, dim=None, correction=None, keepdim=False):
    return _moments(x, dim, correction, keepdim)


def _std_mean(x, dim=None, correction=None, keepdim=False):
    var, mean = _moments(x, dim, correction, keepdim)
    return objmap(sqrt, var), mean


def _correction(unbiased, correction):
    """var.dim's ``unbiased`` flag (positional, a bool) or var.correction's ``correction``."""
    if isinstance(unbiased, bool):
        return 1 if unbiased else 0
    return correction


def _norm(names, fn, nodes=(), **kw):
    return ExactOp(names, fn, analytic=True, nodes=nodes, enclosure=True, **kw)


RECORDS = (
    _norm(("native_batch_norm", "_native_batch_norm_legit.default"), _native_batch_norm, ("NativeBatchNormBackward0",),
          backward_names=("native_batch_norm_backward",), backward=_native_batch_norm_backward),
    _norm(("_native_batch_norm_legit.no_stats",), _native_batch_norm_no_stats),
    _norm(("_native_batch_norm_legit_no_training",), _native_batch_norm_no_training),
    _norm(("native_layer_norm",), _native_layer_norm, ("NativeLayerNormBackward0",),
          backward_names=("native_layer_norm_backward",), backward=_native_layer_norm_backward),
    _norm(("native_group_norm",), _native_group_norm, ("NativeGroupNormBackward0",),
          backward_names=("native_group_norm_backward",), backward=_native_group_norm_backward),
    _norm(("var.correction", "var.dim"), _var, ("VarBackward0",)),
    _norm(("std.correction", "std.dim"), _std),
    _norm(("var_mean.correction",), _var_mean, ("VarMeanBackward0",)),
    _norm(("std_mean.correction",), _std_mean),
)
