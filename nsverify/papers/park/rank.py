"""Theorem 5's premise (Park, Chun and Lee, Sec. 3.1): linearly independent columns of z_{l-1}, decided exactly.

:func:`full_column_rank` certifies full rank by a rank computed modulo a prime (a rank of B mod p is a rank of B
over the integers, hence over Q) and otherwise decides it by exact ``Fraction`` elimination; the float matrix
is scaled by a common power of two to integers first, so no rounding enters.
"""

from __future__ import annotations

import numpy as np
import torch

from nsverify.rational import pivots_mod_p
from nsverify.rational import rank as rational_rank


def exact_rank(rows) -> int:
    """Rank over the rationals of a matrix given as rows of Fractions/ints/floats (floats taken exactly)."""
    return rational_rank(rows)


_PRIMES = (2147483629, 2147483587)


def _modp_matrix(a: np.ndarray, p: int) -> np.ndarray:
    """The float matrix scaled by a common power of two to integers, reduced mod p (exactly)."""
    a = np.asarray(a, dtype=np.float64)
    mant, exp = np.frexp(a)
    m = (mant * 2.0**53).astype(np.int64)  # exact: a = m * 2^(exp-53)
    e = exp.astype(np.int64) - 53
    e = np.where(m == 0, 0, e)
    shift = e - e.min()
    pw = {int(s): pow(2, int(s), p) for s in np.unique(shift)}
    pw_arr = np.vectorize(pw.__getitem__, otypes=[np.int64])(shift)
    return ((np.mod(m, p) % p) * pw_arr) % p


def full_column_rank(z) -> bool:
    """Theorem 5's premise: are the columns of z (N x B: one column per sample) linearly independent over Q?

    Exact: a rank of B modulo a prime certifies rank B over the integers (hence over Q); otherwise the rank is
    decided by exact ``Fraction`` elimination."""
    a = z.detach().to("cpu", torch.float64).numpy() if isinstance(z, torch.Tensor) else np.asarray(z, float)
    if not np.all(np.isfinite(a)):
        from nsverify.errors import NonFiniteError

        raise NonFiniteError("the activation matrix contains NaN/inf: the rank test needs finite values")
    n, b = a.shape
    if b > n:
        return False
    at = a.T  # B x N: full column rank of z <=> full row rank of z^T
    for p in _PRIMES:
        if len(pivots_mod_p(_modp_matrix(at, p), p)) == b:
            return True
    return exact_rank(at.tolist()) == b
