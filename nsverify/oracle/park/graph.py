"""Park et al.'s layers read from a model's modules, the exact decision's one module reading
(:func:`module_layers`): a ``Sequential``'s chain (:func:`chain_layers`: each affine module opens a layer, which
may end with an activation and a max pool) and any other ``forward`` from its traced graph (:func:`graph_layers`:
residual additions and BatchNorm in eval mode; Park, Chun and Lee, Sec. 2.2, Condition 2).

Condition 2 lets a layer's map be any analytic function of *all* earlier activations and the layer's own
parameters, ``y_l = f_l(z_{0:l-1}, u_l)`` (plus shared biases), followed by a pointwise activation and a max
pool: the paper notes that it "covers modern convolutional neural networks which often use normalization
layers, maxpools, and residual connections".  Theorem 8 then holds as stated, and Algorithm 1 needs, for each
kink touch and tied max-pool entry, the gradient of that pre-activation entry in the layer's own parameters
``w_l`` with every earlier activation held fixed.

:func:`graph_layers` reads that structure from a torch.fx trace of the model's own ``forward`` (a custom
``nn.Module``, not only ``nn.Sequential``).  A layer's pre-activation must be a sum of *branches*:

* an affine module (``Linear``, ``Conv1d``, ``Conv2d``) applied to an earlier activation (or the input, or a
  parameter-free linear module of one, :data:`.layers.LINEAR_MODULES`: flatten, unflatten, average pools,
  identity, dropout in eval mode), followed by
  zero or more ``BatchNorm1d/2d`` modules in eval mode (per-channel affine maps: ``gamma (a - mean) / sqrt(var +
  eps) + beta``);
* or an earlier activation itself (an identity shortcut, constant in ``w_l``).

The layers are :class:`.layers.Layer` records, filled by :class:`.layers.Capture` and turned into rows by
:func:`.layers.pi_rows`: the gradient of an entry of y_l in w_l is, branch by branch, the affine module's input
patch scaled by the product of the BatchNorm factors ``gamma / sqrt(var + eps)`` of its channel, plus the
BatchNorm's own entries (``(a - mean) / sqrt(var + eps)`` for gamma, 1 for beta, each scaled by the factors of
later BatchNorms).  The rows are exact: a BatchNorm whose ``var + eps`` is not the square of a rational makes the
row irrational and the layer is declined.  The layer's activation is a module of a ``park_layer`` registry
entry (``nn.ReLU``, ``nn.LeakyReLU``, ``nn.ReLU6``, ...; called once or several times, as torchvision's BasicBlock
calls its one ReLU), optionally followed by a max-pool module on its output.  A head after the last activation
(average pool, flatten, Linear) is a layer without activation: it adds no row.  Anything else declines, and the
plain enumeration decides.
"""

from __future__ import annotations

import operator

import torch
import torch.fx as fx

from nsverify.errors import UnsupportedOpError
from nsverify.oracle.park.layers import (
    AFFINE,
    LINEAR_MODULES,
    NORMS,
    POOLS,
    Branch,
    Declined,
    Layer,
    layer_activation,
    layer_modules,
)
from nsverify.oracle.park.walk import activation_of, chain, learnable_reason, trace

ADDS = (operator.add, operator.iadd, torch.add)
FLATTENS = (torch.flatten,)


def module_layers(model) -> tuple[list[Layer], dict, bool]:
    """Park et al.'s layers read from ``model``'s modules, the exact decision's one module reading:
    ``(layers, calls, sequential)`` -- a ``Sequential``'s chain (:func:`chain_layers`), any other ``forward`` from
    its traced graph (:func:`graph_layers`); ``calls``: node -> (module, its k-th call), as
    :class:`.layers.Capture` reads them.  Raises :class:`Declined`."""
    if isinstance(model, torch.nn.Sequential):
        return (*chain_layers(model), True)
    return (*graph_layers(model), False)


#: shape modules the chain reading skips
TRANSPARENT = (torch.nn.Flatten, torch.nn.Identity)


