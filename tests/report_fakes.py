"""Fake report sections and machines for the report tests (the real sections come from other modules)."""
from __future__ import annotations

import html
import re

import pytest

from nsverify.report import SECTIONS, registered_sections, section

FAKE_MACHINE = {"hostname": "box", "cpu": "Fake CPU 9000", "cpu_count": 2, "gpu": None, "torch": "2.13.0",
                "cuda": None, "cudnn": None, "tf32_matmul": False, "tf32_cudnn": True,
                "deterministic_algorithms": False, "num_threads": 2, "python": "3.11.7", "platform": "Linux",
                "machine_id": "box|Fake CPU 9000|no-gpu"}


@pytest.fixture
def fake_sections(monkeypatch):
    """Empty the section registry for the test; sections registered inside the test are the only ones."""
    saved = dict(SECTIONS)
    SECTIONS.clear()
    # ``nsverify nightly`` runs what nsverify.sections.load_sections returns: here only the fakes
    monkeypatch.setattr("nsverify.sections.load_sections", registered_sections)
    yield SECTIONS
    SECTIONS.clear()
    SECTIONS.update(saved)


@pytest.fixture
def fake_machine(monkeypatch):
    """A fixed machine description (a dict the test may edit between runs)."""
    machine = dict(FAKE_MACHINE)
    monkeypatch.setattr("nsverify.report.nightly.machine_info", lambda: dict(machine))
    return machine


def metric(key, kind, value, **extra):
    return {"key": key, "kind": kind, "value": value, **extra}


def standard_metrics(relu0=0.0, ratio=1.0, share=(0.30, 0.25, 0.35), conv=(0.50, 0.02), cex=0):
    """One metric of every kind; the arguments are what a test changes between runs."""
    v, lo, hi = share
    return [metric("relu|0|float32|cpu|eager", "convention", relu0),
            metric("relu6|6|float32|cpu|eager", "convention", 1.0),
            metric("max_tie|exact", "verdict", "valid Clarke subgradient"),
            metric("chain-rule-property", "counterexample", cex),
            metric("zone|fp32|impacted-draws", "share", v, lo=lo, hi=hi),
            metric("final-loss|digits", "convergence", conv[0], spread=conv[1]),
            metric("relu-backward/ref", "bench_ratio", ratio),
            metric("wall-seconds", "info", 1.234)]


def register_conventions(state: dict) -> None:
    """Register sections ``conv`` and ``other``; their metrics come from ``state`` (edited between runs)."""

    @section("conv", "Conventions at kinks", order=1)
    def conv(ctx):
        return {"summary": "what PyTorch returns at kinks",
                "tables": [{"title": "ReLU'(0)", "columns": ["dtype", "value"],
                            "rows": [["float32", state["relu0"]]]}],
                "data": {"metrics": standard_metrics(relu0=state["relu0"], ratio=state.get("ratio", 1.0))}}

    @section("other", "Other things", order=2)
    def other(ctx):
        return {"summary": "unchanged", "data": {"metrics": [metric("n", "counterexample", 0),
                                                              metric("acc", "convergence",
                                                                     state.get("acc", 0.9), spread=0.01)]}}


#: raw JSON (or a Python repr) in a reader's text: an object or list opening on a quoted string, a quoted key
#: and its value, or a ``\uXXXX`` escape
RAW_JSON = re.compile(r'[{\[]\s*[\'"]|[\'"][\w ]+[\'"]\s*:\s*[{\[\'"\d]|\\u[0-9a-fA-F]{4}')


def visible_text(page: str) -> str:
    """The page's text as a reader can see it (every ``<details>`` opened): no style, no tooltip titles, no tags."""
    page = re.sub(r"<style>.*?</style>|<title>.*?</title>", " ", page, flags=re.S)
    return html.unescape(re.sub(r"<[^>]+>", " ", page))


def fake_claim(cid, held, paper="Boustany (2025)", where="Table 3.2", statement="32 bits: strictly between 0% and 100%",
               **extra):
    """A claim record with every field of ``Claim.to_json`` (the fields a real section's claims have)."""
    verdict = {True: "reproduced", False: "not reproduced", None: "undecided"}[held]
    return {"id": cid, "claim": statement, "source": {"paper": paper, "where": where, "statement": statement},
            "by": "paper", "metric": "share of impacted pairs", "paper_value": "46.67%",
            "measured": "12/64 = 18.8% [CP 95% 0.10, 0.30]", "value": 0.1875, "lo": 0.10, "hi": 0.30,
            "interval": "Clopper-Pearson 95%", "n": 64, "n_required": 4, "power": 0.99,
            "threshold": {"value": 0.5, "origin": "ours", "note": "'very often' read as a majority"},
            "held": held, "verdict": verdict, "rule": "between", "reason": f"{verdict}: 0 of 4 pairs outside",
            "witness": False, "erratum": None, "notes": "", **extra}


