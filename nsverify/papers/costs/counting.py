"""Cost model and operation counter (Boustany, Ch.2: Sec. 2.4.1, Assumption 1, Table 2.2/2.3 conventions).

Primitive operations and their costs:

=========  =====================================  ==============
primitive  meaning                                cost
=========  =====================================  ==============
add        a + b                                  1
mul        a * b                                  1
addc       a + c (c a constant)                   1
mulc       c * a                                  1
inv        1 / a                                  c_nonlin
exp, log   smooth nonlinear functions             c_nonlin
sign       sign test of one number (ReLU, ReLU')  c_relu
compare    comparison of two numbers              c_relu
=========  =====================================  ==============

With ``c_nonlin = c_relu = 1`` this is Assumption 1 (every operation of D'_ReLU has unit cost).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

from nsverify.errors import NsverifyError

PRIMITIVES = ("add", "mul", "addc", "mulc", "inv", "exp", "log", "sign", "compare")


@dataclass(frozen=True)
class CostModel:
    c_nonlin: float = 1.0
    c_relu: float = 1.0

    def __post_init__(self):
        for name in ("c_nonlin", "c_relu"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise NsverifyError(
                    f"CostModel.{name}={v!r} must be a finite number >= 0 "
                    f"(the paper uses c_nonlin >= 1, c_ReLU >= 0)."
                )

    def cost(self, primitive: str) -> float:
        if primitive in ("add", "mul", "addc", "mulc"):
            return 1.0
        if primitive in ("inv", "exp", "log"):
            return float(self.c_nonlin)
        if primitive in ("sign", "compare"):
            return float(self.c_relu)
        raise NsverifyError(f"unknown primitive {primitive!r}; known: {', '.join(PRIMITIVES)}")


UNIT = CostModel(1.0, 1.0)


@dataclass
class OpCounter:
    """Counts primitive operations as they execute and sums their cost under ``model``."""

    model: CostModel = UNIT
    counts: Counter = field(default_factory=Counter)
    cost: float = 0.0

    def tick(self, primitive: str, k: int = 1) -> None:
        self.counts[primitive] += k
        self.cost += k * self.model.cost(primitive)

    # --- counted arithmetic (number-generic: float, Fraction, mpmath) ---
    def add(self, a, b):
        self.tick("add")
        return a + b

    def mul(self, a, b):
        self.tick("mul")
        return a * b

    def addc(self, a, c):
        self.tick("addc")
        return a + c

    def mulc(self, a, c):
        self.tick("mulc")
        return a * c

    def inv(self, a):
        self.tick("inv")
        if a == 0:
            raise NsverifyError(
                "inv(0): the program divides by zero at this input; choose an input where "
                "every inv argument is nonzero."
            )
        return 1 / a

    def exp(self, a):
        self.tick("exp")
        return math.exp(a)

    def log(self, a):
        self.tick("log")
        if a <= 0:
            raise NsverifyError(
                f"log({a}) outside the domain: choose inputs where every log argument is > 0."
            )
        return math.log(a)

    def sign_positive(self, a) -> bool:
        """One sign test: True iff a > 0 (so ReLU'(0) = 0, the thesis' convention, Example 1)."""
        self.tick("sign")
        return a > 0

    def greater(self, a, b) -> bool:
        """One comparison: True iff a > b (ties keep the earlier argument)."""
        self.tick("compare")
        return a > b
