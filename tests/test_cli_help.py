"""The one help style of every command (issue 25): every option has help, a default is shown once and the same
way ("(default: X)", added by :class:`nsverify.argtypes.HelpFormatter`), required options say so, and
``nsverify --version`` names nsverify, torch and the CPU capability."""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

import pytest

from nsverify import cli

ROOT = Path(__file__).resolve().parents[1]


def all_parsers():
    """(command words, parser) of the top command and every subcommand, runnable or not."""
    def walk(words, parser):
        yield tuple(words), parser
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, child in action.choices.items():
                    yield from walk([*words, name], child)
    yield from walk([], cli.build_parser())


def documented_actions(parser):
    return [a for a in parser._actions if not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction))
            and a.help is not argparse.SUPPRESS]


def formatted_help(parser, action) -> str:
    """The help text of one action as ``--help`` prints it (defaults and "required" added), on one line."""
    fmt = parser._get_formatter()
    text = fmt._expand_help(action) if action.help else ""
    return " ".join(text.split())


PARSERS = list(all_parsers())


@pytest.mark.parametrize("words,parser", PARSERS, ids=lambda x: " ".join(x) if isinstance(x, tuple) else "")
def test_every_option_has_help_and_one_default_style(words, parser):
    for action in documented_actions(parser):
        name = action.option_strings[0] if action.option_strings else action.dest
        text = formatted_help(parser, action)
        assert (action.help or "").strip(), f"nsverify {' '.join(words)} {name} has no help"
        assert text.count("default") <= 1, f"{' '.join(words)} {name}: default shown twice: {text!r}"
        assert not re.search(r"Default:|default is|defaults to", text), \
            f"{' '.join(words)} {name}: a default written another way than '(default: X)': {text!r}"
        shows = action.option_strings and action.default not in (None, False, argparse.SUPPRESS)
        if shows and not action.required:
            assert "(default: " in text, f"{' '.join(words)} {name}: default {action.default!r} not shown: {text!r}"
        if action.required and action.option_strings:
            assert text.endswith("(required)"), f"{' '.join(words)} {name} is required but not marked: {text!r}"
        else:
            assert "(required)" not in text, f"{' '.join(words)} {name} is marked required but is not"


def test_the_walk_sees_every_command_and_the_known_required_option():
    names = {" ".join(w) for w, _ in PARSERS}
    assert {"nightly", "compare", "conventions", "releases", "costs sat", "costs ratio", "zones volume",
            "zones thresholds"} <= names
    volume = dict(PARSERS)[("zones", "volume")]
    tau = next(a for a in volume._actions if "--tau" in a.option_strings)
    assert tau.required and formatted_help(volume, tau).endswith("(required)")
    assert "[--tau" not in volume.format_usage()  # the usage line shows it as required too


def test_help_is_printed_in_one_style(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["costs", "sat", "--help"])
    assert exc.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "--vars VARS number of Boolean variables" in out and "(default: 3)" in out
    assert "(default: 20000)" in out


def test_version_names_nsverify_torch_and_the_cpu(capsys):
    import torch

    import nsverify

    with pytest.raises(SystemExit) as exc:
        cli.main(["--version"])
    assert exc.value.code == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0] == f"nsverify {nsverify.__version__}"
    assert lines[1] == f"torch {torch.__version__}"
    assert lines[2] == f"CPU capability {torch.backends.cpu.get_cpu_capability()}"


def test_version_from_the_console_command():
    proc = subprocess.run([sys.executable, "-m", "nsverify", "--version"], capture_output=True, text=True,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, timeout=300)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert proc.stdout.startswith("nsverify ") and "\ntorch " in proc.stdout and "CPU capability " in proc.stdout


def test_top_level_help_read_from_the_sources_equals_the_full_parsers(capsys):
    """``nsverify --help`` builds stubs from the command modules' sources (no import); it must print what the
    parser with every module imported prints, and know every command's module."""
    for mod in cli.COMMAND_MODULES:
        assert cli.command_index(mod), f"{mod}: its commands cannot be read from its source"
    with pytest.raises(SystemExit) as exc:
        cli.main(["--help"])
    assert exc.value.code == 0
    assert capsys.readouterr().out == cli.build_parser().format_help()


def test_a_command_word_builds_that_commands_real_parser():
    full = {" ".join(w): p.format_help() for w, p in all_parsers()}
    for word in ("nightly", "compare", "costs", "zones", "conventions", "releases"):
        parser = cli.build_parser(word, lazy=True)
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        assert sub.choices[word].format_help() == full[word], word


@pytest.mark.parametrize("argv", [["--help"], ["compare", "--help"], ["nightly", "--help"], ["costs", "--help"],
                                  ["costs", "ratio", "--help"]])
def test_help_imports_no_torch(argv):
    """``nsverify --help`` (and the help of a command whose module does not need it) stays fast: no torch,
    numpy, mpmath or cvxpy import (they took 1.4 s of CPU, 2.6-4.4 s on a loaded machine, before)."""
    code = ("import sys\nfrom nsverify.cli import main\n"
            f"try:\n    main({argv!r})\nexcept SystemExit as exc:\n    assert exc.code == 0, exc.code\n"
            "print(sorted(m for m in ('torch', 'numpy', 'mpmath', 'cvxpy') if m in sys.modules))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == "[]", proc.stdout[-500:]
