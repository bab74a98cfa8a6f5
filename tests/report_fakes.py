"""Fake report sections and machines for the report tests (the real sections come from other modules)."""
from __future__ import annotations

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
