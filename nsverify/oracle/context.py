"""The evaluation context: which mode the exact interpreter runs in, and where kink/tie sites are recorded.

Three modes:

* ``"ad"`` -- the program's automatic derivative evaluated exactly: at every kink/tie the local derivative
  follows PyTorch's rule (or the rule given for the op in ``rules``, a :class:`nsverify.registry.Rules`
  read by :func:`nsverify.registry.parse_rules`), comparisons use the exact values;
* ``"pieces"`` -- every kink/tie site whose outcome depends on the direction of approach is a *branch point*;
  ``decide(site, options)`` chooses the outcome (the piece enumerator drives it);
* ``"jet"`` -- a *ray trace* (:mod:`nsverify.oracle.jets`): the entries are truncated Taylor series
  (:class:`~nsverify.oracle.numbers.Jet`) of the program along w + t d, and every kink/tie site takes the
  outcome that holds for all small t > 0, recorded with the order of the coefficient that decided it.

Each option of a branch point is ``(label, rows)``: the open cone of directions d
for which that outcome occurs
is ``{d : <r, d> > 0 for r in rows}`` (rows are sparse ``{index: Fraction}`` dicts), or ``rows=None`` when a
first-order test cannot certify the outcome (second-order site).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np

from nsverify.errors import TooManyPieces
from nsverify.oracle.jsonio import enc
from nsverify.oracle.numbers import JetDeclined
from nsverify.registry import parse_rules

_STACK: list["Ctx"] = []
_FAILED: list = [None, -1]  # (op, ATen call number) of the last trace that ended in an exception


def last_failure() -> tuple:
    """``(op name, call number)`` where the last exact trace that raised was (None when none has)."""
    return tuple(_FAILED)


def clear_failure() -> None:
    _FAILED[:] = [None, -1]


@dataclass
class Site:
    op: str
    call: int  # number of the ATen call in the trace (0-based)
    loc: tuple  # location inside that op (output index)
    value: Any  # exact value at the kink (the breakpoint, or the tied maximum)
    labels: tuple = ()
    chosen: int | None = None  # option index (pieces mode) or None (ad mode / no branch)
    affine: bool = True
    slopes: tuple = ()  # the distinct first-order forms involved (sparse dicts)
    float_tie: bool | None = None  # did the float computation see the same tie (filled later)
    extra: dict = field(default_factory=dict)
    ad_option: int | None = None  # pieces mode: the option whose local derivative AD uses (None: no option)

    def to_json(self) -> dict:
        return {
            "op": self.op,
            "call": self.call,
            "loc": list(self.loc),
            "value": enc(self.value),
            "options": list(self.labels),
            "chosen": self.chosen,
            "affine": self.affine,
            "float_tie": None if self.float_tie is None else bool(self.float_tie),
            **({"extra": self.extra} if self.extra else {}),
        }


@dataclass
class Ctx:
    n: int
    mode: str = "ad"  # "ad" | "pieces" | "jet"
    rules: Mapping = field(default_factory=dict)
    decide: Callable | None = None
    dtype: Any = None
    sites: list = field(default_factory=list)
    call: int = -1
    op_name: str = ""
    nonaffine: bool = False  # a site whose argument is not affine in w was met
    shadow: bool = False  # run every op in w's float dtype alongside (float-tie detection)
    shadow_args: list | None = None  # float64 copies of the current op's float tensor arguments

    def __post_init__(self):
        self.rules = parse_rules(self.rules)  # Rules: {op: Rule or one Rule per kink}, validated

    def float_arg(self, k: int):
        """The k-th float tensor argument of the current op, as a float64 array (None if unavailable)."""
        if self.shadow_args is None or k >= len(self.shadow_args):
            return None
        return self.shadow_args[k]

    def __enter__(self):
        _STACK.append(self)
        return self

    def __exit__(self, exc_type, *exc):
        _STACK.pop()
        if exc_type is not None:
            _FAILED[:] = [self.op_name, self.call]

    def branch(self, site: Site, options: list) -> int:
        """Record a kink/tie site; in pieces mode let the enumerator choose among ``options``."""
        if self.mode == "jet":  # a ray trace decides every site by its jet; one that did not must not default
            raise JetDeclined(f"{site.op}: a branch site that the ray trace does not decide")
        self.sites.append(site)
        if not site.affine:
            self.nonaffine = True
        if self.mode != "pieces" or len(options) <= 1:
            site.chosen = 0 if options else None
            return 0
        site.labels = tuple(lbl for lbl, _ in options)
        site.chosen = self.decide(site, options)
        return site.chosen

    def note(self, site: Site) -> None:
        """Record a site that needs no decision (AD mode, or a tie between identical local functions)."""
        self.sites.append(site)
        if not site.affine:
            self.nonaffine = True

    def note_float_only(self, opname: str, loc, fx, exact_value) -> None:
        """Record a tie that only the float computation sees (rounding created it)."""
        self.note(Site(opname, self.call, loc, exact_value, float_tie=True,
                       extra={"float_only": True, "float_value": float(fx)}))


def float_pair(shape, fa, fb):
    """The float run's two operands broadcast to ``shape``; None when missing or of another shape."""
    if fa is None or fb is None:
        return None
    try:
        fl = np.broadcast_arrays(fa, fb)
    except ValueError:
        return None
    return fl if fl[0].shape == shape else None


