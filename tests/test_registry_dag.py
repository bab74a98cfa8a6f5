"""The registry's modules form a DAG: no import cycle among ``nsverify/registry/*.py``, counting every ``import``
and ``from ... import`` at any level (inside functions too), as issue 33 asks. The rule vocabulary
(``rules.py``) sits below the entry types, the table and the entries; the mapping op -> rule (``Rules``), which
validates its keys against the table, lives above the table in ``lookup.py``."""
from __future__ import annotations

import ast
from pathlib import Path

import nsverify.registry

PACKAGE = "nsverify.registry"
DIR = Path(nsverify.registry.__file__).resolve().parent


def registry_imports() -> dict[str, set[str]]:
    """``{module: registry modules it imports}`` for every module of the registry package, read with ``ast``
    (imports at any level, relative ones resolved)."""
    modules = {p.stem for p in DIR.glob("*.py")}
    graph: dict[str, set[str]] = {}
    for path in sorted(DIR.glob("*.py")):
        me = path.stem
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join([PACKAGE] + ([base] if base else []))
                names = [base] + [f"{base}.{a.name}" for a in node.names]
            for n in names:
                if n.startswith(PACKAGE + "."):
                    mod = n[len(PACKAGE) + 1:].split(".")[0]
                    if mod in modules and mod != me:
                        deps.add(mod)
        graph[me] = deps - {"__init__"}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` as a path ``[a, b, ..., a]``, or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        stack.append(n)
        for m in sorted(graph.get(n, ())):
            if state.get(m) == 1:
                return stack[stack.index(m):] + [m]
            if m not in state:
                found = visit(m)
                if found:
                    return found
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state:
            found = visit(n)
            if found:
                return found
    return None


def test_the_registry_modules_form_a_dag():
    cycle = find_cycle(registry_imports())
    assert cycle is None, (f"import cycle in nsverify/registry: {' -> '.join(cycle)} (function-level imports "
                           "count): move what two modules share into a lower module")


def test_the_cycle_finder_finds_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_the_reader_sees_function_level_imports():
    graph = registry_imports()
    assert "table" in graph["entries"]  # leaky_relu_for and friends import table.get inside the function
    assert "rules" not in graph or "lookup" not in graph["rules"]
