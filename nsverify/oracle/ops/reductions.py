"""Exact selections beyond :mod:`.select` (issue 36): cumulative max/min (``cummax``, ``cummin``), ``aminmax``,
``nanmedian`` (with and without a dim) and ``scatter_reduce`` with ``amax``/``amin``.

Every output is chosen by :func:`nsverify.oracle.ops.select.select` among its candidates, so a tie is a site like
any max's: PyTorch's tie rule from the registry (keyed by the entry's name: ``cummax``, ``aminmax``,
``nanmedian``, ``scatter_reduce_amax`` ...) or the rule given in ``rules=`` in AD mode, a branch point over the
tied entries in pieces mode. The index outputs are the chosen entries' (cummax returns the last tied index, as
PyTorch does, through the registry's rule ``last``). Exact values have no NaN, so nanmedian is median here.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from nsverify import registry
from nsverify.errors import UnsupportedOpError
from nsverify.oracle import context
from nsverify.oracle.numbers import sign, val
from nsverify.oracle.ops.common import arr
from nsverify.oracle.ops.kinks import depends_on_w
from nsverify.oracle.ops.record import ExactOp
from nsverify.oracle.ops.select import _ad_rule, _median_all, _reduce_order, _reduce_select, select
from nsverify.registry import Rule

F = Fraction


def _cum(a, dim):
    """cummax / cummin along ``dim``: (values, indices)."""
    name = context.current().op_name  # cummax, cummin
    larger = name == "cummax"
    rule = _ad_rule(name)
    a = arr(a)
    if a.ndim == 0:
        return a.copy(), np.zeros((), dtype=np.int64)
    d = dim % a.ndim
    moved = np.moveaxis(a, d, -1)
    vals = np.empty(moved.shape, dtype=object)
    idx = np.zeros(moved.shape, dtype=np.int64)
    for pos in np.ndindex(*moved.shape[:-1]):
        row = list(moved[pos])
        for j in range(len(row)):
            vals[pos + (j,)], i = select(row[: j + 1], larger, name, rule, pos + (j,))
            idx[pos + (j,)] = _index_by_rule(row[: j + 1], i, rule)
    return np.moveaxis(vals, -1, d), np.moveaxis(idx, -1, d)


def _index_by_rule(cands, i, rule):
    """The index output at a tie among entries that do not depend on w (the reverse mode's plain numbers, where
    :func:`select` returns the first tied entry): the rule's entry, ``first`` or ``last`` -- the one PyTorch's
    backward then routes the gradient to. Entries that depend on w keep select's choice (AD's rule, or the
    branch of the piece)."""
    if rule.name not in ("first", "last") or any(depends_on_w(c) for c in cands):
        return i
    tied = [k for k, c in enumerate(cands) if sign(val(c) - val(cands[i])) == 0]
    return tied[0] if rule.name == "first" else tied[-1]


def _rule(key: str) -> Rule:
    """AD's tie rule for the registry op ``key``: the rule given for it in ``rules=``, else PyTorch's."""
    given = context.given_rule(key)
    return given if given is not None else registry.get(key).torch_rule


def _aminmax(a, dim=None, keepdim=False):
    a = arr(a)
    dims = tuple(range(a.ndim)) if dim is None else (dim,)
    rule = _ad_rule("aminmax")
    return (_reduce_select(a, dims, keepdim, False, "aminmax", rule),
            _reduce_select(a, dims, keepdim, True, "aminmax", rule))


def _nanmedian_all(a):
    return _median_all(a, key="nanmedian")


def _nanmedian_dim(a, dim, keepdim=False):
    return _reduce_order(a, dim, keepdim, lambda n: (n - 1) // 2, "nanmedian_dim")


def _scatter_reduce(self, dim, index, src, reduce, include_self=True):
    """scatter_reduce with ``amax`` / ``amin``: each output position selects among the entries scattered there
    (and self's entry with include_self); a position that receives nothing keeps self's entry."""
    if reduce not in ("amax", "amin"):
        raise UnsupportedOpError(f"scatter_reduce with reduce={reduce!r}: the exact oracle evaluates 'amax' and "
                                 "'amin' (the nonsmooth ones); write sum/prod/mean with index_add or a loop")
    name = f"scatter_reduce_{reduce}"
    rule = _rule(name)
    self_, src_ = arr(self), arr(src)
    ind = np.asarray(index)
    d = dim % max(self_.ndim, 1)
    cands: dict = {}
    for pos in np.ndindex(*ind.shape):
        target = pos[:d] + (int(ind[pos]),) + pos[d + 1:]
        cands.setdefault(target, []).append(src_[pos])
    out = self_.copy()
    for target, vals in cands.items():
        cs = ([self_[target]] if include_self else []) + vals
        out[target], _ = select(cs, reduce == "amax", name, rule, target)
    return out


def _index_reduce(self, dim, index, source, reduce, include_self=True):
    """index_reduce with ``amax`` / ``amin``: slice i of ``source`` along ``dim`` is reduced into slice index[i] of
    self; each position selects among what it receives (and self's entry with include_self)."""
    if reduce not in ("amax", "amin"):
        raise UnsupportedOpError(f"index_reduce with reduce={reduce!r}: the exact oracle evaluates 'amax' and "
                                 "'amin' (the nonsmooth ones); write prod/mean with index_add or a loop")
    name = f"index_reduce_{reduce}"
    rule = _rule(name)
    self_, src_ = arr(self), arr(source)
    d = dim % max(self_.ndim, 1)
    s_m, src_m = np.moveaxis(self_, d, 0), np.moveaxis(src_, d, 0)
    cands: dict = {}
    for i, t in enumerate(np.asarray(index).reshape(-1).tolist()):
        for pos in np.ndindex(*src_m.shape[1:]):
            cands.setdefault((int(t),) + pos, []).append(src_m[(i,) + pos])
    out = s_m.copy()
    for target, vals in cands.items():
        cs = ([s_m[target]] if include_self else []) + vals
        out[target], _ = select(cs, reduce == "amax", name, rule, target)
    return np.moveaxis(out, 0, d)


def _segments(n: int, lengths, offsets):
    """The [start, end) ranges of the segments (lengths or offsets given, as PyTorch accepts them)."""
    if lengths is not None:
        ls = [int(v) for v in np.asarray(lengths).reshape(-1).tolist()]
        starts = np.cumsum([0] + ls[:-1]).tolist()
        return [(int(a), int(a) + b) for a, b in zip(starts, ls)]
    if offsets is not None:
        off = [int(v) for v in np.asarray(offsets).reshape(-1).tolist()]
        return list(zip(off[:-1], off[1:]))
    raise UnsupportedOpError("segment_reduce needs lengths or offsets")


def _segment_reduce(data, reduce, lengths=None, indices=None, offsets=None, axis=0, unsafe=False, initial=None):
    """segment_reduce with ``max`` / ``min`` along ``axis``: each segment's output selects among its entries."""
    if reduce not in ("max", "min"):
        raise UnsupportedOpError(f"segment_reduce with reduce={reduce!r}: the exact oracle evaluates 'max' and "
                                 "'min' (the nonsmooth ones); write sum/mean/prod with index_add or a loop")
    name = f"segment_reduce_{reduce}"
    rule = _rule(name)
    x = np.moveaxis(arr(data), axis, 0)
    segs = _segments(x.shape[0], lengths, offsets)
    if any(a == b for a, b in segs):
        raise UnsupportedOpError("segment_reduce with an empty segment: its output is the initial value (or "
                                 "+-inf), not a selection; give every segment an entry")
    out = np.empty((len(segs),) + x.shape[1:], dtype=object)
    for k, (a, b) in enumerate(segs):
        for pos in np.ndindex(*x.shape[1:]):
            out[(k,) + pos], _ = select([x[(j,) + pos] for j in range(a, b)], reduce == "max", name, rule,
                                        (k,) + pos)
    return np.moveaxis(out, 0, axis)


def _segment_reduce_backward(grad, output, data, reduce, lengths=None, offsets=None, axis=0, initial=None):
    """PyTorch's backward of max/min: each segment's gradient split evenly over its entries equal to the output."""
    x = np.moveaxis(arr(data), axis, 0)
    if any(depends_on_w(v) for v in x.reshape(-1)):
        raise UnsupportedOpError("the derivative of segment_reduce read inside fn (create_graph, a gradient "
                                 "penalty) is a step at ties; the exact oracle does not follow it")
    g, o = np.moveaxis(arr(grad), axis, 0), np.moveaxis(arr(output), axis, 0)
    out = np.empty(x.shape, dtype=object)
    out.fill(F(0))
    for k, (a, b) in enumerate(_segments(x.shape[0], lengths, offsets)):
        for pos in np.ndindex(*x.shape[1:]):
            hit = [j for j in range(a, b) if sign(val(x[(j,) + pos]) - val(o[(k,) + pos])) == 0]
            for j in hit:
                out[(j,) + pos] = g[(k,) + pos] / len(hit)
    return np.moveaxis(out, 0, axis)


RECORDS = (
    ExactOp(("cummax", "cummin"), _cum),
    ExactOp(("aminmax",), _aminmax),
    ExactOp(("nanmedian.default",), _nanmedian_all),
    ExactOp(("nanmedian.dim",), _nanmedian_dim),
    ExactOp(("scatter_reduce.two",), _scatter_reduce),
    ExactOp(("index_reduce",), _index_reduce),
    ExactOp(("segment_reduce",), _segment_reduce, backward_names=("_segment_reduce_backward",),
            backward=_segment_reduce_backward),
)
