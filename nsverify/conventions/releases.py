"""The conventions matrix across torch releases (``nsverify releases``).

For each selected release: a fresh environment (:mod:`nsverify.conventions.envs`), the matrix run there, the JSON
kept as ``OUT/<release>.json``, the environment deleted. One release at a time; a rerun skips the releases already
measured (resumable). Then every change between consecutive measured releases is bisected to the first release
that shows it, installing the releases in between as needed, and each change gets a minimal reproduction script
(``OUT/repro/``). ``OUT/table.md`` holds the release-by-release table of changes."""
from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Sequence

from nsverify.conventions.baselines import (
    BaselineError,
    Change,
    Run,
    changes,
    fmt_value,
    group,
    recorded_releases,
    release_key,
)
from nsverify.conventions.envs import Installer, ReleaseEnvError, run_matrix_in, snapshot_source, timed
from nsverify.conventions.scripts import cell_script, safe_name
from nsverify.errors import NsverifyError

#: the supported range: torch releases nsverify runs on
SUPPORTED = ("2.4.0", "2.14.99")
DEFAULT_MODES = "eager,func,jvp,compile"
DEFAULT_DTYPES = "float16,bfloat16,float32,float64"


class ReleaseSpecError(NsverifyError, ValueError):
    """A release list or range that cannot be read."""


# ----------------------------------------------------------------------------------------------------------
# which releases
# ----------------------------------------------------------------------------------------------------------
def available_releases(python: str = sys.executable, package: str = "torch") -> list[str]:
    """The final releases of ``package`` (torch, jax) the package index serves (``pip index versions``), oldest
    first."""
    try:
        res = subprocess.run([python, "-m", "pip", "index", "versions", package], capture_output=True, text=True,
                             timeout=300)
    except (OSError, subprocess.SubprocessError) as exc:
        raise ReleaseSpecError(f"cannot list {package} releases ({exc}); give explicit releases, e.g. 2.4.1,2.13.0."
                               ) from None
    m = re.search(r"Available versions:\s*(.*)", res.stdout)
    if not m:
        raise ReleaseSpecError(f"the package index lists no {package} releases (offline?); give explicit releases, "
                               "e.g. 2.4.1,2.13.0.")
    vers = {v.strip() for v in m.group(1).split(",")}
    return sorted((v for v in vers if re.fullmatch(r"\d+\.\d+\.\d+", v)), key=release_key)


def _bound(text: str, upper: bool) -> tuple[int, ...]:
    parts = text.strip().split(".")
    if not 2 <= len(parts) <= 3 or not all(p.isdigit() for p in parts):
        raise ReleaseSpecError(f"{text!r} is not a release: write MAJOR.MINOR or MAJOR.MINOR.PATCH (e.g. 2.4 or "
                               "2.4.1).")
    nums = tuple(int(p) for p in parts)
    return nums if len(nums) == 3 else nums + ((10**6,) if upper else (0,))


def parse_release_spec(spec: str) -> list[tuple[str, tuple, tuple]]:
    """``spec``'s items as (item, lowest, highest) release keys; a syntax error is a :class:`ReleaseSpecError`
    (checked before any work: the index is not asked)."""
    items = [s.strip() for s in str(spec).split(",") if s.strip()]
    if not items:
        raise ReleaseSpecError("no releases given: e.g. 2.4.1,2.13.0 or 2.4..2.14.")
    out = []
    for item in items:
        if ".." in item:
            lo_s, _, hi_s = item.partition("..")
            lo, hi = _bound(lo_s, False), _bound(hi_s, True)
            if lo > hi:
                raise ReleaseSpecError(f"range {item!r} is empty: write the older release first (e.g. 2.4..2.14).")
        else:
            lo, hi = _bound(item, False), _bound(item, True)
        out.append((item, lo, hi))
    return out


