"""``nsverify nightly``: run every report section and write the HTML + JSON report (or merge runs)."""
from __future__ import annotations

import argparse
import sys

from nsverify.report.compare import DEFAULT_BENCH_FACTOR


def register_cli(sub) -> None:
    p = sub.add_parser("nightly", help="run every report section; write DIR/<UTC>/report.json + index.html",
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--out", default="reports", help="report directory (a run goes to OUT/<UTC timestamp>/)")
    p.add_argument("--quick", action="store_true", help="small sizes: minutes on 2 CPU cores")
    p.add_argument("--only", nargs="+", metavar="SECTION", help="run only these sections")
    p.add_argument("--baseline", metavar="DIR",
                   help="compare with this run (directory or report.json) instead of the previous run on "
                        "this machine")
    p.add_argument("--bench-factor", type=float, default=DEFAULT_BENCH_FACTOR,
                   help="a bench_ratio metric slower by more than this factor is a regression")
    p.add_argument("--fail-on-regression", action="store_true",
                   help="exit with status 1 when the report is red (a regression or a failed section)")
    p.add_argument("--merge", nargs="+", metavar="DIR",
                   help="run nothing: merge these runs (one per machine, e.g. CPU box and GPU box) into one "
                        "report under --out, with a column per machine")
    p.set_defaults(func=_cmd_nightly)


def _cmd_nightly(args) -> int:
    from nsverify.report.compare import check_bench_factor
    from nsverify.report.nightly import ensure_writable_dir, is_red, merge_nightly, run_nightly
    from nsverify.report.schema import load_report

    factor = check_bench_factor(args.bench_factor)
    ensure_writable_dir(args.out)  # fail before any work
    if args.merge:
        run_dir = merge_nightly(args.out, args.merge)
    else:
        run_dir = run_nightly(args.out, quick=args.quick, only=args.only, baseline=args.baseline,
                              bench_factor=factor)
    report = load_report(run_dir)
    red = is_red(report)
    print(f"report written: {run_dir / 'index.html'} ({'RED' if red else 'GREEN'}, "
          f"{len(report['regressions'])} regression(s))", file=sys.stderr)
    for r in report["regressions"]:
        print(f"  REGRESSION [{r['section']}] {r['message']}", file=sys.stderr)
    print(run_dir)
    return 1 if args.fail_on_regression and red else 0