_DEADLINE: list[float] = []


class deadline:
    """``with deadline(seconds):`` every exact evaluation inside stops (TooManyPieces) once the time is up.

    The oracle's loops poll it (:func:`poll_deadline`): before every exact ATen op and inside its own long loops
    (tie handling, vertex comparison, the layered decision). A single long step between two polls -- one
    elementwise op over a very large tensor of exact numbers, a long Python loop in ``fn`` itself -- finishes
    first."""

    def __init__(self, seconds: float | None):
        import time

        self.t = None if seconds is None else time.perf_counter() + seconds
        self.seconds = seconds

    def __enter__(self):
        _DEADLINE.append(self.t if self.t is not None else float("inf"))
        return self

    def __exit__(self, *exc):
        _DEADLINE.pop()


_TRACKERS: list = []  # progress trackers of the oracle calls in progress (nsverify.oracle.progress.Tracker)
_OPS = [0]  # ATen ops evaluated since the last progress tick


class tracking:
    """``with tracking(tracker):`` long exact evaluations inside report their progress to ``tracker``."""

    def __init__(self, tracker):
        self.tracker = tracker

    def __enter__(self):
        _TRACKERS.append(self.tracker)
        return self

    def __exit__(self, *exc):
        _TRACKERS.pop()


def check_deadline() -> None:
    """Called before every exact ATen op: stops at the hard time limit, reports progress every 256 ops."""
    if _TRACKERS:
        _OPS[0] += 1
        if not _OPS[0] & 255:
            ctx = active()
            _TRACKERS[-1].op_tick(ctx.call + 1 if ctx is not None else _OPS[0])
    poll_deadline()


def poll_deadline() -> None:
    """Stop at the hard time limit (raise :class:`TimeLimitExceeded`): called before every exact ATen op and
    inside the oracle's own long loops (tie handling, vertex comparison, the layered decision)."""
    if _DEADLINE:
        import time

        if time.perf_counter() > min(_DEADLINE):
            raise TimeLimitExceeded()


def remaining() -> float:
    """Seconds left before the innermost hard time limit (inf outside one): for a solver that takes its own
    limit (HiGHS's ``time_limit``), since one C-level solve cannot be polled from Python."""
    if not _DEADLINE:
        return float("inf")
    import time

    return max(0.0, min(_DEADLINE) - time.perf_counter())


#: entries of one large op evaluated between two polls of the deadline (an entry can be a dense first-order
#: expansion in every coordinate of w, so a few hundred entries already take milliseconds)
POLL_EVERY = 256


