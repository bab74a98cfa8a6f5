"""Every premise of Park, Chun and Lee's theorems at a NetSpec's exact point (Table 1's theorem rows).

:func:`spec_premises` combines the structure (:func:`~.conditions.detect`), Theorem 5's exact rank test at the
layers whose pre-activations touch a kink (:func:`nsverify.oracle.park.rank.full_column_rank`) and Algorithm 1
per layer (:func:`nsverify.oracle.park.algorithm1.algorithm1_layer`), all on the float64 forward pass, which is
checked to be exact first.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from nsverify.errors import NsverifyError
from nsverify.oracle.park.algorithm1 import algorithm1_layer
from nsverify.oracle.park.rank import full_column_rank
from nsverify.papers.park.conditions import ModelConditions, detect
from nsverify.strategies.netspec import NetSpec


@dataclass
class SpecPremises:
    structure: ModelConditions
    theorem5_rank: bool | None  # None: no kink touched at any layer (premise vacuous)
    algorithm1: list  # LayerCheck per layer
    kinks: int

    @property
    def theorem5(self) -> bool:
        return self.structure.theorems()["theorem5_structure"] and self.theorem5_rank is not False

    @property
    def theorem8(self) -> bool:
        return self.structure.theorems()["theorem8_structure"] and all(
            c.status in ("nonempty", "trivial") for c in self.algorithm1
        )

    def holds(self) -> dict:
        th = self.structure.theorems()
        return {
            "theorem1": th["theorem1"],
            "theorem4": th["theorem4"],
            "theorem5": self.theorem5,
            "theorem6": th["theorem6"],
            "theorem8": self.theorem8,
        }


def spec_premises(spec: NetSpec) -> SpecPremises:
    """Every premise checker at the spec's exact point (float64 forward, verified exact)."""
    from nsverify.strategies.netspec import check_exact

    structure = detect(spec)
    rep = check_exact(spec, torch.float64, last_outputs=False)
    if not rep.ok:
        raise NsverifyError("spec_premises needs a spec whose float64 forward is exact: " + rep.problems[0])
    net = spec.build(torch.float64)
    rec: list = []
    X = spec.inputs(torch.float64)
    net(X, record=rec)
    params = dict(net._params())
    checks, rank_ok, kinks = [], None, 0
    z_prev = X
    upto = []
    for i, L in enumerate(spec.layers):
        y, a, z = rec[i]
        pl = [p for n, p in params.items() if n.startswith(f"layer{i}.") and p.requires_grad]
        upto = upto + pl
        pool = None if L.pool is None else (L.pool.kernel, L.pool.stride, 0, 1)
        chk = algorithm1_layer(f"layer{i}", y, a, L.activation, pl, upto, pool)
        checks.append(chk)
        kinks += chk.kink_touches
        if chk.kink_touches and L.kind == "linear":
            zin = z_prev.reshape(spec.batch, -1)
            ok = full_column_rank(zin.t())
            rank_ok = ok if rank_ok is None else (rank_ok and ok)
        z_prev = z
    return SpecPremises(structure, rank_ok, checks, kinks)
