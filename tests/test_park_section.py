"""The 'park' report section runs in quick mode and returns JSON-able tables, claims and metrics."""
import json

import pytest

from nsverify.report import RunContext
from nsverify.sections import load_sections


@pytest.mark.slow
def test_park_section_quick():
    sec = {s.name: s for s in load_sections()}["park"]
    out = sec.fn(RunContext(quick=True, section="park"))
    json.dumps(out)
    keys = {m["key"]: m for m in out["data"]["metrics"]}
    assert keys["table1|theorem4|not_member"]["value"] == 0
    assert any(k.endswith("tie_share_alg2") for k in keys)
    assert keys["table1|lemma7|paper_case"]["value"] == "not_member"
    assert all(m["kind"] in ("counterexample", "verdict", "share", "bench_ratio", "info") for m in keys.values())
    assert len(out["tables"]) == 7 and out["tables"][0]["title"].startswith("Claims")
    assert all(c["verdict"] in ("reproduced", "not reproduced", "undecided") for c in out["claims"])
    # quick mode draws 6 cases per theorem row: below the 32 a universal claim needs, so undecided
    assert all(c["held"] is None for c in out["claims"] if c["source"]["where"].startswith("Table 1, Thm"))
