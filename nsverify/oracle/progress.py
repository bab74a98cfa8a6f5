"""Progress of a long oracle call: what :func:`~nsverify.oracle.check_gradient` has done so far.

``check_gradient(..., progress=...)`` and ``check_module(..., progress=...)`` take:

* ``None`` (default): :class:`StderrProgress` -- silent for the first 5 seconds, then one line on stderr at most
  every 5 seconds, e.g. ``nsverify: pieces 120, LPs 231, 12.4 s of the 60 s time limit (enumerating pieces)``;
* ``False``: nothing is reported;
* any callable: called with a :class:`Progress` after every enumerated piece, every exact decision stage and,
  during one long exact evaluation, every few hundred ATen ops (at most every 0.2 s).

The reporter never changes a verdict; an exception it raises propagates.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Progress:
    """A snapshot of an oracle call in progress."""

    stage: str  # "exact AD" | "pieces" | "rays" | "blocks" | "layers" | "exact evaluation" | "done"
    pieces: int  # pieces enumerated so far (one exact replay of the program each)
    lps: int  # cone LPs solved so far
    seconds: float  # since the call started
    time_limit: float | None  # seconds (None: unbounded)
    max_pieces: int
    ops: int = 0  # ATen ops evaluated in the current exact trace (stage "exact evaluation")

    def line(self) -> str:
        """One human-readable line (what :class:`StderrProgress` prints)."""
        limit = "no time limit" if self.time_limit is None else f"the {self.time_limit:g} s time limit"
        ops = f", {self.ops} ops into the current trace" if self.ops else ""
        return (f"nsverify: pieces {self.pieces}, LPs {self.lps}{ops}, {self.seconds:.1f} s of {limit} "
                f"({self.stage})")


class StderrProgress:
    """The default reporter: silent for ``after`` seconds, then a line at most every ``every`` seconds."""

    def __init__(self, after: float = 5.0, every: float = 5.0, stream=None):
        self.after, self.every = after, every
        self.stream = stream
        self._last: float | None = None

    def __call__(self, p: Progress) -> None:
        if p.seconds < self.after or p.stage == "done":
            return
        if self._last is not None and p.seconds - self._last < self.every:
            return
        self._last = p.seconds
        print(p.line(), file=self.stream or sys.stderr, flush=True)


class Tracker:
    """The progress of one oracle call: counters, the clock, and the reporter they are sent to."""

    def __init__(self, report: Callable | None, *, time_limit: float | None, max_pieces: int):
        self.report = report
        self.t0 = time.perf_counter()
        self.time_limit, self.max_pieces = time_limit, max_pieces
        self.pieces = 0
        self.lps = 0
        self.stage = "exact AD"
        self._tick = 0.0

    def seconds(self) -> float:
        return time.perf_counter() - self.t0

    def update(self, *, stage: str | None = None, pieces: int | None = None, lps: int | None = None,
               ops: int = 0) -> None:
        if stage is not None:
            self.stage = stage
        if pieces is not None:
            self.pieces = pieces
        if lps is not None:
            self.lps = lps
        if self.report is not None:
            self.report(Progress(self.stage, self.pieces, self.lps, self.seconds(), self.time_limit,
                                 self.max_pieces, ops))

    def op_tick(self, ops: int) -> None:
        """Called from inside an exact trace every few hundred ops: reports at most every 0.2 s."""
        now = time.perf_counter()
        if self.report is not None and now - self._tick >= 0.2:
            self._tick = now
            self.report(Progress("exact evaluation", self.pieces, self.lps, now - self.t0, self.time_limit,
                                 self.max_pieces, ops))


def reporter(progress) -> Callable | None:
    """The reporter for a ``progress=`` argument (None or True: the default stderr lines; False: none)."""
    from nsverify.errors import OracleInputError

    if progress is None or progress is True:
        return StderrProgress()
    if progress is False:
        return None
    if not callable(progress):
        raise OracleInputError(
            f"progress must be None or True (a line on stderr after 5 s), False (silent) or a callable taking a "
            f"Progress, got {type(progress).__name__}")
    return progress
