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
from importlib import import_module as _import_module
from importlib.util import find_spec as _find_spec

__version__ = "0.1.0"

from nsverify.errors import NonFiniteError, NsverifyError, TooManyPieces, UnknownOpError, UnsupportedOpError

#: public name -> (module, attribute): the names :data:`__all__` promises. Subpackages are not in it: they are
#: namespaces, imported by their full name (``import nsverify.registry``); ``nsverify.<subpackage>`` also resolves
#: on first use, for interactive work.
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
    # AD variants: one forward, the backward rule of your choice at kinks and ties
    "backward_rules": ("nsverify.ad", "backward_rules"),
    # a layer's activation: a registry op with PyTorch's rules, or an AD variant of one
    "Activation": ("nsverify.ad", "Activation"),
    # the training-time NaN guard: which op made a NaN/inf gradient, whether it is a bug, what it should be
    "nan_guard": ("nsverify.guard", "nan_guard"),
}
__all__ = ["__version__", "NsverifyError", "UnknownOpError", "UnsupportedOpError", "NonFiniteError", "TooManyPieces",
           *_PUBLIC]


def __getattr__(name):
    if name in _PUBLIC:
        mod, attr = _PUBLIC[name]
        value = getattr(_import_module(mod), attr)
    elif not name.startswith("_") and _find_spec(f"nsverify.{name}") is not None:
        value = _import_module(f"nsverify.{name}")  # a subpackage used as nsverify.<name>
    else:
        raise AttributeError(
            f"module 'nsverify' has no attribute {name!r}; the public API is: {', '.join(sorted(__all__))} "
            "(subpackages and modules are imported by their full name, e.g. import nsverify.registry)")
    globals()[name] = value
    return value


def __dir__():
    return sorted(__all__)
