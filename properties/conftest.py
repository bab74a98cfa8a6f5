"""Load nsverify's pytest plugin when the suite runs without the installed entry point (``python -m pytest
properties`` in a clone with the source tree on PYTHONPATH); pytest skips this when the entry point named
``nsverify.pytest_plugin`` already registered it."""

pytest_plugins = ["nsverify.pytest_plugin"]
