"""Report sections: the registration mechanism the nightly job reads.

A section is a function ``fn(ctx: RunContext) -> dict`` registered with :func:`section`. Modules in the package
:mod:`nsverify.sections` are imported by :func:`load_sections`, so adding a section means adding one module there.

The returned dict is JSON-able and may hold:

``summary``  (str) one paragraph shown under the section title;
``tables``   list of ``{"title", "columns", "rows"}`` (rows are lists of JSON scalars);
``figures``  list of ``{"title", "png"}`` with ``png`` a base64 string (see :func:`figure_png`);
``data``     any JSON-able payload kept in report.json for comparison between runs;
``claims``   list of ``{"claim", "measured", "held"}``: paper claims and whether they reproduced.
"""
from __future__ import annotations

import importlib
import pkgutil
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


def section(name: str, title: str, order: int = 100, description: str = "") -> Callable[[SectionFn], SectionFn]:
    """Register ``fn`` as the report section ``name`` (unique)."""

    def deco(fn: SectionFn) -> SectionFn:
        if name in SECTIONS and SECTIONS[name].fn.__qualname__ != fn.__qualname__:
            raise ValueError(f"report section {name!r} registered twice")
        SECTIONS[name] = Section(name, title, fn, order, description)
        return fn

    return deco


def load_sections() -> list[Section]:
    """Import every module of :mod:`nsverify.sections` and return the sections in report order."""
    import nsverify.sections as pkg

    for mod in pkgutil.iter_modules(pkg.__path__):
        importlib.import_module(f"{pkg.__name__}.{mod.name}")
    return sorted(SECTIONS.values(), key=lambda s: (s.order, s.name))


@dataclass
class RunContext:
    """What a section gets: the run's options, a scratch directory for resumable partial results, progress."""

    quick: bool = True
    scratch: Path | None = None
    section: str = ""
    options: dict[str, Any] = field(default_factory=dict)
    stream: Any = None
    _t0: float = field(default_factory=time.monotonic)

    def progress(self, message: str, done: int | None = None, total: int | None = None) -> None:
        """Print a progress line to stderr: ``[section 12/60 3.1s] message``."""
        count = f" {done}/{total}" if done is not None and total is not None else ""
        out = self.stream or sys.stderr
        print(f"[{self.section}{count} {time.monotonic() - self._t0:.1f}s] {message}", file=out, flush=True)

    def scratch_file(self, name: str) -> Path:
        """A path inside this section's scratch directory (kept across interrupted runs, for resuming)."""
        base = self.scratch or Path(".nsverify-cache")
        path = base / self.section
        path.mkdir(parents=True, exist_ok=True)
        return path / name


def figure_png(fig) -> str:
    """Render a matplotlib figure to a base64 PNG string (and close it)."""
    import base64
    import io

    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def table(title: str, columns: list[str], rows: list[list[Any]]) -> dict:
    return {"title": title, "columns": list(columns), "rows": [list(r) for r in rows]}
