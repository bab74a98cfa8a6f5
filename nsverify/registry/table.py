"""The table of primitives: registration (:func:`register`, :func:`unregister`, the scoped :func:`registered`),
selection by capability (:func:`select`: what consumers ask, never an op's name), lookup by name (the op keys
used everywhere), by ATen name (:func:`by_aten`), by ``torch.nn`` module (:func:`by_module`,
:func:`module_instance`) and by functional form (:func:`by_functional`)."""
from __future__ import annotations

import contextlib
import functools
import inspect

from nsverify.errors import NsverifyError, UnknownOpError, UnsupportedOpError
from nsverify.registry.types import CAPABILITIES, Elementwise, Primitive, functional_name

PRIMITIVES: dict[str, Primitive] = {}
_VERSION = [0]


def version() -> int:
    """A counter that changes whenever an entry is registered or unregistered (readers that cache a view of the
    table, such as the oracle's ATen dispatch, rebuild it when it changes)."""
    return _VERSION[0]


def register(p: Primitive) -> Primitive:
    """Add an entry to the table: every reader (the oracle, the conventions matrix, the strategies, the docs'
    op lists) sees it from then on."""
    if p.name in PRIMITIVES:
        raise ValueError(f"primitive {p.name!r} registered twice")
    if isinstance(p, Elementwise):  # the oracle dispatches an ATen op to one entry: no two may claim it
        mine = set(p.aten) | set(p.backward)
        for q in _elementwise():
            taken = mine & (set(q.aten) | set(q.backward))
            if taken:
                raise ValueError(f"primitive {p.name!r}: the ATen op(s) {sorted(taken)} belong to {q.name!r}")
    PRIMITIVES[p.name] = p
    _VERSION[0] += 1
    return p


def unregister(name: str) -> Primitive:
    """Remove the entry ``name`` from the table (the inverse of :func:`register`)."""
    p = get(name)
    del PRIMITIVES[name]
    _VERSION[0] += 1
    return p


@contextlib.contextmanager
def registered(*entries: Primitive):
    """Register ``entries`` for the duration of a ``with`` block, and remove them afterwards (tests, trials)."""
    done = []
    try:
        for e in entries:
            done.append(register(e))
        yield entries[0] if len(entries) == 1 else entries
    finally:
        for e in reversed(done):
            unregister(e.name)


def registry_name(name) -> str | None:
    """The registry entry a PyTorch name means: its own name in any case (``ReLU``), a module class (``nn.ReLU``,
    ``torch.nn.LeakyReLU``), a functional (``torch.relu``, ``F.relu``, ``torch.nn.functional.relu``) or an ATen op
    (``aten.relu.default``); None when none does."""
    text = str(name).strip()
    tail = text.split(".")[-1]
    dotted = text.startswith(("F.", "torch.", "nn."))
    for key, p in PRIMITIVES.items():
        flat = key.replace("_", "").lower()
        if text.replace("_", "").lower() == flat or tail in getattr(p, "modules", ()) \
                or (dotted and tail.replace("_", "").lower() == flat) or text in getattr(p, "functionals", ()):
            return key
    if text.startswith(("aten.", "torch.ops.aten.")):
        p = by_aten(text.removeprefix("torch.ops."))
        return next((k for k, q in PRIMITIVES.items() if q is p), None) if p is not None else None
    return None


def unknown_op(name, valid, what: str = "it is not in the registry of nonsmooth primitives") -> UnknownOpError:
    """An UnknownOpError for ``name`` that suggests the entry a PyTorch module, functional or ATen name means
    (:func:`registry_name`), else close names, and lists the ``valid`` ones."""
    import difflib

    meant = registry_name(name)
    if meant is not None and meant in valid:
        hint = f" Did you mean {meant}? (the registry names ops by their functional name: {name} is {meant!r})"
    else:
        lower = {str(v).lower(): str(v) for v in valid}
        close = [lower[c] for c in difflib.get_close_matches(str(name).lower(), list(lower), n=3)]
        hint = f" Did you mean {', '.join(close)}?" if close else ""
    return UnknownOpError(f"unknown op {name!r}: {what}.{hint} Known ops: {', '.join(sorted(valid))}.")


def get(name: str) -> Primitive:
    """Look up a primitive by name, with a clear error listing the known ones."""
    try:
        return PRIMITIVES[name]
    except (KeyError, TypeError):
        raise unknown_op(name, PRIMITIVES) from None


def by_aten(aten_name: str) -> Primitive | None:
    """The primitive that handles an ATen op name (e.g. 'aten.relu.default', 'aten.max.dim'), or None if
    smooth/unknown.  An entry listing "name.overload" wins over one listing the bare name."""
    parts = aten_name.removeprefix("aten.").split(".")
    base = parts[0]
    if len(parts) > 1:
        for p in PRIMITIVES.values():
            if f"{base}.{parts[1]}" in p.aten:
                return p
    for p in PRIMITIVES.values():
        if base in p.aten:
            return p
    return None


