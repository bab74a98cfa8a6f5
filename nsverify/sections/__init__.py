"""Nightly report sections. Every module here registers one or more sections with
:func:`nsverify.report.section`; :func:`nsverify.report.load_sections` imports them all."""
