"""Park et al.'s Theorem 8 read from the model's own autograd graph: any architecture whose only nonsmooth ops at
the point are calls of the activations Park's layer theorems cover (the registry's ``park_layer`` entries: ReLU,
LeakyReLU, ReLU6, HardTanh, ...) -- transformers (LayerNorm, attention, GELU), residual blocks with BatchNorm,
custom ``forward`` methods that torch.fx cannot trace.

Park, Chun and Lee's network model (Sec. 2.2, eq. (1)) is ``y_l = tau_l(z_{0:l-1}, w_l)``, ``z_l = sigma_l(y_l)``,
``Psi = l(z_L)`` with analytic ``tau_l`` and ``l``; Condition 1 notes that ``tau_l`` "can represent attention
layers, normalization layers (one-dimensional BatchNorm, LayerNorm) and their compositions" and residual
connections.  Theorem 8 then certifies AD (with Bouligand proxies at the kinks) when every layer's cone
``P_l`` of Algorithm 1 is non-empty.

This module reads that structure from the exact reverse-mode trace itself (PyTorch's autograd running on exact
numbers, :meth:`nsverify.oracle.interp.Evaluation.reverse`):

* **Layers.** Each call of a ``park_layer`` activation (found by the entry's functional forms, its node checked
  against the entry's ``autograd_nodes``, its kinks those of the instance the call's arguments describe) with at
  least one entry exactly at a kink is a layer's activation ``sigma_l``; its input tensor is ``y_l``.  Every other
  op is part of some ``tau_l`` (or of the loss).  An activation call with no entry at a kink is a fixed analytic
  piece near the point (each entry keeps its strict sign), so
  it is absorbed into ``tau_l``: the Clarke and Bouligand subdifferentials are local, and AD's output is the same
  (ours; proof sketch in docs/conditions.md, "Layers read from the autograd graph").
* **Analytic ops.** Every node of the autograd graph between the parameters and the loss must be in
  :data:`ANALYTIC_NODES` (ops analytic wherever the exact trace can evaluate them: an exact division by zero or
  square root of zero stops that trace), a ``pow`` by a non-negative integer or of a positive base, or one of the
  layer activations.  Any other node (max pools, abs, clamp, custom ``autograd.Function``) declines.
* **No hidden branch.** A comparison, ``argmax``, ``.item()``, ``detach`` or ``torch.no_grad()`` applied to a
  value that depends on the parameters is invisible to the autograd graph yet makes the program piecewise (or
  changes what AD computes): a :class:`torch.overrides.TorchFunctionMode` watches every call of the model and the
  loss and declines on any such call.
* **Own parameters.** ``w_l`` is the set of parameter tensors that reach ``y_l`` -- and no other layer's
  pre-activation -- through the graph without passing through another layer's activation.  Parameters that reach
  two layers' pre-activations that way (a residual stream that bypasses an activation, tied weights) are held
  fixed: they are constants of the restricted network, which is in Park's model with disjoint ``w_l`` (ours;
  proof sketch in docs/conditions.md).  The gradient of ``y_{l,i}`` in ``w_l`` with earlier activations held
  fixed is then the total gradient's ``w_l`` part, computed by one exact backward pass per kink entry.
* **The cone.** Row ``i`` of ``P_l`` is AD's side at its kink (``-1`` for the left derivative, ReLU's at 0;
  ``+1`` for the right one, ReLU6's at 6) times that gradient.  Entries that are irrational (interval enclosures,
  e.g. a weight's coefficient behind a LayerNorm)
  are dropped together with their coordinate: a direction supported on the remaining coordinates (where every
  row is an exact rational -- biases always are) that lies strictly inside every restricted row lies strictly
  inside every full row.  The restricted rows and the exact direction are the certificate (``park_theorem8``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np
import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_leaves

from nsverify import registry
from nsverify.oracle.cones import ConeStats
from nsverify.oracle.context import Site, poll_deadline, polled
from nsverify.oracle.ops.table import ANALYTIC_NODES
from nsverify.oracle.park.cone import LayerCheck, p_nonempty
from nsverify.oracle.park.layers import Declined, Layered

F = Fraction

#: max-pool calls read by the watcher: decided exactly, window by window
POOL_CALLS = frozenset({"max_pool2d", "max_pool2d_with_indices"})
POOL_NODES = frozenset({"MaxPool2DWithIndicesBackward0"})
#: calls that read metadata (never a value) of a parameter-dependent tensor
METADATA_CALLS = frozenset({"size", "dim", "ndimension", "numel", "nelement", "stride", "__get__", "__len__",
                            "is_contiguous", "element_size", "is_floating_point", "is_complex", "get_device",
                            "storage_offset", "type", "__format__", "__repr__"})
#: calls whose (tensor) output is a constant however the parameters move
CONSTANT_CALLS = frozenset({"zeros_like", "ones_like", "empty_like", "full_like", "rand_like", "randn_like",
                            "randint_like", "new_zeros", "new_ones", "new_empty", "new_full", "new_tensor"})
#: at most this many exact backward passes (one per kink entry) before declining
MAX_KINK_ENTRIES = 512


@dataclass
class _Act:
    """One activation call seen by the watcher."""

    name: str  # the registry entry (a park_layer activation)
    inst: object  # the registry instance the call's arguments describe (its kinks and AD's rules)
    where: str  # the module that called it, and the call's number among activation calls
    pre: torch.Tensor | None  # a clone of the input (kink calls only): its grad_fn leads to y_l's ops
    kinks: list = field(default_factory=list)  # flat indices of entries exactly at a kink
    signs: list = field(default_factory=list)  # AD's side at each of those kinks: -1 left piece, +1 right piece
    points: list = field(default_factory=list)  # the breakpoint each of those entries sits on
    values: list = field(default_factory=list)  # the input's exact entries, flat (AD's derivative at a tie)
    node: object = None  # the output's autograd node
    out: torch.Tensor | None = None  # the output tensor (a max pool of it is part of this layer's activation)


def _instance(entry, args: tuple, kwargs: dict):
    """The instance ``entry.from_args`` builds from a call's scalar arguments (ATen's order) and keywords, which
    must be ``from_args``'s own: a keyword it does not know (``clamp(min=...)``) would silently fall back to a
    default and move the kinks."""
    import inspect

    known = set(inspect.signature(entry.from_args).parameters)
    if set(kwargs) - known:
        raise ValueError(f"{entry.name} called with {sorted(set(kwargs) - known)}: not the arguments "
                         f"({', '.join(sorted(known))}) its registry entry is built from")
    try:
        return entry.instance(args, kwargs)
    except Exception as e:  # noqa: BLE001 -- tensor bounds and the like: not an instance of the entry
        raise ValueError(f"the arguments of a {entry.name} call do not describe an instance of the registry's "
                         f"entry ({type(e).__name__}: {e})") from None


def _call_instance(entry, func, args, kwargs) -> tuple:
    """``(instance, in-place)`` of an activation call: the registry instance its scalar arguments describe (built
    by the entry's ``from_args``; an entry without it must be called with its own ``kwargs``) and whether it writes
    into its input (a trailing ``_`` or ``inplace=True``).  Raises ValueError for arguments it cannot read."""
    import inspect

    name = getattr(func, "__name__", "")
    try:
        named = dict(list(inspect.signature(func).bind(*args, **kwargs).arguments.items())[1:])  # after the input
    except (TypeError, ValueError):  # a builtin (torch.relu, Tensor.relu_): scalar arguments in ATen's order
        named = dict(kwargs)
        if entry.from_args is not None:
            inplace = bool(named.pop("inplace", False)) or name.endswith("_")
            return _instance(entry, tuple(args[1:]), named), inplace
        if len(args) - 1 > len(entry.kwargs):
            raise ValueError(f"{name}: the arguments {args[1:]} are not {entry.name}'s") from None
        named.update(zip(entry.kwargs, args[1:]))
    inplace = bool(named.pop("inplace", False)) or name.endswith("_")
    if entry.from_args is not None:
        return _instance(entry, (), named), inplace
    moved = {k: v for k, v in named.items() if k not in entry.kwargs or v != entry.kwargs[k]}
    if moved:
        raise ValueError(f"{name} with {moved}: the registry's {entry.name} has {entry.kwargs}; other arguments "
                         "move its kinks")
    return entry, inplace


def _tensors(obj) -> list:
    """The tensors in a nest of call arguments or results (torch's own pytree, as :mod:`..prepass` reads them)."""
    return [t for t in tree_leaves(obj) if isinstance(t, torch.Tensor)]


class _Watch(TorchFunctionMode):
    """Watches every torch call of one run of ``fn`` (see the module docstring): records the activation calls and
    the first reason to decline."""

    def __init__(self, model):
        super().__init__()
        self.acts: list[_Act] = []
        self.splits: list = []  # (leaf, its chunks) for every split of a leaf tensor
        self.pools: dict = {}  # max-pool autograd node -> the _Act whose output it pools with ties at 0 (or None)
        self.declined: str | None = None
        self.where: list[str] = []
        self.handles = []
        self.entries: dict = {}  # callable -> its registry entry (or None): the registry's functional forms
        #: the autograd nodes the layer activations make (the registry's ``autograd_nodes``)
        self.layer_nodes = frozenset(nd for n in registry.names("elementwise") if registry.get(n).park_layer
                                     for nd in registry.get(n).autograd_nodes)
        for name, m in model.named_modules():
            self.handles.append(m.register_forward_pre_hook(self._push(name or type(model).__name__)))
            self.handles.append(m.register_forward_hook(self._pop))

    def _push(self, name):
        def pre(module, inputs):
            self.where.append(name)
        return pre

    def _pop(self, module, inputs, output):
        if self.where:
            self.where.pop()

    def close(self):
        for h in self.handles:
            h.remove()
        self.handles = []

    def __enter__(self):
        from nsverify.oracle.tensor import OBSERVERS

        OBSERVERS.append(self._aten)
        return super().__enter__()

    def __exit__(self, *exc):
        from nsverify.oracle.tensor import OBSERVERS

        if self._aten in OBSERVERS:
            OBSERVERS.remove(self._aten)
        return super().__exit__(*exc)

    def _aten(self, op, args, out):
        """Every exact ATen op, also those called as ``torch.ops.aten.*`` (which bypass torch functions): a value
        computed from the parameters must not become a boolean or integer tensor or a Python number."""
        if op in ("native_dropout", "max_pool2d_with_indices") or not any(t.requires_grad for t in _tensors(args)):
            # dropout's mask is drawn, not computed from the values; a max pool's indices are decided window by
            # window by :meth:`_pool` (a pool its torch function did not announce leaves an unread autograd node)
            return
        if op == "_local_scalar_dense":
            self.decline(f"aten.{op} turns a value that depends on the parameters into a Python number "
                         "(data-dependent control flow)")
        outs = out if isinstance(out, (list, tuple)) else [out]
        for o in outs:
            if isinstance(o, np.ndarray) and (o.dtype == bool or np.issubdtype(o.dtype, np.integer)):
                self.decline(f"aten.{op} computes a boolean or integer tensor from a value that depends on the "
                             "parameters (a comparison, argmax, indices or mask: a branch the autograd graph "
                             "does not show)")

    def decline(self, why: str):
        """Record the reason and stop the trace (the rest of the program need not run)."""
        if self.declined is None:
            self.declined = why
        raise Declined(why)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", str(func))
        dep = any(t.requires_grad for t in _tensors((args, kwargs)))
        if not dep or self.declined is not None:
            return func(*args, **kwargs)
        poll_deadline()
        entry = self._entry(func)
        if entry is not None and entry.park_layer:
            return self._activation(func, entry, name, args, kwargs)
        if entry is not None and not entry.fixed:
            from nsverify.oracle.park.walk import learnable_reason

            self.decline(f"`{name}`: {learnable_reason(entry.name)}")
        if name in POOL_CALLS:
            return self._pool(func, name, args, kwargs)
        out = func(*args, **kwargs)
        if name in CONSTANT_CALLS:
            return out
        if name in ("split", "split_with_sizes") and isinstance(args[0], torch.Tensor) and args[0].is_leaf:
            self.splits.append((args[0], list(out)))  # module_function's split of w into parameters
        elif name in ("reshape", "view") and self.splits:
            chunks = self.splits[-1][1]
            k = next((k for k, c in enumerate(chunks) if c is args[0]), None)
            if k is not None:  # the parameter itself: its own graph node, so a backward into it stays short
                chunks[k] = out
        outs = _tensors(out)
        if not outs and out is not None and name not in METADATA_CALLS:
            self.decline(f"`{name}` turns a value that depends on the parameters into a Python value "
                         "(data-dependent control flow)")
        for t in outs:
            node = t.grad_fn.name() if t.grad_fn is not None else None
            if node is not None and node not in ANALYTIC_NODES and node != "PowBackward0" and \
                    node not in self.layer_nodes:
                self.decline(f"`{name}` makes autograd node {node}, whose op is not known to be analytic (the "
                             "layers read from the autograd graph are calls of the activations of Park's layer "
                             "theorems between analytic ops)")
            if not t.is_floating_point():
                self.decline(f"`{name}` computes a boolean or integer tensor from a value that depends on the "
                             "parameters (a comparison, argmax or mask: a branch the autograd graph does not show)")
            elif not t.requires_grad:
                self.decline(f"`{name}` returns a value that depends on the parameters but is cut from autograd "
                             "(detach, torch.no_grad or .data): AD then differs from the function's derivative")
        return out

    def _entry(self, func):
        """The registry's elementwise entry of which ``func`` is a functional form (``torch.relu``, ``F.hardtanh``,
        ``torch.Tensor.relu_``; :func:`nsverify.registry.by_functional`), or None; remembered per watch."""
        try:
            return self.entries[func]
        except KeyError:
            got = self.entries[func] = registry.by_functional(func)
            return got
        except TypeError:  # an unhashable callable: no registry form
            return None

    def _activation(self, func, entry, name, args, kwargs):
        try:
            inst, inplace = _call_instance(entry, func, args, kwargs)
        except ValueError as e:
            self.decline(str(e))
        y = args[0]
        arr = getattr(y, "arr", None)
        if arr is None:
            self.decline(f"{name} was applied to a tensor without exact values")
            return func(*args, **kwargs)
        from nsverify.oracle.park.kinks import kink_sign, kink_touches

        values = arr.reshape(-1).tolist()
        try:
            touched = kink_touches(inst, values)
            signs = [kink_sign(inst, i) for _p, i in touched]
        except ValueError as e:
            self.decline(f"{name}: {e}")
        kinks = [p for p, _i in touched]
        where = f"{self.where[-1] if self.where else 'forward'}: {name} call {len(self.acts)}"
        act = _Act(entry.name, inst, where, y.clone() if kinks else None, kinks, signs,
                   [inst.breakpoints[i] for _p, i in touched], values)
        out = func(*args, **kwargs)
        act.out = y if inplace else out
        act.node = act.out.grad_fn
        if act.node is None or act.node.name() not in entry.autograd_nodes:
            self.decline(f"{where}: its autograd node is not one of {entry.name}'s ({', '.join(entry.autograd_nodes)})")
        self.acts.append(act)
        return out

    def _flat_at(self, act: _Act, positions: list) -> bool:
        """Is AD's derivative of the activation call ``act`` 0 at each of its flat input ``positions``?"""
        from nsverify.oracle.park.kinks import ad_derivative

        try:
            return all(ad_derivative(act.inst, act.values[p]) == 0 for p in positions)
        except ValueError as e:
            self.decline(f"{act.where}: {e}")

    def _pool(self, func, name, args, kwargs):
        """A 2-d max pool, its windows decided exactly.  Without a tie it is one linear selection near the point
        (absorbed like an activation away from its kinks).  A window tied on a flat piece of the activation it
        pools directly (ReLU's 0, ReLU6's 0 and 6: AD's derivative of the activation 0 at every tied entry) needs
        no constraint: Park et al.'s T_j (Algorithm 1, lines 10-17) -- the pool is then part of that layer's
        activation.  Any other tie declines."""
        import inspect

        import torch.nn.functional as tnf

        from nsverify.oracle.numbers import sign, val
        from nsverify.oracle.park.algorithm1 import pool_index_windows

        b = inspect.signature(tnf.max_pool2d_with_indices).bind(*args, **kwargs)
        b.apply_defaults()
        y, a = b.arguments["input"], b.arguments
        arr = getattr(y, "arr", None)
        if arr is None or arr.ndim not in (3, 4):
            self.decline(f"{name} on a tensor without exact values or of an unexpected shape")
        yb = arr if arr.ndim == 4 else arr[None]
        win = pool_index_windows(tuple(yb.shape[1:]), a["kernel_size"], a["stride"], a["padding"],
                                 a["dilation"], a["ceil_mode"]).tolist()
        src = next((act for act in reversed(self.acts) if act.out is y), None)
        per = int(np.prod(yb.shape[1:]))
        tied_zero = False
        for sb, sample in enumerate(yb.reshape(yb.shape[0], -1)):
            vals = sample.tolist()
            for w in win:
                poll_deadline()
                best, tied = None, []
                for i in w:
                    if i < 0:
                        continue
                    v = val(vals[i])
                    d = 1 if best is None else sign(v - best)
                    if d is None:
                        self.decline(f"{name}: whether two entries of a window tie is not decided by their "
                                     "enclosures")
                    if d > 0:
                        best, tied = v, [i]
                    elif d == 0:
                        tied.append(i)
                if len(tied) > 1:
                    if src is None or not self._flat_at(src, [sb * per + i for i in tied]):
                        self.decline(f"{name}: a window ties where AD's derivative of the activation it pools "
                                     "directly is not 0 at every tied entry (its constraints would need the "
                                     "entries' gradients)")
                    tied_zero = True
        out = func(*args, **kwargs)
        first = out[0] if isinstance(out, (tuple, list)) else out
        node = first.grad_fn
        if node is None or node.name() not in POOL_NODES:
            self.decline(f"{name}: its autograd node is not a 2-d max pool's")
        self.pools[node] = src if tied_zero else None
        return out


def _walk(start, stop: set, x_node, split_nodes: set) -> set:
    """The parameter slots (indices into module_function's split of w) reachable from ``start`` without
    entering a node of ``stop``."""
    slots, seen, stack = set(), set(), [start]
    while stack:
        n = stack.pop()
        if n is None or n in seen or n in stop:
            continue
        seen.add(n)
        for nxt, k in n.next_functions:
            if nxt is None:
                continue
            if nxt in split_nodes:
                slots.add(k)
                seen.add(nxt)
            elif nxt is x_node:
                raise Declined("the parameters reach the loss other than through module_function's split")
            else:
                stack.append(nxt)
    return slots


def _check_node(n, acts: dict, pools: dict) -> None:
    nm = n.name()
    if nm in ANALYTIC_NODES:
        return
    if nm == "PowBackward0":
        e = getattr(n, "_saved_exponent", None)
        if isinstance(e, (int, float)) and float(e).is_integer() and e >= 0:
            return
        base = getattr(n, "_saved_self", None)
        arr = getattr(base, "arr", None)
        if arr is not None:
            from nsverify.oracle.numbers import sign, val

            if all(sign(val(v)) == 1 for v in arr.reshape(-1).tolist()):
                return
        raise Declined("a power with a non-integer exponent of a base that is not positive everywhere")
    if n in acts:  # a watched layer activation call (its node is one of its entry's ``autograd_nodes``)
        return
    if nm in POOL_NODES and n in pools:
        return
    raise Declined(f"the op behind autograd node {nm} is not known to be analytic (the graph layer model "
                   "covers the activations of Park's layer theorems between analytic ops)")


def _nearest_slots(start, own: set, stop: set, split_nodes: set) -> list:
    """The parameter slots of ``own`` at the smallest graph distance from ``start`` (breadth first): the layer's
    last affine map's weight and bias, typically -- a short backward pass reaches them."""
    frontier, seen, depth = [start], set(), 0
    while frontier and depth < 10_000:
        found, nxt_frontier = set(), []
        for n in frontier:
            if n is None or n in seen or n in stop:
                continue
            seen.add(n)
            for nx, k in n.next_functions:
                if nx in split_nodes:
                    if k in own:
                        found.add(k)
                elif nx is not None:
                    nxt_frontier.append(nx)
        if found:
            return sorted(found)
        frontier, depth = nxt_frontier, depth + 1
    return sorted(own)


def _rows(a: _Act, slots: list, chunks: tuple, offsets: list, tracker) -> list | None:
    """Algorithm 1's rows of activation call ``a`` in the parameters ``slots`` (one exact backward pass per kink
    entry, into those parameters only, times AD's side at that kink), each restricted to the coordinates where
    every row is an exact rational; "zero" when a row is exactly zero there, None when a row is left with no
    rational coordinate."""
    from nsverify.oracle.tensor import ExactTensor

    shape = tuple(a.pre.shape)
    rows, irrational = [], set()
    for i, sgn in zip(a.kinks, a.signs):
        poll_deadline()
        if tracker is not None:
            tracker.update(stage=f"layers: exact row of {a.where}")
        one = np.zeros(a.pre.numel(), dtype=object)
        one[:] = F(0)
        one[i] = F(1)
        cot = ExactTensor(one.reshape(shape), dtype=a.pre.dtype)
        grads = torch.autograd.grad(a.pre, [chunks[s] for s in slots], grad_outputs=cot, retain_graph=True,
                                    allow_unused=True)
        row = {}
        for s, g in zip(slots, grads):
            if g is None:
                continue
            for j, v in enumerate(polled(g.arr.reshape(-1).tolist())):  # a full-width layer: millions
                if isinstance(v, Fraction):
                    if v != 0:
                        row[offsets[s] + j] = sgn * v
                else:
                    irrational.add(offsets[s] + j)
        rows.append(row)
    if any(not r for r in rows):
        return "zero"  # 0 > 0 fails: P_l is empty in these coordinates
    rows = [{c: v for c, v in r.items() if c not in irrational} for r in rows]
    return None if any(not r for r in rows) else rows


def theorem8(ev, model, offsets_of_slot: list, tracker=None) -> Layered:
    """Park et al.'s Theorem 8 on ``ev``'s program (``loss(model(inputs))`` w.r.t. the model's trainable
    parameters, flattened by :func:`nsverify.oracle.interp.module_function`); ``offsets_of_slot[k]``: the
    offset in w of the k-th trainable parameter.  Raises :class:`Declined`."""
    watch = _Watch(model)
    result: dict = {}

    from nsverify.oracle.context import TimeLimitExceeded

    def analyse(out, x):
        try:
            result["layers"] = _analyse(watch, out, x, offsets_of_slot, tracker)
        except Declined as e:
            result["declined"] = str(e)
        except TimeLimitExceeded:
            raise
        except Exception as e:  # noqa: BLE001 -- a shortcut that cannot read the graph declines; never decides
            result["declined"] = f"the graph could not be read ({type(e).__name__}: {e})"

    from nsverify.errors import InexactError, UnsupportedOpError

    try:
        exact_ad, value = ev.reverse(watch=(watch, analyse))
    except Declined:
        raise Declined(watch.declined or "the trace stopped") from None
    except (InexactError, UnsupportedOpError, ZeroDivisionError) as e:
        raise Declined(f"the exact reverse trace failed: {e}") from None
    except TimeLimitExceeded:
        raise
    except Exception as e:  # noqa: BLE001 -- the program's own error: the plain path runs it again and reports it
        raise Declined(f"the watched trace failed ({type(e).__name__}: {e})") from None
    finally:
        watch.close()
    if watch.declined is not None:
        raise Declined(watch.declined)
    if "declined" in result:
        raise Declined(result["declined"])
    if "layers" not in result:
        raise Declined("the program's output does not depend on the parameters through autograd")
    checks, sites, stats = result["layers"]
    return Layered("park_theorem8", checks, sites, tuple(exact_ad), value, stats, source="autograd graph")


def _analyse(watch: _Watch, out, x, offsets: list, tracker):
    if not isinstance(out, torch.Tensor) or out.grad_fn is None:
        raise Declined("the program's output does not depend on the parameters through autograd")
    kink_acts = {a.node: a for a in watch.acts if a.kinks}
    all_acts = {a.node: a for a in watch.acts}
    # the whole graph: every node analytic or a watched activation; find module_function's split of w (the one
    # node whose input is the leaf w's gradient sink)
    # (and how many graph edges enter each node: its users)
    x_node, split_nodes, main, users = None, set(), set(), {}
    stack = [out.grad_fn]
    while stack:
        n = stack.pop()
        if n is None or n in main:
            continue
        if n.name() == "torch::autograd::AccumulateGrad":
            if getattr(n, "variable", None) is not x:
                raise Declined("the graph accumulates into a tensor other than the parameters")
            x_node = n
            continue
        main.add(n)
        for nx, _ in n.next_functions:
            if nx is None:
                continue
            users[nx] = users.get(nx, 0) + 1
            if nx.name() == "torch::autograd::AccumulateGrad" and n.name() == "SplitWithSizesBackward0" and \
                    getattr(nx, "variable", None) is x:
                split_nodes.add(n)
            stack.append(nx)
    if len(split_nodes) != 1:
        raise Declined("the parameters are not read through module_function's one split of w")
    chunks = next((c for leaf, c in watch.splits if leaf is x), None)
    if chunks is None or len(chunks) != len(offsets) - 1:
        raise Declined("the parameters are not read through module_function's one split of w")
    for n in main:
        if n not in split_nodes:
            _check_node(n, all_acts, watch.pools)
    # a pool with ties on a flat piece belongs to the layer whose activation it pools: that output must feed
    # nothing else
    for pnode, src in watch.pools.items():
        if src is not None and pnode in main and users.get(src.node, 0) != 1:
            raise Declined(f"{src.where}: a max pool with tied windows reads this activation's output, which is "
                           "also used elsewhere (Park et al.'s layer activation is the pool of the activation)")
    layers = [a for a in watch.acts if a.kinks and a.node in main]  # activations the loss depends on
    stop = set(kink_acts)
    checks, sites = [], []
    stats = ConeStats()
    total = sum(len(a.kinks) for a in layers)
    if total > MAX_KINK_ENTRIES:
        raise Declined(f"{total} kink entries (more than {MAX_KINK_ENTRIES} exact backward passes)")
    owns = [_walk(a.pre.grad_fn, stop, x_node, split_nodes) for a in layers]
    left = total
    for k, (a, own_all) in enumerate(zip(layers, owns)):
        if tracker is not None:  # how far the decision got, should the time limit run out in this layer
            tracker.layers(k, len(layers), found=total, left=left)
        # w_l: the parameters reaching this pre-activation, and no other layer's, without an activation between
        # (a shared one -- a residual stream past an activation, tied weights -- is held fixed: see the module
        # docstring)
        own = own_all - set().union(*(o for o in owns if o is not own_all))
        if not own:
            raise Declined(f"{a.where}: no parameter reaches this pre-activation and no other layer's directly "
                           "(every direction would move another layer's kinks too)")
        chk = LayerCheck(a.where, kink_touches=len(a.kinks))
        shape = tuple(a.pre.shape)
        for i, b in zip(a.kinks, a.points):
            sites.append(Site(a.name, -1, tuple(int(j) for j in np.unravel_index(i, shape)), b,
                              extra={"layer": a.where}))
        # the nearest parameters first (one short backward pass per kink entry), all of w_l if that fails
        near = _nearest_slots(a.pre.grad_fn, own, stop, split_nodes)
        why = ""
        for slots in ([near, sorted(own)] if len(near) < len(own) else [sorted(own)]):
            rows = _rows(a, slots, chunks, offsets, tracker)
            if rows == "zero":
                why = "a kink row is zero in the layer's parameters: P_l is empty"
            elif rows is None:
                why = "a kink row has no exactly rational coordinate in the layer's parameters"
            else:
                chk.rows = rows
                chk.p = p_nonempty(rows, stats)
                if chk.p.status == "nonempty":
                    break
                why = (f"P_l restricted to the exactly rational coordinates is "
                       f"{'empty' if chk.p.status == 'empty' else 'undecided'}")
        if chk.p is None or chk.p.status != "nonempty":
            raise Declined(f"{a.where}: {why}")
        checks.append(chk)
        left -= len(a.kinks)
    if tracker is not None:
        tracker.layers(len(layers), len(layers), found=total, left=0)
    if not checks:
        raise Declined("no activation of the loss's graph sits at its kink (nothing for the layered decision)")
    return checks, sites, stats


def slot_offsets(model) -> list:
    """Offsets in the flattened trainable parameters of each parameter (and the total at the end)."""
    out, off = [], 0
    for _n, p in model.named_parameters():
        if p.requires_grad:
            out.append(off)
            off += p.numel()
    return out + [off]
