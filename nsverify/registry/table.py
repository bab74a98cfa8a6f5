"""The table of primitives: registration, lookup by name (the op keys used everywhere) and by ATen name."""
from __future__ import annotations

from nsverify.errors import UnknownOpError
from nsverify.registry.types import Primitive

PRIMITIVES: dict[str, Primitive] = {}


def register(p: Primitive) -> Primitive:
    if p.name in PRIMITIVES:
        raise ValueError(f"primitive {p.name!r} registered twice")
    PRIMITIVES[p.name] = p
    return p


def unknown_op(name, valid, what: str = "it is not in the registry of nonsmooth primitives") -> UnknownOpError:
    """An UnknownOpError for ``name`` that suggests close names and lists the ``valid`` ones."""
    import difflib

    close = difflib.get_close_matches(str(name), list(valid), n=3)
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


def names(kind: str | None = None) -> list[str]:
    return [n for n, p in PRIMITIVES.items() if kind is None or p.kind == kind]
