"""Pieces certified along a ray: kink sites whose first-order slope is zero (second-order ties).

At a site whose compared quantity q has q(w) = 0 *and* a zero gradient (``w0**2 - w1**2 > 0`` at 0) the first-order
cone test cannot say on which side a direction lies, so the piece enumerator (:mod:`nsverify.oracle.pieces`) keeps
both options as *outer-only* pieces.  This module certifies such pieces with a direction d along which the piece's
whole pattern holds for every small t > 0:

1. a **ray trace** (:meth:`~nsverify.oracle.interp.Evaluation.jet_trace`) runs the program on truncated Taylor series
   in t of w + t d (:class:`~nsverify.oracle.numbers.Jet`, coefficients c_0 .. c_K exact); at every site the sign
   of q(w + t d) for all small t > 0 is the sign of the first non-zero coefficient c_k (``order`` k).  Undecided
   signs, smooth functions and every operation a jet does not know end the ray (nothing is guessed);
2. a plain pieces-mode trace takes, at every branch site, the option of that sign: its gradient is the piece's.

Why the gradient is a Bouligand gradient (the proof sketch is in docs/conditions.md, "Second-order kink sites"):
for every small t > 0 every site has a strict sign at w + t d, so by continuity the pattern holds on an open
ball around w + t d, where f equals the piece's smooth function f_P; hence grad f(w + t d) = grad f_P(w + t d),
which tends to grad f_P(w) as t -> 0+.  The ray only ever *adds* certified pieces (the inner set); not_member is
decided over the outer set as before, never from a direction that was not found.

The certificate records such a witness as :class:`Ray` (the direction and the order that decided each site); the
checker (:mod:`nsverify.oracle.certificates`) replays both traces.
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass
from fractions import Fraction

from nsverify.oracle.cones import ConeStats, feasible, holds
from nsverify.oracle.context import TimeLimitExceeded, clear_failure
from nsverify.oracle.interp import Evaluation
from nsverify.oracle.numbers import JetUndecided

F = Fraction

#: how many directions the ray pass tries at most: generic ones (axes, sign vectors, seeded small-integer vectors)
#: and ones inside the first-order cones of the pieces still to certify
MAX_DIRECTIONS = 24
MAX_CONE_DIRECTIONS = 24


@dataclass(frozen=True)
class Ray:
    """A witness along a ray: the direction d and, per site of the ray trace (in trace order), the order k of the
    Taylor coefficient that decided its sign."""

    direction: dict  # sparse {coordinate: Fraction}, not all zero
    orders: tuple


@dataclass
class RayPiece:
    decisions: tuple  # the option taken at each branch site of the pieces trace
    gradient: tuple
    ray: Ray


class _Decline(Exception):
    pass


#: the options a jet's sign selects (compare: q < 0 / q > 0; elementwise: left / right of the breakpoint)
_SIDES = {("<", ">"), ("left", "right")}


def ray_piece(ev: Evaluation, d: dict) -> RayPiece | None:
    """The piece whose pattern holds along w + t d for all small t > 0, or None when the ray cannot decide it."""
    got = _ray(ev, d)
    return got if isinstance(got, RayPiece) else None


def _ray(ev: Evaluation, d: dict) -> RayPiece | str:
    """:func:`ray_piece`, or why not: "undecided" (a site's sign along this d is not decided: another direction
    may do better) or "declined" (an op a jet does not know, a pole, a branch site jets do not decide, traces
    that disagree: as a rule the same for every direction, the program's op sequence being the same)."""
    if not any(d.values()):
        return "undecided"
    try:
        jsites = [s for s in ev.jet_trace(d) if not s.extra.get("float_only")]
    except TimeLimitExceeded:
        raise
    except JetUndecided:
        clear_failure()
        return "undecided"
    except Exception:  # noqa: BLE001 - a jet met an op it does not know (JetDeclined), a pole...: the ray is
        clear_failure()  # given up and claims nothing (the failure is not the program's)
        return "declined"
    if not all("jet" in s.extra for s in jsites):
        return "declined"
    outcome = {(s.op, s.call, tuple(s.loc)): s.extra["jet"][0] for s in jsites}
    extra_of = {(s.op, s.call, tuple(s.loc)): s.extra for s in jsites}
    if len(outcome) != len(jsites):
        return "declined"  # two sites at one place of one call: the pieces trace could not tell them apart
    decisions: list = []

    def decide(site, options):
        labels = tuple(lbl for lbl, _ in options)
        s = outcome.get((site.op, site.call, tuple(site.loc)))
        groups = site.extra.get("groups")
        if s is None:
            raise _Decline()
        selection = "jet_select" in extra_of[(site.op, site.call, tuple(site.loc))]
        if labels in _SIDES and not selection:  # s: the sign of the compared quantity along the ray
            j = 0 if s < 0 else 1
        elif selection and groups is not None and len(groups) == len(options):  # s: the winning entry
            j = next((g for g, ix in enumerate(groups) if s in ix), None)
            if j is None:
                raise _Decline()
        else:
            raise _Decline()
        decisions.append(j)
        return j

    try:
        r = ev.pieces_trace(decide)
    except TimeLimitExceeded:
        raise
    except Exception:  # noqa: BLE001 - _Decline, or the pattern's trace failed: no claim
        clear_failure()
        return "declined"
    keys = [(s.op, s.call, tuple(s.loc)) for s in r.sites if not s.extra.get("float_only")]
    if keys != [(s.op, s.call, tuple(s.loc)) for s in jsites]:
        return "declined"  # the two traces did not meet the same sites: no claim
    return RayPiece(tuple(decisions), tuple(r.gradient), Ray(dict(d), tuple(s.extra["jet"][1] for s in jsites)))


def directions(n: int, seed: int = 0, limit: int = MAX_DIRECTIONS):
    """Candidate rays: the coordinate axes +-e_i, the sign vectors {-1, 0, 1}^n (n <= 3), then seeded random
    integer vectors in [-3, 3]^n; at most ``limit``, no repeats."""
    seen: set = set()
    out: list = []

    def add(d: dict):
        key = tuple(sorted(d.items()))
        if d and key not in seen and len(out) < limit:
            seen.add(key)
            out.append(d)

    for i in range(n):
        add({i: F(1)})
        add({i: F(-1)})
    if n <= 3:
        import itertools

        for v in itertools.product((-1, 0, 1), repeat=n):
            add({i: F(x) for i, x in enumerate(v) if x})
    rng = random.Random(seed)
    tries = 0
    while len(out) < limit and tries < 4 * limit:
        tries += 1
        add({i: F(x) for i in range(n) if (x := rng.randint(-3, 3))})
    return out


def cone_directions(leaf, n: int, rng: random.Random):
    """Directions inside the open first-order cone of ``leaf``'s path (its rows), where the first-order sites already
    take the leaf's side: the cone's exact witness d* (scaled to integers), then K d* + r for sign vectors r (all
    +1, alternating, their negatives, two seeded random ones) with K = 1 + the largest |row|_1, so that K d* + r
    stays inside when the rows are integer (checked exactly in any case); the ray decides the second-order sites."""
    if not leaf.rows:
        return
    rows = list(leaf.rows)
    res, d = feasible(rows, ConeStats())
    if res != "open" or not d:
        return
    den = math.lcm(*(F(x).denominator for x in d.values()))
    base = {i: F(x) * den for i, x in d.items() if x}
    yield base
    k = 1 + max(int(sum(abs(F(c)) for c in r.values())) if all(isinstance(c, (int, F)) for c in r.values()) else 1
                for r in rows)
    alt = [1 if i % 2 == 0 else -1 for i in range(n)]
    signs = [[1] * n, alt, [-1] * n, [-x for x in alt]] + [[rng.choice((-1, 1)) for _ in range(n)] for _ in range(2)]
    for r in signs:
        cand = {i: F(k * base.get(i, 0) + r[i]) for i in range(n)}
        cand = {i: x for i, x in cand.items() if x}
        if holds(rows, cand):
            yield cand


def certify_rays(ev: Evaluation, leaves: list, *, deadline_s: float | None = None, seed: int = 0) -> int:
    """Certify outer-only leaves of an enumeration by rays: each leaf whose decisions and gradient a ray piece
    reproduces becomes inner, with that :class:`Ray` as its witness (``leaf.ray``).  Returns how many were
    certified.  The first ray a jet declines (an op it does not know) ends the pass.  ``deadline_s``: a
    ``time.perf_counter()`` value after which no new ray is started."""
    todo = {leaf.decisions: leaf for leaf in leaves if not leaf.inner}
    done = 0
    tried: set = set()
    for d in _candidates(ev.n, todo, seed):
        key = tuple(sorted(d.items()))
        if key in tried:
            continue
        tried.add(key)
        if not todo or (deadline_s is not None and time.perf_counter() > deadline_s):
            break
        got = _ray(ev, d)
        if got == "declined":
            break  # every other direction would meet the same op
        if got == "undecided":
            continue
        leaf = todo.get(got.decisions)
        if leaf is None or _key(leaf.gradient) != _key(got.gradient):
            continue
        leaf.inner, leaf.ray = True, got.ray
        del todo[got.decisions]
        done += 1
    return done


def _candidates(n: int, todo: dict, seed: int):
    """The generic directions, then directions inside the first-order cones of the pieces still to certify."""
    yield from directions(n, seed)
    rng = random.Random(seed + 1)
    count = 0
    for leaf in list(todo.values())[:MAX_CONE_DIRECTIONS]:  # one cone LP per leaf, for at most this many leaves
        for d in cone_directions(leaf, n, rng):
            if count >= MAX_CONE_DIRECTIONS:
                return
            if leaf.decisions not in todo:  # certified meanwhile: on to the next leaf
                break
            count += 1
            yield d


def _key(v) -> tuple:
    return tuple((x.lo, x.hi) if hasattr(x, "lo") else ("exact", x) for x in v)
