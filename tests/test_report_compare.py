"""Regression rules of `nsverify compare`, one test per metric kind (docs/report.md)."""
import itertools
import json
import math
import random

import pytest

from nsverify.cli import main
from nsverify.report.compare import DEFAULT_BENCH_ALPHA, compare_reports, judge, mann_whitney_p, min_p_value
from nsverify.report.nightly import write_report
from tests.report_fakes import FAKE_MACHINE, metric, standard_metrics


def run_report(metrics, machine=None, status="ok", created="2026-01-01T00:00:00+00:00"):
    sec = {"title": "S", "status": status, "data": {"metrics": metrics}}
    if status == "failed":
        sec["traceback"] = "Traceback: boom"
    return {"schema": "nsverify.report/1", "kind": "run", "created": created, "quick": True,
            "machine": dict(machine or FAKE_MACHINE), "sections": {"s": sec}, "regressions": []}


def regs(old, new, **kw):
    return compare_reports(run_report(old), run_report(new), **kw)["regressions"]


@pytest.mark.parametrize("kind,a,b", [("convention", 0.0, 1.0), ("convention", "zero", "one"),
                                      ("verdict", "valid", "invalid"), ("verdict", "valid", "unknown")])
def test_convention_and_verdict_changes_are_regressions(kind, a, b):
    assert judge(metric("k", kind, a), metric("k", kind, a))[0] == "same"
    verdict, rule = judge(metric("k", kind, a), metric("k", kind, b))
    assert verdict == "regression" and kind in rule


def test_nan_convention_equal_to_itself():
    assert judge(metric("k", "convention", math.nan), metric("k", "convention", math.nan))[0] == "same"


def test_counterexample_appearing_is_a_regression():
    assert judge(metric("k", "counterexample", 0), metric("k", "counterexample", 1))[0] == "regression"
    assert judge(metric("k", "counterexample", 2), metric("k", "counterexample", 1))[0] == "improvement"
    assert judge(metric("k", "counterexample", 0), metric("k", "counterexample", 0))[0] == "same"
    assert judge(None, metric("k", "counterexample", 3))[0] == "regression"
    assert judge(None, metric("k", "counterexample", 0))[0] == "changed"


def test_share_flagged_only_when_intervals_disjoint():
    old = metric("z", "share", 0.30, lo=0.25, hi=0.35)
    assert judge(old, metric("z", "share", 0.38, lo=0.34, hi=0.42))[0] == "same"  # overlap at 0.34..0.35
    assert judge(old, metric("z", "share", 0.40, lo=0.36, hi=0.44))[0] == "regression"
    assert judge(old, metric("z", "share", 0.20, lo=0.15, hi=0.24))[0] == "regression"
    assert judge(old, metric("z", "share", 0.20, lo=0.15, hi=0.25))[0] == "same"  # touching intervals


def test_convergence_flagged_beyond_seed_spread():
    old = metric("c", "convergence", 0.50, spread=0.02)
    assert judge(old, metric("c", "convergence", 0.515, spread=0.01))[0] == "same"
    assert judge(old, metric("c", "convergence", 0.53, spread=0.01))[0] == "regression"
    assert judge(old, metric("c", "convergence", 0.53, spread=0.05))[0] == "same"  # the larger spread counts
    assert judge(old, metric("c", "convergence", math.nan, spread=0.01))[0] == "regression"
    assert judge(old, metric("c", "convergence", math.inf, spread=0.01))[0] == "regression"


def test_bench_ratio_without_samples_compares_single_values():
    """Reports written before samples were recorded: the values are compared with the factor (default 1.5)."""
    old = metric("b", "bench_ratio", 1.0)
    assert judge(old, metric("b", "bench_ratio", 1.45))[0] == "same"
    verdict, rule = judge(old, metric("b", "bench_ratio", 1.6))
    assert verdict == "regression" and "single values" in rule
    assert judge(old, metric("b", "bench_ratio", 1.6), bench_factor=1.7)[0] == "same"
    assert judge(old, metric("b", "bench_ratio", 0.6))[0] == "improvement"
    # a report with samples against one without: still the single values
    assert judge(old, metric("b", "bench_ratio", 1.6, samples=[1.6] * 9))[0] == "regression"


