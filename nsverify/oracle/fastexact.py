"""Exact matrix products of Fraction arrays through integer arithmetic (the exact interpreter's hot loop).

A matmul of numpy object arrays of ``Fraction`` normalises every partial sum (a gcd per multiply-add, about 5 us
each).  Here each operand is put over one common denominator, ``a = A / da`` with an integer array ``A``, so
``a @ b = (A @ B) / (da * db)``: the products and sums are integer operations, in int64 when a bound proves that
no partial sum can overflow (|A| max * |B| max * inner size < 2**62, checked exactly on Python integers) and in
Python integers otherwise, and each *output* entry is normalised once.  The result is the same Fractions, exactly.

Only plain rationals take this path: entries that carry a derivative (forward mode's ``Aff``) or an interval
(``Ival``) return None and the caller keeps its general object matmul -- except :func:`interval_matmul`, for a
product of rationals with intervals (the reverse mode behind a softmax): exact endpoint products, one outward
rounding per output entry.  Common denominators are bounded
(``MAX_DEN_BITS``): operands whose denominators have no small common multiple also return None.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from nsverify.oracle.context import polled

#: give up (None) when an operand's common denominator needs more bits than this
MAX_DEN_BITS = 4096
_INT64_SAFE = 2**62


def integer_form(a: np.ndarray):
    """``(A, d)`` with ``a == A / d`` exactly: A an object array of Python integers, d > 0 the entries' least common
    denominator; None when an entry is not a plain rational (or d would need more than MAX_DEN_BITS bits)."""
    return _over_common_denominator(a)


def _over_common_denominator(a: np.ndarray):
    """(integer array, common denominator) for an array of Fractions/ints, or None (another entry type, or the
    common denominator would be too large)."""
    flat = a.reshape(-1).tolist()
    dens = set()
    for x in polled(flat):
        if isinstance(x, Fraction):  # KinkZero (relu's tagged 0) is a Fraction too
            dens.add(x.denominator)
        elif type(x) is bool or not isinstance(x, (int, np.integer)):
            return None
    d = 1
    for q in dens:
        d = d * q // math.gcd(d, q)
        if d.bit_length() > MAX_DEN_BITS:
            return None
    if d == 1:
        nums = [x.numerator if isinstance(x, Fraction) else int(x) for x in polled(flat)]
    else:
        nums = [x.numerator * (d // x.denominator) if isinstance(x, Fraction) else int(x) * d
                for x in polled(flat)]
    out = np.empty(len(nums), dtype=object)
    out[:] = nums
    return out.reshape(a.shape), d


def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray | None:
    """``np.matmul(a, b)`` for arrays of exact rationals, as an object array of Fractions; None when an entry is
    not a plain rational (the caller then uses the general object matmul)."""
    if a.dtype != object or b.dtype != object or a.size == 0 or b.size == 0 or a.ndim == 0 or b.ndim == 0:
        return None
    ca = _over_common_denominator(a)
    if ca is None:
        return None
    cb = _over_common_denominator(b)
    if cb is None:
        return None
    (A, da), (B, db) = ca, cb
    inner = a.shape[-1]
    amax = max((abs(x) for x in polled(A.reshape(-1).tolist())), default=0)
    bmax = max((abs(x) for x in polled(B.reshape(-1).tolist())), default=0)
    if amax < _INT64_SAFE and bmax < _INT64_SAFE and amax * bmax * inner < _INT64_SAFE:  # zeros on one side too
        R = np.matmul(A.astype(np.int64), B.astype(np.int64)).astype(object)
    else:
        R = np.matmul(A, B)
    den = da * db
    R = np.asarray(R, dtype=object)
    out = np.empty(R.shape, dtype=object)
    of = out.reshape(-1)
    for i, r in enumerate(polled(R.reshape(-1).tolist())):
        of[i] = Fraction(int(r), den)
    return out


def interval_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray | None:
    """``a @ b`` when one operand holds plain rationals and the other rationals and intervals (``Ival``, the reverse
    mode's cotangents behind a softmax or a square root), as an object array of intervals (Fractions where the
    enclosure is a point); None for any other mix.

    Rigorous and tighter than the entry-by-entry interval product: each interval entry's endpoints are taken as
    exact dyadic rationals ``[l, h]``, the rational operand is split into its positive and negative parts, and
    ``lo = L @ R+ + H @ R-``, ``hi = H @ R+ + L @ R-`` (or the same with the rational operand on the left) are
    computed exactly in integers over common denominators; every output entry is then rounded outward once, to
    the interval precision.  For x in [l, h] and r >= 0, x r lies in [l r, h r]; for r < 0 in [h r, l r]; sums
    add bounds."""
    from mpmath.libmp import from_rational, round_ceiling, round_floor

    from nsverify.oracle.numbers import PREC, Ival, mpf_fraction, simplify

    if a.dtype != object or b.dtype != object or a.size == 0 or b.size == 0 or a.ndim == 0 or b.ndim == 0:
        return None

    def bounds(x: np.ndarray):  # (L, H, d): integer arrays with x in [L / d, H / d] entrywise, or None
        flat = x.reshape(-1).tolist()
        if not any(isinstance(v, Ival) for v in flat):
            return None
        ends = np.empty(2 * len(flat), dtype=object)
        for i, v in enumerate(polled(flat)):
            if isinstance(v, Ival):
                ends[2 * i], ends[2 * i + 1] = mpf_fraction(v.t[0]), mpf_fraction(v.t[1])
            elif isinstance(v, Fraction) or (isinstance(v, (int, np.integer)) and type(v) is not bool):
                ends[2 * i] = ends[2 * i + 1] = v
            else:
                return None
        c = _over_common_denominator(ends)
        if c is None:
            return None
        ints, d = c
        return ints[0::2].reshape(x.shape), ints[1::2].reshape(x.shape), d

    def signed(r: np.ndarray):  # (R+, R-, d): integer arrays, r = (R+ + R-) / d, or None
        c = _over_common_denominator(r)
        if c is None:
            return None
        ints, d = c
        flat = ints.reshape(-1).tolist()
        pos, neg = np.empty(len(flat), dtype=object), np.empty(len(flat), dtype=object)
        pos[:] = [v if v > 0 else 0 for v in polled(flat)]
        neg[:] = [v if v < 0 else 0 for v in polled(flat)]
        return pos.reshape(r.shape), neg.reshape(r.shape), d

    ia, rb = bounds(a), signed(b)
    if ia is not None and rb is not None:  # intervals @ rationals
        (L, H, d1), (P, N, d2) = ia, rb
        lo = np.matmul(L, P) + np.matmul(H, N)
        hi = np.matmul(H, P) + np.matmul(L, N)
    else:
        ib, ra = bounds(b), signed(a)
        if ib is None or ra is None:
            return None
        (L, H, d1), (P, N, d2) = ib, ra
        lo = np.matmul(P, L) + np.matmul(N, H)
        hi = np.matmul(P, H) + np.matmul(N, L)
    den = d1 * d2
    lo, hi = np.asarray(lo, dtype=object), np.asarray(hi, dtype=object)
    out = np.empty(lo.shape, dtype=object)
    of = out.reshape(-1)
    for i, (u, v) in enumerate(polled(list(zip(lo.reshape(-1).tolist(), hi.reshape(-1).tolist())))):
        u, v = int(u), int(v)
        of[i] = Fraction(u, den) if u == v else simplify(Ival((from_rational(u, den, PREC, round_floor),
                                                               from_rational(v, den, PREC, round_ceiling))))
    return out


def add(a: np.ndarray, b: np.ndarray) -> np.ndarray | None:
    """``a + b`` for arrays of exact rationals (broadcast), as an object array; entries where one operand is an
    exact zero are the other operand itself (no new Fraction: reverse mode adds many zero-padded gradients).
    None when an entry is not a plain rational."""
    if a.dtype != object or b.dtype != object:
        return None
    try:
        x, y = np.broadcast_arrays(a, b)
    except ValueError:
        return None
    xs, ys = x.reshape(-1).tolist(), y.reshape(-1).tolist()
    out = np.empty(len(xs), dtype=object)
    for i, (p, q) in enumerate(polled(list(zip(xs, ys)))):
        tp, tq = type(p), type(q)
        if tp is not Fraction and tp is not int and not isinstance(p, Fraction):
            return None
        if tq is not Fraction and tq is not int and not isinstance(q, Fraction):
            return None
        if not q:
            out[i] = p if tp is Fraction else Fraction(p)  # a tagged zero (KinkZero) is not passed on
        elif not p:
            out[i] = q if tq is Fraction else Fraction(q)
        else:
            out[i] = p + q
    return out.reshape(x.shape)
