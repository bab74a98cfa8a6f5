"""Després's central result as a claim: PyTorch's AD equals an associated gradient (the gradient of one
smooth piece of the program's piecewise representation, Murat and Trombetti's notion, Sec. 3 Def. 1), in
every tested case (Sec. 5).

:func:`associated_cases` draws networks at exact kinks and ties (the generators of :mod:`nsverify.strategies`,
derandomized: the same cases on every run of one Hypothesis version), computes AD and the associated gradient
of :mod:`.associated` in float64 (exact for the dyadic networks drawn), and counts the cases where they differ
bitwise. The claim is universal ("in every tested case"): one differing case refutes it, and the absence of
one decides only with the power to see a 5% violation rate (decide.never).
"""
from __future__ import annotations

import torch

from nsverify.claims import decide
from nsverify.claims.record import ClaimSpec, spec_table

PAPER = "Després (2024)"
#: activations whose pieces have dyadic coefficients (float64 evaluation of both programs is exact); the
#: generator's classes (properties/test_associated.py checks the same property by Hypothesis)
DYADIC = ("relu", "relu6", "hardtanh", "clamp", "identity", "relu[value=1]", "hardtanh[right,left]")

CLAIMS = (
    ClaimSpec("despres/sec5-ad-is-associated", PAPER, "Sec. 5 (Def. 1 of Sec. 3)",
              "PyTorch's AD equals an associated gradient (Murat-Trombetti) in every tested case",
              "generated networks at exact kinks and ties where AD differs bitwise from the associated gradient "
              "(float64, dyadic pieces)", "never",
              "cases: networks at exact ties (depth 1-3, ReLU-family activations, max pools)",
              paper_value="equal in every case"),
)
SPEC = spec_table(CLAIMS)


def associated_cases(n: int) -> dict:
    """``n`` generated networks at exact ties: ``{"drawn", "compared", "unsupported", "differ", "examples"}``
    (``unsupported``: the layer's rule is no piece's derivative, so no associated gradient exists; those are
    outside the claim's premise and counted apart)."""
    from hypothesis import given
    from hypothesis import strategies as st

    from nsverify.errors import UnsupportedOpError
    from nsverify.papers.despres.associated import associated_gradient, grad_of
    from nsverify.papers.park.table1 import _generation_settings
    from nsverify.strategies import networks, tie_points

    counts = {"drawn": 0, "compared": 0, "unsupported": 0, "differ": 0, "examples": []}

    @_generation_settings(n)
    @given(st.data())
    def run(data):
        spec = data.draw(tie_points(networks(depth=(1, 3), activations=DYADIC, losses=("linear", "squared"),
                                             pooling=("none", "maxpool", "trivial")), dtype=torch.float64))
        counts["drawn"] += 1
        fn, w = spec.loss_fn(torch.float64)
        ad = grad_of(fn, w)
        try:
            assoc = associated_gradient(spec)
        except UnsupportedOpError:
            counts["unsupported"] += 1
            return
        counts["compared"] += 1
        if not torch.equal(ad, assoc):
            counts["differ"] += 1
            if len(counts["examples"]) < 3:
                counts["examples"].append(spec.describe())

    run()
    return counts


def associated_claim(counts: dict) -> dict:
    """The claim from :func:`associated_cases`' counts."""
    return SPEC["despres/sec5-ad-is-associated"].judge(
        f"{counts['differ']} of {counts['compared']} networks differ ({counts['drawn']} drawn, "
        f"{counts['unsupported']} without an associated gradient for their rule)",
        decide.never(counts["differ"], counts["compared"], what="network"),
        notes="; ".join(counts.get("examples") or []))


def despres(n: int) -> dict:
    """``{"counts", "claims"}``: :func:`associated_cases` with its claim."""
    counts = associated_cases(n)
    return {"counts": counts, "claims": [associated_claim(counts)]}
