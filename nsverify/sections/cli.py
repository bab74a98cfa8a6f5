"""``nsverify nightly``: the report's ``nightly`` command (:func:`nsverify.report.cli.register_nightly`) over the
sections of this package (:func:`nsverify.sections.load_sections`)."""
from __future__ import annotations

from nsverify import sections
from nsverify.report.cli import register_nightly


def register_cli(sub) -> None:
    # sections.load_sections is looked up when the command runs, so a test can stand in its own sections
    register_nightly(sub, lambda: sections.load_sections())
