"""Random piecewise-affine programs at exact tie points, and the soundness/completeness check of the oracle.

A generated program combines affine leaves ``a.w + c`` (integer a; c chosen so that most leaves vanish exactly
at the point, which makes kinks and ties coincide) with relu, abs, torch.maximum, torch.max / amax over a
stack, max_pool1d, a Python ``if a > b`` branch (the max1 idiom) and integer linear combinations.

:func:`check_one` compares the oracle's Bouligand set with gradients computed exactly at generic points
w + eps*d very close to w: every such gradient must be in ``bouligand`` (soundness) and every vertex of
``bouligand`` must be realised by one (completeness), and the verdict must never be "unknown".
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from fractions import Fraction

import torch
import torch.nn.functional as Fn

F = Fraction
EPS = F(1, 2**30)


def _leaf(rng: random.Random, n: int, w0):
    a = [rng.randint(-3, 3) for _ in range(n)]
    if not any(a):
        a[rng.randrange(n)] = 1
    base = sum(F(x) * y for x, y in zip(a, w0))
    c = -base if rng.random() < 0.75 else -base + F(rng.randint(-4, 4), 2)
    at = torch.tensor([float(x) for x in a], dtype=torch.float64)
    cf = float(c)
    desc = f"({'+'.join(f'{x}*w{i}' for i, x in enumerate(a) if x)}{cf:+g})"
    return (lambda w: (at * w).sum() + cf), desc


def _py_max(x, y):
    return x if x > y else y  # data-dependent Python branch (the max1 idiom)


def random_program(rng: random.Random, n: int, w0, depth: int = 3):
    """(fn, description): a random piecewise-affine scalar program of w."""
    if depth == 0 or rng.random() < 0.2:
        return _leaf(rng, n, w0)
    kind = rng.choice(
        [
            "relu",
            "abs",
            "maximum",
            "max",
            "pool",
            "branch",
            "lin",
            "relu",
            "min",
            "sort",
            "topk",
            "hardtanh",
            "leaky",
            "clamp",
            "where",
        ]
    )
    if kind in ("relu", "abs", "hardtanh", "leaky", "clamp"):
        f, d = random_program(rng, n, w0, depth - 1)
        lo = F(rng.randint(-2, 0), 2)
        hi = lo + F(rng.randint(1, 3), 2)
        op = {
            "relu": torch.relu,
            "abs": torch.abs,
            "leaky": lambda x: Fn.leaky_relu(x, 0.25),
            "hardtanh": lambda x: Fn.hardtanh(x, float(lo), float(hi)),
            "clamp": lambda x: torch.clamp(x, min=float(lo), max=float(hi)),
        }[kind]
        return (lambda w: op(f(w))), f"{kind}{d}"
    if kind == "lin":
        (f, d1), (g, d2) = random_program(rng, n, w0, depth - 1), random_program(rng, n, w0, depth - 1)
        a, b = rng.choice([-2, -1, 1, 2]), rng.choice([-2, -1, 1, 2])
        return (lambda w: a * f(w) + b * g(w)), f"({a}*{d1}+{b}*{d2})"
    m = rng.randint(2, 3)
    subs = [random_program(rng, n, w0, depth - 1) for _ in range(m)]
    fs = [s[0] for s in subs]
    ds = ",".join(s[1] for s in subs)
    if kind in ("sort", "topk"):
        wts = torch.tensor([float(rng.randint(-2, 3)) for _ in range(m)], dtype=torch.float64)

        def srt(w):
            x = torch.stack([f(w) for f in fs])
            if kind == "sort":
                return (torch.sort(x)[0] * wts).sum()
            return torch.topk(x, 2).values.sum()

        return srt, f"{kind}({ds})"
    if kind == "where":
        return (
            lambda w: torch.where(fs[0](w) >= fs[1](w), fs[0](w) - fs[1](w), 2 * (fs[1](w) - fs[0](w)))
        ), f"where({ds})"
    if kind == "maximum":
        return (lambda w: torch.maximum(fs[0](w), fs[1](w))), f"maximum({ds})"
    if kind == "min":
        return (lambda w: torch.minimum(fs[0](w), fs[1](w))), f"minimum({ds})"
    if kind == "max":
        return (lambda w: torch.max(torch.stack([f(w) for f in fs]))), f"max({ds})"
    if kind == "pool":

        def pool(w):
            y = torch.stack([f(w) for f in fs]).reshape(1, 1, m)
            return Fn.max_pool1d(y, 2, 1).sum()

        return pool, f"sum(maxpool({ds}))"

    def branch(w):
        best = fs[0](w)
        for f in fs[1:]:
            best = _py_max(f(w), best)
        return best

    return branch, f"max1({ds})"


@dataclass
class FuzzResult:
    description: str
    status: str
    exact: bool
    vertices: int
    samples: int  # generic nearby points checked
    unsound: int  # nearby gradients missing from bouligand
    unrealised: int  # bouligand vertices not realised by a nearby generic point
    lps: int
    naive: int  # 2^(branch sites) (binary sites) for comparison


def _gradient_at(fn, w, values):
    from nsverify.oracle.interp import Evaluation

    r = Evaluation(fn, w, values=values).forward()
    # a site is genuine when its outcome depends on the direction: a kink argument with a non-zero slope, or a
    # tie between entries with different slopes (ties between identical functions persist everywhere)
    genuine = sum(1 for s in r.sites if (len(s.slopes) > 1 if "tied" in s.extra else any(s.slopes)))
    return r.gradient, genuine


def check_one(rng: random.Random, n: int | None = None, depth: int = 3, samples: int = 8) -> FuzzResult:
    import nsverify

    n = n or rng.randint(1, 3)
    w0 = [F(rng.randint(-4, 4), 2) for _ in range(n)]
    fn, desc = random_program(rng, n, w0, depth)
    w = torch.tensor([float(x) for x in w0], dtype=torch.float64)
    v = nsverify.check_gradient(fn, w)
    B = set(map(tuple, v.bouligand))
    unsound = checked = 0
    for _ in range(samples):
        d = [F(rng.randint(-1000, 1000), 1000) for _ in range(n)]
        g, nsites = _gradient_at(fn, w, [a + EPS * b for a, b in zip(w0, d)])
        if nsites:  # not a generic point (measure zero): skip
            continue
        checked += 1
        unsound += tuple(g) not in B
    # completeness: each vertex is realised at a generic point along its witness direction
    from nsverify.oracle.interp import Evaluation
    from nsverify.oracle.pieces import enumerate_pieces

    en = enumerate_pieces(Evaluation(fn, w))
    unrealised = 0
    for vert in B:
        ok = False
        for leaf in en.leaves:
            if tuple(leaf.gradient) != vert:
                continue
            d = [leaf.witness.get(i, F(0)) if leaf.witness else F(0) for i in range(n)]
            g, nsites = _gradient_at(fn, w, [a + EPS * b for a, b in zip(w0, d)])
            if nsites == 0 and tuple(g) == vert:
                ok = True
                break
        unrealised += not ok
    return FuzzResult(
        desc,
        v.status,
        v.exact,
        len(B),
        checked,
        unsound,
        unrealised,
        v.stats["lps"],
        2 ** v.stats["branch_sites"],
    )


def run_fuzz(count: int, seed: int = 0, depth: int = 3, samples: int = 8) -> list[FuzzResult]:
    rng = random.Random(seed)
    return [check_one(rng, depth=depth, samples=samples) for _ in range(count)]


def summarize(results: list[FuzzResult]) -> dict:
    return {
        "programs": len(results),
        "unknown": sum(r.status == "unknown" for r in results),
        "inexact": sum(not r.exact for r in results),
        "nearby_points": sum(r.samples for r in results),
        "unsound": sum(r.unsound for r in results),
        "unrealised": sum(r.unrealised for r in results),
        "vertices": sum(r.vertices for r in results),
        "member": sum(r.status == "member" for r in results),
        "not_member": sum(r.status == "not_member" for r in results),
    }
