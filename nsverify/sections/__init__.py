"""Nightly report sections. Every module here registers one or more sections with
:func:`nsverify.report.section`; :func:`load_sections` imports them all. The sections sit above the report
(they import :mod:`nsverify.report`, never the reverse): the ``nightly`` command (:mod:`nsverify.sections.cli`)
hands them to the report's runner."""
from __future__ import annotations

import importlib
import pkgutil

from nsverify.report import Section, registered_sections

#: modules of this package that register no section
NOT_SECTIONS = {"cli"}


def load_sections() -> list[Section]:
    """Import every section module of this package and return the registered sections in report order."""
    for mod in pkgutil.iter_modules(__path__):
        if mod.name not in NOT_SECTIONS:
            importlib.import_module(f"{__name__}.{mod.name}")
    return registered_sections()
