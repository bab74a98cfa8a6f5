"""The registry's modules form a DAG: no import cycle among ``nsverify/registry/*.py``, counting every ``import``
and ``from ... import`` at any level (inside functions too), as issue 33 asks. The rule vocabulary
(``rules.py``) sits below the entry types, the table and the entries; the mapping op -> rule (``Rules``), which
validates its keys against the table, lives above the table in ``lookup.py``.

The imports are read by the package-wide reader of ``tests/test_layers.py`` (which also checks its cycle finder on
a planted package); this file pins the registry's own order."""
from __future__ import annotations

import nsverify
from tests.test_layers import PACKAGE, RANKS, ROOT, collect_imports, import_cycles, source_files

REGISTRY = "nsverify.registry"


def registry_edges() -> list:
    """The imports of one registry module by another (any level, relative ones resolved)."""
    edges = collect_imports(PACKAGE, source_files(PACKAGE, ROOT, RANKS), nsverify._PUBLIC)
    inside = (REGISTRY, REGISTRY + ".")
    return [e for e in edges if e.importer.startswith(inside) and e.imported.startswith(inside)]


def test_the_registry_modules_form_a_dag():
    cycles = import_cycles(registry_edges())
    assert not cycles, (f"import cycle in nsverify/registry: {cycles} (function-level imports count): move what "
                        "two modules share into a lower module")


def test_the_reader_sees_function_level_imports():
    pairs = {(e.importer.rsplit(".", 1)[-1], e.imported.rsplit(".", 1)[-1]) for e in registry_edges()}
    assert ("entries", "table") in pairs  # leaky_relu_for and friends import table.get inside the function
    assert ("rules", "lookup") not in pairs
