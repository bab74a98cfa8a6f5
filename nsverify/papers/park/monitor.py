"""A training monitor for Park et al.'s conditions: hooks into any ``nn.Module`` built from supported layers.

Usage::

    mon = Monitor(model)                 # validates the layers (clear error for unsupported ones)
    for x, t in loader:
        loss = crit(model(x), t)
        rec = mon.check()                # after the forward, before backward: uses the captured tensors
        loss.backward(); opt.step(); opt.zero_grad()
    print(mon.summary()); mon.close()

``Monitor(model, asynchronous=True)``: ``check()`` returns the previous step's record and never waits for the
device on a step without kink touches or counted ties; ``mon.flush()`` after the loop returns the last step's.

Per step and per nonsmooth layer (an activation module, and the max pool that follows it) the monitor records
kink touches (pre-activations exactly at a kink of the activation), max-pool windows with ties (|S_j| >= 2),
non-trivial ties (S_j \\ T_j non-empty, Algorithm 1 line 14) and their size, Algorithm 1's P_l (decided
exactly by the engine's :func:`nsverify.oracle.park.cone.p_nonempty`), and Theorem 5's exact rank test for
fully connected layers whose activation touched a kink. Kernel sizes, strides, padding and dilation are read
from the modules (``nn.MaxPool1d/2d``, ``nn.ReLU`` and the other activations, and nsverify.ad's variants).

Cheap when nothing ties. Detection runs in the forward hooks, on tensors just written: kink touches
(``y == b`` for each kink b, :func:`nsverify.kernels.count_equal`) in the activation's hook, and the tied windows of
the pool (:func:`nsverify.kernels.tie_scan_windows`: one pass against the pool's own output, no re-run, the
counted windows as (sample, window) pairs) in the pool's. Each is one kernel per layer (C++ on the CPU, Triton on
CUDA); on the CPU a layer with a pool gets both in one C++ call in the pool's hook
(:func:`nsverify.kernels.monitor_pool_scan`), and small layers run without a parallel region. Nothing in the
forward waits for the device: on CUDA the pool's hook keeps the mask of the counted
windows, and :meth:`Monitor.check` reads their (sample, window) pairs only for the layers whose counts, read in
the step's one transfer, show counted ties. ``tied_windows`` counts every window with |S_j| >= 2;
``tied_positive`` counts them as Park et al.'s Algorithm 2 does (App. F, line 7): a tie whose maximum is a
*saturated* value of the activation -- ``max <= 0`` after a ReLU with D^AD ReLU(0) = 0, and likewise the flat ends
of ReLU6, HardTanh and clamp-like activations -- is left out, because every entry of such a window has AD
derivative 0 (T_j = S_j, no constraint). Only those windows are checked. The exact checks (Algorithm 1 with
:func:`nsverify.oracle.park.algorithm1.algorithm1_layer`: T_j, constraints, the exact P_l test, the rank test) run
in :meth:`Monitor.check` only for the layers and steps whose detection found kink touches or counted ties; all
counts reach the host in one transfer per step, and the checks run on one intra-op thread. There T_j is decided
pair by pair by the cheapest sufficient test (``tie_test="auto"``,
:func:`nsverify.oracle.park.algorithm1._pool_constraints_auto`): D^AD rho 0 at both entries, the w_l blocks read
from the layer input's patches when the layer is one Conv/Linear, or a first Conv + BatchNorm (no backward pass;
on the CPU one C++ pass over all pairs), identical receptive fields (on the CPU the same C++ pass, a field being the
patch of a convolution), and only then the exact AD gradients; on the CPU the pairs (i*, i) themselves -- tie sets,
i*, D^AD rho by the pieces' slopes -- come from one C++ pass over the tied windows
(:func:`nsverify.oracle.park.algorithm1._fused_pairs`). Each
layer's record counts how often each test decided (``tj_flat``, ``tj_patch``, ``tj_field``, ``tj_exact``;
:attr:`StepRecord.tj_paths`).
"""

from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass, field

import torch
from torch import nn

from nsverify import kernels
from nsverify.ad import Activation
from nsverify.errors import UnsupportedOpError
from nsverify.kernels import count_equal, monitor_pool_scan, tie_scan, tie_scan_windows
from nsverify.oracle.park.algorithm1 import AffineRows, algorithm1_layer, patch_offsets
from nsverify.oracle.park.cone import LayerCheck
from nsverify.oracle.park.rank import full_column_rank
from nsverify.oracle.park.walk import layer_groups, unsupported, walk


