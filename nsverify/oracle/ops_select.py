"""Exact selections: max/min (full, dim), amax/amin, argmax, maximum/minimum, tensor-bound clamp, max_pool and
adaptive max pool windows, sort/topk.

At a tie, ``"ad"`` mode applies PyTorch's tie rule (from the registry) or the convention given for the op (keyed
by the registry's op name: ``max``, ``max_dim``, ``maximum``, ``max_pool2d``, ...); ``"pieces"`` mode makes
the tie a branch point whose options are the tied entries, grouped when their local first-order data coincide
(Park et al.'s T_j).
"""
from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np

from nsverify.errors import UnsupportedOpError
from nsverify.oracle import context
from nsverify.oracle.context import Site, float_pair
from nsverify.oracle.numbers import Aff, grad, gsub, is_lin, mk, sign, straddle_error, val
from nsverify.oracle.ops_kinks import elementwise_op
from nsverify.oracle.ops_linear import arr, filled
from nsverify.oracle.tensor import op, scalar
from nsverify.registry import Rule, adaptive_windows, clamp_for, op_key, parse_rule, pool_out_size, selection_rule_for

F = Fraction
_FIRST = parse_rule("first")


def _ad_rule(key: str, aten: str | None = None) -> Rule:
    """AD's tie rule for op ``key`` (a registry name): the convention given for it, else PyTorch's rule for the
    ATen op ``aten`` (default: ``key``) from the registry."""
    conv = context.convention(key)
    return conv if conv is not None else selection_rule_for(aten or key)


@op("clamp", "clip", "clamp_min", "clamp_max")
def _clamp(a, min=None, max=None):
    name = context.current().op_name
    if name == "clamp_max":
        min, max = None, min
    if isinstance(min, np.ndarray) or isinstance(max, np.ndarray):
        lo = arr(min) if min is not None else None
        hi = arr(max) if max is not None else None
        out = arr(a)
        if lo is not None:
            out = _select_pairwise(out, lo, "clamp_min", larger=True)
        if hi is not None:
            out = _select_pairwise(out, hi, "clamp_max", larger=False)
        return out
    return elementwise_op(clamp_for(None if min is None else scalar(min), None if max is None else scalar(max)), a)


# ------------------------------------------------------------------------------------------------- selections
def _argbest(cands: list, larger: bool, opname: str):
    """Index list of the tied best entries (exact), raising when intervals cannot decide."""
    best = [0]
    for i in range(1, len(cands)):
        s = sign(val(cands[i]) - val(cands[best[0]]))
        if s is None:
            raise straddle_error(opname)
        if not larger:
            s = -s
        if s > 0:
            best = [i]
        elif s == 0:
            best.append(i)
    return best


def _key(x):
    g = grad(x)
    return tuple(sorted((k, v) for k, v in g.items())), is_lin(x)


def _float_best(fvals, larger):
    m = max(fvals) if larger else min(fvals)
    return [i for i, x in enumerate(fvals) if x == m]


def select(cands: list, larger: bool, opname: str, rule: Rule, loc, fvals=None):
    """Choose the max (or min) of ``cands``: returns (output entry, chosen index).

    ``rule``: AD's tie rule (resolved by the caller, see :func:`_ad_rule`); ``fvals``: the same candidates as
    computed in floats (for float-tie detection), or None.
    """
    ctx = context.current()
    tied = _argbest(cands, larger, opname)
    depends = any(isinstance(cands[i], Aff) for i in range(len(cands)))
    ftied = _float_best(fvals, larger) if fvals is not None and depends else None
    if len(tied) == 1:
        if ftied is not None and len(ftied) > 1:
            ctx.note_float_only(opname, loc, fvals[ftied[0]], val(cands[tied[0]]))
        return cands[tied[0]], tied[0]
    if not any(isinstance(cands[i], Aff) for i in tied):  # a tie between constants: nothing flows
        return cands[tied[0]], tied[0]
    # group tied entries with identical local first-order data (Park's T_j)
    groups: dict = {}
    for i in tied:
        groups.setdefault(_key(cands[i]), []).append(i)
    reps = [ix[0] for ix in groups.values()]
    affine = all(is_lin(cands[i]) for i in tied)
    value = val(cands[tied[0]])
    site = Site(
        opname,
        ctx.call,
        loc,
        value,
        affine=affine,
        slopes=tuple(grad(cands[i]) for i in reps),
        extra={"tied": tied},
        float_tie=None if ftied is None else ftied == tied,
    )
    if ctx.mode == "ad":
        ctx.note(site)
        return _ad_mix(cands, tied, rule)
    if len(reps) == 1:
        ctx.note(site)
        return cands[tied[0]], tied[0]
    sgn = 1 if larger else -1
    options = []
    for r in reps:
        rows = [
            {k: sgn * v for k, v in gsub(grad(cands[r]), grad(cands[o])).items()} for o in reps if o != r
        ]
        options.append((f"#{r}", rows))
    single = {"first": tied[0], "last": tied[-1], "inside": 0}.get(rule.name)  # AD takes one entry's piece
    if single is not None:
        site.ad_option = next(j for j, ix in enumerate(groups.values()) if single in ix)
    choice = ctx.branch(site, options)
    i = reps[choice]
    return cands[i], i


