"""Certificates: their JSON format (defined once, here), how the oracle writes them and how anyone checks them.

A certificate proves a verdict's status.  :func:`verify_certificate` checks it in two modes:

* **JSON only** (``verify_certificate(record)``): exact arithmetic on the verdict's own JSON
  (:meth:`Verdict.to_dict`), without the program.  It proves the status *relative to the vectors the record
  lists* -- it does not prove that the listed vertices are Bouligand gradients of the program, nor (for
  not_member) that the list is complete.
* **with the program** (``verify_certificate(record, fn=fn)``): also replays ``fn`` exactly at the record's
  point, independently of the piece enumerator (:mod:`nsverify.oracle.pieces` is not used, and nothing of its
  state is): every vertex a member certificate uses is re-derived from its witness direction, a not_member
  certificate's enumeration tree is replayed with every unexplored branch proved empty again, and exact
  gradients sampled at random rational points near w must not contradict the verdict.

==========================  ==========  =====================================================================
``kind`` and fields          status      JSON-only check (exact)
==========================  ==========  =====================================================================
``convex_weights``           member      ``weights`` ({vertex index: weight}) are >= 0, sum to 1 and reproduce
``weights``, ``witnesses``               ``tested`` from ``bouligand``; ``witnesses``: per vertex used, a
                                         direction d into that piece's open cone, or a ray {"ray": d,
                                         "orders": [k, ...]} along which its pattern holds
``interval_bracket``         member      vertex ``below`` <= ``tested`` <= vertex ``above`` in the one coordinate
``below``, ``above``,                    where they differ (interval endpoints bound rigorously), all three
``witnesses``                            exactly equal elsewhere: ``tested`` is on their segment
``adjacent_piece``           member      the ``witness`` direction lies strictly inside every half-space in
``decisions``, ``rows``,                 ``rows`` and ``gradient`` agrees with ``tested`` (equal where exact,
``witness``, ``gradient``                overlapping enclosures otherwise): AD's own local choices
                                         (``decisions``) form a piece adjacent to w whose gradient is AD's
``separating_direction``     not_member  <h, tested> > <h, v> for every v of ``bouligand`` (``over:
``h``, ``over``,                         "bouligand"``) or of the outer bracket ``outer`` (``over: "outer"``);
``witnesses``, ``leaves``                ``leaves``: every enumerated piece (its decisions, its vertex index)
==========================  ==========  =====================================================================

Every kind (the table above, ``block_product``, ``park_theorem5``, ``park_theorem8``) first checks that ``tested``
is the vector ``tested_is`` names: with ``"exact_ad"`` it must be the record's own ``exact_ad``, entry for entry
(a record whose tested vector contradicts its exact AD checks as False); ``"ad"`` is a vector the caller gave.

With ``fn`` (the record must carry ``point``, ``shape`` and ``dtype``, which the oracle writes):

* **vertex replay** -- ``fn`` runs once at w in the interpreter's plain pieces mode, taking at every kink or tie
  the one option whose cone contains the witness direction d strictly (no option, or two, fails); the gradient
  of that piece must be the listed vertex (equal, or inside its enclosure).  Where the piece is affine, a
  second plain evaluation at the rational point w + 2^-k d (no kink or tie met there) must return the same
  gradient.  A ray witness (:mod:`nsverify.oracle.jets`) is replayed by its ray trace along d, which must decide
  every site at the recorded orders, and the pieces-mode trace of that pattern, whose gradient must be the vertex.
  This uses the exact interpreter's ordinary evaluation, which the verdict depends on anyway; what
  it does not reuse is the enumerator (its stack, witness pool, nogoods, merged vertices).
* **tree replay** (not_member) -- ``fn`` runs once per listed leaf, following its decisions; at every branch
  site each option that no leaf takes must be proved empty again (an exact Gordan certificate on the
  accumulated cone rows, decided by the float LP and re-checked, or by the exact simplex), at a site whose
  argument and every earlier one are affine; every leaf's gradient must be a listed vector.  This proves the
  list complete *relative to the interpreter's branch options at each site* (which the vertex replay also
  trusts); it does not prove the interpreter's op implementations right -- the independent fuzz oracle of the
  test suite checks those.
* **sampling** (not_member) -- exact gradients at seeded random rational points w + t d (generic points only)
  must not contradict the separation: on affine pieces each sampled gradient must be a listed vector; on
  curved ones <h, g> must stay below <h, tested> by half the certified margin.

Unknown kinds, malformed or tampered records and a record without a certificate all check as False, with a
reason; the checker never raises (it returns :class:`Check`).
"""

from __future__ import annotations

import json
import math
import random
import re
from dataclasses import dataclass
from fractions import Fraction
from typing import ClassVar

from nsverify.oracle.callenv import user_environment
from nsverify.oracle.cones import ConeStats, feasible, holds, primitive
from nsverify.oracle.interp import Evaluation
from nsverify.oracle.jets import Ray, ray_piece
from nsverify.oracle.jsonio import enc
from nsverify.oracle.membership import margin
from nsverify.oracle.numbers import JET_ORDER, Ival, bounds, overlap
from nsverify.oracle.pieces import follow_ad
from nsverify.rational import check_weights

F = Fraction


class Malformed(Exception):
    """A record that does not have the certificate format (caught by :func:`verify_certificate`)."""


# ----------------------------------------------------------------------------------------------------
# strict decoding (a checker must not trust the shape of its input)
# ----------------------------------------------------------------------------------------------------
_NUM = re.compile(r"-?[0-9]{1,4000}(/[0-9]{1,4000})?")


def _num(x) -> Fraction:
    """An exact number: a "p/q" (or "p") string, or a JSON integer; floats, NaN and exponents are refused."""
    if isinstance(x, bool):
        raise Malformed(f"{x!r} is not a number")
    if isinstance(x, int):
        if abs(x).bit_length() > 13000:
            raise Malformed("an integer with more than 13000 bits")
        return F(x)
    if isinstance(x, str) and _NUM.fullmatch(x):
        try:
            return F(x)
        except (ValueError, ZeroDivisionError) as e:
            raise Malformed(f"{x!r}: {e}") from None
    raise Malformed(f"{x!r} is not an exact number (write 'p/q')")


def _value(x):
    """A number or an interval {"lo", "hi"} (lo <= hi)."""
    if isinstance(x, dict):
        if set(x) != {"lo", "hi"}:
            raise Malformed(f"an interval must have exactly the keys lo and hi, got {sorted(x)}")
        lo, hi = _num(x["lo"]), _num(x["hi"])
        if lo > hi:
            raise Malformed(f"an interval with lo > hi ({lo} > {hi})")
        return Ival.of(lo, hi)
    return _num(x)


def _vector(x, n: int | None = None) -> tuple:
    if not isinstance(x, list):
        raise Malformed(f"a vector must be a list, got {type(x).__name__}")
    if n is not None and len(x) != n:
        raise Malformed(f"a vector of length {len(x)} where {n} entries are needed")
    return tuple(_value(v) for v in x)


def _vectors(x, n: int) -> list:
    if not isinstance(x, list):
        raise Malformed(f"a list of vectors must be a list, got {type(x).__name__}")
    return [_vector(v, n) for v in x]


def _index(x, size: int) -> int:
    if isinstance(x, bool) or not isinstance(x, (int, str)):
        raise Malformed(f"{x!r} is not an index")
    try:
        i = int(x)
    except ValueError:
        raise Malformed(f"{x!r} is not an index") from None
    if not 0 <= i < size:
        raise Malformed(f"index {i} is outside 0..{size - 1}")
    return i


def _sparse(x, n: int | None = None, *, intervals: bool = False) -> dict:
    """A sparse vector {"coordinate": "p/q"} of exact numbers (``intervals``: entries may also be enclosures
    {"lo", "hi"} of irrational numbers, as cone rows through smooth ops such as LayerNorm's 1/sigma are)."""
    if not isinstance(x, dict):
        raise Malformed(f"a sparse vector must be an object, got {type(x).__name__}")
    out = {}
    for k, v in x.items():
        i = _index(k, n if n is not None else 1 << 62)
        out[i] = _value(v) if intervals else _num(v)
    return out


def _record(verdict) -> dict:
    if hasattr(verdict, "to_dict"):
        verdict = verdict.to_dict()
    elif isinstance(verdict, (str, bytes)):
        verdict = json.loads(verdict)
    if not isinstance(verdict, dict):
        raise Malformed(f"a verdict record must be a JSON object, got {type(verdict).__name__}")
    return verdict


def _tested(record: dict) -> tuple:
    return _vector(record.get("tested"))