def _exact_mann_whitney_p(a, b):
    """Two-sided exact p-value by enumerating every split of the pooled samples (no ties): an independent
    computation of what scipy returns for small samples."""
    pooled = a + b
    def u(xs, ys):
        return sum(x > y for x in xs for y in ys)
    observed = u(b, a)
    mean = len(a) * len(b) / 2
    count = total = 0
    for idx in itertools.combinations(range(len(pooled)), len(b)):
        bs = [pooled[i] for i in idx]
        rest = [pooled[i] for i in range(len(pooled)) if i not in idx]
        total += 1
        count += abs(u(bs, rest) - mean) >= abs(observed - mean)
    return count / total


def test_mann_whitney_matches_exact_enumeration():
    a = [1.00, 1.07, 0.93, 1.12, 0.98, 1.03]
    for b in ([1.20, 1.31, 1.18, 1.25, 1.40], [1.01, 0.97, 1.10, 1.05, 0.95], [0.90, 1.09, 1.15, 0.99, 1.21]):
        assert mann_whitney_p(a, b) == pytest.approx(_exact_mann_whitney_p(a, b), rel=1e-9)
    assert min_p_value(5, 5) == pytest.approx(2 / 252)
    assert min_p_value(3, 3) == pytest.approx(0.1)


def _noisy(center, n, rng, spread=0.08):
    return [center * math.exp(rng.gauss(0, spread)) for _ in range(n)]


def test_bench_ratio_flags_a_2x_slowdown_not_noise():
    """Samples of one benchmark ratio: run-to-run noise (medians moving up to 1.3x, samples separated) stays
    green; a 2x slowdown is flagged, with the test's p-value and the effect in the rule."""
    rng = random.Random(0)
    old = metric("b", "bench_ratio", 2.0, samples=_noisy(2.0, 9, rng))
    shifted = metric("b", "bench_ratio", 2.6, samples=_noisy(2.6, 9, rng))  # 1.3x: distributions differ
    assert mann_whitney_p(old["samples"], shifted["samples"]) < DEFAULT_BENCH_ALPHA  # significant ...
    assert judge(old, shifted)[0] == "same"  # ... but below the minimum effect size
    slow = metric("b", "bench_ratio", 4.0, samples=_noisy(4.0, 9, rng))
    verdict, rule = judge(old, slow)
    assert verdict == "regression" and "Mann-Whitney p=" in rule and "slower" in rule
    assert judge(slow, old)[0] == "improvement"


def test_bench_ratio_outlier_sample_is_not_a_regression():
    """One preempted round (a 10x sample) moves neither the median nor the rank test."""
    rng = random.Random(1)
    old = metric("b", "bench_ratio", 2.0, samples=_noisy(2.0, 7, rng))
    new_samples = _noisy(2.0, 7, rng)
    new_samples[3] = 20.0
    assert judge(old, metric("b", "bench_ratio", 2.0, samples=new_samples))[0] == "same"


def test_bench_ratio_few_samples_compare_medians():
    """3 vs 3 samples can never reach p < 0.01: the medians are compared with the factor alone."""
    old = metric("b", "bench_ratio", 1.0, samples=[1.0, 1.1, 0.9])
    verdict, rule = judge(old, metric("b", "bench_ratio", 1.0, samples=[2.0, 2.2, 1.9]))
    assert verdict == "regression" and "too few samples" in rule
    assert judge(old, metric("b", "bench_ratio", 1.0, samples=[1.2, 1.3, 1.25]))[0] == "same"