def _ad_mix(cands, tied, rule: Rule):
    """AD at a tie under ``rule``: one entry's local function (first, last; inside: the clamped input, candidate
    0), else the weights :meth:`Rule.tie_weights` gives to the tied entries (even, hybrid)."""
    if rule.name in ("first", "last"):
        i = tied[0] if rule.name == "first" else tied[-1]
        return cands[i], i
    if rule.name == "returned":
        raise UnsupportedOpError(
            "the tie rule 'returned' needs the index PyTorch returned, which the exact oracle does not see; give "
            "another rule (first, last, even, hybrid=<beta>) in conventions")
    w = rule.tie_weights(tied, inside=0 if rule.name == "inside" else None)
    value = val(cands[tied[0]])
    g: dict = {}
    for i, c in w.items():
        for k, v in grad(cands[i]).items():
            g[k] = g.get(k, 0) + c * v
    g = {k: v for k, v in g.items() if v != 0}
    return mk(value, g, all(is_lin(cands[i]) for i in tied)), tied[0]


def _reduce_select(a, dims, keepdim, larger, opname, rule, want_index=False):
    a = arr(a)
    if a.ndim == 0:
        return (a.copy(), np.zeros((), dtype=np.int64)) if want_index else a.copy()
    dims = tuple(sorted(d % a.ndim for d in dims))
    rest = [d for d in range(a.ndim) if d not in dims]
    moved = np.transpose(a, rest + list(dims))
    outer_shape = moved.shape[: len(rest)]
    flat = moved.reshape(outer_shape + (-1,))
    fa = context.current().float_arg(0)
    fflat = None
    if fa is not None and fa.shape == a.shape:
        fflat = np.transpose(fa, rest + list(dims)).reshape(outer_shape + (-1,))
    out = np.empty(outer_shape, dtype=object)
    idx = np.zeros(outer_shape, dtype=np.int64)
    for pos in np.ndindex(*outer_shape):
        fv = None if fflat is None else list(fflat[pos])
        out[pos], idx[pos] = select(list(flat[pos]), larger, opname, rule, pos, fv)
    if keepdim:
        for d in dims:
            out = np.expand_dims(out, d)
            idx = np.expand_dims(idx, d)
    return (out, idx) if want_index else out


@op("max.default", "min.default")
def _max_all(a):
    name = context.current().op_name
    return _reduce_select(a, range(arr(a).ndim), False, name == "max", name, _ad_rule(name))


@op("amax", "amin")
def _amax(a, dim=(), keepdim=False):
    name = context.current().op_name
    a = arr(a)
    dims = tuple(dim) if dim not in (None, (), []) else tuple(range(a.ndim))
    return _reduce_select(a, dims, keepdim, name == "amax", name, _ad_rule(name))


@op("max.dim", "min.dim")
def _max_dim(a, dim, keepdim=False):
    key = op_key(context.current().op_name + ".dim")  # max_dim, min_dim
    return tuple(_reduce_select(a, (dim,), keepdim, key == "max_dim", key, _ad_rule(key), want_index=True))


@op("argmax", "argmin")
def _argmax(a, dim=None, keepdim=False):
    name = context.current().op_name
    a = arr(a)
    if dim is None:
        _, i = _reduce_select(a.reshape(-1), (0,), False, name == "argmax", name, _FIRST, want_index=True)
        return i
    return _reduce_select(a, (dim,), keepdim, name == "argmax", name, _FIRST, want_index=True)[1]


