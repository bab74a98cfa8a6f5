"""The docs' blocks that are generated from the registry, and their one writer and checker.

Each block sits in a doc between two markers, ``<!-- registry:NAME begin -->`` and ``<!-- registry:NAME end -->``
(a block inside a line, such as README's op count, keeps its markers on that line). :data:`BLOCKS` lists every
block with its file and renderer; ``python -m nsverify.registry docs --write`` rewrites them and ``docs --check``
fails naming the stale file and this command (``tests/test_docs_ops.py`` runs the check). So adding an entry is
the entry and its test: the docs follow.

The renderers show what does not depend on the installed torch release: a capability that PyTorch's rules decide
(one-sided rules, Park's layer theorems) is shown per release range where an entry records a
:class:`~nsverify.registry.types.RuleChange`.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Callable

from nsverify.files import DocBlock, regenerate_docs
from nsverify.registry.lookup import ARGUMENT_OPS
from nsverify.registry.table import get, names, select
from nsverify.registry.types import Primitive, release_key

#: the command that regenerates the blocks (the check's failure message names it)
COMMAND = "python -m nsverify.registry docs --write"


def _names(xs) -> str:
    return ", ".join(f"`{x}`" for x in xs) if xs else "-"


def _yes(v: bool) -> str:
    return "yes" if v else "no"


def _per_release(entry: Primitive, capability: Callable[[Primitive], bool]) -> str:
    """``capability`` of ``entry`` under PyTorch's rules, per release range: "yes", or "yes; from 2.14.0: no"
    for an entry whose recorded rule changes change it."""
    changes = sorted({c.since for c in entry.rule_changes}, key=release_key)
    if not changes:
        return _yes(capability(entry))
    out = [_yes(capability(dataclasses.replace(entry, release="0.0.0")))]
    for since in changes:
        v = _yes(capability(dataclasses.replace(entry, release=since)))
        if not out[-1].endswith(v):
            out.append(f"from {since}: {v}")
    return "; ".join(out)


def entries_table() -> str:
    """docs/registry.md's table of entries: each entry's ATen forward and backward ops, nn modules, functional
    forms and the families derived from its pieces."""
    lines = ["| op | kind | ATen ops (backward ops) | `torch.nn` modules | functional forms | pieces |",
             "|---|---|---|---|---|---|"]
    for name in names():
        e = get(name)
        if e.kind == "elementwise":
            aten = _names(e.aten_forward) + (f" ({_names(e.backward)})" if e.backward else "")
            fams = ["exact" if e.exact else "mpmath"]
            if e.piecewise_linear:
                fams.append("piecewise linear")
            fams.append(f"{len(e.kinks)} kink{'s' if len(e.kinks) != 1 else ''}")
            fns = _names([f.replace("torch.nn.functional.", "F.").replace("torch.Tensor.", "Tensor.")
                          for f in e.functionals])
            lines.append(f"| `{name}` | elementwise | {aten} | {_names(e.modules)} | {fns} | {', '.join(fams)} |")
        else:
            lines.append(f"| `{name}` | selection | {_names(e.aten)} | - | - | ties ({e.packing} input) |")
    return "\n".join(lines)


def capabilities_table() -> str:
    """docs/registry.md's table of every entry's capabilities (what :func:`~nsverify.registry.select` filters
    by)."""
    lines = ["| op | kind | fixed | exact | piecewise linear | one-sided rules | Park's layer theorems | "
             "autograd nodes | JAX |", "|---|---|---|---|---|---|---|---|---|"]
    for e in select():
        fixed = "yes" if e.fixed else f"no (learnable `{e.learnable}`)"
        lines.append(f"| `{e.name}` | {e.kind} | {fixed} | {_yes(e.exact)} | {_yes(e.piecewise_linear)} | "
                     f"{_per_release(e, lambda p: p.one_sided_rules())} | "
                     f"{_per_release(e, lambda p: p.park_layer)} | {_names(e.autograd_nodes)} | "
                     f"{_yes(e.jax is not None)} |")
    return "\n".join(lines)


def oracle_entries() -> str:
    """docs/oracle.md's list of the registry's nonsmooth ops as the oracle evaluates them (their ATen ops are in
    docs/registry.md's table)."""
    exact = [e.name for e in select("elementwise", exact=True)] + list(ARGUMENT_OPS)
    inexact = [e.name for e in select("elementwise", exact=False)]
    return "\n".join([
        f"* **elementwise ops with kinks** (registry entries, evaluated exactly from their pieces): {_names(exact)};"
        f" registry entries with non-polynomial pieces, not evaluated: {_names(inexact)};",
        f"* **selections** (registry entries; ties decided by the tie rules): {_names(names('selection'))};",
    ])


def readme_ops() -> str:
    """README's op count and list (in the library table's registry row)."""
    def label(e):
        return f"`{e.name}`" + ("" if e.fixed else f" (learnable `{e.learnable}`)")

    ew, sel = select("elementwise"), select("selection")
    return (f"{len(ew) + len(sel)} ops: {len(ew)} elementwise, {', '.join(label(e) for e in ew)}; "
            f"{len(sel)} selections, {', '.join(label(e) for e in sel)}")


#: every generated block of the docs
BLOCKS: tuple[DocBlock, ...] = (
    DocBlock("docs/registry.md", "entries", entries_table),
    DocBlock("docs/registry.md", "capabilities", capabilities_table),
    DocBlock("docs/oracle.md", "oracle-entries", oracle_entries),
    DocBlock("README.md", "ops", readme_ops, inline=True),
)


def stale(root: Path | None = None) -> list[str]:
    """The docs (paths relative to ``root``) whose generated blocks are not the registry's."""
    return regenerate_docs(BLOCKS, COMMAND, root)


def write(root: Path | None = None) -> list[str]:
    """Regenerate every block; returns the docs that changed."""
    return regenerate_docs(BLOCKS, COMMAND, root, write=True)


def check_message(files: list[str]) -> str:
    """The one-line message of a failed check."""
    return f"{', '.join(files)}: the registry's generated blocks are stale; run {COMMAND}"
