"""Inertial optimizers from Boustany's thesis (Ch. 4) as ``torch.optim.Optimizer`` subclasses.

- :class:`INNAprop` (Algorithm 3), :class:`INNA` (Table 4.5), :class:`DINAdam` (Algorithm 6, sign corrected),
  :class:`INNApropMomentum` (Section 4.6.2).
- :mod:`nsverify.papers.innaprop.forms`: float64 reference recursions (mechanical, psi, memory-saving, momentum) used by
  the equivalence tests and the precision study.
"""
from nsverify.optim._base import InertialOptimizer, OptimizerConfigError
from nsverify.optim.dinadam import DINAdam
from nsverify.optim.inna import INNA
from nsverify.optim.innaprop import INNAprop
from nsverify.optim.momentum import INNApropMomentum

__all__ = ["INNAprop", "INNA", "DINAdam", "INNApropMomentum", "InertialOptimizer", "OptimizerConfigError"]
