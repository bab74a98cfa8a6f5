"""The optim report section in quick mode (slow: about 1-2 minutes on 2 cores)."""
from __future__ import annotations

import json

import pytest

from nsverify.report import RunContext


@pytest.mark.slow
def test_optim_section_quick(tmp_path):
    from nsverify.sections.optim import optim_section

    out = optim_section(RunContext(quick=True, scratch=tmp_path, section="optim"))
    json.dumps(out)
    kinds = {m["kind"] for m in out["data"]["metrics"]}
    assert {"convergence", "counterexample", "share", "bench_ratio"} <= kinds
    assert len({m["key"] for m in out["data"]["metrics"]}) == len(out["data"]["metrics"])
    by_claim = {c["claim"]: c["held"] for c in out["claims"]}
    assert by_claim["INNAprop with alpha = beta = 1 is AdamW with beta1 = 0"] is True
    # Algorithm 6 as printed is not (4.28)-(4.29) (the sign erratum): the claim is measured, and fails
    assert by_claim["DINAdam Algorithm 6 (memory-saving form) is the recursion (4.28)-(4.29)"] is False
    # quick mode trains 500 steps: no unit dies, so the network claims' premise is not exercised
    assert all(c["held"] is None for c in out["claims"] if c["source"]["where"] in ("Fig. 1", "Sec. 6"))
    assert out["figures"] and out["tables"]
