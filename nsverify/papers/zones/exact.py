"""Exact zone classification (Boustany, Ch.3, Def 7) of a parameter point and a minibatch.

The float parameters and inputs are taken as the exact dyadic rationals they represent and the network is
evaluated in exact integer arithmetic (values ``ints * 2**exp``, numpy object arrays of Python ints, which is
much faster than Fractions for convolutions).  Kink sites are the exact zeros before each ReLU and the exactly
tied maxpool windows.  The exact backprops of the two extreme programs E0 = (ReLU'(0)=0, native maxpool) and
E1 = (ReLU'(0)=1, minimal maxpool) are then compared per example:

* **regular**: no kink site is hit by any example;
* **bifurcation**: for some example i, backprop[E0](l_i) != backprop[E1](l_i) (certified: two programs of the
  same function disagree, so J_i is not a singleton);
* **compensation**: kinks are hit but E0 and E1 agree exactly on every example.  This is Def 7 with the
  backprop set restricted to the programs compared (mixed per-site choices are not enumerated).

The loss is cross-entropy, whose gradient at the logits, g = softmax(z) - e_y, is transcendental.  Whether
g^T (J_E0 - J_E1) vanishes is decided exactly: by Lindemann-Weierstrass the exponentials of distinct rationals
are linearly independent over the algebraic numbers, so sum_k exp(z_k) (c_k - c_y) = 0 iff for every group G
of exactly equal logits sum_{k in G} (c_k - c_y) = 0.  The groups become integer cotangents
u_G = 1_G - |G| e_y, back-propagated exactly; the loss reduction (sum or mean) does not change the verdict.

Supported layers: Flatten, Linear, Conv2d (groups=1, zero padding), ReLU/ReLUS, MaxPool2d/MaxPool2dS (no
padding), Identity.  BatchNorm in training mode divides by a square root of batch statistics (irrational):
it is refused with advice, as are residual models (write them as nn.Sequential or use the float view).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np
import torch
from numpy.lib.stride_tricks import sliding_window_view
from torch import nn

from nsverify import ad
from nsverify.errors import NonFiniteError, UnsupportedOpError
from nsverify.papers.zones.measure import require_nonsmooth
from nsverify.papers.zones.rules import pool_geometry

RELU_TYPES = (nn.ReLU, ad.ReLUVariant)
POOL_TYPES = (nn.MaxPool2d, ad.MaxPool2dVariant)

INT = object


@dataclass
class Dy:
    """An exact dyadic array: value = ints * 2**exp (ints: numpy object array of Python ints)."""

    ints: np.ndarray
    exp: int

    def shifted(self, exp: int) -> np.ndarray:
        """ints rescaled to a smaller exponent ``exp`` (exact)."""
        return self.ints if exp == self.exp else self.ints * (1 << (self.exp - exp))

    def fractions(self) -> np.ndarray:
        f = Fraction(2) ** self.exp
        return np.vectorize(lambda v: Fraction(v) * f, otypes=[object])(self.ints)


def to_dyadic(t: torch.Tensor) -> Dy:
    a = t.detach().to(torch.float64).cpu().numpy()  # exact for every float dtype up to 64 bits
    if not np.isfinite(a).all():
        raise NonFiniteError("exact classification needs finite parameters and inputs; found NaN/inf.")
    flat = a.reshape(-1)
    ratios = [float(v).as_integer_ratio() for v in flat]
    den = max((d for _, d in ratios), default=1)
    ints = np.empty(len(ratios), dtype=object)
    for i, (n, d) in enumerate(ratios):
        ints[i] = n * (den // d)
    return Dy(ints.reshape(a.shape), -(den.bit_length() - 1))


def _add(a: Dy, b: Dy) -> Dy:
    e = min(a.exp, b.exp)
    return Dy(a.shifted(e) + b.shifted(e), e)


def _is_pos(x: np.ndarray) -> np.ndarray:
    return np.asarray(x > 0, dtype=bool)


def _is_zero(x: np.ndarray) -> np.ndarray:
    return np.asarray(x == 0, dtype=bool)


def _layers(model: nn.Module) -> list[nn.Module]:
    if isinstance(model, nn.Sequential):
        return [leaf for m in model for leaf in _layers(m)]
    if isinstance(model, (nn.Flatten, nn.Linear, nn.Conv2d, nn.Identity, *RELU_TYPES, *POOL_TYPES)):
        return [model]
    if isinstance(model, nn.Dropout) and (model.p == 0 or not model.training):
        return [nn.Identity()]
    if isinstance(model, nn.modules.batchnorm._BatchNorm):
        raise UnsupportedOpError(
            "exact zone classification cannot evaluate BatchNorm: it divides by sqrt(var + eps), which is "
            "irrational. Build the model with bn=False for exact classes (the float view and D work with BN).")
    raise UnsupportedOpError(
        f"exact zone classification supports nn.Sequential stacks of Flatten/Linear/Conv2d/ReLU/MaxPool2d; got "
        f"{type(model).__name__}. Residual or custom modules: use the float measurements (D, volume) instead.")


def _geom(m):
    k = m.kernel_size if isinstance(m.kernel_size, tuple) else (m.kernel_size, m.kernel_size)
    s = m.stride if isinstance(m.stride, tuple) else (m.stride, m.stride)
    p = m.padding if isinstance(m.padding, tuple) else (m.padding, m.padding)
    return tuple(k), tuple(s), tuple(p)


@dataclass
class _Tape:
    kind: str
    module: nn.Module
    x: Dy | None = None  # input of the layer
    shape: tuple = ()
    mask_pos: np.ndarray | None = None
    mask_zero: np.ndarray | None = None
    first: np.ndarray | None = None  # maxpool: index of first maximum in each window
    ties: np.ndarray | None = None  # maxpool: (..., kk) tie mask
    count: np.ndarray | None = None
    params: dict = field(default_factory=dict)


def _conv_cols(x: np.ndarray, k, s) -> np.ndarray:
    """(N, C, H, W) -> (N, Ho, Wo, C*kh*kw) patches (no padding; pad before)."""
    v = sliding_window_view(x, k, axis=(2, 3))[:, :, :: s[0], :: s[1]]  # N C Ho Wo kh kw
    n, c, ho, wo, kh, kw = v.shape
    return v.transpose(0, 2, 3, 1, 4, 5).reshape(n, ho, wo, c * kh * kw)


def forward_exact(model: nn.Module, x: torch.Tensor) -> tuple[Dy, list[_Tape]]:
    """Exact forward pass; returns the logits and the tape (with kink masks)."""
    h = to_dyadic(x)
    tape: list[_Tape] = []
    for m in _layers(model):
        if isinstance(m, nn.Identity):
            continue
        if isinstance(m, nn.Flatten):
            tape.append(_Tape("flatten", m, shape=h.ints.shape))
            h = Dy(h.ints.reshape(h.ints.shape[0], -1), h.exp)
        elif isinstance(m, nn.Linear):
            w = to_dyadic(m.weight)
            t = _Tape("linear", m, x=h, params={"w": w})
            out = Dy(h.ints @ w.ints.T, h.exp + w.exp)
            if m.bias is not None:
                out = _add(out, to_dyadic(m.bias))
            tape.append(t)
            h = out
        elif isinstance(m, nn.Conv2d):
            if m.groups != 1 or m.dilation not in ((1, 1), 1) or m.padding_mode != "zeros" or isinstance(
                    m.padding, str):
                raise UnsupportedOpError("exact Conv2d supports groups=1, dilation=1, numeric zero padding.")
            k, s, p = _geom(m)
            w = to_dyadic(m.weight)
            xi = np.pad(h.ints, ((0, 0), (0, 0), (p[0], p[0]), (p[1], p[1])), constant_values=0) if any(p) \
                else h.ints
            cols = _conv_cols(xi, k, s)
            n, ho, wo, ckk = cols.shape
            out = (cols.reshape(-1, ckk) @ w.ints.reshape(w.ints.shape[0], -1).T).reshape(n, ho, wo, -1)
            out = Dy(out.transpose(0, 3, 1, 2), h.exp + w.exp)
            if m.bias is not None:
                b = to_dyadic(m.bias)
                out = _add(out, Dy(b.ints.reshape(1, -1, 1, 1), b.exp))
            tape.append(_Tape("conv", m, x=Dy(xi, h.exp), shape=h.ints.shape, params={"w": w, "k": k, "s": s,
                                                                                       "p": p, "cols": cols}))
            h = out
        elif isinstance(m, RELU_TYPES):
            pos, zero = _is_pos(h.ints), _is_zero(h.ints)
            tape.append(_Tape("relu", m, mask_pos=pos, mask_zero=zero))
            h = Dy(np.where(pos, h.ints, 0).astype(object), h.exp)
        elif isinstance(m, POOL_TYPES):
            k, s, p, d = pool_geometry(m)
            if any(p) or d != (1, 1) or getattr(m, "ceil_mode", False):
                raise UnsupportedOpError("exact MaxPool supports padding=0, dilation=1, ceil_mode=False.")
            v = sliding_window_view(h.ints, k, axis=(2, 3))[:, :, :: s[0], :: s[1]]
            win = v.reshape(*v.shape[:4], -1)
            mx = win.max(axis=-1)
            ties = np.asarray(win == mx[..., None], dtype=bool)
            tape.append(_Tape("maxpool", m, shape=h.ints.shape, first=ties.argmax(-1), ties=ties,
                              count=ties.sum(-1), params={"k": k, "s": s}))
            h = Dy(mx, h.exp)
        else:  # pragma: no cover - _layers filters
            raise UnsupportedOpError(type(m).__name__)
    return h, tape


def _pool_scatter(vals: np.ndarray, shape, k, s) -> np.ndarray:
    """vals (N, C, Ho, Wo, kh*kw) -> (N, C, H, W), overlapping windows accumulate."""
    out = np.zeros(shape, dtype=object)
    out[...] = 0
    ho, wo = vals.shape[2], vals.shape[3]
    for i in range(k[0]):
        for j in range(k[1]):
            out[:, :, i:i + s[0] * ho:s[0], j:j + s[1] * wo:s[1]] += vals[..., i * k[1] + j]
    return out


def _backward(tape: list[_Tape], ct: np.ndarray, relu_s: int, minimal: bool, want_params: bool):
    """Exact VJP of integer cotangents ``ct`` (N, K-like) through the tape.  Returns per-layer
    (layer index, cotangent at the layer OUTPUT) for parameter layers, scaled consistently between programs."""
    out = []
    for li in range(len(tape) - 1, -1, -1):
        t = tape[li]
        if t.kind == "flatten":
            ct = ct.reshape(t.shape)
        elif t.kind == "linear":
            out.append((li, ct))
            ct = ct @ t.params["w"].ints
        elif t.kind == "conv":
            out.append((li, ct))
            w, k, s, p = t.params["w"], t.params["k"], t.params["s"], t.params["p"]
            n, o, ho, wo = ct.shape
            cols = ct.transpose(0, 2, 3, 1).reshape(-1, o) @ w.ints.reshape(o, -1)  # (N Ho Wo, C kh kw)
            c = w.ints.shape[1]
            cols = cols.reshape(n, ho, wo, c, k[0] * k[1]).transpose(0, 3, 1, 2, 4)
            full = _pool_scatter(cols, t.x.ints.shape, k, s)
            ct = full[:, :, p[0]:full.shape[2] - p[0], p[1]:full.shape[3] - p[1]] if any(p) else full
        elif t.kind == "relu":
            ct = np.where(t.mask_pos | (t.mask_zero & (relu_s == 1)), ct, 0).astype(object)
        elif t.kind == "maxpool":
            k, s = t.params["k"], t.params["s"]
            kk = k[0] * k[1]
            lcm = math.lcm(*range(1, kk + 1))
            if minimal:
                per = (ct * lcm)[..., None] // t.count[..., None] * t.ties  # lcm/|A| is an exact integer
            else:
                per = np.zeros(t.ties.shape, dtype=object)
                per[...] = 0
                np.put_along_axis(per, t.first[..., None], (ct * lcm)[..., None], axis=-1)
            ct = _pool_scatter(per.astype(object), t.shape, k, s)
    return out


def _param_diff_nonzero(tape, cp, cq) -> np.ndarray:
    """Per example: does the exact parameter gradient differ between the two programs' cotangents?"""
    n = None
    diff = None
    for (li, a), (_, b) in zip(cp, cq):
        d = a - b
        n = d.shape[0]
        if diff is None:
            diff = np.zeros(n, dtype=bool)
        t = tape[li]
        dz = np.asarray(d != 0, dtype=bool).reshape(n, -1).any(1)  # prerequisite of any difference
        if t.module.bias is not None:  # bias gradient: ct itself (linear), its sum over positions (conv)
            db = d if t.kind == "linear" else d.reshape(n, d.shape[1], -1).sum(-1)
            diff |= np.asarray(db != 0, dtype=bool).reshape(n, -1).any(1)
        todo = dz & ~diff
        if not todo.any():
            continue
        if t.kind == "linear":  # W grad difference = outer(d_i, x_i): non-zero iff both factors are
            xnz = np.asarray(t.x.ints != 0, dtype=bool).reshape(n, -1).any(1)
            diff |= todo & xnz
        else:
            cols = t.params["cols"]
            for i in np.nonzero(todo)[0]:
                o = d.shape[1]
                g = d[i].reshape(o, -1) @ cols[i].reshape(-1, cols.shape[-1])
                diff[i] = bool(np.asarray(g != 0, dtype=bool).any())
    return diff if diff is not None else np.zeros(0, dtype=bool)


