"""The cost of nonsmooth AD (Boustany's thesis, Ch.2).

Submodules (import what you need; heavy ones import torch lazily):

- :mod:`.counting`  cost model (c_nonlin, c_ReLU) and the operation counter;
- :mod:`.ops`       the dictionary: g_i and the joint programs gd_i, written over counted primitives;
- :mod:`.program`   programs as in Algorithm 1 (predecessor lists), validation;
- :mod:`.ad`        Algorithm 1, 1' and 2: evaluation, backprop and forprop with counters, eqs 2.10/2.11;
- :mod:`.tables`    Tables 2.1-2.3 recomputed from the interpreter, with failing published bounds marked;
- :mod:`.randprog`  random programs (for property tests) and MLP programs;
- :mod:`.torch_ref` the same programs in torch, for autograd comparisons;
- :mod:`.hadamard`  Theorem 4 (directional derivatives at a kink) and its cost-scaling measurement;
- :mod:`.relunet`, :mod:`.sat`, :mod:`.bouligand`, :mod:`.prop4`, :mod:`.hardness`:
  hardness (Thm 5-6, Prop 4);
- :mod:`.measure`   wall-clock and FLOP ratios (fwd+bwd)/fwd for MLPs and CNNs.
"""

from nsverify.papers.costs.ad import backprop, evaluate, forprop
from nsverify.papers.costs.counting import UNIT, CostModel, OpCounter
from nsverify.papers.costs.program import OpNode, Program

__all__ = ["CostModel", "UNIT", "OpCounter", "OpNode", "Program", "evaluate", "backprop", "forprop"]
