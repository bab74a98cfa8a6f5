"""Layers point down: no nsverify module imports a module of a higher layer, nor of another package of its own
layer (unless the pair is listed in :data:`SAME_RANK_ALLOWED` with its reason).

:data:`LAYERS` is the one table of the layer order (docs/architecture.md, "Rules of the house", draws it). The
check reads every module's source with :mod:`ast`, so it sees what ``tests/test_imports.py`` (which imports each
module alone) cannot: imports inside functions and methods, and imports under ``if TYPE_CHECKING:``. It counts

* ``import nsverify.a.b`` and ``from nsverify.a import b`` (the submodule ``a.b`` when ``b`` is one), relative
  imports included;
* imports under ``if TYPE_CHECKING:``: they count like any other. A type annotation that names a higher layer
  is a dependency on it all the same, and the module could not be read (or type-checked) without that layer;
* a module named by a string (``importlib.import_module("nsverify.x")``, ``COMMAND_MODULES``,
  ``pytest_plugins``): every string constant that is exactly the dotted name of an nsverify module;
* the public API reached through the package: ``import nsverify`` then ``nsverify.check_gradient(...)``, or
  ``from nsverify import check_gradient``, counts as an import of the module that defines the name
  (``nsverify._PUBLIC``). The package's own ``__init__`` loads nothing but :mod:`nsverify.errors` (the rest is
  lazy), so ``import nsverify`` alone, ``nsverify.__version__`` and ``nsverify.NsverifyError`` count as nothing
  more.

Modules of one top-level package may import each other (their import order is what ``tests/test_imports.py``
checks); the rules are about top-level packages and modules.
"""
from __future__ import annotations

import ast
import importlib.util
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

import nsverify

PACKAGE = "nsverify"
ROOT = Path(nsverify.__file__).resolve().parent

#: The layer order, lowest first: rank i may import ranks below i, and its own package (not the other packages
#: of rank i, except the pairs of SAME_RANK_ALLOWED). "nsverify" is the package's __init__, which exposes the
#: public API lazily (so it sits on top), "__main__" is ``python -m nsverify``.
LAYERS: list[tuple[str, ...]] = [
    # 0 plumbing: errors, files, devices and timing, exact linear algebra, the command-line argument types, and
    #   the claim record with its decision rules and statistics (``claims``; it moves there from papers/)
    ("errors", "files", "devices", "rational", "argtypes", "claims"),
    # 1 the op table and the rule vocabulary
    ("registry",),
    # 2 AD variants and their fused kernels
    ("kernels", "ad"),
    # 3 what is built on the registry and AD: generators, reference workloads, optimizers, PyTorch's conventions
    ("strategies", "workloads", "optim", "conventions"),
    # 4 the exact Clarke oracle
    ("oracle",),
    # 5 the paper reproductions (with the papers' worked examples, papers/cases.py), the independent
    #   reference the oracle is compared with (it uses the oracle's public API only), and the training-time NaN
    #   guard (it hands the offending parameter block to the oracle)
    ("papers", "reference", "guard"),
    # 6 the report: section registry, nightly runner, schema, comparison, HTML
    ("report",),
    # 7 the report's sections
    ("sections",),
    # 8 entry points: console command, the property suite and its pytest plugin, and the public API
    ("cli", "__main__", "pytest_plugin", "properties", "nsverify"),
]

#: (importer, imported) top-level names of the same rank that may import each other, with the reason
SAME_RANK_ALLOWED: dict[tuple[str, str], str] = {
    ("files", "errors"): "every module raises the one error hierarchy",
    ("devices", "errors"): "every module raises the one error hierarchy",
    ("rational", "errors"): "every module raises the one error hierarchy",
    ("argtypes", "errors"): "every module raises the one error hierarchy",
    ("claims", "errors"): "every module raises the one error hierarchy",
    ("argtypes", "files"): "the path types of the command line are the file module's path checks",
    ("ad", "kernels"): "ad's tie-aware max-pool backward dispatches to the fused kernel; ad's pure-PyTorch path "
                       "is the kernel's reference and fallback",
    ("__main__", "cli"): "``python -m nsverify`` runs the console command",
    ("properties", "pytest_plugin"): "the property suite runs with the plugin's options and fixtures",
    ("properties", "nsverify"): "the property suite calls the public API as a user does",
    ("pytest_plugin", "nsverify"): "the plugin calls the public API as a user does",
    ("pytest_plugin", "properties"): "the plugin locates the suite's directory (importlib.util.find_spec, no "
                                     "import) to apply its Hypothesis profile to nsverify's own suite only",
}

#: Upward imports that another change of the same redesign (issue 21) removes; each entry is exactly one
#: (importer module, imported module) edge. An entry that no longer occurs fails the test: delete it then.
KNOWN_PENDING: dict[tuple[str, str], str] = {
}

