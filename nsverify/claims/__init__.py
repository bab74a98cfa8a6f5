"""The claim ledger, below every paper and the report: the claim record and its declarations
(:mod:`.record`), the decision rules with their power (:mod:`.decide`), the statistics (:mod:`.stats`) and the
provenance of measurements read from data files (:mod:`.provenance`, which also reads the stored GPU runs).

Low level: it imports only nsverify's plumbing (:mod:`nsverify.errors`, :mod:`nsverify.files`,
:mod:`nsverify.devices`), never a paper, the report, the sections, the conventions or the oracle; every one of
those builds its claims from here.
"""
from nsverify.claims.record import (
                                    BY,
                                    ORIGINS,
                                    VERDICTS,
                                    Claim,
                                    ClaimError,
                                    ClaimSpec,
                                    Source,
                                    Threshold,
                                    judged,
                                    on_stored_run,
                                    spec_table,
                                    summary_counts,
)

__all__ = ["BY", "ORIGINS", "VERDICTS", "Claim", "ClaimError", "ClaimSpec", "Source", "Threshold", "judged",
           "on_stored_run", "spec_table", "summary_counts"]