def chain_layers(model) -> tuple[list[Layer], dict]:
    """Park et al.'s layers of a Sequential model (its modules as one chain, :func:`.walk.chain`): each affine
    module opens a layer, which may end with an activation and then a max pool; and the chain's modules as
    :class:`.layers.Capture` reads them (``{module path: (module, 0)}``).  Raises :class:`Declined` for any other
    structure."""
    if not isinstance(model, torch.nn.Sequential):
        raise Declined("the model is not a torch.nn.Sequential")
    try:
        mods = chain(model)
    except UnsupportedOpError as e:
        raise Declined(f"the model is not a chain of modules: {e}") from None
    layers: list[Layer] = []
    calls: dict = {}
    for name, m in mods:
        if isinstance(m, TRANSPARENT):
            continue
        if isinstance(m, torch.nn.Dropout) and (not m.training or m.p == 0):
            continue
        if isinstance(m, AFFINE):
            if isinstance(m, (torch.nn.Conv1d, torch.nn.Conv2d)) and (
                    m.groups != 1 or m.padding_mode != "zeros" or isinstance(m.padding, str)):
                raise Declined(f"layer {name}: grouped, string-padded or non-zero-padded convolutions")
            layers.append(Layer(name, branches=[Branch(name)], modules={name: m}))
        elif (inst := layer_activation(name, m)) is not None:
            if not layers or layers[-1].act is not None or layers[-1].pool is not None:
                layers.append(Layer(name))
            layers[-1].act, layers[-1].act_entry, layers[-1].act_node = m, inst, name
        elif isinstance(m, POOLS):
            if m.return_indices:
                raise Declined(f"layer {name}: a max pool that returns its indices")
            if not layers or layers[-1].pool is not None:
                layers.append(Layer(name))
            layers[-1].pool, layers[-1].pool_node = m, name
        elif learnable_reason(activation_of("call_module", type(m).__name__)):
            raise Declined(f"module {name}: {learnable_reason(activation_of('call_module', type(m).__name__))}")
        else:
            raise Declined(f"module {name} ({type(m).__name__}) is outside the layered shortcut's layer model "
                           f"(Linear/Conv1d/Conv2d, the activations of Park's layer theorems: {layer_modules()}, "
                           "MaxPool1d/2d, Flatten)")
        calls[name] = (m, 0)
    if not layers:
        raise Declined("the model has no layer")
    return layers, calls