#: attributes of the package itself that load nothing (the __init__ imports only nsverify.errors)
ROOT_ATTRIBUTES = {"__version__", "__file__", "__path__", "__name__", "__all__",
                   *(set(nsverify.__all__) - set(nsverify._PUBLIC))}


@dataclass(frozen=True)
class Edge:
    importer: str  # dotted module name
    imported: str  # dotted module name
    path: Path
    line: int


def _module_name(path: Path, base: Path, prefix: str) -> str:
    parts = list(path.relative_to(base).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join([prefix, *parts]) if parts else prefix


def source_files(package: str, root: Path, top_names) -> dict[str, Path]:
    """``{module name: path}`` of every module of ``package`` (directory ``root``), plus the top-level
    subpackages in ``top_names`` that the package maps to another directory (e.g. ``properties/``)."""
    files = {_module_name(p, root, package): p for p in sorted(root.rglob("*.py"))}
    for name in top_names:
        sub = f"{package}.{name}"
        if sub in files:
            continue
        spec = importlib.util.find_spec(sub) if importlib.util.find_spec(package) else None
        for loc in (spec.submodule_search_locations or []) if spec else []:
            if Path(loc).resolve() != root / name:
                files.update({_module_name(p, Path(loc), sub): p for p in sorted(Path(loc).rglob("*.py"))})
    return files


def collect_imports(package: str, files: dict[str, Path], public: dict[str, tuple]) -> list[Edge]:
    """Every import of a ``package`` module by a module of ``files`` (see the module docstring for what counts)."""
    modules = set(files)
    dotted = re.compile(rf"{re.escape(package)}(\.[A-Za-z_]\w*)+")

    def resolve(base: str, name: str) -> str:
        """``base.name`` when that is a module, else ``base`` (``name`` is an attribute of it)."""
        return f"{base}.{name}" if f"{base}.{name}" in modules else base

    def root_attribute(name: str) -> str | None:
        if f"{package}.{name}" in modules:
            return f"{package}.{name}"
        if name in public:
            return public[name][0]
        return None if name in ROOT_ATTRIBUTES else package

    edges: list[Edge] = []
    for mod, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        is_pkg = path.name == "__init__.py"
        aliases: set[str] = set()  # local names bound to the package itself

        def add(target: str | None, node: ast.AST, mod=mod, path=path) -> None:
            if target and (target == package or target.startswith(package + ".")):
                edges.append(Edge(mod, target, path, node.lineno))

        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name == package or a.name.startswith(package + "."):
                        if a.name != package:
                            add(a.name, node)
                        if a.asname is None or a.name == package:
                            aliases.add(a.asname or package)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: resolve against this module's package
                    anchor = mod.split(".")
                    anchor = anchor[: len(anchor) - node.level + (1 if is_pkg else 0)]
                    base = ".".join(anchor + ([base] if base else []))
                if base == package:
                    for a in node.names:
                        add(root_attribute(a.name), node)
                else:
                    for a in node.names:
                        add(resolve(base, a.name), node)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and dotted.fullmatch(node.value):
                if node.value in modules:
                    add(node.value, node)
        for node in ast.walk(tree):  # the public API reached through ``import nsverify``
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
                add(root_attribute(node.attr), node)
    return edges


def top_level(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def rank_table(layers) -> dict[str, int]:
    ranks: dict[str, int] = {}
    for i, names in enumerate(layers):
        for n in names:
            assert n not in ranks, f"{n} appears twice in the layer table"
            ranks[n] = i
    return ranks


def violations(edges: list[Edge], ranks: dict[str, int], allowed, base: Path) -> list[tuple[str, str, str]]:
    """``(importer, imported, message)`` of every import of a higher layer or a forbidden same-rank package."""
    out = []
    for e in edges:
        a, b = top_level(e.importer), top_level(e.imported)
        if a == b or a not in ranks or b not in ranks:
            continue
        ra, rb = ranks[a], ranks[b]
        if rb > ra or (rb == ra and (a, b) not in allowed):
            where = f"{e.path.relative_to(base) if e.path.is_relative_to(base) else e.path}:{e.line}"
            kind = "a higher layer" if rb > ra else "a package of its own layer"
            out.append((e.importer, e.imported,
                        f"{e.importer} (rank {ra}) imports {e.imported} (rank {rb}, {kind}) at {where}"))
    return sorted(set(out), key=lambda v: v[2])


# --------------------------------------------------------------------------------------------------------------
RANKS = rank_table(LAYERS)


@pytest.fixture(scope="module")
def edges() -> list[Edge]:
    files = source_files(PACKAGE, ROOT, RANKS)
    return collect_imports(PACKAGE, files, nsverify._PUBLIC)


def test_every_top_level_module_and_package_has_a_layer():
    present = {p.stem for p in ROOT.glob("*.py") if p.stem != "__init__"}
    present |= {p.parent.name for p in ROOT.glob("*/__init__.py")}
    unranked = sorted(present - set(RANKS))
    assert not unranked, f"give these a layer in tests/test_layers.py LAYERS: {unranked}"


def test_no_module_imports_a_higher_layer(edges):
    bad = [msg for a, b, msg in violations(edges, RANKS, SAME_RANK_ALLOWED, ROOT.parent)
           if (a, b) not in KNOWN_PENDING]
    assert not bad, "imports against the layer order (tests/test_layers.py LAYERS):\n  " + "\n  ".join(bad)


def test_known_pending_edges_still_exist(edges):
    """An entry of KNOWN_PENDING whose import is gone must be deleted (so the list cannot hide a new one)."""
    found = {(e.importer, e.imported) for e in edges}
    stale = sorted(k for k in KNOWN_PENDING if k not in found)
    assert not stale, f"these imports are gone: delete them from KNOWN_PENDING in tests/test_layers.py: {stale}"


def test_the_scan_sees_the_whole_package(edges):
    importers = {e.importer for e in edges}
    assert {"nsverify.cli", "nsverify.sections.oracle", "nsverify.report.nightly"} <= importers
    # function-level imports are seen: sections/oracle.py imports the papers inside its section function
    assert any(e.importer == "nsverify.sections.oracle" and e.imported.startswith("nsverify.papers.")
               for e in edges)


# --------------------------------------------------------------------------------------------------------------
# The checker itself, on a planted package
def _plant(tmp_path: Path, files: dict[str, str]) -> tuple[Path, list[Edge]]:
    root = tmp_path / "plant"
    for rel, text in {"__init__.py": "", **files}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    mods = {_module_name(p, root, "plant"): p for p in sorted(root.rglob("*.py"))}
    return root, collect_imports("plant", mods, {"run": ("plant.top", "run")})


PLANT_LAYERS = [("base",), ("low", "side"), ("top",)]


def test_the_check_detects_a_planted_upward_import_inside_a_function(tmp_path):
    root, found = _plant(tmp_path, {
        "base.py": "X = 1\n",
        "low/__init__.py": "from plant.base import X\n",
        "low/work.py": "def f():\n    if True:\n        from plant.top import run\n    return run\n",
        "top.py": "from plant.low.work import f\n\ndef run():\n    return f()\n",
    })
    bad = violations(found, rank_table(PLANT_LAYERS), {}, root.parent)
    assert [m for _, _, m in bad] == ["plant.low.work (rank 1) imports plant.top (rank 2, a higher layer) at "
                                      "plant/low/work.py:3"]


def test_the_check_detects_type_checking_sideways_relative_string_and_public_api_imports(tmp_path):
    root, found = _plant(tmp_path, {
        "base.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from plant.low import Y\n",
        "low/__init__.py": "from ..side import Z\nY = Z\n",
        "side.py": "import importlib\n\ndef g():\n    return importlib.import_module('plant.top')\nZ = 2\n",
        "top.py": "def run():\n    return 0\n",
        "low/api.py": "import plant\n\ndef h():\n    return plant.run(), plant.__version__\n",
    })
    bad = {m for _, _, m in violations(found, rank_table(PLANT_LAYERS), {}, root.parent)}
    assert bad == {
        "plant.base (rank 0) imports plant.low (rank 1, a higher layer) at plant/base.py:3",
        "plant.low (rank 1) imports plant.side (rank 1, a package of its own layer) at plant/low/__init__.py:1",
        "plant.side (rank 1) imports plant.top (rank 2, a higher layer) at plant/side.py:4",
        "plant.low.api (rank 1) imports plant.top (rank 2, a higher layer) at plant/low/api.py:4",
    }
    allowed = {("low", "side"): "planted"}
    assert len(violations(found, rank_table(PLANT_LAYERS), allowed, root.parent)) == 3


# --------------------------------------------------------------------------------------------------------------
# The asv workloads sit above the whole library and call its public names only
BENCH = ROOT.parent / "asv_bench"


def _declared_all(init: Path) -> set[str] | None:
    """The literal ``__all__`` of a package's ``__init__.py`` (None when it declares none)."""
    if not init.is_file():
        return None
    for node in ast.parse(init.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            return set(ast.literal_eval(node.value))
    return None


def bench_violations(bench: Path, package: str, root: Path) -> list[str]:
    """Imports of the benchmarks that reach past the library's public names:

    * a private name (a leading underscore in the module path or the imported name);
    * a name from a submodule of a package that declares its API in ``__all__`` (the oracle, the registry,
      ...) unless the package's ``__all__`` has it and it is imported from the package. The paper packages
      are exempt: their modules' documented functions are the science the benchmarks time
      (``nsverify.papers.costs.measure.wall_ratio``).
    """
    out = []
    for path in sorted(bench.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(package + ".")):
                continue
            where = f"{path.relative_to(bench.parent)}:{node.lineno}"
            parts = node.module.split(".")
            for a in node.names:
                if a.name.startswith("_") or any(p.startswith("_") for p in parts):
                    out.append(f"{where} imports the private {node.module}.{a.name}")
                    continue
                if parts[1] == "papers":
                    continue
                for depth in range(2, len(parts)):  # the packages above the module, outermost first
                    api = _declared_all(root.joinpath(*parts[1:depth]) / "__init__.py")
                    if api is not None:
                        pkg = ".".join(parts[:depth])
                        out.append(f"{where} imports {node.module}.{a.name}: use the public API of {pkg}"
                                   + (f" (from {pkg} import {a.name})" if a.name in api else
                                      f" ({pkg}.__all__), adding a public function there if it lacks one"))
                        break
    return out


def test_benchmarks_call_public_names_only():
    bad = bench_violations(BENCH, PACKAGE, ROOT)
    assert not bad, "asv workloads must call public names:\n  " + "\n  ".join(bad)


def test_the_benchmark_check_detects_internals(tmp_path):
    bench = tmp_path / "asv_bench"
    bench.mkdir()
    (bench / "common.py").write_text("def f():\n    from nsverify.oracle.cones import feasible\n"
                                     "    from nsverify.papers.costs.measure import _private\n"
                                     "    from nsverify.papers.costs.measure import wall_ratio\n")
    bad = bench_violations(bench, PACKAGE, ROOT)
    assert len(bad) == 2 and "nsverify.oracle.cones.feasible" in bad[0] and "_private" in bad[1], bad


# --------------------------------------------------------------------------------------------------------------
# No import cycle between modules: every import counts (module level, inside functions, under TYPE_CHECKING, by a
# string, through the public API), so a cycle hidden in a function-level import fails here too.
def import_cycles(edges: list[Edge]) -> list[list[str]]:
    """The import cycles among modules: the strongly connected components of the module graph with two or more
    modules, each sorted, largest first (Tarjan's algorithm, iterative)."""
    graph: dict[str, set[str]] = {}
    for e in edges:
        if e.importer != e.imported:
            graph.setdefault(e.importer, set()).add(e.imported)
            graph.setdefault(e.imported, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    comp = []
                    while True:
                        m = stack.pop()
                        on_stack.discard(m)
                        comp.append(m)
                        if m == node:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
    return sorted(out, key=lambda c: (-len(c), c))


def _cycle_report(cycles: list[list[str]], edges: list[Edge], base: Path) -> str:
    lines = []
    for comp in cycles:
        members = set(comp)
        lines.append(f"cycle of {len(comp)} modules: {', '.join(comp)}")
        seen = set()
        for e in edges:
            if e.importer in members and e.imported in members and e.importer != e.imported \
                    and (e.importer, e.imported) not in seen:
                seen.add((e.importer, e.imported))
                where = e.path.relative_to(base) if e.path.is_relative_to(base) else e.path
                lines.append(f"    {e.importer} -> {e.imported} ({where}:{e.line})")
    return "\n".join(lines)


def test_no_import_cycle_between_modules(edges):
    cycles = import_cycles(edges)
    assert not cycles, ("import cycles (break each by moving what both sides need into a lower module):\n"
                        + _cycle_report(cycles, edges, ROOT.parent))


def test_the_cycle_check_detects_a_planted_function_level_cycle(tmp_path):
    root, found = _plant(tmp_path, {
        "base.py": "X = 1\n",
        "low/__init__.py": "",
        "low/a.py": "from plant.low.b import g\n\ndef f():\n    return g()\n",
        "low/b.py": "def g():\n    from plant.low import c\n    return c.h()\n",
        "low/c.py": "def h():\n    import plant.low.a\n    return plant.low.a\n",
        "top.py": "from plant.low.a import f\nfrom plant.base import X\n",
    })
    assert import_cycles(found) == [["plant.low.a", "plant.low.b", "plant.low.c"]]
    report = _cycle_report(import_cycles(found), found, root.parent)
    assert "plant.low.b -> plant.low.c (plant/low/b.py:2)" in report
    # the same package without the function-level import has no cycle
    (root / "low" / "c.py").write_text("def h():\n    return 0\n")
    mods = {_module_name(p, root, "plant"): p for p in sorted(root.rglob("*.py"))}
    assert import_cycles(collect_imports("plant", mods, {})) == []
