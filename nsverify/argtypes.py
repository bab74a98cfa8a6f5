"""The validating argparse types of every nsverify command (plumbing: imports nothing above
:mod:`nsverify.errors` and :mod:`nsverify.files`).

Each option's ``type`` is one of them (:class:`Number`, :class:`Choice`, :class:`Checked`, :class:`CsvList`,
:class:`KeyValue`, the :class:`PathArg` types :class:`OutputFile`, :class:`OutputDir`, :class:`InputFile`,
:class:`InputDir`; :class:`nsverify.report.cli.ReportPath` builds on :class:`ArgType` for report paths), so a count
of 0, a NaN, an unknown name, an unwritable output path or a corrupted input file fails while parsing, as one
line naming the problem and the fix, and never reaches the command. :class:`Parser` turns argparse's own errors
into the same one-line :class:`UsageError`. The dispatch (``nsverify COMMAND``) is :mod:`nsverify.cli`.
"""
from __future__ import annotations

import argparse
import importlib
import math
from typing import Callable, Iterable

from nsverify.errors import BadArgumentError, NsverifyError, check_number


def one_line(exc: BaseException) -> str:
    """``exc``'s message on one line (every command error is printed as one line)."""
    return " ".join(str(exc).split())


class UsageError(NsverifyError):
    """A command line argparse rejected (unknown option, missing or invalid argument)."""

    def __init__(self, prog: str, message: str):
        super().__init__(message)
        self.prog = prog


def show_default(value) -> str:
    """A default as the help shows it: lists comma-separated (as they are typed), the rest as text."""
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)


class HelpFormatter(argparse.HelpFormatter):
    """The one help style of every nsverify command: each option's help ends with ``(default: X)`` when it has a
    default worth showing (not None, not a flag's False, not already written as ``(default: ...)`` in the help,
    for defaults that are a description such as "all") and with ``(required)`` when it is required."""

    def _get_help_string(self, action):
        help_ = (action.help or "").replace("%", "%%")  # argparse %-formats the help; ours has no %(...)s
        extra = []
        if action.required and action.option_strings:
            extra.append("required")
        default = action.default
        if ("(default:" not in help_ and default is not None and default is not argparse.SUPPRESS
                and default is not False and action.option_strings and not action.required
                and not isinstance(action, (argparse._HelpAction, argparse._VersionAction))):
            extra.append(f"default: {show_default(default)}".replace("%", "%%"))
        return help_ + "".join(f" ({e})" for e in extra)


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one-line :class:`UsageError` exceptions (no usage block, no exit), and
    whose help has the one style of :class:`HelpFormatter` (subcommand parsers inherit both)."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str):
        message = one_line(message)
        ours = ArgType.last_error is not None and message.endswith(ArgType.last_error)
        ArgType.last_error = None
        head, sep, rest = message.partition(": ")
        if ours and sep and head.startswith("argument "):
            option = head.removeprefix("argument ").split("/")[0]
            if rest.startswith(option):  # the message names the option itself
                message = rest
        if not ours:  # argparse's own message (unknown option, missing argument): point at the help
            message = f"{message.rstrip('.')}. See `{self.prog} --help`."
        raise UsageError(self.prog, message)


# --------------------------------------------------------------------------------------------------------------
# Validating argparse types. Each converts the option's text or raises NsverifyError; ``example`` is a valid
# text (the generated bad-input tests build valid command lines from it).
# --------------------------------------------------------------------------------------------------------------
class ArgType:
    """Base class: ``convert(text)`` returns the value or raises :class:`NsverifyError` naming the fix."""

    example = ""
    #: the message of the last conversion that failed (the parser leaves it as it is, without a --help hint)
    last_error: str | None = None

    def convert(self, text: str):
        raise NotImplementedError

    def __call__(self, text: str):
        try:
            return self.convert(text)
        except NsverifyError as exc:
            ArgType.last_error = one_line(exc)
            raise argparse.ArgumentTypeError(ArgType.last_error) from None

    def __repr__(self) -> str:  # argparse names the type in some messages
        return type(self).__name__


class Number(ArgType):
    """An int (``integer=True``) or float within ``[lo, hi]`` (``lo_open``: above ``lo``); NaN never, inf only
    with ``allow_inf``. ``hint`` says what the number is."""

    def __init__(self, *, integer: bool = False, lo: float | None = None, lo_open: bool = False,
                 hi: float | None = None, allow_inf: bool = False, hint: str = ""):
        self.integer, self.lo, self.lo_open, self.hi, self.allow_inf, self.hint = (
            integer, lo, lo_open, hi, allow_inf, hint)
        base = lo if lo is not None else 0
        self.example = str(int(base) + 1) if integer else repr(float(base) + 1.0)

    def convert(self, text: str):
        try:
            value = int(text, 10) if self.integer else float(text)
        except ValueError:
            want = "an integer" if self.integer else "a number"
            raise BadArgumentError(f"{text!r} is not {want}{f' ({self.hint})' if self.hint else ''}.") from None
        return check_number(value, None, integer=self.integer, lo=self.lo,
                            lo_open=self.lo_open, hi=self.hi, allow_inf=self.allow_inf, hint=self.hint)


