"""nsverify: what automatic differentiation really computes at nonsmooth points, and how much it matters.

The public API is :data:`__all__`; everything else is internal and may change. Attributes load on first use,
so ``import nsverify`` stays cheap (no cvxpy, no mpmath until the oracle is used)::

    import nsverify
    v = nsverify.check_gradient(fn, w)            # exact Clarke-membership verdict with a certificate
    nsverify.verify_certificate(v.to_json())      # re-check it from the JSON alone
    nsverify.registry.get("relu")                 # the table of nonsmooth primitives and PyTorch's rules
    nsverify.parse_rule("hybrid=0.5")             # the rule vocabulary (what AD picks at a kink or tie)
    nsverify.strategies.networks()                # Hypothesis generators of networks at exact ties
    with nsverify.ad.backward_rules(...): ...     # AD variants with a chosen derivative at kinks and ties

See docs/architecture.md for where each concern lives.
"""
from __future__ import annotations

import importlib

__version__ = "0.1.0"

from nsverify.errors import NsverifyError

#: public name -> (module, attribute or None for the module itself)
_PUBLIC = {
    # the exact oracle
    "check_gradient": ("nsverify.oracle", "check_gradient"),
    "check_module": ("nsverify.oracle", "check_module"),
    "verify_certificate": ("nsverify.oracle", "verify_certificate"),
    "Verdict": ("nsverify.oracle", "Verdict"),
    # the rule vocabulary
    "Rule": ("nsverify.registry.rules", "Rule"),
    "parse_rule": ("nsverify.registry.rules", "parse_rule"),
    "Rules": ("nsverify.registry.lookup", "Rules"),
    "parse_rules": ("nsverify.registry.lookup", "parse_rules"),
    # subpackages users call directly
    "oracle": ("nsverify.oracle", None),
    "registry": ("nsverify.registry", None),
    "strategies": ("nsverify.strategies", None),
    "ad": ("nsverify.ad", None),
    "conventions": ("nsverify.conventions", None),
    "errors": ("nsverify.errors", None),
    "report": ("nsverify.report", None),
    "papers": ("nsverify.papers", None),
    "optim": ("nsverify.optim", None),
    "workloads": ("nsverify.workloads", None),
}

__all__ = ["__version__", "NsverifyError", *_PUBLIC]


def __getattr__(name):
    try:
        mod, attr = _PUBLIC[name]
    except KeyError:
        raise AttributeError(
            f"module 'nsverify' has no attribute {name!r}; the public API is: {', '.join(sorted(__all__))} "
            "(submodules not listed there are internal: import them by their full name)") from None
    module = importlib.import_module(mod)
    value = module if attr is None else getattr(module, attr)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