@dataclass
class _Layer:
    name: str
    act_module: nn.Module | None
    activation: Activation
    params_l: list
    params_upto: list
    affine: list  # module names of this layer's affine part
    pool_module: nn.Module | None = None
    pool_name: str | None = None
    linear_in: str | None = None  # the Linear module whose input is z_{l-1} (Theorem 5)
    first_conv: str | None = None  # a conv applied directly to the model input (identical-patch fast path)
    field_of_view: tuple | None = None  # ((rf, jump, start) per spatial dim) of a conv/pool chain from the input
    affine_module: str | None = None  # the one Conv/Linear computing y from z_{l-1}, w_l = its (weight, bias)
    affine_bn: str | None = None  # ... followed by this BatchNorm (w_l adds its weight and bias)

    @property
    def pool_geom(self):
        """(kernel, stride, padding, dilation) of the pool as the module spells them, or None."""
        m = self.pool_module
        if m is None:
            return None
        stride = m.stride if m.stride not in (None, []) else m.kernel_size
        return (m.kernel_size, stride, m.padding, m.dilation)

    @functools.cached_property
    def saturated(self) -> tuple:
        return saturated_values(self.activation)

    @functools.cached_property
    def breakpoints(self) -> list:
        return [float(b) for b in self.activation.breakpoints]


def receptive_fields(model: nn.Module) -> dict:
    """``{id(module): ((rf, jump, start) for height, width)}`` for the activation and max-pool modules of a flat
    ``nn.Sequential`` whose modules from the input up to them are 2-d convolutions, BatchNorm, elementwise
    activations and max pools only: unit (oh, ow) of the tensor entering such a module depends on input rows
    ``start + oh * jump ... + rf - 1`` (and likewise columns) and on nothing else. Empty for other models."""
    if not isinstance(model, nn.Sequential):
        return {}
    from nsverify.oracle.park.walk import VARIANT_MODULES, activation_modules

    acts = activation_modules() | VARIANT_MODULES
    pair = lambda v: (v, v) if isinstance(v, int) else tuple(v)  # noqa: E731
    state = [[1, 1, 0], [1, 1, 0]]  # per dim: rf, jump, start
    out = {}
    for m in model.children():
        cls = type(m).__name__
        pool = isinstance(m, nn.MaxPool2d) or cls == "MaxPool2dVariant"
        if cls in acts:
            out[id(m)] = tuple(tuple(d) for d in state)
        if (isinstance(m, nn.Conv2d) and not isinstance(m.padding, str)) or (pool and not m.ceil_mode):
            stride = m.kernel_size if m.stride in (None, []) else m.stride
            for dim, (k, s_, p_, d_) in enumerate(zip(pair(m.kernel_size), pair(stride), pair(m.padding),
                                                      pair(m.dilation))):
                rf, jump, start = state[dim]
                state[dim] = [rf + (k - 1) * d_ * jump, jump * s_, start - p_ * jump]
        elif not (isinstance(m, (nn.BatchNorm2d, nn.Identity)) or cls in acts):
            break  # anything else (dropout, linear, ...) ends the chain
    return out


