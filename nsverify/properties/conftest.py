"""Load nsverify's pytest plugin when the suite runs without the installed entry point (``python -m pytest
--pyargs nsverify.properties`` from a source tree on PYTHONPATH); pytest skips this when the entry point named
``nsverify.pytest_plugin`` already registered it."""

pytest_plugins = ["nsverify.pytest_plugin"]
