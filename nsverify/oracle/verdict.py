"""The oracle's answer: :class:`Verdict`, with ``explain()`` (the one readable account of a verdict, also used
by the pytest plugin's failure reports) and ``to_json()`` (the form that :mod:`nsverify.oracle.certificates`
checks)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from fractions import Fraction

from nsverify.oracle.certificates import describe
from nsverify.oracle.jsonio import enc
from nsverify.oracle.numbers import Ival, decimal_str


@dataclass
class Verdict:
    status: str  # "member" | "not_member" | "unknown"
    exact: bool
    bouligand: list  # exact vectors (inner set when not exact)
    certificate: dict | None
    distance: float
    kinks: list  # Site records (AD trace)
    exact_ad: tuple | None
    ad: tuple | None
    tested: tuple
    tested_is: str  # "exact_ad" | "ad" (user-given) | "float_ad" (PyTorch's float AD as returned, NaN/inf kept)
    outer: list = field(default_factory=list)  # outer bracket (== bouligand when exact)
    reason: str = ""
    value: object = None
    stats: dict = field(default_factory=dict)
    ad_distance: float | None = None
    distance_bounds: tuple | None = None
    point: tuple | None = None  # w's exact values (flattened), for re-checking with the program
    shape: tuple | None = None
    dtype: str | None = None
    #: why the returned gradient holds NaN/inf, when it does (nsverify.oracle.diagnosis.NonFiniteDiagnosis)
    diagnosis: object = None

    @property
    def clarke(self):
        """1-D: the Clarke interval (lo, hi) of the exact bouligand set; None otherwise."""
        if not self.bouligand or len(self.bouligand[0]) != 1:
            return None
        vals = [v[0] for v in self.bouligand]
        key = lambda x: float(x)
        return (min(vals, key=key), max(vals, key=key))

    def explain(self, full: bool = False) -> str:
        """The verdict in plain words: one sentence with the answer first, then what was checked (the question
        answered, PyTorch's float gradient against the exact AD, the kinks and ties, the method and its
        certificate, notes).  At most :data:`EXPLAIN_LINES` lines of at most :data:`EXPLAIN_WIDTH` characters
        (the first entries of each vector); ``full=True`` prints every vector in full."""
        lines = explain_lines(self, full)
        if full:
            return "\n".join(lines)
        cut = [ln if len(ln) <= EXPLAIN_WIDTH else ln[: EXPLAIN_WIDTH - 30] + " ... (explain(full=True))"
               for ln in lines]
        return "\n".join(cut[:EXPLAIN_LINES])

    def to_dict(self) -> dict:
        return {
            "status": self.status,
            "exact": self.exact,
            "reason": self.reason,
            "tested": enc(self.tested),
            "tested_is": self.tested_is,
            "exact_ad": enc(self.exact_ad) if self.exact_ad is not None else None,
            "ad": list(self.ad) if self.ad is not None else None,
            "bouligand": enc(self.bouligand),
            "outer": enc(self.outer),
            "certificate": self.certificate,
            "distance": _jf(self.distance),
            "ad_distance": _jf(self.ad_distance),
            "distance_bounds": [_jf(x) for x in self.distance_bounds] if self.distance_bounds else None,
            "kinks": [k.to_json() for k in self.kinks],
            "value": enc(self.value),
            "stats": self.stats,
            **({"diagnosis": self.diagnosis.to_json()} if self.diagnosis is not None else {}),
            **({"point": enc(self.point), "shape": list(self.shape), "dtype": self.dtype}
               if self.point is not None else {}),
        }

    def to_json(self, **kw) -> str:
        """:meth:`to_dict` as JSON text; numpy scalars that reach a field (a stat, a site's extra) are written as
        the Python numbers they hold."""
        kw.setdefault("default", _plain)
        return json.dumps(self.to_dict(), **kw)

    def __repr__(self):
        return (
            f"Verdict(status={self.status!r}, exact={self.exact}, "
            f"tested={tuple(_s(x) for x in self.tested)}, "
            f"bouligand={len(self.bouligand)} vectors, certificate={(self.certificate or {}).get('kind')})"
        )


#: explain()'s bounds without full=True
EXPLAIN_LINES, EXPLAIN_WIDTH = 40, 240


def _vec(v, full: bool) -> str:
    if full or len(v) <= 8:
        return "(" + ", ".join(_s(x) for x in v) + ")"
    nonzero = sum(1 for x in v if not (isinstance(x, (Fraction, int, float)) and x == 0))
    return f"({', '.join(_s(x) for x in v[:6])}, ...: {len(v)} entries, {nonzero} nonzero)"


def _s(x):
    """A number for people: an exact Fraction as itself while short, else bounded decimals; a rigorous enclosure
    (an irrational entry) as its decimal digits, ``~`` marking that they are rounded; never raises (huge values
    included)."""
    if isinstance(x, Ival):
        lo, hi = x.lo, x.hi
        return _s(lo) if lo == hi else "~" + decimal_str((lo + hi) / 2, 10)
    if isinstance(x, Fraction):
        if x.numerator.bit_length() < 100 and x.denominator.bit_length() < 100:
            return str(x)
        return "~" + decimal_str(x)
    return repr(x)


def _plain(x):
    """json's fallback: a numpy scalar (np.bool_, np.int64, np.float64, ...) as its Python value."""
    import numpy as np

    if isinstance(x, np.generic):
        return x.item()
    raise TypeError(f"Object of type {type(x).__name__} is not JSON serializable")


def _jf(x):
    if x is None or x != x:
        return None
    return float(x)


# ------------------------------------------------------------------------------------------------ explain()
#: what a certificate kind rests on, in a user's words (the method line of explain())
_METHOD = {
    "convex_weights": "every piece of the function next to this point was enumerated; the tested vector is a convex "
                      "combination of their gradients",
    "interval_bracket": "the pieces next to this point were enumerated; the tested vector lies between two of their "
                        "gradients (rigorous interval bounds)",
    "adjacent_piece": "PyTorch's own choices at the kinks and ties select a piece of the function next to this "
                      "point, so its gradient is one of the function's gradients there",
    "separating_direction": "a direction separates the tested vector from every gradient of the pieces next to this "
                            "point",
    "block_product": "the program splits into independent groups of coordinates, each checked on its own",
    "park_theorem8": "Park et al.'s Theorem 8, layer by layer (no piece enumerated)",
    "park_theorem5": "Park et al.'s Theorem 5, layer by layer (no piece enumerated)",
}

#: internal reasons of an "unknown" verdict, in a user's words, with what to try
_UNDECIDED = (
    ("in the outer bracket but not certified in the inner",
     "the gradients certified so far do not contain the tested vector, and pieces that might exist here (curved "
     "kinks) could not be certified or ruled out",
     "check at a nearby point"),
    ("cannot be separated by their interval enclosures",
     "two gradients of the pieces next to this point are so close that their rigorous enclosures overlap "
     "(one gradient or two?)",
     "check in float64, or at a nearby point"),
    ("no exact certificate could be produced",
     "neither a convex combination nor a separating direction could be certified exactly",
     "check in float64, or report the program"),
)


def explain_lines(v: Verdict, full: bool = False) -> list:
    """The lines of :meth:`Verdict.explain`."""
    fmt = lambda vec: _vec(vec, full)  # noqa: E731
    kind = (v.certificate or {}).get("kind")
    who = _subject(v)
    recheck = f"certificate: {kind}, re-checkable with nsverify.verify_certificate"
    if v.status == "member":
        lines = [f"{who} is a Clarke subgradient of your function at this point ({recheck})."]
    elif v.status == "not_member":
        lines = [f"{who} is NOT a Clarke subgradient of your function at this point ({recheck}):",
                 f"  {_exclusion(v, fmt)}."]
    else:
        reason, fix = _undecided_words(v.reason)
        first, _, rest = reason.partition(". ")
        lines = [f"Undecided: {first.rstrip('.')}" + (f" (what to try: {fix})." if fix else ".")]
        lines += [f"  {part.rstrip('.')}." for part in rest.split(". ") if part.strip()]
    lines.append(f"question answered: {_question(v)}")
    label = {"exact_ad": "PyTorch's AD, exactly", "float_ad": "PyTorch's float gradient as returned"}.get(
        v.tested_is, "ad=")
    if v.tested_is == "exact_ad" and v.exact_ad is None and not v.tested:  # decided as a rule, not as a vector
        lines.append("tested: PyTorch's AD as a rule (its backward formulas in exact arithmetic), decided without "
                     f"materializing it; PyTorch's {_dtype_words(v)} gradient is v.ad")
    else:
        lines.append(f"tested vector ({label}): {fmt(v.tested)}")
    if v.tested_is != "exact_ad" and v.exact_ad is not None:
        lines.append(f"PyTorch's AD, evaluated exactly: {fmt(v.exact_ad)}")
    diff = _float_vs_exact(v)
    if diff:
        lines.append(diff)
    lines.extend(_kink_lines(v))
    lines.extend(_method_lines(v, kind, fmt))
    if v.certificate:
        lines.append(f"certificate: {describe(v.certificate)}")
        lines.append("  re-check it exactly from the JSON alone: nsverify.verify_certificate(v.to_json())")
    lines.extend(_diagnosis_lines(v))
    for note in v.stats.get("notes", ()):
        lines.append(f"note: {note}")
    lines.append(f"status: {v.status} (the Verdict's fields: v.status, v.tested, v.bouligand, v.certificate; all of "
                 "them in v.to_json())")
    return lines


def _diagnosis_lines(v: Verdict) -> list:
    """Why the returned gradient holds NaN/inf (``v.diagnosis``): the class, the op, the value the rule gives."""
    d = v.diagnosis
    if d is None:
        clarke = v.stats.get("clarke") if (v.certificate or {}).get("kind") == "norm_ball" else None
        if clarke is None:
            return []
        low = v.stats.get("expected")
        return [f"Clarke set (a norm at its zero, no kink): {clarke}"
                + (f"; its minimum-norm element, PyTorch's masked value: ({', '.join(low)})" if low else "")]
    head = {"lipschitz": "NaN/inf gradient of a locally Lipschitz function (a bug)",
            "not_lipschitz": "no Clarke set here (NaN/inf allowed)",
            "undefined": "the value itself is undefined here",
            "overflow": "PyTorch's float AD overflowed (the exact derivative is finite)"}[d.kind]
    lines = [f"NaN/inf diagnosis: {head}" + (f"; first non-finite value made by {d.op}" if d.op else "")]
    lines.append(f"  {d.message}")
    if d.kind == "overflow" and d.magnitude is not None:
        lines.append(f"  exact magnitude of the overflowed derivative: {_s(d.magnitude)}")
    if d.expected is not None:
        lines.append(f"  PyTorch's documented rule gives: ({', '.join(_s(x) for x in d.expected)})")
    return lines


def _subject(v: Verdict) -> str:
    """What was tested, as the subject of explain()'s first sentence."""
    if v.tested_is == "float_ad":
        return "PyTorch's gradient"
    if v.tested_is != "exact_ad":
        return "The vector you gave (ad=)"
    if str(v.stats.get("exact_ad_from", "")).startswith("forward (rules"):
        return "The AD with your rules (rules=)"
    return "PyTorch's gradient"


def _undecided_words(reason: str) -> tuple:
    for key, words, fix in _UNDECIDED:
        if key in reason:
            return words, fix
    return (reason.rstrip(".") or "no certificate either way"), ""


def _dtype_words(v: Verdict) -> str:
    return v.dtype or "float"


def _question(v: Verdict) -> str:
    dt = _dtype_words(v)
    at = f"at your {dt} point (its numbers taken as the exact rationals they represent)"
    subject = _subject(v)
    if subject == "The vector you gave (ad=)":
        return f"is the vector you gave in the Clarke subdifferential of the real function your program computes {at}?"
    if v.tested_is == "float_ad":
        return (f"is PyTorch's {dt} gradient as it returned it (NaN/inf entries kept) in the Clarke subdifferential "
                f"of the real function your program computes {at}?")
    what = ("is PyTorch's AD" if subject == "PyTorch's gradient" else
            "is the AD with your rules at kinks and ties")
    return (f"{what}, evaluated exactly {at}, in the Clarke subdifferential of the real function your program "
            "computes there?")


def _float_vs_exact(v: Verdict) -> str | None:
    """PyTorch's float gradient against the exact AD: equal, or the largest absolute difference (rigorous)."""
    if v.ad is None or v.exact_ad is None or len(v.ad) != len(v.exact_ad):
        return None
    dt = _dtype_words(v)
    bad = [i for i, a in enumerate(v.ad) if not math.isfinite(a)]
    if bad:
        return (f"PyTorch's {dt} gradient has {len(bad)} non-finite entr{'y' if len(bad) == 1 else 'ies'} (first: "
                f"entry {bad[0]} = {v.ad[bad[0]]}): it overflowed, while the exact AD is finite")
    worst, at, upper = Fraction(0), None, False
    for i, (a, e) in enumerate(zip(v.ad, v.exact_ad)):
        lo, hi = (e.lo, e.hi) if isinstance(e, Ival) else (e, e)
        d = max(abs(Fraction(a) - lo), abs(Fraction(a) - hi))
        if d > worst:
            worst, at, upper = d, i, lo != hi
    if at is None:
        return f"PyTorch's {dt} gradient equals the exact AD in every entry ({len(v.ad)})"
    return (f"PyTorch's {dt} gradient differs from the exact AD by {'at most ' if upper else ''}"
            f"{decimal_str(worst, 3)} (largest absolute difference over {len(v.ad)} entries, at entry {at})")


def _kink_lines(v: Verdict) -> list:
    if not v.kinks:
        return ["kinks and ties at this point: none (one smooth piece around it)"]
    by_op: dict = {}
    for k in v.kinks:
        by_op[k.op] = by_op.get(k.op, 0) + 1
    ops = ", ".join(f"{op} {c}" for op, c in sorted(by_op.items()))
    out = [f"kinks and ties at this point: {len(v.kinks)} ({ops})"]
    flips = sum(1 for k in v.kinks if k.float_tie is False)
    if flips:
        out.append(f"  {flips} exact tie(s) NOT seen by the {_dtype_words(v)} computation (rounding destroyed them)")
    fo = sum(1 for k in v.kinks if k.extra.get("float_only"))
    if fo:
        out.append(f"  {fo} tie(s) seen only by the {_dtype_words(v)} computation (rounding created them)")
    return out


def _method_lines(v: Verdict, kind, fmt) -> list:
    st = v.stats
    out = []
    if kind == "convex_weights" and not v.exact:
        out.append("how: the tested vector is a convex combination of the gradients of pieces certified next to "
                   "this point")
    elif kind in _METHOD:
        out.append(f"how: {_METHOD[kind]}")
    if st.get("shortcut") == "lemma2_pair":
        return out
    if st.get("shortcut") == "park_theorem8_enclosed":
        enc = st.get("enclosures") or {}
        pools = enc.get("pools") or []
        out.append(f"enclosures: {enc.get('dependent_ops', 0)} ops on w-dependent values, {enc.get('relu_calls', 0)} "
                   f"ReLU calls with every sign decided, {st.get('kink_touches', 0)} exact kink touch(es) in "
                   f"{len(st.get('layers') or [])} layer(s), {sum(p.get('tied', 0) for p in pools)} tied pooling "
                   f"window(s) ({sum(p.get('identical', 0) for p in pools)} between identical functions, "
                   f"{sum(p.get('zero_ad', 0) for p in pools)} at ReLU's kink)")
        return out
    if st.get("shortcut"):
        layers = st.get("layers") or []
        names = ", ".join(str(c.get("layer")) for c in layers[:8]) + (" ..." if len(layers) > 8 else "")
        kinks = sum(c.get("kinks", 0) for c in layers)
        ties = sum(c.get("tied_windows", 0) for c in layers)
        out.append(f"layers checked: {len(layers)} (modules {names}); {kinks} activation(s) exactly at a kink, "
                   f"{ties} tied pooling window(s)")
        return out
    if st.get("blocks"):
        sizes = st.get("block_sizes") or []
        out.append(f"independent groups: {st['blocks']} (sizes {', '.join(map(str, sizes[:8]))}"
                   f"{' ...' if len(sizes) > 8 else ''}), {st.get('pieces', 0)} pieces enumerated in all")
    nb = len(v.bouligand)
    if v.exact and nb:
        out.append(f"gradients of the pieces next to this point (the Clarke set is their convex hull): {nb}: "
                   + ", ".join(fmt(g) for g in v.bouligand[:6]) + (" ..." if nb > 6 else ""))
    elif nb and not st.get("shortcut"):
        more = len(v.outer) - nb
        out.append(f"gradients certified next to this point: {nb}: " + ", ".join(fmt(g) for g in v.bouligand[:6])
                   + (" ..." if nb > 6 else "")
                   + (f"; {more} more might exist (not certified, not ruled out)" if more > 0 else ""))
    if "pieces" in st and not st.get("blocks") and st.get("pieces"):
        out.append(f"work: {st['pieces']} piece(s) enumerated, {st.get('lps', 0)} linear program(s)")
    return out


def _exclusion(v: Verdict, fmt) -> str:
    """Why the tested vector is excluded, with the nearest element and one distance (exact or rigorously
    bounded)."""
    if (v.certificate or {}).get("kind") == "lemma2_pair":  # one coordinate decides: the reason says which
        return v.reason.rstrip(".")
    if v.exact:
        near = _nearest(v.tested, v.bouligand)
        if near is not None:
            p, lo, hi = near
            return (f"the exact Clarke set excludes it; the nearest element is {fmt(p)}, at distance "
                    f"{_dist_words(lo, hi)}")
        return "the exact Clarke set excludes it"
    lo = _separation(v.tested, v.outer, (v.certificate or {}).get("h"))
    what = "every gradient the function can have next to this point lies on the other side of a separating direction"
    return what + (f"; the distance to the Clarke set is at least {decimal_str(lo, 3)}" if lo else "")


def _dist_words(lo: float, hi: float) -> str:
    if f"{lo:.3g}" == f"{hi:.3g}":  # both rigorous bounds agree to the digits shown
        return f"{hi:.3g}"
    return f"between {lo:.3g} and {hi:.3g}"


def _plain_vectors(t, V) -> bool:
    return all(type(x) is Fraction or type(x) is int for x in t) and all(
        type(x) is Fraction or type(x) is int for g in V for x in g)


def _nearest(t, V):
    """(nearest element, lower, upper): the point of conv(V) nearest to t and its distance, exact (the one hull QP,
    :func:`nsverify.rational.nearest_point`, whose float answer is confirmed in rationals; the promised column of
    the conventions matrix is the same QP with t = 0), a square root at the end; None when the vectors are not exact
    rationals, too large to project here, or the QP's face was not confirmed."""
    if not V or not _plain_vectors(t, V) or len(V) * len(t) > 200_000:
        return None
    from nsverify.rational import nearest_point

    found = nearest_point(V, t)
    if found is None:
        return None
    p = tuple(found[0])
    d2 = sum((a - b) * (a - b) for a, b in zip(t, p))
    if d2 == 0:
        return None
    dist = math.sqrt(float(d2))
    return tuple(_round(x) for x in p), dist, dist


def _round(x: Fraction):
    """A short exact number near x for display (x itself when short)."""
    if x.denominator.bit_length() < 20:
        return x
    return Fraction(round(float(x) * 10**6), 10**6)


def _separation(t, V, h):
    """A rigorous lower bound on the distance of t to conv(V), from a separating direction h (None if none)."""
    if not V or not h or not _plain_vectors(t, V):
        return None
    try:
        hv = [Fraction(x) for x in h]
    except (TypeError, ValueError):
        return None
    gap = min(sum(hk * (tk - vk) for hk, tk, vk in zip(hv, t, g)) for g in V)
    norm = math.sqrt(float(sum(x * x for x in hv)))
    return float(gap) / norm if gap > 0 and norm > 0 else None