def _select_pairwise(a, b, opname, larger):
    a, b = np.broadcast_arrays(arr(a), arr(b))
    ctx = context.current()
    fl = float_pair(a.shape, ctx.float_arg(0), ctx.float_arg(1))
    out = np.empty(a.shape, dtype=object)
    clamp = opname in ("clamp_min", "clamp_max")
    rule = None if clamp else _ad_rule(opname)
    for pos in np.ndindex(*a.shape):
        if clamp:  # tensor-bound clamp: the gradient follows the input a
            out[pos], _ = _clamp_pair(a[pos], b[pos], larger, opname, pos)
        else:
            fv = None if fl is None else [fl[0][pos], fl[1][pos]]
            out[pos], _ = select([a[pos], b[pos]], larger, opname, rule, pos, fv)
    return out


def _clamp_pair(x, bound, larger, opname, pos):
    """One entry of a tensor-bound clamp: PyTorch's rule (``inside``: x wins a tie with its bound)."""
    ctx = context.current()
    if context.convention("clamp_tensor") is not None:
        raise UnsupportedOpError("the exact oracle applies PyTorch's rule to clamp with tensor bounds; drop the "
                                 "clamp_tensor convention")
    if ctx.mode == "ad":
        s = sign(val(x) - val(bound))
        if s is None:
            raise straddle_error(opname)
        if s == 0:
            ctx.note(Site(opname, ctx.call, pos, val(x), affine=is_lin(x) and is_lin(bound)))
            return x, 0
        return (x, 0) if (s > 0) == larger else (bound, 1)
    return select([x, bound], larger, opname, selection_rule_for("clamp_tensor"), pos)


@op("maximum", "fmax")
def _maximum(a, b):
    return _select_pairwise(a, b, "maximum", True)


@op("minimum", "fmin")
def _minimum(a, b):
    return _select_pairwise(a, b, "minimum", False)


