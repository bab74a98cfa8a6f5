"""The exact Clarke oracle: does AD's output lie in the Clarke subdifferential?  Exact verdicts or "unknown".

Modules: ``numbers`` (exact scalars, intervals, affine forms), ``linalg`` (Fraction linear algebra),
``tensor`` (the ExactTensor subclass and dispatch), ``ops_linear`` / ``ops_kinks`` / ``ops_select`` /
``ops_smooth`` (exact ATen ops), ``backprop`` (PyTorch's backward ops evaluated exactly: reverse-mode exact
AD), ``semantics`` (nonsmooth semantics from the registry), ``interp`` (exact interpreter, forward-mode exact
AD), ``cones`` (LP cone tests with exact certificates), ``pieces`` (piece enumeration), ``membership``
(convex-hull membership with certificates), ``verdict`` (the answer), ``api`` (check_gradient /
check_module), ``cases`` (known answers from the papers, and the pruning program ``kink_net``), ``fuzz``
(random piecewise-affine programs).  See docs/oracle.md.
"""

from __future__ import annotations

from nsverify.oracle.api import check_gradient, check_module, float_autograd
from nsverify.oracle.backprop import exact_backprop, exact_module_backprop
from nsverify.oracle.interp import exact_forward, exact_gradient, exact_module_gradient, module_function
from nsverify.oracle.verdict import Verdict, verify_certificate

__all__ = [
    "exact_backprop",
    "exact_module_backprop",
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
