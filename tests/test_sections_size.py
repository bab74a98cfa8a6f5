"""The report sections only choose budgets and render: no function in nsverify/sections/ is longer than
:data:`MAX_LINES` lines (the science lives in nsverify/papers/*/repro.py, the rendering in
nsverify.report.claims_table)."""
from __future__ import annotations

import ast
from pathlib import Path

SECTIONS = Path(__file__).resolve().parents[1] / "nsverify" / "sections"
MAX_LINES = 80


def long_functions(source: str, name: str = "<src>", limit: int = MAX_LINES) -> list[str]:
    """``"name:line fn (N lines)"`` for every function (nested ones too) longer than ``limit`` lines, counted from
    its ``def`` line to its last line (decorators excluded)."""
    out = []
    for node in ast.walk(ast.parse(source, name)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            n = node.end_lineno - node.lineno + 1
            if n > limit:
                out.append(f"{name}:{node.lineno} {node.name} ({n} lines)")
    return out


def test_the_check_counts_function_lines():
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_LINES))
    assert long_functions(f"def f():\n{body}\n") == ["<src>:1 f (81 lines)"]
    assert long_functions(f"@deco\ndef f():\n{body[:-len(str(MAX_LINES - 1)) - 9]}\n") == []
    nested = "def outer():\n    def inner():\n" + "\n".join(f"        y{i} = {i}" for i in range(MAX_LINES)) + "\n"
    assert [p.split()[1] for p in long_functions(nested)] == ["outer", "inner"]


def test_no_section_function_is_longer_than_the_budget():
    files = sorted(SECTIONS.glob("*.py"))
    assert len(files) > 5
    problems = [p for f in files for p in long_functions(f.read_text(encoding="utf-8"), f.name)]
    assert not problems, f"section functions over {MAX_LINES} lines (move the science to papers/*/repro.py, " \
                         f"the rendering to nsverify.report.claims_table): {problems}"
