"""Progress of a long oracle call: what :func:`~nsverify.oracle.check_gradient` has done so far.

``check_gradient(..., progress=...)`` and ``check_module(..., progress=...)`` take:

* ``None`` or ``True`` (default): :class:`StderrProgress` -- silent for the first :data:`AFTER` (5) seconds,
  then, whatever stage the call is in, a progress bar on stderr when stderr is a terminal (``tqdm``) and
  otherwise one plain line at most every :data:`EVERY` (5) seconds, e.g.
  ``nsverify: pieces 120, LPs 231, 12.4 s of the 60 s time limit (pieces)``;
* ``False``: nothing is reported;
* any callable: called with a :class:`Progress` after every enumerated piece, every exact decision stage and,
  during one long exact evaluation, every few hundred ATen ops (at most every 0.2 s).

The oracle's own loops report only between their steps, and one step can be long (one exact trace of a large
model, one layered decision, one LP), so the default reporter does not wait for them: a background *ticker*
(:class:`Ticker`, a daemon thread started with the call and stopped when it returns or raises) reports the
current stage -- the one the code last set (``"exact AD: reverse mode"``, ``"layers: exact reverse mode"``,
``"pieces"``, ...; the same names the time-limit message uses) -- every second once the call has run
:data:`AFTER` seconds.  The reporter never changes a verdict; an exception a callable raises propagates.
"""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass
from typing import Callable

#: seconds a call runs before the default reporter shows anything (a quick call prints nothing)
AFTER = 5.0
#: seconds between two plain progress lines (stderr not a terminal)
EVERY = 5.0
#: seconds between two ticks of the background ticker (a terminal's progress bar refreshes this often)
TICK = 1.0


@dataclass(frozen=True)
class Progress:
    """A snapshot of an oracle call in progress."""

    # "exact AD" (the start), "reading w as exact rationals",
    # "PyTorch's float autograd", "exact AD: forward mode", "exact AD: reverse mode",
    # "layers: ..." (the layered decision), "separable blocks", "pieces", "rays", "exact evaluation" (a tick inside
    # one trace), "done"
    stage: str
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
    """The default reporter: silent for ``after`` seconds (default :data:`AFTER`), then a progress bar (``tqdm``)
    when ``stream`` (default: stderr) is a terminal, else a plain line at most every ``every`` seconds (default
    :data:`EVERY`).  Called from the oracle's loops and from the :class:`Ticker`; thread-safe."""

    def __init__(self, after: float | None = None, every: float | None = None, stream=None):
        self.after = AFTER if after is None else after
        self.every = EVERY if every is None else every
        self.stream = stream
        self._last: float | None = None
        self._bar = None
        self._lock = threading.Lock()

    def _out(self):
        return self.stream or sys.stderr

    def _terminal(self) -> bool:
        isatty = getattr(self._out(), "isatty", None)
        try:
            return bool(isatty and isatty())
        except ValueError:  # a closed stream
            return False

    def __call__(self, p: Progress) -> None:
        if p.seconds < self.after or p.stage == "done":
            return
        with self._lock:
            if self._terminal():
                self._show_bar(p)
                return
            if self._last is not None and p.seconds - self._last < self.every:
                return
            self._last = p.seconds
            print(p.line(), file=self._out(), flush=True)

    def _show_bar(self, p: Progress) -> None:
        from tqdm import tqdm

        if self._bar is None:
            timed = p.time_limit is not None and p.time_limit > 0
            self._bar = tqdm(
                total=p.time_limit if timed else None, file=self._out(), leave=False, dynamic_ncols=True,
                desc="nsverify", mininterval=0.0,
                bar_format=("{desc}: {bar} {n:.0f}/{total:.0f} s of the time limit, {postfix}" if timed else
                            "{desc}: {n:.0f} s (no time limit), {postfix}"))
        self._bar.n = min(p.seconds, self._bar.total) if self._bar.total else p.seconds
        self._bar.set_postfix_str(f"{p.stage}: pieces {p.pieces}, LPs {p.lps}", refresh=False)
        self._bar.refresh()

    def close(self) -> None:
        """Remove the progress bar (if one was shown); the plain lines stay."""
        with self._lock:
            if self._bar is not None:
                self._bar.close()
                self._bar = None