def chunks(n: int, every: int = POLL_EVERY):
    """Slices covering ``range(n)`` of at most ``every`` items, polling the deadline before each: a single large op
    (an elementwise map, a constant converted to exact numbers, a matmul) must not outrun the time limit by more
    than one chunk."""
    for start in range(0, n, every):
        poll_deadline()
        yield slice(start, min(n, start + every))


def polled_range(n: int, every: int = POLL_EVERY):
    """``range(n)``, polling the deadline every ``every`` items (:func:`chunks`)."""
    for sl in chunks(n, every):
        yield from range(sl.start, sl.stop)


#: plain items (one Fraction each, no expansion in w) handled between two polls by :func:`polled`
POLL_EVERY_PLAIN = 16 * POLL_EVERY


def polled(items, every: int = POLL_EVERY_PLAIN):
    """The items of the sequence ``items``, polling the deadline every ``every`` of them: a Python loop over every
    entry of a large array (w's millions of parameters, an exact matmul's integer forms) stops at the time limit
    too."""
    for sl in chunks(len(items), every):
        yield from items[sl]


#: entries of one object-array reduction between two polls of the deadline
REDUCE_CHUNK = 1 << 16


def chunked_sum(a: np.ndarray, dims: tuple, keepdims: bool = False) -> np.ndarray:
    """``np.sum(a, axis=dims, keepdims=keepdims)`` for an object array, in pieces of about :data:`REDUCE_CHUNK`
    entries with deadline polls between them (one numpy reduction over millions of exact numbers is a single C
    call that no poll could interrupt).  Every output entry adds the same terms in the same order as the single
    call, so the result is identical (interval roundings included)."""
    if a.size <= 2 * REDUCE_CHUNK:
        return np.sum(a, axis=dims, keepdims=keepdims)
    keep = [d for d in range(a.ndim) if d not in dims and a.shape[d] > 1]
    if keep:  # split along a kept axis: each output entry is summed whole, within one piece
        ax = keep[0]
        step = max(1, REDUCE_CHUNK * a.shape[ax] // a.size)
        parts = [np.sum(a[(slice(None),) * ax + (sl,)], axis=dims, keepdims=True) for sl in chunks(a.shape[ax], step)]
        out = np.concatenate(parts, axis=ax)
        return out if keepdims else out.reshape(tuple(n for d, n in enumerate(a.shape) if d not in dims))
    flat = a.reshape(-1)  # a full reduction (up to axes of length 1): left to right, as np.sum adds object entries
    acc = flat[0]
    for sl in chunks(flat.size - 1, REDUCE_CHUNK):
        acc = np.add.reduce(flat[1 + sl.start:1 + sl.stop], initial=acc)
    out = np.empty((), dtype=object)
    out[()] = acc
    return out.reshape(tuple(1 if d in dims else n for d, n in enumerate(a.shape)) if keepdims else
                       tuple(n for d, n in enumerate(a.shape) if d not in dims))


class TimeLimitExceeded(TooManyPieces):
    """The hard time limit of an oracle call passed (raised by a poll)."""

    def __init__(self, *args):
        super().__init__(*(args or (
            "the exact analysis ran out of its time limit: the program is too large for exact evaluation "
            "with respect to this many coordinates (forward mode carries one derivative per coordinate). "
            "Check fewer coordinates (wrt='inputs', or one layer's parameters), a smaller batch, or "
            "wait longer: time_limit=600 (seconds) or time_limit=None (no limit); on_limit='unknown' "
            "returns 'unknown' instead of raising",)))


def active() -> Ctx | None:
    """The innermost active context, or None outside an exact evaluation."""
    return _STACK[-1] if _STACK else None


def current() -> Ctx:
    if not _STACK:
        raise RuntimeError("no exact evaluation context is active (internal error)")
    return _STACK[-1]


def given_rule(name: str, default=None):
    """The rule given in ``rules`` for registry op ``name`` (a Rule, or one Rule per kink), else default."""
    return current().rules.get(name, default)
