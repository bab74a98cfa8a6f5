"""Bifurcation and compensation zones (Bertoin et al.; Boustany Ch.3): exact classification, the numerical
backprop variation D, thresholds, and a Monte Carlo volume estimator.  See docs/zones.md."""
from nsverify.papers.zones.rules import (
    MINIMAL,
    NATIVE,
    PROGRAMS,
    MaxPool2dS,
    ReLUS,
    as_program,
    hybrid_program,
    program_label,
    switchable,
    use_rule,
)

__all__ = ["PROGRAMS", "NATIVE", "MINIMAL", "ReLUS", "MaxPool2dS", "use_rule", "switchable", "as_program",
           "hybrid_program", "program_label"]
