"""The exact Clarke oracle: does AD's output lie in the Clarke subdifferential?  Exact verdicts or "unknown".

Modules: ``numbers`` (exact scalars, intervals, affine forms), ``linalg`` (Fraction linear algebra),
``tensor`` (the ExactTensor subclass and dispatch), ``ops_linear``/``ops_nonsmooth``/``ops_smooth`` (exact
ATen ops), ``semantics`` (nonsmooth semantics from the registry), ``interp`` (exact interpreter and exact AD),
``cones`` (LP cone tests with exact certificates), ``pieces`` (piece enumeration), ``membership`` (convex-hull
membership with certificates), ``verdict`` (the answer), ``api`` (check_gradient / check_module).
See docs/oracle.md.
"""

from __future__ import annotations

from .api import check_gradient, check_module, float_autograd
from .interp import exact_forward, exact_gradient, exact_module_gradient, module_function
from .verdict import Verdict, verify_certificate

__all__ = [
    "check_gradient",
    "check_module",
    "exact_gradient",
    "exact_module_gradient",
    "exact_forward",
    "module_function",
    "float_autograd",
    "Verdict",
    "verify_certificate",
]