# ----------------------------------------------------------------------------------------------------
# the certificate kinds
# ----------------------------------------------------------------------------------------------------
def _witnesses_of(vertices: list, leaves: list, wanted) -> dict:
    """{vertex index: the witness direction of the first certified piece with that gradient} for ``wanted``."""
    out = {}
    for i in wanted:
        leaf = next((lf for lf in leaves if lf.inner and tuple(lf.gradient) == tuple(vertices[i])), None)
        if leaf is not None:
            out[i] = leaf.ray if leaf.ray is not None else (leaf.witness or {})
    return out


def _tree_of(vertices: list, leaves: list) -> tuple | None:
    """((decisions, vertex index), ...) for every enumerated piece, when each one's gradient is listed (an
    exact enumeration, or the outer bracket); None otherwise."""
    index: dict = {}
    for i, v in enumerate(vertices):
        index.setdefault(_vkey(v), i)
    tree = tuple((tuple(lf.decisions), index[_vkey(lf.gradient)]) for lf in leaves if _vkey(lf.gradient) in index)
    return tree if len(tree) == len(leaves) and leaves else None


def _enc_leaves(out: dict, leaves) -> dict:
    if leaves is not None:
        out["leaves"] = [{"decisions": list(d), "vertex": i} for d, i in leaves]
    return out


def _dec_leaves(x) -> tuple | None:
    if x is None:
        return None
    if not isinstance(x, list):
        raise Malformed("leaves must be a list")
    out = []
    for lf in x:
        if not isinstance(lf, dict) or not isinstance(lf.get("decisions"), list):
            raise Malformed("each leaf needs a list of decisions and a vertex index")
        out.append((tuple(_index(c, 1 << 30) for c in lf["decisions"]), _index(lf.get("vertex"), 1 << 62)))
    return tuple(out)


def _enc_witnesses(wit: dict) -> dict:
    return {str(i): _enc_witness(d) for i, d in wit.items()}


def _enc_witness(d) -> dict:
    """A direction into the piece's open cone ({coordinate: "p/q"}), or a ray {"ray": direction, "orders": [k,
    ...]} along which the piece's pattern holds (:class:`nsverify.oracle.jets.Ray`)."""
    if isinstance(d, Ray):
        return {"ray": enc(d.direction), "orders": list(d.orders)}
    return enc(d) if d else {}


def _dec_witnesses(x, size: int) -> dict:
    if x is None:
        return {}
    if not isinstance(x, dict):
        raise Malformed("witnesses must be an object {vertex index: direction}")
    return {_index(k, size): _dec_witness(v) for k, v in x.items()}


def _dec_witness(v):
    if isinstance(v, dict) and "ray" in v:
        orders = v.get("orders")
        if set(v) != {"ray", "orders"} or not isinstance(orders, list):
            raise Malformed("a ray witness has exactly the keys ray (a direction) and orders (a list)")
        d = _sparse(v["ray"])
        if not any(d.values()):
            raise Malformed("a ray witness needs a non-zero direction")
        return Ray(d, tuple(_index(k, JET_ORDER + 1) for k in orders))
    return _sparse(v)


@dataclass(frozen=True)
class ConvexWeights:
    """member: exact convex weights over the Bouligand vertices that reproduce the tested vector."""

    kind: ClassVar[str] = "convex_weights"
    status: ClassVar[str] = "member"
    weights: dict  # {vertex index: Fraction}
    witnesses: dict  # {vertex index: sparse direction {coordinate: number} into that piece; {} unconstrained}
    leaves: tuple | None = None  # ((decisions, vertex index), ...) of an exact enumeration

    @classmethod
    def of(cls, weights: dict, vertices: list, leaves: list, complete: bool = True) -> ConvexWeights:
        """The weights, with the witness direction of the first certified piece that has each vertex used (and
        the enumeration tree when the enumeration is complete and every piece certified)."""
        tree = _tree_of(vertices, leaves) if complete and all(lf.inner for lf in leaves) else None
        return cls(dict(weights), _witnesses_of(vertices, leaves, weights), tree)

    def to_json(self) -> dict:
        return _enc_leaves({"kind": self.kind, "weights": {str(i): enc(x) for i, x in self.weights.items()},
                            "witnesses": _enc_witnesses(self.witnesses)}, self.leaves)

    @classmethod
    def from_json(cls, d: dict) -> ConvexWeights:
        w = d.get("weights")
        if not isinstance(w, dict) or not w:
            raise Malformed("convex_weights needs a non-empty object of weights")
        return cls({_index(k, 1 << 62): _num(v) for k, v in w.items()},
                   _dec_witnesses(d.get("witnesses", {}), 1 << 62), _dec_leaves(d.get("leaves")))

    def check(self, record: dict) -> str | None:
        t = _tested(record)
        V = _vectors(record.get("bouligand"), len(t))
        if any(i >= len(V) for i in self.weights):
            return "a weight refers to a vertex that the record does not list"
        if not check_weights(t, V, self.weights):
            return "the weights are not convex or do not reproduce the tested vector from the listed vertices"
        return None

    def used(self) -> dict:
        return {i: self.witnesses.get(i) for i in self.weights}

    def describe(self) -> str:
        return "convex_weights: " + ", ".join(f"{enc(x)} x vertex {i}" for i, x in self.weights.items())


@dataclass(frozen=True)
class IntervalBracket:
    """member (1-D): vertex ``below`` <= tested <= vertex ``above``, with rigorous interval bounds."""

    kind: ClassVar[str] = "interval_bracket"
    status: ClassVar[str] = "member"
    below: int
    above: int
    witnesses: dict | None = None
    leaves: tuple | None = None

    @classmethod
    def of(cls, below: int, above: int, vertices: list, leaves: list, complete: bool = True) -> IntervalBracket:
        tree = _tree_of(vertices, leaves) if complete and all(lf.inner for lf in leaves) else None
        return cls(below, above, _witnesses_of(vertices, leaves, (below, above)), tree)

    def to_json(self) -> dict:
        out = {"kind": self.kind, "below": self.below, "above": self.above}
        if self.witnesses is not None:
            out["witnesses"] = _enc_witnesses(self.witnesses)
        return _enc_leaves(out, self.leaves)

    @classmethod
    def from_json(cls, d: dict) -> IntervalBracket:
        wit = d.get("witnesses")
        return cls(_index(d.get("below"), 1 << 62), _index(d.get("above"), 1 << 62),
                   None if wit is None else _dec_witnesses(wit, 1 << 62), _dec_leaves(d.get("leaves")))

    def check(self, record: dict) -> str | None:
        t = _tested(record)
        V = _vectors(record.get("bouligand"), len(t))
        if self.below >= len(V) or self.above >= len(V):
            return "the bracket refers to a vertex that the record does not list"
        lo, hi = V[self.below], V[self.above]
        same = lambda a, b: not isinstance(a, Ival) and not isinstance(b, Ival) and a == b  # noqa: E731
        ks = [k for k in range(len(t)) if not (same(lo[k], t[k]) and same(hi[k], t[k]))]
        if len(ks) > 1 or not t:
            return "the bracket's vertices differ from the tested vector in more than one coordinate"
        k = ks[0] if ks else 0
        tlo, thi = bounds(t[k])
        if not (bounds(lo[k])[1] <= tlo and thi <= bounds(hi[k])[0]):
            return "the named vertices do not bracket the tested value"
        return None

    def used(self) -> dict:
        wit = self.witnesses or {}
        return {self.below: wit.get(self.below), self.above: wit.get(self.above)}

    def describe(self) -> str:
        return f"interval_bracket: vertex {self.below} <= tested <= vertex {self.above}"


