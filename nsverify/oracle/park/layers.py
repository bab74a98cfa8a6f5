"""Park et al.'s layers as the exact engine reads them (Park, Chun and Lee, Sec. 2.2, eq. (1) and Conditions 1
and 2): the one layer record, the one capture of a layer's exact values, the rows of P_l, the module-class tables,
the layer activations (by the registry's capability) and :class:`Declined`.

The module readers (:mod:`.exact` for a ``Sequential``, :mod:`.graph` for a traced ``forward``) build
:class:`Layer` records; :class:`Capture` fills them from the exact reverse trace; :func:`pi_rows` gives the gradient
of a pre-activation entry in the layer's own parameters (Algorithm 1's pi); :mod:`.exact` decides Theorems 5 and 8
on them.  The autograd-graph reader (:mod:`.optrace`) shares :class:`Declined` and the activation selection.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np
import torch
from torch import nn

F = Fraction


class Declined(Exception):
    """A premise of the layered shortcut does not hold (the model is outside the layer model of the readers, or a
    premise of Theorems 5 and 8 fails): the plain enumeration decides."""


# ---------------------------------------------------------------------------------------------- module tables
#: the affine modules through which a layer's own parameters w_l enter its pre-activation
AFFINE = (nn.Linear, nn.Conv1d, nn.Conv2d)
#: per-channel affine maps (in eval mode) after an affine module: BatchNorm
NORMS = (nn.BatchNorm1d, nn.BatchNorm2d)
#: Park et al.'s max pools (first maximal index)
POOLS = (nn.MaxPool1d, nn.MaxPool2d)
#: parameter-free modules that are *linear* maps (shape ops, averages, dropout with its fixed mask): an affine
#: module after them still sees exact rational inputs, so the exact readers pass them
LINEAR_MODULES = (nn.Flatten, nn.Unflatten, nn.Identity, nn.Dropout, nn.AvgPool1d, nn.AvgPool2d,
                  nn.AdaptiveAvgPool1d, nn.AdaptiveAvgPool2d)
#: parameter-free *analytic* modules that are not linear: part of a layer map in Conditions 1 and 2 (the fx walk of
#: the structure checks and the monitor skips them), but their exact values are irrational, so the exact module
#: readers decline them (the autograd-graph reader takes them as analytic nodes)
ANALYTIC_MODULES = (nn.Tanh, nn.Sigmoid, nn.GELU, nn.SiLU, nn.Softplus, nn.Softmax, nn.LogSoftmax)
#: every smooth parameter-free module of a layer map
SMOOTH_MODULES = LINEAR_MODULES + ANALYTIC_MODULES


def is_torch_class(m) -> bool:
    """Is ``m`` an instance of torch.nn's own class of its name (not a subclass, which may override ``forward``,
    nor a namesake)?"""
    return type(m) is getattr(torch.nn, type(m).__name__, None)


# ---------------------------------------------------------------------------------------- layer activations
def layer_activation(where: str, m):
    """The activation instance module ``m`` (at ``where``) computes with its own arguments
    (:func:`nsverify.registry.module_instance`: ``nn.Hardtanh(0., 6.)`` is relu6) when Park's layer theorems cover
    it: torch.nn's own class of a registry entry with ``park_layer`` (:func:`.kinks.layer_entry`).  None for any
    other module; :class:`Declined` when its arguments move the entry's kinks and the entry cannot be built from
    them."""
    from nsverify import registry
    from nsverify.errors import UnsupportedOpError
    from nsverify.oracle.park.kinks import layer_entry

    if not is_torch_class(m) or layer_entry(registry.by_module(m)) is None:
        return None
    try:
        return layer_entry(registry.module_instance(m))
    except UnsupportedOpError as e:
        raise Declined(f"activation {where}: {e}") from None


def layer_modules() -> str:
    """The ``torch.nn`` activation modules of Park's layer theorems (the registry's ``park_layer`` entries), for
    messages."""
    from nsverify import registry

    return "/".join(c for n in registry.names("elementwise") if registry.get(n).park_layer
                    for c in registry.get(n).modules)


# ------------------------------------------------------------------------------------------------ the record
@dataclass
class Branch:
    """One summand of a layer's pre-activation: the node of an affine module, then its BatchNorm nodes."""

    affine: str
    norms: list = field(default_factory=list)


