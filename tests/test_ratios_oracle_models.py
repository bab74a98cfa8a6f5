"""asv_bench/ratios.py --area oracle_models (issue 34): its cases come from nsverify.workloads.real_models, each
check's outcome, wall time and time-limit bound are recorded, and --cases picks labels."""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "asv_bench"


def _ratios():
    name = "nsverify_bench_ratios_models"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, BENCH / "ratios.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod  # dataclasses look their module up there
        spec.loader.exec_module(mod)
    return sys.modules[name]


def test_the_table_holds_issue_34s_targets_and_the_width_curve():
    r = _ratios()
    t = r.ORACLE_MODEL_CASES
    assert {k: (v[0]["kind"], v[0].get("width"), v[0].get("train", False), v[0].get("lemma2", False), v[1])
            for k, v in t.items()} == {
        "w1/8": ("resnet18", 0.125, False, False, 60), "w1/4": ("resnet18", 0.25, False, False, 60),
        "w1/2": ("resnet18", 0.5, False, False, 60), "a": ("resnet18", 1.0, False, False, 60),
        "b": ("resnet18", 1.0, True, False, 60), "c": ("vgg11_bn", 1.0, False, False, 60),
        "d": ("opt_decoder", 1.0, False, False, 60), "e": ("resnet18", 1.0, False, True, 10)}
    assert not r.AREAS["oracle_models"].default  # minutes: only when named


@pytest.mark.parametrize("args, message", [
    (["--area", "oracle_models", "--cases", "f"], "--cases f: choose from w1/8, w1/4, w1/2, a, b, c, d, e"),
    (["--area", "oracle_models", "--small", "--cases", "a"], "--cases a: choose from w1/8, d/16, e/8"),
    (["--area", "oracle_models", "--cases", ","], "--cases (empty)"),
])
def test_bad_cases_are_named(args, message, capsys):
    with pytest.raises(SystemExit) as info:
        _ratios().main(args)
    assert info.value.code == 2 and message in capsys.readouterr().err


def test_one_small_case_records_outcome_wall_time_and_bound(tmp_path, capsys):
    """The small OPT decoder (d = 16) under a 3 s limit: one round of the float step and the check."""
    out = tmp_path / "m.json"
    assert _ratios().main(["--area", "oracle_models", "--small", "--cases", "d/16", "--json", str(out)]) == 0
    (case,) = json.loads(out.read_text())["cases"]
    info = case["info"]
    assert case["case"].startswith("(d/16) opt_decoder width 0.0625 eval, float32, batch 2, time_limit 3")
    assert info["parameters"] == 21_856 and info["time_limit"] == 3
    assert info["outcome"] in ("member", "not_member", "unknown")
    assert (info["outcome"] == "unknown") == ("ran out" in (info["reason"] or ""))
    samples = case["timing"]["samples_s"]
    assert info["wall_s"] == pytest.approx(samples["check_module"][0], abs=0.05)
    assert info["within_1.1T+1"] == (info["wall_s"] <= 1.1 * 3 + 1)
    (ratio,) = case["ratios"]
    assert ratio["candidate"] == "check_module" and ratio["baseline"] == "float_step"
    assert ratio["ratio_median"] == pytest.approx(samples["check_module"][0] / samples["float_step"][0])
    assert "outcome" in capsys.readouterr().out