@dataclass(frozen=True)
class AdjacentPiece:
    """member: AD's own local choices form a piece adjacent to w (an exact direction lies in its open cone).

    AD's output is then that piece's gradient (same local derivatives, same arithmetic): a Bouligand
    subgradient, certified without comparing numbers, so it also holds when smooth parts make them irrational."""

    kind: ClassVar[str] = "adjacent_piece"
    status: ClassVar[str] = "member"
    decisions: tuple  # the option taken at each branch site, in trace order
    rows: tuple  # sparse rows r: the piece's open cone is {d : <r, d> > 0 for every r}
    witness: dict  # an exact direction d in that cone ({} when there is no row)
    gradient: tuple  # the piece's gradient (AD's output)

    def to_json(self) -> dict:
        return {"kind": self.kind, "decisions": list(self.decisions), "rows": [enc(r) for r in self.rows],
                "witness": enc(self.witness), "gradient": enc(tuple(self.gradient))}

    @classmethod
    def from_json(cls, d: dict) -> AdjacentPiece:
        dec = d.get("decisions")
        rows = d.get("rows")
        if not isinstance(dec, list) or not isinstance(rows, list):
            raise Malformed("adjacent_piece needs lists of decisions and rows")
        return cls(tuple(_index(c, 1 << 30) for c in dec), tuple(_sparse(r, intervals=True) for r in rows),
                   _sparse(d.get("witness")), _vector(d.get("gradient")))

    def check(self, record: dict) -> str | None:
        t = _tested(record)
        if len(self.gradient) != len(t):
            return "the piece's gradient and the tested vector differ in length"
        for a, b in zip(self.gradient, t):
            exact = not isinstance(a, Ival) and not isinstance(b, Ival)
            if (exact and a != b) or not overlap(a, b):
                return "the piece's gradient is not the tested vector"
        if any(not r for r in self.rows):
            return "an empty cone row (no half-space)"
        if not holds(list(self.rows), self.witness if self.rows else None):
            return "the witness direction is not strictly inside the piece's cone"
        return None

    def used(self) -> dict:
        return {}

    def describe(self) -> str:
        return f"adjacent_piece: AD's choices at {len(self.decisions)} branch sites, {len(self.rows)} cone rows"


@dataclass(frozen=True)
class SeparatingDirection:
    """not_member: a rational h with <h, tested> > max <h, v> over the vertices (``over`` names the set)."""

    kind: ClassVar[str] = "separating_direction"
    status: ClassVar[str] = "not_member"
    h: tuple
    over: str = "bouligand"  # "bouligand" (exact enumeration) or "outer" (the outer bracket)
    witnesses: dict | None = None  # {vertex index: direction} for the certified vertices of the listed set
    leaves: tuple | None = None  # ((decisions, vertex index), ...): every enumerated piece

    @classmethod
    def of(cls, h, over: str, vertices: list, leaves: list) -> SeparatingDirection:
        return cls(tuple(h), over, _witnesses_of(vertices, leaves, range(len(vertices))), _tree_of(vertices, leaves))

    def to_json(self) -> dict:
        out = {"kind": self.kind, "h": enc(self.h), "over": self.over}
        if self.witnesses is not None:
            out["witnesses"] = _enc_witnesses(self.witnesses)
        return _enc_leaves(out, self.leaves)

    @classmethod
    def from_json(cls, d: dict) -> SeparatingDirection:
        over = d.get("over", "bouligand")
        if over not in ("bouligand", "outer"):
            raise Malformed(f"over must be 'bouligand' or 'outer', got {over!r}")
        wit = d.get("witnesses")
        return cls(_vector(d.get("h")), over, None if wit is None else _dec_witnesses(wit, 1 << 62),
                   _dec_leaves(d.get("leaves")))

    def vertices(self, record: dict) -> list:
        t = _tested(record)
        return _vectors(record.get("outer" if self.over == "outer" else "bouligand"), len(t))

    def check(self, record: dict) -> str | None:
        t = _tested(record)
        if len(self.h) != len(t) or any(isinstance(x, Ival) for x in self.h):
            return "h must be an exact vector of the tested vector's length"
        V = self.vertices(record)
        if not V:
            return "no vertex to separate from"
        if margin(list(self.h), t, V) is None:
            return "h does not separate the tested vector from every listed vertex"
        return None

    def used(self) -> dict:
        """Every listed vertex of an exact enumeration needs its witness; the outer bracket's outer-only
        vectors have none (the tree replay covers them)."""
        wit = dict(self.witnesses or {})
        if self.over == "bouligand" and self.leaves is not None:
            for _, i in self.leaves:
                wit.setdefault(i, None)
        return wit

    def describe(self) -> str:
        return f"separating_direction: h = ({', '.join(enc(x) for x in self.h)}) over {self.over}"


def _rkey(row: dict) -> tuple:
    """A cone row as a comparable key: exact coefficients by value, interval ones by their exact endpoints."""
    return tuple(sorted((k, ("iv", v.lo, v.hi) if isinstance(v, Ival) else ("exact", F(v)))
                        for k, v in row.items()))


def _vkey(v) -> tuple:
    return tuple((x.lo, x.hi) if isinstance(x, Ival) else ("exact", x) for x in v)


def from_json(cert: dict) -> Certificate | None:
    """The certificate a JSON dict describes (one of :data:`KINDS`), or None for an unknown ``kind`` (Malformed for
    a bad one)."""
    if not isinstance(cert, dict):
        raise Malformed("a certificate must be a JSON object")
    cls = KINDS.get(cert.get("kind")) if isinstance(cert.get("kind"), str) else None
    return None if cls is None else cls.from_json(cert)


def describe(cert: dict | None) -> str:
    """One line on a certificate in JSON form (its kind and what it rests on)."""
    if not cert:
        return "none"
    try:
        c = from_json(cert)
    except Malformed as e:
        return f"malformed certificate ({e})"
    return str(cert.get("kind")) if c is None else c.describe()


# ----------------------------------------------------------------------------------------------------
# checking
# ----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Check:
    """The answer of :func:`verify_certificate`: truthy when every check passed; ``reason`` says why not,
    ``checked`` what was verified."""

    ok: bool
    reason: str = ""
    checked: tuple = ()

    def __bool__(self) -> bool:
        return self.ok

    def __repr__(self) -> str:
        return f"Check(ok={self.ok}, reason={self.reason!r}, checked={list(self.checked)})"


def verify_certificate(verdict, fn=None, *, samples: int = 12, seed: int = 0) -> Check:
    """Re-check a verdict's certificate exactly (a dict, a JSON string or a Verdict); see the module docstring.

    Without ``fn``: the JSON-only check, relative to the vectors the record lists.  With ``fn`` (the program
    the verdict is about): also the replays at the record's point -- every vertex the certificate uses,
    re-derived from its witness, and for not_member the enumeration tree and ``samples`` random nearby points.
    Returns a :class:`Check` (truthy iff valid, with the reason otherwise); never raises on bad input.
    """
    try:
        with user_environment():  # replays call fn as check_gradient did: grad mode on, the same random state
            return _verify(verdict, fn, samples, seed)
    except Malformed as e:
        return Check(False, f"malformed record: {e}")
    except RecursionError:
        return Check(False, "malformed record: nested too deeply")
    except Exception as e:  # noqa: BLE001 - a checker reports, it does not crash (a failing fn included)
        return Check(False, f"the check failed: {type(e).__name__}: {e}")


def _verify(verdict, fn, samples: int, seed: int) -> Check:
    d = _record(verdict)
    cert = d.get("certificate")
    if not cert:
        return Check(False, "the record has no certificate (an unknown verdict proves nothing)")
    c = from_json(cert)
    if c is None:
        return Check(False, f"unknown certificate kind {cert.get('kind')!r}")
    if d.get("status") != c.status:
        return Check(False, f"a {c.kind} certificate proves {c.status}, but the record says {d.get('status')!r}")
    if isinstance(c, NonFiniteGradient):  # its tested vector holds NaN/inf: checked on its own terms
        why = c.check(d) or (None if fn is None else c.replay(fn, _point(d)))
        return Check(False, why) if why else Check(True, "", ("json",) if fn is None else ("json", "trace replay"))
    if isinstance(c, (ParkTheorem8Enclosed, Lemma2PairCertificate)):  # the exact AD as a rule, not materialized
        why = c.check(d) or (None if fn is None else c.replay(fn, _point(d)))
        return Check(False, why) if why else Check(True, "", ("json",) if fn is None else ("json", "enclosed replay"))
    why = _tested_is_named(d) or c.check(d)
    if why:
        return Check(False, why)
    checked = ["json"]
    if fn is None:
        return Check(True, "", tuple(checked))
    w = _point(d)
    t = _tested(d)
    if len(t) != w.numel():
        return Check(False, "the tested vector and the point differ in length")
    if _tests_exact_ad(d):
        ev = Evaluation(fn, w)
        # the layered theorems are about PyTorch's backward formulas (the reverse mode), the same vector the
        # oracle tests; replaying the forward mode as well would cost a dense first-order trace for nothing
        got = tuple(ev.reverse()[0] if isinstance(c, (ParkTheorem5, ParkTheorem8)) else ev.exact_ad(warn=False)[0])
        if len(got) != len(t) or not all(_same(a, b) for a, b in zip(got, t)):
            return Check(False, "the record says the tested vector is the program's exact AD, but replaying the "
                                "program at the point gives another one")
        checked.append("exact AD replay")
    if isinstance(c, AdjacentPiece):
        why = _replay_adjacent(fn, w, c)
        if why:
            return Check(False, why)
        return Check(True, "", (*checked, "witness replay"))
    if isinstance(c, BlockProduct):
        why = _replay_blocks(fn, w, c, t, samples, seed)
        if why:
            return Check(False, why)
        return Check(True, "", (*checked, "witness replay", f"{samples} samples"))
    if isinstance(c, NormBall):
        why = c.replay(fn, w)
        return Check(False, why) if why else Check(True, "", (*checked, "norm replay"))
    if isinstance(c, (ParkTheorem5, ParkTheorem8)):
        if "exact AD replay" not in checked:
            return Check(False, "the tested vector is not the program's exact AD at the point")
        return Check(True, "", tuple(checked))
    V = c.vertices(d) if isinstance(c, SeparatingDirection) else _vectors(d.get("bouligand"), len(t))
    for i, wit in c.used().items():
        if i >= len(V):
            return Check(False, f"a witness names vertex {i}, which the record does not list")
        if wit is None:
            return Check(False, f"vertex {i} has no witness: it cannot be re-derived from the program")
        why = _replay_vertex(fn, w, wit, V[i])
        if why:
            return Check(False, f"vertex {i}: {why}")
    checked.append("witness replay")
    if isinstance(c, SeparatingDirection) and c.leaves is None:
        return Check(False, "the certificate lists no enumeration tree: its completeness cannot be re-checked")
    if c.leaves is not None:  # the listed vectors are exactly the pieces' gradients
        why = _replay_tree(fn, w, c.leaves, V)
        if why:
            return Check(False, why)
        if len({i for _, i in c.leaves}) != len(V):
            return Check(False, "a listed vertex is the gradient of no enumerated piece")
        checked.append("tree replay")
    if isinstance(c, SeparatingDirection):
        why = _sample(fn, w, c.h, t, V, samples, seed)
        if why:
            return Check(False, why)
        checked.append(f"{samples} samples")
    return Check(True, "", tuple(checked))


