"""Park, Chun and Lee's Conditions 1 and 2 (Sec. 2.2): the structure of a model, and the structural premises
of the theorems in their Table 1.

:func:`detect` reads a ``torch.nn.Module`` (through the engine's torch.fx walk,
:mod:`nsverify.oracle.park.walk`) or a :class:`~nsverify.strategies.netspec.NetSpec` and returns, per nonsmooth
layer, the bias kind (distinct / shared / none), the pooling (none / trivial / non-trivial), the activation and
its common lambda (from the registry, :func:`nsverify.oracle.park.kinks.common_lambda`), and which theorems'
structural premises hold (:meth:`ModelConditions.theorems`). The data-dependent premises live in the engine
(:mod:`nsverify.oracle.park`: ``rank`` for Theorem 5, ``algorithm1`` for Theorem 8) and :mod:`.premises` (all of
them at a NetSpec's point).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction

import torch

from nsverify.ad import Activation
from nsverify.errors import NsverifyError
from nsverify.oracle.park.kinks import common_lambda, proxy_in_clarke, proxy_is_bouligand
from nsverify.oracle.park.walk import layer_groups, walk
from nsverify.strategies.netspec import NetSpec


@dataclass
class LayerInfo:
    name: str
    activation: str  # registry name or variant key; "identity" for none
    bias: str  # "distinct" | "shared" | "none"
    pool: str  # "none" | "trivial" | "nontrivial"
    fully_connected: bool
    lam: Fraction | None = None

    @property
    def nonsmooth(self) -> bool:
        return bool(Activation(self.activation).breakpoints)


@dataclass
class ModelConditions:
    layers: list
    batch: int | None = None
    notes: list = field(default_factory=list)

    @property
    def relevant(self):
        """Layers with a non-differentiable activation or a non-trivial max pool."""
        return [L for L in self.layers if L.nonsmooth or L.pool == "nontrivial"]

    @property
    def condition1(self) -> bool:
        return all(L.pool in ("none", "trivial") for L in self.layers)

    @property
    def distinct_bias(self) -> bool:
        return all(L.bias == "distinct" for L in self.layers if L.nonsmooth)

    @property
    def shared_bias(self) -> bool:
        return all(L.bias in ("distinct", "shared") for L in self.layers if L.nonsmooth)

    @property
    def trivial_pools(self) -> bool:
        return all(L.pool != "nontrivial" for L in self.layers)

    @property
    def common_lambda(self) -> bool:
        return all(L.lam is not None for L in self.layers if L.nonsmooth)

    @property
    def fully_connected(self) -> bool:
        return all(L.fully_connected for L in self.layers)

    def theorems(self) -> dict:
        """Structural premises of Park's theorems (the data-dependent ones are checked separately)."""
        clarke_proxies = all(proxy_in_clarke(L.activation) for L in self.layers)
        return {
            "theorem1": self.condition1 and self.distinct_bias and self.batch == 1 and clarke_proxies,
            "theorem4": self.condition1 and self.distinct_bias and self.common_lambda,
            "theorem5_structure": self.condition1 and self.fully_connected and clarke_proxies,
            "theorem6": self.shared_bias and self.trivial_pools and self.common_lambda,
            "theorem8_structure": all(proxy_is_bouligand(L.activation) for L in self.layers),
        }

    def to_json(self) -> dict:
        return {
            "layers": [
                dict(
                    name=L.name,
                    activation=L.activation,
                    bias=L.bias,
                    pool=L.pool,
                    fully_connected=L.fully_connected,
                    lam=None if L.lam is None else str(L.lam),
                )
                for L in self.layers
            ],
            "batch": self.batch,
            "theorems": self.theorems(),
            "notes": self.notes,
        }


def detect(model, batch: int | None = None) -> ModelConditions:
    """Condition 1/2 structure of a NetSpec or of an nn.Module (traced with torch.fx)."""
    if isinstance(model, NetSpec):
        return _detect_spec(model)
    if isinstance(model, torch.nn.Module):
        return _detect_module(model, batch)
    raise NsverifyError(f"detect() takes a torch.nn.Module or a NetSpec, not {type(model).__name__}")


def _detect_spec(spec: NetSpec) -> ModelConditions:
    layers = []
    for i, L in enumerate(spec.layers):
        bias = L.bias_mode
        pool = "none" if L.pool is None else ("trivial" if L.pool.trivial else "nontrivial")
        fc = L.kind == "linear" and not (L.residual or L.tied or L.frozen)  # Thm 5: tau = A z (+ b), A free
        layers.append(LayerInfo(f"layer{i}", L.act, bias, pool, fc, common_lambda(L.act)))
    return ModelConditions(layers, spec.batch)


def _detect_module(model: torch.nn.Module, batch) -> ModelConditions:
    """Conditions 1 and 2 of a traced module, layer by layer as the walk groups its nodes
    (:func:`nsverify.oracle.park.walk.layer_groups`, the monitor's grouping too)."""
    layers: list[LayerInfo] = []
    cur = {"bias": "none", "fc": True}
    for g in layer_groups(walk(model, hint=", or check a NetSpec instead")):
        for node in g.affine:
            m = node.module
            if node.what in ("Linear", "Conv1d", "Conv2d"):
                kind = ("distinct" if node.what == "Linear" else "shared") if m.bias is not None else "none"
                cur = {"bias": kind, "fc": node.what == "Linear"}
            else:  # BatchNorm1d / BatchNorm2d
                if m.affine:
                    cur["bias"] = "distinct" if (node.what == "BatchNorm1d" and cur["fc"]) else "shared"
                cur["fc"] = False  # Theorem 5 needs plain fully connected layers
        pool = "none" if g.pool is None else _pool_kind(g.pool.module)
        if g.act is not None:
            act = g.act.activation
            layers.append(LayerInfo(g.name, act, cur["bias"], pool, cur["fc"], common_lambda(act)))
        else:  # a pool without an activation of its own: identity activation
            layers.append(LayerInfo(g.name, "identity", cur["bias"], pool, cur["fc"], Fraction(1)))
    return ModelConditions(layers, batch)


def _pool_kind(m) -> str:
    """"trivial" for a module max pool with kernel 1, stride 1 and no padding (an identity map); functional
    max pools count as non-trivial."""
    if m is None:
        return "nontrivial"
    k = _pair(m.kernel_size)
    s = _pair(m.stride if m.stride is not None else m.kernel_size)
    return "trivial" if all(v == 1 for v in k + s) and not any(_pair(m.padding)) else "nontrivial"


def _pair(v):
    return tuple(v) if isinstance(v, (tuple, list)) else (v,)