def select_releases(spec: str, available: Sequence[str], last_patch: bool = False) -> list[str]:
    """Releases named by ``spec``: a comma list of releases (``2.4.1``), minors (``2.9``: each of its patches) and
    inclusive ranges (``2.4..2.14``). ``last_patch``: keep the last patch of each minor. Oldest first."""
    avail = sorted(set(available), key=release_key)
    chosen: set[str] = set()
    for item, lo, hi in parse_release_spec(spec):
        hit = [r for r in avail if lo <= release_key(r) <= hi]
        if not hit:
            raise ReleaseSpecError(f"{item!r} matches no release the index serves (available: "
                                   f"{', '.join(avail[-8:])}{' ...' if len(avail) > 8 else ''}).")
        chosen.update(hit)
    out = sorted(chosen, key=release_key)
    if last_patch:
        by_minor: dict = {}
        for r in out:
            by_minor[release_key(r)[:2]] = r
        out = sorted(by_minor.values(), key=release_key)
    return out


# ----------------------------------------------------------------------------------------------------------
# measuring
# ----------------------------------------------------------------------------------------------------------
class Sweep:
    """The state of a release sweep in directory ``out``: ``<release>.json`` per measured release,
    ``<release>.failed.json`` per release that could not be measured, logs in ``logs/``."""

    def __init__(self, out: Path, installer: Installer | None = None, modes: str = DEFAULT_MODES,
                 dtypes: str = DEFAULT_DTYPES, progress: Callable[[str], None] | None = None,
                 keep_envs: bool = False, measure: Callable | None = None, timeout: float = 3600,
                 compile_dtypes: str | None = "float32", framework: str = "torch"):
        self.out = Path(out)
        self.framework = framework
        self.installer = installer
        self.modes, self.dtypes = modes, dtypes
        self.progress = progress or (lambda msg: None)
        self.keep_envs = keep_envs
        self.timeout = timeout
        self.compile_dtypes = compile_dtypes
        self._measure = measure or self._measure_in_env
        self._src: Path | None = None
        self._runs: dict[str, Run] = {}

    # -------------------------------------------------------------- state on disk
    def path(self, release: str) -> Path:
        return self.out / f"{release}.json"

    def failed_path(self, release: str) -> Path:
        return self.out / f"{release}.failed.json"

    def measured(self) -> list[str]:
        return recorded_releases(self.out)

    def failures(self) -> dict[str, dict]:
        """Releases that could not be measured: {release: {"reason": ...}} (``*.failed.json`` files, and the
        ``failed`` map of a published ``index.json``)."""
        out = {rel: {"release": rel, "reason": why} for rel, why in self.index().get("failed", {}).items()}
        for p in self.out.glob("*.failed.json"):
            try:
                out[p.name[: -len(".failed.json")]] = json.loads(p.read_text())
            except (OSError, ValueError):
                continue
        return out

    def run(self, release: str) -> Run:
        if release not in self._runs:
            self._runs[release] = Run.load(self.path(release))
        return self._runs[release]

    def index(self) -> dict:
        try:
            return json.loads((self.out / "index.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}

    def publish(self, dest: Path, available: Sequence[str], command: str = "") -> list[Path]:
        """Copy the measured runs to ``dest`` (the package data: ``nsverify/data/conventions``) with an
        ``index.json`` naming the releases the index served in the range and those that could not be measured."""
        import datetime
        import shutil

        dest = Path(dest)
        dest.mkdir(parents=True, exist_ok=True)
        out = []
        for rel in self.measured():
            shutil.copyfile(self.path(rel), dest / f"{rel}.json")
            out.append(dest / f"{rel}.json")
        index = {"schema": "nsverify.releases/1", "available": sorted(set(available), key=release_key),
                 "failed": {r: f.get("reason", "") for r, f in self.failures().items()}, "command": command,
                 "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}
        (dest / "index.json").write_text(json.dumps(index, indent=1) + "\n", encoding="utf-8")
        return out + [dest / "index.json"]

    # -------------------------------------------------------------- one release
    def _measure_in_env(self, release: str) -> dict:
        if self.installer is None:
            raise ReleaseEnvError("no installer configured")
        if self._src is None:
            self._src = snapshot_source(self.out / "src")
        env_dir = self.out / "envs" / release
        logs = self.out / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        with open(logs / f"{release}.log", "w", encoding="utf-8") as log:
            try:
                _, t_install = timed(self.installer.create, env_dir, release, log, self.framework)
                self.progress(f"{release}: environment ready in {t_install:.0f} s ({self.installer.kind}); "
                              f"running the matrix ({self.modes})")
                tmp = self.out / f"{release}.json.partial"
                data, t_run = timed(run_matrix_in, env_dir, self._src, tmp, self.modes, self.dtypes, log,
                                    self.timeout, self.compile_dtypes, self.framework)
                tmp.unlink(missing_ok=True)
                if self.framework == "torch":  # issue 37: the programs' and second-order cells, same environment
                    from nsverify.conventions.programs import run_in_env

                    data.update(run_in_env(env_dir / "bin" / "python", self._src,
                                           self.out / f"{release}.programs.partial", log, self.timeout))
            finally:
                if not self.keep_envs:
                    self.installer.remove(env_dir)
        data.setdefault("meta", {})
        data["meta"]["release_env"] = {"installer": self.installer.kind, "install_s": round(t_install, 1),
                                       "matrix_s": round(t_run, 1)}
        return data

    def measure(self, release: str) -> bool:
        """Measure ``release`` unless it is already measured; True when data exists afterwards."""
        if self.path(release).exists():
            try:
                self.run(release)
                return True
            except BaselineError:
                self.path(release).unlink()
        self.out.mkdir(parents=True, exist_ok=True)
        t0 = time.monotonic()
        self.progress(f"{release}: creating the environment")
        try:
            data = self._measure(release)
            got = str(data.get(self.framework, ""))
            if got.split("+")[0] != release:
                raise ReleaseEnvError(f"the environment imported {self.framework} {got}, not {release}")
        except ReleaseEnvError as exc:
            self.failed_path(release).write_text(json.dumps({"release": release, "reason": str(exc)}, indent=1))
            self.progress(f"{release}: could not be measured: {exc}")
            return False
        data["meta"]["release"] = release
        self.failed_path(release).unlink(missing_ok=True)
        write_run(self.path(release), data)
        n = len(data.get("results", []))
        errors = sum(1 for r in data.get("results", []) if r.get("error"))
        self.progress(f"{release}: measured {n} cells ({errors} refused by {self.framework}) in "
                      f"{time.monotonic() - t0:.0f} s")
        return True

    # -------------------------------------------------------------- many releases
    def sweep(self, releases: Sequence[str]) -> None:
        todo = [r for r in releases if not self.path(r).exists()]
        self.progress(f"{len(releases)} releases, {len(releases) - len(todo)} already measured in {self.out}")
        for i, rel in enumerate(todo, 1):
            self.progress(f"[{i}/{len(todo)}] {self.framework} {rel}")
            self.measure(rel)

    def bisect(self, available: Sequence[str]) -> None:
        """Measure releases between consecutive measured ones that differ, until every change has its first
        release (or the releases between could not be installed)."""
        avail = sorted(set(available), key=release_key)
        while True:
            failed = set(self.failures())
            measured = self.measured()
            target = None
            for a, b in zip(measured, measured[1:]):
                between = [r for r in avail if release_key(a) < release_key(r) < release_key(b) and r not in failed]
                if between and (changes(self.run(a), self.run(b)) or self._program_changes(a, b)):
                    target = between[len(between) // 2]
                    break
            if target is None:
                return
            self.progress(f"bisecting: {a} -> {b} differ; measuring {target}")
            if not self.measure(target):
                continue  # recorded as failed: the next pass skips it

    def _program_changes(self, a: str, b: str, exact: bool = True) -> list[dict]:
        """Issue 37: the program cells that changed from release ``a`` to ``b`` (none where a run lacks them)."""
        from nsverify.conventions.programs import release_changes

        return release_changes(self.path(a), self.path(b), exact)

    # -------------------------------------------------------------- results
    def timeline(self, available: Sequence[str] = ()) -> list[dict]:
        """Per measured release: the changes since the previous measured release (``exact``: the first release
        showing them, when every release the index serves between the two was measured)."""
        avail = sorted(set(available), key=release_key)
        rows = []
        measured = self.measured()
        for i, rel in enumerate(measured):
            if i == 0:
                rows.append({"release": rel, "prev": None, "changes": [], "exact": True})
                continue
            prev = measured[i - 1]
            # a release between them, unmeasured or unmeasurable, may be the first to show a change
            gap = [r for r in avail if release_key(prev) < release_key(r) < release_key(rel)]
            chs = changes(self.run(prev), self.run(rel))
            for c in chs:
                c.exact = not gap
            rows.append({"release": rel, "prev": prev, "changes": chs, "exact": not gap,
                         "program_changes": self._program_changes(prev, rel, not gap)})
        return rows


def write_run(path: Path, data: dict) -> None:
    """Write a conventions run compactly: one result per line (diffable), without the derived lists."""
    data = {k: v for k, v in data.items() if k not in ("differences", "unexpected")}
    results = data.pop("results", [])
    head = json.dumps(data, indent=1, sort_keys=True)[:-2]
    body = ",\n".join(json.dumps(r, sort_keys=True) for r in results)
    tmp = Path(path).with_suffix(".tmp")
    tmp.write_text(f'{head},\n "results": [\n{body}\n ]\n}}\n', encoding="utf-8")
    json.loads(tmp.read_text())
    tmp.replace(path)


def format_timeline(rows: Sequence[dict], failures: dict | None = None) -> str:
    """The release-by-release table of changes (markdown)."""
    lines = ["| release | cells changed vs previous | changes (first release) |", "|---|---|---|"]
    for row in rows:
        if row["prev"] is None:
            lines.append(f"| {row['release']} | - (first measured) | |")
            continue
        gs = group(row["changes"])
        from nsverify.conventions.programs import change_text

        text = "<br>".join([g["text"] for g in gs] + [change_text(c) for c in row.get("program_changes", [])]) \
            or "none"
        lines.append(f"| {row['release']} | {len(row['changes'])} | {text} |")
    for rel, f in sorted((failures or {}).items(), key=lambda kv: release_key(kv[0])):
        lines.append(f"| {rel} | not measured | {f.get('reason', '')[:300]} |")
    return "\n".join(lines)


def all_changes(rows: Sequence[dict]) -> list[Change]:
    return [c for row in rows for c in row["changes"]]


def change_script(change: Change, history: Sequence[tuple[str, str]] = (), framework: str = "torch") -> str:
    """A standalone script reproducing ``change`` (its op, case, dtype and mode) in ``framework``
    (:func:`nsverify.conventions.scripts.cell_script`), its header naming the change and the values the recorded
    releases gave (``history``: ``(release, value)`` pairs; default: the two sides of the change)."""
    op, label, dtype, _device, mode = change.key
    fw = framework
    seen = "\n".join(f"#   {fw} {rel}: {val}" for rel, val in history) or (
        f"#   {fw} {change.prev}: {fmt_value(change.before)}\n#   {fw} {change.since}: {fmt_value(change.after)}")
    head = (f"# {op} at {label} ({dtype}, {mode} mode): {fmt_value(change.before)} -> {fmt_value(change.after)} "
            f"{'since' if change.exact else 'between ' + change.prev + ' and'} {change.since}\n"
            f"# Clarke status: {change.before.in_clarke} -> {change.after.in_clarke} (rule {change.before.rule} -> "
            f"{change.after.rule}; nsverify's conventions matrix, registry case {op!r} / {label!r})\n"
            f"# derivative of sum(c * op(x)) measured on CPU:\n{seen}")
    from nsverify.conventions import singular

    row = singular.find(op, label) if framework == "torch" else None
    if row is not None:  # a singular-point cell (docs/nan.md): its program is the table's expression
        return singular.cell_script(row, dtype, mode, head)
    return cell_script(op, label, dtype, mode, head, framework)


def write_change_scripts(rows: Sequence[dict], out: Path, framework: str = "torch") -> list[Path]:
    """One script per grouped change of a release timeline (:meth:`Sweep.timeline`), in ``out``."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for row in rows:
        for g in group(row["changes"]):
            ch = g["change"]
            safe = safe_name(f"{ch.since}_{ch.op}_{ch.case}_{ch.key[2]}_{ch.key[4]}")
            try:
                text = change_script(ch, framework=framework)
            except (ValueError, OSError, TypeError, StopIteration, KeyError) as exc:  # KeyError: an unknown op
                text = f"# no standalone script for {ch.text()}: {exc}\n"
            (out / safe).write_text(text, encoding="utf-8")
            written.append(out / safe)
    return written