def _tested_is_named(d: dict) -> str | None:
    """Why the record's ``tested`` vector is not the one its ``tested_is`` names (None when it is), for every kind.

    ``"exact_ad"``: ``tested`` must be the record's own ``exact_ad``, entry for entry (the same exact numbers, the
    same enclosures).  ``"ad"``: a vector the caller gave, which the record holds only as ``tested``.  A record that
    lists an ``exact_ad`` must name its tested vector; one with neither (written before the field existed) names
    nothing and proves the status of its ``tested`` vector only."""
    named = d.get("tested_is")
    if named is None and d.get("exact_ad") is None:
        return None
    if named == "float_ad":  # PyTorch's float gradient as returned: the record's own ``ad``, entry for entry
        return _float_ad_named(d)
    if named == "ad":  # a vector the record holds only as tested
        return None
    if named != "exact_ad":
        return f"tested_is must be 'exact_ad' or 'ad' (the vector the record tests), got {named!r}"
    if d.get("exact_ad") is None:
        return "the record says the tested vector is the exact AD, but lists no exact_ad"
    t = _tested(d)
    if _vkey(_vector(d["exact_ad"], len(t))) != _vkey(t):
        return "the record says the tested vector is the exact AD, but it is not the record's own exact_ad"
    return None


def _float_ad_named(d: dict) -> str | None:
    """Why a record's ``tested`` vector is not its ``ad`` (PyTorch's float gradient; NaN/inf kept), None when it is."""
    t, a = d.get("tested"), d.get("ad")
    if not isinstance(t, list) or not isinstance(a, list) or len(t) != len(a):
        return "the record says the tested vector is PyTorch's float gradient, but it is not the record's own ad"
    for x, y in zip(t, a):
        if not isinstance(y, (int, float)) or isinstance(y, bool):
            return "the record's ad must be a list of numbers"
        if not math.isfinite(y):
            same = isinstance(x, float) and (x == y or (x != x and y != y))
        else:
            try:
                same = not isinstance(x, float) and _num(x) == Fraction(y)
            except Malformed:
                same = False
        if not same:
            return "the record says the tested vector is PyTorch's float gradient, but it is not the record's own ad"
    return None


def _tests_exact_ad(d: dict) -> bool:
    """Whether the record's tested vector is the program's own exact AD, so a replay must re-derive it.  Not
    when the record names another vector (``tested_is="ad"``), or when the exact AD applied the caller's
    rules at kinks (``rules=``), which the record does not carry."""
    how = (d.get("stats") or {}).get("exact_ad_from", "") if isinstance(d.get("stats"), dict) else ""
    # "forward (conventions": records written before conventions= was renamed rules=
    return d.get("tested_is") == "exact_ad" and not str(how).startswith(("forward (rules", "forward (conventions"))


def _point(d: dict):
    """The record's point as a tensor of its dtype and shape (each value exactly representable)."""
    import torch

    from nsverify.devices import parse_dtype

    pt, shape, dtype = d.get("point"), d.get("shape"), d.get("dtype")
    if pt is None or shape is None or dtype is None:
        raise Malformed("checking with fn needs the record's point, shape and dtype (written by the oracle)")
    vals = _vector(pt)
    if any(isinstance(v, Ival) for v in vals):
        raise Malformed("the point must be exact")
    if not isinstance(shape, list) or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0
                                              for s in shape) or math.prod(shape) != len(vals):
        raise Malformed("shape must list the point's dimensions")
    dt = parse_dtype(str(dtype).removeprefix("torch."))
    w = torch.tensor([float(v) for v in vals], dtype=torch.float64).to(dt)
    if [F(x) for x in w.double().tolist()] != list(vals):
        raise Malformed(f"the point is not exactly representable in {dt}")
    return w.reshape(shape)


def _follow_direction(fn, w, d: dict):
    """fn at w in plain pieces mode, every branch site taking the one option whose cone holds d strictly.
    Returns (RunResult, decisions) or (None, reason)."""
    decisions: list = []
    fail: list = []
    taken: list = []

    def decide(site, options):
        ok = [j for j, (_, rows) in enumerate(options) if rows is not None and holds(list(rows), d)]
        if len(ok) != 1:
            fail.append(f"at a {site.op} site the witness selects {len(ok)} options, not one")
            raise _Stop()
        decisions.append(ok[0])
        taken.extend(primitive(r) for r in options[ok[0]][1])
        return ok[0]

    try:
        r = Evaluation(fn, w).trace("pieces", decide)
    except _Stop:
        return None, fail[0]
    r.rows = taken
    return r, decisions


class _Stop(Exception):
    pass


def _same(replayed, listed) -> bool:
    """The replayed value is the listed one: equal when exact, inside its enclosure otherwise."""
    if not isinstance(replayed, Ival) and not isinstance(listed, Ival):
        return replayed == listed
    lo, hi = bounds(replayed)
    llo, lhi = bounds(listed)
    return llo <= lo and hi <= lhi


def _replay_vertex(fn, w, d, vertex) -> str | None:
    if isinstance(d, Ray):
        return _replay_ray(fn, w, d, vertex)
    r, dec = _follow_direction(fn, w, d)
    if r is None:
        return dec
    if len(r.gradient) != len(vertex) or not all(_same(a, b) for a, b in zip(r.gradient, vertex)):
        return "the piece the witness selects has another gradient"
    return _nearby_point(fn, w, d, r, vertex)


def _nearby_point(fn, w, d, r, vertex) -> str | None:
    """On an affine piece: the plain gradient at w + 2^-k d (a generic point of the piece) equals the vertex."""
    if not r.lin or r.nonaffine or any(isinstance(x, Ival) for x in vertex):
        return None
    base = [F(x) for x in w.double().reshape(-1).tolist()]
    for k in _SCALES:
        p = [b + F(1, 2**k) * d.get(i, 0) for i, b in enumerate(base)]
        g = Evaluation(fn, w, values=p).forward()
        if _genuine_sites(g.sites):
            continue
        if tuple(g.gradient) != tuple(vertex):
            return f"the gradient at the nearby point w + 2^-{k} d is not the vertex"
        return None
    return None


#: the nearby points are w + 2^-k d, closer to w than the kinks that do not pass through w in any program
#: with float constants of modest depth (two scales: a non-generic point is retried closer)
_SCALES = (1200, 1600)


