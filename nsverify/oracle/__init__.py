"""The exact Clarke oracle: does AD's output lie in the Clarke subdifferential?  Exact verdicts or "unknown".

One path, one module per stage (docs/oracle.md draws it)::

    fn, w --> Evaluation --> pieces --> certificate --> Verdict
              interp         pieces     certificates    verdict      (api: check_gradient, check_module)

Below the path: ``numbers`` (exact scalars, intervals, affine forms), ``jsonio`` (their JSON form), ``context``
(evaluation context and kink/tie sites), ``tensor`` (the ExactTensor subclass, op dispatch, float shadow), the
exact ATen ops in ``ops`` (one record per op, forward and backward, one module per area, collected in
``ops.table.TABLE``; the kink and tie rules come from :mod:`nsverify.registry`), ``cones`` (open-cone LPs
with exact certificates), ``membership`` (convex-hull membership and separation).  Exact linear algebra is
:mod:`nsverify.rational`.  Outside the package: the papers' known answers and the pruning program ``kink_net``
(:mod:`nsverify.papers.cases`), and the independent reference the tests compare the oracle with
(:mod:`nsverify.reference.fuzz`).
"""

from __future__ import annotations

from nsverify.oracle.api import check_gradient, check_module
from nsverify.oracle.certificates import verify_certificate
from nsverify.oracle.interp import (
    Evaluation,
    exact_backprop,
    exact_forward,
    exact_gradient,
    exact_module_backprop,
    exact_module_gradient,
    float_autograd,
    module_function,
)
from nsverify.oracle.pieces import kink_rows, naive_enumeration_lps
from nsverify.oracle.verdict import Verdict

__all__ = [
    "check_gradient",
    "check_module",
    "Evaluation",
    "exact_backprop",
    "exact_module_backprop",
    "exact_gradient",
    "exact_module_gradient",
    "exact_forward",
    "module_function",
    "float_autograd",
    "kink_rows",
    "naive_enumeration_lps",
    "Verdict",
    "verify_certificate",
]