class Choice(ArgType):
    """One of ``choices`` (a list, or a function returning it, called only when the option is given);
    ``convert`` maps the chosen text to the value (default: the text)."""

    def __init__(self, choices: Iterable[str] | Callable[[], Iterable[str]], what: str,
                 convert: Callable[[str], object] | None = None, example: str | None = None):
        self._choices, self.what, self._convert = choices, what, convert
        self.example = example if example is not None else (None if callable(choices) else list(choices)[0])

    def choices(self) -> list[str]:
        return list(self._choices() if callable(self._choices) else self._choices)

    def convert(self, text: str):
        known = self.choices()
        if text not in known:
            raise BadArgumentError(f"unknown {self.what} {text!r}; choose from {', '.join(known)}.")
        return self._convert(text) if self._convert else text


def deferred(module: str, name: str) -> Callable:
    """``module.name``, imported at its first call: an option's checker that lives in a heavy module (torch's
    dtypes and devices) costs nothing until an option is parsed, so a command's ``--help`` stays fast."""

    def call(*args, **kwargs):
        return getattr(importlib.import_module(module), name)(*args, **kwargs)

    call.__name__ = call.__qualname__ = name
    return call


class Checked(ArgType):
    """A name validated by ``check(text)`` (a library parser such as ``parse_dtype``, raising NsverifyError);
    returns the text, or ``check``'s result with ``keep_text=False``."""

    def __init__(self, check: Callable[[str], object], example: str, keep_text: bool = True):
        self.check, self.example, self.keep_text = check, example, keep_text

    def convert(self, text: str):
        if not text.strip():
            raise BadArgumentError(f"an empty value is not valid here; give for example {self.example!r}.")
        value = self.check(text.strip())
        return text.strip() if self.keep_text else value


class CsvList(ArgType):
    """A non-empty comma-separated list without repeats, each item converted by ``item``; returns a list."""

    def __init__(self, item: ArgType, what: str, count: int | None = None, example: str | None = None):
        self.item, self.what, self.count = item, what, count
        self.example = example or item.example

    def convert(self, text: str):
        parts = [p.strip() for p in text.split(",")]
        if not any(parts):
            raise BadArgumentError(f"no {self.what} given; give {self.count or 'one or more'}, comma-separated "
                                   f"(for example {self.example!r}).")
        if not all(parts):
            raise BadArgumentError(f"{text!r} has an empty item; separate the {self.what} by single commas.")
        if self.count is not None and len(parts) != self.count:
            raise BadArgumentError(f"{text!r} names {len(parts)} {self.what}; give exactly {self.count}, "
                                   f"comma-separated (for example {self.example!r}).")
        dup = sorted({p for p in parts if parts.count(p) > 1})
        if dup:
            raise BadArgumentError(f"{', '.join(dup)} given twice in {text!r}; name each of the {self.what} once.")
        return [self.item.convert(p) for p in parts]


class KeyValue(ArgType):
    """``KEY=VALUE`` with ``key`` and ``value`` validated by their types; returns ``(key, value)``."""

    def __init__(self, key: ArgType, value: ArgType, example: str):
        self.key, self.value, self.example = key, value, example

    def convert(self, text: str):
        k, sep, v = text.partition("=")
        if not sep or not k.strip() or not v.strip():
            raise BadArgumentError(f"{text!r} is not KEY=VALUE; write it like {self.example!r}.")
        return self.key.convert(k.strip()), self.value.convert(v.strip())


class PathArg(ArgType):
    """A path checked by ``nsverify.files.<check>`` (``check`` names the function); returns the text."""

    check = ""
    noun = "a path"

    def __init__(self, option: str):
        self.option = option

    def convert(self, text: str):
        from nsverify import files

        if not text:
            raise BadArgumentError(f"{self.option} needs {self.noun} (for example {self.option} {self.example}).")
        getattr(files, self.check)(text, self.option)
        return text


class OutputFile(PathArg):
    """A file path nsverify may write (:func:`nsverify.files.check_output_file`); ``-`` means stdout when
    ``allow_stdout``."""

    check, noun, example = "check_output_file", "a file path", "out.json"

    def __init__(self, option: str, allow_stdout: bool = False):
        super().__init__(option)
        self.allow_stdout = allow_stdout

    def convert(self, text: str):
        return text if self.allow_stdout and text == "-" else super().convert(text)


class OutputDir(PathArg):
    """A directory nsverify may create and write in (:func:`nsverify.files.check_output_dir`)."""

    check, noun, example = "check_output_dir", "a directory", "./reports"


class InputDir(PathArg):
    """An existing readable directory (:func:`nsverify.files.check_input_dir`)."""

    check, noun, example = "check_input_dir", "a directory", "DIR"


class InputFile(PathArg):
    """An existing readable file (:func:`nsverify.files.check_input_file`); with ``may_be_new`` a file that
    nsverify also writes (a resume file): it may not exist yet, and it must be writable
    (:func:`nsverify.files.check_output_file`)."""

    check, noun, example = "check_input_file", "a file path", "FILE"

    def __init__(self, option: str, may_be_new: bool = False):
        super().__init__(option)
        self.may_be_new = may_be_new

    def convert(self, text: str):
        from pathlib import Path

        from nsverify.files import check_output_file

        if not self.may_be_new or not text or Path(text).exists() or Path(text).is_symlink():
            super().convert(text)
        if self.may_be_new:  # it will be (re)written
            check_output_file(text, self.option)
        return text


def resume_hint(where: str | None) -> str:
    """The line a resumable command prints after Ctrl-C (``set_defaults(on_interrupt=...)`` returns it): where
    its finished parts are kept, or, with ``where`` None, that nothing was kept."""
    if where is None:
        return "interrupted"
    return f"interrupted: rerun the same command to resume (finished parts are kept in {where})"


def inf_or_number(text: str) -> float:
    return math.inf if text == "inf" else float(text)