def _replay_ray(fn, w, ray: Ray, vertex) -> str | None:
    """A ray witness: the ray trace along w + t d decides every site at the recorded orders, and the pieces trace
    of that pattern has the vertex as its gradient."""
    got = ray_piece(Evaluation(fn, w), ray.direction)
    if got is None:
        return "the ray trace along the witness direction does not decide every site"
    if got.ray.orders != ray.orders:
        return "the ray trace decides the sites at other orders than the certificate records"
    if len(got.gradient) != len(vertex) or not all(_same(a, b) for a, b in zip(got.gradient, vertex)):
        return "the piece the ray selects has another gradient"
    return None


def _genuine_sites(sites) -> int:
    """Kink/tie sites whose outcome depends on the direction (ties between identical functions do not)."""
    return sum(1 for s in sites if (len(s.slopes) > 1 if "tied" in s.extra else any(s.slopes)))


def _replay_adjacent(fn, w, c: AdjacentPiece) -> str | None:
    if not c.rows and c.decisions:
        return "decisions without cone rows"
    r, dec = _follow_direction(fn, w, c.witness)
    if r is None:
        return dec
    if tuple(dec) != tuple(c.decisions):
        return "the witness selects other choices than the certificate's decisions"
    if sorted(map(_rkey, r.rows)) != sorted(_rkey(primitive(x)) for x in c.rows):
        return "the certificate's cone rows are not the rows of the piece the witness selects"
    if len(r.gradient) != len(c.gradient) or not all(_same(a, b) or (overlap(a, b) and isinstance(a, Ival))
                                                     for a, b in zip(r.gradient, c.gradient)):
        return "the piece the witness selects has another gradient"
    return None


def _replay_tree(fn, w, leaves, V) -> str | None:
    """Every branch of the enumeration tree explored or proved empty; every leaf's gradient listed."""
    prefixes = {lf[:k] for lf, _ in leaves for k in range(len(lf) + 1)}
    stats = ConeStats()
    proved: set = set()
    for path, vi in leaves:
        rows_so_far: list = []
        curved = [False]
        todo: list = []

        def decide(site, options, path=path, rows_so_far=rows_so_far, todo=todo, curved=curved):
            i = len(todo)
            if i >= len(path):
                raise _Stop("a listed leaf is not a leaf: the program branches again after its decisions")
            c = path[i]
            if c >= len(options):
                raise _Stop(f"decision {c} at a {site.op} site with {len(options)} options")
            curved[0] = curved[0] or not site.affine
            todo.append((path[:i], options, list(rows_so_far), curved[0]))
            if options[c][1] is None:
                rows_so_far.append(None)
            else:
                rows_so_far.extend(options[c][1])
            return c

        try:
            r = Evaluation(fn, w).trace("pieces", decide)
        except _Stop as e:
            return str(e.args[0]) if e.args else "the tree replay stopped"
        if len(todo) != len(path):
            return "a listed leaf has more decisions than the program has branch sites on its path"
        if vi >= len(V) or not all(_same(a, b) for a, b in zip(r.gradient, V[vi])):
            return "a leaf's gradient is not the listed vertex it names"
        for prefix, options, rows, is_curved in todo:
            for j, (_, orows) in enumerate(options):
                key = prefix + (j,)
                if key in prefixes or key in proved:
                    continue
                if is_curved or orows is None or any(x is None for x in rows):
                    return (f"option {j} after decisions {list(prefix)} is neither explored nor provably empty "
                            "(a curved or second-order site)")
                res, _ = feasible([dict(x) for x in rows + list(orows)], stats)
                if res != "empty":
                    return f"option {j} after decisions {list(prefix)} is not explored, and its cone is not empty"
                proved.add(key)
    return None


def _sample(fn, w, h, t, V, samples: int, seed: int, coords=None) -> str | None:
    """Exact gradients at random rational points near w must not contradict the separation of ``t`` from the
    vectors ``V`` along ``h``; ``coords``: the coordinates ``t``, ``V`` and ``h`` live on (default: all of w's)."""
    rng = random.Random(seed)
    base = [F(x) for x in w.double().reshape(-1).tolist()]
    m = margin(list(h), t, V)
    top = bounds(sum((a * b for a, b in zip(h, t)), F(0)))[0] - m / 2
    for _ in range(samples):
        d = {i: F(rng.randint(-1000, 1000), 1000) for i in range(len(base))}
        for k in _SCALES:
            p = [b + F(1, 2**k) * d[i] for i, b in enumerate(base)]
            r = Evaluation(fn, w, values=p).forward()
            if _genuine_sites(r.sites):
                continue  # not a generic point: try closer
            g = r.gradient if coords is None else tuple(r.gradient[i] for i in coords)
            if r.lin and not any(isinstance(x, Ival) for x in g):
                if not any(all(_same(a, b) for a, b in zip(g, v)) for v in V):
                    return f"a gradient sampled at w + 2^-{k} d is none of the listed vectors: the enumeration is " \
                           "incomplete"
            elif bounds(sum((a * b for a, b in zip(h, g)), F(0)))[1] > top:
                return "a gradient sampled near w comes within half the margin of the tested vector along h"
            break
    return None


# ----------------------------------------------------------------------------------------------------
# writing AD's own piece
# ----------------------------------------------------------------------------------------------------
def adjacent_piece(ev: Evaluation, exact_ad: tuple) -> AdjacentPiece | None:
    """Write an "adjacent_piece" certificate when AD's own local choices form a piece adjacent to w.

    The piece's gradient is computed by the same forward-mode arithmetic as the forward-mode AD
    (``ev.forward()``), so the two must agree *identically* (same Fractions, same interval endpoints); the
    tested exact AD (reverse mode) must agree with them (exactly, or with overlapping intervals).  Anything
    else declines the certificate (None)."""
    got = follow_ad(ev)
    if got is None:
        return None
    grad, decisions, rows, witness = got

    def same(a, b):
        if isinstance(a, Ival) and isinstance(b, Ival):
            return (a.lo, a.hi) == (b.lo, b.hi)
        return not isinstance(a, Ival) and not isinstance(b, Ival) and a == b

    if not all(same(a, b) for a, b in zip(grad, ev.forward().gradient)):
        return None
    for a, b in zip(grad, exact_ad):  # same arithmetic: equal when exact, overlapping intervals otherwise
        if not overlap(a, b) or (not isinstance(a, Ival) and not isinstance(b, Ival) and a != b):
            return None
    return AdjacentPiece(tuple(decisions), tuple(rows), witness, tuple(grad))


# ------------------------------------------------------------------------------------------------------------
# Separable blocks (nsverify.oracle.separable): the Bouligand set is a product over coordinate-disjoint blocks
# ------------------------------------------------------------------------------------------------------------
#: what a malformed certificate raises while it is read or checked (the checks answer False instead)
_MALFORMED = (KeyError, TypeError, ValueError, ZeroDivisionError, AttributeError)


