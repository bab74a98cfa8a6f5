"""JAX's conventions against the recorded baseline of its release (when jax is installed: ``pip install
'nsverify[jax]'``; skipped otherwise), and every recorded JAX cell judged again by the registry.

The JAX runs ship in ``nsverify/data/conventions/jax/`` (``nsverify releases --framework jax``). On a recorded
release every cell measured here must equal the recorded one; on a newer release a cell that differs is reported
as a release change and must still lie in the Clarke set. The recorded cells' rule names and Clarke statuses are
recomputed from their derivatives with the registry's exact pieces (no jax needed): a registry edit that moves a
Clarke set or a rule is caught against every recorded JAX release."""
import importlib.util
from fractions import Fraction

import pytest

from nsverify.conventions import baselines, judge
from nsverify.conventions.matrix import build_cases

JAX_DIR = baselines.DATA_DIRS["jax"]
RECORDED = baselines.recorded_releases(JAX_DIR)


@pytest.mark.skipif(not RECORDED, reason="no recorded JAX releases in nsverify/data/conventions/jax")
@pytest.mark.parametrize("release", RECORDED)
def test_recorded_jax_cells_are_judged_by_the_registry(release):
    run = baselines.load_recorded(release, JAX_DIR)
    cases = {(c.op, c.label): c for c in build_cases(framework="jax")}
    wrong = []
    for key, r in run.results.items():
        case = cases.get(key[:2])
        if case is None or r.error:
            continue  # an op or case added to the registry later, or a cell JAX refused
        v = judge.judge(case, [Fraction(x) for x in r.derivative], r.dtype, None)
        if (v.rule, v.in_clarke) != (r.rule, r.in_clarke):
            wrong.append(f"{key}: recorded {r.rule}/{r.in_clarke}, registry now {v.rule}/{v.in_clarke}")
    assert not wrong, f"jax {release}: " + "; ".join(wrong[:5])


@pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="jax is not installed: pip install "
                    "'nsverify[jax]'")
def test_jax_conventions_match_the_baseline_of_the_installed_release(nsverify_release_note):
    from nsverify.conventions import jax_matrix as jm

    installed = baselines.release_of(jm.versions()["jax"])
    base = baselines.default_baseline(installed, JAX_DIR)
    if base is None:
        pytest.skip(f"no recorded JAX release at or below jax {installed} (recorded: {', '.join(RECORDED)})")
    run = baselines.load_recorded(base, JAX_DIR)
    results = jm.run_matrix(None, ["float64"], ["grad", "jit"])
    chs, absent = baselines.compare_with_baseline(results, run, installed, JAX_DIR)
    recorded_ops = {k[0] for k in run.results}
    assert not [k for k in absent if k[0] in recorded_ops], "cells of recorded ops missing from the baseline"
    if base == installed:
        assert not chs, f"jax {installed} differs from its own recorded conventions:\n" + "\n".join(
            c.text() for c in chs)
        return
    for g in baselines.group(chs):
        nsverify_release_note(f"JAX change vs recorded {base}: {g['change'].op} [{g['change'].case}]", g["text"])
    faults = [c for c in chs if c.after.in_clarke == "no"]
    assert not faults, "JAX release changes that leave the Clarke set:\n" + "\n".join(c.text() for c in faults)