class Ticker:
    """A daemon thread that reports ``tracker``'s current stage every :data:`TICK` seconds once the call has run
    ``reporter.after`` seconds, so that progress appears while one long step (an exact trace, a layered
    decision, an LP) runs between two of the oracle's own reports.  ``stop()`` ends it (called in ``finally``)."""

    def __init__(self, tracker: Tracker, reporter: StderrProgress):
        self.tracker, self.reporter = tracker, reporter
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="nsverify-progress", daemon=True)

    def start(self) -> Ticker:
        self._thread.start()
        return self

    def _run(self) -> None:
        wait = self.reporter.after - self.tracker.seconds()
        if wait > 0 and self._stop.wait(wait):
            return
        while not self._stop.is_set():
            try:
                self.reporter(self.tracker.snapshot())
            except Exception:  # a closed stream must not end the call's progress with a thread traceback
                return
            self._stop.wait(min(TICK, self.reporter.every))

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()
        self.reporter.close()


class Tracker:
    """The progress of one oracle call: counters, the clock, and the reporter they are sent to."""

    def __init__(self, report: Callable | None, *, time_limit: float | None, max_pieces: int):
        self.report = report
        self.t0 = time.perf_counter()
        self.time_limit, self.max_pieces = time_limit, max_pieces
        self.pieces = 0
        self.lps = 0
        self.stage = "exact AD"
        self.ops = 0  # ATen ops into the current exact trace (last op_tick)
        # the layered decision's progress (None until it reads its layers): layers decided, layers in all, and the
        # kink/tie sites found so far in layers not yet decided
        self.layers_done: int | None = None
        self.layers_total: int | None = None
        self.sites_found = 0
        self.sites_left = 0
        self._tick = 0.0
        self._ticker: Ticker | None = None

    def start(self) -> None:
        """Start the background :class:`Ticker` when the reporter is the default stderr one."""
        if isinstance(self.report, StderrProgress):
            self._ticker = Ticker(self, self.report).start()

    def stop(self) -> None:
        """Stop the ticker (the call returned or raised); idempotent."""
        if self._ticker is not None:
            self._ticker.stop()
            self._ticker = None

    def snapshot(self) -> Progress:
        """The call's state now: the stage the code last set, the counters, the clock."""
        return Progress(self.stage, self.pieces, self.lps, self.seconds(), self.time_limit, self.max_pieces,
                        self.ops)

    def seconds(self) -> float:
        return time.perf_counter() - self.t0

    def update(self, *, stage: str | None = None, pieces: int | None = None, lps: int | None = None,
               ops: int = 0) -> None:
        if stage is not None:
            self.stage = stage
            self.ops = 0
        if pieces is not None:
            self.pieces = pieces
        if lps is not None:
            self.lps = lps
        if self.report is not None:
            self.report(Progress(self.stage, self.pieces, self.lps, self.seconds(), self.time_limit,
                                 self.max_pieces, ops))

    def layers(self, done: int, total: int, *, found: int | None = None, left: int | None = None) -> None:
        """The layered decision has decided ``done`` of its ``total`` layers; ``found`` kink/tie sites met so far,
        ``left`` of them in layers not yet decided."""
        self.layers_done, self.layers_total = done, total
        if found is not None:
            self.sites_found = found
        if left is not None:
            self.sites_left = left

    def no_layers(self) -> None:
        """The layered decision declined: the plain path that follows has no layers to count."""
        self.layers_done = self.layers_total = None
        self.sites_found = self.sites_left = 0

    def how_far(self) -> str:
        """How far the decision got, for a stop at the time limit: the layers decided (k of n) and the kink/tie
        sites left, when the layered decision had read its layers ("" otherwise)."""
        if self.layers_total is None:
            return ""
        return (f"layers decided: {self.layers_done} of {self.layers_total}; kink/tie sites found: "
                f"{self.sites_found}, left to decide: {self.sites_left}")

    def op_tick(self, ops: int) -> None:
        """Called from inside an exact trace every few hundred ops: reports at most every 0.2 s."""
        now = time.perf_counter()
        self.ops = ops
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
