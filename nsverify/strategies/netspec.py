"""Network specifications with exact dyadic parameters: build a torch module in any dtype/device, and
evaluate the same network exactly in ``Fraction`` arithmetic (the ground truth for ties).

A :class:`NetSpec` is what :func:`nsverify.strategies.networks` draws. It follows Park et al.'s network model
(Sec. 2.2, eq. (1)): layer l computes the pre-activation y_l = f_l(z_{l-1}, u_l) [+ bias] [+ z_{l-1} (residual)],
then z_l = pool_l(rho_l(y_l)); the loss is applied to z_L; parameters w = (u_1, b_1, ..., u_L, b_L) with the
minibatch X fixed.

Layer kinds: ``linear`` (input (B, N)), ``conv1d`` ((B, C, L)), ``conv2d`` ((B, C, H, W)); convolutions use
stride 1 and no padding. Bias modes (Park's Conditions 1-2): ``distinct`` (one bias per output neuron, i.e.
per output entry of a sample, also for convolutions), ``shared`` (one bias per channel for convolutions, a single
scalar for a linear layer), ``none``. ``tied`` layers have negated weight rows: the free weight W gives the
rows (W; -W) (the shape of Park's Lemma 2 and Lemma 7). ``frozen`` layers keep their weight as a constant
(Park's f_l without parameters, as in Lemma 3), so only the bias is a parameter.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from nsverify.ad import Activation
from nsverify.errors import InexactError

LAYER_KINDS = ("linear", "conv1d", "conv2d")
BIAS_MODES = ("distinct", "none", "shared")
LOSSES = ("linear", "squared", "cross_entropy")

#: significand precision (bits, incl. the implicit one) and largest finite value of each float dtype
_PRECISION = {
    torch.float16: (11, 65504),
    torch.bfloat16: (8, 3.38953e38),
    torch.float32: (24, 3.4028e38),
    torch.float64: (53, 1.79e308),
}
_MIN_EXP = {torch.float16: -24, torch.bfloat16: -133, torch.float32: -149, torch.float64: -1074}


# ----------------------------------------------------------------------------------------------------------
# the specification
# ----------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Pool:
    kernel: int
    stride: int

    @property
    def trivial(self) -> bool:
        return self.kernel == 1 and self.stride == 1

    @property
    def overlapping(self) -> bool:
        return self.stride < self.kernel


@dataclass(frozen=True)
class Layer:
    kind: str
    out: int  # output features / channels (rows); a tied layer has 2 * (free rows)
    kernel: int  # 0 for linear
    weight: tuple  # flattened free weight, shape ``wshape``
    wshape: tuple
    bias_mode: str
    bias: tuple  # flattened bias, shape ``bshape``
    bshape: tuple
    act: str = "relu"
    pool: Pool | None = None
    residual: bool = False
    tied: bool = False
    frozen: bool = False

    @property
    def activation(self) -> Activation:
        return Activation(self.act)


@dataclass(frozen=True)
class SpecSite:
    """A kink or tie site found by exact evaluation.

    ``kind``: ``"kink"`` (a pre-activation exactly at a breakpoint) or ``"pool"`` (a pool window whose maximum
    is attained at least twice). ``layer``: 0-based. ``index``: the pre-activation entry (kink) or the pooled
    output entry (pool), as a tuple with the batch index first. ``value``: the exact kink/max value;
    ``members``: for pools, the tied window entries (pre-pool indices, row-major window order).
    """

    kind: str
    layer: int
    index: tuple
    value: Fraction
    members: tuple = ()
    how: str = ""

    def __str__(self):
        extra = f" members={list(self.members)}" if self.members else ""
        how = f" ({self.how})" if self.how else ""
        return f"{self.kind} at layer {self.layer} index {self.index} value {self.value}{extra}{how}"


@dataclass(frozen=True)
class NetSpec:
    in_kind: str
    in_shape: tuple  # per-sample input shape
    batch: int
    x: tuple  # flattened input minibatch, shape (batch, *in_shape)
    layers: tuple
    loss: str = "linear"
    target: tuple = ()  # linear: coefficients (one per output entry); squared: targets; CE: class indices
    forced: tuple = ()  # Sites forced by tie_points
    dtype_checked: str | None = None  # the dtype in which tie exactness was verified
    meta: dict = field(default_factory=dict, compare=False)

    # ------------------------------------------------------------------ shapes and parameters
    def shapes(self) -> list[tuple]:
        """Per-sample shape of z_0, z_1, ..., z_L."""
        shapes = [tuple(self.in_shape)]
        for layer in self.layers:
            shapes.append(_out_shape(layer, shapes[-1]))
        return shapes

    def parameters(self) -> list[tuple[str, tuple, tuple]]:
        """(name, flat Fractions, shape) of every parameter, in the order of the flat vector w."""
        out = []
        for i, layer in enumerate(self.layers):
            if not layer.frozen:
                out.append((f"layer{i}.weight", layer.weight, layer.wshape))
            if layer.bias_mode != "none":
                out.append((f"layer{i}.bias", layer.bias, layer.bshape))
        return out

    def w(self) -> tuple[Fraction, ...]:
        return tuple(v for _, vals, _ in self.parameters() for v in vals)

    def rules(self):
        """The oracle's ``rules=`` reproducing this network's AD, a :class:`~nsverify.registry.Rules`
        ``{op: one Rule per kink}`` for the ops whose layers use AD-variant rules (empty when every layer uses
        PyTorch's rules), or None when two layers use the same op with different rules (one rule set per op
        cannot express that: test the float AD instead)."""
        from nsverify import registry

        rules: dict = {}
        for L in self.layers:
            act = L.activation
            if act.primitive() is not None and rules.setdefault(act.base, act.rules) != act.rules:
                return None
        return registry.parse_rules({op: r for op, r in rules.items() if r != registry.torch_rule(op)})

    def conventions(self):
        """Deprecated name of :meth:`rules` (kept for one release)."""
        import warnings

        warnings.warn("NetSpec.conventions() is deprecated: use NetSpec.rules().", DeprecationWarning, stacklevel=2)
        return self.rules()

    def describe(self) -> str:
        lines = [
            f"NetSpec: input {self.in_kind} {tuple(self.in_shape)}, batch {self.batch}, loss {self.loss}, "
            f"{len(self.w())} parameters"
        ]
        for i, L in enumerate(self.layers):
            pool = "none" if L.pool is None else f"maxpool(k={L.pool.kernel},s={L.pool.stride})"
            flags = ",".join(
                f for f, on in (("tied", L.tied), ("frozen", L.frozen), ("residual", L.residual)) if on
            )
            lines.append(
                f"  layer {i}: {L.kind} out={L.out} k={L.kernel} bias={L.bias_mode} act={L.act} "
                f"pool={pool} {flags}".rstrip()
            )
            lines.append(f"    weight {list(L.wshape)} = {[str(v) for v in L.weight]}")
            if L.bias_mode != "none":
                lines.append(f"    bias {list(L.bshape)} = {[str(v) for v in L.bias]}")
        lines.append(f"  X {[self.batch, *self.in_shape]} = {[str(v) for v in self.x]}")
        lines.append(f"  loss target/coefficients = {[str(v) for v in self.target]}")
        for s in self.forced:
            lines.append(f"  forced {s}")
        return "\n".join(lines)

    __str__ = describe

    # ------------------------------------------------------------------ torch
    def build(self, dtype=torch.float32, device="cpu") -> SpecNet:
        """A ``torch.nn.Module`` computing z_L from the minibatch, with this spec's exact parameters."""
        return SpecNet(self, dtype, device)

    def inputs(self, dtype=torch.float32, device="cpu") -> torch.Tensor:
        return _tensor(self.x, (self.batch, *self.in_shape), dtype, device)

    def loss_fn(self, dtype=torch.float32, device="cpu", net: SpecNet | None = None):
        """``(fn, w0)``: fn maps the flat parameter vector w (1-D tensor) to the scalar loss Psi(w; X)."""
        net = net if net is not None else self.build(dtype, device)
        X = self.inputs(dtype, device)
        names = [n for n, _, _ in self.parameters()]
        shapes = [s for _, _, s in self.parameters()]
        sizes = [math.prod(s) for s in shapes]

        def fn(w: torch.Tensor) -> torch.Tensor:
            params, k = {}, 0
            for n, s, size in zip(names, shapes, sizes):
                params[n] = w[k : k + size].reshape(s)
                k += size
            return net.loss(net.forward_with(params, X))

        w0 = _tensor(self.w(), (len(self.w()),), dtype, device)
        return fn, w0

    # ------------------------------------------------------------------ exact evaluation
    def exact(self) -> ExactTrace:
        return exact_forward(self)

    def sites(self) -> list[SpecSite]:
        return self.exact().sites

    def with_values(self, x=None, layers=None, **kw) -> NetSpec:
        return replace(
            self,
            x=self.x if x is None else tuple(x),
            layers=self.layers if layers is None else tuple(layers),
            **kw,
        )


