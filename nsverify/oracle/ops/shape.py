"""Exact copies, views, shapes, indexing and tensor creation: ops that move or make entries, never combine them.

Views (``view``, ``select``, ``slice``, ``alias`` ...) return numpy views, so in-place writes through them reach the
original; ``select_backward`` and ``slice_backward`` (the backward ops of ``select`` and ``slice``) sit with their
forward ops.  ``_local_scalar_dense`` (``.item()``) turns a value into a Python number only when it does not depend
on w: Python branching on values that do is analysed through the comparison that produced them.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import torch

from nsverify.errors import DataDependentControlFlowError
from nsverify.oracle.numbers import Aff
from nsverify.oracle.ops.common import arr, filled, scalar
from nsverify.oracle.ops.record import ExactOp

F = Fraction


# --------------------------------------------------------------------------------------- copies and shapes
def _identity(a, *args, **kwargs):
    dtype = kwargs.get("dtype", next((x for x in args if isinstance(x, torch.dtype)), None))
    if isinstance(a, np.ndarray) and a.dtype != object and dtype is not None and dtype.is_floating_point:
        # an integer/bool array cast to a float dtype (e.g. (w > 0).sum().double()): exact Fractions, float-typed
        out = np.empty(a.shape, dtype=object)
        out.reshape(-1)[:] = [Fraction(int(x)) for x in a.reshape(-1).tolist()]
        return out
    return a.copy() if isinstance(a, np.ndarray) else a


def _alias(a, *args, **kwargs):
    """Same storage (a numpy view), so that in-place writes through an alias reach the original."""
    return a.view() if isinstance(a, np.ndarray) else a


def _copy_(dst, src, non_blocking=False):
    return np.broadcast_to(arr(src), dst.shape).copy()


def _view(a, shape):
    return a.reshape(tuple(shape))


def _flatten(a, start_dim=0, end_dim=-1):
    s = a.shape
    start, end = start_dim % max(len(s), 1), end_dim % max(len(s), 1)
    return a.reshape(s[:start] + (-1,) + s[end + 1 :])


def _t(a):
    return a.T if a.ndim == 2 else a


def _transpose(a, d0, d1):
    return np.swapaxes(a, d0, d1)


def _permute(a, dims):
    return np.transpose(a, [d % a.ndim for d in dims])


def _expand(a, size, implicit=False):
    size = list(size)
    off = len(size) - a.ndim
    shape = [a.shape[i - off] if s == -1 else s for i, s in enumerate(size)]
    return np.broadcast_to(a, shape).copy()


def _unsqueeze(a, dim):
    return np.expand_dims(a, dim % (a.ndim + 1))


def _squeeze(a, dim=None):
    if dim is None:
        return np.squeeze(a)
    dims = [d % max(a.ndim, 1) for d in ([dim] if isinstance(dim, int) else dim)]
    dims = tuple(d for d in dims if a.ndim and a.shape[d] == 1)
    return np.squeeze(a, axis=dims) if dims else a


def _select(a, dim, index):
    """A numpy view (basic indexing), so that in-place writes into the selection reach the original."""
    sl = [slice(None)] * a.ndim
    index = index % a.shape[dim]
    sl[dim] = slice(index, index + 1)
    return a[tuple(sl)].squeeze(axis=dim)


def _slice(a, dim=0, start=None, end=None, step=1):
    sl = [slice(None)] * a.ndim
    sl[dim] = slice(start, end, step)
    return a[tuple(sl)]


def _diagonal(a, offset=0, dim1=0, dim2=1):
    """The diagonal of dims ``dim1``, ``dim2`` (``offset`` > 0: above it) as the last dimension -- torch's and
    numpy's convention alike.  A view, writable when ``a`` is, so that in-place writes through it reach ``a``
    (``torch.func.jacrev`` fills its basis with ``diagonal().fill_(1)``); numpy's own view is read-only."""
    v = np.diagonal(a, offset, dim1 % a.ndim, dim2 % a.ndim)
    if a.flags.writeable:
        v.flags.writeable = True
    return v


def _diagonal_backward(grad, input_sizes, offset, dim1, dim2):
    out = filled(tuple(input_sizes), Fraction(0))
    _diagonal(out, offset, dim1, dim2)[...] = arr(grad)
    return out


def _index(a, indices):
    idx = tuple(
        slice(None) if i is None else (i.astype(bool) if i.dtype == bool else i.astype(np.int64))
        for i in indices
    )
    return a[idx]


def _cat(tensors, dim=0):
    ts = [arr(t) for t in tensors if not (isinstance(t, np.ndarray) and t.ndim == 1 and t.size == 0)]
    return np.concatenate(ts, axis=dim)


def _stack(tensors, dim=0):
    return np.stack([arr(t) for t in tensors], axis=dim)


