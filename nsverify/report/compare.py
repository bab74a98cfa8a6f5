"""Compare two nightly reports metric by metric and name the regressions (rules: docs/report.md).

Every section returns ``data["metrics"]``: a list of ``{"key", "kind", "value", "lo"?, "hi"?, "spread"?}``.
Metrics are matched by (section, key). One rule per kind decides whether a difference is a regression:

=================  =====================================================================================
``convention``     the value changed (exact JSON equality; NaN equals NaN)
``verdict``        the value changed
``counterexample`` the count grew (a metric absent from the baseline counts as 0 there)
``share``          the two runs' confidence intervals [lo, hi] are disjoint
``convergence``    \\|new - old\\| > max(old spread, new spread); a value turning NaN/inf also counts
``bench_ratio``    samples differ (Mann-Whitney p < 0.01) and the new median > bench_factor x the highest
                   median of the last runs (their samples pooled); single values: new / old > bench_factor
``info``           never compared
=================  =====================================================================================

Claims (``sections.<name>.claims``) are matched by their ``id`` (by the claim's text for baseline records written
without one). A
claim whose verdict changed is a change of kind ``claim``; from reproduced to not reproduced it is a regression,
from not reproduced to reproduced an improvement. A claim absent from the baseline is reported as new (never a
regression), one absent from the new run as no longer reported; unchanged verdicts are not reported. The text
form and the HTML page list claim changes first.

A section that failed in the new run (and not in the baseline) is a regression too. Reports from different
machines are still compared, but the comparison is labelled cross-machine and every regression carries
``"cross_machine": true``; environment differences (torch, CUDA, cuDNN, TF32, determinism) are listed.
"""
from __future__ import annotations

import json
import math
import statistics

from nsverify.errors import ReportFormatError, check_number

#: minimum effect size of the bench_ratio rule: the ratio of the two runs' medians must exceed it (set from the
#: run-to-run spread measured on a 2-core CPU machine under load; docs/report.md gives the measurement)
DEFAULT_BENCH_FACTOR = 1.5
#: significance level of the two-sided Mann-Whitney test of the bench_ratio rule
DEFAULT_BENCH_ALPHA = 0.01
#: the nightly job tests a bench_ratio's samples against those of this many previous runs (pooled)
BENCH_POOL_RUNS = 5
#: the largest accepted --bench-factor (beyond it the rule would flag nothing a person cares about)
BENCH_FACTOR_MAX = 10.0
ENV_KEYS = ("cpu", "gpu", "torch", "cuda", "cudnn", "python", "platform", "tf32_matmul", "tf32_cudnn",
            "deterministic_algorithms", "num_threads", "cpu_capability", "aten_cpu_capability")


def section_metrics(sec: dict) -> dict[str, dict]:
    return {m["key"]: m for m in (sec.get("data") or {}).get("metrics", [])}


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def format_metric(m: dict | None) -> str:
    """A metric's value as text: exact JSON for conventions/verdicts, 6 digits plus its interval otherwise."""
    if m is None:
        return ""
    v = m["value"]
    numeric = m["kind"] not in ("convention", "verdict")
    s = f"{v:.6g}" if isinstance(v, float) and numeric else json.dumps(v)
    if m["kind"] == "share":
        s += f" [{m['lo']:.4g}, {m['hi']:.4g}]"
    elif m["kind"] == "convergence":
        s += f" ±{m['spread']:.3g}"
    elif m["kind"] == "bench_ratio" and m.get("samples"):
        s += f" (median of {len(m['samples'])}: {statistics.median(m['samples']):.4g})"
    return s + (f" {m['unit']}" if m.get("unit") else "")


def _median(xs: list[float]) -> float:
    return statistics.median(xs)


def mann_whitney_p(a: list[float], b: list[float]) -> float:
    """Two-sided Mann-Whitney U p-value that samples ``a`` and ``b`` come from one distribution (scipy; exact
    for small samples without ties, normal approximation with tie correction otherwise)."""
    from scipy.stats import mannwhitneyu

    return float(mannwhitneyu(b, a, alternative="two-sided").pvalue)