@dataclass
class ExactClass:
    """Exact zone of (parameters, minibatch): see module docstring."""

    zone: str  # "regular" | "compensation" | "bifurcation"
    relu_sites: int
    tie_windows: int
    bifurcating_examples: list
    site_examples: list
    per_layer: list
    masks: list = field(default_factory=list, repr=False)

    def as_dict(self):
        return {k: v for k, v in self.__dict__.items() if k != "masks"}


def classify_exact(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> ExactClass:
    """Exact zone of the model's parameters (as exact rationals) on minibatch (x, y); cross-entropy loss."""
    if not any(isinstance(m, RELU_TYPES + POOL_TYPES) for m in model.modules()):
        require_nonsmooth(model)  # raises NoNonsmoothLayersError with advice
    logits, tape = forward_exact(model, x)
    n = logits.ints.shape[0]
    site_ex = np.zeros(n, dtype=bool)
    per_layer, masks = [], []
    relu_sites = tie_windows = 0
    for li, t in enumerate(tape):
        if t.kind == "relu":
            c = int(t.mask_zero.sum())
            relu_sites += c
            site_ex |= t.mask_zero.reshape(n, -1).any(1)
            per_layer.append({"layer": li, "kind": "relu", "exact_sites": c})
            masks.append(t.mask_zero)
        elif t.kind == "maxpool":
            tied = t.count > 1
            c = int(tied.sum())
            tie_windows += c
            site_ex |= tied.reshape(n, -1).any(1)
            per_layer.append({"layer": li, "kind": "maxpool", "exact_sites": c})
            masks.append(tied)
    bif = np.zeros(n, dtype=bool)
    if site_ex.any():
        yl = y.cpu().numpy()
        cots = []
        for i in range(n):
            z = logits.ints[i]
            groups: dict = {}
            for k, v in enumerate(z):
                groups.setdefault(v, []).append(k)
            us = []
            for members in groups.values():
                u = np.zeros(len(z), dtype=object)
                u[...] = 0
                u[members] += 1
                u[yl[i]] -= len(members)
                if any(v != 0 for v in u):
                    us.append(u)
            cots.append(us)
        for gi in range(max(len(c) for c in cots)):
            ct = np.zeros(logits.ints.shape, dtype=object)
            ct[...] = 0
            for i in range(n):
                if gi < len(cots[i]) and site_ex[i] and not bif[i]:
                    ct[i] = cots[i][gi]
            cp = _backward(tape, ct, 0, False, True)
            cq = _backward(tape, ct, 1, True, True)
            bif |= _param_diff_nonzero(tape, cp, cq)
            if bif[site_ex].all():
                break
    zone = "regular" if not site_ex.any() else ("bifurcation" if bif.any() else "compensation")
    return ExactClass(zone, relu_sites, tie_windows, [int(i) for i in np.nonzero(bif)[0]],
                      [int(i) for i in np.nonzero(site_ex)[0]], per_layer, masks)


def point_report(model: nn.Module, x: torch.Tensor, y: torch.Tensor, dtypes=("bfloat16", "float32", "float64"),
                 thresholds: dict | None = None, norm: float = 1, reduction: str = "mean",
                 programs=("native", "relu1_minimal")) -> dict:
    """Both views of one point: for each dtype, the parameters and inputs rounded to that dtype are
    classified exactly, and the float computation in that dtype is reported (D between the extreme programs,
    kink sites it saw, and the sites that rounding created or destroyed relative to the exact computation).
    With ``thresholds`` (dtype -> tau), the float verdict 'impacted' is D > tau."""
    import copy

    from nsverify.devices import parse_dtype
    from nsverify.papers.zones.measure import program_grads, threshold_for, variation

    out = {"programs": list(programs), "norm": norm, "reduction": reduction, "dtypes": {}}
    for name in dtypes:
        dtype = parse_dtype(name)
        m = copy.deepcopy(model).to(dtype)
        xd = x.to(dtype)
        exact = classify_exact(m, xd, y)
        (gp, gq), _, fv = program_grads(m, xd, y, programs, reduction, view=True, keep_masks=True)
        d = variation(gp, gq, norm)
        created = destroyed = 0
        for fm, em in zip(fv.masks, exact.masks):
            created += int((fm & ~em).sum())
            destroyed += int((em & ~fm).sum())
        entry = {"exact": exact.as_dict(), "float": {"D": d, "relu_zeros": fv.relu_zeros,
                                                     "tied_windows": fv.pool_tied_windows,
                                                     "sites_created_by_rounding": created,
                                                     "sites_destroyed_by_rounding": destroyed}}
        if thresholds is not None:
            tau = threshold_for(thresholds, name)
            entry["float"]["tau"] = tau
            entry["float"]["impacted"] = d > tau
        out["dtypes"][name] = entry
    return out