@dataclass
class Layer:
    """One of Park et al.'s layers: its pre-activation is the sum of ``branches`` (plus identity shortcuts, which
    are constant in the layer's parameters), then an activation (a ``park_layer`` registry instance) and a max pool,
    each optional.  ``modules``: node -> module of the branches; ``seen``: the exact arrays :class:`Capture` fills
    (``seen[node] = (input, output)`` of each branch node, ``act_in``, ``act_out``, ``pool_in``, ``pool_out``,
    ``pool_idx``)."""

    name: str
    branches: list = field(default_factory=list)
    act: nn.Module | None = None
    act_entry: object = None  # the registry instance the activation module computes
    act_node: str | None = None
    pool: nn.Module | None = None
    pool_node: str | None = None
    modules: dict = field(default_factory=dict)
    seen: dict = field(default_factory=dict)

    @property
    def act_name(self) -> str | None:
        return None if self.act_entry is None else self.act_entry.name

    @property
    def affine(self) -> nn.Module | None:
        """The layer's one affine module when its pre-activation is exactly one branch without norms, else None."""
        if len(self.branches) != 1 or self.branches[0].norms:
            return None
        return self.modules[self.branches[0].affine]

    @property
    def affine_input(self):
        """The exact input of :attr:`affine` (z_{l-1} for a fully connected layer)."""
        return self.seen[self.branches[0].affine][0]

    def parameters(self):
        """The layer's own parameters w_l (its branches' modules')."""
        for m in self.modules.values():
            yield from m.parameters(recurse=False)


@dataclass
class Layered:
    """A layered decision, by either route (the module readings or the autograd graph): which theorem, the
    per-layer checks, the sites found, the exact AD and value, the cone statistics."""

    theorem: str  # "park_theorem5" | "park_theorem8"
    layers: list  # LayerCheck (:mod:`.cone`)
    sites: list  # Site records (kink touches and tied windows)
    exact_ad: tuple
    value: object
    stats: object  # ConeStats
    source: str = "modules"  # where the layers were read: "modules" (Sequential / fx graph) or "autograd graph"
    modules_declined: str | None = None  # why the module reading declined (source "autograd graph")


# ----------------------------------------------------------------------------------------------- the capture
def snapshot(x) -> np.ndarray:
    """A snapshot of x's exact values: a copy, since a later in-place op (``ReLU(inplace=True)``, ``relu_``)
    writes into the same array."""
    from nsverify.oracle.tensor import ExactTensor, to_exact_array

    return x.arr.copy() if isinstance(x, ExactTensor) else to_exact_array(x)


class Capture:
    """Forward hooks recording every call of the readers' modules (an exact copy of the input, before an in-place
    module overwrites it, and of the output), matched to the nodes by call order, the model's exact output, and
    the indices of every exact max pool (AD's choices at ties, as the exact reverse mode uses them): then each
    layer's ``seen`` arrays (:meth:`fill`).  ``calls``: node -> (module, its k-th call)."""

    def __init__(self, model, calls: dict):
        self.model, self.calls = model, calls
        self.records: dict = {}  # id(module) -> [[input, output], ...] in call order
        self.handles = []
        self.output = None
        self.pool_idx: list = []

    def __enter__(self):
        def top(module, inputs, output):
            self.output = snapshot(output)

        self.handles.append(self.model.register_forward_hook(top))
        for m in {id(m): m for m, _ in self.calls.values()}.values():
            def pre(module, inputs):
                self.records.setdefault(id(module), []).append([snapshot(inputs[0]), None])

            def post(module, inputs, output):
                self.records[id(module)][-1][1] = snapshot(output)

            self.handles.append(m.register_forward_pre_hook(pre))
            self.handles.append(m.register_forward_hook(post))
        return self

    def record_pool(self, idx):
        self.pool_idx.append(idx)

    def __exit__(self, *exc):
        for h in self.handles:
            h.remove()

    def node(self, name: str) -> tuple:
        m, k = self.calls[name]
        rec = self.records.get(id(m), [])
        if k >= len(rec) or rec[k][1] is None:
            raise Declined(f"node {name} did not run in the exact trace as traced")
        return rec[k]

    def fill(self, layers: list[Layer]) -> None:
        pool_order = [L.pool_node for L in layers if L.pool is not None]
        if len(self.pool_idx) != len(pool_order):
            raise Declined("the max pools that ran differ from the traced graph's")
        idx = dict(zip(pool_order, self.pool_idx))
        for L in layers:
            for b in L.branches:
                for nm in [b.affine] + b.norms:
                    L.seen[nm] = self.node(nm)
            if L.act is not None:
                L.seen["act_in"], L.seen["act_out"] = self.node(L.act_node)
            if L.pool is not None:
                L.seen["pool_in"], L.seen["pool_out"] = self.node(L.pool_node)
                L.seen["pool_idx"] = idx[L.pool_node]


