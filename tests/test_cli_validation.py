"""Every option of every command gets bad values, generated from the argparse parsers themselves.

The suite walks ``nsverify.cli.build_parser()``: every subcommand, every option that takes a value. Each
option's ``type`` is one of the validating types of :mod:`nsverify.argtypes`; from it the suite derives the bad
values (numbers at 0, negative, NaN, inf, beyond their bound, not a number; unknown and empty names; output
paths that are unwritable, under a file, a directory, or under a parent that cannot be created; input files
that are missing, a directory, corrupted or of the wrong kind). An option without such a type fails the suite,
so a new option cannot escape it.

Every bad case must exit with status 2, print one line naming the option (or the bad value) on stderr, no
traceback -- and start no work: :func:`nsverify.cli.run_command`, the only way to the work, is replaced by a
function that fails the test if it is called. Each command's valid base command line does reach it.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nsverify import cli
from nsverify.argtypes import (
    Checked,
    Choice,
    CsvList,
    InputDir,
    InputFile,
    KeyValue,
    Number,
    OutputDir,
    OutputFile,
    Parser,
)
from nsverify.cli import build_parser
from nsverify.report.cli import ReportPath
from nsverify.report.nightly import write_report
from tests.report_fakes import FAKE_MACHINE, standard_metrics

ROOT = Path(__file__).resolve().parents[1]
#: numeric options for which 0 is a valid value (every other numeric option must reject 0)
ZERO_OK = {"--seed"}
#: a valid command line (after the command words) for commands that need more than their defaults;
#: "{A}"/"{B}" are two valid reports, "{OUT}" a fresh output directory
BASE = {
    ("nightly",): ["--out", "{OUT}"],
    ("compare",): ["{A}", "{B}"],
    ("conventions",): ["--ops", "relu", "--dtype", "float32", "--modes", "eager"],
    ("releases",): ["2.13", "--out", "{OUT}"],
    ("zones", "volume"): ["--tau", "bfloat16=0.1", "--tau", "float32=1e-8", "--tau", "float64=1e-14"],
}
VALIDATING_TYPES = (Number, Choice, Checked, CsvList, KeyValue, OutputFile, OutputDir, InputFile, InputDir,
                    ReportPath)


class WorkStarted(BaseException):
    """Raised by the stand-in for run_command: validation let a command through to its work."""


def leaf_parsers():
    """(command words, parser) of every runnable subcommand."""
    def walk(words, parser):
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs:
            yield tuple(words), parser
        for action in subs:
            for name, child in action.choices.items():
                yield from walk([*words, name], child)
    yield from walk([], build_parser())


def value_actions(parser):
    """The actions that take a value (options and positionals), not flags or --help."""
    return [a for a in parser._actions if a.nargs != 0 and not isinstance(a, (argparse._HelpAction,
                                                                               argparse._SubParsersAction))]


def _number_cases(t: Number, option: str) -> list[tuple[str, str]]:
    cases = [("negative", "-1"), ("nan", "nan"), ("inf", "inf"), ("-inf", "-inf"), ("not a number", "abc"),
             ("empty", ""), ("huge", "1" + "0" * 30)]
    if option not in ZERO_OK:
        cases.append(("zero", "0"))
    if t.integer:
        cases.append(("fraction", "1.5"))
    if t.lo is not None:
        low = t.lo if t.lo_open else t.lo - (1 if t.integer else 1e-9 * max(1.0, abs(t.lo)))
        cases.append(("below the bound", str(int(low)) if t.integer else repr(low)))
    if t.hi is not None:
        cases.append(("above the bound", str(int(t.hi) + 1) if t.integer else repr(t.hi * 1.5 + 1)))
    return cases


def _name_cases(known: list[str] | None = None) -> list[tuple[str, str]]:
    cases = [("empty", ""), ("blank", "  "), ("unknown", "nosuch-xyz"), ("zero", "0"), ("nan", "nan")]
    return [(k, v) for k, v in cases if not known or v not in known]


def bad_values(action) -> list[tuple[str, str]]:
    """(label, value) bad cases for one action, from its type; "@kind" values are paths made by a fixture."""
    t = action.type
    option = action.option_strings[0] if action.option_strings else action.dest
    if isinstance(t, Number):
        return _number_cases(t, option)
    if isinstance(t, Choice):
        return _name_cases(None if callable(t._choices) else t.choices())
    if isinstance(t, Checked):
        return _name_cases()
    if isinstance(t, CsvList):
        item = t.item.example
        cases = [("empty", ""), ("only commas", ",,"), ("empty item", f"{item},,{item}"),
                 ("unknown", "nosuch-xyz"), ("one unknown", f"{item},nosuch-xyz"), ("repeated", f"{item},{item}")]
        if t.count is not None:
            cases.append(("wrong count", ",".join([item] * (t.count + 1))))
        return cases
    if isinstance(t, KeyValue):
        k = t.key.example
        return [("empty", ""), ("no value", k), ("no key", "=1"), ("empty value", f"{k}="),
                ("negative", f"{k}=-1"), ("nan", f"{k}=nan"), ("inf", f"{k}=inf"), ("not a number", f"{k}=abc"),
                ("unknown key", "nosuch-xyz=1")]
    if isinstance(t, OutputFile):
        return [("unwritable", "@unwritable/out.json"), ("under a file", "@file/out.json"),
                ("a directory", "@dir"), ("parent cannot be created", "@uncreatable/sub/out.json"), ("empty", "")]
    if isinstance(t, OutputDir):
        return [("unwritable", "@unwritable"), ("under a file", "@file/sub"), ("a file", "@file"),
                ("parent cannot be created", "@uncreatable/sub"), ("empty", "")]
    if isinstance(t, InputFile):
        cases = [("a directory", "@dir"), ("corrupted", "@corrupt"), ("wrong kind", "@foreign"),
                 ("not an object", "@jsonlist"), ("empty", "")]
        if t.may_be_new:
            cases += [("new, under a file", "@file/new.json"), ("new, parent cannot be created",
                                                                 "@uncreatable/sub/new.json"),
                      ("new, unwritable", "@unwritable/new.json")]
        else:
            cases.append(("missing", "@missing"))
        return cases
    if isinstance(t, InputDir):
        return [("missing", "@missing"), ("a file", "@file"), ("empty", "")]
    if isinstance(t, ReportPath):
        return [("missing", "@missing"), ("directory without a report", "@dir"), ("corrupted", "@corrupt"),
                ("not UTF-8", "@binary"), ("wrong kind", "@foreign"), ("truncated", "@truncated"),
                ("other schema version", "@schema2"), ("empty", "")]
    raise AssertionError(f"option {option} has no validating type (got {t!r}); give it one of "
                         f"{', '.join(c.__name__ for c in VALIDATING_TYPES)}")


def generated_cases():
    cases = []
    for words, parser in leaf_parsers():
        for action in value_actions(parser):
            option = action.option_strings[0] if action.option_strings else None
            for label, value in bad_values(action):
                cases.append(pytest.param(words, option, action.dest, value,
                                          id=f"{' '.join(words)} {option or action.dest} {label}"))
    return cases


CASES = generated_cases()


def _unwritable_dir(tmp: Path) -> Path | None:
    """A directory in which creating a file fails for this user (root ignores permission bits)."""
    cands = []
    if os.geteuid() != 0:
        d = tmp / "readonly"
        d.mkdir(exist_ok=True)
        d.chmod(0o555)
        cands.append(d)
    cands += [Path("/sys"), Path("/proc/sys")]
    for d in cands:
        try:
            (d / ".nsverify-test-probe").open("w").close()
            (d / ".nsverify-test-probe").unlink()
        except OSError:
            return d
    return None


def _report(machine=None, kind="run"):
    rep = {"schema": "nsverify.report/1", "kind": "run", "created": "2026-01-01T00:00:00+00:00", "quick": True,
           "machine": dict(machine or FAKE_MACHINE), "regressions": [],
           "sections": {"s": {"title": "S", "status": "ok", "data": {"metrics": standard_metrics()}}}}
    return rep


@pytest.fixture(scope="module")
def paths(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cli-paths")
    (tmp / "file").write_text("not a directory\n")
    (tmp / "dir").mkdir()
    (tmp / "corrupt").write_bytes(b'{"schema": "nsverify.report/1", "sections": {')  # truncated JSON
    (tmp / "truncated").write_text(json.dumps(_report())[:200])
    (tmp / "binary").write_bytes(bytes(range(256)) * 4)
    (tmp / "foreign").write_text(json.dumps({"schema": "someone.else/3", "data": [1, 2, 3]}))
    (tmp / "jsonlist").write_text("[1, 2, 3]")
    (tmp / "schema2").write_text(json.dumps({**_report(), "schema": "nsverify.report/2"}))
    a = write_report(tmp / "reports", _report(), stamp="a")
    gpu = dict(FAKE_MACHINE, gpu="NVIDIA H200", machine_id="gpubox|x|NVIDIA H200", hostname="gpubox")
    b = write_report(tmp / "reports-gpu", _report(gpu), stamp="b")
    return {"tmp": tmp, "A": str(a), "B": str(b), "unwritable": _unwritable_dir(tmp),
            "uncreatable": Path("/proc/nsverify-missing")}


def materialize(value: str, paths: dict) -> str:
    if not value.startswith("@"):
        return value
    head, _, rest = value[1:].partition("/")
    if head == "unwritable":
        if paths["unwritable"] is None:
            pytest.skip("no directory here refuses writes to this user (root on a machine without /sys)")
        base = paths["unwritable"]
    elif head == "uncreatable":
        base = paths["uncreatable"]
    elif head == "missing":
        base = paths["tmp"] / "does-not-exist"
    else:
        base = paths["tmp"] / head
    return str(base / rest) if rest else str(base)


def base_argv(words, paths, out):
    args = [a.replace("{A}", paths["A"]).replace("{B}", paths["B"]).replace("{OUT}", str(out))
            for a in BASE.get(words, [])]
    return [*words, *args]


@pytest.fixture
def no_work(monkeypatch):
    def refuse(args):
        raise WorkStarted(f"work started for {args.nsverify_prog}")

    monkeypatch.setattr(cli, "run_command", refuse)


@pytest.fixture
def quiet_dir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # defaults such as --out reports resolve here
    return tmp_path


def test_the_suite_covers_every_command_and_option():
    """Every runnable command has its options generated; the count is what the suite checks."""
    commands = {" ".join(w) for w, _ in leaf_parsers()}
    assert {"nightly", "compare", "conventions", "costs tables", "costs sat", "costs ratio", "zones volume",
            "zones thresholds"} <= commands
    covered = {(c.values[0], c.values[2]) for c in CASES}
    for words, parser in leaf_parsers():
        for action in value_actions(parser):
            assert (words, action.dest) in covered
    assert len(CASES) >= 300


@pytest.mark.parametrize("words", [w for w, _ in leaf_parsers()], ids=lambda w: " ".join(w))
def test_valid_base_command_reaches_the_work(words, paths, no_work, quiet_dir, capsys):
    """The base command lines are valid: the bad cases below fail because of their one bad value."""
    with pytest.raises(WorkStarted):
        cli.main(base_argv(words, paths, quiet_dir / "out"))


@pytest.mark.parametrize("words,option,dest,value", CASES)
def test_bad_value_exits_2_with_one_line_and_no_work(words, option, dest, value, paths, no_work, quiet_dir,
                                                       capsys):
    bad = materialize(value, paths)
    argv = base_argv(words, paths, quiet_dir / "out")
    if option is None:  # a positional: replace its valid value
        idx = [a.dest for a in value_actions(dict(leaf_parsers())[words]) if not a.option_strings].index(dest)
        argv[len(words) + idx] = bad
    else:
        argv.append(f"{option}={bad}")  # the = form passes values such as -inf to the option
    code = cli.main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("nsverify"), err
    named = option if option else bad
    assert named in lines[0] or (bad and bad in lines[0]) or (option is None and dest in lines[0]), lines[0]


# -- beyond one option: combinations, input contents, the library behind the CLI ---------------------------------
def run_main(argv, capsys):
    code = cli.main(argv)
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    return code, err


ZONES_TAUS = ["--tau", "bfloat16=0.1", "--tau", "float32=1e-8", "--tau", "float64=1e-14"]


@pytest.mark.parametrize("argv,expect", [
    (["nightly", "--merge", "{A}"], "at least two"),
    (["nightly", "--merge", "{A}", "{A}"], "same machine"),
    (["nightly", "--merge", "{A}", "{B}", "--quick"], "--quick"),
    (["nightly", "--baseline", "{MERGED}"], "merged report"),
    (["compare", "{A}", "{MERGED}"], "merged report"),
    (["zones", "volume", "--tau", "float32=1e-8"], "no threshold tau given for bfloat16"),
    (["zones", "volume", *ZONES_TAUS, "--tau", "float16=0.1"], "not in --dtypes"),
    (["zones", "volume", *ZONES_TAUS, "--tau", "float32=1e-7"], "given twice"),
    (["zones", "volume", *ZONES_TAUS, "--data-root", "{TMP}"], "--data-root is read only"),
    (["zones", "volume", "--dtypes", "float16", "--tau", "float16=0.1"], "float16 on CPU"),
    (["zones", "volume", *ZONES_TAUS, "--resume", "{RESUME_OTHER}"], "another configuration"),
    (["zones", "volume", *ZONES_TAUS, "--resume", "{RESUME_BAD_DRAWS}"], "corrupted"),
    (["zones", "volume", *ZONES_TAUS, "--resume", "{BINARY}"], "corrupted"),
    (["costs", "ratio", "--depth", "1000", "--width", "65536"], "parameters"),
    (["conventions", "--modes", "eager", "--ops", "relu", "--compile-backend", "nosuch"],
     "unknown torch.compile backend"),
])
def test_combinations_and_file_contents_fail_before_work(argv, expect, paths, no_work, quiet_dir, capsys):
    from nsverify.papers.zones.volume import PARTIAL_SCHEMA
    from nsverify.report.merge import merge_reports

    tmp = paths["tmp"]
    merged = tmp / "merged.json"
    merged.write_text(json.dumps(merge_reports([paths["A"], paths["B"]])))
    other = tmp / "resume-other.json"
    other.write_text(json.dumps({"schema": PARTIAL_SCHEMA, "key": "0" * 16, "draws": {}}))
    bad_draws = tmp / "resume-bad.json"
    from nsverify.papers.zones.cli import _config, register_cli  # the key of the default configuration

    parser = Parser(prog="t")
    register_cli(parser.add_subparsers(dest="command"))
    key = _config(parser.parse_args(["zones", "volume", *ZONES_TAUS])).key()
    bad_draws.write_text(json.dumps({"schema": PARTIAL_SCHEMA, "key": key, "draws": {"zero": [1, 2]}}))
    subst = {"{A}": paths["A"], "{B}": paths["B"], "{MERGED}": str(merged), "{TMP}": str(tmp),
             "{RESUME_OTHER}": str(other), "{RESUME_BAD_DRAWS}": str(bad_draws), "{BINARY}": str(tmp / "binary")}
    argv = [subst.get(a, a) for a in argv]
    if argv[0] == "nightly":
        argv += ["--out", str(quiet_dir / "out")]
    code, err = run_main(argv, capsys)
    assert code == 2 and expect in err


def test_data_that_the_model_cannot_take_or_corrupted_data_files(tmp_path, capsys):
    """Checked when the data is loaded, before the first draw: exit 2, one line."""
    code, err = run_main(["zones", "volume", "--model", "vgg11", "--draws", "1", "--batches", "1", *ZONES_TAUS],
                         capsys)
    assert code == 2 and "takes 3x32x32 inputs but dataset 'digits28' gives 1x28x28" in err
    (tmp_path / "train-images-idx3-ubyte").write_bytes(b"\x00" * 1000)
    (tmp_path / "train-labels-idx1-ubyte").write_bytes(b"\x00" * 10)
    code, err = run_main(["zones", "volume", "--dataset", "mnist", "--data-root", str(tmp_path), *ZONES_TAUS],
                         capsys)
    assert code == 2 and "cannot be read as mnist" in err


def test_compile_errors_say_why(capsys, monkeypatch):
    """A compile that fails records 'error' cells and the command prints the reason under the table."""
    import nsverify.conventions.matrix as conv

    def broken(*a, **k):
        raise RuntimeError("backend exploded: no C++ compiler")

    monkeypatch.setattr(conv, "_compiled_grads", broken)  # patched in this process: evaluate in it
    assert cli.main(["conventions", "--ops", "relu", "--dtype", "float32", "--modes", "compile",
                     "--compile-backend", "eager", "--in-process"]) == 0
    out = capsys.readouterr().out
    assert "error: relu in mode compile (float32, cpu" in out and "backend exploded: no C++ compiler" in out


def test_library_entry_points_raise_nsverify_errors():
    from nsverify.errors import BadArgumentError, NsverifyError
    from nsverify.papers.costs.measure import mlp_row
    from nsverify.papers.zones.volume import VolumeConfig, load_partial
    from nsverify.report.compare import compare_reports

    for kw in ({"draws": 0}, {"batches": -1}, {"batch_size": 0}, {"width": float("nan")}, {"width": 0.0},
               {"n_data": 10**12}, {"norm": 3}, {"programs": ("native", "native")}, {"dtypes": []}):
        with pytest.raises(BadArgumentError):
            VolumeConfig(**kw)
    for kw in ({"batch": 0}, {"width": -5}, {"depth": 0}):
        with pytest.raises(BadArgumentError):
            mlp_row(**{"depth": 1, "width": 8, **kw})
    from nsverify.conventions import run_matrix

    for kw in ({"ops": []}, {"dtypes": []}, {"devices": ()}, {"modes": []}):
        with pytest.raises(BadArgumentError, match="is empty"):
            run_matrix(**{"ops": ["relu"], **kw})
    rep = _report()
    for factor in (float("nan"), 0.5, float("inf")):
        with pytest.raises(BadArgumentError):
            compare_reports(rep, rep, bench_factor=factor)
    bad = Path(os.environ.get("TMPDIR", "/tmp")) / f"nsverify-bad-resume-{os.getpid()}.json"
    bad.write_bytes(b"\xff\xfe garbage")
    try:
        with pytest.raises(NsverifyError, match="corrupted"):
            load_partial(bad, VolumeConfig())
    finally:
        bad.unlink()


def test_end_to_end_in_a_subprocess(tmp_path):
    """The console command itself: exit 2, one line, no traceback (two of the issue's traceback cases)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for argv in (["zones", "volume", "--batches", "-1"], ["conventions", "--ops", "relu", "--json",
                                                          str(tmp_path)]):
        proc = subprocess.run([sys.executable, "-m", "nsverify", *argv], capture_output=True, text=True,
                              env=env, cwd=tmp_path, timeout=300)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1 and proc.stdout == ""
