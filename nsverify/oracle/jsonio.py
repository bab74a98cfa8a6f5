"""JSON encoding of exact numbers: Fractions as "p/q" strings, intervals as {"lo": "p/q", "hi": "p/q"}."""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from nsverify.oracle.numbers import Ival


def enc(x):
    if isinstance(x, np.generic):  # a numpy scalar (np.bool_, np.int64, ...): its Python value
        x = x.item()
    if isinstance(x, bool) or x is None or isinstance(x, str):
        return x
    if isinstance(x, Fraction):
        return f"{x.numerator}/{x.denominator}" if x.denominator != 1 else str(x.numerator)
    if isinstance(x, int):
        return str(x)
    if isinstance(x, Ival):
        return {"lo": enc(x.lo), "hi": enc(x.hi)}
    if isinstance(x, float):
        return x
    if isinstance(x, dict):
        return {str(k): enc(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [enc(v) for v in x]
    raise TypeError(f"cannot encode {type(x).__name__}")


def dec(x):
    """Inverse of :func:`enc` for numbers and (nested) vectors of numbers."""
    if isinstance(x, str):
        return Fraction(x)
    if isinstance(x, dict) and set(x) == {"lo", "hi"}:
        return Ival.of(Fraction(x["lo"]), Fraction(x["hi"]))
    if isinstance(x, list):
        return tuple(dec(v) for v in x)
    return x


def dec_sparse(d: dict) -> dict:
    return {int(k): Fraction(v) for k, v in d.items()}
