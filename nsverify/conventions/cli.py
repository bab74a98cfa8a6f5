"""``nsverify conventions`` (the matrix, compared with the baseline of the installed release) and ``nsverify
releases`` (the matrix across torch releases)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from nsverify.errors import NsverifyError


def _csv(s: str) -> list[str]:
    return [p.strip() for p in s.split(",") if p.strip()]


def _compile_backends() -> list[str]:
    import torch._dynamo

    return list(torch._dynamo.list_backends(exclude_tags=()))


def _baseline_spec(text: str) -> str:
    """``--baseline``'s value, checked before any work: a release recorded for torch or JAX, a readable file, auto
    or none (which framework's recorded runs it names is checked once --framework is known)."""
    from nsverify.conventions.baselines import DATA_DIRS, BaselineError, recorded_releases

    try:
        _baseline(text)
    except BaselineError:
        if text not in recorded_releases(DATA_DIRS["jax"]):
            raise
    return text


def _add_conventions_args(p) -> None:
    from nsverify import registry
    from nsverify.argtypes import Checked, Choice, CsvList, OutputFile
    from nsverify.conventions.matrix import FRAMEWORK_MODES, MODES
    from nsverify.devices import parse_device, parse_dtype

    ALL_MODES = list(dict.fromkeys(m for ms in FRAMEWORK_MODES.values() for m in ms))
    p.add_argument("--device", default=["cpu"], type=CsvList(Checked(parse_device, "cpu"), "devices"),
                   help="comma-separated devices (cpu, cuda)")
    p.add_argument("--dtype", default=["float16", "bfloat16", "float32", "float64"],
                   type=CsvList(Checked(parse_dtype, "float32"), "dtypes"),
                   help="comma-separated float dtypes")
    p.add_argument("--framework", default="torch", type=Choice(list(FRAMEWORK_MODES), "framework"),
                   help="the AD framework measured: torch or jax (the optional extra nsverify[jax]; CPU, modes "
                        "grad,jvp,jit,vmap)")
    p.add_argument("--modes", default=None, type=CsvList(Choice(ALL_MODES, "mode"), "modes"),
                   help=f"comma-separated modes: torch {','.join(MODES)} (compile takes minutes on CPU), jax "
                        f"{','.join(FRAMEWORK_MODES['jax'])} (default: torch eager,func,jvp; jax all four)")
    p.add_argument("--ops", default=None, type=CsvList(Checked(registry.get, "relu"), "registry ops"),
                   help="comma-separated registry ops (default: all)")
    p.add_argument("--compile-backend", default="inductor",
                   type=Choice(_compile_backends, "torch.compile backend", example="eager"),
                   help="torch.compile backend")
    p.add_argument("--json", nargs="?", const="-", default=None, metavar="FILE",
                   type=OutputFile("--json", allow_stdout=True),
                   help="write JSON (schema nsverify.conventions/1, with provenance) to FILE (missing directories "
                        "are created), or stdout with no FILE")
    p.add_argument("--compile-dtype", default=None, metavar="DTYPES",
                   type=CsvList(Checked(parse_dtype, "float32"), "dtypes"),
                   help="comma-separated dtypes that get the compile mode (about a minute of compilation each on "
                        "a small CPU) (default: every --dtype)")
    p.add_argument("--baseline", default="auto", metavar="RELEASE|FILE",
                   type=Checked(_baseline_spec, "auto"),
                   help="what to compare the run with: 'auto' shows the changes since the previous recorded "
                        "release (the newest one older than the installed torch) and the differences from the "
                        "installed release's own recorded baseline when there is one; or one recorded release "
                        "(e.g. 2.13.0), a conventions JSON file, or 'none'")
    p.add_argument("--singular", action="store_true",
                   help="also measure the singular-point cells (sqrt, norms, normalize, std at a constant, atan2, "
                        "xlogy, acos/asin at their singular points, the where NaN-branch family, a fully masked "
                        "softmax row; docs/nan.md): PyTorch's value, the Clarke set, the documented rule")
    from nsverify.argtypes import OutputDir

    p.add_argument("--export-findings", default=None, metavar="DIR", type=OutputDir("--export-findings"),
                   help="write the findings to DIR: every case that breaks the documented rule's promise (with its "
                        "first release, from the recorded releases and this run) and every pair of equivalent "
                        "formulations that disagree (measured in --dtype and --modes), each as a JSON sample "
                        "(op, input, args, kwargs, expected gradient) and a reproduction script, with index.json")
    p.add_argument("--in-process", action="store_true",
                   help="evaluate in this process, not in child processes (default: child processes, so that a "
                        "crash inside torch becomes a 'crashed' cell with a reproduction script)")
    _add_program_args(p)


def _add_program_args(p) -> None:
    """Issue 37: ``--programs`` (programs with ties on computed operands, :mod:`nsverify.conventions.programs`)
    and ``--grad2`` (second order at kinks, :mod:`nsverify.conventions.grad2`)."""
    from nsverify.argtypes import Checked, Choice, CsvList
    from nsverify.conventions import grad2, programs

    p.add_argument("--programs", action="store_true",
                   help="evaluate the programs with ties on computed operands (matmul -> amax, conv -> relu -> "
                        "max_pool, ...) instead of the registry's ops, in --program-modes; with --grad2 also the "
                        "second-order cells")
    p.add_argument("--program", default=None, type=CsvList(Checked(programs.get, "matmul_amax"), "programs"),
                   help="comma-separated programs (default: all)")
    p.add_argument("--program-modes", default=list(programs.DEFAULT_MODES),
                   type=CsvList(Choice(list(programs.ALL_MODES), "program mode"), "program modes"),
                   help=f"comma-separated modes of --programs: {','.join(programs.ALL_MODES)} (default: all torch "
                        "modes but max-autotune, which is slow on CPU; with --framework jax: jax_grad,jax_jit, "
                        "JAX's grad and jit of each program's JAX twin, CPU)")
    p.add_argument("--grad2", action="store_true",
                   help=f"second order at kinks and ties: {','.join(grad2.MODES)} on {len(grad2.CASES)} cases in "
                        "every --dtype, each Hessian judged against the pieces' Hessians")


def register_cli(sub) -> None:
    p = sub.add_parser("conventions", help="what PyTorch's AD returns at every kink and tie of the registry",
                       description="The conventions matrix: what PyTorch's AD returns at every kink and tie of "
                                   "the registry, compared with the recorded baseline of the installed release.")
    _add_conventions_args(p)
    p.set_defaults(func=_cli)
    register_releases_cli(sub)


def _baseline(spec: str):
    from nsverify.conventions.baselines import installed_release, resolve_baseline

    return resolve_baseline(spec, installed_release())


def comparisons(spec: str | None, installed: str, data_dir: Path | None = None) -> list[tuple[str, object]]:
    """What ``nsverify conventions --baseline spec`` compares the run with, in print order: a list of (kind,
    :class:`~nsverify.conventions.baselines.Run`), kind ``"previous"`` (the newest recorded release older than
    ``installed``: what changed since) or ``"baseline"`` (the installed release's own recorded run, a release or
    a file given by name). ``auto`` gives both when both are recorded (the previous one alone otherwise); any
    other ``spec`` gives the one baseline it names, ``none`` nothing."""
    from nsverify.conventions import baselines as bl

    data_dir = bl.DATA_DIR if data_dir is None else Path(data_dir)
    if spec not in (None, "", "auto"):
        run = bl.resolve_baseline(spec, installed, data_dir)
        return [] if run is None else [("baseline", run)]
    key = bl.release_key(installed)
    recorded = bl.recorded_releases(data_dir)
    older = [r for r in recorded if bl.release_key(r) < key]
    own = [r for r in recorded if bl.release_key(r) == key]
    out = [("previous", bl.load_recorded(older[-1], data_dir))] if older else []
    if own:
        out.append(("baseline", bl.load_recorded(own[-1], data_dir)))
    return out


def format_comparison(kind: str, run, chs, missing: int, installed: str, framework: str = "torch") -> str:
    """The text block of one comparison of :func:`comparisons` (one line, then one line per group of changes)."""
    from nsverify.conventions.baselines import format_changes, group

    if kind == "baseline":
        return format_changes(chs, run, missing)
    import textwrap

    from nsverify.conventions.matrix import TABLE_WIDTH

    head = (f"Changes since the previous recorded release, {run.describe()}, to {framework} {installed}: "
            f"{len(chs)} cells" + (f" ({missing} cells not recorded there)" if missing else ""))
    return "\n".join([textwrap.fill(head, TABLE_WIDTH, subsequent_indent="  "),
                      *(textwrap.fill(g["text"], TABLE_WIDTH, initial_indent="  ", subsequent_indent="    ")
                        for g in group(chs))])


def _step_labels(devices, dtypes, modes, compile_dtypes) -> list[str]:
    """The heartbeat's label of each step of :func:`~nsverify.conventions.matrix.run_matrix` (device x dtype)."""
    from nsverify.devices import dtype_name

    cdts = dtypes if compile_dtypes is None else compile_dtypes
    steps = [(dev, dt) for dev in devices for dt in dtypes]
    return [f"running step {i}/{len(steps)} ({dtype_name(dt)} on {dev}"
            f"{', with torch.compile' if 'compile' in modes and dt in cdts else ''})"
            for i, (dev, dt) in enumerate(steps, 1)]


def _default_modes(args) -> list[str]:
    """``--modes``, or the framework's default; NsverifyError for a mode of the other framework."""
    from nsverify.conventions.matrix import FRAMEWORK_MODES

    own = FRAMEWORK_MODES[args.framework]
    if args.modes is None:
        return ["eager", "func", "jvp"] if args.framework == "torch" else list(own)
    bad = [m for m in args.modes if m not in own]
    if bad:
        raise NsverifyError(f"--modes {','.join(bad)}: not a mode of --framework {args.framework}; choose from "
                            f"{','.join(own)}.")
    return list(args.modes)


def _print_compared(compared: list[str], against, baseline, recorded: str) -> None:
    """Print :func:`_compare`'s text blocks, or that no recorded run (``recorded``) was there to compare with when
    the baseline was left to ``auto``."""
    for text in compared:
        print("\n" + text)
    if not against and baseline in ("auto", None):
        print(f"\nNo recorded {recorded} to compare with.")


def _compare(results, against, installed: str, meta: dict, framework: str) -> list[str]:
    """Compare ``results`` with each run of :func:`comparisons` (``against``): the text blocks to print, and
    each comparison's summary recorded in ``meta``."""
    from nsverify.conventions.baselines import DATA_DIRS, compare_with_baseline

    compared = []
    for kind, run in against:
        chs, missing = compare_with_baseline(results, run, installed, DATA_DIRS[framework])
        compared.append(format_comparison(kind, run, chs, len(missing), installed, framework))
        meta["baseline" if kind == "baseline" else "previous_release"] = {
            "release": run.release, "source": run.source, "changes": len(chs)}
    return compared


def _write_json(dest: str | None, data: dict) -> None:
    """``--json``: to stdout for "-", else atomically to the file."""
    from nsverify.files import atomic_write_text

    if not dest:
        return
    text = json.dumps(data, indent=1)
    if dest == "-":
        print(text)
    else:
        atomic_write_text(dest, text)


def _cli_jax(args, modes: list[str]) -> int:
    """``nsverify conventions --framework jax``: the JAX matrix in this process (CPU), compared with the recorded
    JAX releases as the torch matrix is with torch's."""
    from nsverify.conventions import jax_matrix as jm
    from nsverify.conventions.baselines import DATA_DIRS, release_of
    from nsverify.conventions.matrix import differences, format_table
    from nsverify.devices import Heartbeat
    from nsverify.files import make_output_dir

    if [str(d) for d in args.device] != ["cpu"]:
        raise NsverifyError("--framework jax measures the CPU only: drop --device (or give --device cpu).")
    if args.compile_dtype is not None:
        raise NsverifyError("--compile-dtype is a torch option: the JAX matrix compiles with the mode jit.")
    jm.require_jax()  # not installed: the error names `pip install nsverify[jax]`, before any work
    installed = release_of(jm.versions()["jax"])
    against = comparisons(args.baseline, installed, DATA_DIRS["jax"])
    if args.json and args.json != "-":
        make_output_dir(Path(args.json).parent, "--json")
    from nsverify.devices import dtype_name, parse_dtype

    dtypes = [dtype_name(parse_dtype(d)) for d in args.dtype]
    labels = [f"running step {i}/{len(dtypes)} ({dt} on cpu, JAX)" for i, dt in enumerate(dtypes, 1)]
    with Heartbeat(labels[0], prefix="[conventions] ") as heartbeat:

        def progress(msg, i=None, n=None):
            print(f"[conventions {i}/{n}] {msg}", file=sys.stderr, flush=True)
            heartbeat.beat(labels[min(i, len(labels) - 1)])

        results = jm.run_matrix(args.ops, dtypes, modes, progress=progress)
    singular = _singular_cells(args, dtypes, modes, None, None, "jax")
    results += singular
    meta = {"devices": ["cpu"], "provenance": jm.provenance(getattr(args, "command_line", None)
                                                            or ["nsverify", *sys.argv[1:]])}
    compared = _compare(results, against, installed, meta, "jax")
    from nsverify.conventions.promised import annotate, format_promises

    annotate(results, "jax")  # the promised column
    data = jm.to_json(results, meta, args.ops)
    _write_json(args.json, data)
    if args.json != "-":
        print(format_table(results))
        outside = sum(r.in_clarke == "no" for r in results)
        errors = sum(r.rule == "error" for r in results)
        print(f"\n{len(results)} evaluations (JAX {installed}, CPU), {outside} outside the Clarke set, {errors} "
              f"refused by JAX, {len(differences(results))} cases whose rule differs across dtypes/modes.")
        for r in sorted({(r.op, r.mode, r.error) for r in results if r.error}):
            print(f"error: {r[0]} in mode {r[1]} (some dtypes or all): {r[2]}")
        for m in data["missing"]:
            print(f"no JAX counterpart: {m['op']} ({m['reason']})")
        _print_singular(singular)
        _print_compared(compared, against, args.baseline, f"JAX conventions at or below jax {installed}")
        print("\n" + format_promises(results, "jax"))
    _export_findings(args, results, "jax", installed)
    return 0


def _cli(args) -> int:
    from nsverify.conventions.isolation import run_matrix_isolated
    from nsverify.conventions.matrix import format_table, provenance, run_matrix, to_json
    from nsverify.devices import Heartbeat, parse_device, parse_dtype
    from nsverify.files import make_output_dir

    if args.programs or args.grad2:
        from nsverify.conventions import programs_jax  # noqa: F401 - registers the JAX modes (jax is imported lazily)
        from nsverify.conventions.programs import cli_programs

        return cli_programs(args)
    args.modes = _default_modes(args)
    if args.framework == "jax":
        return _cli_jax(args, args.modes)
    ops = args.ops
    dtypes = [parse_dtype(d) for d in args.dtype]
    devices = [parse_device(d) for d in args.device]
    compile_dtypes = None
    if args.compile_dtype is not None:
        compile_dtypes = [parse_dtype(d) for d in args.compile_dtype]
        if any(d not in dtypes for d in compile_dtypes):
            raise NsverifyError(f"--compile-dtype {','.join(args.compile_dtype)}: name dtypes among --dtype "
                                f"({','.join(args.dtype)}).")
    from nsverify.conventions.baselines import installed_release

    installed = installed_release()
    against = comparisons(args.baseline, installed)  # checked before any work
    if args.json and args.json != "-":
        make_output_dir(Path(args.json).parent, "--json")  # its missing directories, before any work
    label = _step_labels(devices, dtypes, list(args.modes), compile_dtypes)
    with Heartbeat(label[0], prefix="[conventions] ") as heartbeat:  # torch.compile is a silent minute

        def progress(msg, i=None, n=None):
            print(f"[conventions {i}/{n}] {msg}", file=sys.stderr, flush=True)
            if i is not None:  # step i is done, except after its compile (the step's other modes follow)
                heartbeat.beat(label[min(i if msg.startswith("compiled") else i + 1, len(label)) - 1])

        kw = {"compile_dtypes": compile_dtypes, "compile_backend": args.compile_backend, "progress": progress}
        results = (run_matrix(ops, dtypes, devices, list(args.modes), **kw) if args.in_process else
                   run_matrix_isolated(ops, dtypes, devices, list(args.modes), **kw, repro_dir=_crash_dir(args.json)))
    singular = _singular_cells(args, dtypes, list(args.modes), devices, compile_dtypes, "torch")
    meta = {"devices": [str(d) for d in devices], "provenance": provenance(devices, getattr(args, "command_line", None)
                                                                    or ["nsverify", *sys.argv[1:]])}
    compared = _compare(results + singular, against, installed, meta, "torch")
    _write_json(args.json, to_json(results + singular, meta))
    if args.json != "-":
        from nsverify.conventions.matrix import batch_crashes, differences

        print(format_table(results))
        diffs = differences(results)
        crashed = [r for r in results if r.rule == "crashed"]
        print(f"\n{len(results)} evaluations, {sum(not r.as_expected for r in results) - len(crashed)} not as "
              f"expected, {len(diffs)} cases whose rule differs across dtypes/devices/modes, {len(crashed)} crashed.")
        for r in crashed:  # the CRASHED cells of the table: why, and the script that reproduces them
            print(f"crashed: {r.op} at {r.case} ({r.dtype}, {r.device}, {r.mode}): {r.error}; reproduction: "
                  f"{r.extra.get('repro')}")
        for note in batch_crashes(results):  # a crash no single cell reproduces
            print(f"crashed: {note}")
        errors = {(r.op, r.mode, r.error): r for r in results if r.rule == "error"}
        for (op, mode, err), r in sorted(errors.items()):  # the 'error' cells of the table: say why
            print(f"error: {op} in mode {mode} ({r.dtype}, {r.device}, and possibly others): {err}")
        _print_singular(singular)
        _print_compared(compared, against, args.baseline, f"conventions at or below torch {installed}")
        from nsverify.conventions.promised import format_promises

        print("\n" + format_promises(results))
    _export_findings(args, results, "torch", installed)
    return 0


def _singular_cells(args, dtypes, modes, devices, compile_dtypes, framework: str) -> list:
    """``--singular``: the singular-point cells (:mod:`nsverify.conventions.singular`) in the run's dtypes and
    modes (compile: the compiled dtypes only), or none."""
    if not getattr(args, "singular", False):
        return []
    from nsverify.conventions import singular as sg

    if framework == "jax":
        return sg.run_singular_jax(dtypes, [m for m in modes if m in sg.JAX_MODES])
    out = sg.run_singular(dtypes, [m for m in modes if m != "compile"], devices,
                          compile_backend=args.compile_backend)
    if "compile" in modes:
        out += sg.run_singular(dtypes if compile_dtypes is None else compile_dtypes, ["compile"], devices,
                               compile_backend=args.compile_backend)
    return out


def _print_singular(singular: list) -> None:
    if singular:
        from nsverify.conventions.singular import format_singular, summary_line

        print(f"\n{format_singular(singular)}\n\n{summary_line(singular)}")


def _export_findings(args, results, framework: str, installed: str) -> None:
    """``--export-findings DIR``: the promise breaks across the recorded releases and this run, and (torch) the
    disagreeing formulations measured in this run's dtypes and modes (:mod:`nsverify.conventions.findings`)."""
    if not args.export_findings:
        return
    from nsverify.conventions import findings as fd

    found = fd.promise_findings(fd.promise_history(framework, current=results, installed=installed))
    if framework == "torch":
        from nsverify.conventions import formulations as fm
        from nsverify.devices import dtype_name, parse_dtype

        forms = fm.measure(dtypes=[dtype_name(parse_dtype(d)) for d in args.dtype], modes=list(args.modes),
                           device=str(args.device[0]), compile_backend=args.compile_backend)
        found += fd.formulation_findings(forms, installed)
    command = " ".join(getattr(args, "command_line", None) or ["nsverify", *sys.argv[1:]])
    index = fd.export_findings(Path(args.export_findings), found, command)
    if args.json != "-":
        kinds = {k: sum(f.kind == k for f in found) for k in ("promise", "formulations")}
        print(f"\n{len(found)} findings ({kinds['promise']} promise breaks, {kinds['formulations']} disagreeing "
              f"formulation pairs) written to {args.export_findings} (index: {index}).")


def _crash_dir(json_out: str | None) -> str | None:
    """Where the reproduction scripts of crashed cells go: ``<FILE stem>-crashed/`` next to ``--json FILE``, else
    a new temporary directory (None)."""
    if json_out in (None, "-"):
        return None
    path = Path(json_out)
    return str(path.with_name(path.stem + "-crashed"))


def main_conventions(argv: list[str] | None = None) -> int:
    """``python -m nsverify.conventions``: the conventions command without the rest of the CLI."""
    from nsverify.argtypes import Parser, UsageError

    p = Parser(prog="python -m nsverify.conventions", description=__doc__.split("\n")[0])
    _add_conventions_args(p)
    try:
        args = p.parse_args(argv)
    except UsageError as exc:  # one line, exit 2, as the nsverify command does
        print(f"{exc.prog}: error: {exc}", file=sys.stderr)
        return 2
    args.command_line = ["python", "-m", "nsverify.conventions", *(sys.argv[1:] if argv is None else argv)]
    try:
        return _cli(args)
    except NsverifyError as exc:
        print(f"nsverify conventions: error: {exc}", file=sys.stderr)
        return 2


# ----------------------------------------------------------------------------------------------------------
# nsverify releases (issue 14): parser and validation kept in this block
# ----------------------------------------------------------------------------------------------------------
def register_releases_cli(sub) -> None:
    from nsverify.argtypes import Checked, Choice, CsvList, Number, OutputDir, resume_hint
    from nsverify.conventions.matrix import FRAMEWORK_MODES
    from nsverify.devices import parse_dtype

    dtypes = CsvList(Checked(parse_dtype, "float32"), "dtypes")
    p = sub.add_parser("releases", help="the conventions matrix across torch releases (one environment each)",
                       description="Measure the conventions matrix on each torch release (one fresh environment "
                                   "per release, deleted after), bisect every change to its first release and "
                                   "write a reproduction script for each.")
    from nsverify.conventions.releases import parse_release_spec

    p.add_argument("releases", type=Checked(parse_release_spec, "2.13"),
                   help="releases: a comma list (2.4.1,2.13.0), minors (2.9) and ranges (2.4..2.14); JAX's: "
                        "0.4.30,0.10.2 or 0.4..0.10")
    p.add_argument("--framework", default="torch", type=Choice(list(FRAMEWORK_MODES), "framework"),
                   help="whose releases: torch or jax (one environment per jax[cpu] release, next to this "
                        "environment's torch, which the registry imports)")
    p.add_argument("--last-patch", action="store_true", help="keep only the last patch of each minor release")
    p.add_argument("--out", default="nsverify-releases", type=OutputDir("--out"),
                   help="results directory (resumable)")
    all_modes = list(dict.fromkeys(m for ms in FRAMEWORK_MODES.values() for m in ms))
    p.add_argument("--modes", default=None, type=CsvList(Choice(all_modes, "mode"), "modes"),
                   help="matrix modes (default: torch eager,func,jvp,compile; jax grad,jvp,jit,vmap)")
    p.add_argument("--dtype", default=["float16", "bfloat16", "float32", "float64"], type=dtypes,
                   help="matrix dtypes")
    p.add_argument("--compile-dtype", default=None, type=dtypes,
                   help="torch: dtypes that get the compile mode (a minute of compilation each on a small CPU; "
                        "default float32)")
    p.add_argument("--installer", default="auto", type=Choice(["auto", "uv", "pip"], "installer"),
                   help="how environments are made (auto: uv when installed, else pip)")
    p.add_argument("--cache-dir", default=None, type=OutputDir("--cache-dir"),
                   help="uv cache directory (default: $UV_CACHE_DIR, else uv's own)")
    p.add_argument("--no-bisect", action="store_true", help="do not measure releases between changes")
    p.add_argument("--keep-envs", action="store_true", help="keep each release's environment (about 5 GB each)")
    p.add_argument("--timeout", type=Number(lo=0, lo_open=True, hi=7 * 86400, hint="seconds, at most a week"),
                   default=3600,
                   help="seconds per matrix run")
    p.add_argument("--publish", default=None, metavar="DIR", type=OutputDir("--publish"),
                   help="copy the measured runs and an index.json to DIR (nsverify/data/conventions: the shipped "
                        "baselines and the report section's data)")
    p.set_defaults(func=_releases_cli, on_interrupt=lambda a: resume_hint(str(a.out)))


def _validate_releases_args(args) -> None:
    from nsverify.devices import parse_dtype

    if args.modes is None:
        args.modes = ["eager", "func", "jvp", "compile"] if args.framework == "torch" else ["grad", "jvp", "jit",
                                                                                             "vmap"]
    else:
        args.modes = _default_modes(args)
    if args.framework == "jax" and args.compile_dtype is not None:
        raise NsverifyError("--compile-dtype is a torch option: the JAX matrix compiles with the mode jit.")
    if args.compile_dtype is None:
        args.compile_dtype = ["float32"] if args.framework == "torch" else []
    for d in args.compile_dtype:
        if parse_dtype(d) not in [parse_dtype(x) for x in args.dtype]:
            raise NsverifyError(f"--compile-dtype {d!r} is not among --dtype {','.join(args.dtype)!r}.")


def _releases_cli(args) -> int:
    from nsverify.conventions.envs import Installer
    from nsverify.conventions.releases import (
        Sweep,
        available_releases,
        format_timeline,
        select_releases,
        write_change_scripts,
    )

    _validate_releases_args(args)
    available = available_releases(package=args.framework)
    releases = select_releases(args.releases, available, args.last_patch)
    installer = Installer.detect(args.installer, args.cache_dir)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    progress = lambda msg: print(f"[releases] {msg}", file=sys.stderr, flush=True)  # noqa: E731
    sweep = Sweep(out, installer, ",".join(args.modes), ",".join(args.dtype), progress, args.keep_envs,
                  timeout=args.timeout, compile_dtypes=",".join(args.compile_dtype) or None,
                  framework=args.framework)
    sweep.sweep(releases)
    if not args.no_bisect:
        lo, hi = releases[0], releases[-1]
        sweep.bisect([r for r in available if _le(lo, r) and _le(r, hi)])
    rows = sweep.timeline(available)
    table = format_timeline(rows, sweep.failures())
    from nsverify.conventions.findings import format_promise_history, promise_history

    table += ("\n\nCases that break the documented rule's promise (the minimum-norm Clarke element at a locally "
              "convex/concave point, docs/conventions.md):\n\n"
              + format_promise_history(promise_history(args.framework, data_dir=out)))
    (out / "table.md").write_text(table + "\n", encoding="utf-8")
    scripts = write_change_scripts(rows, out / "repro", args.framework)
    if args.publish:
        lo, hi = releases[0], releases[-1]
        in_range = [r for r in available if _le(lo, r) and _le(r, hi)]
        sweep.publish(Path(args.publish), in_range, "nsverify releases " + " ".join(sys.argv[2:]))
    print(table)
    print(f"\n{len(sweep.measured())} releases measured in {out}; {len(scripts)} reproduction scripts in "
          f"{out / 'repro'}.")
    return 0


def _le(a: str, b: str) -> bool:
    from nsverify.conventions.baselines import release_key

    return release_key(a) <= release_key(b)
