"""Exact implementations of the nonsmooth ATen ops: kinks (relu, abs, hardtanh, clamp...), selections (max,
amax, maximum, max_pool, sort/topk), comparisons and ``where``.

At a kink/tie the behaviour depends on the context mode (see :mod:`nsverify.oracle.context`): in ``"ad"`` mode
PyTorch's convention (or an override) gives the local derivative; in ``"pieces"`` mode the site becomes a
branch point whose options are the adjacent pieces, each with its open cone of directions.  Tied entries
whose local first-order data (value and derivative) are identical are merged (Park et al.'s T_j), so they
never create spurious branches.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from ..errors import InexactError, UnsupportedOpError
from . import context
from .context import Site
from .numbers import Aff, grad, is_lin, mk, sign, val
from .ops_linear import arr, objmap
from .semantics import clamp as clamp_sem
from .semantics import elementwise, tie_rule
from .tensor import op, scalar

F = Fraction


def _neg_g(g: dict) -> dict:
    return {k: -v for k, v in g.items()}


def _gsub(a: dict, b: dict) -> dict:
    out = dict(a)
    for k, v in b.items():
        s = out.get(k, 0) - v
        if s == 0:
            out.pop(k, None)
        else:
            out[k] = s
    return out


def _poly(p, x):
    out = F(0)
    for c in reversed(p):
        out = out * x + c
    return out


def _dpoly(p, x):
    return _poly([k * c for k, c in enumerate(p)][1:], x) if len(p) > 1 else F(0)


def _piece_apply(piece, x):
    if piece.poly is None:
        raise UnsupportedOpError("a non-polynomial piece of an elementwise op is not supported exactly")
    v = val(x)
    out_v = _poly(piece.poly, v)
    if not isinstance(x, Aff):
        return out_v
    d = _dpoly(piece.poly, v)
    nonlin_piece = len(piece.poly) > 2 and any(c != 0 for c in piece.poly[2:])
    return mk(
        out_v, {k: d * c for k, c in x.g.items()} if d != 0 else {}, x.lin and not (nonlin_piece and x.g)
    )


def _inexact(opname, detail=""):
    return InexactError(
        f"{opname}: an interval value straddles a kink/tie{detail}, so the exact oracle cannot "
        "tell which piece is active; the smooth part around it is not exactly computable here. "
        "Use rational inputs/weights or check at another point"
    )


def _float_only(ctx, opname, loc, fx, exact_value):
    """Record a tie that only the float computation sees (rounding created it)."""
    ctx.note(Site(opname, ctx.call, loc, exact_value, float_tie=True, extra={"float_only": True,
                                                                            "float_value": float(fx)}))


def _apply_elementwise(ew, x, loc, fx=None):
    ctx = context.current()
    v = val(x)
    idx = len(ew.breakpoints)
    at = None
    for i, b in enumerate(ew.breakpoints):
        s = sign(v - b)
        if s is None:
            raise _inexact(ew.name)
        if s < 0:
            idx = i
            break
        if s == 0:
            at = i
            break
    if at is None:
        if fx is not None and isinstance(x, Aff) and F(fx) in ew.breakpoints:
            _float_only(ctx, ew.name, loc, fx, v)
        return _piece_apply(ew.pieces[idx], x)
    b = ew.breakpoints[at]
    g = grad(x)
    if not isinstance(x, Aff):  # a constant sitting on a kink: nothing flows through it
        return _piece_apply(ew.pieces[at], x)
    site = Site(ew.name, ctx.call, loc, b, affine=is_lin(x), slopes=(g,),
                float_tie=None if fx is None else F(fx) == b)
    if ctx.mode == "ad" or not g:
        ctx.note(site)
        if not g:
            return _piece_apply(ew.pieces[at], x)
        side = _ad_side(ew, at)
        if isinstance(side, Fraction):  # a fixed derivative at the kink (e.g. abs'(0) = 0)
            return mk(
                _poly(ew.pieces[at].poly, b), {k: side * c for k, c in g.items()} if side else {}, is_lin(x)
            )
        return _piece_apply(ew.pieces[side], x)
    choice = ctx.branch(site, [("left", [_neg_g(g)]), ("right", [g])])
    return _piece_apply(ew.pieces[at + choice], x)


def _ad_side(ew, at):
    """Index of the piece whose derivative AD uses at breakpoint ``at``, or a fixed derivative (Fraction)."""
    conv = context.convention(ew.name)
    side = ew.torch_side[at] if conv is None else conv
    if isinstance(side, dict):
        side = side.get(ew.breakpoints[at], ew.torch_side[at])
    if isinstance(side, (int, float, Fraction)) and not isinstance(side, bool):
        return F(side)
    if side in ("zero", "minimal", "min_norm"):
        return F(0)
    if side == "left":
        return at
    if side == "right":
        return at + 1
    if side == "inside":
        left, right = ew.pieces[at], ew.pieces[at + 1]
        return at + 1 if _dpoly(right.poly, F(0)) != 0 and _dpoly(left.poly, F(0)) == 0 else at
    raise UnsupportedOpError(
        f"convention for {ew.name} must be 'left', 'right', 'inside' or a number, got {side!r}"
    )


def _elementwise_op(ew, a):
    a = arr(a)
    fa = context.current().float_arg(0)
    ff = fa.reshape(-1) if fa is not None and fa.size == a.size else None
    out = np.empty(a.shape, dtype=object)
    of, af = out.reshape(-1), a.reshape(-1)
    for i in range(af.size):
        of[i] = _apply_elementwise(ew, af[i], (i,), None if ff is None else ff[i])
    return out


for _name in ("relu", "abs", "hardsigmoid", "hardswish"):
    op(_name)(lambda a, _n=_name: _elementwise_op(elementwise(_n, ()), a))


@op("leaky_relu")
def _leaky(a, negative_slope=0.01):
    return _elementwise_op(elementwise("leaky_relu", (negative_slope,)), a)


@op("hardtanh")
def _hardtanh(a, min_val=-1.0, max_val=1.0):
    return _elementwise_op(elementwise("hardtanh", (min_val, max_val)), a)


@op("threshold")
def _threshold(a, threshold, value):
    return _elementwise_op(elementwise("threshold", (threshold, value)), a)


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
    return _elementwise_op(
        clamp_sem(None if min is None else scalar(min), None if max is None else scalar(max)), a
    )


# ------------------------------------------------------------------------------------------------- selections
def _argbest(cands: list, larger: bool, opname: str):
    """Index list of the tied best entries (exact), raising when intervals cannot decide."""
    best = [0]
    for i in range(1, len(cands)):
        s = sign(val(cands[i]) - val(cands[best[0]]))
        if s is None:
            raise _inexact(opname)
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


def select(cands: list, larger: bool, opname: str, rule: str, loc, fvals=None):
    """Choose the max (or min) of ``cands``: returns (output entry, chosen index).

    ``fvals``: the same candidates as computed in floats (for float-tie detection), or None.
    """
    ctx = context.current()
    tied = _argbest(cands, larger, opname)
    depends = any(isinstance(cands[i], Aff) for i in range(len(cands)))
    ftied = _float_best(fvals, larger) if fvals is not None and depends else None
    if len(tied) == 1:
        if ftied is not None and len(ftied) > 1:
            _float_only(ctx, opname, loc, fvals[ftied[0]], val(cands[tied[0]]))
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
        conv = context.convention(opname)
        return _ad_mix(cands, tied, conv if conv is not None else rule)
    if len(reps) == 1:
        ctx.note(site)
        return cands[tied[0]], tied[0]
    sgn = 1 if larger else -1
    options = []
    for r in reps:
        rows = [
            {k: sgn * v for k, v in _gsub(grad(cands[r]), grad(cands[o])).items()} for o in reps if o != r
        ]
        options.append((f"#{r}", rows))
    choice = ctx.branch(site, options)
    i = reps[choice]
    return cands[i], i


def _ad_mix(cands, tied, rule):
    """AD at a tie: 'first' index, 'even' split, 'minimal' (=even), or ('hybrid', beta)."""
    if rule == "first" or rule == "native":
        return cands[tied[0]], tied[0]
    if rule in ("even", "minimal"):
        w = {i: F(1, len(tied)) for i in tied}
    elif isinstance(rule, tuple) and rule[0] == "hybrid":
        beta = F(rule[1])
        w = {i: beta / len(tied) for i in tied}
        w[tied[0]] += 1 - beta
    else:
        raise UnsupportedOpError(
            f"unknown tie convention {rule!r}: use 'first'/'native', 'even'/'minimal' or ('hybrid', beta)"
        )
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
    return _reduce_select(a, range(arr(a).ndim), False, name == "max", name, tie_rule(name))


@op("amax", "amin")
def _amax(a, dim=(), keepdim=False):
    name = context.current().op_name
    a = arr(a)
    dims = tuple(dim) if dim not in (None, (), []) else tuple(range(a.ndim))
    return _reduce_select(a, dims, keepdim, name == "amax", name, tie_rule(name))


@op("max.dim", "min.dim")
def _max_dim(a, dim, keepdim=False):
    name = context.current().op_name
    return tuple(
        _reduce_select(
            a, (dim,), keepdim, name == "max", name + ".dim", tie_rule(name + ".dim"), want_index=True
        )
    )


@op("argmax", "argmin")
def _argmax(a, dim=None, keepdim=False):
    name = context.current().op_name
    a = arr(a)
    if dim is None:
        _, i = _reduce_select(a.reshape(-1), (0,), False, name == "argmax", name, "first", want_index=True)
        return i
    return _reduce_select(a, (dim,), keepdim, name == "argmax", name, "first", want_index=True)[1]


def _select_pairwise(a, b, opname, larger):
    a, b = np.broadcast_arrays(arr(a), arr(b))
    ctx = context.current()
    fa, fb = ctx.float_arg(0), ctx.float_arg(1)
    fl = None
    if fa is not None and fb is not None:
        try:
            fl = np.broadcast_arrays(fa, fb)
            fl = fl if fl[0].shape == a.shape else None
        except ValueError:
            fl = None
    out = np.empty(a.shape, dtype=object)
    rule = tie_rule(opname) if opname in ("maximum", "minimum") else "inside"
    for pos in np.ndindex(*a.shape):
        if rule == "inside":  # tensor-bound clamp: the gradient follows the input a
            out[pos], _ = _clamp_pair(a[pos], b[pos], larger, opname, pos)
        else:
            fv = None if fl is None else [fl[0][pos], fl[1][pos]]
            out[pos], _ = select([a[pos], b[pos]], larger, opname, rule, pos, fv)
    return out


def _clamp_pair(x, bound, larger, opname, pos):
    ctx = context.current()
    if ctx.mode == "ad":
        s = sign(val(x) - val(bound))
        if s is None:
            raise _inexact(opname)
        if s == 0:
            ctx.note(Site(opname, ctx.call, pos, val(x), affine=is_lin(x) and is_lin(bound)))
            return x, 0
        return (x, 0) if (s > 0) == larger else (bound, 1)
    return select([x, bound], larger, opname, "first", pos)


@op("maximum", "fmax")
def _maximum(a, b):
    return _select_pairwise(a, b, "maximum", True)


@op("minimum", "fmin")
def _minimum(a, b):
    return _select_pairwise(a, b, "minimum", False)


@op(
    "max_pool2d_with_indices",
    "max_pool1d_with_indices",
    "max_pool3d_with_indices",
    "max_pool2d",
    "max_pool1d",
)
def _max_pool(x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    name = context.current().op_name
    nsp = 1 if "1d" in name else 3 if "3d" in name else 2
    tup = lambda v, dflt: (
        tuple(v) * (nsp if len(tuple(v)) == 1 else 1)
        if isinstance(v, (list, tuple)) and v
        else ((v,) * nsp if isinstance(v, int) else dflt)
    )
    k = tup(kernel_size, None)
    s = tup(stride, k)
    p = tup(padding, (0,) * nsp)
    dl = tup(dilation, (1,) * nsp)
    if ceil_mode:
        raise UnsupportedOpError(
            "max_pool with ceil_mode=True is not supported by the exact oracle; use "
            "ceil_mode=False (pad the input explicitly if needed)"
        )
    x = arr(x)
    lead = x.shape[:-nsp]
    sp = x.shape[-nsp:]
    out_sp = [(sp[i] + 2 * p[i] - dl[i] * (k[i] - 1) - 1) // s[i] + 1 for i in range(nsp)]
    out = np.empty(lead + tuple(out_sp), dtype=object)
    idx = np.zeros(lead + tuple(out_sp), dtype=np.int64)
    rule = tie_rule("max_pool")
    conv = context.convention("max_pool")
    strides_in = np.cumprod((1,) + sp[::-1])[:-1][::-1]
    fx = context.current().float_arg(0)
    if fx is not None and fx.shape != x.shape:
        fx = None
    for L in np.ndindex(*lead):
        for o in np.ndindex(*out_sp):
            cands, flat_ix, fv = [], [], []
            for kk in np.ndindex(*k):
                q = [o[i] * s[i] - p[i] + kk[i] * dl[i] for i in range(nsp)]
                if all(0 <= q[i] < sp[i] for i in range(nsp)):
                    cands.append(x[L + tuple(q)])
                    flat_ix.append(int(sum(q[i] * strides_in[i] for i in range(nsp))))
                    if fx is not None:
                        fv.append(fx[L + tuple(q)])
            e, j = select(cands, True, "max_pool", conv if conv is not None else rule, L + o,
                          fv if fx is not None else None)
            out[L + o], idx[L + o] = e, flat_ix[j]
    if name.endswith("with_indices"):
        return out, idx
    return out


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
    for pos in np.ndindex(*a_m.shape[:-1]):
        remaining = list(range(n))
        for r in range(kk):
            cands = [a_m[pos + (i,)] for i in remaining]
            e, j = select(cands, descending, "sort" if k is None else "topk", "first", pos + (r,))
            out[pos + (r,)], idx[pos + (r,)] = e, remaining[j]
            remaining.pop(j)
    return np.moveaxis(out, -1, dim), np.moveaxis(idx, -1, dim)


# ------------------------------------------------------------------------------------------------ comparisons
_CMP = {
    "gt": lambda s: s > 0,
    "ge": lambda s: s >= 0,
    "lt": lambda s: s < 0,
    "le": lambda s: s <= 0,
    "eq": lambda s: s == 0,
    "ne": lambda s: s != 0,
}


def _compare_entry(x, y, name, loc, fxy=None):
    ctx = context.current()
    diff = x - y
    s = sign(val(diff))
    if s is None:
        raise _inexact(name, " in a comparison")
    test = _CMP[name]
    depends = isinstance(diff, Aff)
    if s != 0:
        if fxy is not None and depends and fxy[0] == fxy[1]:
            _float_only(ctx, name, loc, fxy[0], val(x))
        return test(s)
    g = grad(diff)
    if not depends:
        return test(0)
    site = Site(name, ctx.call, loc, val(x), affine=is_lin(diff), slopes=(g,),
                float_tie=None if fxy is None else bool(fxy[0] == fxy[1]))
    if ctx.mode == "ad" or (not g and is_lin(diff)):
        ctx.note(site)
        return test(0)
    if not g:  # second-order tie: first-order analysis cannot tell the side
        choice = ctx.branch(site, [("<", None), (">", None)])
    else:
        choice = ctx.branch(site, [("<", [_neg_g(g)]), (">", [g])])
    return test(-1 if choice == 0 else 1)


def _compare(name):
    def impl(a, b):
        a, b = np.broadcast_arrays(arr(a), arr(b))
        ctx = context.current()
        fa = ctx.float_arg(0)
        fb = ctx.float_arg(1) if ctx.float_arg(1) is not None else (
            np.asarray(float(b.reshape(-1)[0])) if b.size == 1 and not isinstance(b.reshape(-1)[0], Aff)
            else None)
        fl = None
        if fa is not None and fb is not None:
            try:
                fl = np.broadcast_arrays(fa, fb)
                fl = fl if fl[0].shape == a.shape else None
            except ValueError:
                fl = None
        out = np.empty(a.shape, dtype=bool)
        for pos in np.ndindex(*a.shape):
            out[pos] = _compare_entry(a[pos], b[pos], name, pos, None if fl is None else (fl[0][pos], fl[1][pos]))
        return out

    return impl


for _c in _CMP:
    op(_c)(_compare(_c))


@op("where")
def _where(cond, a=None, b=None):
    if a is None:
        raise UnsupportedOpError("torch.where(cond) with one argument (nonzero) is not supported exactly")
    return np.asarray(np.where(cond.astype(bool), arr(a), arr(b)), dtype=object)


@op("logical_not")
def _lnot(a):
    return ~a.astype(bool)


@op("logical_and", "bitwise_and")
def _land(a, b):
    return np.logical_and(a, b)


@op("logical_or", "bitwise_or")
def _lor(a, b):
    return np.logical_or(a, b)


@op("any")
def _any(a, dim=None, keepdim=False):
    return np.asarray(
        np.any(a.astype(bool)) if dim is None else np.any(a.astype(bool), axis=dim, keepdims=keepdim)
    )


@op("all")
def _all(a, dim=None, keepdim=False):
    return np.asarray(
        np.all(a.astype(bool)) if dim is None else np.all(a.astype(bool), axis=dim, keepdims=keepdim)
    )


@op("sign", "sgn")
def _sign(a):
    def f(x):
        s = sign(val(x))
        if s is None:
            raise _inexact("sign")
        if s == 0 and grad(x):
            raise UnsupportedOpError(
                "sign() at 0 of a value that depends on w is discontinuous; the Clarke "
                "oracle needs locally Lipschitz programs. Rewrite without sign()"
            )
        return F(s)

    return objmap(f, arr(a))