def min_p_value(n1: int, n2: int) -> float:
    """The smallest two-sided p-value Mann-Whitney can give for sample sizes n1, n2 (complete separation)."""
    return min(1.0, 2 / math.comb(n1 + n2, n1))


def wilcoxon_p(d: list[float]) -> float:
    """Two-sided Wilcoxon signed-rank p-value that the paired differences ``d`` are centred on 0 (scipy)."""
    from scipy.stats import wilcoxon

    if not any(d):
        return 1.0
    return float(wilcoxon(d, alternative="two-sided").pvalue)


#: the fewest pairs for which the two-sided Wilcoxon signed-rank test can reach p < 0.01 (2 / 2^8)
MIN_PAIRS = 8


def paired_samples(old: dict, new: dict) -> list[tuple[float, float]] | None:
    """(baseline, new) per paired key -- a training step of the same seed and data, say -- when both metrics
    name the same pairing (``paired_by``) and share at least :data:`MIN_PAIRS` keys (``sample_keys``); the
    baseline's value for a key pooled over several runs is its median. None otherwise."""
    by = old.get("paired_by")
    ka, kb = old.get("sample_keys"), new.get("sample_keys")
    if by is None or by != new.get("paired_by") or not ka or not kb:
        return None
    base: dict = {}
    for k, v in zip(ka, old["samples"]):
        base.setdefault(k, []).append(v)
    pairs = [(_median(base[k]), v) for k, v in zip(kb, new["samples"]) if k in base]
    return pairs if len(pairs) >= MIN_PAIRS else None


def judge_bench(old: dict, new: dict, bench_factor: float = DEFAULT_BENCH_FACTOR,
                alpha: float = DEFAULT_BENCH_ALPHA) -> tuple[str, str]:
    """The bench_ratio rule: a Mann-Whitney test over the samples AND a minimum effect size.

    With samples on both sides, a change is flagged only when the samples differ (two-sided Mann-Whitney,
    p < ``alpha``) and the new median lies beyond the baseline by more than ``bench_factor``: above the highest
    median of the baseline runs times the factor (regression), or below the lowest divided by it
    (improvement). ``old["samples"]`` may pool several baseline runs (:func:`pooled_baseline`), whose medians
    are ``old["run_medians"]``; the spread between those runs thus widens the band, so a benchmark that varies
    from run to run on this machine needs a larger change to be flagged. When the samples are too few for the
    test ever to reach ``alpha`` (2 / C(n1+n2, n1) >= alpha), the medians are compared with the factor alone.
    Without samples on either side (reports written before samples were recorded), the single values are
    compared with the factor.
    """
    sa, sb = old.get("samples"), new.get("samples")
    pairs = paired_samples(old, new) if sa and sb else None
    if pairs is not None:
        # paired by key (the same training step in both runs): the step-to-step spread -- bimodal when some steps
        # have many ties and others few -- cancels, and only the change of each step's ratio is tested
        d = [math.log(b / a) for a, b in pairs]
        p = wilcoxon_p(d)
        shift = math.exp(_median(d))
        stats = (f"paired by {old['paired_by']}: median per-pair ratio {shift:.3g} over {len(pairs)} pairs, "
                 f"Wilcoxon p={p:.2g}")
        significant, up, down = p < alpha, shift, 1 / shift
    elif sa and sb:
        meds = old.get("run_medians") or [_median(sa)]
        hi, lo, mb = max(meds), min(meds), _median(sb)
        band = f"{lo:.3g}" if len(meds) == 1 else f"{lo:.3g}..{hi:.3g} over {len(meds)} runs"
        stats = f"median {mb:.3g} vs {band}; {len(sa)} vs {len(sb)} samples"
        if min_p_value(len(sa), len(sb)) < alpha:
            p = mann_whitney_p(sa, sb)
            stats += f", Mann-Whitney p={p:.2g}"
            significant = p < alpha
        else:
            stats += ", too few samples for the test"
            significant = True
        up, down = mb / hi, lo / mb
    else:
        up = new["value"] / old["value"]
        down = 1 / up
        stats, significant = "single values, no samples", True
    if significant and up > bench_factor:
        return "regression", f"{up:.2f}x slower ({stats}; flagged beyond {bench_factor:g}x)"
    if significant and down > bench_factor:
        return "improvement", f"{down:.2f}x faster ({stats})"
    return "same", ""