def pool_windows(name: str, shape, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    """Yield (output index, [(input index, flat spatial index)]) of a max pool, windows in row-major order."""
    nsp = 1 if "1d" in name else 3 if "3d" in name else 2

    def tup(v, dflt):
        if isinstance(v, (list, tuple)) and len(v):
            return tuple(v) * (nsp if len(v) == 1 else 1)
        return (v,) * nsp if isinstance(v, int) else dflt

    k = tup(kernel_size, None)
    s = tup(stride, k)
    p = tup(padding, (0,) * nsp)
    dl = tup(dilation, (1,) * nsp)
    lead, sp = tuple(shape[:-nsp]), tuple(shape[-nsp:])
    out_sp = tuple(pool_out_size(sp[i], k[i], s[i], p[i], dl[i], ceil_mode) for i in range(nsp))
    strides_in = np.cumprod((1,) + sp[::-1])[:-1][::-1]
    for L in np.ndindex(*lead):
        for o in np.ndindex(*out_sp):
            win = []
            for kk in np.ndindex(*k):
                q = [o[i] * s[i] - p[i] + kk[i] * dl[i] for i in range(nsp)]
                if all(0 <= q[i] < sp[i] for i in range(nsp)):
                    win.append((L + tuple(q), int(sum(q[i] * strides_in[i] for i in range(nsp)))))
            yield L + o, win
    return lead + out_sp


def pool_out_shape(name, shape, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    gen = pool_windows(name, shape, kernel_size, stride, padding, dilation, ceil_mode)
    while True:
        try:
            next(gen)
        except StopIteration as e:
            return e.value


@op(
    "max_pool2d_with_indices",
    "max_pool1d_with_indices",
    "max_pool3d_with_indices",
    "max_pool2d",
    "max_pool1d",
)
def _max_pool(x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    name = context.current().op_name
    key = op_key(name)  # max_pool1d, max_pool2d (also ATen's 3-d pool)
    x = arr(x)
    oshape = pool_out_shape(name, x.shape, kernel_size, stride, padding, dilation, ceil_mode)
    out = np.empty(oshape, dtype=object)
    idx = np.zeros(oshape, dtype=np.int64)
    rule = _ad_rule(key, name)
    fx = context.current().float_arg(0)
    if fx is not None and fx.shape != x.shape:
        fx = None
    for pos, win in pool_windows(name, x.shape, kernel_size, stride, padding, dilation, ceil_mode):
        cands = [x[q] for q, _ in win]
        fv = [fx[q] for q, _ in win] if fx is not None else None
        e, j = select(cands, True, key, rule, pos, fv)
        out[pos], idx[pos] = e, win[j][1]
    if name.endswith("with_indices"):
        return out, idx
    return out


def adaptive_pool_windows(shape, output_size):
    """Yield (output index, [(input index, flat spatial index)]) of an adaptive max pool (1-d or 2-d)."""
    nsp = len(output_size)
    lead, sp = tuple(shape[:-nsp]), tuple(shape[-nsp:])
    wins = [adaptive_windows(sp[i], output_size[i]) for i in range(nsp)]
    strides_in = np.cumprod((1,) + sp[::-1])[:-1][::-1]
    for L in np.ndindex(*lead):
        for o in np.ndindex(*output_size):
            win = []
            for q in itertools.product(*[wins[i][o[i]] for i in range(nsp)]):
                win.append((L + tuple(q), int(sum(q[i] * strides_in[i] for i in range(nsp)))))
            yield L + o, win


@op("adaptive_max_pool2d", "adaptive_max_pool1d")
def _adaptive_max_pool(x, output_size):
    x = arr(x)
    output_size = tuple(output_size)
    shape = x.shape[: x.ndim - len(output_size)] + output_size
    out = np.empty(shape, dtype=object)
    idx = np.zeros(shape, dtype=np.int64)
    key = op_key(context.current().op_name)  # adaptive_max_pool2d (1-d too)
    rule = _ad_rule(key)
    fx = context.current().float_arg(0)
    if fx is not None and fx.shape != x.shape:
        fx = None
    for pos, win in adaptive_pool_windows(x.shape, output_size):
        fv = [fx[q] for q, _ in win] if fx is not None else None
        e, j = select([x[q] for q, _ in win], True, key, rule, pos, fv)
        out[pos], idx[pos] = e, win[j][1]
    return out, idx


@op("sort")
def _sort(a, dim=-1, descending=False, stable=False):
    return _sort_impl(a, dim, descending, None)


@op("topk")
def _topk(a, k, dim=-1, largest=True, sorted=True):
    return _sort_impl(a, dim, largest, k)


def _sort_impl(a, dim, descending, k):
    """Sort along ``dim``; tied entries with distinct local functions are ordered by the enumerator."""
    a = arr(a)
    a_m = np.moveaxis(a, dim, -1)
    n = a_m.shape[-1]
    kk = n if k is None else k
    out = np.empty(a_m.shape[:-1] + (kk,), dtype=object)
    idx = np.zeros(a_m.shape[:-1] + (kk,), dtype=np.int64)
    key = "sort" if k is None else "topk"
    rule = _ad_rule(key)
    if rule.name == "returned":  # topk: the oracle does not see PyTorch's indices; ties go by index (a piece)
        rule = _FIRST
    for pos in np.ndindex(*a_m.shape[:-1]):
        remaining = list(range(n))
        for r in range(kk):
            cands = [a_m[pos + (i,)] for i in remaining]
            e, j = select(cands, descending, key, rule, pos + (r,))
            out[pos + (r,)], idx[pos + (r,)] = e, remaining[j]
            remaining.pop(j)
    return np.moveaxis(out, -1, dim), np.moveaxis(idx, -1, dim)


# ------------------------------------------------------------------------------------- max pool (reverse mode)
@op("max_pool2d_with_indices_backward", "max_pool3d_with_indices_backward")
def _max_pool_backward(grad, x, kernel_size, stride, padding, dilation, ceil_mode, indices):
    name = context.current().op_name.replace("_with_indices_backward", "")
    x, g = arr(x), arr(grad)
    out = filled(x.shape, F(0))
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
        raise UnsupportedOpError(
            "adaptive_max_pool2d: only the native (first index) convention is supported in reverse mode; use "
            "exact_gradient (forward mode) for other conventions")
    out = filled(x.shape, F(0))
    nsp = 2
    lead = x.shape[:-nsp]
    flat_out = out.reshape(lead + (-1,))
    ind = np.asarray(indices)
    for pos in np.ndindex(*g.shape):
        L = pos[:-nsp]
        flat_out[L + (int(ind[pos]),)] = flat_out[L + (int(ind[pos]),)] + g[pos]
    return flat_out.reshape(x.shape)