def op_key(aten_name: str) -> str:
    """The op key of an ATen op: the registry name of the entry handling it ('max.dim' -> 'max_dim',
    'max_pool2d_with_indices' -> 'max_pool2d'), or the bare ATen name when no entry handles it."""
    p = by_aten(aten_name)
    return p.name if p is not None else aten_name.removeprefix("aten.").split(".")[0]


KINDS = ("elementwise", "selection")


def _check_kind(kind: str | None) -> None:
    if kind is not None and kind not in KINDS:
        raise NsverifyError(f"kind {kind!r} is not an entry kind: use one of {', '.join(KINDS)}, or None for both.")


def names(kind: str | None = None) -> list[str]:
    """The names of the entries (of ``kind``, "elementwise" or "selection"), in registration order."""
    _check_kind(kind)
    return [n for n, p in PRIMITIVES.items() if kind is None or p.kind == kind]


def select(kind: str | None = None, **capabilities) -> list[Primitive]:
    """The entries (of ``kind``) that have every capability given, in registration order: how consumers ask the
    table, never by an op's name. Capabilities (:data:`~nsverify.registry.types.CAPABILITIES`): ``fixed``,
    ``learnable``, ``exact``, ``piecewise_linear``, ``one_sided_rules``, ``park_layer``, ``jax`` (compared with
    ==) and ``autograd_node="ReluBackward0"`` (the entries whose forward produces that autograd node).

    ``select("elementwise", exact=True, fixed=True)``: the activations a network draw may use;
    ``select(park_layer=True)``: the activations Park's layer theorems cover; ``select(jax=True)``: the entries
    the JAX matrix measures. An unknown capability raises NsverifyError listing the valid ones."""
    _check_kind(kind)
    wanted = dict(capabilities)
    node = wanted.pop("autograd_node", None)
    valid = sorted(set(CAPABILITIES) - {"kind", "autograd_nodes"})
    bad = sorted(set(wanted) - set(valid))
    if bad:
        raise NsverifyError(f"unknown capabilities {bad}: select by {', '.join(valid)} or autograd_node=NAME "
                            "(the kind, elementwise or selection, is the first argument).")
    out = []
    for p in PRIMITIVES.values():
        if kind is not None and p.kind != kind:
            continue
        caps = p.capabilities()
        if node is not None and node not in caps["autograd_nodes"]:
            continue
        if all(caps[k] == v for k, v in wanted.items()):
            out.append(p)
    return out


def _elementwise() -> list[Elementwise]:
    return [p for p in PRIMITIVES.values() if isinstance(p, Elementwise)]


def by_module(module) -> Elementwise | None:
    """The elementwise entry of a ``torch.nn`` module class, instance or class name (``nn.ReLU``,
    ``nn.Hardtanh(0, 6)``, ``"LeakyReLU"``), or None. The entry's kinks are the defaults' (use
    :func:`module_instance` for a module's own arguments)."""
    name = module if isinstance(module, str) else (module if isinstance(module, type) else type(module)).__name__
    return next((p for p in _elementwise() if name in p.modules), None)


def module_instance(module) -> Elementwise | None:
    """The elementwise op a ``torch.nn`` module instance computes, with its own arguments (``nn.LeakyReLU(0.2)``:
    slope 0.2; ``nn.Hardtanh(0., 6.)``: relu6), or None for a module class the registry does not know.
    Raises UnsupportedOpError when the module's arguments move the entry's kinks and the entry cannot be built
    from arguments (e.g. ``nn.ELU(alpha=2.)``)."""
    entry = by_module(module)
    if entry is None:
        return None
    if entry.from_args is not None:
        params = [q for q in inspect.signature(entry.from_args).parameters.values()
                  if q.kind is q.POSITIONAL_OR_KEYWORD]
        kw = {q.name: getattr(module, q.name) for q in params if hasattr(module, q.name)}
        return entry.from_args(**kw)
    moved = {k: getattr(module, k) for k, v in entry.kwargs.items() if hasattr(module, k) and getattr(module, k) != v}
    if moved:
        raise UnsupportedOpError(f"{type(module).__name__} with {moved}: the registry's {entry.name} has "
                                 f"{entry.kwargs}; other arguments move its kinks or pieces.")
    return entry


@functools.lru_cache(maxsize=None)
def _resolve(qualname: str):
    """The object a qualified name (``torch.nn.functional.relu``, ``torch.Tensor.relu``) names, or None."""
    import importlib

    parts = qualname.split(".")
    for i in range(len(parts) - 1, 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for a in parts[i:]:
            obj = getattr(obj, a, None)
            if obj is None:
                return None
        return obj
    return None


def by_functional(fn) -> Elementwise | None:
    """The elementwise entry of a functional form: a callable (``F.relu``, ``torch.relu``, ``torch.Tensor.relu``)
    or its qualified name (``"torch.nn.functional.relu"``; ``"F.relu"`` and ``"T.relu"`` abbreviate
    torch.nn.functional and torch.Tensor), or None."""
    if isinstance(fn, str):
        name = functional_name(fn)
        return next((p for p in _elementwise() if name in p.functionals), None)
    for p in _elementwise():
        for q in p.functionals:
            if _resolve(q) is fn:
                return p
    return None