def test_bench_ratio_pools_the_previous_runs():
    """With history, the new samples are tested against the pooled samples of several runs: one baseline run
    that happened to be fast does not make an ordinary run a regression."""
    rng = random.Random(2)
    def rep(center):
        return run_report([metric("b", "bench_ratio", center, samples=_noisy(center, 3, rng, 0.03))])
    history = [rep(2.0), rep(2.1), rep(1.9), rep(2.0)]
    fast_base, new = rep(1.2), rep(2.0)
    assert compare_reports(fast_base, new)["regressions"]  # against the lone fast run: 3 vs 3, medians 1.7x
    cmp = compare_reports(fast_base, new, history=history)
    assert cmp["regressions"] == []
    assert compare_reports(fast_base, rep(4.0), history=history)["regressions"][0]["key"] == "b"


def test_info_never_compared():
    assert judge(metric("i", "info", 1), metric("i", "info", 2))[0] == "same"


def test_all_kinds_stable_gives_no_regression():
    assert regs(standard_metrics(), standard_metrics(ratio=1.05, share=(0.31, 0.26, 0.36),
                                                     conv=(0.51, 0.02))) == []


def test_exactly_the_changed_metric_is_flagged():
    out = regs(standard_metrics(), standard_metrics(relu0=1.0))
    assert [r["key"] for r in out] == ["relu|0|float32|cpu|eager"]
    assert out[0]["old"] == "0.0" and out[0]["new"] == "1.0" and out[0]["section"] == "s"


def test_removed_and_added_metrics_are_changes_not_regressions():
    cmp = compare_reports(run_report(standard_metrics()[:3]), run_report(standard_metrics()[1:4]))
    assert cmp["regressions"] == []
    rules = sorted(c["rule"] for c in cmp["changes"])
    assert rules == ["metric no longer reported", "new metric"]


def test_failed_section_is_a_regression():
    out = compare_reports(run_report(standard_metrics()), run_report([], status="failed"))["regressions"]
    assert [r["rule"] for r in out] == ["section failed"]


def test_cross_machine_comparison_is_labelled():
    gpu = dict(FAKE_MACHINE, gpu="NVIDIA H100", machine_id="gpubox|x|NVIDIA H100", torch="2.11.0")
    cmp = compare_reports(run_report(standard_metrics()), run_report(standard_metrics(relu0=1.0), gpu))
    assert not cmp["same_machine"] and "CROSS-MACHINE" in cmp["label"]
    assert cmp["regressions"]
    assert all(r.get("cross_machine") and r["message"].startswith("[cross-machine]")
               for r in cmp["regressions"])
    assert any(e.startswith("torch:") for e in cmp["environment_changes"])
    assert any(e.startswith("gpu:") for e in cmp["environment_changes"])


