"""The ``nsverify`` console command. Each subcommand lives in its own module, which exposes
``register_cli(subparsers)``; add a module path to :data:`COMMAND_MODULES` to add a subcommand."""
from __future__ import annotations

import argparse
import importlib
import sys

from nsverify.errors import NsverifyError

#: modules providing ``register_cli(subparsers)``; each sets ``func`` on its parser via set_defaults
COMMAND_MODULES = [
    "nsverify.report.cli",
    "nsverify.conventions",
    "nsverify.papers.costs.cli",
    "nsverify.report.compare",
    "nsverify.papers.zones.cli",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="nsverify",
        description="What automatic differentiation really computes at nonsmooth points, and how much it matters.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for mod in COMMAND_MODULES:
        importlib.import_module(mod).register_cli(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except NsverifyError as exc:
        print(f"nsverify {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"nsverify {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
