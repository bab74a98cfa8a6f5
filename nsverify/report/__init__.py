"""Report sections: the registration mechanism the nightly job reads.

A section is a function ``fn(ctx: RunContext) -> dict`` registered with :func:`section`. The sections sit one
layer above the report: the modules of the package :mod:`nsverify.sections` register themselves when
:func:`nsverify.sections.load_sections` imports them, so adding a section means adding one module there; the
nightly runner (:func:`nsverify.report.nightly.run_nightly`) runs the sections it is given.

The returned dict is JSON-able and may hold:

``summary``  (str) one paragraph shown under the section title;
``tables``   list of ``{"title", "columns", "rows"}`` (rows are lists of JSON scalars);
``figures``  list of ``{"title", "png"}`` with ``png`` a base64 string (see :func:`figure_png`);
``data``     any JSON-able payload kept in report.json for comparison between runs;
``claims``   list of claim records (:mod:`nsverify.claims.record`, docs/report.md "Claims"): judged claims.

``data["metrics"]`` is the list of comparable metrics the nightly job compares between runs (kinds and rules
in :mod:`nsverify.report.compare` and docs/report.md).

Resuming expensive work: a section wraps each expensive, deterministic step in
``value = ctx.checkpoint("step-key", lambda: compute())``. The JSON result is saved under the run's scratch
directory; if the run is interrupted, rerunning the same nightly command (same options, same section source)
returns the saved value instead of recomputing. ``ctx.load_partial(key)`` / ``ctx.save_partial(key, value)``
are the lower-level pair. Scratch of a section is deleted once a run completes with that section ok.
"""
from __future__ import annotations

import hashlib
import json
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

SectionFn = Callable[["RunContext"], dict]


@dataclass(frozen=True)
class Section:
    name: str
    title: str
    fn: SectionFn
    order: int = 100
    #: rough cost in quick mode, shown in progress lines
    description: str = ""


SECTIONS: dict[str, Section] = {}


def section(name: str, title: str, order: int = 100,
            description: str = "") -> Callable[[SectionFn], SectionFn]:
    """Register ``fn`` as the report section ``name`` (unique)."""

    def deco(fn: SectionFn) -> SectionFn:
        if name in SECTIONS and SECTIONS[name].fn.__qualname__ != fn.__qualname__:
            raise ValueError(f"report section {name!r} registered twice")
        SECTIONS[name] = Section(name, title, fn, order, description)
        return fn

    return deco


def registered_sections() -> list[Section]:
    """The sections registered so far (by the modules imported so far), in report order."""
    return sorted(SECTIONS.values(), key=lambda s: (s.order, s.name))


@dataclass
class RunContext:
    """What a section gets: the run's options, a scratch directory for resumable partial results, progress."""

    quick: bool = True
    scratch: Path | None = None
    section: str = ""
    options: dict[str, Any] = field(default_factory=dict)
    stream: Any = None
    #: hash of the section's source file; partial results of an edited section are not reused
    code_hash: str = ""
    _t0: float = field(default_factory=time.monotonic)

    def progress(self, message: str, done: int | None = None, total: int | None = None) -> None:
        """Print a progress line to stderr: ``[section 12/60 3.1s] message``."""
        count = f" {done}/{total}" if done is not None and total is not None else ""
        out = self.stream or sys.stderr
        print(f"[{self.section}{count} {time.monotonic() - self._t0:.1f}s] {message}", file=out, flush=True)

    def scratch_file(self, name: str) -> Path:
        """A path inside this section's scratch directory (kept across interrupted runs, for resuming)."""
        base = self.scratch or Path(".nsverify-cache")
        path = base / (f"{self.section}-{self.code_hash}" if self.code_hash else self.section)
        path.mkdir(parents=True, exist_ok=True)
        return path / name

    def _partial_path(self, key: str) -> Path:
        if not isinstance(key, str) or not key:
            raise ValueError(f"a partial-result key must be a non-empty string, got {key!r}")
        slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", key)[:60]
        return self.scratch_file(f"partial-{slug}-{hashlib.sha256(key.encode()).hexdigest()[:12]}.json")

    def load_partial(self, key: str, default: Any = None) -> Any:
        """The value saved by :meth:`save_partial` under ``key`` in this run's scratch, else ``default``.

        A corrupted partial file is ignored (and recomputed by the caller), never executed.
        """
        path = self._partial_path(key)
        if not path.is_file():
            return default
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            self.progress(f"ignoring unreadable partial result {path.name}: {exc}")
            return default
        if not isinstance(doc, dict) or doc.get("key") != key or "value" not in doc:
            return default
        return doc["value"]

    def save_partial(self, key: str, value: Any) -> None:
        """Save the JSON-able ``value`` under ``key`` (atomically) for a rerun of this run to resume from."""
        from nsverify.files import atomic_write_text, json_default

        text = json.dumps({"key": key, "value": value}, default=json_default)
        atomic_write_text(self._partial_path(key), text)

    def checkpoint(self, key: str, fn: Callable[[], Any]) -> Any:
        """Return the saved result for ``key`` if a previous attempt of this run saved one, else ``fn()``.

        The result is saved as JSON, and the JSON round-trip value is returned in both cases (tuples come back
        as lists), so a resumed run computes exactly what an uninterrupted one does.
        """
        missing = object()
        saved = self.load_partial(key, missing)
        if saved is not missing:
            self.progress(f"resumed {key!r} from a saved partial result")
            return saved
        value = fn()
        self.save_partial(key, value)
        return self.load_partial(key)


#: the resolution of every figure PNG (a font of F points is F * FIGURE_DPI / 72 px in the PNG)
FIGURE_DPI = 90


def figure_png(fig, tight: bool = True) -> str:
    """Render a matplotlib figure to a base64 PNG string (and close it); ``tight=False`` keeps the figure's own
    size (``figsize * FIGURE_DPI`` px), so the page knows the PNG's scale."""
    import base64
    import io

    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=FIGURE_DPI, bbox_inches="tight" if tight else None)
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def table(title: str, columns: list[str], rows: list[list[Any]]) -> dict:
    return {"title": title, "columns": list(columns), "rows": [list(r) for r in rows]}
