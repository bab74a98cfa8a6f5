"""The report's command-line pieces: :class:`ReportPath` (the type of every option naming a report) and the
``nsverify nightly`` options (:func:`register_nightly`: run the report's sections and write the HTML + JSON
report, or merge runs).

The report sits below its sections, so the sections are passed in: :mod:`nsverify.sections.cli` registers
``nightly`` with :func:`nsverify.sections.load_sections`.
"""
from __future__ import annotations

import os
import sys
from typing import Callable, Sequence

from nsverify.argtypes import ArgType, Choice, OutputDir
from nsverify.errors import BadArgumentError
from nsverify.report import Section
from nsverify.report.compare import DEFAULT_BENCH_FACTOR, bench_factor_type

SectionLoader = Callable[[], Sequence[Section]]


class ReportPath(ArgType):
    """A report written by ``nsverify nightly``: a run directory, its report.json, or a reports root (its
    ``latest``); read and validated (:func:`nsverify.report.schema.load_report`). Returns the text."""

    def __init__(self, what: str):
        self.what = what

    def convert(self, text: str):
        from nsverify.report.schema import load_report

        if not text:
            raise BadArgumentError(f"{self.what}: give a run directory or its report.json.")
        load_report(text)
        return text


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
    from nsverify.report.compare import require_run
    from nsverify.report.merge import load_sources
    from nsverify.report.schema import load_report

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
    from nsverify.report.schema import load_report

    if args.merge:
        run_dir = merge_nightly(args.out, args.merge)
    else:
        run_dir = run_nightly(args.out, quick=args.quick, only=args.only, baseline=args.baseline,
                              bench_factor=args.bench_factor, sections=load_sections())
    report = load_report(run_dir)
    red = is_red(report)
    print(f"report written: {run_dir / 'index.html'} ({'RED' if red else 'GREEN'}, "
          f"{len(report['regressions'])} regression(s))", file=sys.stderr)
    for r in report["regressions"]:
        print(f"  REGRESSION [{r['section']}] {r['message']}", file=sys.stderr)
    print(run_dir)
    return 1 if args.fail_on_regression and red else 0