@dataclass(frozen=True)
class BlockProduct:
    """member / not_member when f(w + d) = sum_b f_b(d on S_b) near w (disjoint coordinate blocks S_b).

    The Clarke set is then the product of the blocks' Clarke sets, with the gradient fixed (``fixed``) on the
    coordinates of no block.  member: for every block, convex weights over that block's gradients reproduce
    ``tested`` on the block's coordinates, and ``tested`` equals ``fixed`` off the blocks; not_member: a
    direction ``h`` on one block separates ``tested`` there from that block's gradients (so from the product),
    or ``tested`` differs from ``fixed`` at one coordinate.  The JSON-only check trusts the blocks' vertex sets,
    as every JSON-only check trusts the vertices it is given (the witnesses say where each vertex's piece
    lies)."""

    kind: ClassVar[str] = "block_product"
    status: str  # "member" | "not_member"
    blocks: tuple  # ((coords, vertices, weights | None, witnesses), ...)
    fixed: dict  # {coordinate: Fraction}
    separating: tuple | None = None  # not_member: ("block", i, h) or ("fixed", k)

    def to_json(self) -> dict:
        blocks = []
        for coords, verts, weights, wits in self.blocks:
            b = {"coords": list(coords), "vertices": [enc(tuple(v)) for v in verts],
                 "witnesses": [enc(d) if d else {} for d in wits]}
            if weights is not None:
                b["weights"] = {str(i): enc(x) for i, x in weights.items()}
            blocks.append(b)
        out = {"kind": self.kind, "status": self.status, "blocks": blocks, "fixed": enc(self.fixed)}
        if self.separating is not None:
            out["separating"] = ({"block": self.separating[1], "h": enc(tuple(self.separating[2]))}
                                 if self.separating[0] == "block" else {"fixed": self.separating[1]})
        return out

    @classmethod
    def from_json(cls, d: dict) -> BlockProduct:
        """The certificate; a malformed one becomes a certificate of status "malformed", which never checks."""
        try:
            return cls._from_json(d)
        except (*_MALFORMED, IndexError, Malformed):
            return cls("malformed", (), {})

    @classmethod
    def _from_json(cls, d: dict) -> BlockProduct:
        blocks = tuple(
            (tuple(int(k) for k in b["coords"]), tuple(_vector(v) for v in b["vertices"]),
             None if "weights" not in b else {_index(i, 1 << 62): _num(x) for i, x in b["weights"].items()},
             tuple(_sparse(w) for w in b.get("witnesses", ())))
            for b in d["blocks"])
        sep = d.get("separating")
        if sep is not None:
            sep = ("block", int(sep["block"]), _vector(sep["h"])) if "block" in sep else (
                "fixed", int(sep["fixed"]))
        return cls(d["status"], blocks, _sparse(d.get("fixed", {})), sep)

    def check(self, record: dict) -> str | None:
        try:
            ok = self.status in ("member", "not_member") and self._check(record)
        except (*_MALFORMED, IndexError, Malformed):
            ok = False
        return None if ok else "the block product does not prove the status from its blocks (weights, fixed " \
                               "coordinates or separating direction)"

    def used(self) -> dict:
        return {}  # the vertices are the blocks' own, replayed by _replay_blocks

    def _check(self, record: dict) -> bool:
        t = _tested(record)
        owned = [k for coords, *_ in self.blocks for k in coords] + list(self.fixed)
        if sorted(owned) != list(range(len(t))):  # the blocks and the fixed part partition the coordinates
            return False
        if not all(isinstance(x, Fraction) for x in t):
            return False
        if self.status == "member":
            if any(t[k] != v for k, v in self.fixed.items()):
                return False
            return all(w is not None and check_weights(tuple(t[k] for k in coords), list(verts), w)
                       for coords, verts, w, _ in self.blocks)
        if self.separating is None:
            return False
        if self.separating[0] == "fixed":
            k = self.separating[1]
            return k in self.fixed and t[k] != self.fixed[k]
        coords, verts, _, _ = self.blocks[self.separating[1]]
        h = list(self.separating[2])
        return len(h) == len(coords) and margin(h, tuple(t[k] for k in coords), list(verts)) is not None

    def describe(self) -> str:
        sizes = "x".join(str(len(v)) for _, v, _, _ in self.blocks)
        how = "per-block convex weights" if self.status == "member" else (
            f"a separating direction on block {self.separating[1]}" if self.separating
            and self.separating[0] == "block" else "a fixed coordinate that differs")
        return f"block_product: {len(self.blocks)} coordinate-disjoint blocks ({sizes} gradients), {how}"


def _replay_blocks(fn, w, c: BlockProduct, t, samples: int, seed: int) -> str | None:
    """With the program: every block vertex a member certificate weighs (every vertex of the separating block
    for not_member) re-derived from its witness on the block's coordinates, the fixed coordinates equal to the
    replayed gradient's, and for not_member exact gradients sampled near w not contradicting the separation."""
    fixed = c.fixed
    todo = []
    for i, (_coords, verts, weights, _wits) in enumerate(c.blocks):
        if c.status == "member":
            todo += [(i, j) for j, lam in (weights or {}).items() if lam != 0]
        elif c.separating and c.separating[0] == "block" and c.separating[1] == i:
            todo += [(i, j) for j in range(len(verts))]
    if not todo:  # not_member through a fixed coordinate: replay one piece (any choice in every block)
        d: dict = {}
        for i2, (coords2, _, _, wits2) in enumerate(c.blocks):
            wit = next((x for x in wits2 if x), None)
            if wit is None or any(k not in coords2 for k in wit):
                return f"block {i2} has no witness inside its coordinates"
            d.update(wit)
        r, dec = _follow_direction(fn, w, d)
        if r is None:
            return f"the piece the blocks' witnesses select: {dec}"
        if any(r.gradient[k] != v for k, v in fixed.items()):
            return "the replayed gradient off the blocks is not the certificate's fixed part"
    for i, j in todo:
        coords, verts, _, wits = c.blocks[i]
        if j >= len(verts) or j >= len(wits) or not wits[j]:
            return f"vertex {j} of block {i} has no witness: it cannot be re-derived from the program"
        if any(k not in coords for k in wits[j]):
            return f"the witness of vertex {j} of block {i} leaves the block's coordinates"
        d = dict(wits[j])
        for i2, (coords2, _, _, wits2) in enumerate(c.blocks):  # any piece of every other block (disjoint)
            if i2 != i:
                if not any(wits2) or any(k not in coords2 for k in next(x for x in wits2 if x)):
                    return f"block {i2} has no witness inside its coordinates"
                d.update(next(x for x in wits2 if x))
        r, dec = _follow_direction(fn, w, d)
        if r is None:
            return f"block {i}, vertex {j}: {dec}"
        g = r.gradient
        if tuple(g[k] for k in coords) != tuple(verts[j]):
            return f"block {i}, vertex {j}: the piece the witness selects has another gradient"
        if any(g[k] != v for k, v in fixed.items()):
            return f"block {i}, vertex {j}: the gradient off the blocks is not the certificate's fixed part"
    if c.status != "not_member" or not c.separating:
        return None
    if c.separating[0] == "fixed":  # nearby gradients keep the fixed coordinate's value
        k = c.separating[1]
        if k not in fixed or t[k] == fixed[k]:
            return "the fixed coordinate does not separate"
        return _sample(fn, w, [1 if t[k] > fixed[k] else -1], (t[k],), [(fixed[k],)], samples, seed, coords=(k,))
    coords, verts, _, _ = c.blocks[c.separating[1]]
    h, tb = list(c.separating[2]), tuple(t[k] for k in coords)
    if margin(h, tb, list(verts)) is None:
        return "the separating direction does not separate"
    return _sample(fn, w, h, tb, list(verts), samples, seed, coords=coords)


# ------------------------------------------------------------------------------------------------------------
# Layered network certificates (nsverify.oracle.park.exact): Park, Chun and Lee's sufficient conditions, exactly
# ------------------------------------------------------------------------------------------------------------
def park_proxies() -> dict:
    """``{activation: sides}``: every activation of the registry that Park's layer theorems cover (the
    ``park_layer`` capability: fixed, piecewise linear, PyTorch's derivative a one-sided one at every kink -- the
    Bouligand proxies of Theorem 8) and Park's side at each of its kinks (:meth:`nsverify.registry.Elementwise.
    kink_side`): ``"left"`` for relu and leaky_relu, ``"left,right"`` for relu6 and hardtanh (one side per
    breakpoint, in order). abs (``mix=1/2``) is none. A certificate checks that the registry still gives these."""
    from nsverify import registry

    return {e.name: ",".join(str(e.kink_side(i)) for i in range(len(e.breakpoints)))
            for e in registry.select("elementwise", park_layer=True)}


def _park_premises(record: dict, layers, proxies: dict) -> bool:
    """What both Park certificates need besides their layer data: the tested vector is the exact AD (the
    theorems are about AD's output), there is layer data, and every activation's AD proxy is one-sided."""
    known = park_proxies()
    return (record.get("tested_is") == "exact_ad" and bool(layers)
            and all(known.get(a) == side for a, side in proxies.items()))


@dataclass(frozen=True)
class ParkTheorem8:
    """member: Park et al.'s Theorem 8 -- AD is a Bouligand subgradient when every layer's cone P_l (Algorithm 1)
    is non-empty.  Per layer: the rows of P_l (sparse, in the flattened parameters) and an exact direction
    strictly inside every row.  The check re-verifies each witness exactly, that the activations' AD proxies are
    one-sided derivatives, and that the tested vector is the exact AD; it trusts the rows (as every JSON-only
    check trusts the data it is given)."""

    kind: ClassVar[str] = "park_theorem8"
    status: ClassVar[str] = "member"
    layers: tuple  # ((name, rows, witness, kinks, tied_windows), ...)
    proxies: dict  # {activation: "left" | "right"}

    def to_json(self) -> dict:
        return {"kind": self.kind, "proxies": dict(self.proxies),
                "layers": [{"layer": n, "rows": [enc(r) for r in rows], "witness": enc(wit), "kinks": k,
                            "tied_windows": t} for n, rows, wit, k, t in self.layers]}

    @classmethod
    def from_json(cls, d: dict) -> ParkTheorem8:
        try:
            return cls(tuple((L["layer"], tuple(_sparse(r) for r in L["rows"]), _sparse(L["witness"]),
                              int(L["kinks"]), int(L["tied_windows"])) for L in d["layers"]),
                       dict(d["proxies"]))
        except (*_MALFORMED, Malformed):
            return cls((), {"malformed": "malformed"})

    def check(self, record: dict) -> str | None:
        ok = _park_premises(record, self.layers, self.proxies) and all(
            holds(list(rows), wit) if rows else True for _n, rows, wit, _k, _t in self.layers)
        return None if ok else "Theorem 8's premises or a layer's cone witness do not hold"

    def used(self) -> dict:
        return {}

    def describe(self) -> str:
        rows = sum(len(r) for _n, r, _w, _k, _t in self.layers)
        kinks = sum(k for *_, k, _t in self.layers)
        ties = sum(t for *_, t in self.layers)
        return (f"park_theorem8: Park et al.'s Algorithm 1 cones are non-empty at all {len(self.layers)} layers "
                f"({kinks} kink touches, {ties} tied windows, {rows} cone rows, exact witnesses)")