# ------------------------------------------------------------------------------------------------ local slopes
def graph_layers(model) -> tuple[list[Layer], dict]:
    """Park's layers of ``model`` (see the module docstring) and the traced graph's call-module nodes in order:
    ``(layers, {node name: (module, occurrence of that module)})``.  Raises :class:`Declined`."""
    try:
        gm = trace(model)
    except UnsupportedOpError as exc:
        raise Declined(f"the model's forward cannot be traced with torch.fx ({type(exc.__cause__).__name__})") from None
    mods = dict(gm.named_modules())
    calls: dict = {}  # node name -> (module, k-th call of that module)
    count: dict = {}
    kind: dict = {}  # node -> ("z", layer index) | ("branch", Branch) | ("sum", [Branch...]) | ("input",)
    layers: list[Layer] = []
    used_affine: set = set()
    inputs = 0

    def z_like(n) -> bool:
        return isinstance(n, fx.Node) and kind.get(n.name, ("?",))[0] in ("z", "input")

    def as_sum(n) -> list | None:
        k = kind.get(n.name) if isinstance(n, fx.Node) else None
        if k is None:
            return None
        if k[0] == "branch":
            return [k[1]]
        if k[0] == "sum":
            return list(k[1])
        if k[0] in ("z", "input"):
            return []  # an identity shortcut: constant in the layer's parameters
        return None

    for node in gm.graph.nodes:
        if node.op == "placeholder":
            inputs += 1
            if inputs > 1:
                raise Declined("the model's forward takes more than one input")
            kind[node.name] = ("input",)
            continue
        if node.op == "output":
            continue
        if node.op == "get_attr":
            raise Declined(f"the forward reads the attribute {node.target} directly (a parameter outside a module)")
        args = [a for a in node.args if isinstance(a, fx.Node)]
        if node.op == "call_module":
            m = mods[node.target]
            count[id(m)] = count.get(id(m), -1) + 1
            calls[node.name] = (m, count[id(m)])
            x = node.args[0] if node.args else None
            if len(args) != 1 or node.kwargs:
                raise Declined(f"module {node.target} takes other than one tensor argument")
            if isinstance(m, AFFINE):
                if isinstance(m, (torch.nn.Conv1d, torch.nn.Conv2d)) and (
                        m.groups != 1 or m.padding_mode != "zeros" or isinstance(m.padding, str)):
                    raise Declined(f"layer {node.target}: grouped, string-padded or non-zero-padded convolutions")
                if not z_like(x):
                    raise Declined(f"affine module {node.target} is applied to a value that depends on the same "
                                   "layer's parameters (two affine maps in one layer)")
                if id(m) in used_affine:
                    raise Declined(f"module {node.target} is called twice (shared parameters)")
                used_affine.add(id(m))
                kind[node.name] = ("branch", Branch(node.name))
            elif isinstance(m, NORMS):
                k = kind.get(x.name)
                if m.training or not m.track_running_stats or k is None or k[0] != "branch":
                    raise Declined(f"BatchNorm {node.target}: only in eval mode, right after an affine module")
                kind[node.name] = ("branch", Branch(k[1].affine, k[1].norms + [node.name]))
            elif (inst := layer_activation(node.target, m)) is not None:
                s = as_sum(x)
                if s is None:
                    raise Declined(f"activation {node.target} is applied to an unsupported value")
                L = Layer(node.name, branches=s, act=m, act_node=node.name, act_entry=inst)
                layers.append(L)
                kind[node.name] = ("z", len(layers) - 1, "act")
            elif isinstance(m, POOLS):
                k = kind.get(x.name)
                if k is None or k[0] != "z" or len(k) < 3 or k[2] != "act" or layers[k[1]].pool is not None \
                        or len(x.users) != 1:
                    raise Declined(f"max pool {node.target}: only right after an activation that nothing else uses")
                if m.return_indices or m.ceil_mode:
                    raise Declined(f"max pool {node.target}: return_indices or ceil_mode")
                layers[k[1]].pool, layers[k[1]].pool_node = m, node.name
                kind[node.name] = ("z", k[1], "pool")
            elif isinstance(m, LINEAR_MODULES):
                if isinstance(m, torch.nn.Dropout) and m.training and m.p > 0:
                    raise Declined(f"dropout {node.target} in training mode")
                if isinstance(m, (torch.nn.Identity, torch.nn.Dropout)) and x.name in kind:
                    kind[node.name] = kind[x.name]  # the identity: whatever its input is
                    continue
                if not z_like(x):
                    raise Declined(f"module {node.target} between an affine map and its activation")
                kind[node.name] = ("z", -1, "smooth")
            elif learnable_reason(activation_of("call_module", type(m).__name__)):
                raise Declined(f"module {node.target}: "
                               f"{learnable_reason(activation_of('call_module', type(m).__name__))}")
            else:
                raise Declined(f"module {node.target} ({type(m).__name__}) is outside the graph layer model "
                               f"(Linear/Conv, BatchNorm in eval mode, the activations of Park's layer theorems: "
                               f"{layer_modules()}, MaxPool, residual adds, flatten and average pools)")
        elif node.op in ("call_function", "call_method"):
            fn = node.target
            if (fn in ADDS or fn == "add" or fn == "add_") and len(args) == 2 and len(node.args) == 2 \
                    and not node.kwargs:
                a, b = as_sum(node.args[0]), as_sum(node.args[1])
                if a is None or b is None:
                    raise Declined(f"an addition ({node.name}) of unsupported values")
                kind[node.name] = ("sum", a + b)
            elif (fn in FLATTENS or fn in ("flatten", "view", "reshape")) and z_like(node.args[0]):
                kind[node.name] = ("z", -1, "smooth")
            elif fn == "size" and z_like(node.args[0]):
                kind[node.name] = ("meta",)  # a shape, not a tensor
            else:
                name = getattr(fn, "__name__", fn)
                raise Declined(f"{node.op} {name} is outside the graph layer model (give the model activation "
                               "modules such as nn.ReLU, nn.MaxPool modules and residual adds)")
    out = [n for n in gm.graph.nodes if n.op == "output"][0]
    res = out.args[0]
    tail = as_sum(res) if isinstance(res, fx.Node) else None
    if tail is None:
        raise Declined("the model's output is not a sum of affine branches or an activation")
    if tail:
        layers.append(Layer("output", branches=tail))  # the head: no activation, no row
    seen_affine = [b.affine for L in layers for b in L.branches]
    if len(seen_affine) != len(set(seen_affine)):
        raise Declined("a branch feeds two layers (its parameters would belong to both)")
    if len(seen_affine) != len(used_affine):
        raise Declined("an affine module's output is used outside a layer's pre-activation")
    for L in layers:
        for b in L.branches:
            for nm in [b.affine] + b.norms:
                L.modules[nm] = calls[nm][0]
    return layers, calls
