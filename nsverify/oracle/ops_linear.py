"""Exact implementations of the smooth *polynomial* ATen ops: arithmetic, shapes, matmul, convolution, sums.

They act on numpy object arrays whose entries are Fractions or :class:`~nsverify.oracle.numbers.Aff`, so
first- order information (the local derivative in w) is carried by the operator overloading of ``Aff``.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from nsverify.errors import UnsupportedOpError
from nsverify.oracle import context, fastexact
from nsverify.oracle.numbers import val
from nsverify.oracle.tensor import op, scalar

F = Fraction


def arr(x) -> np.ndarray:
    """Any exact operand as an object ndarray (scalars become 0-d)."""
    if isinstance(x, np.ndarray):
        return x if x.dtype == object else x.astype(object)
    out = np.empty((), dtype=object)
    out[()] = scalar(x)
    return out


def objmap(f, a: np.ndarray) -> np.ndarray:
    out = np.empty(a.shape, dtype=object)
    of, af = out.reshape(-1), a.reshape(-1)
    for i in context.polled_range(af.size):
        of[i] = f(af[i])
    return out


def _norm_dims(dim, ndim):
    if dim is None:
        return tuple(range(ndim))
    if isinstance(dim, int):
        dim = [dim]
    return tuple(sorted(d % ndim if ndim else 0 for d in dim))


def _asfrac_array(a: np.ndarray) -> np.ndarray:
    """Integer/bool arrays promoted to exact Fractions (for arithmetic with floats)."""
    if a.dtype == object:
        return a
    return objmap(lambda v: F(int(v)), a)


# ------------------------------------------------------------------------------------------------ arithmetic
def _bin(fn):
    def impl(a, b, alpha=None, **_):
        a, b = arr(a), arr(b)
        a, b = _asfrac_array(a), _asfrac_array(b)
        if alpha is not None:
            b = b * scalar(alpha)
        return broadcast_chunked(fn, a, b)

    return impl


def broadcast_chunked(fn, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``fn(a, b)`` for a broadcasting elementwise ``fn``, evaluated in chunks with deadline polls between them
    when the result is large (one numpy call on object arrays cannot be interrupted)."""
    shape = np.broadcast_shapes(a.shape, b.shape)
    n = int(np.prod(shape)) if shape else 1
    if n <= 4 * context.POLL_EVERY:
        return np.asarray(fn(a, b), dtype=object)
    af, bf = (np.broadcast_to(x, shape).reshape(-1) for x in (a, b))
    out = np.empty(n, dtype=object)
    for sl in context.chunks(n):
        out[sl] = fn(af[sl], bf[sl])
    return out.reshape(shape)


op("add")(_bin(lambda a, b: a + b if (s := fastexact.add(a, b)) is None else s))
op("sub")(_bin(lambda a, b: a - b))
op("rsub")(_bin(lambda a, b: b - a))
op("mul")(_bin(lambda a, b: a * b))


@op("div")
def _div(a, b, rounding_mode=None):
    if rounding_mode is not None:
        raise UnsupportedOpError(
            f"division with rounding_mode={rounding_mode!r} is not supported by the "
            "exact oracle (it is piecewise constant); use true division"
        )
    return _bin(lambda x, y: x / y)(a, b)


@op("neg")
def _neg(a):
    return -arr(a)


def ipow(x, e: int):
    """x ** e for an integer e >= 0, by repeated exact multiplication (pow itself lives in ops_smooth)."""
    out = F(1)
    for _ in range(e):
        out = out * x
    return out


@op("square")
def _square(a):
    return objmap(lambda x: x * x, arr(a))


# --------------------------------------------------------------------------------------- copies and shapes
@op("clone", "lift_fresh_copy", "contiguous", "_to_copy", "to", "_to_dtype", "positive", "resolve_conj",
    "resolve_neg")
def _identity(a, *args, **kwargs):
    return a.copy() if isinstance(a, np.ndarray) else a


@op("detach", "alias", "lift_fresh")
def _alias(a, *args, **kwargs):
    """Same storage (a numpy view), so that in-place writes through an alias reach the original."""
    return a.view() if isinstance(a, np.ndarray) else a