@dataclass(frozen=True)
class ParkTheorem5:
    """member: Park et al.'s Theorem 5 -- in a fully connected network, AD is a Bouligand subgradient when, at
    every layer with a kink touch, the columns of z_{l-1} (one per sample) are linearly independent.  Per such
    layer: B column indices and the B x B minor of z_{l-1}; the check proves the minor nonsingular exactly
    (modulo a prime, after scaling to integers) and that the tested vector is the exact AD; it trusts that the
    minor is z_{l-1}'s."""

    kind: ClassVar[str] = "park_theorem5"
    status: ClassVar[str] = "member"
    layers: tuple  # ((name, kinks, columns, minor), ...)
    proxies: dict

    def to_json(self) -> dict:
        return {"kind": self.kind, "proxies": dict(self.proxies),
                "layers": [{"layer": n, "kinks": k, "columns": cols, "minor": None if m is None else enc(m)}
                           for n, k, cols, m in self.layers]}

    @classmethod
    def from_json(cls, d: dict) -> ParkTheorem5:
        try:
            return cls(tuple((L["layer"], int(L["kinks"]), L.get("columns"),
                              None if L.get("minor") is None else [list(_vector(r)) for r in L["minor"]])
                             for L in d["layers"]), dict(d["proxies"]))
        except (*_MALFORMED, Malformed):
            return cls((), {"malformed": "malformed"})

    def check(self, record: dict) -> str | None:
        from nsverify.oracle.park.rank import nonsingular

        if not _park_premises(record, self.layers, self.proxies):
            return "Theorem 5's premises do not hold (tested is not the exact AD, or a proxy is not one-sided)"
        sizes = {len(m) for _n, k, _c, m in self.layers if k and m is not None}
        if len(sizes) > 1:
            return "the minors differ in size (one batch: every minor is B x B)"
        ok = all(k == 0 or (m is not None and len(m) > 0 and nonsingular(m)) for _n, k, _c, m in self.layers)
        return None if ok else "a layer's minor is singular or missing"

    def used(self) -> dict:
        return {}

    def describe(self) -> str:
        touched = [n for n, k, _c, _m in self.layers if k]
        return (f"park_theorem5: at the {len(touched)} layer(s) with kink touches the samples' activations are "
                "linearly independent (exact nonsingular minors)")


#: every certificate kind, by its JSON ``kind`` (the one table :func:`from_json` reads)
# ----------------------------------------------------------------------------------------------------
# singular points: a norm at its zero, a NaN/inf gradient of a locally Lipschitz function (nsverify.oracle.nonfinite)
# ----------------------------------------------------------------------------------------------------
def _ellipsoid(t, center, scale, squares) -> bool:
    """t in center + |scale| {M^(1/2) u : |u| <= 1}, M = sum_i c_i g_i g_i^T: y = (t - center)/|scale| lies in
    range(M) and y^T M^+ y <= 1 (exact rational linear algebra)."""
    from nsverify.rational import solve_any

    n = len(t)
    m = [[F(0)] * n for _ in range(n)]
    for c, g in squares:
        for i, a in g.items():
            for j, b in g.items():
                m[i][j] += c * a * b
    y = [(a - b) / abs(scale) for a, b in zip(t, center)]
    x = solve_any(m, y)
    return x is not None and sum(a * b for a, b in zip(y, x)) <= 1


def _squares(x, n: int | None = None) -> tuple:
    if not isinstance(x, list):
        raise Malformed("squares must be a list of [c, {coordinate: g}]")
    out = []
    for item in x:
        if not isinstance(item, list) or len(item) != 2:
            raise Malformed("a square is [c, {coordinate: g}]")
        c = _num(item[0])
        if c < 0:
            raise Malformed("a square's weight must be >= 0")
        out.append((c, _sparse(item[1], n)))
    return tuple(out)


def _form_matches(form, center, scale, squares, n) -> str | None:
    """Why a replayed norm form is not the certificate's (None when it is)."""
    from nsverify.oracle.ops.singular import NormForm

    if not isinstance(form, NormForm) or len(form.terms) > 1:
        return "replaying the program does not give a single norm at its zero"
    if tuple(form.sg.get(i, F(0)) for i in range(n)) != tuple(center):
        return "the replayed smooth part is not the certificate's center"
    s, sq = form.terms[0] if form.terms else (F(1), None)
    comps = sq.comps if sq is not None else ()
    if s != scale or tuple((c, dict(g)) for c, g in comps) != tuple((c, dict(g)) for c, g in squares):
        return "the replayed norm is not the certificate's (scale or squares differ)"
    return None


@dataclass(frozen=True)
class ParkTheorem8Enclosed:
    """member: Park et al.'s Theorem 8 decided from rigorous float enclosures of the whole program
    (:mod:`nsverify.oracle.park.enclosed`), for models too large for an exact trace.  Per layer with kink
    touches (a ReLU call): the touched channels and the direction in the layer's own additive parameters (one
    coordinate per touched channel, -1: every touched pre-activation moves to ReLU's left side).  The statement is
    about the exact AD as PyTorch's rule, which is not materialized: the record's ``tested`` is empty and it lists
    no ``exact_ad``.  The JSON-only check verifies the premises and each direction's form and trusts the layer data;
    with ``fn`` the decision is replayed at the record's point and must give the same layers."""

    kind: ClassVar[str] = "park_theorem8_enclosed"
    status: ClassVar[str] = "member"
    layers: tuple  # ((call, kinks, channels, direction {coordinate: +-1}), ...)
    proxies: dict

    def to_json(self) -> dict:
        return {"kind": self.kind, "proxies": dict(self.proxies),
                "layers": [{"call": c, "kinks": k, "channels": list(ch), "direction": {str(i): v for i, v in d.items()}}
                           for c, k, ch, d in self.layers]}

    @classmethod
    def from_json(cls, d: dict) -> ParkTheorem8Enclosed:
        try:
            layers = []
            for L in d["layers"]:
                direction = {int(i): int(v) for i, v in dict(L["direction"]).items()}
                if any(isinstance(v, bool) for v in L["direction"].values()):
                    raise Malformed("a direction entry is not a number")
                layers.append((int(L["call"]), int(L["kinks"]), tuple(int(c) for c in L["channels"]), direction))
            return cls(tuple(layers), dict(d["proxies"]))
        except (*_MALFORMED, Malformed):
            return cls((), {"malformed": "malformed"})

    def check(self, record: dict) -> str | None:
        if record.get("tested_is") != "exact_ad" or record.get("exact_ad") is not None or record.get("tested") != []:
            return ("an enclosed Theorem 8 record is about the exact AD as PyTorch's rule: tested_is 'exact_ad', "
                    "an empty tested vector and no exact_ad")
        known = park_proxies()
        if "malformed" in self.proxies or not all(known.get(a) == side for a, side in self.proxies.items()):
            return "an activation's AD proxy is not the one-sided derivative Theorem 8 needs"
        for call, kinks, chans, direction in self.layers:
            if kinks < 1 or not direction or len(direction) != len(chans) or len(set(chans)) != len(chans):
                return f"layer (call {call}): a touched layer needs kinks and one direction entry per touched channel"
            if any(v not in (-1, 1) for v in direction.values()) or any(i < 0 for i in direction):
                return f"layer (call {call}): the direction's entries must be +-1 at coordinates of w"
        return None

    def replay(self, fn, w) -> str | None:
        from nsverify.oracle.park import enclosed

        got = enclosed.decide(fn, w)
        if isinstance(got, str):
            return f"replaying the enclosed decision at the point declines: {got}"
        mine = [(c, k, tuple(ch), dict(d)) for c, k, ch, d in self.layers]
        theirs = [(L.call, L.kinks, tuple(L.channels), dict(L.direction)) for L in got.layers]
        return None if mine == theirs else "replaying the enclosed decision gives other layers or directions"

    def used(self) -> dict:
        return {}

    def describe(self) -> str:
        kinks = sum(k for _c, k, _ch, _d in self.layers)
        return (f"park_theorem8_enclosed: Park et al.'s Theorem 8 from rigorous float enclosures ({len(self.layers)} "
                f"touched layers, {kinks} kink touches, every other ReLU sign and max-pool choice decided)")


