"""The conventions matrix (:mod:`~nsverify.conventions.matrix`): what PyTorch's AD returns at every kink and tie of
the registry; its baselines per torch release, shipped as data (:mod:`~nsverify.conventions.baselines`); and the
matrix across releases, one environment per release (:mod:`~nsverify.conventions.releases`,
:mod:`~nsverify.conventions.envs`); its cells in child processes, a crash becoming a crashed cell
(:mod:`~nsverify.conventions.isolation`). How a derivative is judged (its rule, its Clarke status) is one module
for every framework (:mod:`~nsverify.conventions.judge`); JAX's matrix is :mod:`~nsverify.conventions.jax_matrix`
(jax imported only when it runs). ``nsverify conventions`` and ``nsverify releases`` are in
:mod:`~nsverify.conventions.cli` (which this package does not import: the command line sits above the matrix).
The conventions' own claims are one table, judged in :mod:`~nsverify.conventions.claims`; standalone scripts of one
cell (a crashed cell's, a release change's) come from :mod:`~nsverify.conventions.scripts`. The singular-point
cells (NaN and inf at sqrt, norms, normalize, std, atan2, ...: their class, exact Clarke set and PyTorch's documented
rule) are one table in :mod:`~nsverify.conventions.singular` (``nsverify conventions --singular``, docs/nan.md)."""
from __future__ import annotations

from nsverify.conventions.judge import KINK_CANDIDATES, classify
from nsverify.conventions.matrix import (
    MODES,
    SCHEMA,
    Case,
    Result,
    batch_crashes,
    build_cases,
    crashed,
    crashed_result,
    differences,
    elementwise_cases,
    evaluate_batch,
    evaluate_case,
    format_table,
    metrics,
    provenance,
    result_from_json,
    run_matrix,
    selection_cases,
    to_json,
)

__all__ = ["KINK_CANDIDATES", "MODES", "SCHEMA", "Case", "Result", "batch_crashes", "build_cases", "classify",
           "crashed", "crashed_result", "differences", "elementwise_cases", "evaluate_batch", "evaluate_case",
           "format_table", "metrics", "provenance", "result_from_json", "run_matrix", "selection_cases", "to_json"]