def _same_field(x: torch.Tensor, y: torch.Tensor, fov, single_layer: bool = False) -> callable:
    """``same(b, i, k)``: do units i and k of sample b (flat indices into y[b]; ints, or index tensors for all pairs
    at once) compute the same thing? ``fov``: ((rf, jump, start) per dim, see :func:`receptive_fields`). If their
    zero-padded input fields are identical, a translation-equivariant chain (convolutions, BatchNorm, elementwise
    activations, max pools with PyTorch's first-index rule) computes both, and their AD gradients w.r.t. the shared
    parameters, identically -- provided the zero padding of the intermediate layers sits alike: in each spatial
    dimension both fields lie inside the image, or both units have the same index (so the translation runs along
    the border). ``single_layer``: one convolution on the input (no intermediate padding): identical zero-padded
    fields suffice."""
    (rf_h, jh, sh), (rf_w, jw, sw) = fov
    ho, wo = y.shape[-2:]
    h, w = x.shape[-2:]
    consts = []  # made at the first call: most layers' pairs are decided before this test

    def fields(b, i):  # the zero-padded fields, gathered from x itself (positions outside the image read 0)
        if not consts:
            consts.extend((x.contiguous().reshape(-1), torch.arange(rf_h, device=x.device),
                           torch.arange(rf_w, device=x.device), torch.arange(x.shape[1], device=x.device) * (h * w),
                           torch.zeros((), dtype=x.dtype, device=x.device)))
        xf, dr, dc, chans, zero = consts
        pos = i % (ho * wo)
        oh, ow = pos // wo, pos % wo
        r0, c0 = sh + oh * jh, sw + ow * jw
        inside_h, inside_w = (r0 >= 0) & (r0 + rf_h <= h), (c0 >= 0) & (c0 + rf_w <= w)
        r, c = r0[:, None] + dr, c0[:, None] + dc
        ok = ((r >= 0) & (r < h))[:, :, None] & ((c >= 0) & (c < w))[:, None, :]
        flat = (r.clamp(0, h - 1) * w)[:, :, None] + c.clamp(0, w - 1)[:, None, :]
        flat = (b * (x.shape[1] * h * w))[:, None, None, None] + chans[None, :, None, None] + flat[:, None]
        f = torch.where(ok[:, None], xf[flat], zero)
        return f, oh, ow, inside_h, inside_w

    fused = x.dtype in (torch.float32, torch.float64) and kernels.cpu_kernels_ok(x)

    def same_fused(b, i, k):  # the same comparison by the C++ patch test (scale 1, one channel, no bias column)
        if not consts:
            geom = (wo, (rf_h, rf_w), (jh, jw), (1, 1), (-sh, -sw))  # a field = the patch of this convolution
            offsets, valid = patch_offsets(tuple(x.shape[1:]), ho * wo, geom, x.device)
            pos = torch.arange(ho * wo, device=x.device)
            oh, ow = pos // wo, pos % wo
            r0, c0 = sh + oh * jh, sw + ow * jw
            inside = torch.stack([(r0 >= 0) & (r0 + rf_h <= h), (c0 >= 0) & (c0 + rf_w <= w)], dim=1)
            consts.extend((x.contiguous(), offsets, valid, inside, torch.stack([oh, ow], dim=1)))
        xc, offsets, valid, inside, ohw = consts
        pi, pk = i % (ho * wo), k % (ho * wo)
        zero, one = torch.zeros_like(b), torch.ones(b.shape, dtype=x.dtype, device=x.device)
        res = torch.ops.nsverify_kernels.patch_pairs_equal(xc, offsets, valid, b, pi, pk, zero, zero, one, one, False)
        if not single_layer:
            res &= ((inside[pi] & inside[pk]) | (ohw[pi] == ohw[pk])).all(dim=1)
        return res

    def same(b, i, k):
        scalar = isinstance(b, int)
        if scalar:
            b, i, k = (torch.tensor([v], device=x.device) for v in (b, i, k))
        if fused:
            res = same_fused(b, i, k)
            return bool(res[0]) if scalar else res
        fi, ohi, owi, ihi, iwi = fields(b, i)
        fk, ohk, owk, ihk, iwk = fields(b, k)
        res = (fi == fk).flatten(1).all(dim=1)
        if not single_layer:
            res &= ((ihi & ihk) | (ohi == ohk)) & ((iwi & iwk) | (owi == owk))
        return bool(res[0]) if scalar else res

    same.vectorised = True
    return same


def _deferred(t: torch.Tensor) -> bool:
    """Does the pool's hook keep the mask of counted windows (their pairs read in :meth:`Monitor.check`) rather
    than the pairs? Off the CPU: ``nonzero`` there waits for the device."""
    return t.device.type != "cpu"


def saturated_values(act: Activation) -> tuple[float, ...]:
    """The activation values whose every preimage has AD derivative 0 (Algorithm 2's "max not positive" for a
    ReLU with D^AD ReLU(0) = 0): the constants of the flat pieces of an activation made of identity and constant
    pieces (ReLU, ReLU6, HardTanh, clamp), when AD uses derivative 0 at the kinks that bound them. The identity
    pieces make this exact in floating point: alpha = c only where y = c or y is on the flat piece. Other
    activations (leaky ReLU, hardsigmoid, ...) have none: their windows are all counted."""
    p = act.primitive()
    if p is None or any(pc.poly is None or (len(pc.poly) > 1 and tuple(pc.poly) != (0, 1)) for pc in p.pieces):
        return ()
    ad = dict(zip(p.breakpoints, act.ad_derivatives()))
    out = []
    for i, pc in enumerate(p.pieces):
        if len(pc.poly) != 1:
            continue
        bounds = [p.breakpoints[j] for j in (i - 1, i) if 0 <= j < len(p.breakpoints)]
        if all(ad[b] == 0 for b in bounds):
            out.append(float(pc.poly[0]))
    return tuple(out)