@op("copy_")
def _copy_(dst, src, non_blocking=False):
    return np.broadcast_to(arr(src), dst.shape).copy()


@op("view", "_unsafe_view", "reshape", "view_copy")
def _view(a, shape):
    return a.reshape(tuple(shape))


@op("flatten")
def _flatten(a, start_dim=0, end_dim=-1):
    s = a.shape
    start, end = start_dim % max(len(s), 1), end_dim % max(len(s), 1)
    return a.reshape(s[:start] + (-1,) + s[end + 1 :])


@op("t")
def _t(a):
    return a.T if a.ndim == 2 else a


@op("transpose")
def _transpose(a, d0, d1):
    return np.swapaxes(a, d0, d1)


@op("permute")
def _permute(a, dims):
    return np.transpose(a, [d % a.ndim for d in dims])


@op("expand")
def _expand(a, size, implicit=False):
    size = list(size)
    off = len(size) - a.ndim
    shape = [a.shape[i - off] if s == -1 else s for i, s in enumerate(size)]
    return np.broadcast_to(a, shape).copy()


@op("unsqueeze")
def _unsqueeze(a, dim):
    return np.expand_dims(a, dim % (a.ndim + 1))


@op("squeeze")
def _squeeze(a, dim=None):
    if dim is None:
        return np.squeeze(a)
    dims = [d % max(a.ndim, 1) for d in ([dim] if isinstance(dim, int) else dim)]
    dims = tuple(d for d in dims if a.ndim and a.shape[d] == 1)
    return np.squeeze(a, axis=dims) if dims else a


@op("select")
def _select(a, dim, index):
    """A numpy view (basic indexing), so that in-place writes into the selection reach the original."""
    sl = [slice(None)] * a.ndim
    index = index % a.shape[dim]
    sl[dim] = slice(index, index + 1)
    return a[tuple(sl)].squeeze(axis=dim)


@op("diagonal")
def _diagonal(a, offset=0, dim1=0, dim2=1):
    """The diagonal of dims ``dim1``, ``dim2`` (``offset`` > 0: above it) as the last dimension -- torch's and
    numpy's convention alike.  A view, writable when ``a`` is, so that in-place writes through it reach ``a``
    (``torch.func.jacrev`` fills its basis with ``diagonal().fill_(1)``); numpy's own view is read-only."""
    v = np.diagonal(a, offset, dim1 % a.ndim, dim2 % a.ndim)
    if a.flags.writeable:
        v.flags.writeable = True
    return v


@op("diagonal_backward")
def _diagonal_backward(grad, input_sizes, offset, dim1, dim2):
    out = filled(tuple(input_sizes), F(0))
    _diagonal(out, offset, dim1, dim2)[...] = arr(grad)
    return out


@op("slice")
def _slice(a, dim=0, start=None, end=None, step=1):
    sl = [slice(None)] * a.ndim
    sl[dim] = slice(start, end, step)
    return a[tuple(sl)]


@op("index")
def _index(a, indices):
    idx = tuple(
        slice(None) if i is None else (i.astype(bool) if i.dtype == bool else i.astype(np.int64))
        for i in indices
    )
    return a[idx]


@op("cat")
def _cat(tensors, dim=0):
    ts = [arr(t) for t in tensors if not (isinstance(t, np.ndarray) and t.ndim == 1 and t.size == 0)]
    return np.concatenate(ts, axis=dim)


@op("stack")
def _stack(tensors, dim=0):
    return np.stack([arr(t) for t in tensors], axis=dim)


