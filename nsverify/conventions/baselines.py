"""Conventions baselines per torch release: the matrix measured on each release, shipped as data
(``nsverify/data/conventions/<release>.json``, schema ``nsverify.conventions/1`` with its provenance), and the
comparison of a run with one of them.

A *cell* is one (op, case, dtype, device, mode) of the matrix; its value is PyTorch's derivative there (or "error"
when PyTorch refused the mode). A :class:`Change` is a cell whose value differs between two runs, reported with
the rule and the Clarke status on both sides and, against the shipped data, the first recorded release that
shows it ("clamp, x=0: 1 -> 0 since 2.14.0")."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

from nsverify.conventions.matrix import SCHEMA, TABLE_WIDTH, Result, result_from_json
from nsverify.errors import NsverifyError
from nsverify.registry.types import installed_release, release_key, release_of

__all__ = ["BaselineError", "Change", "Run", "DATA_DIR", "changes", "compare_with_baseline", "default_baseline",
           "format_changes", "group", "installed_release", "load_recorded", "recorded_releases", "release_key",
           "release_of", "resolve_baseline"]

DATA_DIR = Path(__file__).resolve().parents[1] / "data" / "conventions"
#: each framework's recorded runs: torch's in DATA_DIR, JAX's in DATA_DIR/jax (``nsverify releases --framework jax``)
DATA_DIRS = {"torch": DATA_DIR, "jax": DATA_DIR / "jax"}


class BaselineError(NsverifyError, ValueError):
    """A baseline that names no recorded release or no readable conventions file."""


# ----------------------------------------------------------------------------------------------------------
# recorded runs
# ----------------------------------------------------------------------------------------------------------
@dataclass
class Run:
    """One conventions run: its results by cell, and where it came from."""

    release: str
    results: dict  # cell key -> Result
    meta: dict
    source: str = ""

    @classmethod
    def from_json(cls, data: dict, source: str = "") -> Run:
        if not isinstance(data, dict) or data.get("schema") != SCHEMA or not isinstance(data.get("results"), list):
            raise BaselineError(f"{source or 'data'} is not a conventions JSON file (schema {SCHEMA}): write one "
                                "with `nsverify conventions --json FILE`.")
        try:
            results = [result_from_json(r) for r in data["results"]]
        except TypeError as exc:
            raise BaselineError(f"{source}: a result row is incomplete ({exc}).") from None
        fw = data.get("framework", "torch")
        release = data.get("meta", {}).get("release") or release_of(data.get(fw) or "0.0.0")
        return cls(release, {cell_key(r): r for r in results},
                   dict(data.get("meta", {}), torch=data.get("torch"), framework=fw, version=data.get(fw)), source)

    @classmethod
    def load(cls, path: Path) -> Run:
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise BaselineError(f"cannot read the conventions file {path}: {exc}. Give a JSON file written by "
                                "`nsverify conventions --json FILE`, or a recorded release.") from None
        return cls.from_json(data, str(path))

    def describe(self) -> str:
        prov = self.meta.get("provenance", self.meta)
        where = ", ".join(x for x in (prov.get("device_names") and "/".join(prov["device_names"]),
                                      prov.get("date")) if x)
        fw = self.meta.get("framework", "torch")
        return f"{fw} {self.meta.get('version') or self.release}" + (f" ({where})" if where else "")


def recorded_releases(data_dir: Path = DATA_DIR) -> list[str]:
    """The releases with shipped conventions data, oldest first."""
    if not Path(data_dir).is_dir():
        return []
    out = []
    for p in Path(data_dir).glob("*.json"):
        try:
            release_key(p.stem)
        except NsverifyError:
            continue
        out.append(p.stem)
    return sorted(out, key=release_key)


def load_recorded(release: str, data_dir: Path = DATA_DIR) -> Run:
    rec = recorded_releases(data_dir)
    if release not in rec:
        raise BaselineError(f"no conventions recorded for torch {release}; recorded releases: "
                            f"{', '.join(rec) or 'none'} (or give a JSON file written by `nsverify conventions "
                            "--json FILE`).")
    return Run.load(Path(data_dir) / f"{release}.json")


def default_baseline(installed: str, data_dir: Path = DATA_DIR) -> str | None:
    """The nearest recorded release at or below ``installed`` (None when every recorded release is newer)."""
    key = release_key(installed)
    below = [r for r in recorded_releases(data_dir) if release_key(r) <= key]
    return below[-1] if below else None


def resolve_baseline(spec: str | None, installed: str, data_dir: Path = DATA_DIR) -> Run | None:
    """``spec``: a recorded release, a path to a conventions JSON file, "auto"/None (the nearest recorded release
    at or below ``installed``) or "none" (no baseline)."""
    if spec in (None, "", "auto"):
        rel = default_baseline(installed, data_dir)
        return None if rel is None else load_recorded(rel, data_dir)
    if spec == "none":
        return None
    if Path(spec).suffix == ".json" or Path(spec).exists():
        return Run.load(Path(spec))
    try:
        release_key(spec)
    except NsverifyError:
        rec = ", ".join(recorded_releases(data_dir))
        raise BaselineError(f"--baseline {spec!r} is neither a recorded release ({rec}) nor an existing JSON file; "
                            "use auto, none, a release or a file.") from None
    return load_recorded(spec, data_dir)


# ----------------------------------------------------------------------------------------------------------
# cells and changes
# ----------------------------------------------------------------------------------------------------------
def cell_key(r: Result) -> tuple:
    return (r.op, r.case, r.dtype, r.device, r.mode)


def cell_value(r: Result):
    """What is compared: the derivative (exact float values; NaN, which equals nothing, as the text "nan"), or
    "error" when PyTorch refused the mode."""
    return "error" if r.error else tuple("nan" if v != v else v for v in r.derivative)


def fmt_value(r: Result) -> str:
    if r.error:
        return "error"
    vals = ",".join(f"{v:.4g}" for v in r.derivative)
    return vals if len(r.derivative) == 1 else f"({vals})"


@dataclass
class Change:
    """A cell whose value differs between ``before`` (release ``prev``) and ``after`` (first seen in ``since``)."""

    key: tuple
    before: Result
    after: Result
    prev: str
    since: str
    exact: bool = True  # is ``since`` the first release showing it (every release between measured)?

    @property
    def op(self) -> str:
        return self.key[0]

    @property
    def case(self) -> str:
        return self.key[1]

    def text(self) -> str:
        """"clamp, x=0: 1 -> 0 since 2.14.0 (rule right -> left; Clarke yes -> yes)"."""
        b, a = self.before, self.after
        when = f"since {self.since}" if self.exact else f"between {self.prev} and {self.since}"
        return (f"{self.op}, {self.case}: {fmt_value(b)} -> {fmt_value(a)} {when} "
                f"(rule {b.rule} -> {a.rule}; Clarke {b.in_clarke} -> {a.in_clarke})")


def changes(before: Run, after: Run) -> list[Change]:
    """The cells measured in both runs whose values differ."""
    out = []
    for key, a in after.results.items():
        b = before.results.get(key)
        if b is not None and cell_value(b) != cell_value(a):
            out.append(Change(key, b, a, before.release, after.release))
    return out


def group(chs: Iterable[Change]) -> list[dict]:
    """Changes grouped by (op, case, since, rule before/after, Clarke before/after) over dtypes, devices, modes:
    one line each, with a representative change (float32 eager when present)."""
    groups: dict = {}
    for c in chs:
        g = (c.op, c.case, c.since, c.prev, c.before.rule, c.after.rule, c.before.in_clarke, c.after.in_clarke,
             c.exact)
        groups.setdefault(g, []).append(c)
    out = []
    for cs in groups.values():
        rep = min(cs, key=lambda c: (c.key[2] != "float32", c.key[4] != "eager", c.key))
        dtypes = sorted({c.key[2] for c in cs})
        modes = sorted({c.key[4] for c in cs})
        devices = sorted({c.key[3] for c in cs})
        out.append({"change": rep, "cells": len(cs), "dtypes": dtypes, "modes": modes, "devices": devices,
                    "text": f"{rep.text()} [{len(cs)} cells: {','.join(dtypes)}; {','.join(modes)}"
                            f"{'; ' + ','.join(devices) if devices != ['cpu'] else ''}]"})
    return sorted(out, key=lambda g: (release_key(g["change"].since), g["change"].op, g["change"].case))


def first_release(key: tuple, value, baseline: Run, installed: str, data_dir: Path = DATA_DIR) -> str | None:
    """The first recorded release after the baseline's, up to ``installed``, whose cell ``key`` has ``value`` and
    keeps it in every later recorded release up to ``installed``; None when no recorded release shows it."""
    lo, hi = release_key(baseline.release), release_key(installed)
    rels = [r for r in recorded_releases(data_dir) if lo < release_key(r) <= hi]
    since = None
    for rel in rels:
        r = load_cached(rel, data_dir).results.get(key)
        same = r is not None and cell_value(r) == value
        since = (since or rel) if same else None
    return since


_CACHE: dict = {}


def load_cached(release: str, data_dir: Path = DATA_DIR) -> Run:
    k = (str(data_dir), release)
    if k not in _CACHE:
        _CACHE[k] = load_recorded(release, data_dir)
    return _CACHE[k]


def compare_with_baseline(results: Sequence[Result], baseline: Run, installed: str | None = None,
                          data_dir: Path = DATA_DIR) -> tuple[list[Change], list[tuple]]:
    """(changes of this run against ``baseline``, the keys of this run's cells the baseline does not hold, in run
    order). Each change names the first recorded release showing it, or the installed release when no recorded
    one does."""
    installed = installed or installed_release()
    now = Run(installed, {cell_key(r): r for r in results}, {})
    chs = changes(baseline, now)
    for c in chs:
        since = first_release(c.key, cell_value(c.after), baseline, installed, data_dir)
        c.since = since or installed
    return chs, [k for k in now.results if k not in baseline.results]


def format_changes(chs: Sequence[Change], baseline: Run, missing: int = 0) -> str:
    import textwrap

    lines = [textwrap.fill(f"Differences from the baseline {baseline.describe()}: {len(chs)} cells"
                           + (f" ({missing} cells not in the baseline)" if missing else ""), TABLE_WIDTH,
                           subsequent_indent="  ")]
    lines += [textwrap.fill(g["text"], TABLE_WIDTH, initial_indent="  ", subsequent_indent="    ")
              for g in group(chs)]
    return "\n".join(lines)
