"""Depth-first enumeration of the pieces of a program adjacent to a point, pruned by exact cone tests.

Each evaluation of the program (a *trace*) replays a prefix of decisions and then, at every new branch point,
takes the first option whose open cone of directions is non-empty, pushing the other feasible options on the
stack.  A feasible option is certified by an exact witness direction (the parent's witness is reused when it
already satisfies the new constraints, so most children cost no LP); an infeasible one is pruned only with an
exact Gordan certificate.  Options that cannot be certified either way, and options below a site whose
argument is not affine in w (where the first-order cone is only an approximation), are kept as *outer-only*
pieces: they belong to the outer bracket, not to the certified inner set.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from ..errors import TooManyPieces
from .cones import ConeStats, feasible, holds
from .interp import run


@dataclass
class Leaf:
    decisions: tuple
    gradient: tuple
    value: object
    inner: bool  # certified adjacent piece (its whole pattern realised by ``witness``)
    witness: dict | None  # exact direction d realising the pattern (None: no constraint / not certified)
    sites: list


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

    @property
    def exact(self) -> bool:
        return self.incomplete is None and all(leaf.inner for leaf in self.leaves)


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
    fn, w, *, values=None, limit: int = 10_000, on_limit: str = "raise", time_limit: float | None = None
) -> Enumeration:
    """All pieces of ``fn`` adjacent to ``w`` (exact rationals of w, or ``values``)."""
    t0 = time.perf_counter()
    stats = ConeStats()
    en = Enumeration([], stats)
    stack = [((), None, True)]
    while stack:
        prefix, witness, inner = stack.pop()
        st = _State(prefix, witness, inner)

        def decide(site, options, st=st):
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
                if holds(allrows, st.witness):
                    stats.witness_reuse += 1
                    feas.append((j, st.witness, True))
                    continue
                res, cert = feasible(allrows, stats)
                if res == "open":
                    feas.append((j, cert, True))
                elif res == "empty" and not (st.curved or not site.affine):
                    en.gordan.append({"rows": allrows, "y": cert})
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
                raise _Limit()
            r = run(fn, w, mode="pieces", decide=decide, values=values)
        except _Limit:
            nsites = en.branch_sites or _count_sites(en)
            msg = (
                f"more than {limit} pieces to enumerate around w ({nsites} kink/tie sites branch "
                f"on the first "
                f"trace; the worst case is exponential, NP-hard in general). Check fewer coordinates "
                f"(a single layer's parameters), a smaller batch, or pass on_limit='unknown' / a larger "
                f"max_pieces"
            )
            if on_limit == "unknown":
                en.incomplete = msg
                break
            raise TooManyPieces(msg) from None
        if not en.leaves:
            en.branch_sites = sum(1 for s in r.sites if s.labels)
        en.curved = en.curved or r.nonaffine
        en.max_depth = max(en.max_depth, len(st.decisions))
        en.leaves.append(Leaf(tuple(st.decisions), r.gradient, r.value, st.inner, st.witness, r.sites))
    en.seconds = time.perf_counter() - t0
    return en


class _Limit(Exception):
    pass


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
