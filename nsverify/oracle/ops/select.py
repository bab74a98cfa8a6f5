"""Exact selections: max/min (full, dim), amax/amin, argmax, maximum/minimum, tensor-bound clamp, max_pool and
adaptive max pool windows (with their backward ops), sort/topk/kthvalue/median/mode.

At a tie, ``"ad"`` mode applies PyTorch's tie rule (from the registry) or the convention given for the op (keyed
by the registry's op name: ``max``, ``max_dim``, ``maximum``, ``max_pool2d``, ...); ``"pieces"`` mode makes
the tie a branch point whose options are the tied entries, grouped when their local first-order data coincide
(Park et al.'s T_j).
"""
from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np

from nsverify.errors import InexactError, UnsupportedOpError
from nsverify.oracle import context
from nsverify.oracle.context import Site, float_pair
from nsverify.oracle.numbers import (
    Aff,
    Jet,
    JetUndecided,
    grad,
    gsub,
    is_exact,
    is_lin,
    jet_sign,
    mk,
    sign,
    straddle_error,
    val,
)
from nsverify.oracle.ops.common import arr, filled, float_input, float_output, scalar
from nsverify.oracle.ops.kinks import elementwise_op
from nsverify.oracle.ops.record import ExactOp
from nsverify.registry import (
    Rule,
    adaptive_windows,
    clamp_for,
    op_key,
    parse_rule,
    selection_rule_for,
    torch_rule,
)
from nsverify.registry.windows import pool_window_table

F = Fraction


def _ad_rule(key: str, aten: str | None = None) -> Rule:
    """AD's tie rule for op ``key`` (a registry name): the convention given for it, else PyTorch's rule for the
    ATen op ``aten`` (default: ``key``) from the registry."""
    conv = context.given_rule(key)
    return conv if conv is not None else selection_rule_for(aten or key)


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
_RETURNED = parse_rule("returned")


def _index_rule(key: str) -> Rule:
    """AD's tie rule for an op that returns indices (max/min with dim, argmax, sort, topk, kthvalue, median with
    dim, mode, max pools): the convention given for it, else ``returned`` -- the indices PyTorch's float run
    returned, never an assumed rule."""
    conv = context.given_rule(key)
    return conv if conv is not None else _RETURNED


class Returned:
    """What the float run of one selection returned: ``index`` (the position among the candidates PyTorch
    returned, or None) and ``fvals`` (the candidates' values in the float run, or None)."""

    __slots__ = ("index", "fvals", "avoid")

    def __init__(self, index=None, fvals=None, avoid=None):
        self.index = None if index is None else int(index)
        self.fvals = fvals
        self.avoid = avoid  # pieces mode, a rank before kthvalue's: the entry PyTorch returns later (keep it)

    def valid(self, cands, tied) -> bool:
        """Is PyTorch's choice a choice at *this* exact tie?  When the float run saw the same tie -- the tied
        entries' floats equal their exact value and every other entry lies strictly on the same side of it in
        floats as exactly -- its comparisons were the exact ones, so the index it returned is one of ``tied``
        and is the choice PyTorch makes at the exact tie.  An irrational tied value (behind a normalisation's
        1/sqrt(var + eps)) has no float equal to it: there the tied entries' floats must equal one another, and
        every other entry must lie strictly on the same side of that common float as it lies of the exact value
        (the kernel's comparisons with the maximum then come out as the exact ones)."""
        if self.index is None or self.fvals is None or self.index not in tied or len(self.fvals) != len(cands):
            return False
        v = val(cands[tied[0]])
        ref = v if is_exact(v) else F(float(self.fvals[tied[0]]))
        for i, (c, f) in enumerate(zip(cands, self.fvals)):
            fx = F(float(f))
            if i in tied:
                if fx != ref:
                    return False
            elif sign(fx - ref) != sign(val(c) - v) or sign(fx - ref) in (0, None):
                return False
        return True


_NONE = Returned()


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
    """The local first-order data of a tied entry (its gradient; the tied value is common).  Entries that
    differ only at second order (w0^2 against 0) share it: every nearby gradient is the same either way."""
    g = grad(x)
    return tuple(sorted((k, v) for k, v in g.items()))


def _float_best(fvals, larger):
    m = max(fvals) if larger else min(fvals)
    return [i for i, x in enumerate(fvals) if x == m]


