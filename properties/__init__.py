"""nsverify's property suite. It lives in the repository's top-level ``properties/`` and ships inside the package
as ``nsverify.properties`` (pyproject.toml maps the one copy with setuptools' ``package-dir``): run it with
``python -m pytest properties`` in a clone, ``python -m pytest --pyargs nsverify.properties`` where nsverify is
installed (docs/properties.md)."""