@op("split", "split_with_sizes")
def _split(a, sizes, dim=0):
    n = a.shape[dim]
    if isinstance(sizes, int):
        sizes = [sizes] * (n // sizes) + ([n % sizes] if n % sizes else [])
    return list(np.split(a, np.cumsum(sizes)[:-1], axis=dim))


@op("unbind")
def _unbind(a, dim=0):
    return [np.take(a, i, axis=dim) for i in range(a.shape[dim])]


@op("repeat")
def _repeat(a, repeats):
    """torch's ``repeat`` (numpy's ``tile``: extra leading repeats add dimensions); a copy, never a view."""
    return np.tile(a, tuple(int(r) for r in repeats)).copy()


@op("flip")
def _flip(a, dims):
    return np.flip(a, axis=tuple(dims)).copy()


def filled(shape, v) -> np.ndarray:
    """An object array of ``shape`` with every entry ``v``."""
    out = np.empty(shape, dtype=object)
    out.fill(v)
    return out


@op("zeros_like")
def _zeros_like(a, **kw):
    return filled(a.shape, F(0))


@op("ones_like")
def _ones_like(a, **kw):
    return filled(a.shape, F(1))


@op("full_like")
def _full_like(a, value, **kw):
    return filled(a.shape, scalar(value))


@op("fill")
def _fill(a, value):
    return filled(a.shape, scalar(value) if not isinstance(value, np.ndarray) else value[()])


# ---------------------------------------------------------------------------------------------- reductions
@op("sum")
def _sum(a, dim=None, keepdim=False, dtype=None):
    a = arr(a)
    if a.ndim == 0:
        return a.copy()
    dims = _norm_dims(dim if dim not in ([], ()) else None, a.ndim)
    return np.asarray(np.sum(a, axis=dims, keepdims=keepdim), dtype=object)


@op("mean")
def _mean(a, dim=None, keepdim=False, dtype=None):
    a = arr(a)
    dims = _norm_dims(dim if dim not in ([], ()) else None, a.ndim)
    count = int(np.prod([a.shape[d] for d in dims])) if a.ndim else 1
    return _sum(a, dim, keepdim) * F(1, count)


# ------------------------------------------------------------------------------------------- linear algebra
#: exact multiply-adds of one large matmul between two polls of the deadline
MATMUL_CHUNK_WORK = 1 << 14


def matmul(a, b) -> np.ndarray:
    """Exact ``a @ b``; a large product is split into column (or row) blocks with deadline polls between them."""
    a, b = arr(a), arr(b)
    if a.ndim >= 2 and b.ndim >= 2:
        m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
        batch = int(np.prod(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) or (1,)))
        work = batch * m * k * n
        if work > 2 * MATMUL_CHUNK_WORK and max(m, n) > 1:
            along_b = n >= m
            step = max(1, MATMUL_CHUNK_WORK * (n if along_b else m) // work)
            parts = [_matmul(a, b[..., sl]) if along_b else _matmul(a[..., sl, :], b)
                     for sl in context.chunks(n if along_b else m, step)]
            return np.concatenate(parts, axis=-1 if along_b else -2)
    return _matmul(a, b)


def _matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    fast = fastexact.matmul(a, b)  # plain rationals: integer arithmetic, one normalisation per output entry
    if fast is None:  # rationals with intervals: exact endpoint products, one outward rounding per entry
        fast = fastexact.interval_matmul(a, b)
    return fast if fast is not None else np.asarray(np.matmul(a, b), dtype=object)


op("mm", "bmm", "matmul", "mv", "dot", "vdot", "inner")(lambda a, b: matmul(a, b))


@op("addmm", "addmv", "baddbmm")
def _addmm(bias, a, b, beta=1, alpha=1):
    out = matmul(a, b)
    if alpha != 1:
        out = out * scalar(alpha)
    return out + arr(bias) * scalar(beta) if beta != 0 else out


@op("linear")
def _linear(x, weight, bias=None):
    out = matmul(x, arr(weight).T)
    return out + arr(bias) if bias is not None else out


@op("convolution")
def _convolution(x, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    if transposed:
        from nsverify.oracle.ops_convt import conv_transpose  # it builds on this module's matmul

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
            sl = [slice(None), slice(None)] + [
                slice(pos[i] * stride[i], pos[i] * stride[i] + dilation[i] * (k[i] - 1) + 1, dilation[i])
                for i in range(nsp)
            ]
            cols.append(xs[tuple(sl)].reshape(N, -1))
        colmat = np.stack(cols, axis=2)  # (N, Cg*prod(k), P)
        res = matmul(ws[None], colmat)  # (N, og, P)
        out[:, g * og : (g + 1) * og] = res.reshape(N, og, *out_sp)
    if bias is not None:
        out = out + arr(bias).reshape((1, O) + (1,) * nsp)
    return out if batched else out[0]


def values(a: np.ndarray) -> np.ndarray:
    return objmap(val, a)
