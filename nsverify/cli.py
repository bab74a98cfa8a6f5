"""The ``nsverify`` console command: dispatch only. Each subcommand lives in its own module, which exposes
``register_cli(subparsers)``; add a module path to :data:`COMMAND_MODULES` to add a subcommand.

Every option is validated before any work, in two steps, and every failure is one line on stderr naming the
problem and the fix, with exit status 2 (never a traceback):

1. while parsing: each option's ``type`` is one of the validating types of :mod:`nsverify.argtypes`
   (:class:`~nsverify.argtypes.Number`, :class:`~nsverify.argtypes.Choice`, :class:`~nsverify.argtypes.Checked`,
   :class:`~nsverify.argtypes.CsvList`, :class:`~nsverify.argtypes.KeyValue`, the path types
   :class:`~nsverify.argtypes.OutputFile`, :class:`~nsverify.argtypes.OutputDir`,
   :class:`~nsverify.argtypes.InputFile`, :class:`~nsverify.argtypes.InputDir`, and the report's
   :class:`nsverify.report.cli.ReportPath`), so a count of 0, a NaN, an unknown name, an unwritable output path
   or a corrupted input file never reaches the command;
2. a command's ``check(args)`` (``parser.set_defaults(check=...)``) for what involves several options or the
   contents of an input file (a resume file of another configuration, a model that does not take the
   dataset's images).

After Ctrl-C a command prints one line and exits with status 130; a resumable command (``nightly``,
``releases``, ``zones volume --resume``) sets ``on_interrupt(args)`` (``parser.set_defaults``), whose line
(:func:`nsverify.argtypes.resume_hint`) says to rerun the same command and where the finished parts are kept.
``nsverify --version`` prints nsverify's and torch's versions and the CPU capability.

Only then :func:`run_command` calls the command's ``func(args)``. ``tests/test_cli_validation.py`` walks
:func:`build_parser` and checks every option with bad values generated from these types.
"""
from __future__ import annotations

import argparse
import importlib
import sys

from nsverify.argtypes import Parser, UsageError, one_line
from nsverify.errors import NsverifyError

#: modules providing ``register_cli(subparsers)``; each sets ``func`` on its parser via set_defaults.
#: ``nightly`` registers from :mod:`nsverify.sections.cli`, the layer that knows the report's sections.
COMMAND_MODULES = [
    "nsverify.sections.cli",
    "nsverify.conventions.cli",
    "nsverify.papers.costs.cli",
    "nsverify.report.cli",
    "nsverify.papers.zones.cli",
]


def version_text() -> str:
    """``nsverify --version``: nsverify's version, torch's version and the CPU capability, one line each."""
    import torch

    from nsverify import __version__

    return (f"nsverify {__version__}\ntorch {torch.__version__}\n"
            f"CPU capability {torch.backends.cpu.get_cpu_capability()}")


class _Version(argparse.Action):
    """Print :func:`version_text` (its lines kept, unlike argparse's version action) and exit 0."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings, dest, nargs=0, default=default, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        print(version_text())
        parser.exit(0)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="nsverify",
        description="What automatic differentiation really computes at nonsmooth points, and how much it matters.")
    parser.add_argument("--version", action=_Version,
                        help="print nsverify's version, torch's version and the CPU capability, and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for mod in COMMAND_MODULES:
        importlib.import_module(mod).register_cli(sub)
    for p in iter_parsers(parser):  # errors found after parsing name the (sub)command, e.g. "nsverify zones volume"
        p.set_defaults(nsverify_prog=p.prog)
    return parser


def iter_parsers(parser: argparse.ArgumentParser):
    """``parser`` and every subcommand parser below it (depth first)."""
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in dict.fromkeys(action.choices.values()):  # aliases map to the same parser
                yield from iter_parsers(child)


def run_command(args) -> int:
    """Run the parsed, validated command (the work; everything before it is validation)."""
    return int(args.func(args) or 0)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    command = "nsverify"
    args = None
    try:
        args = parser.parse_args(argv)
        command = getattr(args, "nsverify_prog", command)
        if not getattr(args, "func", None):
            parser.print_help(file=sys.stderr)
            return 2
        check = getattr(args, "check", None)
        if check is not None:
            check(args)
        return run_command(args)
    except UsageError as exc:
        print(f"{exc.prog}: error: {one_line(exc)}", file=sys.stderr)
        return 2
    except NsverifyError as exc:
        print(f"{command}: error: {one_line(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C: one line (with the resume hint of a resumable command), status 130
        hint = getattr(args, "on_interrupt", None)
        print(f"{command}: {hint(args) if hint else 'interrupted'}", file=sys.stderr, flush=True)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
