"""Random programs over the dictionary (for property tests) and MLP programs (for the depth/width sweep).

Random programs keep every log/inv argument away from its singularity by construction: log and inv are only
applied to ``exp(z) + 1/2`` or ``|z| + 1/2`` subprograms, and exp to ``c * z`` with |c| <= 1/4.
"""

from __future__ import annotations

import random
from fractions import Fraction

from nsverify.papers.costs.program import OpNode, Program

SMOOTH_ARGS = ("add", "mul", "addc", "mulc", "inv", "exp", "log", "relu")
ALL_OPS = SMOOTH_ARGS + ("mulrelu", "abs", "elu", "maxpool3x3", "l1", "linf")
RATIONAL_OPS = ("add", "mul", "addc", "mulc", "inv", "relu", "mulrelu", "abs", "maxpool3x3", "l1", "linf")


def _const(rng: random.Random, exact: bool):
    k = rng.choice([-3, -2, -1, 1, 2, 3])
    return Fraction(k, 4) if exact else k / 4


def random_program(seed: int, p: int = 3, n_ops: int = 8, ops=ALL_OPS, exact: bool = False) -> Program:
    """A random single-output program on ``p`` inputs with about ``n_ops`` dictionary nodes from ``ops``."""
    rng = random.Random(seed)
    prog = Program(p, [])
    if p > 1:
        prog.add("add", 0, 1)
    while len(prog.nodes) < n_ops:
        op = rng.choice(ops)
        avail = list(range(prog.m))
        pick = lambda avail=avail: rng.choice(avail[-4:] if rng.random() < 0.6 else avail)
        if op in ("add", "mul", "mulrelu"):
            prog.add(op, pick(), pick())
        elif op in ("addc", "mulc"):
            prog.add(op, pick(), param=_const(rng, exact))
        elif op in ("inv", "log"):
            j = pick()
            if "exp" in ops and rng.random() < 0.5:
                j = prog.add("exp", prog.add("mulc", j, param=0.25))
            else:
                j = prog.add("abs", j) if "abs" in ops else prog.add("mul", j, j)
            j = prog.add("addc", j, param=Fraction(1, 2) if exact else 0.5)
            prog.add(op, j)
        elif op == "exp":
            prog.add("exp", prog.add("mulc", pick(), param=0.25))
        elif op == "elu":
            prog.add("elu", pick(), param=1.0)
        elif op == "maxpool3x3":
            patch = [[_const(rng, exact) for _ in range(5)] for _ in range(5)]
            prog.add(op, *[pick() for _ in range(9)], param=patch)
        elif op in ("l1", "linf"):
            prog.add(op, *[pick() for _ in range(rng.randint(1, 4))])
        else:  # relu, abs
            prog.add(op, pick())
    return prog


def random_inputs(seed: int, p: int, exact: bool = False, scale: float = 2.0) -> list:
    rng = random.Random(10_000 + seed)
    if exact:
        return [Fraction(rng.randint(-64, 64), 32) for _ in range(p)]
    return [rng.uniform(-scale, scale) for _ in range(p)]


def mlp_program(widths: list[int], seed: int = 0) -> Program:
    """A ReLU MLP x -> W_L relu(... relu(W_1 x)) as a program on {x, +, mulrelu-free ReLU, xc}.

    Weights are constants (xc nodes), as in the thesis' Fig. 2.1 count of omega_b for a fixed network.
    """
    rng = random.Random(seed)
    p = widths[0]
    prog = Program(p, [])
    layer = list(range(p))
    for li, w in enumerate(widths[1:]):
        last = li == len(widths) - 2
        new = []
        for _ in range(w):
            acc = None
            for j in layer:
                t = _append(prog, "mulc", (j,), rng.gauss(0, 1) / len(layer) ** 0.5)
                acc = t if acc is None else _append(prog, "add", (acc, t))
            new.append(acc if last else _append(prog, "relu", (acc,)))
        layer = new
    if len(layer) > 1:
        acc = layer[0]
        for j in layer[1:]:
            acc = _append(prog, "add", (acc, j))
    prog.validate()
    return prog


def _append(prog: Program, op: str, pr: tuple, param=None) -> int:
    prog.nodes.append(OpNode(op, pr, param))
    return prog.m - 1
