"""Hypothesis strategies that put networks *exactly* on kinks and ties.

Random floats essentially never land on a kink, so these strategies construct the ties on purpose:

* :func:`networks` draws a :class:`~nsverify.strategies.netspec.NetSpec` (exact dyadic parameters, depth 1-4,
  linear / conv1d / conv2d layers, residual sums, any registry activation or AD variant, no / trivial /
  (overlapping) max pooling, distinct / shared / no biases, tied-negated rows, batch 1-4, linear / squared /
  cross-entropy loss);
* :func:`tie_points` adjusts parameters and inputs so that chosen sites sit exactly on a kink or a pool tie
  (equal values, duplicated patches/rows, all-dead windows), several per layer or across layers, and verifies
  the ties exactly in ``Fraction`` and in the target float dtype (float16 and bfloat16 included);
* :func:`near_ties` moves a forced tie a few ulps away from its kink;
* :func:`dtypes` and :func:`devices` (CUDA only when present);
* ``networks(blocks=(...))`` / :func:`block_networks` draw a :class:`~nsverify.strategies.blocks.BlockNetSpec`
  instead: residual (convolution or Linear, identity or 1x1 shortcut), eval-mode BatchNorm (rational scales),
  pre-norm LayerNorm MLP and softmax attention blocks (1-2 heads) with a ReLU head, dyadic parameters, integer
  inputs and planted exact ties (zeroed ReLU rows, dead units, repeated-patch max-pool windows).

All randomness goes through ``draw``; shrinking moves toward fewer layers, smaller widths, fewer ties, small
integers (every size is an ``integers`` draw whose minimum is the simplest choice, every choice a
``sampled_from`` whose first element is the simplest).
"""

from __future__ import annotations

import math
from dataclasses import replace
from fractions import Fraction

import numpy as np
import torch
from hypothesis import assume
from hypothesis import strategies as st

from nsverify.devices import FLOAT_DTYPES, available_devices, dtype_name, parse_dtype
from nsverify.errors import InexactError, NsverifyError
from nsverify.strategies.blocks import (
    BLOCK_KINDS,
    BLOCK_LOSSES,
    BLOCK_TIE_KINDS,
    BlockNetSpec,
    BlockTie,
    block_networks,
)
from nsverify.strategies.netspec import (
    _PRECISION,
    LAYER_KINDS,
    LOSSES,
    Activation,
    Layer,
    NetSpec,
    Pool,
    SpecSite,
    _flat_in,
    _pre_shape,
    check_exact,
    exact_forward,
    pool_windows,
    representable,
    require_representable,
)

TIE_KINDS = ("kink", "pool_equal", "pool_dup", "pool_dead")


# ----------------------------------------------------------------------------------------------------------
# small building blocks
# ----------------------------------------------------------------------------------------------------------
def dyadics(max_int: int = 4, frac_bits: int = 1) -> st.SearchStrategy[Fraction]:
    """k / 2^d with |k| <= max_int and 0 <= d <= frac_bits; shrinks toward 0 and small denominators."""
    return st.builds(
        lambda k, d: Fraction(k, 1 << d), st.integers(-max_int, max_int), st.integers(0, frac_bits)
    )


def dtypes(include=None, device=None) -> st.SearchStrategy[torch.dtype]:
    """Float dtypes (float32 first, so failures shrink to it). float16 is left out on CPU unless asked for,
    because float16 matmul/convolution on CPU is very slow."""
    if include is None:
        names = ["float32", "float64", "bfloat16"]
        if device is not None and torch.device(device).type == "cuda":
            names.append("float16")
    else:
        names = [dtype_name(parse_dtype(d)) for d in include]
    return st.sampled_from([FLOAT_DTYPES[n] for n in names])


def devices() -> st.SearchStrategy[str]:
    """'cpu', plus 'cuda' only when a GPU is present."""
    return st.sampled_from(available_devices())


def _default_activations() -> list[str]:
    """The activations a network draw may use, selected by capability: the registry's elementwise entries that
    are exact (all pieces polynomial: exactly evaluable) and fixed functions (not prelu, whose slope is a
    parameter), left out where PyTorch lacks a kernel for a float dtype (the entry's ``unsupported``: a network is
    built in any dtype). The table's first such entry comes first (draws shrink to it), the others by name. An
    entry registered later (``registry.register``) is drawn too."""
    from nsverify import registry

    names = [e.name for e in registry.select("elementwise", exact=True, fixed=True)
             if not any(k in FLOAT_DTYPES for k in e.unsupported)]
    return names[:1] + sorted(names[1:])