def _returned_choice(opname, cands, tied, ret: Returned, needed: bool):
    """The tied entry PyTorch's float run chose, when it can be read (:meth:`Returned.valid`).  ``needed``: the
    tie matters (entries with different local derivatives); then an unreadable choice is an error (the
    verdict is "unknown"), never a guess."""
    if ret.valid(cands, tied):
        return ret.index
    if not needed:
        return tied[0]
    why = ("the float run of this op is not available" if ret.index is None or ret.fvals is None else
           "the float run did not see this tie: its values differ from the exact ones where it matters")
    raise InexactError(
        f"{opname}: PyTorch's tie choice among the exactly tied entries {list(tied)} cannot be read ({why}); the "
        "exact AD at this tie is the entry PyTorch returns, so it is unknown here. Give a tie rule in rules= "
        "(e.g. {'" + opname + "': 'first'}) to test that rule instead")


def select(cands: list, larger: bool, opname: str, rule: Rule, loc, fvals=None, ret: Returned = _NONE):
    """Choose the max (or min) of ``cands``: returns (output entry, chosen index).

    ``rule``: AD's tie rule (resolved by the caller, see :func:`_ad_rule`, :func:`_index_rule`); ``fvals``: the
    same candidates as computed in floats (for float-tie detection), or None; ``ret``: the index the float run
    returned (needed by the rule ``returned``).
    """
    ctx = context.current()
    context.poll_deadline()  # one call per window or reduced row: a large pooling op can hold many
    if any(isinstance(c, Jet) for c in cands):
        return _jet_select(ctx, cands, larger, opname, loc)
    tied = _argbest(cands, larger, opname)
    depends = any(isinstance(cands[i], Aff) for i in range(len(cands)))
    ftied = _float_best(fvals, larger) if fvals is not None and depends else None
    if len(tied) == 1:
        if ftied is not None and len(ftied) > 1:
            ctx.note_float_only(opname, loc, fvals[ftied[0]], val(cands[tied[0]]))
        return cands[tied[0]], tied[0]
    # group tied entries with identical local first-order data (Park's T_j)
    groups: dict = {}
    for i in tied:
        groups.setdefault(_key(cands[i]), []).append(i)
    returned = rule.name == "returned"
    if not any(isinstance(cands[i], Aff) for i in tied) or len(groups) == 1:
        # a tie between constants, or between identical local functions: no derivative depends on the choice;
        # the index is PyTorch's when it can be read (downstream indexing may use it)
        i = _returned_choice(opname, cands, tied, ret, False) if returned else tied[0]
        if len(groups) == 1 and any(isinstance(cands[j], Aff) for j in tied):
            ctx.note(_site(ctx, opname, loc, cands, tied, groups, ftied))
            if not all(is_lin(cands[j]) for j in tied):  # a second-order tie: the output is curved
                return mk(val(cands[i]), grad(cands[i]), False), i
        return cands[i], i
    reps = [ix[0] for ix in groups.values()]
    site = _site(ctx, opname, loc, cands, tied, groups, ftied)
    if ctx.mode == "ad":
        ctx.note(site)
        if returned:
            i = _returned_choice(opname, cands, tied, ret, True)
            site.extra["returned"] = i
            return cands[i], i
        return _ad_mix(cands, tied, rule)
    sgn = 1 if larger else -1
    options = []
    for r in reps:
        rows = [
            {k: sgn * v for k, v in gsub(grad(cands[r]), grad(cands[o])).items()} for o in reps if o != r
        ]
        options.append((f"#{r}", rows))
    single = {"first": tied[0], "last": tied[-1], "inside": 0}.get(rule.name)  # AD takes one entry's piece
    if returned and ret.valid(cands, tied):
        single = ret.index
    if single is not None:
        site.ad_option = next(j for j, ix in enumerate(groups.values()) if single in ix)
    elif returned and ret.avoid is not None and ret.avoid in tied:
        # a rank below the one PyTorch returned: AD's piece puts another tied entry here
        site.ad_option = next((j for j, ix in enumerate(groups.values()) if ret.avoid not in ix), 0)
    choice = ctx.branch(site, options)
    group = list(groups.values())[choice]
    i = reps[choice]
    if returned and ret.index in group:
        i = ret.index  # identical local data: the entry PyTorch returned stands for its group
    elif returned and ret.avoid == i and len(group) > 1:
        i = group[1]
    return cands[i], i