def test_compare_cli(tmp_path, capsys):
    a = write_report(tmp_path, run_report(standard_metrics()), stamp="a")
    b = write_report(tmp_path, run_report(standard_metrics(cex=2)), stamp="b")
    assert main(["compare", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "1 regression(s)" in out and "chain-rule-property: 0 -> 2 (counterexample appeared)" in out
    assert main(["compare", str(a), str(b), "--fail-on-regression"]) == 1
    capsys.readouterr()
    assert main(["compare", str(a / "report.json"), str(tmp_path), "--json"]) == 0  # root -> latest (= b)
    assert len(json.loads(capsys.readouterr().out)["regressions"]) == 1
    assert main(["compare", str(a), str(a), "--fail-on-regression"]) == 0


def test_compare_cli_bad_bench_factor(tmp_path, capsys):
    a = write_report(tmp_path, run_report(standard_metrics()), stamp="a")
    assert main(["compare", str(a), str(a), "--bench-factor", "0.5"]) == 2
    assert "--bench-factor" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------------ claim verdicts
def claim_report(claims, **kw):
    rep = run_report(standard_metrics(), **kw)
    rep["sections"]["s"]["claims"] = claims
    return rep


def claim(cid, held, text=None):
    return {"id": cid, "claim": text or f"statement {cid}", "held": held,
            "verdict": {True: "reproduced", False: "not reproduced", None: "undecided"}[held]}


def test_claim_reproduced_to_not_reproduced_is_a_regression():
    cmp = compare_reports(claim_report([claim("a", True), claim("b", True)]),
                          claim_report([claim("a", False), claim("b", True)]))
    assert [(r["kind"], r["key"], r["old"], r["new"]) for r in cmp["regressions"]] == [
        ("claim", "a", "reproduced", "not reproduced")]
    assert cmp["changes"] == []


def test_claim_verdict_changes_that_are_not_regressions():
    cmp = compare_reports(claim_report([claim("a", False), claim("b", True), claim("c", None)]),
                          claim_report([claim("a", True), claim("b", None), claim("c", False)]))
    assert cmp["regressions"] == []
    got = {c["key"]: (c["verdict"], c["old"], c["new"]) for c in cmp["changes"]}
    assert got == {"a": ("improvement", "not reproduced", "reproduced"),
                   "b": ("changed", "reproduced", "undecided"), "c": ("changed", "undecided", "not reproduced")}


def test_unchanged_claim_verdicts_are_not_reported():
    claims = [claim("a", True), claim("b", False), claim("c", None)]
    cmp = compare_reports(claim_report(claims), claim_report([dict(c, measured="other numbers") for c in claims]))
    assert cmp["regressions"] == [] and cmp["changes"] == []


def test_new_claim_is_new_not_a_regression():
    cmp = compare_reports(claim_report([claim("a", True)]), claim_report([claim("a", True), claim("n", False)]))
    assert cmp["regressions"] == []
    assert [(c["key"], c["rule"], c["old"], c["new"]) for c in cmp["changes"]] == [
        ("n", "new claim", "absent", "not reproduced")]
    gone = compare_reports(claim_report([claim("a", True), claim("n", False)]), claim_report([claim("a", True)]))
    assert gone["regressions"] == [] and [c["rule"] for c in gone["changes"]] == ["claim no longer reported"]


def test_claims_without_id_are_matched_by_their_text():
    old = {"claim": "a statement", "held": True}
    cmp = compare_reports(claim_report([old]), claim_report([dict(old, held=False)]))
    assert [r["key"] for r in cmp["regressions"]] == ["a statement"]
    # a baseline written before claims had ids: its claims match the new ones by text
    new = [dict(old, id="p/a", held=False), {"id": "p/b", "claim": "other", "held": None}]
    cmp = compare_reports(claim_report([old, {"claim": "other", "held": None}]), claim_report(new))
    assert [(r["key"], r["old"], r["new"]) for r in cmp["regressions"]] == [("p/a", "reproduced", "not reproduced")]
    assert cmp["changes"] == []


def test_claim_changes_come_first_and_fail_the_cli(tmp_path, capsys):
    from nsverify.report.html import render_summary

    a = write_report(tmp_path, claim_report([claim("a", True), claim("b", None)]), stamp="a")
    b = write_report(tmp_path, claim_report([claim("a", False), claim("b", True)], ), stamp="b")
    assert main(["compare", str(a), str(b)]) == 0
    lines = capsys.readouterr().out.splitlines()[2:]  # after the lines naming A and B
    assert lines[1] == "2 claim verdict change(s):"
    assert lines[2].startswith("  REGRESSION [s] claim 'statement a': reproduced -> not reproduced")
    assert lines[3].startswith("  CHANGED [s] claim 'statement b': undecided -> reproduced")
    assert main(["compare", str(a), str(b), "--fail-on-regression"]) == 1
    capsys.readouterr()
    assert main(["compare", str(a), str(a), "--fail-on-regression"]) == 0
    rep = claim_report([claim("a", False), claim("b", True)])
    rep["comparison"] = compare_reports(claim_report([claim("a", True), claim("b", None)]), rep)
    rep["regressions"] = rep["comparison"]["regressions"]
    html = render_summary(rep)
    assert 'id="claim-changes"' in html and html.index('id="claim-changes"') < html.index('id="claims-table"')
    assert "statement a" in html.split('id="claim-changes"')[1].split("</ul>")[0]


def _bimodal_steps(n, rng):
    """Per-step ratios of a monitor whose steps alternate between few ties (about 1.2x) and many (about 4x),
    as the VGG metric did: the spread between steps dwarfs any run-to-run change."""
    return [(1.2 if i % 2 else 4.0) * math.exp(rng.gauss(0, 0.05)) for i in range(n)]


def _paired(samples, by="training step (natural data, fixed seed)"):
    return metric("m", "bench_ratio", sorted(samples)[len(samples) // 2], samples=samples,
                  sample_keys=list(range(len(samples))), paired_by=by)


def test_wilcoxon_matches_exact_enumeration():
    from nsverify.report.compare import wilcoxon_p

    d = [0.3, -0.1, 0.25, 0.4, 0.05, 0.6, -0.2, 0.35]
    ranks = {x: r for r, x in enumerate(sorted(d, key=abs), start=1)}
    t_obs = sum(ranks[x] for x in d if x > 0)
    counts = [sum(r for r, s in zip(range(1, 9), signs) if s) for signs in itertools.product((0, 1), repeat=8)]
    extreme = min(sum(c >= t_obs for c in counts), sum(c <= t_obs for c in counts))
    assert wilcoxon_p(d) == pytest.approx(min(1.0, 2 * extreme / 256), rel=1e-9)


def test_paired_steps_catch_a_2x_slowdown_the_unpaired_test_misses():
    """An injected 2x slowdown of a bimodal per-step metric (16 steps): pooled, the two runs' samples overlap
    (Mann-Whitney p about 0.02: missed at 0.01); paired step by step, every step is 2x slower and the change is
    flagged. Both sides of the effect threshold: 1.3x (significant, below 1.5x) stays green, 1.6x is flagged."""
    rng = random.Random(1)
    base = _bimodal_steps(16, rng)
    slow = [2 * x * math.exp(rng.gauss(0, 0.05)) for x in base]
    unpaired_old, unpaired_new = (metric("m", "bench_ratio", 2.6, samples=s) for s in (base, slow))
    assert judge(unpaired_old, unpaired_new)[0] == "same"  # the old rule misses it
    verdict, rule = judge(_paired(base), _paired(slow))
    assert verdict == "regression" and "paired by training step" in rule and "Wilcoxon p=" in rule
    for factor, expected in ((1.3, "same"), (1.6, "regression"), (1 / 1.6, "improvement")):
        new = [factor * x * math.exp(rng.gauss(0, 0.02)) for x in base]
        assert judge(_paired(base), _paired(new))[0] == expected, factor
    noise = [x * math.exp(rng.gauss(0, 0.05)) for x in base]  # the same steps again: no change
    assert judge(_paired(base), _paired(noise))[0] == "same"


def test_pairing_needs_the_same_pairing_and_enough_keys():
    from nsverify.report.compare import paired_samples, pooled_baseline

    rng = random.Random(2)
    base, new = _bimodal_steps(16, rng), _bimodal_steps(16, rng)
    assert paired_samples(_paired(base), _paired(new)) is not None
    assert paired_samples(_paired(base), _paired(new, by="another seed")) is None
    assert paired_samples(_paired(base[:7]), _paired(new[:7])) is None  # too few pairs for p < 0.01
    # pooled with an older run of the same pairing: the keys follow the samples, the baseline per step is the median
    hist = {"sections": {"park": {"data": {"metrics": [_paired(new)]}}}}
    pooled = pooled_baseline(_paired(base), "m", "park", [hist])
    assert pooled["sample_keys"] == list(range(16)) * 2
    pairs = paired_samples(pooled, _paired(base))
    assert [a for a, _ in pairs] == pytest.approx([(x + y) / 2 for x, y in zip(base, new)])
