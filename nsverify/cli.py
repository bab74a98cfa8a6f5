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
import ast
import importlib
import sys
from pathlib import Path

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


def build_parser(command: str | None = None, *, lazy: bool = False) -> argparse.ArgumentParser:
    """The ``nsverify`` parser. By default every command module of :data:`COMMAND_MODULES` is imported and
    registers its commands (the whole tree, for the tests that walk it). With ``lazy`` (what :func:`main` uses),
    only the module that registers ``command`` is imported; every other command is a stub holding its name and
    help line, read from the source by :func:`command_index`. So ``nsverify --help`` imports no command module
    (no torch) and ``nsverify CMD --help`` imports only CMD's module and what it needs."""
    parser = Parser(
        prog="nsverify",
        description="What automatic differentiation really computes at nonsmooth points, and how much it matters.")
    parser.add_argument("--version", action=_Version,
                        help="print nsverify's version, torch's version and the CPU capability, and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for mod in COMMAND_MODULES:
        stubs = command_index(mod) if lazy else None
        if stubs is None or any(name == command for name, _ in stubs):
            importlib.import_module(mod).register_cli(sub)
        else:
            for name, help_ in stubs:
                sub.add_parser(name, help=help_)
    for p in iter_parsers(parser):  # errors found after parsing name the (sub)command, e.g. "nsverify zones volume"
        p.set_defaults(nsverify_prog=p.prog)
    return parser


def command_index(module: str) -> list[tuple[str, str]] | None:
    """The commands ``module``'s ``register_cli(sub)`` adds, as (name, help) in registration order, read from
    the source without importing it: each ``sub.add_parser("name", help="...")`` call on its ``sub`` argument,
    also inside the nsverify functions it hands ``sub`` to (``register_nightly(sub, ...)``). None when the
    source cannot be read this way (a name or help that is not a literal): the caller imports the module."""
    found: list[tuple[str, str]] = []
    if not _scan_register(module, "register_cli", found, depth=0):
        return None
    return found or None


def _module_source(module: str) -> ast.Module | None:
    """The parsed source of an nsverify module, found from this package's directory (not by importlib, which
    would import its parent packages and their imports)."""
    parts = module.split(".")
    if parts[0] != "nsverify":
        return None
    base = Path(__file__).resolve().parent.joinpath(*parts[1:])
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            try:
                return ast.parse(path.read_text(encoding="utf-8"))
            except (OSError, SyntaxError, UnicodeDecodeError):
                return None
    return None


def _scan_register(module: str, func: str, found: list, depth: int) -> bool:
    """Append the ``add_parser`` calls of ``module.func`` on its first argument to ``found`` (see
    :func:`command_index`); False when they cannot be read as literals."""
    tree = _module_source(module)
    if tree is None or depth > 3:
        return False
    imported = {a.asname or a.name: node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                and node.module and node.module.startswith("nsverify") for a in node.names}
    fn = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == func), None)
    if fn is None and func in imported:  # re-exported (a package's __init__ importing it from its cli module)
        return _scan_register(imported[func], func, found, depth + 1)
    if fn is None or not fn.args.args:
        return False
    param = fn.args.args[0].arg
    calls = sorted((n for n in ast.walk(fn) if isinstance(n, ast.Call)), key=lambda n: (n.lineno, n.col_offset))
    for call in calls:
        f = call.func
        if isinstance(f, ast.Attribute) and f.attr == "add_parser" and isinstance(f.value, ast.Name) \
                and f.value.id == param:
            help_ = next((k.value for k in call.keywords if k.arg == "help"), None)
            name = call.args[0] if call.args else None
            literal = [isinstance(x, ast.Constant) and isinstance(x.value, str) for x in (name, help_)]
            if not all(literal) or any(k.arg == "aliases" for k in call.keywords):
                return False
            found.append((name.value, help_.value))
        elif isinstance(f, ast.Name) and any(isinstance(a, ast.Name) and a.id == param for a in call.args):
            target = imported.get(f.id, module)  # a function of this module, or one imported from nsverify
            if not _scan_register(target, f.id, found, depth + 1):
                return False
    return True


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


def requested_command(argv: list[str]) -> str | None:
    """The command word of a command line (the first word that is not an option: the top level has only
    ``--help`` and ``--version``, which take no value), or None."""
    return next((a for a in argv if not a.startswith("-")), None)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(requested_command(argv), lazy=True)
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
