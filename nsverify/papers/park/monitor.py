"""A training monitor for Park et al.'s conditions: hooks into any ``nn.Module`` built from supported layers.

Usage::

    mon = Monitor(model)                 # validates the layers (clear error for unsupported ones)
    for x, t in loader:
        loss = crit(model(x), t)
        rec = mon.check()                # after the forward, before backward: uses the captured tensors
        loss.backward(); opt.step(); opt.zero_grad()
    print(mon.summary()); mon.close()

Per step and per nonsmooth layer (an activation module, and the max pool that follows it) the monitor records
kink touches (pre-activations exactly at a kink of the activation), max-pool windows with ties (|S_j| >= 2),
non-trivial ties (S_j \\ T_j non-empty, Algorithm 1 line 14) and their size, Algorithm 1's P_l (bounded LP
with an exact check, :func:`nsverify.papers.park.lp.p_nonempty`), and Theorem 5's exact rank test for
fully connected layers whose activation touched a kink. Kernel sizes, strides, padding and dilation are read
from the modules.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from nsverify.errors import UnsupportedOpError
from nsverify.papers.park.algorithm1 import LayerCheck, algorithm1_layer
from nsverify.papers.park.rank import full_column_rank
from nsverify.papers.park.walker import unsupported, walk
from nsverify.strategies.netspec import Activation


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


@dataclass
class StepRecord:
    step: int
    layers: list  # LayerCheck per monitored layer
    rank_ok: dict = field(default_factory=dict)  # layer name -> Theorem 5 premise (only where kinks touched)

    @property
    def correct(self) -> str:
        """'yes' when every layer's P_l is non-empty (Theorem 8) or a rank premise holds (Theorem 5),
        'unknown' otherwise."""
        for chk in self.layers:
            if chk.status in ("nonempty", "trivial"):
                continue
            if self.rank_ok.get(chk.name) and chk.tied_windows == 0:
                continue
            return "unknown"
        return "yes"


class Monitor:
    """Hooks on a model's activation, max-pool and affine modules; see the module docstring."""

    def __init__(self, model: nn.Module, max_checks: int = 2048, lp: bool = True, tie_test: str = "jvp"):
        self.model = model
        self.tie_test = tie_test
        self.max_checks = max_checks
        self.lp = lp
        self.steps: list[StepRecord] = []
        self._store: dict = {}
        self._handles = []
        self._inplace: list = []
        self.layers = self._plan(model)
        self._install()

    # ------------------------------------------------------------------ structure
    def _plan(self, model) -> list[_Layer]:
        mods = dict(model.named_modules())
        layers: list[_Layer] = []
        pending_affine: list[str] = []
        seen_params: list = []
        first_input_conv = None
        last_linear = None

        def params_of(names):
            return [p for n in names for p in mods[n].parameters(recurse=False) if p.requires_grad]

        for node in walk(model, hint="; the monitor needs a static module structure"):
            m = node.module
            if node.functional:
                if node.kind == "nonsmooth":
                    raise UnsupportedOpError(unsupported(node.name, node.what))
                raise UnsupportedOpError(
                    f"{node.spelled} at {node.name!r}: the monitor observes modules; use the module form "
                    f"(e.g. nn.ReLU(), nn.MaxPool2d(...)) in the model's forward"
                )
            if node.kind == "affine":
                pending_affine.append(node.name)
                seen_params.extend(p for p in m.parameters(recurse=False) if p.requires_grad)
                if isinstance(m, nn.Linear):
                    last_linear = node.name
                if isinstance(m, (nn.Conv1d, nn.Conv2d)) and node.reads_input and not layers:
                    first_input_conv = node.name
            elif node.kind == "activation":
                only_conv_bn = first_input_conv is not None and all(
                    n == first_input_conv or isinstance(mods[n], (nn.BatchNorm1d, nn.BatchNorm2d))
                    for n in pending_affine
                )
                one_linear = (
                    len(pending_affine) == 1 and isinstance(mods[pending_affine[0]], nn.Linear)
                )
                layers.append(
                    _Layer(
                        node.name,
                        m,
                        Activation(node.activation),
                        params_of(pending_affine),
                        list(seen_params),
                        list(pending_affine),
                        linear_in=last_linear if one_linear else None,
                        first_conv=first_input_conv if only_conv_bn and len(layers) == 0 else None,
                    )
                )
                pending_affine = []
            else:  # a max-pool module
                if getattr(m, "ceil_mode", False):
                    raise UnsupportedOpError(
                        f"{node.name}: ceil_mode=True max pooling is not supported by the monitor; use "
                        f"ceil_mode=False"
                    )
                if layers and layers[-1].pool_module is None and not pending_affine:
                    layers[-1].pool_module, layers[-1].pool_name = m, node.name
                else:
                    layers.append(
                        _Layer(
                            node.name,
                            None,
                            Activation("identity"),
                            params_of(pending_affine),
                            list(seen_params),
                            list(pending_affine),
                            pool_module=m,
                            pool_name=node.name,
                        )
                    )
                    pending_affine = []
        if not layers:
            raise UnsupportedOpError(f"{type(model).__name__} has no activation or max-pool module to monitor")
        return layers

    def _install(self):
        mods = dict(self.model.named_modules())
        for L in self.layers:
            if L.act_module is not None:
                if getattr(L.act_module, "inplace", False):
                    self._inplace.append(L.act_module)
                    L.act_module.inplace = False  # the pre-activation must survive; restored by close()
                self._handles.append(L.act_module.register_forward_hook(self._act_hook(L.name)))
            if L.pool_module is not None:
                self._handles.append(L.pool_module.register_forward_hook(self._pool_hook(L.name)))
            if L.linear_in:
                self._handles.append(mods[L.linear_in].register_forward_hook(self._in_hook(L.name, "zin")))
            if L.first_conv:
                self._handles.append(mods[L.first_conv].register_forward_hook(self._in_hook(L.name, "x")))

    def _act_hook(self, name):
        def hook(mod, inp, out):
            if torch.is_grad_enabled():
                self._store.setdefault(name, {}).update(y=inp[0], a=out)

        return hook

    def _pool_hook(self, name):
        def hook(mod, inp, out):
            if torch.is_grad_enabled():
                d = self._store.setdefault(name, {})
                d["pool_in"] = inp[0]
                if "a" not in d or d.get("a") is not inp[0]:
                    d.setdefault("y", inp[0])
                    d["a"] = inp[0]

        return hook

    def _in_hook(self, name, key):
        def hook(mod, inp, out):
            if torch.is_grad_enabled():
                self._store.setdefault(name, {})[key] = inp[0].detach()

        return hook

    # ------------------------------------------------------------------ per step
    def check(self) -> StepRecord:
        """Run the checks on the tensors captured by the last forward (its autograd graph must be alive)."""
        recs, rank = [], {}
        for L in self.layers:
            d = self._store.get(L.name)
            if not d or "y" not in d:
                recs.append(LayerCheck(L.name))
                continue
            pool = None
            if L.pool_module is not None:
                m = L.pool_module
                stride = m.stride if m.stride not in (None, []) else m.kernel_size
                pool = (m.kernel_size, stride, m.padding, m.dilation)
            same = self._same_patch(L, d) if L.first_conv and "x" in d else None
            chk = algorithm1_layer(
                L.name,
                d["y"],
                d["a"],
                L.activation,
                L.params_l,
                L.params_upto,
                pool,
                self.max_checks,
                same,
                tie_test=self.tie_test,
            )
            if not self.lp and chk.p is not None:
                chk.p = None
            recs.append(chk)
            if chk.kink_touches and "zin" in d:
                zin = d["zin"].reshape(d["zin"].shape[0], -1)
                rank[L.name] = full_column_rank(zin.t())
        self._store.clear()
        rec = StepRecord(len(self.steps), recs, rank)
        self.steps.append(rec)
        return rec

    def _same_patch(self, L: _Layer, d):
        """Identical receptive fields of a first-layer convolution: equal input patches (same sample,
        channel)."""
        import torch.nn.functional as F

        conv = dict(self.model.named_modules())[L.first_conv]
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
        patches = F.unfold(x, ks, dilation=dl, padding=pd, stride=st)  # (B, C*K, P)
        npos = patches.shape[2]

        def same(b, i, k):
            return torch.equal(patches[b, :, i % npos], patches[b, :, k % npos])

        return same

    # ------------------------------------------------------------------ results
    def summary(self) -> list[dict]:
        """Per layer over all steps: the quantities of Park, Chun and Lee's Table 2."""
        out = []
        for j, L in enumerate(self.layers):
            chks = [s.layers[j] for s in self.steps]
            windows = sum(c.windows for c in chks)
            tied = sum(c.tied_windows for c in chks)
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
                    "steps_nontrivial": nt_steps,
                    "avg_nontrivial": (sum(c.sum_nontrivial for c in chks) / nt) if nt else None,
                    "kink_touches": sum(c.kink_touches for c in chks),
                    "unchecked": sum(c.unchecked for c in chks),
                    "p_empty_steps": sum(1 for c in chks if c.status == "empty"),
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