def _check_activation(key: str) -> str:
    Activation(key)  # raises UnknownOpError / RuleError for unknown ops and rules
    return key


# ----------------------------------------------------------------------------------------------------------
# networks
# ----------------------------------------------------------------------------------------------------------
@st.composite
def networks(
    draw,
    depth=(1, 4),
    kinds=LAYER_KINDS,
    activations=None,
    pooling=("none", "trivial", "maxpool"),
    bias_modes=("distinct", "none", "shared", "tied"),
    batch=(1, 4),
    losses=LOSSES,
    width=(1, 4),
    residual: bool = True,
    frozen=(False,),
    max_int: int = 3,
    frac_bits: int = 1,
    image=(3, 5),
    blocks=(),
):
    """Draw a network specification with exact dyadic parameters.

    ``blocks``: empty (the default) draws a :class:`~nsverify.strategies.netspec.NetSpec` as described here. A
    non-empty tuple of block kinds (``"residual"``, ``"batchnorm"``, ``"layernorm"``, ``"attention"``) draws a
    :class:`~nsverify.strategies.blocks.BlockNetSpec` instead: a small model of those blocks with dyadic weights,
    integer inputs and planted exact ties (:func:`~nsverify.strategies.blocks.block_networks`, which takes the
    block options; of this function's options only ``losses``, ``pooling`` (``"maxpool"`` lets image blocks end
    with a max pool) and ``batch`` (at most 2) are passed on).

    ``kinds``: allowed layer kinds; the input kind is drawn from them (linear layers only follow other layers'
    outputs, flattened). ``activations``: registry names or AD variants with their kink rules in brackets
    (``"relu[value=1/2]"``, ``"hardsigmoid[left,left]"``, see :class:`~nsverify.strategies.netspec.Activation`),
    default every exactly evaluable registry primitive plus ``identity``.
    ``bias_modes``: any of ``distinct``, ``none``, ``shared``, ``tied`` (tied-negated rows, without a bias or
    with a shared one). ``frozen``: allowed values of the frozen-weight flag (True = the weight is a constant, so
    only the bias is a parameter, as in Park's Lemma 3).
    """
    if blocks:
        return draw(
            block_networks(
                blocks=tuple(blocks),
                losses=[loss for loss in losses if loss in BLOCK_LOSSES] or ["linear"],
                pooling=tuple(pooling),
                batch=(min(batch[0], 2), min(batch[1], 2)),
            )
        )
    kinds = tuple(kinds)
    for k in kinds:
        if k not in LAYER_KINDS:
            raise NsverifyError(f"unknown layer kind {k!r}; choose from {', '.join(LAYER_KINDS)}")
    acts = [_check_activation(a) for a in (activations or _default_activations() + ["identity"])]
    n_layers = draw(st.integers(*depth), label="depth")
    in_kind = draw(st.sampled_from(kinds), label="input kind")
    B = draw(st.integers(*batch), label="batch")
    if in_kind == "linear":
        in_shape = (draw(st.integers(*width), label="input width"),)
    elif in_kind == "conv1d":
        in_shape = (draw(st.integers(1, 2)), draw(st.integers(*image)))
    else:
        side = draw(st.integers(*image))
        in_shape = (draw(st.integers(1, 2)), side, side)
    shape = in_shape
    layers = []
    val = dyadics(max_int, frac_bits)
    for li in range(n_layers):
        kind = (
            "linear"
            if len(shape) == 1
            else draw(
                st.sampled_from(
                    [k for k in kinds if k == "linear" or len(shape) == (2 if k == "conv1d" else 3)]
                    or ["linear"]
                )
            )
        )
        bias_mode = draw(st.sampled_from(list(bias_modes)), label=f"bias mode {li}")
        tied = bias_mode == "tied"
        if tied:
            bias_mode = draw(st.sampled_from(["none", "shared"]))
        out_free = draw(st.integers(*width), label=f"width {li}")
        out = 2 * out_free if tied else out_free
        if kind == "linear":
            kernel = 0
            n_in = math.prod(shape)
            wshape = (out_free, n_in)
        else:
            kernel = draw(st.integers(1, min(3, min(shape[1:]))), label=f"kernel {li}")
            wshape = (out_free, shape[0]) + (kernel,) * (len(shape) - 1)
        layer = Layer(kind, out, kernel, (), wshape, bias_mode, (), (), "identity")
        pre = _pre_shape(layer, shape)
        if bias_mode == "distinct":
            bshape = pre
        elif bias_mode == "shared":
            bshape = (out,) if kind != "linear" else (1,)
        else:
            bshape = ()
        weight = tuple(draw(st.lists(val, min_size=math.prod(wshape), max_size=math.prod(wshape))))
        bias = (
            tuple(draw(st.lists(val, min_size=math.prod(bshape), max_size=math.prod(bshape))))
            if bshape
            else ()
        )
        act = draw(st.sampled_from(acts), label=f"activation {li}")
        pmode = draw(st.sampled_from(list(pooling)), label=f"pooling {li}")
        pool = None
        if pmode == "trivial":
            pool = Pool(1, 1)
        elif pmode == "maxpool":
            span = pre[0] if kind == "linear" else min(pre[1:])
            if span >= 2:
                k = draw(st.integers(2, min(3, span)), label=f"pool kernel {li}")
                pool = Pool(k, draw(st.integers(1, k), label=f"pool stride {li}"))
        fr = draw(st.sampled_from(list(frozen))) and bias_mode != "none"
        zin_shape = (math.prod(shape),) if kind == "linear" else tuple(shape)
        res = residual and pre == zin_shape
        res = bool(res) and draw(st.booleans(), label=f"residual {li}")
        layer = replace(
            layer,
            weight=weight,
            bias=bias,
            bshape=bshape,
            act=act,
            pool=pool,
            residual=res,
            tied=tied,
            frozen=fr,
        )
        layers.append(layer)
        shape = _out_shape_of(layer, shape)
    x = tuple(draw(st.lists(val, min_size=B * math.prod(in_shape), max_size=B * math.prod(in_shape))))
    loss = draw(st.sampled_from(list(losses)), label="loss")
    n_out = math.prod(shape)
    if loss == "cross_entropy":
        target = tuple(draw(st.lists(st.integers(0, n_out - 1), min_size=B, max_size=B)))
    else:
        target = tuple(draw(st.lists(val, min_size=B * n_out, max_size=B * n_out)))
    return NetSpec(
        in_kind,
        in_shape,
        B,
        x,
        tuple(layers),
        loss,
        target,
        meta={"max_int": max_int, "frac_bits": frac_bits},
    )


