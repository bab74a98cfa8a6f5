"""Theorem 5's premise (Park, Chun and Lee, Sec. 3.1): linearly independent columns of z_{l-1}, decided exactly.

One rank test for the engine: the matrix (exact rationals, or floats taken at their exact binary value) is
scaled to integers by a common denominator (a power of two for floats) and reduced modulo a prime; B pivots
modulo a prime are a nonsingular B x B minor over the integers, hence over Q (:func:`independent_columns`, the
certificate of :mod:`.exact`).  When neither prime shows full rank, exact ``Fraction`` elimination decides
(:func:`full_row_rank`, :func:`full_column_rank`, :func:`nonsingular`).
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import torch

from nsverify.rational import pivots_mod_p
from nsverify.rational import rank as rational_rank

#: primes below 2^31: products of two residues fit in int64
PRIMES = (2147483629, 2147483587)


def exact_rank(rows) -> int:
    """Rank over the rationals of a matrix given as rows of Fractions/ints/floats (floats taken exactly)."""
    return rational_rank(rows)


def _modp(a: np.ndarray, p: int) -> np.ndarray:
    """The matrix scaled to integers (exactly) and reduced modulo p (int64).  Floats: by a common power of two
    (frexp, vectorised); exact entries: by the common denominator."""
    if a.dtype != object:
        a = np.asarray(a, dtype=np.float64)
        mant, exp = np.frexp(a)
        m = (mant * 2.0**53).astype(np.int64)  # exact: a = m * 2^(exp-53)
        e = np.where(m == 0, 0, exp.astype(np.int64) - 53)
        shift = e - e.min()
        pw = {int(s): pow(2, int(s), p) for s in np.unique(shift)}
        pw_arr = np.vectorize(pw.__getitem__, otypes=[np.int64])(shift)
        return ((np.mod(m, p) % p) * pw_arr) % p
    flat = [Fraction(x) for x in a.reshape(-1).tolist()]
    d = 1
    for x in flat:
        d = d * x.denominator // math.gcd(d, x.denominator)
    return np.array([(x.numerator * (d // x.denominator)) % p for x in flat], dtype=np.int64).reshape(a.shape)


def _matrix(Z) -> np.ndarray:
    if isinstance(Z, torch.Tensor):
        Z = Z.detach().to("cpu", torch.float64).numpy()
    a = np.asarray(Z) if isinstance(Z, np.ndarray) else np.array(Z, dtype=object)
    if a.dtype != object and not np.all(np.isfinite(a)):
        from nsverify.errors import NonFiniteError

        raise NonFiniteError("the activation matrix contains NaN/inf: the rank test needs finite values")
    if a.dtype == object and a.size and all(isinstance(x, float) for x in a.reshape(-1).tolist()):
        a = a.astype(np.float64)
    return a


def independent_columns(Z) -> list[int] | None:
    """Indices of B columns of the B x N matrix Z forming a nonsingular minor, found modulo a prime (which
    proves it over Q), or None when neither prime shows rank B (the rank may still be B: see
    :func:`full_row_rank`)."""
    a = _matrix(Z)
    B = a.shape[0]
    if B > a.shape[1]:
        return None
    if B == 0:
        return []
    for p in PRIMES:
        pivots = pivots_mod_p(_modp(a, p), p, B)
        if len(pivots) == B:
            return pivots
    return None


def full_row_rank(Z) -> bool:
    """Are the B rows of the B x N matrix Z linearly independent over Q?  Exact: modulo a prime first, then
    ``Fraction`` elimination."""
    a = _matrix(Z)
    if a.shape[0] > a.shape[1]:
        return False
    return independent_columns(a) is not None or exact_rank(a.tolist()) == a.shape[0]


def full_column_rank(z) -> bool:
    """Theorem 5's premise: are the columns of z (N x B: one column per sample) linearly independent over Q?"""
    return full_row_rank(_matrix(z).T)


def nonsingular(minor) -> bool:
    """Is the square exact matrix ``minor`` (rows of numbers) nonsingular?"""
    if any(len(row) != len(minor) for row in minor):
        return False
    Z = np.empty((len(minor), len(minor)), dtype=object)
    for i, row in enumerate(minor):
        for j, x in enumerate(row):
            Z[i, j] = Fraction(x)
    return full_row_rank(Z)
