"""Certificates: their JSON format (defined once, here), how the oracle writes them and how anyone checks them.

A certificate proves a verdict's status from the verdict's own JSON (:meth:`Verdict.to_dict`), in exact
arithmetic, without the program.  Numbers are encoded by :mod:`nsverify.oracle.jsonio` (Fractions as ``"p/q"``
strings, sparse vectors as ``{"index": "p/q"}``).

==========================  ==========  =====================================================================
``kind`` and fields          status      what :func:`verify_certificate` checks, exactly
==========================  ==========  =====================================================================
``convex_weights``           member      ``weights`` ({vertex index: weight}) are >= 0, sum to 1 and reproduce
``weights``, ``witnesses``               ``tested`` from ``bouligand``; ``witnesses`` holds, per vertex used, a
                                         direction d into that piece's open cone (not checked from the JSON)
``interval_bracket``         member      1-D: some vertex of ``bouligand`` lies below ``tested`` and some above
``below``, ``above``                     (interval endpoints bound rigorously)
``adjacent_piece``           member      the ``witness`` direction lies strictly inside every half-space in
``decisions``, ``rows``,                 ``rows``: AD's own local choices (``decisions``) form a piece adjacent
``witness``, ``gradient``                to w, whose gradient ``gradient`` is AD's output
``separating_direction``     not_member  <h, tested> > <h, v> for every v of ``bouligand`` (``over:
``h``, ``over``                          "bouligand"``) or of the outer bracket ``outer`` (``over: "outer"``)
==========================  ==========  =====================================================================

Unknown kinds check as False; so does a verdict without a certificate (an "unknown" verdict).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from fractions import Fraction
from typing import ClassVar

from nsverify.oracle.cones import holds
from nsverify.oracle.interp import Evaluation
from nsverify.oracle.jsonio import dec, dec_sparse, enc
from nsverify.oracle.membership import interval_member_1d, margin
from nsverify.oracle.numbers import Ival
from nsverify.oracle.pieces import follow_ad
from nsverify.rational import check_weights


@dataclass(frozen=True)
class ConvexWeights:
    """member: exact convex weights over the Bouligand vertices that reproduce the tested vector."""

    kind: ClassVar[str] = "convex_weights"
    status: ClassVar[str] = "member"
    weights: dict  # {vertex index: Fraction}
    witnesses: dict  # {vertex index: sparse direction {coordinate: number} into that piece; {} unconstrained}

    @classmethod
    def of(cls, weights: dict, vertices: list, leaves: list) -> ConvexWeights:
        """The weights, with the witness direction of the first certified piece that has each vertex used."""
        wit = {}
        for i in weights:
            leaf = next(lf for lf in leaves if tuple(lf.gradient) == tuple(vertices[i]))
            wit[i] = leaf.witness or {}
        return cls(dict(weights), wit)

    def to_json(self) -> dict:
        return {"kind": self.kind, "weights": {str(i): enc(x) for i, x in self.weights.items()},
                "witnesses": {str(i): enc(d) if d else {} for i, d in self.witnesses.items()}}

    @classmethod
    def from_json(cls, d: dict) -> ConvexWeights:
        return cls({int(k): Fraction(v) for k, v in d["weights"].items()},
                   {int(k): dec_sparse(v) for k, v in d.get("witnesses", {}).items()})

    def check(self, record: dict) -> bool:
        return check_weights(dec(record["tested"]), [dec(v) for v in record["bouligand"]], self.weights)

    def describe(self) -> str:
        return "convex_weights: " + ", ".join(f"{enc(x)} x vertex {i}" for i, x in self.weights.items())


@dataclass(frozen=True)
class IntervalBracket:
    """member (1-D): vertex ``below`` <= tested <= vertex ``above``, with rigorous interval bounds."""

    kind: ClassVar[str] = "interval_bracket"
    status: ClassVar[str] = "member"
    below: int
    above: int

    def to_json(self) -> dict:
        return {"kind": self.kind, "below": self.below, "above": self.above}

    @classmethod
    def from_json(cls, d: dict) -> IntervalBracket:
        return cls(d["below"], d["above"])

    def check(self, record: dict) -> bool:
        return interval_member_1d(dec(record["tested"]), [dec(v) for v in record["bouligand"]]) is not None

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
        return cls(tuple(d["decisions"]), tuple(dec_sparse(r) for r in d["rows"]), dec_sparse(d["witness"]),
                   dec(d["gradient"]))

    def check(self, record: dict) -> bool:
        return holds(list(self.rows), self.witness if self.rows else None)

    def describe(self) -> str:
        return f"adjacent_piece: AD's choices at {len(self.decisions)} branch sites, {len(self.rows)} cone rows"


@dataclass(frozen=True)
class SeparatingDirection:
    """not_member: a rational h with <h, tested> > max <h, v> over the vertices (``over`` names the set)."""

    kind: ClassVar[str] = "separating_direction"
    status: ClassVar[str] = "not_member"
    h: tuple
    over: str = "bouligand"  # "bouligand" (exact enumeration) or "outer" (the outer bracket)

    def to_json(self) -> dict:
        return {"kind": self.kind, "h": enc(self.h), "over": self.over}

    @classmethod
    def from_json(cls, d: dict) -> SeparatingDirection:
        return cls(tuple(Fraction(x) for x in d["h"]), "outer" if d.get("over") == "outer" else "bouligand")

    def check(self, record: dict) -> bool:
        V = [dec(v) for v in record["outer" if self.over == "outer" else "bouligand"]]
        return margin(list(self.h), dec(record["tested"]), V) is not None

    def describe(self) -> str:
        return f"separating_direction: h = ({', '.join(enc(x) for x in self.h)}) over {self.over}"


KINDS = {c.kind: c for c in (ConvexWeights, IntervalBracket, AdjacentPiece, SeparatingDirection)}
Certificate = ConvexWeights | IntervalBracket | AdjacentPiece | SeparatingDirection


def from_json(cert: dict) -> Certificate | None:
    """The certificate a JSON dict describes, or None for an unknown ``kind``."""
    cls = KINDS.get(cert["kind"])
    return None if cls is None else cls.from_json(cert)


def describe(cert: dict | None) -> str:
    """One line on a certificate in JSON form (its kind and what it rests on)."""
    if not cert:
        return "none"
    c = from_json(cert)
    return cert["kind"] if c is None else c.describe()


def verify_certificate(verdict) -> bool:
    """Re-check a verdict's certificate exactly from its JSON form (a dict, a JSON string or a Verdict).

    member: the weights are non-negative, sum to 1 and reproduce the tested vector from ``bouligand``, or the
    1-D bracket holds, or the adjacent piece's witness lies in its cone; not_member: <h, tested> > max <h, v>
    over ``bouligand`` (exact case) or ``outer`` (bracket case).  Returns False for "unknown" verdicts (nothing
    to check), for unknown kinds and for any failed check.
    """
    d = verdict.to_dict() if hasattr(verdict, "to_dict") else (
        json.loads(verdict) if isinstance(verdict, str) else verdict)
    cert = d.get("certificate")
    if not cert:
        return False
    c = from_json(cert)
    return c is not None and d["status"] == c.status and c.check(d)


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
        lo_a, hi_a = (a.lo, a.hi) if isinstance(a, Ival) else (a, a)
        lo_b, hi_b = (b.lo, b.hi) if isinstance(b, Ival) else (b, b)
        if hi_a < lo_b or hi_b < lo_a or (not isinstance(a, Ival) and not isinstance(b, Ival) and a != b):
            return None
    return AdjacentPiece(tuple(decisions), tuple(rows), witness, tuple(grad))


# ------------------------------------------------------------------------------------------------------------
# Separable blocks (nsverify.oracle.blocks): the Bouligand set is a product over coordinate-disjoint blocks
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
        except (*_MALFORMED, IndexError):
            return cls("malformed", (), {})

    @classmethod
    def _from_json(cls, d: dict) -> BlockProduct:
        blocks = tuple(
            (tuple(int(k) for k in b["coords"]), tuple(dec(v) for v in b["vertices"]),
             None if "weights" not in b else {int(i): Fraction(x) for i, x in b["weights"].items()},
             tuple(dec_sparse(w) for w in b.get("witnesses", ())))
            for b in d["blocks"])
        sep = d.get("separating")
        if sep is not None:
            sep = ("block", int(sep["block"]), tuple(Fraction(x) for x in sep["h"])) if "block" in sep else (
                "fixed", int(sep["fixed"]))
        return cls(d["status"], blocks, dec_sparse(d.get("fixed", {})), sep)

    def check(self, record: dict) -> bool:
        try:
            return self.status in ("member", "not_member") and self._check(record)
        except (*_MALFORMED, IndexError):
            return False

    def _check(self, record: dict) -> bool:
        t = dec(record["tested"])
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


KINDS[BlockProduct.kind] = BlockProduct


# ------------------------------------------------------------------------------------------------------------
# Layered network certificates (nsverify.oracle.layered): Park, Chun and Lee's sufficient conditions, exactly
# ------------------------------------------------------------------------------------------------------------
#: activations whose AD derivative at the kink is a one-sided derivative (the Bouligand proxies of Theorem 8)
PARK_PROXIES = {"relu": "left", "leaky_relu": "left"}


def _park_premises(record: dict, layers, proxies: dict) -> bool:
    """What both Park certificates need besides their layer data: the tested vector is the exact AD (the
    theorems are about AD's output), there is layer data, and every activation's AD proxy is one-sided."""
    return (record.get("tested_is") == "exact_ad" and bool(layers)
            and all(PARK_PROXIES.get(a) == side for a, side in proxies.items()))


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
            return cls(tuple((L["layer"], tuple(dec_sparse(r) for r in L["rows"]), dec_sparse(L["witness"]),
                              int(L["kinks"]), int(L["tied_windows"])) for L in d["layers"]),
                       dict(d["proxies"]))
        except _MALFORMED:
            return cls((), {"malformed": "malformed"})

    def check(self, record: dict) -> bool:
        return _park_premises(record, self.layers, self.proxies) and all(
            holds(list(rows), wit) if rows else True for _n, rows, wit, _k, _t in self.layers)

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
                              None if L.get("minor") is None else [[Fraction(x) for x in r] for r in L["minor"]])
                             for L in d["layers"]), dict(d["proxies"]))
        except _MALFORMED:
            return cls((), {"malformed": "malformed"})

    def check(self, record: dict) -> bool:
        from nsverify.oracle.layered import nonsingular

        if not _park_premises(record, self.layers, self.proxies):
            return False
        sizes = {len(m) for _n, k, _c, m in self.layers if k and m is not None}
        if len(sizes) > 1:
            return False  # one batch: every minor is B x B
        return all(k == 0 or (m is not None and len(m) > 0 and nonsingular(m)) for _n, k, _c, m in self.layers)

    def describe(self) -> str:
        touched = [n for n, k, _c, _m in self.layers if k]
        return (f"park_theorem5: at the {len(touched)} layer(s) with kink touches the samples' activations are "
                "linearly independent (exact nonsingular minors)")


KINDS[ParkTheorem8.kind] = ParkTheorem8
KINDS[ParkTheorem5.kind] = ParkTheorem5