def _out_shape_of(layer, shape):
    from nsverify.strategies.netspec import _out_shape

    return _out_shape(layer, shape)


# ----------------------------------------------------------------------------------------------------------
# forcing ties
# ----------------------------------------------------------------------------------------------------------
class _Editable:
    """Mutable copy of a spec's values, for adjusting one scalar at a time."""

    def __init__(self, spec: NetSpec):
        self.spec = spec
        self.x = list(spec.x)
        self.w = [list(L.weight) for L in spec.layers]
        self.b = [list(L.bias) for L in spec.layers]

    def freeze(self) -> NetSpec:
        layers = [
            replace(L, weight=tuple(w), bias=tuple(b)) for L, w, b in zip(self.spec.layers, self.w, self.b)
        ]
        return replace(self.spec, x=tuple(self.x), layers=tuple(layers))


def _adjusters(spec: NetSpec, trace, li: int, idx: tuple):
    """Scalars that move the pre-activation y[idx] of layer li linearly with a power-of-two coefficient:
    (key, coefficient, setter-info). Bias first (coefficient 1), then weights, then (layer 0) inputs."""
    L = spec.layers[li]
    b, o, pos = idx[0], idx[1], idx[2:]
    out = []
    if L.bias_mode == "distinct":
        flat = int(np.ravel_multi_index((o, *pos), L.bshape))
        out.append((("b", li, flat), Fraction(1)))
    elif L.bias_mode == "shared":
        out.append((("b", li, o if L.kind != "linear" else 0), Fraction(1)))
    free_rows = L.wshape[0]
    row, sign = (o, 1) if not L.tied or o < free_rows else (o - free_rows, -1)
    zin = trace.z[li - 1] if li else _input_array(spec)
    if zin is not None and _flat_in(L, zin.shape[1:]):
        zin = zin.reshape(spec.batch, -1)
    if not L.frozen and zin is not None:
        wsub = np.arange(math.prod(L.wshape)).reshape(L.wshape)[row]
        if L.kind == "linear":
            cands = [(int(wsub[j]), zin[b, j]) for j in range(zin.shape[1])]
        else:
            sl = tuple(slice(p, p + L.kernel) for p in pos)
            patch = zin[(b, slice(None), *sl)]
            cands = [(int(f), v) for f, v in zip(wsub.ravel(), patch.ravel())]
        for flat, v in cands:
            if v is not None and v != 0 and _pow2(abs(v)):
                out.append((("w", li, flat), sign * v))
    if li == 0 and not L.residual:
        W = np.array(L.weight, dtype=object).reshape(L.wshape)[row]
        xshape = (spec.batch, *spec.in_shape)
        if L.kind == "linear":
            for j in range(math.prod(spec.in_shape)):
                c = W[j]
                if c != 0 and _pow2(abs(c)):
                    out.append((("x", 0, b * math.prod(spec.in_shape) + j), sign * c))
        else:
            for kidx in np.ndindex(*W.shape):
                c = W[kidx]
                if c != 0 and _pow2(abs(c)):
                    cin, koff = kidx[0], kidx[1:]
                    xidx = (b, cin, *[p + k for p, k in zip(pos, koff)])
                    out.append((("x", 0, int(np.ravel_multi_index(xidx, xshape))), sign * c))
    return out