def _site(ctx, opname, loc, cands, tied, groups, ftied):
    reps = [ix[0] for ix in groups.values()]
    return Site(
        opname,
        ctx.call,
        loc,
        val(cands[tied[0]]),
        affine=all(is_lin(cands[i]) for i in tied),
        slopes=tuple(grad(cands[i]) for i in reps),
        # pieces mode: the entries of each option's group (a ray trace names the winning entry, nsverify.oracle.jets)
        extra={"tied": tied, **({"groups": [list(ix) for ix in groups.values()]} if ctx.mode == "pieces" else {})},
        float_tie=None if ftied is None else ftied == tied,
    )


def _jet_select(ctx, cands, larger, opname, loc):
    """A ray trace's selection: the entry that is the max (min) along w + t d for all small t > 0.  Entries tied at
    w are ordered by their first differing Taylor coefficient (a total order on the kept coefficients); a tie that
    the kept coefficients do not break raises :class:`JetUndecided` (the ray is given up).  A tie among entries that
    depend on w is recorded as a site with the winner and the highest order a comparison needed."""
    c0 = [c.c[0] if isinstance(c, Jet) else c for c in cands]
    tied = _argbest(c0, larger, opname)
    best, order = tied[0], 0
    for i in tied[1:]:
        diff = cands[i] - cands[best]
        if not isinstance(diff, Jet):  # two constants with the same value: either one
            continue
        got = jet_sign(diff if larger else -diff)
        if got is None:
            raise JetUndecided(f"{opname}: a tie that the kept Taylor coefficients do not break")
        order = max(order, got[1])
        if got[0] > 0:
            best = i
    if any(isinstance(cands[i], Jet) for i in tied) and len(tied) > 1:
        ctx.note(Site(opname, ctx.call, loc, c0[tied[0]], affine=False,
                      extra={"jet": (best, order), "jet_select": True}))
    return cands[best], best


def _ad_mix(cands, tied, rule: Rule):
    """AD at a tie under ``rule``: one entry's local function (first, last; inside: the clamped input, candidate
    0), else the weights :meth:`Rule.tie_weights` gives to the tied entries (even, hybrid)."""
    if rule.name in ("first", "last"):
        i = tied[0] if rule.name == "first" else tied[-1]
        return cands[i], i
    w = rule.tie_weights(tied, inside=0 if rule.name == "inside" else None)
    value = val(cands[tied[0]])
    g: dict = {}
    for i, c in w.items():
        for k, v in grad(cands[i]).items():
            g[k] = g.get(k, 0) + c * v
    g = {k: v for k, v in g.items() if v != 0}
    return mk(value, g, all(is_lin(cands[i]) for i in tied)), tied[0]


def _reduce_select(a, dims, keepdim, larger, opname, rule, want_index=False, findex=None):
    """Select along ``dims``; ``findex``: the flat index (within the reduced entries) the float run returned
    at each output position (None when unavailable)."""
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
    if findex is not None:
        findex = np.asarray(findex).reshape(outer_shape) if np.asarray(findex).size == max(1, int(np.prod(
            outer_shape))) else None
    out = np.empty(outer_shape, dtype=object)
    idx = np.zeros(outer_shape, dtype=np.int64)
    for pos in np.ndindex(*outer_shape):
        fv = None if fflat is None else list(fflat[pos])
        cands = list(flat[pos])
        ret = Returned(None if findex is None else findex[pos], fv)
        out[pos], idx[pos] = select(cands, larger, opname, rule, pos, fv, ret)
    if keepdim:
        for d in dims:
            out = np.expand_dims(out, d)
            idx = np.expand_dims(idx, d)
    return (out, idx) if want_index else out


def _max_all(a):
    name = context.current().op_name
    return _reduce_select(a, range(arr(a).ndim), False, name == "max", name, _ad_rule(name))


def _amax(a, dim=(), keepdim=False):
    name = context.current().op_name
    a = arr(a)
    dims = tuple(dim) if dim not in (None, (), []) else tuple(range(a.ndim))
    return _reduce_select(a, dims, keepdim, name == "amax", name, _ad_rule(name))


def _max_dim(a, dim, keepdim=False):
    key = op_key(context.current().op_name + ".dim")  # max_dim, min_dim
    return tuple(_reduce_select(a, (dim,), keepdim, key == "max_dim", key, _index_rule(key), want_index=True,
                                findex=float_output(1)))


