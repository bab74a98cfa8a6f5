"""Algorithm 1's test that P_l = {x : <a_k, x> > 0 for all k} is non-empty (Park, Chun and Lee, Sec. 3.2), and
the per-layer record of the engine.

:func:`p_nonempty` is the engine's one P_l test, for the exact layered decision (:mod:`.exact`) and for the
autograd form of Algorithm 1 (:mod:`.algorithm1`, the training monitor and Table 1's premises) alike.  The rows
are split into coordinate-disjoint groups (P_l is non-empty iff each group's cone is), and each group is decided
by the oracle's exact cone test (:func:`nsverify.oracle.cones.feasible`): a float LP proposes a direction or a
Gordan certificate, either is checked in rationals, and a borderline LP goes to the exact simplex.  The answer
is "nonempty" with an exact rational direction, "empty" with an exact Gordan (Farkas) certificate, or
"unknown" only for rows that are not exact rationals.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction

from nsverify.oracle.cones import ConeStats, feasible, holds, primitive

F = Fraction


@dataclass
class PResult:
    """The answer of :func:`p_nonempty`."""

    status: str  # "nonempty" | "empty" | "unknown" | "trivial" (no constraints)
    n_constraints: int
    witness: dict = field(default_factory=dict)  # exact direction {column: Fraction} with <a_k, x> > 0 for all k
    farkas: list | None = None  # exact y >= 0, sum 1, sum_k y_k a_k = 0 (Gordan: P is empty)
    components: int = 0  # coordinate-disjoint groups of rows, each decided alone
    columns: int | None = None  # the length of dense rows (None for sparse rows)

    @property
    def nonempty(self) -> bool:
        return self.status in ("nonempty", "trivial")

    @property
    def point(self) -> list | None:
        """The witness as a dense list (dense rows only)."""
        if self.status != "nonempty" or self.columns is None:
            return None
        return [self.witness.get(j, F(0)) for j in range(self.columns)]


def _sparse(row) -> dict:
    if isinstance(row, dict):
        return {k: F(v) if not isinstance(v, (int, Fraction)) else v for k, v in row.items() if v != 0}
    return {j: F(v) if not isinstance(v, (int, Fraction)) else v for j, v in enumerate(row) if v != 0}


def _integer_rows(raw: list) -> tuple[list[dict], list[int]] | None:
    """Rows whose entries are all floats or ints as integer rows: row k times a power of two ``scale_k`` (the
    common denominator of its floats' exact binary values). The open cone of the scaled rows is the same; a Gordan
    certificate y of the scaled rows is y_k * scale_k for the given ones. None when some entry is a Fraction or
    an enclosure (then the rows are taken as they are)."""
    out, scales = [], []
    for row in raw:
        items = row.items() if isinstance(row, dict) else enumerate(row)
        ratios = {}
        for k, v in items:
            if type(v) is float:
                if v != v or v in (float("inf"), float("-inf")):
                    return None
                ratios[k] = v.as_integer_ratio()
            elif type(v) is int:
                ratios[k] = (v, 1)
            else:
                return None
        den = max((d for _n, d in ratios.values()), default=1)  # powers of two: the largest is their lcm
        out.append({k: n * (den // d) for k, (n, d) in ratios.items() if n != 0})
        scales.append(den)
    return out, scales


def _sum_direction(rows: list[dict]) -> dict | None:
    """The sum of the rows (exact, as a primitive integer vector) when it is a witness of the open cone --
    <a_k, sum> > 0 for every k, checked exactly -- else None (then the LP decides). One row is its own witness;
    so is any group of rows at pairwise non-negative inner products."""
    if not all(isinstance(c, (int, Fraction)) for a in rows for c in a.values()):
        return None
    total: dict = {}
    for a in rows:
        for k, c in a.items():
            total[k] = total.get(k, 0) + c
    d = primitive({k: c for k, c in total.items() if c != 0})
    return d if d and holds(rows, d) else None


def p_nonempty(constraints, stats: ConeStats | None = None, columns: int | None = None) -> PResult:
    """Is P = {x : <a_k, x> > 0 for all k} non-empty?  ``constraints``: rows a_k, dense (sequences of floats,
    ints or Fractions; floats are taken at their exact binary value) or sparse (``{column: value}``).

    Decided exactly, group by group (rows on disjoint columns): "nonempty" with ``witness`` (and ``point`` for
    dense rows), "empty" with an exact Gordan certificate ``farkas`` over all rows, "unknown" when a group could
    not be decided exactly (only for non-rational rows). ``columns``: the rows' length when they are sparse (then
    ``point`` is available too)."""
    raw = list(constraints)
    if not raw:
        return PResult("trivial", 0)
    dense = not isinstance(raw[0], dict)
    scaled = _integer_rows(raw)  # float rows (the monitor's) as integer rows: exact arithmetic on ints
    rows, scales = scaled if scaled is not None else ([_sparse(r) for r in raw], None)
    k = len(rows)
    ncols = len(raw[0]) if dense else columns
    stats = ConeStats() if stats is None else stats
    zero = next((i for i, r in enumerate(rows) if not r), None)
    if zero is not None:  # 0 > 0 is infeasible
        return PResult("empty", k, farkas=[F(int(i == zero)) for i in range(k)], columns=ncols)
    from nsverify.oracle.separable import UnionFind

    uf = UnionFind()
    for r in rows:
        uf.union_all(r)
    comps: dict = {}
    for i, r in enumerate(rows):
        comps.setdefault(uf.find(next(iter(r))), []).append(i)
    witness: dict = {}
    for members in comps.values():
        group = [rows[i] for i in members]
        d = _sum_direction(group)
        if d is not None:  # the cheap sufficient test: the rows' sum is a witness (always so for one row)
            witness.update(d)
            continue
        res, cert = feasible(group, stats)
        if res == "empty":
            y = [F(0)] * k
            for i, v in zip(members, cert):
                y[i] = F(v) * (scales[i] if scales is not None else 1)
            return PResult("empty", k, farkas=y, components=len(comps), columns=ncols)
        if res != "open":
            return PResult("unknown", k, components=len(comps), columns=ncols)
        witness.update(cert)
    if not holds(rows, witness):  # the groups' witnesses live on disjoint columns
        return PResult("unknown", k, components=len(comps), columns=ncols)
    return PResult("nonempty", k, witness=witness, components=len(comps), columns=ncols)


@dataclass
class LayerCheck:
    """What the engine found in one layer at one point: the counts of Algorithm 1 (Park, Chun and Lee, Sec. 3.2),
    the cone P_l and its decision, and Theorem 5's rank data."""

    name: str
    kink_touches: int = 0  # pre-activations exactly at a kink
    windows: int = 0  # max-pool windows examined
    tied_windows: int = 0  # |S_j| >= 2
    tied_positive: int = 0  # |S_j| >= 2 and max > 0: the ties Algorithm 2 (Park et al., App. F) counts
    nontrivial_windows: int = 0  # S_j \\ T_j non-empty
    sum_nontrivial: int = 0  # sum of |S_j \\ T_j| over those windows
    unchecked: int = 0  # tied windows / kinks skipped because of the cap
    not_bouligand: int = 0  # kinks where AD's derivative is neither one-sided derivative
    # how the pairs (i*, i) of tied windows were decided (the training monitor's tie_test="auto"; Algorithm 1
    # line 14): D^AD rho 0 at both, the w_l blocks from the layer input's patches, identical receptive fields,
    # exact batched AD gradients in w_{1:l}
    tj_flat: int = 0
    tj_patch: int = 0
    tj_field: int = 0
    tj_exact: int = 0
    rows: list = field(default_factory=list)  # the cone P_l's rows (exact decision: primitive, deduplicated)
    p: PResult | None = None  # the decision of P_l (None: no constraint)
    rank_columns: list | None = None  # Theorem 5: the B independent columns of z_{l-1}
    rank_minor: list | None = None  # Theorem 5: that B x B minor (exact)

    @property
    def avg_nontrivial(self) -> float | None:
        return self.sum_nontrivial / self.nontrivial_windows if self.nontrivial_windows else None

    @property
    def witness(self) -> dict:
        """The exact direction strictly inside every row of P_l (empty when there is no row)."""
        return self.p.witness if self.p is not None else {}

    @property
    def components(self) -> int:
        return self.p.components if self.p is not None else 0

    @property
    def status(self) -> str:
        if self.not_bouligand:
            return "not_applicable"
        if self.unchecked:
            return "unknown"
        return "trivial" if self.p is None else self.p.status