def pooled_baseline(old: dict, key: str, section: str, history: list[dict]) -> dict:
    """``old`` (a bench_ratio metric of the baseline run) with the samples of the same metric in ``history``
    (older runs of the same machine and mode) added, and each run's median in ``run_medians``: the
    distribution and the run-to-run band the new run is judged against."""
    if not old.get("samples"):
        return old
    pooled, meds = list(old["samples"]), [_median(old["samples"])]
    keys = list(old["sample_keys"]) if old.get("sample_keys") else None
    for rep in history:
        m = section_metrics((rep.get("sections") or {}).get(section) or {}).get(key)
        if m and m.get("kind") == "bench_ratio" and m.get("samples"):
            pooled += m["samples"]
            meds.append(_median(m["samples"]))
            same_pairing = keys is not None and m.get("paired_by") == old.get("paired_by") and m.get("sample_keys")
            keys = keys + list(m["sample_keys"]) if same_pairing else None
    out = {**old, "samples": pooled, "run_medians": meds}
    if keys is None:
        out.pop("sample_keys", None)
    else:
        out["sample_keys"] = keys
    return out


def judge(old: dict | None, new: dict | None, bench_factor: float = DEFAULT_BENCH_FACTOR,
          bench_alpha: float = DEFAULT_BENCH_ALPHA) -> tuple[str, str]:
    """Return ``(verdict, rule)`` for one metric: verdict in regression/improvement/changed/same."""
    if new is None:
        return ("changed", "metric no longer reported") if old and old["kind"] != "info" else ("same", "")
    kind = new["kind"]
    if kind == "info":
        return "same", ""
    if old is None:
        if kind == "counterexample" and new["value"] > 0:
            return "regression", "counterexample appeared (new property, no baseline)"
        return "changed", "new metric"
    if old["kind"] != kind:
        return "changed", f"kind changed {old['kind']} -> {kind}; not compared"
    a, b = old["value"], new["value"]
    if kind in ("convention", "verdict"):
        return ("same", "") if _same(a, b) else ("regression", f"{kind} changed")
    if kind == "counterexample":
        if b > a:
            return "regression", "counterexample appeared"
        return ("improvement", "fewer counterexamples") if b < a else ("same", "")
    if kind == "share":
        if new["lo"] > old["hi"] or new["hi"] < old["lo"]:
            return "regression", "share outside the baseline's confidence interval (intervals disjoint)"
        return "same", ""
    if kind == "convergence":
        fa, fb = math.isfinite(a), math.isfinite(b)
        if fa != fb:
            return ("regression", "convergence metric became non-finite") if fa else (
                "improvement", "convergence metric became finite")
        if not fa:
            return "same", ""
        tol = max(old["spread"], new["spread"])
        return ("regression", f"convergence moved by {abs(b - a):.3g} > seed spread {tol:.3g}") \
            if abs(b - a) > tol else ("same", "")
    if kind == "bench_ratio":
        return judge_bench(old, new, bench_factor, bench_alpha)
    return "same", ""  # pragma: no cover  (kinds are validated)


VERDICT_WORDS = {True: "reproduced", False: "not reproduced", None: "undecided"}


def claim_key(c: dict) -> str:
    """How a claim is matched between two runs: its ``id``, or its text for records written without one."""
    return c.get("id") or c.get("claim", "")


def _verdict(c: dict) -> str:
    return VERDICT_WORDS.get(c.get("held"), "undecided")


def judge_claim(old: dict | None, new: dict | None) -> tuple[str, str]:
    """``(verdict, rule)`` for one claim in two runs: regression (reproduced -> not reproduced), improvement (not
    reproduced -> reproduced), changed (any other verdict change, a new claim, a claim no longer reported) or
    same."""
    if old is None:
        return ("changed", "new claim") if new is not None else ("same", "")
    if new is None:
        return "changed", "claim no longer reported"
    a, b = old.get("held"), new.get("held")
    if a == b:
        return "same", ""
    if a is True and b is False:
        return "regression", "claim no longer reproduced"
    if a is False and b is True:
        return "improvement", "claim now reproduced"
    return "changed", "claim verdict changed"


