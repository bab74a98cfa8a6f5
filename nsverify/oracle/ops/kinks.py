"""Exact implementations of the nonsmooth ATen ops with kinks, comparisons, ``where`` and ``sign`` (selections
live in :mod:`.select`).

The elementwise ops with kinks are not listed here: they are the registry's exact elementwise entries
(:mod:`nsverify.registry`), read on dispatch. Each entry's ATen forward ops (``Elementwise.aten_forward``:
relu, leaky_relu, hardtanh, hardsigmoid, hardswish, abs, ...) evaluate its pieces, and its ATen backward ops
(``Elementwise.backward``: leaky_relu_backward, hardtanh_backward, ...) its exact derivative, for the instance
the call's scalar arguments describe (``Elementwise.instance``). A new elementwise activation is therefore one
registry entry (:class:`RegistryOps` is the table's resolver for them). The exceptions have records here: the
argument-only op ``threshold`` (no registry entry of its own) with ``threshold_backward``, which relu and threshold
share; scalar-bound clamp shares its ATen op with the tensor-bound clamp and is dispatched with it (:mod:`.select`);
and prelu, whose slope
is a tensor argument that may depend on w (``Elementwise.learnable``): ``_prelu_kernel`` and
``_prelu_kernel_backward`` are implemented here with the tensor.

At a kink/tie the behaviour depends on the context mode (see :mod:`nsverify.oracle.context`): in ``"ad"`` mode
PyTorch's rule (from :mod:`nsverify.registry`) or the rule given for the op (``rules=``) gives the local derivative;
in ``"pieces"`` mode the site becomes a branch point whose options are the adjacent pieces, each with its open
cone of directions.  Tied entries whose local first-order data (value and derivative) are identical are merged
(Park et al.'s T_j), so they never create spurious branches.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from nsverify import registry
from nsverify.errors import UnsupportedOpError
from nsverify.oracle import context
from nsverify.oracle.context import Site, float_pair
from nsverify.oracle.numbers import (
    Aff,
    Jet,
    JetDeclined,
    JetUndecided,
    KinkZero,
    grad,
    is_exact,
    is_lin,
    is_zero,
    jet_sign,
    mk,
    sign,
    straddle_error,
    val,
)
from nsverify.oracle.ops.common import arr, objmap, scalar
from nsverify.oracle.ops.record import ExactOp
from nsverify.registry import threshold_for

F = Fraction


def _neg_g(g: dict) -> dict:
    return {k: -v for k, v in g.items()}


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


def _jet_side(ctx, opname: str, loc, q: Jet) -> int:
    """The strict sign of q(w + t d) for every small t > 0 (a ray trace, :mod:`nsverify.oracle.jets`): read from
    the value at w when it is not 0, else from the first non-zero Taylor coefficient -- then the site is recorded
    with the sign and the order k that decided it.  Undecided (all kept coefficients 0, or an enclosure of the
    first one that contains 0) raises :class:`JetUndecided`: the ray is given up, nothing is guessed."""
    s0 = sign(q.c[0])
    if s0 is None:
        raise straddle_error(opname)
    if s0:
        return s0
    got = jet_sign(q)
    if got is None:
        raise JetUndecided(f"{opname}: the sign along the ray is not decided by the kept Taylor coefficients")
    ctx.note(Site(opname, ctx.call, loc, q.c[0], affine=False, extra={"jet": got}))
    return got[0]


def _jet_elementwise(ew, x: Jet, loc):
    """Elementwise op ``ew`` on a jet: the piece that holds along the ray, applied to the series."""
    ctx = context.current()
    idx = len(ew.breakpoints)
    for i, b in enumerate(ew.breakpoints):
        if _jet_side(ctx, ew.name, loc, x - b) < 0:
            idx = i
            break
    if ew.pieces[idx].poly is None:
        raise JetDeclined(f"{ew.name}: a non-polynomial piece on a jet")
    return _poly(ew.pieces[idx].poly, x)


def _apply_elementwise(ew, x, loc, fx=None):
    ctx = context.current()
    if isinstance(x, Jet):
        return _jet_elementwise(ew, x, loc)
    v = val(x)
    idx = len(ew.breakpoints)
    at = None
    for i, b in enumerate(ew.breakpoints):
        s = sign(v - b)
        if s is None:
            raise straddle_error(ew.name)
        if s < 0:
            idx = i
            break
        if s == 0:
            at = i
            break
    if at is None:
        if fx is not None and isinstance(x, Aff) and F(fx) in ew.breakpoints:
            ctx.note_float_only(ew.name, loc, fx, v)
        return _piece_apply(ew.pieces[idx], x)
    b = ew.breakpoints[at]
    if type(x).__name__ == "NormForm":  # a norm at its zero sitting on the kink: one side on a whole neighbourhood
        from nsverify.oracle.ops.singular import side_near

        piece = ew.pieces[at + side_near(x)]
        if piece.poly is None:
            raise UnsupportedOpError("a non-polynomial piece of an elementwise op is not supported exactly")
        return _poly(piece.poly, x)  # the piece's polynomial in the norm form's exact arithmetic
    g = grad(x)
    if not isinstance(x, Aff):  # a constant sitting on a kink: nothing flows through forward mode
        out = _piece_apply(ew.pieces[at], x)
        return KinkZero() if ew.backward_reads_output and ctx.mode == "ad" else out
    site = Site(ew.name, ctx.call, loc, b, affine=is_lin(x), slopes=(g,),
                float_tie=None if fx is None else bool(F(fx) == b))
    if ctx.mode == "ad" or not g:
        ctx.note(site)
        if not g:
            return _kink_output(_piece_apply(ew.pieces[at], x))
        side = _ad_side(ew, at)
        if isinstance(side, Fraction):  # a fixed derivative at the kink (e.g. abs'(0) = 0)
            return _kink_output(mk(
                _poly(ew.pieces[at].poly, b), {k: side * c for k, c in g.items()} if side else {}, is_lin(x)
            ))
        return _kink_output(_piece_apply(ew.pieces[side], x))
    site.ad_option = _ad_option_elementwise(ew, at)
    choice = ctx.branch(site, [("left", [_neg_g(g)]), ("right", [g])])
    return _kink_output(_piece_apply(ew.pieces[at + choice], x))


def _kink_output(out):
    """The output of an elementwise op at a kink of an argument that depends on w: a 0 that no longer depends on w
    (relu's flat side) is tagged ``KinkZero(moving=True)``, so that a backward op reading this output (relu's
    ``threshold_backward``) knows that its step sits at a kink of a w-dependent argument (:func:`check_steps`)."""
    return KinkZero(moving=True) if isinstance(out, Fraction) and out == 0 else out


def _ad_option_elementwise(ew, at):
    """0 (left) / 1 (right) when AD's rule at breakpoint ``at`` is one side's derivative, else None."""
    side = _ad_side(ew, at)
    if not isinstance(side, Fraction):
        return side - at
    b = ew.breakpoints[at]
    left, right = _dpoly(ew.pieces[at].poly, b), _dpoly(ew.pieces[at + 1].poly, b)
    if side == left:
        return 0
    if side == right:
        return 1
    return None


def _ad_rule(ew, at):
    """AD's rule at breakpoint ``at``: the rule given for ``ew.name`` (one Rule, or one per kink) or PyTorch's."""
    conv = context.given_rule(ew.name)
    if conv is None:
        return ew.torch_rules[at]
    if isinstance(conv, tuple):
        if len(conv) != len(ew.breakpoints):
            raise UnsupportedOpError(
                f"the rule given for {ew.name} has {len(conv)} rules but this call has {len(ew.breakpoints)} "
                "kinks; give one rule for every kink, or one per kink of this call")
        return conv[at]
    return conv


def _ad_side(ew, at):
    """Index of the piece whose derivative AD uses at breakpoint ``at`` (rules left, right, inside), or a fixed
    derivative (Fraction: mix and value rules, e.g. abs'(0) = 0)."""
    rule = _ad_rule(ew, at)
    piece = ew.rule_piece(at, rule)
    if piece is not None:
        return piece
    b = ew.breakpoints[at]
    return F(rule.kink_derivative(_dpoly(ew.pieces[at].poly, b), _dpoly(ew.pieces[at + 1].poly, b)))


def elementwise_op(ew, a):
    """Apply elementwise op ``ew`` to every entry of ``a`` (kink sites recorded or branched on)."""
    a = arr(a)
    fa = context.current().float_arg(0)
    ff = fa.reshape(-1) if fa is not None and fa.size == a.size else None
    out = np.empty(a.shape, dtype=object)
    of, af = out.reshape(-1), a.reshape(-1)
    for i in context.polled_range(af.size):
        of[i] = _apply_elementwise(ew, af[i], (i,), None if ff is None else ff[i])
    return out


def ad_derivative(ew, v, *, given: bool = True):
    """The derivative that AD uses for elementwise op ``ew`` at the exact value ``v``: the piece's derivative
    off the kinks, AD's rule at a kink (PyTorch's, or the rule given in ``rules=``; ``given=False``: PyTorch's).
    It is the op's exact backward: the reverse mode's backward ops use it (``threshold_backward`` below);
    the forward mode applies the same rule in :func:`_apply_elementwise`.  A value whose enclosure straddles a
    breakpoint raises (the piece is unknown)."""
    for i, b in enumerate(ew.breakpoints):
        s = sign(v - b)
        if s is None:
            raise straddle_error(ew.name)
        if s == 0:
            side = _ad_side(ew, i) if given else ew.rule_piece(i)
            if side is None:  # PyTorch's rule is a fixed value or a mix of the sides (abs: the even split)
                side = F(ew.kink_derivative(i))
            return side if isinstance(side, Fraction) else _dpoly(ew.pieces[side].poly, b)
        if s < 0:
            return _dpoly(ew.pieces[i].poly, v)
    return _dpoly(ew.pieces[len(ew.breakpoints)].poly, v)


def elementwise_backward(ew, grad, x, name: str | None = None):
    """``grad`` times AD's derivative of elementwise op ``ew`` at every entry of ``x`` (the reverse mode; in a
    program that differentiates inside fn, also a forward op: :func:`check_steps` refuses its jumps, naming the op
    ``name`` or ``ew.name``)."""
    check_steps(ew, grad, x, name)
    return arr(grad) * objmap(lambda v: ad_derivative(ew, val(v)), arr(x))


def depends_on_w(v) -> bool:
    """Whether an entry depends on w: an affine form with a derivative or a curved one (forward and pieces mode),
    a jet that moves along its ray, or relu's 0 at a kink of such an argument (:func:`_kink_output`). The reverse
    mode's plain numbers never do."""
    if isinstance(v, Aff):
        return bool(v.g) or not v.lin
    if isinstance(v, Jet):
        return any(not is_zero(c) for c in v.c[1:])
    return getattr(v, "moving", False)


def _at_w(v):
    """An entry's value at w (a jet's constant term)."""
    return v.c[0] if isinstance(v, Jet) else val(v)


def check_steps(ew, grad, x, name: str | None = None) -> None:
    """Refuse to evaluate the derivative of elementwise op ``ew`` -- a step at every kink whose one-sided
    derivatives differ -- at such a kink when its argument ``x`` depends on w (a program that differentiates
    inside fn: a gradient penalty, a Hessian-vector product, ``create_graph=True``, ``jacrev``).

    There ``grad * ew'(x)`` jumps by ``grad * (right - left)`` as w crosses the kink, so fn is discontinuous and has
    no Clarke set. Where ``grad`` is a constant 0 both sides give 0 and nothing is refused; where it is 0 at w
    but depends on w, fn is continuous with a kink the exact oracle does not follow, which is refused too. Away from
    the kinks the step is locally constant and the op is evaluated as usual."""
    ctx = context.current()
    if ctx.n == 0 and ctx.mode == "ad":  # the reverse mode's plain numbers: nothing depends on w
        return
    xs = arr(x)
    if not any(depends_on_w(v) for v in xs.reshape(-1)):
        return
    gs, xs = np.broadcast_arrays(arr(grad), xs)  # (vmap's batched grads broadcast against x: jacrev)
    g, flat = gs.reshape(-1), xs.reshape(-1)
    for i in range(flat.size):
        v = flat[i]
        if not depends_on_w(v):
            continue
        for b in ew.breakpoints:
            if sign(_at_w(v) - b) != 0:
                continue
            left, right = ew.one_sided(b)
            if left == right:
                continue  # no step: the derivative is continuous at this kink
            gi = g[i]
            if not depends_on_w(gi) and is_zero(_at_w(gi)):
                continue
            what = name or ew.name
            op = ctx.op_name
            if depends_on_w(gi) and is_zero(_at_w(gi)):
                raise UnsupportedOpError(
                    f"fn reads the derivative of {what} (aten.{op}) at its kink {b}, where its argument depends "
                    f"on w, times a factor that is 0 at w but depends on w: fn may be continuous there, but the "
                    f"exact oracle does not follow the pieces of a step. Check a point off the kink")
            raise UnsupportedOpError(
                f"fn is discontinuous at w: the derivative of {what} at a kink is a step; no Clarke set. fn "
                f"reads it (aten.{op}) where its argument depends on w and sits exactly at the kink {b} (a "
                f"gradient penalty, a Hessian-vector product or create_graph=True through {what}), so fn jumps "
                f"by {_at_w(gi)} x ({right} - {left}) there. The Clarke subdifferential needs a locally "
                "Lipschitz fn: check a point off the kink")


class RegistryOps:
    """The ATen ops of the registry's exact elementwise entries (the resolver of
    :data:`nsverify.oracle.ops.table.TABLE`, asked after the table's own records): each
    forward op evaluates the entry's pieces and each backward op its exact derivative, for the instance of the
    call's scalar arguments. Rebuilt from the registry whenever an entry is registered or removed."""

    def __init__(self):
        self._version = None
        self._table: dict = {}

    def table(self) -> dict:
        v = registry.version()
        if v != self._version:
            table: dict = {}
            # exact and fixed: an op with a learnable tensor argument (prelu) has its own records below
            for e in registry.select("elementwise", exact=True, fixed=True):
                if e.shared_with is None:
                    for a in e.aten_forward:
                        table.setdefault(a, _forward_impl(e))
                for a in e.backward:
                    table.setdefault(a, _backward_impl(e))
            self._table, self._version = table, v
        return self._table

    def resolve(self, name: str, base: str):
        t = self.table()
        return t.get(name) or t.get(base)

    def names(self) -> list[str]:
        return sorted(self.table())


def _forward_impl(entry):
    def forward(a, *args, **kw):
        return elementwise_op(entry.instance(args, kw), a)

    return forward


def _backward_impl(entry):
    def backward(grad, x, *args, **kw):
        return elementwise_backward(entry.instance(args, kw), grad, x)

    return backward


# threshold_backward: the backward op of relu (a registry entry) and of the argument-only threshold; the other
# entries' backward ops (leaky_relu_backward, hardtanh_backward, ...) are read from the registry (RegistryOps).
def _threshold_backward(grad, x, threshold):
    """relu's backward reads relu's output (kink entries are tagged KinkZero); threshold's reads its input."""
    ew = threshold_for(threshold, 0)
    relu = scalar(threshold) == 0
    if relu and context.given_rule("relu") is not None:
        check_steps(ew, grad, x, "relu")
        at_kink = ad_derivative(registry.get("relu"), F(0))
        return arr(grad) * objmap(lambda v: at_kink if isinstance(v, KinkZero) else
                                  ad_derivative(ew, val(v), given=False), arr(x))
    return elementwise_backward(ew, grad, x, "relu" if relu else None)


def _threshold(a, threshold, value):
    return elementwise_op(threshold_for(threshold, value), a)


# ------------------------------------------------------------------------------------------------------ prelu
# prelu(x, weight) = x where x > 0, else weight * x: the registry's prelu with a slope that is a tensor argument (one
# entry, or one per channel broadcast along dim 1 by ATen's view) and may depend on w. At x == 0 both pieces are
# 0; with x and the slope a depending on w, the right piece x has gradient grad(x) and the left piece a * x has
# gradient a * grad(x) + x * grad(a) = a * grad(x): the kink is leaky_relu's with the slope's value, and the
# slope's own gradient enters only through x != 0.
def _prelu_side(a):
    """AD's derivative at prelu's kink with slope value ``a``: 0 (the left piece, a * x), 1 (the right piece, x)
    or a fixed derivative (a Fraction or an enclosure: mix and value rules), under the rule given for prelu or
    PyTorch's (the reverse mode's: its backward kernel tests x > 0, the left piece)."""
    tmpl = registry.get("prelu")
    rule = _ad_rule(tmpl, 0)
    inst = registry.prelu_for(a) if is_exact(a) else tmpl  # an enclosed slope is not 0: "inside" is the left piece
    piece = inst.rule_piece(0, rule)
    return piece if piece is not None else rule.kink_derivative(a, F(1))


def _same(d, e) -> bool:
    """Are two derivatives exactly equal (False when either is an enclosure)?"""
    return is_exact(d) and is_exact(e) and d == e


def _prelu_entry(x, a, loc, fx=None):
    ctx = context.current()
    s = sign(val(x))
    if s is None:
        raise straddle_error("prelu")
    if s != 0:
        if fx is not None and fx == 0 and isinstance(x, Aff):
            ctx.note_float_only("prelu", loc, fx, val(x))
        return x if s > 0 else a * x
    if not isinstance(x, Aff):  # a constant sitting on the kink: 0 on both pieces, nothing flows through
        return F(0)
    g = grad(x)
    site = Site("prelu", ctx.call, loc, F(0), affine=is_lin(x), slopes=(g,),
                float_tie=None if fx is None else bool(fx == 0))
    av = val(a)
    if ctx.mode == "ad" or not g:
        ctx.note(site)
        if not g:
            return a * x
        side = _prelu_side(av)
        if type(side) is int:  # a piece
            return x if side else a * x
        return mk(F(0), {k: side * c for k, c in g.items()} if not is_zero(side) else {}, is_lin(x))
    side = _prelu_side(av)
    if type(side) is int:
        site.ad_option = side
    else:  # a fixed derivative that equals a side's counts as that side (as for the registry's entries)
        site.ad_option = 0 if _same(side, av) else 1 if _same(side, F(1)) else None
    choice = ctx.branch(site, [("left", [_neg_g(g)]), ("right", [g])])
    return a * x if choice == 0 else x


def _prelu_kernel(x, weight):
    """aten._prelu_kernel(x, weight): the weight is already viewed to broadcast against x (dim 1: channels)."""
    x = arr(x)
    w = np.broadcast_to(arr(weight), x.shape)
    fa = context.current().float_arg(0)
    ff = fa.reshape(-1) if fa is not None and fa.size == x.size else None
    out = np.empty(x.shape, dtype=object)
    of, xf, wf = out.reshape(-1), x.reshape(-1), np.ascontiguousarray(w).reshape(-1)
    for i in context.polled_range(xf.size):
        of[i] = _prelu_entry(xf[i], wf[i], (i,), None if ff is None else ff[i])
    return out


def _prelu_kernel_backward(grad, x, weight):
    """(grad_input, grad_weight), both of x's shape (autograd sums grad_weight over the broadcast dims):
    grad * (1 where x > 0, weight where x < 0) and grad * (0 where x > 0, x where x < 0), PyTorch's CPU kernel.
    At x == 0 grad_input follows AD's rule (:func:`_prelu_side`; PyTorch's: weight * grad) and grad_weight is
    grad * x = 0 on either piece."""
    x = arr(x)
    g = np.broadcast_to(arr(grad), x.shape).reshape(-1)
    w = np.ascontiguousarray(np.broadcast_to(arr(weight), x.shape)).reshape(-1)
    gi = np.empty(x.size, dtype=object)
    gw = np.empty(x.size, dtype=object)
    xf = x.reshape(-1)
    for i in context.polled_range(x.size):
        v, a = val(xf[i]), w[i]
        s = sign(v)
        if s is None:
            raise straddle_error("prelu")
        if s > 0:
            gi[i], gw[i] = g[i], F(0)
        elif s < 0:
            gi[i], gw[i] = g[i] * a, g[i] * xf[i]
        else:
            if depends_on_w(xf[i]) and (depends_on_w(g[i]) or not is_zero(val(g[i]))):
                raise UnsupportedOpError(  # grad_input jumps by grad * (1 - a); grad_weight = grad * x has a kink
                    "fn is discontinuous at w (or has a kink the exact oracle does not follow): the derivative of "
                    "prelu at a kink is a step; no Clarke set. fn reads it (aten._prelu_kernel_backward) where its "
                    "argument depends on w and sits exactly at the kink 0 (a gradient penalty or create_graph=True "
                    "through prelu). Check a point off the kink")
            side = _prelu_side(val(a))
            d = side if type(side) is not int else F(1) if side else a
            gi[i], gw[i] = g[i] * d, F(0)
    return gi.reshape(x.shape), gw.reshape(x.shape)


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
    if x is y:  # the same number (e.g. max's output against its own input entry): equal, whatever its enclosure
        return _CMP[name](0)
    diff = x - y
    test = _CMP[name]
    if isinstance(diff, Jet):  # a ray trace: the outcome for every small t > 0
        return test(_jet_side(ctx, name, loc, diff))
    s = sign(val(diff))
    if s is None:
        raise straddle_error(name, " in a comparison")
    depends = isinstance(diff, Aff)
    if s != 0:
        if fxy is not None and depends and fxy[0] == fxy[1]:
            ctx.note_float_only(name, loc, fxy[0], val(x))
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
        if test(-1) != test(1):  # AD takes the exact outcome test(0): the side that gives the same outcome
            site.ad_option = 0 if test(0) == test(-1) else 1
        choice = ctx.branch(site, [("<", [_neg_g(g)]), (">", [g])])
    return test(-1 if choice == 0 else 1)


def _compare(name):
    def impl(a, b):
        a, b = np.broadcast_arrays(arr(a), arr(b))
        ctx = context.current()
        fa = ctx.float_arg(0)
        fb = ctx.float_arg(1) if ctx.float_arg(1) is not None else (
            np.asarray(float(b.reshape(-1)[0])) if b.size == 1 and not isinstance(b.reshape(-1)[0], (Aff, Jet))
            else None)
        fl = float_pair(a.shape, fa, fb)
        out = np.empty(a.shape, dtype=bool)
        for pos in np.ndindex(*a.shape):
            fxy = None if fl is None else (fl[0][pos], fl[1][pos])
            out[pos] = _compare_entry(a[pos], b[pos], name, pos, fxy)
        return out

    return impl


def _where(cond, a=None, b=None):
    if a is None:
        raise UnsupportedOpError("torch.where(cond) with one argument (nonzero) is not supported exactly")
    return np.asarray(np.where(cond.astype(bool), arr(a), arr(b)), dtype=object)


def _lnot(a):
    return ~a.astype(bool)


def _land(a, b):
    return np.logical_and(a, b)


def _lor(a, b):
    return np.logical_or(a, b)


def _any(a, dim=None, keepdim=False):
    return np.asarray(
        np.any(a.astype(bool)) if dim is None else np.any(a.astype(bool), axis=dim, keepdims=keepdim)
    )


def _all(a, dim=None, keepdim=False):
    return np.asarray(
        np.all(a.astype(bool)) if dim is None else np.all(a.astype(bool), axis=dim, keepdims=keepdim)
    )


def _sign(a):
    """sign and sgn (abs's backward multiplies by sgn): a w-dependent 0 is a step, refused (never a constant)."""
    def f(x):
        s = sign(val(x))
        if s is None:
            raise straddle_error("sign")
        if s == 0 and depends_on_w(x):
            raise UnsupportedOpError(
                "fn is discontinuous at w: sign() (sgn, also the derivative of abs) of a value that depends on w "
                "is a step at 0, and the value is exactly 0 here; no Clarke set (the Clarke oracle needs a locally "
                "Lipschitz fn). Rewrite without sign(), or check a point where the value is not 0"
            )
        return F(s)

    return objmap(f, arr(a))


RECORDS = (
    ExactOp(("threshold",), _threshold, backward_names=("threshold_backward",), backward=_threshold_backward),
    ExactOp(("_prelu_kernel",), _prelu_kernel, backward_names=("_prelu_kernel_backward",),
            backward=_prelu_kernel_backward),
    *(ExactOp((name,), _compare(name)) for name in _CMP),
    # where with a condition that does not depend on w (optrace's watcher declines one that does)
    ExactOp(("where",), _where, analytic=True, nodes=("WhereBackward0",)),
    ExactOp(("logical_not",), _lnot),
    ExactOp(("logical_and", "bitwise_and"), _land),
    ExactOp(("logical_or", "bitwise_or"), _lor),
    ExactOp(("any",), _any),
    ExactOp(("all",), _all),
    ExactOp(("sign", "sgn"), _sign),
)