def _split(a, sizes, dim=0):
    n = a.shape[dim]
    if isinstance(sizes, int):
        sizes = [sizes] * (n // sizes) + ([n % sizes] if n % sizes else [])
    return list(np.split(a, np.cumsum(sizes)[:-1], axis=dim))


def _unbind(a, dim=0):
    return [np.take(a, i, axis=dim) for i in range(a.shape[dim])]


def _repeat(a, repeats):
    """torch's ``repeat`` (numpy's ``tile``: extra leading repeats add dimensions); a copy, never a view."""
    return np.tile(a, tuple(int(r) for r in repeats)).copy()


def _flip(a, dims):
    return np.flip(a, axis=tuple(dims)).copy()



def _zeros_like(a, **kw):
    return filled(a.shape, F(0))


def _ones_like(a, **kw):
    return filled(a.shape, F(1))


def _full_like(a, value, **kw):
    return filled(a.shape, scalar(value))


def _fill(a, value):
    return filled(a.shape, scalar(value) if not isinstance(value, np.ndarray) else value[()])




# ------------------------------------------------------- select/slice backward ops, predicates, indexing
def _select_backward(grad, input_sizes, dim, index):
    out = filled(tuple(input_sizes), F(0))
    sl = [slice(None)] * len(input_sizes)
    sl[dim] = index
    g = arr(grad)
    out[tuple(sl)] = g if g.ndim else g[()]
    return out


def _slice_backward(grad, input_sizes, dim, start, end, step):
    out = filled(tuple(input_sizes), F(0))
    sl = [slice(None)] * len(input_sizes)
    sl[dim] = slice(start, end, step)
    out[tuple(sl)] = arr(grad)
    return out


def _isnan(a):  # exact values are finite by construction (a singular point's NaN/inf is refused)
    _no_markers(a, "isnan/isinf")
    return np.zeros(np.shape(a), dtype=bool)


def _isfinite(a):
    _no_markers(a, "isfinite")
    return np.ones(np.shape(a), dtype=bool)


def _no_markers(a, what):
    if isinstance(a, np.ndarray) and a.dtype == object:
        from nsverify.oracle.ops.singular import refuse_markers

        refuse_markers(a, what)


def _new_zeros(a, size, **kw):
    return filled(tuple(size), F(0))


def _new_ones(a, size, **kw):
    return filled(tuple(size), F(1))


def _new_full(a, size, fill_value, **kw):
    return filled(tuple(size), scalar(fill_value))


def _masked_fill(a, mask, value):
    v = scalar(value) if not isinstance(value, np.ndarray) else value[()]
    return np.asarray(np.where(np.asarray(mask).astype(bool), v, arr(a)), dtype=object)


def _scatter(a, dim, index, src=None, value=None, reduce=None):
    out = arr(a).copy()
    index = np.asarray(index)
    if src is not None and not isinstance(src, np.ndarray):  # scatter.value(self, dim, index, value), positional
        src, value = None, src
    s = arr(src) if src is not None else None
    for pos in np.ndindex(*index.shape):
        tgt = list(pos)
        tgt[dim] = int(index[pos])
        out[tuple(tgt)] = s[pos] if s is not None else scalar(value)
    return out


def _scatter_add(a, dim, index, src):
    out = arr(a).copy()
    index = np.asarray(index)
    s = arr(src)
    for pos in np.ndindex(*index.shape):
        tgt = list(pos)
        tgt[dim] = int(index[pos])
        out[tuple(tgt)] = out[tuple(tgt)] + s[pos]
    return out


def _index_select(a, dim, index):
    """The slices ``index`` of ``a`` along ``dim`` (index_reduce's backward formula reads them)."""
    a = arr(a)
    return np.take(a, np.asarray(index, dtype=np.int64).reshape(-1), axis=dim % max(a.ndim, 1)) if a.ndim else a


def _index_add(a, dim, index, source, alpha=1):
    """``a`` with ``alpha`` times slice i of ``source`` added to its slice index[i] along ``dim``."""
    a = arr(a)
    if a.ndim == 0:
        return a + scalar(alpha) * arr(source).reshape(())
    d = dim % a.ndim
    out, src = np.moveaxis(a.copy(), d, 0), np.moveaxis(arr(source), d, 0)
    k = scalar(alpha)
    for i, t in enumerate(np.asarray(index, dtype=np.int64).reshape(-1).tolist()):
        out[t] = out[t] + (src[i] if k == 1 else k * src[i])
    return np.moveaxis(out, 0, d)


def _index_fill(a, dim, index, value):
    """``a`` with its slices index along ``dim`` set to ``value`` (a number or a 0-d tensor)."""
    a = arr(a)
    if a.ndim == 0:
        return arr(value).reshape(()).copy()
    out = np.moveaxis(a.copy(), dim % a.ndim, 0)
    v = arr(value).reshape(())[()]
    for t in np.asarray(index, dtype=np.int64).reshape(-1).tolist():
        out[t] = v
    return np.moveaxis(out, 0, dim % a.ndim)


def _gather(a, dim, index, sparse_grad=False):
    a = arr(a)
    index = np.asarray(index)
    out = np.empty(index.shape, dtype=object)
    for pos in np.ndindex(*index.shape):
        src = list(pos)
        src[dim] = int(index[pos])
        out[pos] = a[tuple(src)]
    return out


def _index_put(a, indices, values, accumulate=False):
    out = arr(a).copy()
    idx = tuple(slice(None) if i is None else np.asarray(i) for i in indices)
    if accumulate:
        np.add.at(out, idx, arr(values))
    else:
        out[idx] = arr(values)
    return out


def _unsafe_index_put(a, indices, values, accumulate=False):
    return _index_put(a, indices, values, accumulate)


def _local_scalar(a):
    x = a.reshape(-1)[0] if isinstance(a, np.ndarray) else a
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    if isinstance(x, (int, np.integer)):
        return int(x)
    if isinstance(x, Aff):
        raise DataDependentControlFlowError(
            "the program turns a value that depends on w into a Python number (.item(), float(), int() or "
            "indexing by a tensor value), so the exact analysis cannot follow it. Keep it a tensor: use "
            "torch.where(cond, a, b) or torch.maximum(a, b) instead of Python arithmetic on .item()."
        )
    return float(x)


def _shape(names, fn, nodes=(), **kw):
    return ExactOp(names, fn, analytic=True, nodes=nodes, **kw)


RECORDS = (
    _shape(("clone", "lift_fresh_copy", "contiguous", "_to_copy", "to", "_to_dtype", "positive", "resolve_conj",
            "resolve_neg"), _identity, ("CloneBackward0", "ToCopyBackward0")),
    _shape(("detach", "alias", "lift_fresh"), _alias, ("AliasBackward0",)),
    ExactOp(("copy_",), _copy_),
    _shape(("view", "_unsafe_view", "reshape", "view_copy"), _view, ("ViewBackward0", "UnsafeViewBackward0")),
    _shape(("flatten",), _flatten),
    _shape(("t",), _t, ("TBackward0",)),
    _shape(("transpose",), _transpose, ("TransposeBackward0", "TransposeBackward1")),
    _shape(("permute",), _permute, ("PermuteBackward0",)),
    _shape(("expand",), _expand, ("ExpandBackward0",)),
    _shape(("unsqueeze",), _unsqueeze, ("UnsqueezeBackward0",)),
    _shape(("squeeze",), _squeeze, tuple(f"SqueezeBackward{i}" for i in range(5))),
    _shape(("select",), _select, ("SelectBackward0",),
           backward_names=("select_backward",), backward=_select_backward),
    _shape(("slice",), _slice, ("SliceBackward0",), backward_names=("slice_backward",), backward=_slice_backward),
    _shape(("diagonal",), _diagonal, backward_names=("diagonal_backward",), backward=_diagonal_backward),
    _shape(("index",), _index, ("IndexBackward0",)),
    _shape(("cat",), _cat, ("CatBackward0",)),
    _shape(("stack",), _stack, ("StackBackward0",)),
    _shape(("split", "split_with_sizes"), _split, ("SplitBackward0", "SplitWithSizesBackward0")),
    _shape(("unbind",), _unbind, ("UnbindBackward0",)),
    _shape(("repeat",), _repeat, ("RepeatBackward0",)),
    _shape(("flip",), _flip, ("FlipBackward0",)),
    _shape(("gather",), _gather, ("GatherBackward0",)),
    # masked_fill with a mask that does not depend on w (optrace's watcher declines one that does)
    _shape(("masked_fill",), _masked_fill, ("MaskedFillBackward0",)),
    ExactOp(("zeros_like",), _zeros_like),
    ExactOp(("ones_like",), _ones_like),
    ExactOp(("full_like",), _full_like),
    ExactOp(("fill",), _fill),
    ExactOp(("new_zeros", "new_empty"), _new_zeros),
    ExactOp(("new_ones",), _new_ones),
    ExactOp(("new_full",), _new_full),
    ExactOp(("isnan", "isinf", "isneginf", "isposinf"), _isnan),
    ExactOp(("isfinite",), _isfinite),
    ExactOp(("scatter",), _scatter),
    ExactOp(("scatter_add",), _scatter_add),
    ExactOp(("index_select",), _index_select, analytic=True, nodes=("IndexSelectBackward0",)),
    ExactOp(("index_add",), _index_add, analytic=True, nodes=("IndexAddBackward0",)),
    ExactOp(("index_fill",), _index_fill),
    ExactOp(("index_put",), _index_put),
    ExactOp(("_unsafe_index_put",), _unsafe_index_put),
    ExactOp(("_local_scalar_dense",), _local_scalar),
)