def claim_changes(name: str, sa: dict | None, sb: dict) -> list[tuple[str, dict]]:
    """``[(verdict, entry)]`` for the claims of section ``name`` whose verdict differs between the baseline
    section ``sa`` and the new one ``sb`` (new and vanished claims included)."""
    old = {claim_key(c): c for c in (sa or {}).get("claims") or [] if isinstance(c, dict)}
    new = {claim_key(c): c for c in sb.get("claims") or [] if isinstance(c, dict)}
    # a baseline written before claims had ids is matched by the claim's text
    by_text = {c.get("claim"): k for k, c in old.items() if not c.get("id")}
    matched = {k: k if k in old else by_text.get(c.get("claim")) for k, c in new.items()}
    seen = set(matched.values())
    out = []
    for key in list(new) + [k for k in old if k not in seen]:
        a, b = old.get(matched.get(key, key)), new.get(key)
        verdict, rule = judge_claim(a, b)
        if verdict == "same":
            continue
        was = _verdict(a) if a is not None else "absent"
        now = _verdict(b) if b is not None else "absent"
        text = (b or a).get("claim", key)
        out.append((verdict, {"section": name, "key": key, "kind": "claim", "rule": rule, "old": was, "new": now,
                              "message": f"claim {text!r}: {was} -> {now} ({rule})"}))
    return out


def _env_changes(ma: dict, mb: dict) -> list[str]:
    return [f"{k}: {ma.get(k)!r} -> {mb.get(k)!r}" for k in ENV_KEYS if not _same(ma.get(k), mb.get(k))]


def require_run(report: dict, what: str) -> dict:
    """Raise unless ``report`` is a single-machine run (merged reports are not compared)."""
    if report.get("kind", "run") != "run":
        raise ReportFormatError(f"the {what} report is a merged report; compare single-machine runs "
                                f"(each machine's own report.json), then merge.")
    return report


def compare_reports(base: dict, new: dict, bench_factor: float = DEFAULT_BENCH_FACTOR,
                    base_path: str = "", bench_alpha: float = DEFAULT_BENCH_ALPHA,
                    history: list[dict] | tuple = ()) -> dict:
    """Compare run report ``new`` against ``base``; returns the ``comparison`` block of a report.

    ``history``: older runs of the baseline's machine and mode (the nightly job passes up to
    :data:`BENCH_POOL_RUNS` - 1 of them); their bench_ratio samples are pooled with the baseline's.
    """
    check_bench_factor(bench_factor)
    check_number(bench_alpha, "bench_alpha", lo=0.0, lo_open=True, hi=0.5, hint="a significance level, e.g. 0.01")
    require_run(base, "baseline")
    require_run(new, "new")
    ida, idb = base["machine"].get("machine_id"), new["machine"].get("machine_id")
    same_machine = ida == idb
    env = _env_changes(base["machine"], new["machine"])
    where = f"run {base.get('created')}" + (f" ({base_path})" if base_path else "")
    if base.get("quick") != new.get("quick"):
        where += " (a quick run)" if base.get("quick") else " (a full run)"
    if same_machine:
        label = f"Compared with {where} on this machine."
    else:
        label = (f"CROSS-MACHINE comparison with {where} from machine {ida!r} (this run: {idb!r}); "
                 f"differences may come from the hardware, not from a change.")
    regressions, changes = [], []
    names = list(new["sections"]) + [n for n in base["sections"] if n not in new["sections"]]
    for name in names:
        sa, sb = base["sections"].get(name), new["sections"].get(name)
        if sb is None:
            changes.append({"section": name, "rule": "section not run", "message": "section not in this run"})
            continue
        if sb.get("status") == "failed" and (sa is None or sa.get("status") != "failed"):
            regressions.append({"section": name, "key": None, "kind": "section", "rule": "section failed",
                                "old": None if sa is None else sa.get("status"), "new": "failed",
                                "message": f"section {name} failed (see its traceback)"})
        for verdict, entry in claim_changes(name, sa, sb):
            _file(entry, verdict, same_machine, regressions, changes)
        ma, mb = section_metrics(sa or {}), section_metrics(sb)
        for key in list(mb) + [k for k in ma if k not in mb]:
            old, cur = ma.get(key), mb.get(key)
            ref = old
            if old and cur and old["kind"] == cur["kind"] == "bench_ratio":
                ref = pooled_baseline(old, key, name, list(history))
            verdict, rule = judge(ref, cur, bench_factor, bench_alpha)
            if verdict == "same":
                continue
            kind = (cur or old)["kind"]
            was = format_metric(old) if old else "absent"
            now = format_metric(cur) if cur else "absent"
            entry = {"section": name, "key": key, "kind": kind, "rule": rule, "old": was, "new": now,
                     "message": f"{key}: {was} -> {now} ({rule})"}
            _file(entry, verdict, same_machine, regressions, changes)
    return {"baseline": {"created": base.get("created"), "machine_id": ida, "path": base_path},
            "same_machine": same_machine, "label": label, "environment_changes": env,
            "bench_factor": bench_factor, "bench_alpha": bench_alpha, "regressions": regressions,
            "changes": changes}