def register_every_section(state: dict | None = None) -> None:
    """Sections shaped like the project's (conventions, releases, oracle, park, zones): claims with every field,
    ``None`` values and a non-ASCII author, dict-valued table cells, a ``None`` in a progress text, an erratum,
    and the data fields the overview plots read (conventions metrics with ``outside_clarke``, releases'
    ``releases``/``changes``, zones' share metrics). ``state["held"]``: the verdict of the Table 3.2 claim
    (False when absent; a test flips it between runs)."""
    state = {} if state is None else state

    @section("conventions", "Conventions matrix", order=10)
    def conventions(ctx):
        ms = [metric(f"{op}|{case}|{dt}|cpu|{mode}", "convention", rule)
              for op, case, rule in (("relu", "x=0", "left"), ("max", "tie", "even"), ("clamp_tensor", "min == max",
                                                                                         "other"))
              for dt in ("float16", "bfloat16", "float32", "float64") for mode in ("eager", "func", "jvp")]
        return {"summary": "3 primitives", "claims": [dict(fake_claim("conventions/registry-rules", True,
                                                                      paper="nsverify (ours)", where="registry"),
                                                           by="ours", value=None, lo=None, hi=None, threshold=None)],
                "tables": [{"title": "Rule per primitive", "columns": ["op", "case", "derivative", "in Clarke set"],
                            "rows": [["relu", "x=0", None, "yes"], ["clamp_tensor", "min == max", [0.0, 1.0], "no"]]}],
                "data": {"metrics": ms, "outside_clarke": [f"clamp_tensor|min == max|{dt}|cpu|eager"
                                                           for dt in ("float16", "float32")]}}

    @section("releases", "Across torch releases", order=11)
    def releases(ctx):
        rels = ["2.4.1", "2.5.1", "2.8.0", "2.13.0", "2.14.0"]
        return {"summary": "5 releases", "claims": [],
                "data": {"metrics": [], "releases": rels, "changes": [
                    {"release": "2.8.0", "op": "hardswish", "case": "x=3", "rule_before": "left", "rule_after": "right",
                     "clarke_before": "yes", "clarke_after": "yes", "cells": 13},
                    {"release": "2.14.0", "op": "clamp_tensor", "case": "min == max > x", "rule_before": "other",
                     "rule_after": "last", "clarke_before": "no", "clarke_after": "yes", "cells": 9}]}}

    @section("oracle", "The oracle", order=20)
    def oracle(ctx):
        return {"summary": "known answers (Park, Després, Boustany)",
                "claims": [fake_claim("oracle/despres", True, paper="Després et al. (2024)", where="Example 2",
                                      statement="max(t, 4t) at t=0: [1, 4] is the Clarke set", value=None, lo=None,
                                      hi=None, power=None, n_required=None, threshold=None),
                           fake_claim("oracle/erratum", False, paper="Després et al. (2024)", where="Eq. (7)",
                                      statement="the printed Jacobian has a sign error",
                                      erratum="Eq. (7) prints the Jacobian's off-diagonal term with a minus")],
                "tables": [{"title": "Known answers", "columns": ["case", "verdict", "seconds"],
                            "rows": [["Després max", "member", None], ["relu", {"member": True, "n": 3}, 0.01]]}],
                "data": {"metrics": [metric("known|despres", "verdict", {"member": True, "witness": None})]}}

    @section("park", "Park, Chun, Lee", order=30)
    def park(ctx):
        return {"summary": "Table 1", "claims": [fake_claim("park/t1", None, paper="Park et al. (2023)",
                                                            where="Table 1", statement="Theorem 5 rows hold")],
                "tables": [{"title": "Table 1", "columns": ["row", "config"],
                            "rows": [[1, {"L": 1, "widths": [2], "pool": [None]}]]}],
                "data": {"metrics": [metric("t1|rows", "counterexample", 0)]}}

    @section("zones", "Zone volumes", order=40)
    def zones(ctx):
        ms = [metric(f"table3.2|vgg11|natural|{dt}|noBN|impacted", "share", v, lo=lo, hi=hi)
              for dt, v, lo, hi in (("bfloat16", 1.0, 0.4, 1.0), ("float32", 0.0, 0.0, 0.6),
                                    ("float64", 0.0, 0.0, 0.6))]
        ms.append(metric("sgd|mlp|float64|first_divergence", "info", None))
        claims = [fake_claim("zones/table3.2-32bit", state.get("held", False)),
                  fake_claim("zones/sgd", None, where="Fig. 1", value=None, lo=None, hi=None,
                             measured="no bitwise difference in 30 steps; final L1 distance 0")]
        return {"summary": "zones", "claims": claims, "data": {"metrics": ms},
                "tables": [{"title": "SGD", "columns": ["dtype", "first bitwise difference"],
                            "rows": [["float64", None]]}]}
