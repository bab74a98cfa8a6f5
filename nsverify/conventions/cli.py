"""``nsverify conventions`` (the matrix, compared with the baseline of the installed release) and ``nsverify
releases`` (the matrix across torch releases)."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from nsverify.errors import NsverifyError


def _csv(s: str) -> list[str]:
    return [p.strip() for p in s.split(",") if p.strip()]


def _add_conventions_args(p) -> None:
    from nsverify.conventions.matrix import MODES

    p.add_argument("--device", default="cpu", help="comma-separated devices (cpu, cuda). Default: cpu")
    p.add_argument("--dtype", default="float16,bfloat16,float32,float64",
                   help="comma-separated float dtypes. Default: all four")
    p.add_argument("--modes", default="eager,func,jvp",
                   help=f"comma-separated modes from {','.join(MODES)}. Default: eager,func,jvp "
                        "(compile takes minutes on CPU)")
    p.add_argument("--ops", default=None, help="comma-separated registry ops. Default: all")
    p.add_argument("--compile-backend", default="inductor", help="torch.compile backend. Default: inductor")
    p.add_argument("--json", nargs="?", const="-", default=None, metavar="FILE",
                   help="write JSON (schema nsverify.conventions/1, with provenance) to FILE, or stdout with no FILE")
    # --- baselines per torch release (issue 14)
    p.add_argument("--compile-dtype", default=None, metavar="DTYPES",
                   help="comma-separated dtypes that get the compile mode (about a minute of compilation each on "
                        "a small CPU). Default: every --dtype")
    p.add_argument("--baseline", default="auto", metavar="RELEASE|FILE",
                   help="show the cells that differ from a recorded release (e.g. 2.13.0), a conventions JSON "
                        "file, 'auto' (default: the nearest recorded release at or below the installed one) or "
                        "'none'")


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


def _cli(args) -> int:
    from nsverify import registry
    from nsverify.conventions.baselines import compare_with_baseline, format_changes
    from nsverify.conventions.matrix import format_table, provenance, run_matrix, to_json
    from nsverify.devices import parse_device, parse_dtype

    ops = _csv(args.ops) if args.ops is not None else None
    if ops is not None and not ops:
        raise NsverifyError("--ops is empty: name registry ops (e.g. relu,amax) or leave the option out for all.")
    for op in ops or []:
        registry.get(op)  # unknown op -> UnknownOpError with suggestions
    dtypes = [parse_dtype(d) for d in _csv(args.dtype)]
    devices = [parse_device(d) for d in _csv(args.device)]
    compile_dtypes = None
    if getattr(args, "compile_dtype", None) is not None:
        compile_dtypes = [parse_dtype(d) for d in _csv(args.compile_dtype)]
        if not compile_dtypes or any(d not in dtypes for d in compile_dtypes):
            raise NsverifyError(f"--compile-dtype {args.compile_dtype!r}: name dtypes among --dtype "
                                f"({args.dtype}).")
    baseline = _baseline(args.baseline)  # checked before any work
    progress = lambda msg, i=None, n=None: print(f"[conventions {i}/{n}] {msg}", file=sys.stderr)  # noqa: E731
    results = run_matrix(ops, dtypes, devices, _csv(args.modes), compile_dtypes=compile_dtypes,
                         compile_backend=args.compile_backend, progress=progress)
    meta = {"devices": [str(d) for d in devices], "provenance": provenance(devices, getattr(args, "command_line", None)
                                                                    or ["nsverify", *sys.argv[1:]])}
    if baseline is not None:
        chs, missing = compare_with_baseline(results, baseline)
        meta["baseline"] = {"release": baseline.release, "source": baseline.source, "changes": len(chs)}
    if args.json:
        text = json.dumps(to_json(results, meta), indent=1)
        if args.json == "-":
            print(text)
        else:
            with open(args.json, "w", encoding="utf-8") as fh:
                fh.write(text)
    if args.json != "-":
        from nsverify.conventions.matrix import differences

        print(format_table(results))
        diffs = differences(results)
        print(f"\n{len(results)} evaluations, {sum(not r.as_expected for r in results)} not as expected, "
              f"{len(diffs)} cases whose rule differs across dtypes/devices/modes.")
        if baseline is not None:
            print("\n" + format_changes(chs, baseline, missing))
        elif args.baseline in ("auto", None):
            print("\nNo recorded baseline at or below this torch release.")
    return 0


def main_conventions(argv: list[str] | None = None) -> int:
    """``python -m nsverify.conventions``: the conventions command without the rest of the CLI."""
    p = argparse.ArgumentParser(prog="python -m nsverify.conventions", description=__doc__.split("\n")[0])
    _add_conventions_args(p)
    args = p.parse_args(argv)
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
    p = sub.add_parser("releases", help="the conventions matrix across torch releases (one environment each)",
                       description="Measure the conventions matrix on each torch release (one fresh environment "
                                   "per release, deleted after), bisect every change to its first release and "
                                   "write a reproduction script for each.")
    p.add_argument("releases", help="releases: a comma list (2.4.1,2.13.0), minors (2.9) and ranges (2.4..2.14)")
    p.add_argument("--last-patch", action="store_true", help="keep only the last patch of each minor release")
    p.add_argument("--out", default="nsverify-releases", help="results directory (resumable). "
                   "Default: ./nsverify-releases")
    p.add_argument("--modes", default="eager,func,jvp,compile", help="matrix modes. Default: all four")
    p.add_argument("--dtype", default="float16,bfloat16,float32,float64", help="matrix dtypes. Default: all four")
    p.add_argument("--compile-dtype", default="float32",
                   help="dtypes that get the compile mode (a minute of compilation each on a small CPU). "
                        "Default: float32")
    p.add_argument("--installer", default="auto", choices=["auto", "uv", "pip"],
                   help="how environments are made (auto: uv when installed)")
    p.add_argument("--cache-dir", default=None, help="uv cache directory (default: uv's own, or $UV_CACHE_DIR)")
    p.add_argument("--no-bisect", action="store_true", help="do not measure releases between changes")
    p.add_argument("--keep-envs", action="store_true", help="keep each release's environment (about 5 GB each)")
    p.add_argument("--timeout", type=float, default=3600, help="seconds per matrix run. Default: 3600")
    p.add_argument("--publish", default=None, metavar="DIR",
                   help="copy the measured runs and an index.json to DIR (nsverify/data/conventions: the shipped "
                        "baselines and the report section's data)")
    p.set_defaults(func=_releases_cli)


def _validate_releases_args(args) -> None:
    from nsverify.conventions.matrix import MODES
    from nsverify.devices import parse_dtype

    bad = [m for m in _csv(args.modes) if m not in MODES]
    if bad or not _csv(args.modes):
        raise NsverifyError(f"--modes {args.modes!r}: choose from {', '.join(MODES)}.")
    for d in _csv(args.dtype) or [""]:
        parse_dtype(d)
    for d in _csv(args.compile_dtype) or [""]:
        if parse_dtype(d) not in [parse_dtype(x) for x in _csv(args.dtype)]:
            raise NsverifyError(f"--compile-dtype {d!r} is not among --dtype {args.dtype!r}.")
    if not (args.timeout > 0 and args.timeout < float("inf")):
        raise NsverifyError(f"--timeout {args.timeout}: give a positive number of seconds.")
    for opt, path in (("--out", args.out), ("--publish", args.publish)):
        if path is not None and Path(path).exists() and not Path(path).is_dir():
            raise NsverifyError(f"{opt} {path} is a file: give a directory (created if missing).")


def _releases_cli(args) -> int:
    from nsverify.conventions.envs import Installer
    from nsverify.conventions.releases import Sweep, available_releases, format_timeline, select_releases
    from nsverify.conventions.repro import write_repros

    _validate_releases_args(args)
    available = available_releases()
    releases = select_releases(args.releases, available, args.last_patch)
    installer = Installer.detect(args.installer, args.cache_dir)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    progress = lambda msg: print(f"[releases] {msg}", file=sys.stderr, flush=True)  # noqa: E731
    sweep = Sweep(out, installer, _csv_join(args.modes), _csv_join(args.dtype), progress, args.keep_envs,
                  timeout=args.timeout, compile_dtypes=_csv_join(args.compile_dtype))
    sweep.sweep(releases)
    if not args.no_bisect:
        lo, hi = releases[0], releases[-1]
        sweep.bisect([r for r in available if _le(lo, r) and _le(r, hi)])
    rows = sweep.timeline(available)
    table = format_timeline(rows, sweep.failures())
    (out / "table.md").write_text(table + "\n", encoding="utf-8")
    scripts = write_repros(rows, out / "repro")
    if args.publish:
        lo, hi = releases[0], releases[-1]
        in_range = [r for r in available if _le(lo, r) and _le(r, hi)]
        sweep.publish(Path(args.publish), in_range, "nsverify releases " + " ".join(sys.argv[2:]))
    print(table)
    print(f"\n{len(sweep.measured())} releases measured in {out}; {len(scripts)} reproduction scripts in "
          f"{out / 'repro'}.")
    return 0


def _csv_join(s: str) -> str:
    return ",".join(_csv(s))


def _le(a: str, b: str) -> bool:
    from nsverify.conventions.baselines import release_key

    return release_key(a) <= release_key(b)
