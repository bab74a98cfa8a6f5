"""The docs' op lists are the registry's: docs/registry.md's table of entries, docs/oracle.md's supported ops and
README's op count are regenerated here from the registry (and the oracle's dispatch table) and compared with the
text, so they cannot drift. On a failure the message prints the block to paste between the markers."""
from __future__ import annotations

import re
from pathlib import Path

from nsverify import registry
from nsverify.oracle.ops.table import TABLE
from nsverify.oracle.tensor import supported_ops

ROOT = Path(__file__).resolve().parents[1]
BEGIN = "<!-- generated from the registry by tests/test_docs_ops.py: {name} -->"
END = "<!-- end of generated block: {name} -->"


def _names(xs) -> str:
    return ", ".join(f"`{x}`" for x in xs) if xs else "-"


def registry_table() -> str:
    """docs/registry.md's table of entries: each entry's ATen forward and backward ops, nn modules, functional
    forms and the families derived from its pieces (the families that do not depend on the torch release)."""
    lines = ["| op | kind | ATen ops (backward ops) | `torch.nn` modules | functional forms | pieces |",
             "|---|---|---|---|---|---|"]
    for name in registry.names():
        e = registry.get(name)
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


def oracle_lists() -> str:
    """docs/oracle.md's supported ops: the registry's nonsmooth ops as the oracle evaluates them, every ATen op of
    the dispatch table, and the ops it rejects by name."""
    ew = [registry.get(n) for n in registry.names("elementwise")]
    exact = [e.name for e in ew if e.exact] + list(registry.ARGUMENT_OPS)
    inexact = [e.name for e in ew if not e.exact]
    rejected = TABLE.refused()
    return "\n".join([
        f"* **elementwise ops with kinks** (registry entries, evaluated exactly from their pieces): {_names(exact)};"
        f" registry entries with non-polynomial pieces, not evaluated: {_names(inexact)};",
        f"* **selections** (registry entries; ties decided by the tie rules): {_names(registry.names('selection'))};",
        f"* **every ATen op the interpreter evaluates** (`supported_ops()`, backward ops included; in-place "
        f"overloads such as `relu_` follow their op): {_names(supported_ops())};",
        f"* **rejected by name** (`UnsupportedOpError`: no interval rule yet): {_names(rejected)}.",
    ])


def _block(path: Path, name: str) -> str | None:
    text = path.read_text(encoding="utf-8")
    m = re.search(re.escape(BEGIN.format(name=name)) + r"\n(.*?)\n" + re.escape(END.format(name=name)), text, re.S)
    return None if m is None else m.group(1)


def _check(path: Path, name: str, expected: str):
    got = _block(path, name)
    wrap = f"{BEGIN.format(name=name)}\n{expected}\n{END.format(name=name)}"
    assert got == expected, (f"{path.relative_to(ROOT)}: the {name!r} list is not the registry's. Replace the block "
                             f"between the markers (add them if missing) with:\n\n{wrap}\n")


def test_registry_doc_lists_every_entry():
    _check(ROOT / "docs" / "registry.md", "entries", registry_table())


def test_oracle_doc_lists_the_supported_ops():
    _check(ROOT / "docs" / "oracle.md", "supported ops", oracle_lists())


def test_readme_op_count_is_the_registry_size():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    counts = re.findall(r"one table of nonsmooth primitives\*\* \((\d+) ops", text)
    n = len(registry.names())
    assert counts == [str(n)], (f"README.md's `nsverify.registry` row should say '({n} ops' (the registry has {n} "
                                f"entries: {', '.join(registry.names())}); it says {counts}")


def test_no_doc_names_a_module_that_is_gone():
    """docs/oracle.md once named oracle/semantics.py after it was gone."""
    text = (ROOT / "docs" / "oracle.md").read_text(encoding="utf-8")
    for m in sorted(set(re.findall(r"`(\w+\.py)`", text))):
        assert list((ROOT / "nsverify").rglob(m)), f"docs/oracle.md names `{m}`, which no module of nsverify is"
