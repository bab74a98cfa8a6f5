"""Compare two nightly reports metric by metric and name the regressions (rules: docs/report.md).

Every section returns ``data["metrics"]``: a list of ``{"key", "kind", "value", "lo"?, "hi"?, "spread"?}``.
Metrics are matched by (section, key). One rule per kind decides whether a difference is a regression:

=================  =====================================================================================
``convention``     the value changed (exact JSON equality; NaN equals NaN)
``verdict``        the value changed
``counterexample`` the count grew (a metric absent from the baseline counts as 0 there)
``share``          the two runs' confidence intervals [lo, hi] are disjoint
``convergence``    \\|new - old\\| > max(old spread, new spread); a value turning NaN/inf also counts
``bench_ratio``    new / old > bench_factor (default 1.10); both are ratios to a same-run baseline
``info``           never compared
=================  =====================================================================================

A section that failed in the new run (and not in the baseline) is a regression too. Reports from different
machines are still compared, but the comparison is labelled cross-machine and every regression carries
``"cross_machine": true``; environment differences (torch, CUDA, cuDNN, TF32, determinism) are listed.
"""
from __future__ import annotations

import argparse
import json
import math
import sys

from nsverify.errors import NsverifyError, ReportFormatError
from nsverify.report.schema import load_report

DEFAULT_BENCH_FACTOR = 1.10
ENV_KEYS = ("cpu", "gpu", "torch", "cuda", "cudnn", "python", "platform", "tf32_matmul", "tf32_cudnn",
            "deterministic_algorithms", "num_threads")


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
    return s + (f" {m['unit']}" if m.get("unit") else "")


def judge(old: dict | None, new: dict | None, bench_factor: float = DEFAULT_BENCH_FACTOR) -> tuple[str, str]:
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
        r = b / a
        if r > bench_factor:
            return "regression", f"benchmark ratio {r:.3f}x slower (> {bench_factor:g}x)"
        if r < 1 / bench_factor:
            return "improvement", f"benchmark ratio {1 / r:.3f}x faster"
        return "same", ""
    return "same", ""  # pragma: no cover  (kinds are validated)


def _env_changes(ma: dict, mb: dict) -> list[str]:
    return [f"{k}: {ma.get(k)!r} -> {mb.get(k)!r}" for k in ENV_KEYS if not _same(ma.get(k), mb.get(k))]


def require_run(report: dict, what: str) -> dict:
    """Raise unless ``report`` is a single-machine run (merged reports are not compared)."""
    if report.get("kind", "run") != "run":
        raise ReportFormatError(f"the {what} report is a merged report; compare single-machine runs "
                                f"(each machine's own report.json), then merge.")
    return report


def compare_reports(base: dict, new: dict, bench_factor: float = DEFAULT_BENCH_FACTOR,
                    base_path: str = "") -> dict:
    """Compare run report ``new`` against ``base``; returns the ``comparison`` block of a report."""
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
        ma, mb = section_metrics(sa or {}), section_metrics(sb)
        for key in list(mb) + [k for k in ma if k not in mb]:
            old, cur = ma.get(key), mb.get(key)
            verdict, rule = judge(old, cur, bench_factor)
            if verdict == "same":
                continue
            kind = (cur or old)["kind"]
            was = format_metric(old) if old else "absent"
            now = format_metric(cur) if cur else "absent"
            entry = {"section": name, "key": key, "kind": kind, "rule": rule, "old": was, "new": now,
                     "message": f"{key}: {was} -> {now} ({rule})"}
            if verdict == "regression":
                if not same_machine:
                    entry["cross_machine"] = True
                    entry["message"] = "[cross-machine] " + entry["message"]
                regressions.append(entry)
            else:
                entry["verdict"] = verdict
                changes.append(entry)
    return {"baseline": {"created": base.get("created"), "machine_id": ida, "path": base_path},
            "same_machine": same_machine, "label": label, "environment_changes": env,
            "bench_factor": bench_factor, "regressions": regressions, "changes": changes}


def format_comparison(cmp: dict) -> str:
    lines = [cmp["label"]]
    if cmp["environment_changes"]:
        lines.append("Environment changes: " + "; ".join(cmp["environment_changes"]))
    regs = cmp["regressions"]
    lines.append(f"{len(regs)} regression(s)" + (":" if regs else "."))
    lines += [f"  REGRESSION [{r['section']}] {r['message']}" for r in regs]
    if cmp["changes"]:
        lines.append(f"{len(cmp['changes'])} other difference(s) (not regressions):")
        lines += [f"  [{c['section']}] {c['message']}" for c in cmp["changes"]]
    return "\n".join(lines)


def register_cli(sub) -> None:
    p = sub.add_parser("compare", help="print the differences between two nightly reports (A = baseline)",
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("a", help="baseline: a run directory, its report.json, or a reports root (uses latest)")
    p.add_argument("b", help="the run to judge (same forms as A)")
    p.add_argument("--bench-factor", type=float, default=DEFAULT_BENCH_FACTOR,
                   help="a bench_ratio slower by more than this factor is a regression")
    p.add_argument("--json", action="store_true", help="print the comparison as JSON")
    p.add_argument("--fail-on-regression", action="store_true", help="exit with status 1 if any regression")
    p.set_defaults(func=_cmd_compare)


def check_bench_factor(factor: float) -> float:
    if not (math.isfinite(factor) and factor >= 1.0):
        raise NsverifyError(f"--bench-factor {factor} is invalid: give a factor >= 1.0 (for example 1.10 = "
                            f"10% slower is a regression).")
    return factor


def _cmd_compare(args) -> int:
    factor = check_bench_factor(args.bench_factor)
    a, b = load_report(args.a), load_report(args.b)
    cmp = compare_reports(a, b, factor, base_path=str(args.a))
    print(json.dumps(cmp, indent=1) if args.json else format_comparison(cmp), file=sys.stdout)
    return 1 if args.fail_on_regression and cmp["regressions"] else 0
