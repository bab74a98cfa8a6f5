"""The oracle's answer: :class:`Verdict`, with ``explain()`` (the one readable account of a verdict, also used
by the pytest plugin's failure reports) and ``to_json()`` (the form that :mod:`nsverify.oracle.certificates`
checks)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from fractions import Fraction

from nsverify.oracle.certificates import describe
from nsverify.oracle.jsonio import enc
from nsverify.oracle.numbers import decimal_str


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
    tested_is: str  # "exact_ad" | "ad" (user-given)
    outer: list = field(default_factory=list)  # outer bracket (== bouligand when exact)
    reason: str = ""
    value: object = None
    stats: dict = field(default_factory=dict)
    ad_distance: float | None = None
    distance_bounds: tuple | None = None
    point: tuple | None = None  # w's exact values (flattened), for re-checking with the program
    shape: tuple | None = None
    dtype: str | None = None

    @property
    def clarke(self):
        """1-D: the Clarke interval (lo, hi) of the exact bouligand set; None otherwise."""
        if not self.bouligand or len(self.bouligand[0]) != 1:
            return None
        vals = [v[0] for v in self.bouligand]
        key = lambda x: float(x)
        return (min(vals, key=key), max(vals, key=key))

    def explain(self, full: bool = False) -> str:
        """A readable account: at most :data:`EXPLAIN_LINES` lines of at most :data:`EXPLAIN_WIDTH` characters
        (counts, the first entries of each vector, the certificate's kind); ``full=True`` prints every vector
        and the whole certificate."""
        fmt = lambda v: _vec(v, full)
        lines = [f"status: {self.status}" + (f" -- {self.reason}" if self.reason else "")]
        lines.append(f"tested vector ({self.tested_is}): {fmt(self.tested)}")
        if self.tested_is != "exact_ad" and self.exact_ad is not None:
            lines.append(f"exact AD (PyTorch's AD in exact arithmetic): {fmt(self.exact_ad)}")
        if self.ad is not None:
            lines.append(
                f"PyTorch autograd (float): {fmt(self.ad)}; distance to the Clarke set {_f(self.ad_distance)}"
            )
        nb = len(self.bouligand)
        kind = "exact enumeration" if self.exact else "inner bracket (certified pieces)"
        lines.append(
            f"Bouligand gradients ({kind}, {nb}): "
            + ", ".join(fmt(v) for v in self.bouligand[:6])
            + (" ..." if nb > 6 else "")
        )
        if not self.exact:
            lines.append(f"outer bracket: {len(self.outer)} candidate gradients")
        lines.append(
            f"kink/tie sites at w: {len(self.kinks)}"
            + (f" ({', '.join(sorted({k.op for k in self.kinks}))})" if self.kinks else "")
        )
        flips = [k for k in self.kinks if k.float_tie is False]
        if flips:
            lines.append(
                f"  {len(flips)} exact tie(s) NOT seen by the float computation (rounding destroyed them)"
            )
        fo = [k for k in self.kinks if k.extra.get("float_only")]
        if fo:
            lines.append(f"  {len(fo)} tie(s) seen only by the float computation (rounding created them)")
        if self.certificate:
            lines.append(f"certificate: {describe(self.certificate)}")
        lines.append(f"distance of the tested vector to the Clarke set: {_f(self.distance)}")
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
    """A number for people: an exact Fraction as itself while short, else (and for intervals) bounded decimals;
    never raises (huge values included)."""
    if isinstance(x, Fraction):
        if x.numerator.bit_length() < 100 and x.denominator.bit_length() < 100:
            return str(x)
        return "~" + decimal_str(x)
    return repr(x)


def _f(x):
    return "n/a" if x is None else f"{x:.3g}"


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
