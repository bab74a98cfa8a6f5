"""The docs' op lists are the registry's: docs/registry.md's tables of entries and capabilities, docs/oracle.md's
registry ops and README's op count and list are blocks generated from the registry
(:mod:`nsverify.registry.docs`) between ``<!-- registry:NAME begin/end -->`` markers; this test fails, naming
the command that regenerates them (``python -m nsverify.registry docs --write``), when one is stale. docs/oracle.md's
list of the ATen ops the interpreter evaluates beyond the registry's is the oracle's dispatch table (the registry,
a lower layer, never imports the oracle), checked here too."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from nsverify import registry
from nsverify.oracle.ops.table import TABLE
from nsverify.oracle.tensor import supported_ops
from nsverify.registry import docs
from nsverify.registry.__main__ import main

ROOT = Path(__file__).resolve().parents[1]
ORACLE_BEGIN, ORACLE_END = "<!-- oracle:aten-ops begin -->", "<!-- oracle:aten-ops end -->"


def _names(xs) -> str:
    return ", ".join(f"`{x}`" for x in xs) if xs else "-"


def _current(path: str):
    stale = [f for f in docs.stale(ROOT) if f == path]
    assert not stale, docs.check_message(stale)


def oracle_aten_lists() -> str:
    """docs/oracle.md's ATen lists: every ATen op the interpreter evaluates that no registry entry names (an
    entry's ATen ops are in docs/registry.md's table, so adding an entry changes no oracle list), and the ops it
    rejects by name."""
    from_registry = {a for e in registry.select() for a in (*e.aten, *getattr(e, "backward", ()))}
    others = [n for n in supported_ops() if n not in from_registry]
    rejected = TABLE.refused()
    return "\n".join([
        f"* **every other ATen op the interpreter evaluates** (`supported_ops()` without the registry entries' "
        f"ATen ops, which docs/registry.md lists; backward ops included; in-place overloads such as `relu_` follow "
        f"their op): {_names(others)};",
        f"* **rejected by name** (`UnsupportedOpError`: no interval rule yet): {_names(rejected)}.",
    ])


def test_registry_doc_lists_every_entry():
    _current("docs/registry.md")
    text = (ROOT / "docs" / "registry.md").read_text(encoding="utf-8")
    for name in registry.names():
        assert f"| `{name}` |" in text


def test_oracle_doc_lists_the_supported_ops():
    _current("docs/oracle.md")
    text = (ROOT / "docs" / "oracle.md").read_text(encoding="utf-8")
    m = re.search(re.escape(ORACLE_BEGIN) + r"\n(.*?)\n" + re.escape(ORACLE_END), text, re.S)
    expected = oracle_aten_lists()
    assert m is not None and m.group(1) == expected, (
        f"docs/oracle.md: the oracle's ATen lists are not its dispatch table's. Replace the block between "
        f"{ORACLE_BEGIN} and {ORACLE_END} with:\n\n{expected}\n")


def test_readme_op_count_is_the_registry_size():
    _current("README.md")
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    counts = re.findall(r"<!-- registry:ops begin -->(\d+) ops", text)
    assert counts == [str(len(registry.names()))]


def test_no_doc_names_a_module_that_is_gone():
    """docs/oracle.md once named oracle/semantics.py after it was gone."""
    text = (ROOT / "docs" / "oracle.md").read_text(encoding="utf-8")
    for m in sorted(set(re.findall(r"`(\w+\.py)`", text))):
        assert list((ROOT / "nsverify").rglob(m)), f"docs/oracle.md names `{m}`, which no module of nsverify is"


def _copy_docs(tmp_path: Path) -> Path:
    for rel in dict.fromkeys(b.path for b in docs.BLOCKS):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text((ROOT / rel).read_text(encoding="utf-8"), encoding="utf-8")
    return tmp_path


def test_docs_check_names_the_stale_file_and_the_command(tmp_path, capsys):
    root = _copy_docs(tmp_path)
    readme = root / "README.md"
    readme.write_text(re.sub(r"(<!-- registry:ops begin -->)\d+ ops", r"\g<1>3 ops", readme.read_text()))
    assert main(["docs", "--check", "--root", str(root)]) == 1
    err = capsys.readouterr().err.strip()
    assert err == "README.md: the registry's generated blocks are stale; run python -m nsverify.registry docs --write"
    assert main(["docs", "--write", "--root", str(root)]) == 0
    assert "rewrote README.md" in capsys.readouterr().out
    assert main(["docs", "--check", "--root", str(root)]) == 0
    assert readme.read_text() == (ROOT / "README.md").read_text()


def test_docs_write_follows_a_registered_entry(tmp_path):
    """Adding an entry changes the registry's blocks, and the command regenerates them: no doc is pasted by hand."""
    import dataclasses

    root = _copy_docs(tmp_path)
    twin = dataclasses.replace(registry.get("relu"), name="relu_twin", aten=(), backward=(), modules=(),
                               functionals=(), autograd_nodes=("TwinBackward0",))
    with registry.registered(twin):
        assert set(docs.stale(root)) == {"docs/registry.md", "docs/oracle.md", "README.md"}
        docs.write(root)
        assert docs.stale(root) == []
        assert "| `relu_twin` | elementwise | yes |" in (root / "docs" / "registry.md").read_text()
    assert set(docs.stale(root)) == {"docs/registry.md", "docs/oracle.md", "README.md"}


def test_a_missing_marker_is_a_clear_error(tmp_path, capsys):
    root = _copy_docs(tmp_path)
    oracle = root / "docs" / "oracle.md"
    oracle.write_text(oracle.read_text().replace("<!-- registry:oracle-entries end -->", ""))
    assert main(["docs", "--check", "--root", str(root)]) == 2
    err = capsys.readouterr().err
    assert "docs/oracle.md: expected one block between <!-- registry:oracle-entries begin -->" in err
    assert "found 0" in err and "docs --write" in err


def test_the_command_line_is_helpful(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "docs" in out and "select" in out
    assert main(["doc", "--write"]) == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'doc'" in err and "--help" in err and err.count("\n") == 1
    assert main([]) == 2
    assert "give a command: docs or select" in capsys.readouterr().err
    assert main(["docs"]) == 2
    assert "one of the arguments --write --check is required" in capsys.readouterr().err
    assert main(["select", "park=true"]) == 2
    assert "unknown capabilities ['park']" in capsys.readouterr().err
    assert main(["select", "--kind", "elementwise", "park_layer=true"]) == 0
    listed = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert listed == [e.name for e in registry.select("elementwise", park_layer=True)]


def test_python_dash_m_runs_the_command():
    r = subprocess.run([sys.executable, "-m", "nsverify.registry", "docs", "--check"], cwd=ROOT,
                       capture_output=True, text=True, env={"PYTHONPATH": str(ROOT), "PATH": ""}, timeout=300)
    assert r.returncode == 0, r.stderr
