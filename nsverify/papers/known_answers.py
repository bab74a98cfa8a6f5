"""The papers' worked examples through the exact oracle (Park et al., Després, Boustany), with their claims.

:func:`known_answers` runs every case of :data:`nsverify.papers.cases.CASES` through
:func:`nsverify.check_gradient`, re-checks each certificate from its JSON, and judges the papers' claims that
AD leaves the Clarke set (every case whose expected verdict is not_member).
"""

from __future__ import annotations

from nsverify.claims import decide
from nsverify.claims.record import ClaimSpec, spec_table

#: the claims of the papers' worked examples (Park et al., Despres, Boustany), declared once: one instance per
#: case of nsverify.oracle.cases whose expected verdict is not_member (its source is the case's)
CLAIMS = (
    ClaimSpec("known/outside-clarke", "{paper}", "{where}", "{case}: AD {ad} is outside the Clarke set {clarke}",
              "the exact oracle's verdict (certificate re-checked from JSON)", "exact",
              "one exact verdict per case", paper_value="outside the Clarke set"),
)
SPEC = spec_table(CLAIMS)
#: cases whose claim the park section judges (park/table1-lemma, on the same counterexamples): shown in the
#: known-answer table, not counted twice as claims
JUDGED_IN_PARK = ("Park et al., Lemma 2", "Park et al., Lemma 3", "Park et al., Lemma 7")


def format_vector(v) -> str:
    """``(a, b, ...)``, or ``-`` for None."""
    return "(" + ", ".join(str(x) for x in v) + ")" if v is not None else "-"


def format_clarke(v) -> str:
    """The Clarke set of a verdict: ``{c}`` or ``[lo, hi]`` in 1-D, else the hull of (up to 4) Bouligand
    vertices."""
    if v.clarke is not None:
        lo, hi = v.clarke
        return f"{{{lo}}}" if lo == hi else f"[{lo}, {hi}]"
    if len(v.bouligand) == 1:
        return "{" + format_vector(v.bouligand[0]) + "}"
    more = ", ..." if len(v.bouligand) > 4 else ""
    return "conv{" + ", ".join(format_vector(b) for b in v.bouligand[:4]) + more + "}"


def known_answers(progress=None) -> dict:
    """``{"cases": [{"case", "verdict", "rechecked"}], "claims"}``: the oracle's verdict per case (a
    :class:`~nsverify.oracle.Verdict`), whether its certificate re-checks exactly from JSON, and one claim per
    not_member case (held when the oracle says not_member and, where the paper states it, AD's exact value
    matches)."""
    import nsverify
    from nsverify.oracle import verify_certificate
    from nsverify.papers.cases import CASES, point

    out, claims = [], []
    for i, case in enumerate(CASES):
        if progress:
            progress(case.name, i + 1, len(CASES))
        v = nsverify.check_gradient(case.fn, point(case))
        out.append({"case": case, "verdict": v, "rechecked": verify_certificate(v.to_json())})
        if case.expected == "not_member" and case.source not in JUDGED_IN_PARK:
            paper, _, where = case.source.partition(", ")
            claims.append(SPEC["known/outside-clarke"].judge(
                f"{v.status}; PyTorch autograd returned {format_vector(v.ad)}",
                decide.exact(v.status == "not_member"
                             and (case.exact_ad is None or tuple(v.exact_ad) == case.exact_ad)),
                key=case.name, fields={"paper": paper, "where": where or case.source, "case": case.name,
                                       "ad": format_vector(case.exact_ad), "clarke": format_clarke(v)},
            ))
    return {"cases": out, "claims": claims}