def _file(entry: dict, verdict: str, same_machine: bool, regressions: list, changes: list) -> None:
    """Add ``entry`` to the regressions (marked cross-machine when the runs' machines differ) or, with its
    ``verdict``, to the other changes."""
    if verdict == "regression":
        if not same_machine:
            entry["cross_machine"] = True
            entry["message"] = "[cross-machine] " + entry["message"]
        regressions.append(entry)
    else:
        entry["verdict"] = verdict
        changes.append(entry)


def claim_entries(cmp: dict) -> list[dict]:
    """The comparison's claim entries (regressions first, then the other verdict changes)."""
    return [e for e in list(cmp.get("regressions", [])) + list(cmp.get("changes", [])) if e.get("kind") == "claim"]


def format_comparison(cmp: dict) -> str:
    lines = [cmp["label"]]
    if cmp["environment_changes"]:
        lines.append("Environment changes: " + "; ".join(cmp["environment_changes"]))
    claims = claim_entries(cmp)
    if claims:
        lines.append(f"{len(claims)} claim verdict change(s):")
        lines += [f"  {'REGRESSION' if 'verdict' not in c else c['verdict'].upper()} [{c['section']}] "
                  f"{c['message']}" for c in claims]
    regs = cmp["regressions"]
    lines.append(f"{len(regs)} regression(s)" + (":" if regs else "."))
    lines += [f"  REGRESSION [{r['section']}] {r['message']}" for r in regs]
    if cmp["changes"]:
        lines.append(f"{len(cmp['changes'])} other difference(s) (not regressions):")
        lines += [f"  [{c['section']}] {c['message']}" for c in cmp["changes"]]
    return "\n".join(lines)


def check_bench_factor(factor: float) -> float:
    """Raise :class:`~nsverify.errors.BadArgumentError` unless ``factor`` is a valid minimum effect size."""
    return check_number(factor, "bench_factor", lo=1.0, hi=BENCH_FACTOR_MAX,
                        hint="the smallest slow-down factor that is flagged, e.g. 1.5")


def run_identity(report: dict, path: str = "") -> dict:
    """Which run a report is: its date, the nsverify commit it ran (None before reports recorded it) and its
    machine (host, CPU, GPU, torch)."""
    m = report.get("machine", {})
    return {"created": report.get("created"), "commit": m.get("commit"), "hostname": m.get("hostname"),
            "cpu": m.get("cpu"), "gpu": m.get("gpu"), "torch": m.get("torch"), "quick": report.get("quick"),
            "path": path}


def format_identity(name: str, ident: dict) -> str:
    """One line naming a compared run: "A (baseline): run 2026-01-01T00:00:00+00:00, commit 1a2b3c, machine box
    (Fake CPU 9000, no GPU, torch 2.13.0), quick; reports/a"."""
    machine = ", ".join(str(x) for x in (ident["cpu"], ident["gpu"] or "no GPU", ident["torch"] and
                                         f"torch {ident['torch']}") if x)
    return (f"{name}: run {ident['created'] or 'of unknown date'}, commit {ident['commit'] or 'not recorded'}, "
            f"machine {ident['hostname'] or '?'} ({machine}){', quick' if ident['quick'] else ''}"
            + (f"; {ident['path']}" if ident["path"] else ""))