#: how the pairs (i*, i) of tied windows were decided (``LayerCheck.tj_*``, summed in :meth:`Monitor.summary` and
#: :attr:`StepRecord.tj_paths`): see :func:`nsverify.oracle.park.algorithm1._pool_constraints_auto`
TJ_PATHS = ("flat", "patch", "field", "exact")


@dataclass
class StepRecord:
    step: int
    layers: list  # LayerCheck per monitored layer
    rank_ok: dict = field(default_factory=dict)  # layer name -> Theorem 5 premise (only where kinks touched)
    note: str = ""  # why layers are unchecked beyond the cap (the asynchronous mode's deferred steps)

    @property
    def tj_paths(self) -> dict:
        """``{path: pairs}`` over the step's layers: how often each T_j test decided (:data:`TJ_PATHS`)."""
        return {k: sum(getattr(c, f"tj_{k}") for c in self.layers) for k in TJ_PATHS}

    @property
    def correct(self) -> str:
        """'yes' when every layer's P_l is non-empty (Theorem 8) or a rank premise holds (Theorem 5),
        'unknown' otherwise."""
        for chk in self.layers:
            if chk.status in ("nonempty", "trivial"):
                continue
            if self.rank_ok.get(chk.name) and chk.tied_positive == 0:
                continue
            return "unknown"
        return "yes"


