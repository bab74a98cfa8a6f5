"""Soundness and completeness of the piece enumeration on random piecewise-affine programs at exact ties."""

from __future__ import annotations

import random

import pytest

from nsverify.oracle.fuzz import check_one, run_fuzz, summarize


@pytest.mark.parametrize("seed", range(4))
def test_fuzz_sound_complete_never_unknown(seed):
    results = run_fuzz(10, seed=seed, depth=3, samples=6)
    s = summarize(results)
    assert s["unknown"] == 0 and s["inexact"] == 0, [r for r in results if r.status == "unknown"]
    assert s["unsound"] == 0, [r for r in results if r.unsound]
    assert s["unrealised"] == 0, [r for r in results if r.unrealised]
    assert s["nearby_points"] >= 30  # the check actually ran on generic points


def test_fuzz_multi_dimensional_deeper():
    rng = random.Random(123)
    for _ in range(5):
        r = check_one(rng, n=3, depth=4, samples=6)
        assert r.status != "unknown" and r.exact and r.unsound == 0 and r.unrealised == 0, r


@pytest.mark.slow
def test_fuzz_many():
    s = summarize(run_fuzz(300, seed=99, depth=4, samples=8))
    assert s["unknown"] == s["unsound"] == s["unrealised"] == 0, s
