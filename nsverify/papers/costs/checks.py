"""Counterexample searches for the report (the same properties as the tests, over more random instances)."""

from __future__ import annotations

import random
from fractions import Fraction

from nsverify.errors import NsverifyError
from nsverify.papers.costs.ad import backprop, forprop
from nsverify.papers.costs.counting import UNIT, CostModel
from nsverify.papers.costs.ops import D_RELU
from nsverify.papers.costs.prop4 import ad_set_two, ad_set_vertices
from nsverify.papers.costs.randprog import ALL_OPS, RATIONAL_OPS, random_inputs, random_program
from nsverify.papers.costs.relunet import ReluNet


def interpreter_counterexamples(n: int = 100, seed: int = 0) -> dict:
    """Counts of violated properties over ``n`` random programs each, and the largest counted ratio seen for
    D_ReLU programs under unit costs."""
    from nsverify.papers.costs.torch_ref import torch_value_and_grad

    out = dict(
        eq_2_10=0, eq_2_11=0, omega_b=0, five_relu=0, fwd_bwd=0, torch=0, max_relu_ratio=0.0, programs=n
    )
    models = [UNIT, CostModel(2, 0.5), CostModel(10, 0.0)]
    for s in range(seed, seed + n):
        rng = random.Random(s)
        p, k, model = rng.randint(1, 4), rng.randint(1, 16), models[s % 3]
        prog = random_program(s, p, k, ALL_OPS)
        x = random_inputs(s, p)
        b, f = backprop(prog, x, model), forprop(prog, x, model)
        out["eq_2_10"] += abs(b.cost - prog.cost_backprop_formula(model)) > 1e-9 * b.cost
        out["eq_2_11"] += abs(f.cost - prog.cost_forprop_formula(model)) > 1e-9 * f.cost
        out["omega_b"] += b.cost > prog.omega_b(model) * b.cost_program * (1 + 1e-12)
        v, g = torch_value_and_grad(prog, x)
        out["torch"] += any(abs(a - c) > 1e-9 * (1 + abs(c)) for a, c in zip(b.derivative, g))
        relu_prog = random_program(s, p, k, D_RELU)
        r = backprop(relu_prog, random_inputs(s, p), UNIT)
        out["five_relu"] += r.cost > 5 * r.cost_program
        out["max_relu_ratio"] = max(out["max_relu_ratio"], r.ratio)
        ex = random_program(s, p, k, RATIONAL_OPS, exact=True)
        xe = [Fraction(0)] * p if s % 2 else random_inputs(s, p, exact=True)
        try:
            out["fwd_bwd"] += backprop(ex, xe).derivative != forprop(ex, xe).derivative
        except NsverifyError:
            pass
    return out


def random_relu_net(rng: random.Random) -> tuple[ReluNet, list[int]]:
    widths = [rng.randint(1, 4) for _ in range(rng.randint(1, 3))]
    p = rng.randint(1, 3)
    dims = [p] + widths + [1]
    mats = [
        [[rng.choice([-1, 0, 0, 1, 2]) for _ in range(dims[i])] for _ in range(dims[i + 1])]
        for i in range(len(dims) - 1)
    ]
    relu = [[rng.random() < 0.8 for _ in range(w)] for w in widths]
    return ReluNet(mats, relu), [rng.choice([0, 0, 1, -1]) for _ in range(p)]


def prop4_counterexamples(n: int = 200, seed: int = 0) -> dict:
    bad = nonsingleton = 0
    for s in range(seed, seed + n):
        net, x = random_relu_net(random.Random(s))
        verts = ad_set_vertices(net, x)
        res = ad_set_two(net, x)
        ok = res.nonsingleton == (len(verts) > 1) and res.first in verts
        if res.nonsingleton:
            ok = ok and res.second in verts and res.second != res.first
        bad += not ok
        nonsingleton += res.nonsingleton
    return dict(networks=n, counterexamples=bad, nonsingleton=nonsingleton)