def _tensor(vals, shape, dtype, device):
    return (
        torch.tensor([float(v) for v in vals], dtype=torch.float64)
        .reshape(shape)
        .to(dtype=dtype, device=device)
    )


def _out_shape(layer: Layer, shape: tuple) -> tuple:
    pre = _pre_shape(layer, shape)
    return _pool_shape(layer, pre)


def _pre_shape(layer: Layer, shape: tuple) -> tuple:
    if layer.kind == "linear":
        return (layer.out,)
    k = layer.kernel
    return (layer.out, *[s - k + 1 for s in shape[1:]])


def _pool_shape(layer: Layer, pre: tuple) -> tuple:
    if layer.pool is None:
        return pre
    k, s = layer.pool.kernel, layer.pool.stride
    if layer.kind == "linear":
        return ((pre[0] - k) // s + 1,)
    return (pre[0], *[(n - k) // s + 1 for n in pre[1:]])


def _flat_in(layer: Layer, shape: tuple) -> bool:
    return layer.kind == "linear" and len(shape) > 1


# ----------------------------------------------------------------------------------------------------------
# torch module
# ----------------------------------------------------------------------------------------------------------
class SpecNet(torch.nn.Module):
    """The torch module of a :class:`NetSpec`. ``forward(X)`` returns z_L; ``loss(z_L)`` the scalar loss."""

    def __init__(self, spec: NetSpec, dtype=torch.float32, device="cpu"):
        super().__init__()
        self.spec = spec
        self._acts = [L.activation.torch_fn() for L in spec.layers]
        #: layer index -> callable replacing the max pool (used for associated gradients)
        self.pool_override: dict = {}
        for i, L in enumerate(spec.layers):
            wt = _tensor(L.weight, L.wshape, dtype, device)
            if L.frozen:
                self.register_buffer(f"w{i}", wt)
            else:
                self.register_parameter(f"w{i}", torch.nn.Parameter(wt))
            if L.bias_mode != "none":
                self.register_parameter(f"b{i}", torch.nn.Parameter(_tensor(L.bias, L.bshape, dtype, device)))
        self._target = None
        if spec.loss == "cross_entropy":
            self._target = torch.tensor([int(t) for t in spec.target], dtype=torch.long, device=device)
        elif spec.target:
            out_shape = (spec.batch, *spec.shapes()[-1])
            self._target = _tensor(spec.target, out_shape, dtype, device)

    def _params(self):
        d = {}
        for i, L in enumerate(self.spec.layers):
            d[f"layer{i}.weight"] = getattr(self, f"w{i}")
            if L.bias_mode != "none":
                d[f"layer{i}.bias"] = getattr(self, f"b{i}")
        return d

    def forward(self, X: torch.Tensor, record: list | None = None) -> torch.Tensor:
        return self.forward_with(self._params(), X, record)

    def forward_with(self, params: dict, X: torch.Tensor, record: list | None = None) -> torch.Tensor:
        z = X
        for i, L in enumerate(self.spec.layers):
            W = params.get(f"layer{i}.weight", getattr(self, f"w{i}"))
            if L.tied:
                W = torch.cat([W, -W], dim=0)
            zin = z.flatten(1) if _flat_in(L, tuple(z.shape[1:])) else z
            if L.kind == "linear":
                y = zin @ W.t()
            elif L.kind == "conv1d":
                y = F.conv1d(zin, W)
            else:
                y = F.conv2d(zin, W)
            if L.bias_mode != "none":
                b = params[f"layer{i}.bias"]
                if L.bias_mode == "shared" and L.kind != "linear":
                    b = b.reshape(-1, *([1] * (y.dim() - 2)))
                y = y + b
            if L.residual:
                y = y + zin
            a = self._acts[i](y)
            if i in self.pool_override:
                z = self.pool_override[i](a)
            elif L.pool is not None:
                k, s = L.pool.kernel, L.pool.stride
                if L.kind == "linear":
                    z = F.max_pool1d(a.unsqueeze(1), k, s).squeeze(1)
                elif L.kind == "conv1d":
                    z = F.max_pool1d(a, k, s)
                else:
                    z = F.max_pool2d(a, k, s)
            else:
                z = a
            if record is not None:
                record.append((y, a, z))
        return z

    def loss(self, z: torch.Tensor) -> torch.Tensor:
        kind = self.spec.loss
        if kind == "linear":
            return (z * self._target).sum()
        if kind == "squared":
            return ((z - self._target) ** 2).sum() / 2
        return F.cross_entropy(z.reshape(z.shape[0], -1), self._target, reduction="sum")


# ----------------------------------------------------------------------------------------------------------
# exact evaluation (Fraction)
# ----------------------------------------------------------------------------------------------------------
@dataclass
class ExactTrace:
    """Exact values per layer (object arrays of Fractions, batch first): pre-activations ``y``, activations
    ``a``, layer outputs ``z``; the terms of every pre-activation (for exactness bounds); every kink/tie
    site."""

    y: list
    a: list
    z: list
    terms: list  # per layer: object array (same shape as y) of tuples of the summed terms
    sites: list
    inexact_from: int | None = None  # first layer whose activations are not exact (non-polynomial piece)


def _arr(vals, shape) -> np.ndarray:
    a = np.empty(len(vals), dtype=object)
    a[:] = [Fraction(v) for v in vals]
    return a.reshape(shape)


def exact_forward(spec: NetSpec) -> ExactTrace:
    z = _arr(spec.x, (spec.batch, *spec.in_shape))
    ys, as_, zs, terms_all, sites = [], [], [], [], []
    inexact_from = None
    for li, L in enumerate(spec.layers):
        W = _arr(L.weight, L.wshape)
        if L.tied:
            W = np.concatenate([W, -W], axis=0)
        zin = z.reshape(spec.batch, -1) if _flat_in(L, z.shape[1:]) else z
        pre_shape = _pre_shape(L, zin.shape[1:])
        y = np.empty((spec.batch, *pre_shape), dtype=object)
        terms = np.empty(y.shape, dtype=object)
        bias = _arr(L.bias, L.bshape) if L.bias_mode != "none" else None
        for idx in np.ndindex(*y.shape):
            b, o, pos = idx[0], idx[1], idx[2:]
            if L.kind == "linear":
                ts = [W[o, j] * zin[b, j] for j in range(zin.shape[1])]
            else:
                sl = tuple(slice(p, p + L.kernel) for p in pos)
                patch = zin[(b, slice(None), *sl)]
                ts = list((W[o] * patch).ravel())
            if bias is not None:
                ts.append(
                    bias[(o, *pos)]
                    if L.bias_mode == "distinct"
                    else (bias[o] if L.kind != "linear" else bias[0])
                )
            if L.residual:
                ts.append(zin[idx])
            terms[idx] = tuple(ts)
            y[idx] = sum(ts, Fraction(0))
        act = L.activation
        a = np.empty(y.shape, dtype=object)
        bps = set(act.breakpoints)
        for idx in np.ndindex(*y.shape):
            if y[idx] in bps:
                sites.append(SpecSite("kink", li, idx, y[idx]))
            try:
                a[idx] = act.exact(y[idx])
            except InexactError:
                a[idx] = None
                inexact_from = li if inexact_from is None else inexact_from
        zout = _exact_pool(L, a, li, sites)
        ys.append(y)
        as_.append(a)
        zs.append(zout)
        terms_all.append(terms)
        z = zout
        if inexact_from is not None:
            break
    return ExactTrace(ys, as_, zs, terms_all, sites, inexact_from)


def pool_windows(layer: Layer, pre_shape: tuple):
    """Yield (output index (without batch), list of pre-pool indices (without batch)) in row-major order."""
    if layer.pool is None:
        return
    from nsverify.registry.windows import pool_window_table

    lead, sp = ((), tuple(pre_shape)) if layer.kind == "linear" else ((pre_shape[0],), tuple(pre_shape[1:]))
    out, table = pool_window_table(sp, layer.pool.kernel, layer.pool.stride)
    wins = [[tuple(int(c) for c in np.unravel_index(f, sp)) for f in row] for row in table.tolist()]
    for c in np.ndindex(*lead):
        for o, win in zip(np.ndindex(*out), wins):
            yield c + o, [c + q for q in win]


def _exact_pool(L: Layer, a: np.ndarray, li: int, sites: list) -> np.ndarray:
    if L.pool is None:
        return a
    out_shape = _pool_shape(L, a.shape[1:])
    z = np.empty((a.shape[0], *out_shape), dtype=object)
    for b in range(a.shape[0]):
        for oidx, members in pool_windows(L, a.shape[1:]):
            vals = [a[(b, *m)] for m in members]
            if any(v is None for v in vals):
                z[(b, *oidx)] = None
                continue
            mx = max(vals)
            z[(b, *oidx)] = mx
            tied = tuple((b, *m) for m, v in zip(members, vals) if v == mx)
            if len(tied) >= 2:
                sites.append(SpecSite("pool", li, (b, *oidx), mx, tied))
    return z


# ----------------------------------------------------------------------------------------------------------
# exactness in a float dtype
# ----------------------------------------------------------------------------------------------------------
def representable(v: Fraction, dtype: torch.dtype) -> bool:
    """True when the rational v is exactly a finite value of ``dtype``."""
    if v == 0:
        return True
    prec, vmax = _PRECISION[dtype]
    if abs(v) > vmax:
        return False
    num, den = abs(v.numerator), v.denominator
    if den & (den - 1):
        return False  # not dyadic
    e_den = den.bit_length() - 1
    # v = num * 2^-e_den; strip trailing zero bits of num
    tz = (num & -num).bit_length() - 1
    num >>= tz
    e = tz - e_den  # v = num * 2^e, num odd
    if num.bit_length() > prec:
        return False
    lowest = e  # exponent of the last significant bit
    top = e + num.bit_length() - 1
    # normal numbers: last bit exponent >= top - (prec - 1); subnormals: >= min_exp
    return lowest >= _MIN_EXP[dtype] and top <= math.floor(math.log2(vmax))


def sum_exact_in(terms, dtype: torch.dtype) -> bool:
    """Sufficient condition for a float sum of ``terms`` (dyadic Fractions) to be exact in any order:
    every term is representable and the sum of |terms| fits the significand at the finest term's scale."""
    terms = [Fraction(t) for t in terms]
    if not all(representable(t, dtype) for t in terms):
        return False
    nz = [t for t in terms if t != 0]
    if not nz:
        return True
    m = max(t.denominator for t in nz).bit_length() - 1
    total = sum(abs(t) for t in nz) * (1 << m)
    prec, vmax = _PRECISION[dtype]
    return total.denominator == 1 and total.numerator <= (1 << prec) and sum(abs(t) for t in nz) <= vmax


@dataclass
class ExactnessReport:
    dtype: str
    ok: bool
    problems: list

    def __bool__(self):
        return self.ok


def check_exact(
    spec: NetSpec,
    dtype: torch.dtype,
    device="cpu",
    upto: int | None = None,
    trace: ExactTrace | None = None,
    last_outputs: bool = True,
) -> ExactnessReport:
    """Verify that the float forward of ``spec`` in ``dtype`` reproduces the exact pre-activations,
    activations
    and pooled values of layers 0..upto (default: all layers), entry by entry, and that every pre-activation
    sum is exact in any summation order (a-priori bound). ``last_outputs=False`` skips the activations of the last
    checked layer unless a max pool reads them (they only feed the loss)."""
    from nsverify.devices import dtype_name

    trace = trace or exact_forward(spec)
    if upto is None:
        upto = len(spec.layers) - 1
        if trace.inexact_from is not None and trace.inexact_from < upto:
            return ExactnessReport(
                str(dtype).removeprefix("torch."),
                False,
                [f"layer {trace.inexact_from} has activations with no exact value"],
            )
    problems = []
    for name, vals in (("input", spec.x),) + tuple((n, v) for n, v, _ in spec.parameters()):
        bad = [v for v in vals if not representable(Fraction(v), dtype)]
        if bad:
            problems.append(f"{name}: {bad[0]} is not representable in {dtype_name(dtype)}")
    for li in range(upto + 1):
        for idx in np.ndindex(*trace.terms[li].shape):
            if not sum_exact_in(trace.terms[li][idx], dtype):
                problems.append(
                    f"layer {li} pre-activation {idx}: the sum of {trace.terms[li][idx]} is not "
                    f"exact in {dtype_name(dtype)}"
                )
                break
    if not problems:
        net = spec.build(dtype, device)
        rec: list = []
        with torch.no_grad():
            net(spec.inputs(dtype, device), record=rec)
        for li in range(upto + 1):
            outs = (
                li < upto
                or last_outputs
                or (spec.layers[li].pool is not None and not spec.layers[li].pool.trivial)
            )
            for name, t, ex in list(
                zip(
                    ("pre-activation", "activation", "pooled value"),
                    rec[li],
                    (trace.y[li], trace.a[li], trace.z[li]),
                )
            )[: 3 if outs else 1]:
                got = t.detach().to("cpu", torch.float64).numpy()
                for idx in np.ndindex(*ex.shape):
                    if ex[idx] is not None and Fraction(float(got[idx])) != ex[idx]:
                        problems.append(
                            f"layer {li} {name} {idx}: {dtype_name(dtype)} gives {got[idx]!r}, "
                            f"exact value {ex[idx]}"
                        )
                        break
    return ExactnessReport(dtype_name(dtype), not problems, problems)


def require_representable(values: Any, dtype: torch.dtype, what: str) -> None:
    """Raise :class:`InexactError` when some value is not exactly representable in ``dtype``."""
    from nsverify.devices import dtype_name

    for v in values:
        if not representable(Fraction(v), dtype):
            prec, vmax = _PRECISION[dtype]
            raise InexactError(
                f"{what}: the value {v} is not exactly representable in {dtype_name(dtype)} "
                f"({prec} significand bits, largest finite value {vmax:g}, integers exact up to 2^{prec}), "
                f"so a tie there cannot be exact. Use smaller magnitudes / fewer fraction bits, or a wider "
                f"dtype (float32/float64)."
            )
