"""Root conftest: load nsverify's pytest plugin when nsverify is not installed (development checkout).

When nsverify is installed, its ``pytest11`` entry point (named exactly ``nsverify.pytest_plugin``) registers
the plugin first and pytest skips this declaration, so the plugin is never registered twice. The plugin treats
this checkout's ``tests/`` and ``properties/`` (the property suite, shipped as ``nsverify.properties``) as
nsverify's own suite and applies its Hypothesis profile to them (docs/properties.md)."""

pytest_plugins = ["nsverify.pytest_plugin"]
