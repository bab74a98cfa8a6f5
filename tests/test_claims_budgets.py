"""Issue 38: every full-mode claim can decide -- its n_required, in its independent unit, is reached by the
full-mode budget -- or its declaration says why not (``full mode cannot reach``) or that n_required depends on
the measurement (``n_required depends on``: a spread, a design effect, the premise cases found)."""
from __future__ import annotations

import importlib

import pytest

from nsverify.claims import decide
from nsverify.claims.record import ClaimSpec

MODULES = ("nsverify.papers.zones.repro", "nsverify.papers.park.repro", "nsverify.papers.costs.repro",
           "nsverify.papers.innaprop.repro", "nsverify.papers.arnekvist.repro", "nsverify.papers.despres.repro",
           "nsverify.papers.known_answers", "nsverify.conventions.claims")
#: rules that decide on one deterministic run (n_required 1) or never decide
NO_SAMPLE = {"exact", "robust", "illustration", "not_run"}


def _specs() -> dict[str, ClaimSpec]:
    out = {}
    for m in MODULES:
        out.update({s.id: s for s in importlib.import_module(m).CLAIMS})
    return out


def _full_design() -> dict[str, tuple[int, int]]:
    """(n_required at the full-mode design, the full-mode budget), both in the claim's unit, for every claim whose
    n_required the design fixes. Share rules at total intra-draw correlation (every pair of a draw alike: the
    largest n_required the design effect can give)."""
    from nsverify.papers.zones import repro as z
    from nsverify.sections import park as park_sec
    from nsverify.sections import zones as zs

    full = zs.FULL
    m33, r33 = full["fig33"]
    m32, r32 = full["table"]["datasets"]["natural"]
    alike = lambda m, r, share: [(r, r)] * round(m * share) + [(0, r)] * (m - round(m * share))  # noqa: E731
    never = decide.never(0, 0).n_required  # 32 at the 5% alternative
    bs, tdraws = full["trend"]["batch_sizes"], full["trend"]["draws"]
    dd, db = full["dich"]["draws"], full["dich"]["batches"]
    seeds = len(full["sweep"]["seeds"])
    big = sum(b > 1e3 for b in full["sweep"]["betas"]) * seeds
    small32 = sum(b <= 1e3 for b in full["sweep"]["betas"]) * seeds
    small16 = sum(b <= 1e2 for b in full["sweep"]["betas"]) * seeds
    sg = full["sgd"]
    return {
        "zones/fig3.3-rerun-zero": (never, m33), "zones/fig3.3-positive": (never, m33),
        "zones/fig3.3-bulk": (decide.share_is(m33 * r33, m33 * r33, z.FIG33_BULK, z.FIG33_DELTA,
                                              clusters=alike(m33, r33, 1.0)).n_required, m33),
        "zones/fig3.3-tail": (decide.occurs(0, 0, z.FIG33_TAIL).n_required, m33),
        "zones/table3.2-64bit": (never, m32), "zones/table3.2-16bit": (never, m32),
        "zones/table3.2-bf16": (never, m32), "zones/table3.2-draws": (never, m32),
        "zones/table3.2-32bit": (decide.share_is(m32 * r32 // 2, m32 * r32, z.TABLE32_FP32, z.TABLE32_DELTA,
                                                 clusters=alike(m32, r32, 0.5)).n_required, m32),
        "zones/fig3.6-batch-size": (decide.trend_n_required(bs), len(bs) * tdraws),
        "bertoin/appD-16bit-often": (decide.share_above(dd * db, dd * db, 0.5, z.BERTOIN_16_SHARE,
                                                        clusters=alike(dd, db, 1.0)).n_required, dd),
        "bertoin/appB-64bit-never": (never, dd),
        "bertoin/appB-64bit-sgd-together": (decide.never(0, 0, z.FIG1_PAIR_SHARE).n_required, sg["pairs64"]),
        "bertoin/fig1-32bit-sgd-separate": (decide.occurs(0, 0, z.FIG1_PAPER_LOWER).n_required, sg["pairs32"]),
        "bertoin/appD-16bit-sgd-separate": (decide.share_above(0, 0, z.SIXTEEN_PAIR_BOUND,
                                                               z.BERTOIN_16_SHARE).n_required, sg["pairs16"]),
        "zones/sec3.4.2-stable": (decide.never(0, 0, z.SWEEP_P_ALT).n_required, small32),
        "zones/sec3.4.2-stable-bf16": (decide.never(0, 0, z.SWEEP_P_ALT).n_required, small16),
        "zones/sec3.4.2-unstable": (decide.occurs(0, 0, z.SWEEP_P_UNSTABLE_32).n_required, big),
        "zones/sec3.4.2-unstable-bf16": (decide.occurs(0, 0, z.SWEEP_P_UNSTABLE_16).n_required, big),
        # the costs section's full sizes (nsverify/sections/costs.py: 400 programs, 100 formulas, 500 networks)
        "costs/corollary2": (never, 400), "costs/theorem6": (never, 100), "costs/proposition4": (never, 500),
        # the oracle section's full size (nsverify/sections/oracle.py: despres_cases 200)
        "despres/sec5-ad-is-associated": (never, 200),
        "park/table1-lemma": (1, park_sec.FULL["lemma_examples"]),
    }


def test_full_mode_reaches_every_design_determined_n_required():
    short = {cid: (need, budget) for cid, (need, budget) in _full_design().items()
             if need is None or need > budget}
    assert not short, short


def test_every_other_full_mode_claim_says_why_its_n_required_is_not_checked():
    checked = set(_full_design())
    missing = []
    for cid, spec in _specs().items():
        if spec.rule in NO_SAMPLE or cid in checked:
            continue
        if "full mode cannot reach" not in spec.budget and "n_required depends on" not in spec.budget:
            missing.append(cid)
    assert not missing, missing


def test_the_32_bit_separation_budget_is_the_one_its_declaration_gives():
    """Fig. 1's separation: n_required 32 pairs at the paper's lower bound 0.05 (power 1 - 0.95^32 = 0.81, by
    hand), which the full mode runs, as the declaration says."""
    from nsverify.papers.zones import repro as z
    from nsverify.sections import zones as zs

    assert decide.occurs(0, 0, z.FIG1_PAPER_LOWER).n_required == 32 and 1 - 0.95 ** 32 >= 0.8 > 1 - 0.95 ** 31
    assert zs.FULL["sgd"]["pairs32"] == 32 and "32 in full mode" in _specs()["bertoin/fig1-32bit-sgd-separate"].budget


@pytest.mark.parametrize("cid", ["bertoin/fig1-32bit-some", "park/scenario1-theorem5", "park/table2-nontrivial-ties"])
def test_the_unreachable_budgets_are_the_ones_the_docs_name(cid):
    from pathlib import Path

    assert "full mode cannot reach" in _specs()[cid].budget
    doc = (Path(__file__).resolve().parents[1] / "docs" / "report.md").read_text(encoding="utf-8")
    assert cid in doc
