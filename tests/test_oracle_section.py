"""The report section "oracle": structure, verdict metrics, fuzz counters."""

from __future__ import annotations

import json

from nsverify.report import RunContext
from nsverify.sections.oracle import oracle_section


def test_oracle_section_quick(capsys):
    ctx = RunContext(quick=True, section="oracle", options={"oracle_fuzz": 3, "oracle_fuzz_vector": 3,
                                                               "oracle_prune_ks": (4,)})
    out = oracle_section(ctx)
    json.dumps(out)
    known = out["tables"][0]
    assert known["columns"][:4] == ["case", "source", "expected", "verdict"]
    assert all(r[2] == r[3] and r[-1] == "yes" for r in known["rows"])
    metrics = out["data"]["metrics"]
    keys = [m["key"] for m in metrics]
    assert len(keys) == len(set(keys))
    verdicts = [m for m in metrics if m["kind"] == "verdict"]
    assert len(verdicts) == len(known["rows"])
    assert {m["key"]: m["value"] for m in metrics}["fuzz|disagreements"] == 0
    assert {m["key"]: m["value"] for m in metrics}["fuzz_vector|disagreements"] == 0
    assert out["data"]["fuzz_vector"]["programs"] == 3
    assert out["claims"] and all(c["held"] for c in out["claims"])