def _input_array(spec):
    a = np.empty(len(spec.x), dtype=object)
    a[:] = list(spec.x)
    return a.reshape((spec.batch, *spec.in_shape))


def _pow2(v: Fraction) -> bool:
    return v.numerator & (v.numerator - 1) == 0 and v.denominator & (v.denominator - 1) == 0


def _chooser(draw):
    return lambda n: draw(st.integers(0, n - 1), label="adjuster")


def retie(spec: NetSpec, kinks) -> NetSpec | None:
    """Put each (layer, index, value) pre-activation back exactly on ``value`` with the first available
    adjuster
    (deterministic; used when shrinking a counterexample). None when some site cannot be re-tied."""
    ed = _Editable(spec)
    used: set = set()
    for li, idx, value in sorted(kinks, key=lambda k: k[0]):
        if not _set_pre(lambda n: 0, ed, li, idx, value, used):
            return None
    return ed.freeze()


def _apply(ed: _Editable, key, delta: Fraction):
    kind, li, flat = key
    if kind == "b":
        ed.b[li][flat] += delta
    elif kind == "w":
        ed.w[li][flat] += delta
    else:
        ed.x[flat] += delta


def _set_pre(choose, ed: _Editable, li: int, idx: tuple, target: Fraction, used: set) -> bool:
    """Move pre-activation y_li[idx] exactly to ``target`` with one adjuster not used before."""
    spec = ed.freeze()
    trace = exact_forward(spec)
    if li >= len(trace.y):
        return False
    cur = trace.y[li][idx]
    if cur is None:
        return False
    if cur == target:
        return True
    cands = [(k, c) for k, c in _adjusters(spec, trace, li, idx) if k not in used]
    if not cands:
        return False
    key, coef = cands[choose(len(cands))]
    _apply(ed, key, (target - cur) / coef)
    used.add(key)
    return True


@st.composite
def tie_points(
    draw, spec_strategy, ties=(1, 3), kinds=TIE_KINDS, dtype=torch.float32, device="cpu", verify: bool = True
) -> NetSpec:
    """Draw a network from ``spec_strategy`` (a strategy or a fixed NetSpec) and force 1..n exact ties.

    ``kinds``: ``kink`` (a pre-activation exactly at a breakpoint of its activation), ``pool_equal`` (two
    entries of a max-pool window equal to the window's maximum), ``pool_dup`` (duplicated receptive fields: a copied
    input patch for a first-layer convolution, a duplicated weight row + bias for a linear layer), ``pool_dead``
    (every entry of a window on the activation's flat lower piece). The returned spec lists the forced sites
    in ``spec.forced``; every forced site is re-found by exact evaluation, and with ``verify`` the float forward
    in ``dtype`` reproduces every exact value up to the deepest forced layer (else the draw is rejected).
    Raises :class:`~nsverify.errors.InexactError` when the pattern can never be exact in ``dtype`` (e.g. a
    kink value or a parameter range outside the dtype's exact range).
    """
    dtype = parse_dtype(dtype)
    spec = spec_strategy if isinstance(spec_strategy, NetSpec) else draw(spec_strategy)
    if "max_int" in spec.meta:
        exact_range_check(spec.meta["max_int"], spec.meta["frac_bits"], dtype)
    _check_possible(spec, dtype)
    n = draw(st.integers(*ties), label="number of ties")
    ed = _Editable(spec)
    used: set = set()
    requests = []
    for _ in range(n):
        li = draw(st.integers(0, len(spec.layers) - 1), label="tie layer")
        L = spec.layers[li]
        possible = [k for k in kinds if _kind_possible(k, L, li)]
        if not possible:
            continue
        kind = draw(st.sampled_from(possible), label="tie kind")
        requests.append((li, kind))
    requests.sort(key=lambda r: r[0])  # earlier layers first: adjusting layer l never moves layers < l
    forced = []
    for li, kind in requests:
        site = _force(draw, ed, li, kind, used)
        if site is not None:
            forced.append(site)
    assume(forced)
    out = ed.freeze()
    trace = exact_forward(out)
    found = {(s.kind, s.layer, s.index) for s in trace.sites}
    keep = [s for s in forced if (s.kind, s.layer, s.index) in found]
    assume(len(keep) == len(forced))  # a later adjustment broke an earlier tie: reject the draw
    out = replace(out, forced=tuple(forced))
    if verify:
        deepest = max(s.layer for s in forced)
        assume(trace.inexact_from is None or trace.inexact_from > deepest)
        rep = check_exact(out, dtype, device, upto=deepest, trace=trace)
        assume(rep.ok)
        out = replace(out, dtype_checked=dtype_name(dtype))
    return out


