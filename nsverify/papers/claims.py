"""One judged paper claim, as the report shows it: the single place where claim records are built.

Every paper package's ``repro`` module returns its experiments' results together with a ``"claims"`` list of
these records; the report sections render them and never judge. A richer claim type (source, interval,
sample size, power) can replace this record by changing :func:`claim` alone.
"""

from __future__ import annotations


def claim(statement: str, measured: str, held: bool | None) -> dict:
    """``{"claim", "measured", "held"}``: what the paper states, what this run measured, and the verdict
    (True: reproduced, False: not reproduced, None: undecided at this size)."""
    if held is not None and type(held).__name__ not in ("bool", "bool_"):
        raise TypeError(f"a claim's 'held' is True, False or None, not {held!r} ({type(held).__name__})")
    return {"claim": statement, "measured": measured, "held": None if held is None else bool(held)}
