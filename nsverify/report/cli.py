"""The report's commands: :class:`ReportPath` (the type of every option naming a report), the ``nsverify nightly``
options (:func:`register_nightly`: run the report's sections and write the HTML + JSON report, or merge runs) and
``nsverify compare`` (:func:`register_cli`: the differences between two reports, judged by
:mod:`nsverify.report.compare`). The report's other modules hold no command: they never import this one.

The report sits below its sections, so the sections are passed in: :mod:`nsverify.sections.cli` registers
``nightly`` with :func:`nsverify.sections.load_sections`.
"""
from __future__ import annotations

import json
import os
import sys
from typing import Callable, Sequence

from nsverify.argtypes import ArgType, Choice, Number, OutputDir
from nsverify.errors import BadArgumentError
from nsverify.report import Section
from nsverify.report.compare import (
    BENCH_FACTOR_MAX,
    DEFAULT_BENCH_FACTOR,
    compare_reports,
    format_comparison,
    format_identity,
    require_run,
    run_identity,
)
from nsverify.report.schema import load_report, resolve_report_path

SectionLoader = Callable[[], Sequence[Section]]


class ReportPath(ArgType):
    """A report written by ``nsverify nightly``: a run directory, its report.json, or a reports root (its
    ``latest``); read and validated (:func:`nsverify.report.schema.load_report`). Returns the text."""

    def __init__(self, what: str):
        self.what = what

    def convert(self, text: str):
        if not text:
            raise BadArgumentError(f"{self.what}: give a run directory or its report.json.")
        load_report(text)
        return text


def bench_factor_type():
    """The ``--bench-factor`` option's type (nightly and compare): the minimum effect size, 1 to 10."""
    return Number(lo=1.0, hi=BENCH_FACTOR_MAX, hint="the smallest slow-down factor that is flagged, e.g. 1.5")


def register_nightly(sub, load_sections: SectionLoader) -> None:
    """Add the ``nightly`` subcommand to ``sub``; ``load_sections()`` returns the sections it runs (and whose
    names ``--only`` accepts), called only when the command runs or ``--only`` is given."""

    def section_names() -> list[str]:
        return [s.name for s in load_sections()]

    def cmd_nightly(args) -> int:
        return _cmd_nightly(args, load_sections)

    p = sub.add_parser("nightly", help="run every report section; write DIR/<UTC>/report.json + index.html")
    p.add_argument("--out", default="reports", type=OutputDir("--out"),
                   help="report directory (a run goes to OUT/<UTC timestamp>/)")
    p.add_argument("--quick", action="store_true", help="small sizes: minutes on 2 CPU cores")
    p.add_argument("--only", nargs="+", metavar="SECTION",
                   type=Choice(section_names, "report section", example="conventions"),
                   help="run only these sections")
    p.add_argument("--baseline", metavar="DIR", type=ReportPath("--baseline"),
                   help="compare with this run (directory or report.json) instead of the previous run on "
                        "this machine")
    p.add_argument("--bench-factor", type=bench_factor_type(), default=DEFAULT_BENCH_FACTOR,
                   help="minimum effect size: a bench_ratio metric is a regression when its samples differ "
                        "(Mann-Whitney) AND their median is slower by more than this factor")
    p.add_argument("--fail-on-regression", action="store_true",
                   help="exit with status 1 when the report is red (a regression or a failed section)")
    p.add_argument("--merge", nargs="+", metavar="DIR", type=ReportPath("--merge"),
                   help="run nothing: merge these runs (one per machine, e.g. CPU box and GPU box) into one "
                        "report under --out, with a column per machine")
    p.set_defaults(func=cmd_nightly, check=_check_nightly, on_interrupt=_interrupted)


def _interrupted(args) -> str:
    """After Ctrl-C: a run (not --merge) keeps its sections' partial results under OUT/.scratch."""
    from nsverify.argtypes import resume_hint

    return resume_hint(None if args.merge else os.path.join(args.out, ".scratch"))


