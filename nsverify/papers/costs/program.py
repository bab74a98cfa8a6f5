"""Programs as in Algorithm 1 of Boustany, Ch.2 (Sec. 2.4.1): p inputs, nodes i = p+1..m with predecessor lists pr(i)
and elementary programs g_i from the dictionary; a single output (the last node).

Memory indices are 0-based here: inputs are 0..p-1, node k of ``nodes`` has index p + k.  ``pr`` is an ordered
argument list (``mul`` of a value with itself has pr = (j, j), two edges), so |pr(i)| counts edges.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from nsverify.errors import NsverifyError
from nsverify.papers.costs.counting import CostModel
from nsverify.papers.costs.ops import get_op


@dataclass(frozen=True)
class OpNode:
    op: str
    pr: tuple[int, ...]
    param: Any = None


@dataclass
class Program:
    p: int
    nodes: list[OpNode] = field(default_factory=list)

    def __post_init__(self):
        if not isinstance(self.p, int) or self.p < 1:
            raise NsverifyError(f"a program needs p >= 1 inputs (got p={self.p!r}).")
        if self.nodes:
            self.validate()

    @property
    def m(self) -> int:
        return self.p + len(self.nodes)

    def validate(self) -> None:
        if not isinstance(self.p, int) or self.p < 1:
            raise NsverifyError(f"a program needs p >= 1 inputs (got p={self.p!r}).")
        if not self.nodes:
            raise NsverifyError("a program needs at least one operation node (its output is the last node).")
        for k in range(len(self.nodes)):
            self._validate_node(k)

    def _validate_node(self, k: int) -> None:
        if True:
            node = self.nodes[k]
            i = self.p + k
            spec = get_op(node.op)
            if not node.pr:
                raise NsverifyError(
                    f"node {i} ({node.op}) has an empty predecessor list; give its arguments."
                )
            if spec.arity is not None and len(node.pr) != spec.arity:
                raise NsverifyError(f"node {i}: {node.op} takes {spec.arity} argument(s), got pr={node.pr}.")
            for j in node.pr:
                if not isinstance(j, int) or j < 0 or j >= i:
                    raise NsverifyError(
                        f"node {i} ({node.op}) has predecessor {j!r}: predecessors must be "
                        f"earlier memory indices 0..{i - 1} (Algorithm 1 needs j < i)."
                    )
            if spec.param is not None and node.param is None:
                raise NsverifyError(f"node {i}: {node.op} needs its constant parameter {spec.param!r}.")
            if spec.name == "maxpool3x3":
                pt = node.param
                if len(pt) != 5 or any(len(r) != 5 for r in pt):
                    raise NsverifyError(f"node {i}: maxpool3x3 needs a 5x5 patch as param.")

    def add(self, op: str, *pr: int, param: Any = None) -> int:
        """Append a node; return its memory index."""
        self.nodes.append(OpNode(op, tuple(pr), param))
        try:
            self._validate_node(len(self.nodes) - 1)
        except NsverifyError:
            self.nodes.pop()
            raise
        return self.m - 1

    def ops_used(self) -> set[str]:
        return {n.op for n in self.nodes}

    def is_rational(self) -> bool:
        return all(get_op(n.op).rational for n in self.nodes)

    # ---- closed-form costs (eqs 2.5, 2.8, 2.10, 2.11) from the declared per-op formulas ----
    def cost(self, model: CostModel) -> float:
        """eq 2.8: cost(P) = sum_i cost(g_i)."""
        return sum(get_op(n.op).cost_g(model, len(n.pr)) for n in self.nodes)

    def cost_backprop_formula(self, model: CostModel) -> float:
        """eq 2.10: sum_i cost(gd_i) + |pr(i)| (cost(+) + cost(x))."""
        a, x = model.cost("add"), model.cost("mul")
        return sum(get_op(n.op).cost_gd(model, len(n.pr)) + len(n.pr) * (a + x) for n in self.nodes)

    def cost_forprop_formula(self, model: CostModel) -> float:
        """eq 2.11: sum_i cost(gd_i) + p |pr(i)| cost(x) + p (|pr(i)| - 1) cost(+)."""
        a, x, p = model.cost("add"), model.cost("mul"), self.p
        return sum(
            get_op(n.op).cost_gd(model, len(n.pr)) + p * len(n.pr) * x + p * (len(n.pr) - 1) * a
            for n in self.nodes
        )

    def omega_b(self, model: CostModel) -> float:
        """eq 2.5: max_i (cost(gd_i) + 2 max(cost(+), cost(x)) |pr(i)|) / cost(g_i)."""
        two_max = 2 * max(model.cost("add"), model.cost("mul"))
        return max(
            _ratio(
                get_op(n.op).cost_gd(model, len(n.pr)) + two_max * len(n.pr),
                get_op(n.op).cost_g(model, len(n.pr)),
            )
            for n in self.nodes
        )

    def omega_f(self, model: CostModel) -> float:
        """Theorem 3 (ii): max_i (cost(gd_i) + p|pr(i)| cost(x) + p(|pr(i)|-1) cost(+)) / cost(g_i)."""
        a, x, p = model.cost("add"), model.cost("mul"), self.p
        return max(
            _ratio(
                get_op(n.op).cost_gd(model, len(n.pr)) + p * len(n.pr) * x + p * (len(n.pr) - 1) * a,
                get_op(n.op).cost_g(model, len(n.pr)),
            )
            for n in self.nodes
        )


def _ratio(num: float, den: float) -> float:
    return num / den if den > 0 else float("inf")