def _kind_possible(kind: str, L: Layer, li: int) -> bool:
    if kind == "kink":
        return bool(L.activation.breakpoints)
    if L.pool is None or L.pool.trivial:
        return False
    if kind == "pool_dead":
        return L.activation.flat_low() is not None
    if kind == "pool_dup":
        return L.kind == "linear" and not L.tied and not L.frozen or (L.kind != "linear" and li == 0)
    return True


def _force(draw, ed: _Editable, li: int, kind: str, used: set):
    spec = ed.freeze()
    trace = exact_forward(spec)
    if li >= len(trace.y):
        return None
    L = spec.layers[li]
    y = trace.y[li]
    if kind == "kink":
        idx = draw(st.sampled_from(list(np.ndindex(*y.shape))), label="kink entry")
        kink = draw(st.sampled_from(list(L.activation.breakpoints)), label="which kink")
        if _set_pre(_chooser(draw), ed, li, idx, kink, used):
            return SpecSite("kink", li, idx, kink, how="kink")
        return None
    windows = list(pool_windows(L, y.shape[1:]))
    b = draw(st.integers(0, spec.batch - 1), label="pool sample")
    oidx, members = windows[draw(st.integers(0, len(windows) - 1), label="pool window")]
    if kind == "pool_dead":
        low = L.activation.flat_low()
        for m in members:
            if not _set_pre(_chooser(draw), ed, li, (b, *m), low, used):
                return None
        value = L.activation.exact(low)
        return SpecSite("pool", li, (b, *oidx), value, tuple((b, *m) for m in members), how="dead")
    p, q = sorted(
        draw(
            st.lists(st.integers(0, len(members) - 1), min_size=2, max_size=2, unique=True), label="tied pair"
        )
    )
    mp, mq = (b, *members[p]), (b, *members[q])
    if kind == "pool_equal":
        a = trace.a[li]
        top = max(members, key=lambda m: a[(b, *m)])
        target = y[(b, *top)]
        for m in (mp, mq):
            if not _set_pre(_chooser(draw), ed, li, m, target, used):
                return None
        how = "equal"
    else:  # pool_dup
        if L.kind == "linear":
            rp, rq = mp[1], mq[1]
            n_in = L.wshape[1]
            for j in range(n_in):
                ed.w[li][rq * n_in + j] = ed.w[li][rp * n_in + j]
            if L.bias_mode == "distinct":
                ed.b[li][rq] = ed.b[li][rp]
            used.update({("w", li, rq * n_in + j) for j in range(n_in)})
        else:
            xs = (spec.batch, *spec.in_shape)
            k = L.kernel
            for cin in range(spec.in_shape[0]):
                for off in np.ndindex(*(k,) * (len(xs) - 2)):
                    src = (b, cin, *[a + c for a, c in zip(mp[2:], off)])
                    dst = (b, cin, *[a + c for a, c in zip(mq[2:], off)])
                    ed.x[int(np.ravel_multi_index(dst, xs))] = ed.x[int(np.ravel_multi_index(src, xs))]
            if L.bias_mode == "distinct":
                ed.b[li][int(np.ravel_multi_index(mq[1:], L.bshape))] = ed.b[li][
                    int(np.ravel_multi_index(mp[1:], L.bshape))
                ]
        how = "duplicated"
        # make the duplicated pair the window maximum: lift both to the top pre-activation when possible
        t2 = exact_forward(ed.freeze())
        a = t2.a[li]
        if a[mp] != max(a[(b, *m)] for m in members):
            return None
    t3 = exact_forward(ed.freeze())
    a = t3.a[li]
    vals = [a[(b, *m)] for m in members]
    if None in vals:
        return None
    mx = max(vals)
    tied = tuple((b, *m) for m, v in zip(members, vals) if v == mx)
    if len(tied) < 2:
        return None
    return SpecSite("pool", li, (b, *oidx), mx, tied, how=how)