class Monitor:
    """Hooks on a model's activation, max-pool and affine modules; see the module docstring."""

    def __init__(self, model: nn.Module, max_checks: int = 2048, lp: bool = True, tie_test: str = "auto",
                 asynchronous: bool = False):
        self.model = model
        self.asynchronous = asynchronous
        self._pending = None  # asynchronous mode: (layers, detection, host counts, event) of the step in flight
        self._ready: StepRecord | None = None  # asynchronous mode: a record made, returned by the next check()
        self._sync_next = True  # asynchronous mode: the next step waits for its counts (first step, after ties)
        self.tie_test = tie_test
        self.max_checks = max_checks
        self.lp = lp
        self.steps: list[StepRecord] = []
        self._store: dict = {}
        self._handles = []
        self._inplace: list = []
        self.layers = self._plan(model)
        self._modules = dict(model.named_modules())
        fields = receptive_fields(model)
        for L in self.layers:
            unit = L.act_module if L.act_module is not None else L.pool_module
            L.field_of_view = fields.get(id(unit))
        self._input_hook = any(L.field_of_view and not L.first_conv for L in self.layers)
        self._install()

    # ------------------------------------------------------------------ structure
    def _plan(self, model) -> list[_Layer]:
        mods = dict(model.named_modules())
        layers: list[_Layer] = []
        seen_params: list = []
        first_input_conv = None
        last_linear = None

        def params_of(names):
            return [p for n in names for p in mods[n].parameters(recurse=False) if p.requires_grad]

        nodes = walk(model, hint="; the monitor needs a static module structure")
        for node in nodes:
            if node.functional:
                if node.kind == "nonsmooth":
                    raise UnsupportedOpError(unsupported(node.name, node.what))
                raise UnsupportedOpError(
                    f"{node.spelled} at {node.name!r}: the monitor observes modules; use the module form "
                    f"(e.g. nn.ReLU(), nn.MaxPool2d(...)) in the model's forward"
                )
            if node.kind == "pool" and getattr(node.module, "ceil_mode", False):
                raise UnsupportedOpError(
                    f"{node.name}: ceil_mode=True max pooling is not supported by the monitor; use "
                    f"ceil_mode=False"
                )
        for g in layer_groups(nodes):  # the grouping detect() uses too
            pending_affine = [n.name for n in g.affine]
            for node in g.affine:
                m = node.module
                seen_params.extend(p for p in m.parameters(recurse=False) if p.requires_grad)
                if isinstance(m, nn.Linear):
                    last_linear = node.name
                if isinstance(m, (nn.Conv1d, nn.Conv2d)) and node.reads_input and not layers:
                    first_input_conv = node.name
            if g.act is not None:
                only_conv_bn = first_input_conv is not None and all(
                    n == first_input_conv or isinstance(mods[n], (nn.BatchNorm1d, nn.BatchNorm2d))
                    for n in pending_affine
                )
                one_linear = (
                    len(pending_affine) == 1 and isinstance(mods[pending_affine[0]], nn.Linear)
                )
                layers.append(
                    _Layer(
                        g.act.name,
                        g.act.module,
                        Activation(g.act.activation),
                        params_of(pending_affine),
                        list(seen_params),
                        list(pending_affine),
                        linear_in=last_linear if one_linear else None,
                        first_conv=first_input_conv if only_conv_bn and len(layers) == 0 else None,
                    )
                )
                if g.pool is not None:
                    layers[-1].pool_module, layers[-1].pool_name = g.pool.module, g.pool.name
            else:  # a max-pool module without an activation of its own: the identity activation
                layers.append(
                    _Layer(
                        g.pool.name,
                        None,
                        Activation("identity"),
                        params_of(pending_affine),
                        list(seen_params),
                        list(pending_affine),
                        pool_module=g.pool.module,
                        pool_name=g.pool.name,
                    )
                )
        if not layers:
            raise UnsupportedOpError(f"{type(model).__name__} has no activation or max-pool module to monitor")
        for L in layers:
            if len(L.affine) == 1 and AffineRows.applies(mods[L.affine[0]], L.params_l):
                L.affine_module = L.affine[0]
            elif (len(L.affine) == 2 and L.params_l == L.params_upto
                  and AffineRows.applies(mods[L.affine[0]], L.params_l, bn=mods[L.affine[1]])):
                L.affine_module, L.affine_bn = L.affine  # a first conv + BatchNorm: the difference form
        return layers

    def _install(self):
        mods = dict(self.model.named_modules())
        for L in self.layers:
            if L.act_module is not None:
                if getattr(L.act_module, "inplace", False):
                    self._inplace.append(L.act_module)
                    L.act_module.inplace = False  # the pre-activation must survive; restored by close()
                self._handles.append(L.act_module.register_forward_hook(self._act_hook(L)))
            if L.pool_module is not None:
                self._handles.append(L.pool_module.register_forward_hook(self._pool_hook(L)))
            if L.linear_in:
                self._handles.append(mods[L.linear_in].register_forward_hook(self._in_hook(L.name, "zin")))
            if L.first_conv:
                self._handles.append(mods[L.first_conv].register_forward_hook(self._in_hook(L.name, "x")))
            if L.affine_module and L.pool_module is not None:
                self._handles.append(mods[L.affine_module].register_forward_hook(self._in_hook(L.name, "z")))
        if self._input_hook:
            def grab(mod, inp):
                if torch.is_grad_enabled():
                    self._store.setdefault("", {})["x"] = inp[0].detach()

            self._handles.append(self.model.register_forward_pre_hook(grab))

    @contextlib.contextmanager
    def paused(self):
        """Within the block the model runs without the monitor's hooks (plain training steps); they come back
        after it."""
        self.close()
        try:
            yield self
        finally:
            self._install()

    def _act_hook(self, L):
        def hook(mod, inp, out):
            if torch.is_grad_enabled():
                d = self._store.setdefault(L.name, {})
                d.update(y=inp[0], a=out)
                d.pop("kinks", None)
                if L.pool_module is None or _deferred(inp[0]):
                    d["kinks"] = self._count_kinks(L, inp[0])  # now, while y is still in the cache
                # else (CPU, a pool follows): the pool's hook counts them in its scan, one kernel call per layer

        return hook

    def _pool_hook(self, L):
        def hook(mod, inp, out):
            if torch.is_grad_enabled():
                d = self._store.setdefault(L.name, {})
                d["pool_in"], d["pool_out"] = inp[0], out
                if "a" not in d or d.get("a") is not inp[0]:
                    d.setdefault("y", inp[0])
                    d["a"] = inp[0]
                # kink touches not counted yet (on the CPU the activation's hook leaves them to this scan)
                y = d["y"] if "kinks" not in d else None
                d["scan"], kinks = self._scan_pool(L, inp[0], out, y)  # now, while the pool's input is in the cache
                if y is not None:
                    d["kinks"] = kinks

        return hook

    def _in_hook(self, name, key):
        def hook(mod, inp, out):
            if torch.is_grad_enabled():
                self._store.setdefault(name, {})[key] = inp[0].detach()

        return hook

    # ------------------------------------------------------------------ per step
    def check(self) -> StepRecord:
        """Run the checks on the tensors captured by the last forward (its autograd graph must be alive) and return
        the step's record; with ``Monitor(..., asynchronous=True)``, the previous step's record instead (None at
        the first step; :meth:`flush` returns the last), so that a step without ties never waits for the device
        (see :meth:`_check_async`).

        On the CPU the checks run on one intra-op thread (the setting is restored after): their tensor operations
        are small (the tied windows' entries and patches), too small to gain from threads, and under machine load
        a parallel region waits for a descheduled thread -- measured on 2 cores at load 2, padding a 64x3x32x32
        input took 0.18 ms on one thread and 3.9 ms on two."""
        threads = torch.get_num_threads()
        if threads > 1:
            torch.set_num_threads(1)
        try:
            return self._check_async() if self.asynchronous else self._check()
        finally:
            if threads > 1:
                torch.set_num_threads(threads)

    def _counts(self):
        """The step's layers with their captured tensors, their detection (:meth:`_detect`) and every layer's
        counts in one device tensor (None when no layer has any)."""
        found = [(L, self._store.get(L.name)) for L in self.layers]
        det = [self._detect(L, d) if d and "y" in d else None for L, d in found]
        flat = [t.reshape(-1) for dt in det if dt is not None for t in (dt[0], dt[2]) if t is not None]
        return found, det, torch.cat(flat) if flat else None

    def _check(self) -> StepRecord:
        found = [(L, self._store.get(L.name)) for L in self.layers]
        det = [self._detect(L, d) if d and "y" in d else None for L, d in found]
        counts = [t for dt in det if dt is not None for t in (dt[0], dt[2]) if t is not None]
        if all(t.device.type == "cpu" for t in counts):  # read in place: no transfer to make one of
            host = [v for t in counts for v in t.reshape(-1).tolist()]
        else:
            host = torch.cat([t.reshape(-1) for t in counts]).tolist()  # the step's one device-to-host transfer
        return self._finish(found, det, host)

    def _check_async(self) -> StepRecord | None:
        """The asynchronous mode (see :meth:`flush`): this step's counts start their way to the host without
        waiting, and the previous step's record is returned. A step whose counts show no kink touch and no counted
        tie needs nothing else, so its record is exact when it arrives a step later; the exact checks need the
        step's autograd graph and parameters, which ``backward()`` and the optimizer consume, so a step that
        turns out to need them is recorded with those layers unchecked ("unknown", with the reason in
        :attr:`StepRecord.note`), and the steps after it wait for their counts (checked exactly, as
        :meth:`check` does synchronously) until a step without such ties."""
        found, det, flat = self._counts()
        self._store = {}  # the next forward's tensors go to a fresh store
        out, self._ready = self._ready, None
        if self._pending is not None:
            out = self._resolve()
        if self._sync_next:
            self._ready = self._finish(found, det, flat.tolist() if flat is not None else [])
            self._sync_next = any(c.kink_touches or c.tied_positive for c in self._ready.layers)
        else:
            layers = [(L, None) for L, _d in found]  # the tensors themselves are not kept: only the detection
            if flat is not None and flat.device.type == "cuda":
                host = torch.empty(flat.shape, dtype=flat.dtype, pin_memory=True)
                host.copy_(flat, non_blocking=True)
                event = torch.cuda.Event()
                event.record()
            else:
                host, event = flat, None
            self._pending = (layers, det, host, event)
        return out

    def _resolve(self) -> StepRecord:
        """The record of the step whose counts were sent without waiting (asynchronous mode)."""
        layers, det, host, event = self._pending
        self._pending = None
        if event is not None:
            event.synchronize()
        host = host.tolist() if host is not None else []
        needs, at = [], 0
        for dt in det:
            if dt is None:
                continue
            kinks = int(host[at]) if dt[0] is not None else 0
            at += dt[0] is not None
            positive = int(host[at + 1]) if dt[2] is not None else 0
            at += 2 if dt[2] is not None else 0
            needs.append(kinks > 0 or positive > 0)
        if not any(needs):
            return self._finish(layers, det, host)
        rec = self._finish(layers, det, host, checks=False)
        self._sync_next = True
        return rec

    def flush(self) -> StepRecord | None:
        """Asynchronous mode: the last step's record (waiting for its counts), or None when every step's record
        was returned. Call it after the last step; :meth:`check` returns each other step's record one step
        late. In the default (synchronous) mode there is nothing to flush."""
        out, self._ready = self._ready, None
        if self._pending is not None:
            out = self._resolve()
        self._sync_next = True
        return out

    def _finish(self, found, det, host: list, checks: bool = True) -> StepRecord:
        """The step's record from its counts on the host; ``checks=False`` (a deferred step whose graph is gone):
        layers with kink touches or counted ties are left unchecked instead of going to Algorithm 1."""
        recs, rank = [], {}
        deferred = []
        for (L, d), dt in zip(found, det):
            if dt is None:
                recs.append(LayerCheck(L.name))
                continue
            kinks, windows, tied, positive = 0, dt[1], 0, 0
            if dt[0] is not None:
                kinks, host = int(host[0]), host[1:]
            if dt[2] is not None:
                tied, positive, host = int(host[0]), int(host[1]), host[2:]
            if kinks == 0 and positive == 0:
                recs.append(LayerCheck(L.name, windows=windows, tied_windows=tied, tied_positive=positive))
                continue
            if not checks:
                recs.append(LayerCheck(L.name, kink_touches=kinks, windows=windows, tied_windows=tied,
                                       tied_positive=positive, unchecked=kinks + positive))
                deferred.append(L.name)
                continue
            cand = dt[3] if positive else None
            if cand is not None and cand.dtype == torch.bool:  # a mask (off the CPU): its (sample, window) pairs
                cand = cand.reshape(cand.shape[0], -1).nonzero()
            if L.first_conv and "x" in d:
                same = self._same_patch(L, d)
            elif L.field_of_view and "x" in self._store.get("", {}):
                same = _same_field(self._store[""]["x"], d["y"], L.field_of_view)
            else:
                same = None
            chk = algorithm1_layer(
                L.name,
                d["y"],
                d["a"],
                L.activation,
                L.params_l,
                L.params_upto,
                L.pool_geom if positive else None,
                self.max_checks,
                same,
                tie_test=self.tie_test,
                windows=cand,
                affine=AffineRows(self._modules[L.affine_module], d["z"], tuple(d["y"].shape),
                                  bn=self._modules[L.affine_bn] if L.affine_bn else None)
                if positive and "z" in d and AffineRows.batched_input(self._modules[L.affine_module], d["z"])
                else None,
                kinks=kinks > 0,
                rho=(L.act_module.forward if L.act_module is not None else (lambda t: t)) if self.tie_test == "auto"
                else None,
            )
            chk.windows, chk.tied_windows, chk.tied_positive = windows, tied, positive
            if not self.lp and chk.p is not None:
                chk.p = None
            recs.append(chk)
            if chk.kink_touches and "zin" in d:
                zin = d["zin"].reshape(d["zin"].shape[0], -1)
                rank[L.name] = full_column_rank(zin.t())
        self._store.clear()
        note = (f"asynchronous mode: {', '.join(deferred)} had kink touches or counted ties, found after the "
                f"step's graph was released; the following steps are checked synchronously" if deferred else "")
        rec = StepRecord(len(self.steps), recs, rank, note)
        self.steps.append(rec)
        return rec

    @staticmethod
    def _count_kinks(L: _Layer, y: torch.Tensor) -> torch.Tensor | None:
        """Kink touches of pre-activations y (0-d int64 on y's device), or None for an activation without kinks."""
        return count_equal(y.detach(), L.breakpoints) if L.breakpoints else None

    @classmethod
    def _scan_pool(cls, L: _Layer, a: torch.Tensor, out: torch.Tensor, y: torch.Tensor | None = None):
        """``((counts, windows), kinks)``: the pool's tied windows (:func:`nsverify.kernels.tie_scan_windows`: windows
        with |S_j| >= 2, and those Algorithm 2 counts, whose maximum is not a saturated value; windows: the latter
        as (sample, window) pairs), on the model's device, and the kink touches of the pre-activations ``y``
        (:meth:`_count_kinks`; None without y). On the CPU one call does both
        (:func:`nsverify.kernels.monitor_pool_scan`, one C++ pass per layer). Off the CPU, windows is the mask of
        :func:`nsverify.kernels.tie_scan` instead (a Triton kernel on CUDA): its (sample, window) pairs are read in
        :meth:`check` after the step's one transfer, and only for a layer with counted ties, so that the forward
        never waits for the device."""
        a, out = a.detach(), out.detach()
        k, s, p, dl = L.pool_geom
        if isinstance(L.pool_module, nn.MaxPool1d) or out.dim() <= 3:  # 1-d pools: a (B, C, L) or (B, L)
            one = lambda v: (1, v if isinstance(v, int) else v[0])  # noqa: E731
            geom = (one(k), one(s), (0, p if isinstance(p, int) else p[0]), one(dl))
            a2, o2 = a.unsqueeze(-2), out.unsqueeze(-2)
        else:
            pair = lambda v: (v, v) if isinstance(v, int) else tuple(v)  # noqa: E731
            geom = tuple(pair(v) for v in (k, s, p, dl))
            a2, o2 = a, out
        if a2.dim() == 3:  # (B, 1, L) from a (B, L) activation
            a2, o2 = a2.unsqueeze(1), o2.unsqueeze(1)
        if _deferred(a2):  # the mask only: its windows (nonzero waits for the device) in check()
            return tie_scan(a2, o2, *geom, saturated=L.saturated), None if y is None else cls._count_kinks(L, y)
        if y is None or not L.breakpoints:
            return tie_scan_windows(a2, o2, *geom, saturated=L.saturated), None
        counts, windows = monitor_pool_scan(y.detach(), L.breakpoints, a2, o2, *geom, saturated=L.saturated)
        return (counts[1:], windows), counts[0]

    @staticmethod
    def _detect(L: _Layer, d: dict):
        """``(kink touches, windows, [tied windows, Algorithm-2-counted tied windows], windows)`` of one layer: the
        counts as device tensors (None where the layer has no kinks or no pool), the number of pool windows as an
        int (known on the host), and the (sample, window) pairs of the Algorithm-2 ties, or their mask off the CPU
        (None without a pool). Nothing reaches the host here: the forward hooks computed them as the tensors were
        made, and :meth:`check` reads every layer's counts in one transfer."""
        if "kinks" not in d:  # the pool's hook, which counts them on the CPU, did not run in this forward
            d["kinks"] = Monitor._count_kinks(L, d["y"])
        kinks = d["kinks"]
        if L.pool_module is None or "pool_out" not in d:
            return kinks, 0, None, None
        counts, positive = d["scan"]
        return kinks, d["pool_out"].numel(), counts, positive

    def _same_patch(self, L: _Layer, d):
        """Identical receptive fields of a first-layer convolution: equal zero-padded input patches (same sample,
        channel)."""
        conv = self._modules[L.first_conv]
        x = d["x"]
        if isinstance(conv, nn.Conv1d):
            x = x.unsqueeze(2)
            ks, st, pd, dl = (
                (1, conv.kernel_size[0]),
                (1, conv.stride[0]),
                (0, conv.padding[0]),
                (1, conv.dilation[0]),
            )
        else:
            ks, st, pd, dl = conv.kernel_size, conv.stride, conv.padding, conv.dilation
        if isinstance(pd, str):
            return None
        y = d["y"] if d["y"].dim() == 4 else d["y"].unsqueeze(2)
        pair = lambda v: (v, v) if isinstance(v, int) else tuple(v)  # noqa: E731
        fov = tuple(((k - 1) * dd + 1, s_, -p_) for k, s_, p_, dd in zip(pair(ks), pair(st), pair(pd), pair(dl)))
        return _same_field(x, y, fov, single_layer=True)

    # ------------------------------------------------------------------ results
    def summary(self) -> list[dict]:
        """Per layer over all steps: the quantities of Park, Chun and Lee's Table 2."""
        out = []
        for j, L in enumerate(self.layers):
            chks = [s.layers[j] for s in self.steps]
            windows = sum(c.windows for c in chks)
            tied = sum(c.tied_windows for c in chks)
            positive = sum(c.tied_positive for c in chks)
            nt_steps = sum(1 for c in chks if c.nontrivial_windows)
            nt = sum(c.nontrivial_windows for c in chks)
            out.append(
                {
                    "layer": L.name,
                    "pool": L.pool_name,
                    "activation": L.activation.key,
                    "max_ops": windows,
                    "tied_max_ops": tied,
                    "tie_share": tied / windows if windows else None,
                    "tied_positive": positive,
                    "positive_share": positive / windows if windows else None,
                    "steps_nontrivial": nt_steps,
                    "avg_nontrivial": (sum(c.sum_nontrivial for c in chks) / nt) if nt else None,
                    "kink_touches": sum(c.kink_touches for c in chks),
                    "unchecked": sum(c.unchecked for c in chks),
                    "p_empty_steps": sum(1 for c in chks if c.status == "empty"),
                    **{f"tj_{k}": sum(getattr(c, f"tj_{k}") for c in chks) for k in TJ_PATHS},
                    "unknown_steps": sum(1 for c in chks if c.status in ("unknown", "not_applicable")),
                }
            )
        return out

    def correct_steps(self) -> tuple[int, int]:
        """(steps certified correct, steps)."""
        return sum(1 for s in self.steps if s.correct == "yes"), len(self.steps)

    def close(self):
        for h in self._handles:
            h.remove()
        self._handles.clear()
        for m in self._inplace:
            m.inplace = True
        self._inplace.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