def _check_nightly(args) -> None:
    from nsverify.report.merge import load_sources

    if args.merge:
        extra = [o for o, v in (("--quick", args.quick), ("--only", args.only), ("--baseline", args.baseline))
                 if v]
        if extra:
            raise BadArgumentError(f"--merge runs no section, so {', '.join(extra)} would be ignored; drop "
                                   f"{'it' if len(extra) == 1 else 'them'} or drop --merge.")
        load_sources(args.merge)  # at least two single-machine runs of different machines
    if args.baseline is not None:
        require_run(load_report(args.baseline), "--baseline")


def _cmd_nightly(args, load_sections: SectionLoader) -> int:
    from nsverify.report.nightly import is_red, merge_nightly, run_nightly

    if args.merge:
        run_dir = merge_nightly(args.out, args.merge)
    else:
        run_dir = run_nightly(args.out, quick=args.quick, only=args.only, baseline=args.baseline,
                              bench_factor=args.bench_factor, sections=load_sections())
    from nsverify.report.html import claims_state_text, report_claims, run_health

    report = load_report(run_dir)
    red = is_red(report)
    claims = [c for _, _, c in report_claims(report)]
    print(f"report written: {run_dir / 'index.html'}\n  run health: {run_health(report)[1]}"
          + (f"\n  claims: {claims_state_text(claims)}" if claims else ""), file=sys.stderr)
    for r in report["regressions"]:
        print(f"  REGRESSION [{r['section']}] {r['message']}", file=sys.stderr)
    print(run_dir)
    return 1 if args.fail_on_regression and red else 0


def register_cli(sub) -> None:
    """Add the ``compare`` subcommand to ``sub``."""
    p = sub.add_parser("compare", help="print the differences between two nightly reports (A = baseline)")
    p.add_argument("a", type=ReportPath("A (the baseline)"),
                   help="baseline: a run directory, its report.json, or a reports root (uses latest)")
    p.add_argument("b", type=ReportPath("B (the run to judge)"), help="the run to judge (same forms as A)")
    p.add_argument("--bench-factor", type=bench_factor_type(), default=DEFAULT_BENCH_FACTOR,
                   help="minimum effect size: a bench_ratio is a regression when its samples differ "
                        "(Mann-Whitney) AND their median is slower by more than this factor")
    p.add_argument("--json", action="store_true", help="print the comparison as JSON")
    p.add_argument("--fail-on-regression", action="store_true", help="exit with status 1 if any regression")
    p.set_defaults(func=_cmd_compare, check=_check_compare)


def _check_compare(args) -> None:
    require_run(load_report(args.a), "A (baseline)")
    require_run(load_report(args.b), "B")


def same_run(a: str, b: str) -> bool:
    """Whether two report paths (run directories, report.json files, reports roots) name one run."""
    return os.path.realpath(resolve_report_path(a)) == os.path.realpath(resolve_report_path(b))


def _cmd_compare(args) -> int:
    if same_run(args.a, args.b):
        print(f"note: A and B are the same run ({os.path.realpath(resolve_report_path(args.a))}), so nothing "
              "can differ; to see what changed, pass an earlier run as A (e.g. reports/<UTC stamp>) and "
              "reports/latest as B.", file=sys.stderr)
    a, b = load_report(args.a), load_report(args.b)
    cmp = compare_reports(a, b, args.bench_factor, base_path=str(args.a))
    ids = {"a": run_identity(a, str(args.a)), "b": run_identity(b, str(args.b))}
    if args.json:
        print(json.dumps({**ids, **cmp}, indent=1), file=sys.stdout)
    else:
        print(format_identity("A (baseline)", ids["a"]) + "\n" + format_identity("B (judged)", ids["b"]) + "\n"
              + format_comparison(cmp), file=sys.stdout)
    return 1 if args.fail_on_regression and cmp["regressions"] else 0