@dataclass(frozen=True)
class Lemma2PairCertificate:
    """not_member: Park, Chun and Lee's Lemma 2 found in the program: an identity pair relu(y) - relu(-y) at y = 0,
    with y = slope * w[j] + c, and coordinate j reaching no other kink or tie.  relu(y) - relu(-y) = y, so the
    partial derivative in w_j is continuous near the point: the Clarke set's projection on coordinate j is the one
    number D_j, while the exact AD's entry j is D_j - delta (AD takes 0 for the pair where the truth takes 1);
    ``delta`` is a rigorous enclosure away from 0.  The JSON-only check verifies the form and that the enclosure
    excludes 0, trusting the data; with ``fn`` the decision is replayed at the record's point."""

    kind: ClassVar[str] = "lemma2_pair"
    status: ClassVar[str] = "not_member"
    coordinate: int
    calls: tuple
    delta: tuple  # (lo, hi)

    def to_json(self) -> dict:
        return {"kind": self.kind, "coordinate": self.coordinate, "calls": list(self.calls),
                "delta": [repr(float(self.delta[0])), repr(float(self.delta[1]))]}

    @classmethod
    def from_json(cls, d: dict) -> Lemma2PairCertificate:
        try:
            lo, hi = (float(x) for x in d["delta"])
            if isinstance(d["coordinate"], bool):
                raise Malformed("coordinate")
            return cls(int(d["coordinate"]), tuple(int(c) for c in d["calls"]), (lo, hi))
        except (*_MALFORMED, Malformed):
            return cls(-1, (), (0.0, 0.0))

    def check(self, record: dict) -> str | None:
        if record.get("tested_is") != "exact_ad" or record.get("exact_ad") is not None or record.get("tested") != []:
            return ("a Lemma 2 record is about the exact AD as PyTorch's rule: tested_is 'exact_ad', an empty tested "
                    "vector and no exact_ad")
        lo, hi = self.delta
        if self.coordinate < 0 or len(self.calls) != 2 or len(set(self.calls)) != 2:
            return "a Lemma 2 certificate needs a coordinate of w and the pair's two ReLU calls"
        if not (math.isfinite(lo) and math.isfinite(hi) and lo <= hi and (lo > 0 or hi < 0)):
            return "the enclosure of AD's difference from the Clarke set's projection must exclude 0"
        return None

    def replay(self, fn, w) -> str | None:
        from nsverify.oracle.park import enclosed

        got = enclosed.decide(fn, w)
        if not isinstance(got, enclosed.Lemma2Pair):
            why = got if isinstance(got, str) else "it decides member"
            return f"replaying the enclosed decision does not find the Lemma 2 pair: {why}"
        if got.coordinate != self.coordinate or tuple(got.calls) != tuple(self.calls):
            return "replaying the enclosed decision gives another coordinate or pair"
        lo, hi = got.delta
        return None if lo <= self.delta[1] and self.delta[0] <= hi else "replaying gives a disjoint enclosure"

    def used(self) -> dict:
        return {}

    def describe(self) -> str:
        return (f"lemma2_pair: relu(y) - relu(-y) = y at y = 0 (ReLU calls {self.calls[0]}, {self.calls[1]}); on "
                f"coordinate {self.coordinate} the exact AD is off the Clarke set's one value by "
                f"[{self.delta[0]:.6g}, {self.delta[1]:.6g}]")


@dataclass(frozen=True)
class NormBall:
    """member / not_member: the Clarke set of a function that is, near w, a smooth part plus one multiple of a
    seminorm (a norm at its zero, no kink): ``center + |scale| {M^(1/2) u : |u| <= 1}``, M = sum_i c_i g_i g_i^T."""

    kind: ClassVar[str] = "norm_ball"
    status: str
    center: tuple
    scale: Fraction
    squares: tuple
    leaves: ClassVar[None] = None

    @classmethod
    def from_json(cls, d: dict) -> NormBall:
        member = d.get("member")
        if not isinstance(member, bool):
            raise Malformed("norm_ball needs member: true or false")
        scale = _num(d.get("scale"))
        if scale == 0:
            raise Malformed("norm_ball needs a non-zero scale")
        return cls("member" if member else "not_member", _vector(d.get("center")), scale, _squares(d.get("squares")))

    def check(self, record: dict) -> str | None:
        t = _tested(record)
        if len(t) != len(self.center) or any(isinstance(x, Ival) for x in t):
            return "the tested vector must be exact and as long as the center"
        if _ellipsoid(t, self.center, self.scale, self.squares) != (self.status == "member"):
            return f"the tested vector's M-norm does not prove {self.status}"
        return None

    def used(self) -> dict:
        return {}

    def describe(self) -> str:
        return (f"norm_ball: the tested vector {'is' if self.status == 'member' else 'is not'} in the Clarke set "
                f"center + {self.scale} M^(1/2) B ({len(self.squares)} squares), decided by y^T M^+ y <= 1 exactly")

    def replay(self, fn, w) -> str | None:
        fw = Evaluation(fn, w).forward()
        if fw.sites:
            return "replaying the program meets kinks: not a single norm at its zero"
        return _form_matches(fw.form, self.center, self.scale, self.squares, len(self.center))


@dataclass(frozen=True)
class NonFiniteGradient:
    """not_member: the tested vector has NaN/inf entries (``entries``), and the function is locally Lipschitz at w
    (its Clarke set, bounded, is ``clarke``): re-derived with the program by replaying its exact trace (one smooth
    piece or one norm at its zero, no singular op on the way)."""

    kind: ClassVar[str] = "nonfinite_diagnosis"
    status: ClassVar[str] = "not_member"
    entries: tuple
    leaves: ClassVar[None] = None

    @classmethod
    def from_json(cls, d: dict) -> NonFiniteGradient:
        e = d.get("nonfinite_entries")
        if not isinstance(e, list) or not e:
            raise Malformed("nonfinite_diagnosis needs a non-empty list of nonfinite_entries")
        return cls(tuple(_index(i, 1 << 62) for i in e))

    def check(self, record: dict) -> str | None:
        if record.get("tested_is") not in ("ad", "float_ad"):
            return "a non-finite tested vector is PyTorch's float gradient (float_ad) or the caller's (ad)"
        if record.get("tested_is") == "float_ad" and _float_ad_named(record):
            return _float_ad_named(record)
        t = record.get("tested")
        if not isinstance(t, list) or any(i >= len(t) for i in self.entries):
            return "the record's tested vector does not have the listed entries"
        for i in self.entries:
            x = t[i]
            if not (isinstance(x, float) and not math.isfinite(x)) and x not in ("nan", "inf", "-inf"):
                return f"tested entry {i} is finite ({x!r}): the certificate names a non-finite one"
        return None

    def used(self) -> dict:
        return {}

    def describe(self) -> str:
        return (f"nonfinite_diagnosis: entries {list(self.entries)[:8]} of the tested vector are NaN/inf, and no "
                "Clarke set of a locally Lipschitz function holds them")

    def replay(self, fn, w) -> str | None:
        from nsverify.oracle.ops.singular import NormForm

        fw = Evaluation(fn, w).forward()  # raises where the program is not Lipschitz at w (a singular op)
        if fw.sites:
            return "replaying the program meets kinks: local Lipschitzness is re-derived for one smooth piece only"
        if fw.form is not None and not isinstance(fw.form, NormForm):
            return "replaying the program gives a value that is not a norm at its zero"
        return None


KINDS = {c.kind: c for c in (ConvexWeights, IntervalBracket, AdjacentPiece, SeparatingDirection, BlockProduct,
                             ParkTheorem8, ParkTheorem5, NormBall, NonFiniteGradient, ParkTheorem8Enclosed,
                             Lemma2PairCertificate)}
Certificate = ConvexWeights | IntervalBracket | AdjacentPiece | SeparatingDirection | BlockProduct | ParkTheorem8 \
    | ParkTheorem5 | NormBall | NonFiniteGradient | ParkTheorem8Enclosed | Lemma2PairCertificate
