"""One torch.fx walk over a model's layers, shared by Park's structure detection and the training monitor.

:func:`walk` traces an ``nn.Module`` with torch.fx and returns, in execution order, the nodes that matter to
Park, Chun and Lee's conditions (Sec. 2.2, Conditions 1 and 2): affine modules, activations (by registry
name; nsverify.ad's ``ReLUVariant`` / ``PiecewiseLinearVariant`` with their AD rule, e.g. ``relu[value=1]``), max
pools (``MaxPool2dVariant`` only with PyTorch's first-index rule), and nonsmooth functions that the checks do not
model. Smooth layers, residual additions
and shape operations are skipped. An unsupported module, or an activation module whose keyword arguments
move its kinks away from the registry's, raises :class:`~nsverify.errors.UnsupportedOpError` naming the layer
and the fix.

Consumers: :func:`nsverify.papers.park.conditions.detect` (accepts functional activations and pools) and
:class:`nsverify.papers.park.monitor.Monitor` (observes modules only: it rejects functional forms).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch.fx as fx
from torch import nn
from torch._ops import OpOverload, OpOverloadPacket

from nsverify.errors import UnsupportedOpError
from nsverify.oracle.park.layers import AFFINE, NORMS, POOLS, SMOOTH_MODULES


def activation_of(op: str, what) -> str | None:
    """The registry name of the activation that the fx node ``op`` (``call_module``, ``call_function`` or
    ``call_method``) with class / function (the callable or its name) / method name ``what`` computes, or None
    when it is not an elementwise op with kinks. The engine's one activation map: the registry's lookups
    (:func:`nsverify.registry.by_module`, :func:`nsverify.registry.by_functional`, and for a ``torch.ops``
    operator its ATen name, :func:`nsverify.registry.elementwise_by_aten`), so an op registered there is found
    here. The functions and methods the walk models as general nonsmooth functions
    (:data:`NONSMOOTH_FUNCTIONS`, :data:`NONSMOOTH_METHODS`: abs, clamp, ...) are not activations."""
    from nsverify import registry

    name = what if isinstance(what, str) else getattr(what, "__name__", "")
    if name in (NONSMOOTH_METHODS if op == "call_method" else NONSMOOTH_FUNCTIONS if op == "call_function" else ()):
        return None
    if op == "call_module":
        entry = registry.by_module(what)
    elif op == "call_method":
        entry = registry.by_functional("T." + what)
    elif op == "call_function" and isinstance(what, (OpOverload, OpOverloadPacket)):  # torch.ops.*: ATen name
        entry = registry.elementwise_by_aten(what._qualified_op_name.split("::")[-1] if isinstance(
            what, OpOverloadPacket) else what._opname)
    elif op == "call_function":
        entry = (registry.by_functional(what) if callable(what) else
                 registry.by_functional("F." + what) or registry.by_functional("torch." + what))
    else:
        entry = None
    return entry.name if entry is not None and entry.breakpoints else None


def activation_modules() -> set:
    """The ``nn`` module class names of :func:`activation_of` (the registry's elementwise entries with kinks) that
    Park's layer model covers (fixed activations: not PReLU, see :func:`learnable_reason`)."""
    from nsverify import registry

    return {c for n in registry.names("elementwise") for c in registry.get(n).modules
            if registry.get(n).breakpoints and registry.get(n).fixed}


def learnable_reason(activation: str | None) -> str | None:
    """Why Park's layer model declines the registry activation ``activation`` (an entry with a learnable tensor
    argument, :attr:`nsverify.registry.Elementwise.learnable`: PReLU's slope), or None for a fixed activation (and
    for None). The one text that the fx walk, the layered decisions and the autograd-graph reading give."""
    from nsverify import registry

    if activation is None or activation not in registry.names() or registry.get(activation).fixed:
        return None
    e = registry.get(activation)
    return (f"{activation} has a learnable {e.learnable} (its slope is a parameter of the activation): Park, Chun "
            "and Lee's network model has fixed activations z_l = sigma_l(y_l) (Sec. 2.2, eq. (1)), so Theorem 8 "
            "and Conditions 1 and 2 are not known to cover it; the exact oracle's plain enumeration decides it "
            "(nsverify.check_gradient / check_module)")


def module_activation(name: str, m: nn.Module) -> str:
    """The registry name of the activation module ``m`` at path ``name`` computes with its own arguments
    (:func:`nsverify.registry.module_instance`: ``nn.Hardtanh(0., 6.)`` is relu6, ``nn.LeakyReLU(0.2)`` is
    leaky_relu with slope 0.2, whose kink is the registry's). Raises UnsupportedOpError when the arguments move
    the kinks away from the registered entry's (the checks read kinks from the registry by name)."""
    from nsverify import registry

    inst = registry.module_instance(m)
    entry = registry.get(inst.name) if inst.name in registry.names() else None
    if entry is None or inst.breakpoints != entry.breakpoints:
        cls = type(m).__name__
        args = ", ".join(f"{k}={v}" for k, v in vars(m).items() if not k.startswith("_") and k != "training"
                         and isinstance(v, (int, float)) and not isinstance(v, bool))
        known = registry.by_module(m)
        raise UnsupportedOpError(
            f"{name}: {cls}({args}) has its kinks at {[str(b) for b in inst.breakpoints]}, not where the registry's "
            f"{known.name} has them ({[str(b) for b in known.breakpoints]}); nsverify reads kinks from the "
            f"registry. Use the default arguments, or add a registry entry for it.")
    return inst.name


#: the class names of the layer model's module tables (:mod:`.layers`, the one place): affine maps (BatchNorm
#: included), max pools, and the smooth parameter-free modules (linear and analytic) that the walk skips
_AFFINE_NAMES = {c.__name__ for c in AFFINE + NORMS}
_POOL_NAMES = {c.__name__ for c in POOLS}
_SMOOTH_NAMES = {c.__name__ for c in SMOOTH_MODULES}
POOL_FUNCTIONS = {"max_pool1d", "max_pool2d", "max_pool1d_with_indices", "max_pool2d_with_indices"}
#: nonsmooth functions and methods outside the layer model of Conditions 1 and 2
NONSMOOTH_FUNCTIONS = {"abs", "maximum", "minimum", "amax", "max", "clamp", "clip", "sort", "topk"}
NONSMOOTH_METHODS = {"max", "amax", "abs", "clamp", "sort", "topk"}


@dataclass(frozen=True)
class LayerNode:
    """One layer-level node of a traced model."""

    kind: str  # "affine" | "activation" | "pool" | "nonsmooth"
    name: str  # module path for modules, fx node name for functions and methods
    what: str  # module class, function or method name
    op: str  # "call_module" | "call_function" | "call_method"
    module: nn.Module | None = None
    activation: str | None = None  # registry name (kind == "activation")
    reads_input: bool = False  # the node's first argument is a model input

    @property
    def functional(self) -> bool:
        """True for a function or tensor method (no module to hook)."""
        return self.module is None

    @property
    def spelled(self) -> str:
        """How the node reads in the model's forward (for error messages)."""
        if self.op == "call_method":
            return f"tensor method .{self.what}()"
        return f"functional {self.what}" if self.op == "call_function" else f"{self.what} module"


def unsupported(where: str, what: str) -> str:
    """The error text for a layer outside the checks' model, with the supported layers and the fix."""
    return (
        f"layer {where!r} ({what}) is not supported by nsverify's Park-condition checks. Supported: "
        f"{', '.join(sorted(_AFFINE_NAMES | _POOL_NAMES | activation_modules() | _SMOOTH_NAMES))}, "
        f"residual additions and flatten. Replace it by supported layers, or check that part separately "
        f"with nsverify.check_gradient."
    )


#: nsverify.ad's module forms (AD variants): traced as leaves, read as the activation / max pool they implement
VARIANT_MODULES = {"ReLUVariant", "PiecewiseLinearVariant", "MaxPool2dVariant"}


def _variant_activation(name: str, m: nn.Module) -> str:
    """The :class:`~nsverify.strategies.netspec.Activation` key of an nsverify.ad activation module: its own rule,
    or the rule in force now (:func:`nsverify.ad.active_rules`) when it reads the rule at backward time."""
    from nsverify import ad, registry

    # PiecewiseLinearVariant names its registry op; ReLUVariant is nn.ReLU with its own rule: nn.ReLU's entry
    op = getattr(m, "name", None) or registry.by_module(nn.ReLU).name
    rule = m.rule if m.rule is not None else ad.active_rules()[op]
    rules = rule if isinstance(rule, (tuple, list)) else (rule,)
    return f"{op}[{','.join(str(r) for r in rules)}]"


def _check_variant_pool(name: str, m: nn.Module) -> None:
    from nsverify import ad

    rule = m.rule if m.rule is not None else ad.active_rules()["max_pool2d"]
    if getattr(rule, "name", None) != "first":
        raise UnsupportedOpError(
            f"{name}: MaxPool2dVariant with tie rule {rule}; Park's conditions model PyTorch's max pool (the first "
            f"maximal index). Use rule='first' (or leave it None with max_pool2d='first' in force)."
        )


class _Tracer(fx.Tracer):
    """A torch.fx tracer that keeps nsverify.ad's variant modules as leaves (call_module nodes)."""

    def is_leaf_module(self, m, qualname):
        return type(m).__name__ in VARIANT_MODULES or super().is_leaf_module(m, qualname)


def _decline_learnable(where: str, activation: str) -> None:
    why = learnable_reason(activation)
    if why is not None:
        raise UnsupportedOpError(f"layer {where!r}: {why}.")


def trace(model: nn.Module, hint: str = "") -> fx.GraphModule:
    """The engine's one torch.fx trace of ``model`` (nsverify.ad's variant modules kept as leaves), read by
    :func:`walk`, :func:`chain` and :func:`nsverify.oracle.park.graph.graph_layers`.  Raises
    :class:`UnsupportedOpError` naming the fx error when the forward does not trace; ``hint`` completes the
    message (e.g. ", or check a NetSpec instead")."""
    try:
        return fx.GraphModule(model, _Tracer().trace(model))
    except Exception as exc:  # noqa: BLE001 -- fx raises many types
        raise UnsupportedOpError(
            f"cannot trace {type(model).__name__} with torch.fx ({type(exc).__name__}: {exc}). Remove "
            f"data-dependent Python control flow from forward(){hint}."
        ) from exc


def walk(model: nn.Module, hint: str = "") -> list[LayerNode]:
    """The layer-level nodes of ``model`` in execution order (see the module docstring).

    ``hint`` completes the error message when torch.fx cannot trace the model (e.g. ", or check a NetSpec
    instead")."""
    gm = trace(model, hint)
    mods = dict(gm.named_modules())
    inputs = {n.name for n in gm.graph.nodes if n.op == "placeholder"}
    out: list[LayerNode] = []
    for node in gm.graph.nodes:
        reads_input = bool(node.args) and getattr(node.args[0], "name", None) in inputs
        if node.op == "call_module":
            m = mods[node.target]
            cls = type(m).__name__
            if cls in _AFFINE_NAMES:
                kind, act = "affine", None
            elif cls in ("ReLUVariant", "PiecewiseLinearVariant"):
                kind, act = "activation", _variant_activation(node.target, m)
            elif cls == "MaxPool2dVariant":
                _check_variant_pool(node.target, m)
                kind, act = "pool", None
            elif activation_of(node.op, cls):
                _decline_learnable(node.target, activation_of(node.op, cls))
                kind, act = "activation", module_activation(node.target, m)
            elif cls in _POOL_NAMES:
                kind, act = "pool", None
            elif cls in _SMOOTH_NAMES or isinstance(m, nn.Sequential):
                continue
            else:
                raise UnsupportedOpError(unsupported(node.target, cls))
            out.append(LayerNode(kind, node.target, cls, node.op, m, act, reads_input))
        elif node.op == "call_function":
            fname = getattr(node.target, "__name__", str(node.target))
            if activation_of(node.op, node.target):
                _decline_learnable(node.name, activation_of(node.op, node.target))
                out.append(LayerNode("activation", node.name, fname, node.op, None,
                                     activation_of(node.op, node.target)))
            elif fname in POOL_FUNCTIONS:
                out.append(LayerNode("pool", node.name, fname, node.op))
            elif fname in NONSMOOTH_FUNCTIONS:
                out.append(LayerNode("nonsmooth", node.name, fname, node.op))
        elif node.op == "call_method":
            if activation_of(node.op, node.target):
                _decline_learnable(node.name, activation_of(node.op, node.target))
                out.append(LayerNode("activation", node.name, node.target, node.op, None,
                                activation_of(node.op, node.target)))
            elif node.target in NONSMOOTH_METHODS:
                out.append(LayerNode("nonsmooth", node.name, node.target, node.op))
    return out


@dataclass
class LayerGroup:
    """One of Park et al.'s layers as the walk's nodes group into it (Sec. 2.2, eq. (1)): the affine nodes since
    the previous layer (its map tau_l), then an activation, a max pool, or both; a max pool without an activation
    of its own is a layer with the identity activation."""

    affine: list
    act: LayerNode | None = None
    pool: LayerNode | None = None

    @property
    def name(self) -> str:
        return self.act.name if self.act is not None else self.pool.name


def layer_groups(nodes: list[LayerNode]) -> list[LayerGroup]:
    """The walk's nodes grouped into Park et al.'s layers, in order: the one grouping of the structure checks
    (:func:`nsverify.papers.park.conditions.detect`) and the monitor.  A max pool joins the layer before it when
    that layer has no pool yet and no affine node came between; otherwise it opens a layer with the identity
    activation.  Affine nodes after the last activation or pool (the head) belong to no layer.  A nonsmooth
    function outside Conditions 1 and 2 raises :class:`UnsupportedOpError` naming it."""
    groups: list[LayerGroup] = []
    pending: list = []
    for n in nodes:
        if n.kind == "affine":
            pending.append(n)
        elif n.kind == "activation":
            groups.append(LayerGroup(pending, act=n))
            pending = []
        elif n.kind == "pool":
            if groups and groups[-1].pool is None and not pending:
                groups[-1].pool = n
            else:
                groups.append(LayerGroup(pending, pool=n))
                pending = []
        else:
            raise UnsupportedOpError(unsupported(n.name, n.what))
    return groups


def chain(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """The modules of ``model`` as one chain, in execution order: ``(module path, module)`` for a forward that
    (traced with torch.fx) calls modules only, each on the previous one's output and once.  The exact layered
    decision (:mod:`.exact`) reads Park et al.'s layers from it.  Raises :class:`UnsupportedOpError` for a
    function or method call, a branch, a module called twice, or a forward that does not trace."""
    gm = trace(model)
    mods = dict(gm.named_modules())
    out: list = []
    prev, seen = None, set()
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            if prev is not None:
                raise UnsupportedOpError("the model's forward takes more than one input")
            prev = node
        elif node.op == "call_module":
            if node.args != (prev,) or node.kwargs or node.target in seen:
                raise UnsupportedOpError(f"module {node.target} is not called once on the previous layer's output")
            seen.add(node.target)
            out.append((node.target, mods[node.target]))
            prev = node
        elif node.op == "output":
            if node.args != (prev,):
                raise UnsupportedOpError("the model's output is not its last module's output")
        else:
            raise UnsupportedOpError(f"{node.op} {getattr(node.target, '__name__', node.target)} between the "
                                     "model's modules")
    return out
