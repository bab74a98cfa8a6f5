"""Bifurcation and compensation zones (Bertoin et al.; Boustany Ch.3): exact classification, the numerical
backprop variation D, thresholds, and a Monte Carlo volume estimator.  See docs/zones.md."""
from nsverify.papers.zones.rules import MINIMAL, NATIVE, PROGRAMS, BackwardRule, MaxPool2dS, ReLUS, switchable, use_rule

__all__ = ["BackwardRule", "PROGRAMS", "NATIVE", "MINIMAL", "ReLUS", "MaxPool2dS", "use_rule", "switchable"]
