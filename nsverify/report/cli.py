"""``nsverify nightly``: run every report section and write the HTML + JSON report."""
from __future__ import annotations

import argparse
import sys


def register_cli(sub) -> None:
    p = sub.add_parser("nightly", help="run every report section; write DIR/<UTC>/report.json + index.html",
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--out", default="reports", help="report directory (a run goes to OUT/<UTC timestamp>/)")
    p.add_argument("--quick", action="store_true", help="small sizes: minutes on 2 CPU cores")
    p.add_argument("--only", nargs="+", metavar="SECTION", help="run only these sections")
    p.set_defaults(func=_cmd_nightly)


def _cmd_nightly(args) -> int:
    from .nightly import ensure_writable_dir, run_nightly

    ensure_writable_dir(args.out)  # fail before any work
    run_dir = run_nightly(args.out, quick=args.quick, only=args.only)
    print(f"report written: {run_dir / 'index.html'}", file=sys.stderr)
    print(run_dir)
    return 0
