"""3-CNF formulas: validation, a brute-force SAT solver, random instances (DIMACS literals +-v, v in 1..p)."""

from __future__ import annotations

import itertools
import random
from typing import Sequence

from nsverify.errors import NsverifyError


def check_formula(clauses: Sequence[Sequence[int]], p: int) -> None:
    if p < 1:
        raise NsverifyError(f"a formula needs p >= 1 variables (got {p}).")
    if not clauses:
        raise NsverifyError("the formula has no clause; give at least one 3-literal clause.")
    for c in clauses:
        if len(c) != 3:
            raise NsverifyError(
                f"clause {tuple(c)} has {len(c)} literals; 3-CNF clauses have exactly 3 "
                f"(repeat a literal to pad a shorter clause)."
            )
        for lit in c:
            if not isinstance(lit, int) or lit == 0 or abs(lit) > p:
                raise NsverifyError(
                    f"literal {lit!r} in clause {tuple(c)}: literals are +-v with v in 1..{p}."
                )


def satisfies(clauses, assignment: Sequence[bool]) -> bool:
    return all(any(assignment[abs(l) - 1] == (l > 0) for l in c) for c in clauses)


def brute_force_sat(clauses, p: int) -> tuple[bool, tuple[bool, ...] | None]:
    """Try all 2^p assignments; return (satisfiable, a satisfying assignment or None)."""
    check_formula(clauses, p)
    for a in itertools.product((False, True), repeat=p):
        if satisfies(clauses, a):
            return True, a
    return False, None


def random_3cnf(p: int, n: int, seed: int) -> list[tuple[int, int, int]]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        vs = rng.sample(range(1, p + 1), 3) if p >= 3 else [rng.randint(1, p) for _ in range(3)]
        out.append(tuple(v if rng.random() < 0.5 else -v for v in vs))
    return out


def unsat_core(v: int = 1, w: int = 2, u: int = 3) -> list[tuple[int, int, int]]:
    """An unsatisfiable 3-CNF on three variables: all 8 sign patterns of (v, w, u)."""
    return [tuple(s * x for s, x in zip(signs, (v, w, u))) for signs in itertools.product((1, -1), repeat=3)]
