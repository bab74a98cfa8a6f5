"""Proposition 4 of Boustany, Ch.2 (proof in Sec. 2.9.4): two distinct elements of the AD conservative gradient D^a_F(x)
(Definition 4) in polynomial time, by reachability in a layered graph, and a brute-force check over vertex
assignments.

D^a_F(x) = { M_1^T D_1 M_2^T D_2 ... M_{L-1}^T D_{L-1} M_L^T }, D_i diagonal, entries fixed by the sign
pattern at x except at ReLU units with zero pre-activation, where they range over [0, 1].  The expression is
multilinear in those free entries; it is non-constant iff some monomial has a nonzero coefficient iff, in the
graph whose nodes are the free units (plus the p input coordinates and a sink) and whose edge (i,k) -> (j,l)
carries the entry [M_{i+1}^T Qbar_{i+1} ... Qbar_{j-1} M_j^T]_{k,l}, a path with all-nonzero edges leads from
an input coordinate through at least one free unit to the sink.  A path with the fewest free units gives the
second element (free units on the path set to 1, the rest 0); the first element sets every free unit to 0
(ReLU'(0) = 0).
"""

from __future__ import annotations

import itertools
from collections import deque
from dataclasses import dataclass
from fractions import Fraction
from typing import Sequence

from nsverify.errors import TooManyPieces
from nsverify.papers.costs.relunet import ReluNet

Vec = tuple[Fraction, ...]


def _T(M):
    return [list(c) for c in zip(*M)]


def _mm(A, B):
    Bt = list(zip(*B))
    return [[sum(a * b for a, b in zip(row, col) if a and b) for col in Bt] for row in A]


def _diag_right(A, d):
    return [[a * dv for a, dv in zip(row, d)] for row in A]


def free_units(net: ReluNet, x: Sequence) -> tuple[list[list[int]], list[list[int]]]:
    """(qbar, free): qbar[i][k] = fixed diagonal entry of D_{i+1} (1 identity/positive, 0 negative or free);
    free[i] = indices of ReLU units of layer i+1 with zero pre-activation."""
    pre = net.preactivations(x)
    qbar, free = [], []
    for z, flags in zip(pre, net.relu):
        qbar.append([1 if (not f or v > 0) else 0 for v, f in zip(z, flags)])
        free.append([k for k, (v, f) in enumerate(zip(z, flags)) if f and v == 0])
    return qbar, free


def ad_element(net: ReluNet, x: Sequence, choice: dict[tuple[int, int], Fraction] | None = None) -> Vec:
    """M_1^T D_1 ... M_L^T with free entries from ``choice`` ((layer 0-based, unit) -> value; default 0)."""
    qbar, free = free_units(net, x)
    choice = choice or {}
    g = [[v] for v in net.mats[-1][0]]  # M_L^T column
    for i in range(len(net.mats) - 2, -1, -1):
        d = list(qbar[i])
        for k in free[i]:
            d[k] = choice.get((i, k), 0)
        g = [[dv * row[0]] for dv, row in zip(d, g)]
        g = _mm(_T(net.mats[i]), g)
    return tuple(Fraction(r[0]) for r in g)


@dataclass
class Prop4Result:
    nonsingleton: bool
    first: Vec
    second: Vec | None
    path: list[tuple[int, int]]  # free units (layer, unit) on the shortest path
    n_free: int
    n_edges: int


def ad_set_two(net: ReluNet, x: Sequence) -> Prop4Result:
    """Proposition 4: decide whether D^a_F(x) is a singleton and return two distinct elements if not."""
    qbar, free = free_units(net, x)
    L = len(net.mats)  # matrices M_1..M_L; hidden layers 1..L-1
    G = [_T(M) for M in net.mats]  # G[i] = M_{i+1}^T, shape p_i x p_{i+1}
    # R[(i, j)] = G[i] Qbar_{i+1} G[i+1] ... Qbar_{j-1} G[j-1], rows: layer i units, cols: layer j units
    # (layer 0 = input coordinates, layer L = the sink)
    R = {}
    for i in range(L):
        acc = G[i]
        R[(i, i + 1)] = acc
        for j in range(i + 2, L + 1):
            acc = _mm(_diag_right(acc, qbar[j - 2]), G[j - 1])
            R[(i, j)] = acc
    # BFS over free units by number of free units on the path, from all input coordinates
    dist, parent = {}, {}
    frontier = deque()
    n_edges = 0
    for j in range(1, L):
        for l in free[j - 1]:
            if any(R[(0, j)][r][l] != 0 for r in range(net.p)):
                dist[(j, l)] = 1
                parent[(j, l)] = None
                frontier.append((j, l))
    while frontier:
        i, k = frontier.popleft()
        for j in range(i + 1, L):
            for l in free[j - 1]:
                if R[(i, j)][k][l] != 0:
                    n_edges += 1
                    if (j, l) not in dist:
                        dist[(j, l)] = dist[(i, k)] + 1
                        parent[(j, l)] = (i, k)
                        frontier.append((j, l))
    ends = [(dist[u], u) for u in dist if R[(u[0], L)][u[1]][0] != 0]
    first = ad_element(net, x)
    nfree = sum(len(f) for f in free)
    if not ends:
        return Prop4Result(False, first, None, [], nfree, n_edges)
    _, u = min(ends)
    path = []
    while u is not None:
        path.append(u)
        u = parent[u]
    path.reverse()
    second = ad_element(net, x, {(i - 1, k): 1 for i, k in path})
    if second == first:  # cannot happen by the minimality argument; never return a wrong verdict silently
        raise ArithmeticError("Proposition 4 path gave equal elements (bug)")
    return Prop4Result(True, first, second, [(i - 1, k) for i, k in path], nfree, n_edges)


def ad_set_vertices(net: ReluNet, x: Sequence, max_free: int = 16) -> set[Vec]:
    """Brute force: D^a_F(x) at every vertex of [0,1]^free (2^free products).  The expression is multilinear,
    so D^a_F(x) is a singleton iff this set is."""
    _, free = free_units(net, x)
    units = [(i, k) for i, f in enumerate(free) for k in f]
    if len(units) > max_free:
        raise TooManyPieces(
            f"{len(units)} ReLU units have zero pre-activation: brute force needs 2^{len(units)} "
            f"products (limit 2^{max_free}). Use ad_set_two (Proposition 4, polynomial)."
        )
    out = set()
    for bits in itertools.product((0, 1), repeat=len(units)):
        out.add(ad_element(net, x, dict(zip(units, bits))))
    return out
