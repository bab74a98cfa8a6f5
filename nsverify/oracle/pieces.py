"""Depth-first enumeration of the pieces of a program adjacent to a point, pruned by exact cone tests.

Each evaluation of the program (a *trace*) replays a prefix of decisions and then, at every new branch point,
takes the first option whose open cone of directions is non-empty, pushing the other feasible options on the
stack.  A feasible option is certified by an exact witness direction (the parent's witness is reused when it
already satisfies the new constraints, so most children cost no LP); an infeasible one is pruned only with an
exact Gordan certificate.  Options that cannot be certified either way, and options below a site whose
argument is not affine in w (where the first-order cone is only an approximation), are kept as *outer-only*
pieces: they belong to the outer bracket, not to the certified inner set -- unless a ray along which their whole
pattern holds certifies them afterwards (:func:`nsverify.oracle.jets.certify_rays`).

Every trace is a :meth:`~nsverify.oracle.interp.Evaluation.pieces_trace` of the one
:class:`~nsverify.oracle.interp.Evaluation` that the caller owns (so the exact point, the rules and the
context are built once, and a program without kinks at w costs no trace beyond its AD trace).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from fractions import Fraction

from nsverify.errors import TooManyPieces, UnsupportedOpError
from nsverify.oracle.cones import ConeStats, feasible, holds, primitive
from nsverify.oracle.interp import Evaluation
from nsverify.oracle.numbers import sign, val


@dataclass
class Leaf:
    decisions: tuple
    gradient: tuple
    value: object
    inner: bool  # certified adjacent piece (its whole pattern realised by ``witness``)
    witness: dict | None  # exact direction d realising the pattern (None: no constraint / not certified)
    sites: list
    ray: object = None  # a jets.Ray certifying the piece along w + t d (second-order sites), or None
    rows: list = field(default_factory=list)  # the first-order cone rows of the sites on its path that have them


@dataclass
class Enumeration:
    leaves: list
    stats: ConeStats
    gordan: list = field(default_factory=list)  # exact emptiness certificates of pruned patterns
    branch_sites: int = 0  # number of kink/tie sites that branched (on the first trace)
    max_depth: int = 0
    incomplete: str | None = None  # set when the limit stopped the enumeration (on_limit="unknown")
    seconds: float = 0.0
    curved: bool = False  # some branch site had a non-affine argument
    #: why fn may be discontinuous at w: an outer-only piece whose value at w is not f(w) (None: no such piece);
    #: a certified piece with another value raises instead (:func:`continuity`)
    discontinuous: str | None = None

    @property
    def exact(self) -> bool:
        return self.incomplete is None and all(leaf.inner for leaf in self.leaves)


POOL = 12  # how many recent witnesses to try before solving an LP


class _State:
    __slots__ = ("prefix", "rows", "witness", "inner", "curved", "decisions")

    def __init__(self, prefix, witness, inner):
        self.prefix = prefix
        self.rows: list = []
        self.witness = witness
        self.inner = inner
        self.curved = False
        self.decisions: list = []


def enumerate_pieces(
    ev: Evaluation, *, limit: int = 10_000, on_limit: str = "raise", time_limit: float | None = None,
    forced=None, tracker=None, t0: float | None = None,
) -> Enumeration:
    """All pieces of the program adjacent to the Evaluation's point (one pieces-mode trace per piece).

    ``forced(site, options)``: an option index to take at that branch site without branching and without adding
    its cone rows (the separable-blocks enumeration holds the other blocks at fixed choices this way), or None
    to branch as usual.  ``tracker``: a :class:`~nsverify.oracle.progress.Tracker` told after every piece.
    ``t0``: when the call's clock started (``time_limit`` counts from it; default now).
    """
    t0 = time.perf_counter() if t0 is None else t0
    stats = ConeStats()
    en = Enumeration([], stats)
    stack = [((), None, True)]
    at_w = ev.forward().value  # f(w): every piece of a continuous fn takes this value at w
    pool: list = []  # exact witnesses found so far: tried before any new LP
    lps_seen = 0
    nogoods: list = []  # exact Gordan certificates (row keys, [(row, y)]): reused when their rows recur
    while stack:
        prefix, witness, inner = stack.pop()
        st = _State(prefix, witness, inner)

        def decide(site, options, st=st):
            # rows as coprime integer vectors: same cones, integer arithmetic, canonical keys for nogoods
            if forced is not None and (c := forced(site, options)) is not None:
                st.decisions.append(c)
                return c
            options = [(lbl, None if rows is None else [primitive(r) for r in rows]) for lbl, rows in options]
            i = len(st.decisions)
            if i < len(st.prefix):
                c = st.prefix[i]
                _take(st, site, options[c][1])
                st.decisions.append(c)
                return c
            feas = []
            for j, (_label, rows) in enumerate(options):
                if rows is None or not st.inner:
                    feas.append((j, None, False))
                    continue
                allrows = st.rows + rows
                wit = next((d for d in [st.witness] + pool[-POOL:] if holds(allrows, d)), None)
                if wit is not None:
                    stats.witness_reuse += 1
                    feas.append((j, wit, True))
                    continue
                keys = {_rkey(r) for r in allrows}
                ng = next((c for c in nogoods if c[0] <= keys), None)
                if ng is not None and not (st.curved or not site.affine):
                    stats.nogood_reuse += 1  # a known exact contradiction among these constraints
                    continue
                res, cert = feasible(allrows, stats)
                if res == "empty":
                    used = [(r, y) for r, y in zip(allrows, cert) if y > 0]
                    nogoods.append((frozenset(_rkey(r) for r, _ in used), used))
                if res == "open":
                    feas.append((j, cert, True))
                    pool.append(cert)
                elif res == "empty" and not (st.curved or not site.affine):
                    en.gordan.append(nogoods[-1][1])
                else:  # uncertain, or empty only to first order at a curved site: outer-only
                    feas.append((j, None, False))
            if not feas:  # every option certified empty: impossible for a non-empty parent cone
                feas = [(0, None, False)]
            for j, wit, inn in feas[1:]:
                stack.append((tuple(st.decisions) + (j,), wit, inn))
            j, wit, inn = feas[0]
            _take(st, site, options[j][1])
            st.witness, st.inner = (wit, inn) if inn else (None, False)
            st.decisions.append(j)
            if len(en.leaves) + len(stack) > limit:
                raise _Limit()
            return j

        try:
            if time_limit is not None and time.perf_counter() - t0 > time_limit:
                done = max(len(en.leaves), tracker.pieces if tracker is not None else 0)
                stage = getattr(tracker, "stage", None) or "pieces"  # as the hard limit's message says it
                raise _Limit(f"the time limit of {time_limit:g} s ran out during {stage} after {done} pieces")
            r = ev.pieces_trace(decide)
        except _Limit as e:
            nsites = max(en.branch_sites, _count_sites(en), len(st.decisions), ad_sites(ev))
            what = e.args[0] if e.args else f"more than {limit} pieces to enumerate around w"
            msg = limit_message(what, nsites, limit, time_limit)
            if on_limit == "unknown":
                en.incomplete = msg
                break
            raise TooManyPieces(msg) from None
        if not en.leaves:
            en.branch_sites = sum(1 for s in r.sites if s.labels)
        en.discontinuous = en.discontinuous or continuity(r, at_w, st.inner, st.decisions)
        en.curved = en.curved or r.nonaffine
        en.max_depth = max(en.max_depth, len(st.decisions))
        en.leaves.append(Leaf(tuple(st.decisions), r.gradient, r.value, st.inner, st.witness, r.sites,
                              rows=st.rows))
        if tracker is not None:
            tracker.update(pieces=tracker.pieces + 1, lps=tracker.lps + stats.lps - lps_seen)
            lps_seen = stats.lps
    en.seconds = time.perf_counter() - t0
    return en


def continuity(r, at_w, inner: bool, decisions) -> str | None:
    """Check that the piece traced by ``r`` takes fn's own value ``at_w`` at w, as every piece of a continuous fn
    does (a comparison at a tie selecting between branches that differ there, ``torch.where(w > 0, 1., 0.)``, or
    a tie's index routing a gradient inside fn, makes pieces whose values differ).  A certified piece (``inner``)
    with a provably different value raises: fn is discontinuous at w and has no Clarke set.  An outer-only piece
    (its cone not certified) returns the reason to answer "unknown" with.  Values whose enclosures overlap are not
    told apart (an irrational jump smaller than the enclosures is not seen)."""
    s = sign(val(r.value) - val(at_w))
    if not s:  # equal, or not provably different
        return None
    where = ", ".join(sorted({site.op for site in r.sites if site.labels})) or "a branch site"
    msg = (f"fn is discontinuous at w: f(w) = {_fmt(at_w)}, but on the piece after the choices {list(decisions)} "
           f"at its kink/tie sites ({where}) its value tends to {_fmt(r.value)}; no Clarke set (the Clarke "
           "subdifferential needs a locally Lipschitz fn: a comparison at a tie selecting between values that "
           "differ there, e.g. torch.where(w > 0, 1., 0.) at 0, jumps)")
    if inner:
        raise UnsupportedOpError(msg)
    return msg.replace("fn is discontinuous at w", "fn may be discontinuous at w (on a piece whose cone is not "
                       "certified)", 1)


def _fmt(x) -> str:
    return str(x) if isinstance(x, Fraction) else repr(x)


def kink_rows(fn, w) -> list[dict]:
    """The gradient rows of the kink sites of ``fn`` at ``w`` met on the AD trace (one sparse row of Fractions
    per site with a non-zero slope): the cone constraints whose sign patterns the pieces are."""
    r = Evaluation(fn, w, shadow=False).trace("ad")
    return [s.slopes[0] for s in r.sites if s.slopes and s.slopes[0]]


def naive_enumeration_lps(rows: list[dict]) -> int:
    """Naive enumeration, the baseline of the pruned one (:func:`enumerate_pieces`): one exactly certified
    open-cone test per sign pattern of the kink ``rows`` (2^k of them, none pruned, no witness reused). Returns
    the LPs it solved (the benchmarks time it against :func:`nsverify.check_gradient`)."""
    import itertools

    stats = ConeStats()
    for signs in itertools.product((1, -1), repeat=len(rows)):
        feasible([{i: s * c for i, c in g.items()} for s, g in zip(signs, rows)], stats)
    return stats.lps


def ad_sites(ev: Evaluation) -> int:
    """Kink/tie sites the AD trace met (known before any piece is enumerated), float-only ties aside."""
    if not ev.ran("forward"):
        return 0
    return sum(1 for s in ev.forward().sites if not s.extra.get("float_only"))


def limit_message(what: str, nsites: int, limit: int, time_limit: float | None, how_far: str = "") -> str:
    """The TooManyPieces / "unknown" message: what stopped, why it is hard, how far the decision got (``how_far``,
    a sentence: the ATen ops into the trace, the layers decided, the sites left), and how to raise each limit."""
    wait = "time_limit=None (no limit)" if time_limit is None else (
        f"time_limit={max(600, 10 * int(time_limit))} (seconds; now {time_limit:g}) or time_limit=None")
    far = f" How far it got: {how_far}." if how_far else ""
    return (
        f"{what} ({nsites} kink/tie sites branch on the first trace; the worst case is exponential, "
        f"NP-hard in general).{far} Check fewer coordinates (a single layer's parameters) or a smaller batch; "
        f"to wait longer pass {wait}, or max_pieces={max(10 * limit, 100_000)} (now {limit}); "
        f"on_limit='unknown' returns 'unknown' instead of raising"
    )


class _Limit(Exception):
    pass


def _rkey(row: dict):
    return tuple(sorted(row.items()))


def _take(st: _State, site, rows):
    if rows is None:
        st.inner = False
        st.witness = None
        return
    if not site.affine:
        st.curved = True
    st.rows = st.rows + rows


def _count_sites(en):
    return max((sum(1 for s in leaf.sites if s.labels) for leaf in en.leaves), default=0)


class _NoFollow(Exception):
    pass


def follow_ad(ev: Evaluation):
    """The piece whose local choices are AD's own, if AD's rule at every branch site is a piece choice.

    Returns ``(gradient, decisions, rows, witness)`` when that pattern's open cone is non-empty (exact
    witness): then AD's output *is* the gradient of a piece adjacent to w (same local derivatives, same
    arithmetic), a Bouligand subgradient -- a membership certificate that needs no numeric comparison, so it
    also holds when smooth parts make the values irrational.  ``None`` otherwise.
    """
    rows: list = []
    decisions: list = []

    def decide(site, options):
        j = site.ad_option
        if j is None or options[j][1] is None:
            raise _NoFollow()
        rows.extend(primitive(r) for r in options[j][1])
        decisions.append(j)
        return j

    try:
        r = ev.pieces_trace(decide)
    except _NoFollow:
        return None
    if not rows:
        return r.gradient, tuple(decisions), rows, {}
    stats = ConeStats()
    res, cert = feasible(rows, stats)
    if res != "open":
        return None
    return r.gradient, tuple(decisions), rows, cert
