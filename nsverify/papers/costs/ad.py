"""Algorithms 1, 1' and 2 of Boustany, Ch.2 (Secs. 2.4.1-2.4.2) with per-operation counters.

``evaluate`` runs Algorithm 1 (g_i), ``backprop``/``forprop`` run Algorithm 1' (gd_i) then the backward or
forward sweep of Algorithm 2, counting every primitive as it executes.  Works over any number type that
supports + and * (float, fractions.Fraction for the rational ops).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Sequence

from nsverify.errors import NsverifyError
from nsverify.papers.costs.counting import UNIT, CostModel, OpCounter
from nsverify.papers.costs.ops import get_op
from nsverify.papers.costs.program import Program


@dataclass
class CostReport:
    value: Any
    derivative: list
    cost_program: float  # eq 2.8, counted while running Algorithm 1
    cost_alg1prime: float  # eq 2.9, counted while running Algorithm 1'
    cost_sweep: float  # counted in the backward/forward loop of Algorithm 2
    counts: Counter = field(default_factory=Counter)

    @property
    def cost(self) -> float:
        return self.cost_alg1prime + self.cost_sweep

    @property
    def ratio(self) -> float:
        return self.cost / self.cost_program if self.cost_program > 0 else float("inf")


def _check_input(prog: Program, x: Sequence) -> list:
    prog.validate()
    x = list(x)
    if len(x) != prog.p:
        raise NsverifyError(f"the program has p={prog.p} inputs but {len(x)} values were given.")
    return x


def evaluate(prog: Program, x: Sequence, model: CostModel = UNIT, counter: OpCounter | None = None):
    """Algorithm 1: return (output, counter)."""
    c = counter or OpCounter(model)
    mem = _check_input(prog, x)
    for node in prog.nodes:
        mem.append(get_op(node.op).g(c, [mem[j] for j in node.pr], node.param))
    return mem[-1], c


def _alg1prime(prog: Program, x: Sequence, c: OpCounter):
    mem = _check_input(prog, x)
    ws = []
    for node in prog.nodes:
        v, w = get_op(node.op).gd(c, [mem[j] for j in node.pr], node.param)
        mem.append(v)
        ws.append(w)
    return mem, ws


def backprop(prog: Program, x: Sequence, model: CostModel = UNIT) -> CostReport:
    """Algorithm 2, backward mode: returns the output, an element of D_P(x), and the counted costs."""
    _, c0 = evaluate(prog, x, model)
    c1 = OpCounter(model)
    mem, ws = _alg1prime(prog, x, c1)
    c2 = OpCounter(model)
    zero = 0 * mem[0]
    v = [zero] * prog.m
    v[-1] = zero + 1
    p = prog.p
    for t in range(prog.m - 1, p - 1, -1):
        node = prog.nodes[t - p]
        for j, w in zip(node.pr, ws[t - p]):
            v[j] = c2.add(v[j], c2.mul(v[t], w))
    return CostReport(mem[-1], v[:p], c0.cost, c1.cost, c2.cost, c1.counts + c2.counts)


def forprop(prog: Program, x: Sequence, model: CostModel = UNIT) -> CostReport:
    """Algorithm 2, forward mode: propagates the p-vectors dx_i/dx; same element of D_P(x) as backprop."""
    _, c0 = evaluate(prog, x, model)
    c1 = OpCounter(model)
    mem, ws = _alg1prime(prog, x, c1)
    c2 = OpCounter(model)
    p = prog.p
    zero = 0 * mem[0]
    dx = [[zero + (1 if k == i else 0) for k in range(p)] for i in range(p)]
    for node, w in zip(prog.nodes, ws):
        acc = None
        for j, wj in zip(node.pr, w):
            term = [c2.mul(dx[j][k], wj) for k in range(p)]
            acc = term if acc is None else [c2.add(acc[k], term[k]) for k in range(p)]
        dx.append(acc)
    return CostReport(mem[-1], dx[-1], c0.cost, c1.cost, c2.cost, c1.counts + c2.counts)