def _check_possible(spec: NetSpec, dtype: torch.dtype) -> None:
    """Raise InexactError when a tie in this network can never be exact in ``dtype``."""
    for L in spec.layers:
        require_representable(L.activation.breakpoints, dtype, f"kink of activation {L.act!r}")
    vals = [v for L in spec.layers for v in L.weight + L.bias] + list(spec.x)
    require_representable(vals, dtype, "network parameter or input")


def exact_range_check(max_int: int, frac_bits: int, dtype) -> None:
    """Raise InexactError when values k/2^d (|k| <= max_int, d <= frac_bits) cannot all be exact in ``dtype``
    with room for sums of a few products (the strategies' precondition for exact ties)."""
    dtype = parse_dtype(dtype)
    prec, vmax = _PRECISION[dtype]
    need = max(1, max_int).bit_length() + frac_bits
    if max_int > vmax or not representable(Fraction(max_int), dtype) or need > prec:
        raise InexactError(
            f"values up to {max_int} with {frac_bits} fraction bits need {need} significand bits, but "
            f"{dtype_name(dtype)} has {prec} (largest finite value {vmax:g}): ties there cannot be exact. "
            f"Lower max_int/frac_bits or use float32/float64."
        )


@st.composite
def near_ties(draw, spec_strategy, ulps=(1, 4), dtype=torch.float32, device="cpu") -> NetSpec:
    """A forced kink moved ``k`` ulps (of ``dtype``, at the kink) away, k drawn from ``ulps`` with a random
    sign.

    The returned spec is exact in ``Fraction`` (``spec.meta["offsets"]``: the exact offsets); whether the
    float computation in ``dtype`` still lands on the kink (a tie created by rounding) is recorded in
    ``spec.meta["float_on_kink"]``.
    """
    dtype = parse_dtype(dtype)
    spec = draw(tie_points(spec_strategy, ties=(1, 1), kinds=("kink",), dtype=dtype, device=device))
    site = spec.forced[0]
    k = draw(st.integers(*ulps), label="ulps") * draw(st.sampled_from([1, -1]), label="sign")
    step = ulp(site.value, dtype)
    ed = _Editable(spec)
    used: set = set()
    target = site.value + k * step
    assume(_set_pre(_chooser(draw), ed, site.layer, site.index, target, used))
    out = ed.freeze()
    rec: list = []
    with torch.no_grad():
        out.build(dtype, device)(out.inputs(dtype, device), record=rec)
    got = rec[site.layer][0][site.index].item()
    moved = SpecSite("near", site.layer, site.index, target, how=f"{k:+d} ulp of {site.value}")
    return replace(
        out,
        forced=(moved,),
        meta={
            "offsets": [k * step],
            "kink": site.value,
            "float_value": got,
            "float_on_kink": Fraction(got) == site.value,
        },
    )


def ulp(v: Fraction, dtype: torch.dtype) -> Fraction:
    """The spacing of ``dtype`` just above |v| (the subnormal spacing at 0)."""
    prec, _ = _PRECISION[dtype]
    from nsverify.strategies.netspec import _MIN_EXP

    if v == 0:
        return Fraction(2) ** _MIN_EXP[dtype]
    e = math.floor(math.log2(abs(v)))
    if Fraction(2) ** e > abs(v):
        e -= 1
    elif Fraction(2) ** (e + 1) <= abs(v):
        e += 1
    return Fraction(2) ** max(e - prec + 1, _MIN_EXP[dtype])


__all__ = [
    "networks",
    "tie_points",
    "near_ties",
    "block_networks",
    "BlockNetSpec",
    "BlockTie",
    "BLOCK_KINDS",
    "BLOCK_TIE_KINDS",
    "dtypes",
    "devices",
    "dyadics",
    "exact_range_check",
    "ulp",
    "NetSpec",
    "SpecSite",
    "InexactError",
]