_MODE: list = []


def pool_indices(cap: Capture):
    """A TorchDispatchMode handing every exact max_pool*_with_indices op's indices to ``cap``."""
    if not _MODE:
        from torch.utils._python_dispatch import TorchDispatchMode

        class _PoolIndices(TorchDispatchMode):
            def __init__(self, cap):
                super().__init__()
                self.cap = cap

        def dispatch(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if func.__name__.startswith(("max_pool1d_with_indices", "max_pool2d_with_indices")) and \
                    isinstance(out, (tuple, list)):
                self.cap.record_pool(snapshot(out[1]))
            return out

        _PoolIndices.__torch_dispatch__ = dispatch  # after class creation: no Dynamo guard (see blocks.py)
        _MODE.append(_PoolIndices)
    return _MODE[0](cap)


def param_offsets(model) -> dict:
    """id(parameter) -> its offset in the flattened trainable parameters (module_function's order)."""
    out, off = {}, 0
    for _n, p in model.named_parameters():
        if p.requires_grad:
            out[id(p)] = off
            off += p.numel()
    return out


# ------------------------------------------------------------------------------------------------ P_l's rows
def pi_rows(L: Layer, offsets: dict):
    """``pi(index of the pre-activation, its shape) -> sparse row``: the gradient of one pre-activation entry in
    the layer's own trainable parameters (Algorithm 1's pi), summed over its branches.  A layer of one affine
    module gets integer rows, scaled by the positive common denominator of its input (the same open half-spaces:
    a cone row may be scaled by any positive number; no Fraction arithmetic); a sum of branches or BatchNorms gets
    the exact gradient.  A branch's row is the affine module's input patch scaled by the product of its BatchNorm
    factors ``gamma / sqrt(var + eps)``, plus the BatchNorms' own entries (``(a - mean) / sqrt(var + eps)`` for
    gamma, 1 for beta, each scaled by the later BatchNorms' factors)."""
    if not L.branches:
        return lambda idx, shape=None: {}
    if L.affine is not None:
        return _affine_rows(L.affine, *L.seen[L.branches[0].affine], offsets)[0]
    parts = []
    for b in L.branches:
        ain, aout = L.seen[b.affine]
        pi_aff, den = _affine_rows(L.modules[b.affine], ain, aout, offsets)
        norms = []
        val = aout  # the branch's value before each norm
        for nm in b.norms:
            m, mean, sd, gamma = _norm_data(L, nm)
            norms.append((m, mean, sd, gamma, val))
            val = L.seen[nm][1]
        parts.append((pi_aff, F(1, den), aout.shape, norms))

    def pi(idx, shape):
        flat = int(np.ravel_multi_index(tuple(int(i) for i in idx), shape))
        row: dict = {}
        for pi_aff, unscale, ashape, norms in parts:
            aidx = np.unravel_index(flat, ashape)
            c = int(aidx[1]) if len(ashape) > 1 else 0
            scale = F(1)
            for m, mean, sd, gamma, before in reversed(norms):  # the norms' own entries, scaled by later norms
                xhat = (before[aidx] - mean[c]) / sd[c]
                go = offsets.get(id(m.weight)) if m.weight is not None else None
                bo = offsets.get(id(m.bias)) if m.bias is not None else None
                if go is not None and xhat * scale != 0:
                    row[go + c] = row.get(go + c, F(0)) + xhat * scale
                if bo is not None:
                    row[bo + c] = row.get(bo + c, F(0)) + scale
                scale *= gamma[c] / sd[c]
            for k, v in pi_aff(idx, shape).items():
                row[k] = row.get(k, F(0)) + scale * unscale * v
        return {k: v for k, v in row.items() if v != 0}

    return pi


def _norm_data(L: Layer, nm: str):
    """A BatchNorm's per-channel mean, sqrt(var + eps) and gamma, exact, or :class:`Declined`."""
    m = L.modules[nm]
    var = [F(float(v)) for v in m.running_var.detach().double().tolist()]
    mean = [F(float(v)) for v in m.running_mean.detach().double().tolist()]
    eps = F(m.eps)
    from nsverify.oracle.numbers import sqrt_i

    sd = [sqrt_i(v + eps) if v + eps > 0 else None for v in var]  # a Fraction exactly when v + eps is a square
    if not all(isinstance(s, Fraction) for s in sd):
        raise Declined(f"BatchNorm {nm}: sqrt(running_var + eps) is irrational, so the layer's rows are not "
                       "exact rationals")
    gamma = [F(float(v)) for v in m.weight.detach().double().tolist()] if m.weight is not None else [F(1)] * len(sd)
    return m, mean, sd, gamma


def _affine_rows(m, zf, out, offsets: dict):
    """The rows of one affine module ``m`` with exact input ``zf`` and output ``out``: ``(pi, den)``, pi's rows
    being the gradient in ``m``'s trainable parameters times the positive integer ``den`` (integers)."""
    from nsverify.oracle import fastexact

    z, den = fastexact.integer_form(zf) or (None, None)
    if z is None:
        raise Declined("a layer's input is not an array of exact rationals")
    one = den  # the bias's entry, 1, times the same denominator
    oshape = out.shape
    wo = offsets.get(id(m.weight))
    bo = offsets.get(id(m.bias)) if m.bias is not None else None
    if isinstance(m, nn.Linear):
        zin = z.reshape(-1, z.shape[-1])
        nin = z.shape[-1]

        def pi_linear(idx, shape):
            flat = int(np.ravel_multi_index(idx, shape))
            b, j = divmod(flat, m.out_features)
            row = {} if wo is None else {wo + j * nin + k: v for k, v in enumerate(zin[b]) if v != 0}
            if bo is not None:
                row[bo + j] = one
            return row

        return pi_linear, den
    nsp = 1 if isinstance(m, nn.Conv1d) else 2
    batched = z.ndim == nsp + 2
    zb = z if batched else z[None]
    pad = [(0, 0), (0, 0)] + [(p, p) for p in m.padding]
    zp = np.pad(zb, pad, constant_values=0) if any(m.padding) else zb
    ks, st, dl = m.kernel_size, m.stride, m.dilation
    cin = m.in_channels

    def pi_conv(idx, shape):
        idx = np.unravel_index(int(np.ravel_multi_index(idx, shape)), oshape)  # the same entry, affine's shape
        idx = tuple(int(i) for i in idx) if batched else (0,) + tuple(int(i) for i in idx)
        b, o, pos = idx[0], idx[1], idx[2:]
        sl = tuple(slice(pos[i] * st[i], pos[i] * st[i] + dl[i] * (ks[i] - 1) + 1, dl[i]) for i in range(nsp))
        patch = zp[(b, slice(None)) + sl].reshape(-1)  # (cin, *k) flattened, the weight's own order
        base = None if wo is None else wo + o * cin * int(np.prod(ks))
        row = {} if base is None else {base + k: v for k, v in enumerate(patch.tolist()) if v != 0}
        if bo is not None:
            row[bo + o] = one
        return row

    return pi_conv, den
