"""The oracle against an independent reference: random programs at exact ties (nsverify.oracle.fuzz).

The reference evaluates each program with its own dual numbers (exact Fractions, or mpmath at 60 digits when a
smooth op appears) and never touches the exact interpreter; the first test keeps it that way.  The default run
is small (a few seeds, short time limits); ``-m slow`` runs a few hundred programs."""

from __future__ import annotations

import ast
import dataclasses
import random
from fractions import Fraction as F
from pathlib import Path

import pytest

import nsverify
from nsverify.oracle import fuzz
from nsverify.oracle.fuzz import Kink, Leaf, check_program, run_fuzz, summarize

#: modules of the exact interpreter and its arithmetic, which the reference must not import
INTERPRETER = ("nsverify.oracle.", "nsverify.rational", "nsverify.registry", "nsverify.ad")


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
    return out


def test_reference_shares_no_code_with_the_interpreter():
    mods = _imports(Path(fuzz.__file__))
    assert "nsverify" in mods  # the public check_gradient, called as a user would
    assert not [m for m in mods if m.startswith(INTERPRETER)], mods


@pytest.mark.parametrize("seed", range(3))
def test_piecewise_affine_programs_agree_with_the_reference(seed):
    s = summarize(run_fuzz(6, seed=seed, depth=3, samples=5, smooth=False, time_limit=4.0))
    assert s["disagreements"] == 0, s
    assert s["nearby_points"] >= 20, s  # the comparison ran on generic points
    assert s["member"] + s["not_member"] >= 3, s  # and on decided verdicts


@pytest.mark.parametrize("seed", range(2))
def test_programs_with_smooth_ops_agree_with_the_reference(seed):
    s = summarize(run_fuzz(6, seed=100 + seed, depth=3, samples=5, smooth=True, time_limit=4.0))
    assert s["disagreements"] == 0, s
    assert s["nearby_points"] >= 20, s


def _abs_program():
    """|w0| built by the fuzz generator's own nodes: two Bouligand vertices, -1 and 1."""
    return Kink("abs", Leaf((1,), 0))


@pytest.mark.parametrize("tamper", ["drop_vertex", "flip_status"])
def test_the_comparison_catches_a_wrong_oracle(monkeypatch, tamper):
    """The fuzz test can fail: an oracle that forgets a vertex, or calls a member not_member, is flagged."""
    real = nsverify.check_gradient

    def wrong(fn, w, ad=None, **kw):
        v = real(fn, w, ad=ad, **kw)
        if tamper == "drop_vertex":
            return dataclasses.replace(v, bouligand=[v.bouligand[0]])
        return dataclasses.replace(v, status="not_member" if v.status == "member" else "member")

    expr = _abs_program()
    assert check_program(expr, [F(0)], random.Random(0), samples=6).disagreements == []
    monkeypatch.setattr(nsverify, "check_gradient", wrong)
    bad = check_program(expr, [F(0)], random.Random(0), samples=6).disagreements
    assert bad, tamper


@pytest.mark.slow
def test_fuzz_many():
    s = summarize(run_fuzz(300, seed=99, depth=4, samples=8))
    assert s["disagreements"] == 0, s
