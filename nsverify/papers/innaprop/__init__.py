"""Convergence harness: optimizers on nonsmooth problems with known optima, with seeds and intervals.

Problems (:mod:`.problems`): LASSO, hinge SVM, least absolute deviations, max of affine functions (f* by
cvxpy), teacher-student ReLU regression (f* = 0) and a digits MLP (test accuracy). Metrics (:mod:`.metrics`): gap
f - f*, steps to a target, steps for A to match B's best (Table 4.4), final accuracy; mean and 95% CI over
seeds (:func:`nsverify.claims.stats.mean_ci`).
"""
from nsverify.papers.innaprop.harness import OPTIMIZERS, compare, precision_study, run_one
from nsverify.papers.innaprop.metrics import steps_to_match, steps_to_target
from nsverify.papers.innaprop.problems import PROBLEMS, Problem, make_problem

__all__ = ["OPTIMIZERS", "PROBLEMS", "Problem", "compare", "make_problem", "precision_study",
           "run_one", "steps_to_match", "steps_to_target"]