def _argmax(a, dim=None, keepdim=False):
    name = context.current().op_name
    key = op_key(name)
    a = arr(a)
    if dim is None:
        _, i = _reduce_select(a.reshape(-1), (0,), False, name == "argmax", key, _index_rule(key),
                              want_index=True, findex=float_output())
        return np.asarray(i).reshape((1,) * a.ndim if keepdim else ())
    return _reduce_select(a, (dim,), keepdim, name == "argmax", key, _index_rule(key), want_index=True,
                          findex=float_output())[1]


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
    if context.given_rule("clamp_tensor") is not None:
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
    return select([x, bound], larger, opname, torch_rule("clamp_tensor"), pos)


def _maximum(a, b):
    return _select_pairwise(a, b, "maximum", True)


def _minimum(a, b):
    return _select_pairwise(a, b, "minimum", False)


def pool_windows(name: str, shape, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    """Yield (output index, [(input index, flat spatial index)]) of a max pool, windows in row-major order
    (built one window at a time, so that a huge pool reaches the deadline polls of its consumer)."""
    nsp = 1 if "1d" in name else 3 if "3d" in name else 2
    lead, sp = tuple(shape[:-nsp]), tuple(shape[-nsp:])
    out_sp, table = pool_window_table(sp, kernel_size, stride, padding, dilation, ceil_mode)
    coords = np.stack(np.unravel_index(np.maximum(table, 0), sp), axis=-1)  # (windows, offsets, nsp)
    for L in np.ndindex(*lead):
        for wi, o in enumerate(np.ndindex(*out_sp)):
            yield L + o, [(L + tuple(c), f) for f, c in zip(table[wi].tolist(), coords[wi].tolist()) if f >= 0]
    return lead + out_sp


def pool_out_shape(name, shape, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    nsp = 1 if "1d" in name else 3 if "3d" in name else 2
    out_sp, _ = pool_window_table(tuple(shape[-nsp:]), kernel_size, stride, padding, dilation, ceil_mode)
    return tuple(shape[:-nsp]) + tuple(out_sp)


def _max_pool(x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    name = context.current().op_name
    key = op_key(name)  # max_pool1d, max_pool2d (also ATen's 3-d pool)
    x = arr(x)
    oshape = pool_out_shape(name, x.shape, kernel_size, stride, padding, dilation, ceil_mode)
    out = np.empty(oshape, dtype=object)
    idx = np.zeros(oshape, dtype=np.int64)
    rule = _index_rule(key)
    fx = context.current().float_arg(0)
    if fx is not None and fx.shape != x.shape:
        fx = None
    fidx = _pool_float_indices(name, oshape, kernel_size, stride, padding, dilation, ceil_mode)
    for pos, win in pool_windows(name, x.shape, kernel_size, stride, padding, dilation, ceil_mode):
        cands = [x[q] for q, _ in win]
        fv = [fx[q] for q, _ in win] if fx is not None else None
        e, j = select(cands, True, key, rule, pos, fv, _window_returned(cands, fv, win, fidx, pos))
        out[pos], idx[pos] = e, win[j][1]
    if name.endswith("with_indices"):
        return out, idx
    return out


def _window_returned(cands, fv, win, fidx, pos) -> Returned:
    """The window member whose flat index the float run returned at output ``pos``."""
    if fidx is None:
        return Returned(None, fv)
    flat = int(fidx[pos])
    return Returned(next((j for j, (_, f) in enumerate(win) if f == flat), None), fv)


def _pool_float_indices(name, oshape, kernel_size, stride, padding, dilation, ceil_mode):
    """The indices of PyTorch's float max pool at this op: its second output, or (an op without indices) the
    indices that the same pool returns on the float input with ``return_indices=True``."""
    fidx = float_output(1) if name.endswith("with_indices") else None
    if fidx is None and not name.endswith("with_indices"):
        fx = float_input(0)
        if fx is not None:
            import torch
            import torch.nn.functional as tF

            fn = {"max_pool1d": tF.max_pool1d, "max_pool2d": tF.max_pool2d, "max_pool3d": tF.max_pool3d}.get(name)
            try:
                with torch.no_grad():
                    _, ind = fn(fx, kernel_size, stride or None, padding, dilation, ceil_mode, return_indices=True)
                fidx = ind.numpy()
            except Exception:  # the float pool cannot run here: no index to read
                fidx = None
    return fidx if fidx is not None and tuple(fidx.shape) == tuple(oshape) else None


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


def _adaptive_max_pool(x, output_size):
    x = arr(x)
    output_size = tuple(output_size)
    shape = x.shape[: x.ndim - len(output_size)] + output_size
    out = np.empty(shape, dtype=object)
    idx = np.zeros(shape, dtype=np.int64)
    key = op_key(context.current().op_name)  # adaptive_max_pool2d (1-d too)
    rule = _index_rule(key)
    fx = context.current().float_arg(0)
    if fx is not None and fx.shape != x.shape:
        fx = None
    fidx = float_output(1)
    fidx = fidx if fidx is not None and tuple(fidx.shape) == tuple(shape) else None
    for pos, win in adaptive_pool_windows(x.shape, output_size):
        fv = [fx[q] for q, _ in win] if fx is not None else None
        cands = [x[q] for q, _ in win]
        e, j = select(cands, True, key, rule, pos, fv, _window_returned(cands, fv, win, fidx, pos))
        out[pos], idx[pos] = e, win[j][1]
    return out, idx


def _sort(a, dim=-1, descending=False, stable=False):
    n = arr(a).shape[dim] if arr(a).ndim else 1
    return _order(a, dim, descending, list(range(n)), "sort", float_output(1))


def _topk(a, k, dim=-1, largest=True, sorted=True):
    return _order(a, dim, largest, list(range(k)), "topk", float_output(1))


def _kthvalue(a, k, dim=-1, keepdim=False):
    return _reduce_order(a, dim, keepdim, lambda n: k - 1, "kthvalue")


def _median_dim(a, dim, keepdim=False):
    return _reduce_order(a, dim, keepdim, lambda n: (n - 1) // 2, "median_dim")


def _median_all(a, key="median"):
    """The lower median of all entries; AD at a tie: PyTorch's rule for median() (registry: the even split
    over the entries equal to it, evenly_distribute_backward). ``key``: the registry op (nanmedian shares it)."""
    flat = arr(a).reshape(-1)
    rule = _ad_rule(key)
    ctx = context.current()
    r = (flat.size - 1) // 2
    if ctx.mode == "ad":
        order = _exact_order(list(flat), False, key)
        v = val(flat[order[r]])
        tied = [i for i in range(flat.size) if i == order[r] or sign(val(flat[i]) - v) == 0]
        cands = list(flat)
        if len(tied) > 1 and any(isinstance(cands[i], Aff) for i in tied):
            groups: dict = {}
            for i in tied:
                groups.setdefault(_key(cands[i]), []).append(i)
            ctx.note(_site(ctx, key, (), cands, tied, groups, None))
            return _scalar(_ad_mix(cands, tied, rule)[0])
        return _scalar(cands[order[r]])
    vals, _ = _order(flat, 0, False, [r], key, None)
    return _scalar(vals[0])


def _scalar(v):
    out = np.empty((), dtype=object)
    out[()] = v
    return out


def _reduce_order(a, dim, keepdim, rank_of, key):
    """kthvalue / median along ``dim``: the entry of rank ``rank_of(n)`` (ascending) and its index."""
    a = arr(a)
    n = a.shape[dim] if a.ndim else 1
    fidx = float_output(1)
    vals, idx = _order(a, dim, False, [rank_of(n)], key, None if fidx is None else np.expand_dims(fidx, -1)
                       if not keepdim else fidx, moved_index=not keepdim)
    if a.ndim == 0:
        return vals.reshape(()), idx.reshape(())
    if not keepdim:
        vals, idx = np.squeeze(vals, axis=dim), np.squeeze(idx, axis=dim)
    return vals, idx


def _mode(a, dim=-1, keepdim=False):
    """torch.mode: the most frequent value (the smallest among equally frequent ones) and an index of it.
    Where every entry of a row is distinct it is the row's minimum (a selection without a tie).  Where only
    constants repeat and every entry that depends on w is apart from all others, the repeats persist near w and
    the w-dependent entries stay single, so the most frequent value is a constant there: mode is locally constant
    (PyTorch's value and index).  A repeated value held by an entry that depends on w makes mode jump (that entry
    moving off it changes which value is most frequent): not locally Lipschitz, so it is rejected."""
    a = arr(a)
    if a.ndim == 0:
        return a.copy(), np.zeros((), dtype=np.int64)
    a_m = np.moveaxis(a, dim, -1)
    out = np.empty(a_m.shape[:-1], dtype=object)
    idx = np.zeros(a_m.shape[:-1], dtype=np.int64)
    fidx = float_output(1)
    for pos in np.ndindex(*a_m.shape[:-1]):
        row = list(a_m[pos])
        order = _exact_order(row, False, "mode")
        vs = [val(row[i]) for i in order]
        equal_next = [sign(vs[i + 1] - vs[i]) == 0 for i in range(len(vs) - 1)]
        repeated = any(equal_next)
        # an entry that depends on w and equals another entry: moving it off the shared value changes which
        # value is most frequent (mode jumps). Repeats among constants only, with every w-dependent entry apart
        # from all others, stay as they are near w: the mode is then locally constant (a constant's value)
        shared = {order[i] for i, e in enumerate(equal_next) if e} | {order[i + 1] for i, e in enumerate(equal_next)
                                                                      if e}
        if any(isinstance(row[i], Aff) for i in shared):
            raise UnsupportedOpError(
                "torch.mode on a row with a repeated value that depends on w is discontinuous (moving one entry "
                "off the repeated value changes which value is most frequent), so it has no Clarke "
                "subdifferential; use torch.min/torch.max or check at a point where the row's values are distinct")
        if repeated:  # repeats among constants: PyTorch's value and index, read from the float run when available
            i = int(np.asarray(fidx)[pos]) if fidx is not None and np.asarray(fidx).shape == out.shape else None
            if i is None or sign(val(row[i]) - val(row[order[0]])) is None:
                counts = [sum(1 for y in vs if sign(y - x) == 0) for x in vs]
                i = order[counts.index(max(counts))]
            out[pos], idx[pos] = row[i], i
        else:
            out[pos], idx[pos] = row[order[0]], order[0]
    if keepdim:
        out, idx = np.expand_dims(out, dim), np.expand_dims(idx, dim)
    return out, idx


def _exact_order(row, descending, opname):
    """Indices of ``row`` ordered by exact value (ascending, or descending), ties by index (stable)."""
    import functools

    def cmp(i, j):
        s = sign(val(row[i]) - val(row[j]))
        if s is None:
            raise straddle_error(opname)
        return -s if descending else s

    return sorted(range(len(row)), key=functools.cmp_to_key(lambda i, j: cmp(i, j) or (i - j)))


def _order(a, dim, descending, ranks, key, fidx, moved_index=False):
    """(values, indices) of the entries at ``ranks`` (0 = most extreme) of each row along ``dim``, the rank
    axis in place of ``dim``.  ``fidx``: the indices PyTorch's float run returned (same layout), or None.

    AD with the rule ``returned`` (no convention given): each output is the entry PyTorch returned at that
    rank -- it must be one of the entries exactly tied with that rank's value, on exact float inputs.  Pieces
    mode (and AD with a convention): the ranks are selected one after another, ties branching.
    """
    ctx = context.current()
    a = arr(a)
    zero_d = a.ndim == 0
    if zero_d:
        a, dim = a.reshape(1), 0
        fidx = None if fidx is None else np.asarray(fidx).reshape(1)
    a_m = np.moveaxis(a, dim, -1)
    rows, n = a_m.shape[:-1], a_m.shape[-1]
    fa = ctx.float_arg(0)
    fa_m = np.moveaxis(fa.reshape(a.shape), dim, -1) if fa is not None and fa.size == a.size else None
    fi_m = None
    if fidx is not None:
        fi = np.asarray(fidx)
        fi_m = np.moveaxis(fi, dim, -1) if fi.ndim == a.ndim else None
        if fi_m is not None and fi_m.shape != rows + (len(ranks),):
            fi_m = None
    rule = _index_rule(op_key(key) if key not in ("median",) else key) if key != "median" else _ad_rule("median")
    out = np.empty(rows + (len(ranks),), dtype=object)
    idx = np.zeros(rows + (len(ranks),), dtype=np.int64)
    rankpos = {r: t for t, r in enumerate(ranks)}
    for pos in np.ndindex(*rows):
        row = list(a_m[pos])
        fv = None if fa_m is None else list(fa_m[pos])
        rets = [None] * len(ranks) if fi_m is None else [int(x) for x in fi_m[pos]]
        if ctx.mode == "ad" and rule.name == "returned":
            order = _exact_order(row, descending, key)
            for t, r in enumerate(ranks):
                v = val(row[order[r]])
                group = [i for i in order if i == order[r] or sign(val(row[i]) - v) == 0]  # in rank order
                chosen = group[0] if len(group) == 1 else None
                if chosen is None:
                    groups: dict = {}
                    for i in sorted(group):
                        groups.setdefault(_key(row[i]), []).append(i)
                    needed = len(groups) > 1 and any(isinstance(row[i], Aff) for i in group)
                    site = _site(ctx, key, pos + (r,), row, sorted(group), groups, None)
                    if needed:
                        ctx.note(site)
                    ret = Returned(rets[t], fv)
                    if ret.valid(row, sorted(group)):
                        chosen = site.extra["returned"] = ret.index
                    elif not needed:
                        chosen = order[r]  # any entry of the group: identical local functions
                    else:
                        _returned_choice(key, row, sorted(group), ret, True)  # raises: unreadable choice
                out[pos + (t,)], idx[pos + (t,)] = row[chosen], chosen
            continue
        remaining = list(range(n))
        last = rets[rankpos[max(ranks)]] if len(ranks) == 1 else None  # kthvalue / median: PyTorch's entry
        for r in range(max(ranks) + 1):
            cands = [row[i] for i in remaining]
            g = rets[rankpos[r]] if r in rankpos else None
            ret = Returned(remaining.index(g) if g in remaining else None, None if fv is None else
                           [fv[i] for i in remaining],
                           remaining.index(last) if g is None and last in remaining else None)
            e, j = select(cands, descending, key, rule, pos + (r,), None, ret)
            if r in rankpos:
                out[pos + (rankpos[r],)], idx[pos + (rankpos[r],)] = e, remaining[j]
            remaining.pop(j)
    vals, inds = np.moveaxis(out, -1, dim), np.moveaxis(idx, -1, dim)
    if zero_d and len(ranks) == 1:
        return vals.reshape(()), inds.reshape(())
    return vals, inds


# ------------------------------------------------------------------------------------- max pool (reverse mode)
def _max_pool_backward(grad, x, kernel_size, stride, padding, dilation, ceil_mode, indices):
    name = context.current().op_name.replace("_with_indices_backward", "")
    x, g = arr(x), arr(grad)
    out = filled(x.shape, F(0))
    rule = context.given_rule(op_key(name))
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


def _adaptive_max_pool_backward(grad, x, indices):
    """PyTorch's formula: each output's gradient goes to its recorded index (rules: first only)."""
    x, g = arr(x), arr(grad)
    conv = context.given_rule("adaptive_max_pool2d")
    if conv is not None and conv.name != "first":
        raise UnsupportedOpError(
            "adaptive_max_pool2d: only the native (first index) rule is supported in reverse mode; use "
            "exact_gradient (forward mode) for other rules")
    out = filled(x.shape, F(0))
    nsp = 2
    lead = x.shape[:-nsp]
    flat_out = out.reshape(lead + (-1,))
    ind = np.asarray(indices)
    for pos in np.ndindex(*g.shape):
        L = pos[:-nsp]
        flat_out[L + (int(ind[pos]),)] = flat_out[L + (int(ind[pos]),)] + g[pos]
    return flat_out.reshape(x.shape)


RECORDS = (
    ExactOp(("clamp", "clip", "clamp_min", "clamp_max"), _clamp),
    ExactOp(("max.default", "min.default"), _max_all),
    ExactOp(("amax", "amin"), _amax),
    ExactOp(("max.dim", "min.dim"), _max_dim),
    ExactOp(("argmax", "argmin"), _argmax),
    ExactOp(("maximum", "fmax"), _maximum),
    ExactOp(("minimum", "fmin"), _minimum),
    ExactOp(("max_pool2d_with_indices", "max_pool1d_with_indices", "max_pool3d_with_indices", "max_pool2d",
             "max_pool1d"), _max_pool,
            backward_names=("max_pool2d_with_indices_backward", "max_pool3d_with_indices_backward"),
            backward=_max_pool_backward),
    ExactOp(("adaptive_max_pool2d", "adaptive_max_pool1d"), _adaptive_max_pool,
            backward_names=("adaptive_max_pool2d_backward",), backward=_adaptive_max_pool_backward),
    ExactOp(("sort",), _sort),
    ExactOp(("topk",), _topk),
    ExactOp(("kthvalue",), _kthvalue),
    ExactOp(("median.dim",), _median_dim),
    ExactOp(("median.default",), _median_all),
    ExactOp(("mode",), _mode),
)
