"""Exact Bouligand (and hence Clarke) set of a ReLU network (2.13) at a point, by enumerating the activation
patterns realised by open regions around the point, with exact rational LPs (the oracle's open-cone test,
:func:`nsverify.oracle.cones.strict_feasible`).

Near x0, F(x0 + d) is positively homogeneous piecewise linear in d; a neuron whose pre-activation is
nonzero at x0 keeps its sign, a ReLU neuron with zero pre-activation splits on the sign of a linear form in
d.  Each open cone of the split carries one gradient; the Bouligand set is the set of those gradients and
the Clarke set their convex hull.  The number of cones is exponential in the worst case (Theorem 5-6):
``max_regions`` bounds the work and :class:`~nsverify.errors.TooManyPieces` is raised beyond it.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from math import gcd
from typing import Sequence

from nsverify.errors import TooManyPieces
from nsverify.oracle.cones import strict_feasible
from nsverify.papers.costs.relunet import ReluNet

Vec = tuple[Fraction, ...]


@dataclass
class BouligandResult:
    gradients: set[Vec]  # the Bouligand set (exact)
    regions: int  # open cones enumerated
    lp_calls: int

    @property
    def clarke_is_singleton(self) -> bool:
        return len(self.gradients) == 1

    @property
    def clarke_is_zero(self) -> bool:
        return self.gradients == {tuple(Fraction(0) for _ in next(iter(self.gradients)))}


def _normalize(a: Vec) -> tuple:
    """Primitive integer direction of a nonzero rational vector (for deduplicating constraints)."""
    a = [Fraction(v) for v in a]
    den = 1
    for v in a:
        den = den * v.denominator // gcd(den, v.denominator)
    ints = [int(v * den) for v in a]
    g = 0
    for v in ints:
        g = gcd(g, abs(v))
    return tuple(v // g for v in ints)


def _ray_witness(rows, w, k):
    """Cheap exact try before an LP: move the witness w along k, staying strictly inside rows."""
    kk = sum(v * v for v in k)
    kw = sum(a * b for a, b in zip(k, w))
    t_lo = -Fraction(kw) / kk  # need t > t_lo for k . (w + t k) > 0
    t_hi = None
    for c in rows:
        ck = sum(a * b for a, b in zip(c, k))
        if ck < 0:
            cw = sum(a * b for a, b in zip(c, w))
            t = Fraction(cw) / (-ck)
            t_hi = t if t_hi is None or t < t_hi else t_hi
    if t_hi is not None and t_hi <= t_lo:
        return None
    t = t_lo + 1 if t_hi is None else (t_lo + t_hi) / 2
    return [a + t * b for a, b in zip(w, k)]


def bouligand_set(net: ReluNet, x0: Sequence, max_regions: int = 20_000) -> BouligandResult:
    p = net.p
    # integers where possible: Fraction arithmetic dominates the running time otherwise
    x0 = [int(v) if Fraction(v).denominator == 1 else Fraction(v) for v in x0]
    zero = tuple(0 for _ in range(p))
    eye = [tuple(int(i == j) for j in range(p)) for i in range(p)]
    # state: (values at x0, directional forms, constraint set, constraint rows, witness)
    states = [(x0, eye, frozenset(), [], [Fraction(0)] * p)]
    cache: dict[frozenset, list | None] = {}
    lp_calls = 0

    def feasible(cset, rows):
        nonlocal lp_calls
        if cset not in cache:
            lp_calls += 1
            cache[cset] = strict_feasible(rows, p)
        return cache[cset]

    for M, flags in zip(net.mats[:-1], net.relu):
        new_states = []
        for vals, forms, cset, rows, wit in states:
            z = [sum(a * b for a, b in zip(r, vals)) for r in M]
            a = [tuple(sum(r[k] * forms[k][j] for k in range(len(forms))) for j in range(p)) for r in M]
            partial = [([], [], cset, rows, wit)]
            for u in range(len(M)):
                grown = []
                for ov, of, cs, rw, w in partial:
                    if not flags[u]:
                        grown.append((ov + [z[u]], of + [a[u]], cs, rw, w))
                    elif z[u] != 0:
                        on = z[u] > 0
                        grown.append((ov + [z[u] if on else 0], of + [a[u] if on else zero], cs, rw, w))
                    elif a[u] == zero:
                        grown.append((ov + [0], of + [zero], cs, rw, w))
                    else:
                        key = _normalize(a[u])
                        neg = tuple(-v for v in key)
                        for sgn, k2 in ((1, key), (-1, neg)):
                            if tuple(-v for v in k2) in cs:
                                continue  # opposite sign already imposed
                            if k2 in cs:
                                w2 = w
                            elif sum(s * t for s, t in zip(k2, w)) > 0:
                                w2 = w  # the current witness already satisfies it
                            else:
                                w2 = _ray_witness(rw, w, k2)
                                if w2 is None:
                                    w2 = feasible(cs | {k2}, rw + [list(k2)])
                                if w2 is None:
                                    continue
                            grown.append(
                                (
                                    ov + [0],
                                    of + [a[u] if sgn > 0 else zero],
                                    cs | {k2},
                                    rw if k2 in cs else rw + [list(k2)],
                                    w2,
                                )
                            )
                partial = grown
                if len(partial) > max_regions:
                    raise TooManyPieces(
                        f"exact Clarke enumeration passed {max_regions} activation regions at a layer of "
                        f"width {len(M)} (input dimension {p}): the problem is NP-hard in general "
                        f"(Theorem 6). Use a smaller instance, raise max_regions, or use the polynomial AD "
                        f"set (prop4.ad_set_two)."
                    )
            new_states += [(ov, of, cs, rw, w) for ov, of, cs, rw, w in partial]
        states = new_states
    last = net.mats[-1][0]
    grads = {
        tuple(Fraction(sum(c * f[j] for c, f in zip(last, forms))) for j in range(p))
        for _, forms, _, _, _ in states
    }
    return BouligandResult(grads, len(states), lp_calls)
