"""nsverify: what automatic differentiation really computes at nonsmooth points, and how much it matters."""
from __future__ import annotations

__version__ = "0.1.0"

from nsverify.errors import NsverifyError  # noqa: F401

_LAZY = {
    "check_gradient": ("nsverify.oracle", "check_gradient"),
    "check_module": ("nsverify.oracle", "check_module"),
}


def __getattr__(name):  # lazy: importing nsverify stays cheap and needs no cvxpy
    if name in _LAZY:
        import importlib

        mod, attr = _LAZY[name]
        return getattr(importlib.import_module(mod), attr)
    if not name.startswith("_"):  # submodules on first use: nsverify.oracle, nsverify.ad, ...
        import importlib
        import importlib.util

        if importlib.util.find_spec(f"{__name__}.{name}") is not None:
            return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module 'nsverify' has no attribute {name!r}")
