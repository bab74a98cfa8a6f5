"""Double- and triple-double arithmetic on whole float64 tensors, with rigorous error bounds, and error-free
products of tensors by slicing (the enclosure engine's centres for deep networks: :mod:`nsverify.oracle.enclosure`).

A value is ``hi + lo`` or ``hi + lo + tail`` (float64 tensors, the exact real sum) and every operation returns a
radius bounding what it did not represent. The primitives are Knuth's TwoSum and Dekker's TwoProduct (exact:
``s + e == a + b``, ``p + e == a * b`` in real arithmetic, barring overflow and underflow, which the engine excludes
by magnitude).

**Error-free matrix products** (Ozaki, Ogita, Oishi and Rump, *Error-free transformations of matrix
multiplication by using fast routines of matrix multiplication and its applications*, Numer. Algorithms 59, 2012):
each operand is cut into slices that are integer multiples of a power of two with few significant bits relative to
the operand's largest entry (per tensor for the activations, per output channel for the weights).  A product of
two slices then has every partial sum an exact multiple of the product of their grids and below 2^53 of them, so
float64 convolution or matrix multiplication computes it **exactly, in any summation order**: b_x + b_w +
ceil(log2 n) + 1 <= 53 for n terms.  The slice products are summed in triple-double; what the slices leave out is
bounded as a radius.
"""

from __future__ import annotations

import math

import torch

U = 2.0 ** -53
_SPLIT = 134217729.0  # 2^27 + 1


def two_sum(a, b):
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def _split(a):
    c = _SPLIT * a
    hi = c - (c - a)
    return hi, a - hi


def two_prod(a, b):
    p = a * b
    ah, al = _split(a)
    bh, bl = _split(b)
    return p, ((ah * bh - p) + ah * bl + al * bh) + al * bl


def dd_add(ah, al, bh, bl):
    """(hi, lo, err): hi + lo is a + b up to err (elementwise, rigorous)."""
    s, e = two_sum(ah, bh)
    t = al + bl
    e2 = e + t
    hi, lo = two_sum(s, e2)
    return hi, lo, 2 * U * (t.abs() + e2.abs()) * (1 + 4 * U)


def td_add(a, b):
    """(hi, lo, tail, err) for a + b, each a triple (hi, lo, tail) of float64 tensors whose exact real sum is the
    value: hi + lo + tail is a + b up to err (elementwise, rigorous; err is of order 2^-159 |a + b| when the
    operands are normalised)."""
    s1, e1 = two_sum(a[0], b[0])
    s2, e2 = two_sum(a[1], b[1])
    s3 = a[2] + b[2]  # error <= U |s3|
    t1, f1 = two_sum(s1, s2)
    g, f2 = two_sum(e1, e2)
    h, f3 = two_sum(f1, g)
    rest = (f3 + f2) + s3  # error <= 2 U (|f2| + |f3| + |s3|) (1 + U)
    hi, x = two_sum(t1, h)
    lo, tail = two_sum(x, rest)
    return hi, lo, tail, 3 * U * (f2.abs() + f3.abs() + s3.abs()) * (1 + 8 * U)


def td_mul(a, b):
    """(hi, lo, tail, err) for a * b (triples as in :func:`td_add`): the products of order 2^-106 and above are
    kept exactly (TwoProduct), those of order 2^-159 in floats, the rest bounded."""
    p, e = two_prod(a[0], b[0])
    q1, r1 = two_prod(a[0], b[1])
    q2, r2 = two_prod(a[1], b[0])
    c_terms = (a[0] * b[2], a[1] * b[1], a[2] * b[0], r1, r2)
    c = c_terms[0] + c_terms[1] + c_terms[2] + c_terms[3] + c_terms[4]  # error <= 7 U sum |terms| (5 products)
    s, f1 = two_sum(e, q1)
    s2, f2 = two_sum(s, q2)
    rest = (f1 + f2) + c  # error <= 2 U (|f1| + |f2| + |c|) (1 + U)
    hi, x = two_sum(p, s2)
    lo, tail = two_sum(x, rest)
    neglected = (a[1] * b[2]).abs() + (a[2] * b[1]).abs() + (a[2] * b[2]).abs()
    mag = sum(t.abs() for t in c_terms) + f1.abs() + f2.abs() + c.abs()
    return hi, lo, tail, (9 * U * mag + neglected) * (1 + 16 * U)


def exponent(t: torch.Tensor, dims=None) -> torch.Tensor:
    """E with max |t| < 2^E over ``dims`` (all: a scalar tensor), as float64; 0 for all-zero groups."""
    a = t.abs()
    m = a.amax() if dims is None else a.amax(dim=dims, keepdim=True)
    e = torch.where(m > 0, torch.floor(torch.log2(torch.where(m > 0, m, torch.ones_like(m)))) + 2,
                    torch.zeros_like(m))
    return e


def slices(hi, lo, E, bits: int, count: int, tail=None):
    """``count`` slices of ``hi + lo (+ tail)`` on the grids 2^(E - bits k), k = 1..count (E broadcast), and a
    bound of the remainder's magnitude (elementwise).  Every slice entry is an integer multiple of its grid of
    magnitude at most 2^bits grids.  (``th - s`` is exact: s is th rounded to a grid no finer than th's ulp, or th
    itself; the two_sums keep the sum of the parts exact.)"""
    out = []
    th, tl = hi, lo
    tt = torch.zeros_like(hi) if tail is None else tail
    for k in range(1, count + 1):
        g = torch.exp2(E - bits * k)
        s = torch.round(th / g) * g
        th, tl = two_sum(th - s, tl)
        if tail is not None:
            tl, tt = two_sum(tl, tt)
            th, tl = two_sum(th, tl)
        out.append(s)
    return out, th.abs() + tl.abs() + tt.abs()


def plan(n_terms: int, weight_bits: int, target_bits: int = 104) -> tuple[int, int, int, int]:
    """(b_x, K_x, b_w, K_w): slice widths and counts for products of n-term sums, the weights covered to
    ``weight_bits`` below their largest entry (exactly when that is their whole range), the activations to
    ``target_bits``."""
    budget = 52 - math.ceil(math.log2(max(n_terms, 2)))
    if budget < 12:
        raise ValueError(f"a product of {n_terms} terms is too long for error-free slicing")
    best = None
    for kw in range(1, 6):
        bw = math.ceil(weight_bits / kw)
        bx = budget - bw
        if bx < 8:
            continue
        kx = math.ceil(target_bits / bx)
        if best is None or kx * kw < best[1] * best[3]:
            best = (bx, kx, bw, kw)
    if best is None:
        raise ValueError(f"a product of {n_terms} terms is too long for error-free slicing")
    return best


def weight_bits(w: torch.Tensor, dims) -> int:
    """Significant bits of ``w`` (exact float64 values) below the largest entry of each group, at most 60."""
    nz = w != 0
    if not bool(nz.any()):
        return 1
    _m, ex = torch.frexp(w)
    top = torch.where(nz, ex, torch.full_like(ex, -100000)).amax(dim=dims, keepdim=True)
    # an entry's last significant bit: its exponent - 53 + the trailing zeros of its 53-bit mantissa
    mant = torch.where(nz, (_m.abs() * 2.0 ** 53), torch.ones_like(_m)).to(torch.int64)
    tz = torch.log2((mant & -mant).double()).to(ex.dtype)
    low = torch.where(nz, ex - 53 + tz, top)
    span = int((top - low).amax()) + 1
    return min(max(span, 1), 60)
