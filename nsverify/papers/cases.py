"""Known-answer cases from the papers, written as the papers write them (with the
extraction errata corrected: Park et al.'s l(x1, x2) = x1 - x2 at Lemmas 2 and 7, and App. H's
f1 = g(w) - g(-w), f2 = g(w) - h(w)).

Shared by the tests (tests/test_oracle_known.py) and the report section (nsverify/sections/oracle.py).
Each case: a callable on a 1-D float64 tensor, the point, the expected status and (when it is a single point
or an interval in 1-D) the expected Clarke set.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import torch
import torch.nn.functional as Fn

F = Fraction


@dataclass(frozen=True)
class PaperCase:
    name: str
    source: str
    fn: object
    w: tuple
    expected: str  # "member" | "not_member"
    clarke: tuple | None = None  # expected Clarke set as a list of Bouligand vertices (exact), if stated
    exact_ad: tuple | None = None  # expected exact AD, if stated by the source


def _w(*xs):
    return torch.tensor([float(x) for x in xs], dtype=torch.float64)


relu = torch.relu


def h_right(x):
    """ReLU whose AD uses the right derivative 1 at 0 (Park et al.'s h), written with torch.where."""
    return torch.where(x >= 0, x, torch.zeros_like(x))


def max1(x):
    """Boustany's / Després's max1 (Table 1): a Python loop with a data-dependent branch."""
    res = x[0]
    for i in range(1, x.shape[0]):
        if x[i] > res:
            res = x[i]
    return res


def max2(x):
    return torch.max(x)


_X4 = torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=torch.float64)


def despres_table2(w):
    t = w[0]
    return max1(t * _X4) - max2(t * _X4)


_POOL = torch.nn.MaxPool1d(2, stride=1)


def despres_table3(w):
    t = w[0]
    a = _POOL(torch.stack([t, 4 * t]).reshape(1, 1, 2))
    b = _POOL(torch.stack([4 * t, t]).reshape(1, 1, 2))
    return (a - b).sum()


def park_lemma2(w):  # tau(X, w) = (Xw, -Xw), X* = 1, l(x1, x2) = x1 - x2 (errata)
    X = 1.0
    z = relu(torch.stack([X * w[0], -X * w[0]]))
    return z[0] - z[1]


def park_lemma2_twin(w):  # distinct biases: (Xw + b1, -Xw + b2)
    X = 1.0
    z = relu(torch.stack([X * w[0] + w[1], -X * w[0] + w[2]]))
    return z[0] - z[1]


def park_lemma3(w):  # B = 2, tau = X + w, X* = (3, -3), HardSigmoid, l = x1 + x2
    X = torch.tensor([3.0, -3.0], dtype=torch.float64)
    return Fn.hardsigmoid(X + w[0]).sum()


def park_lemma3_twin(w):  # batch 1 (Theorem 1): X* = 3
    return Fn.hardsigmoid(3.0 + w[0]).sum()


def park_lemma7(w):  # tau = (Xu + b, b, -Xu + b, b), maxpools of width 2, first index, l = x1 - x2
    u, b = w[0], w[1]
    X = 1.0
    y = torch.stack([X * u + b, b, -X * u + b, b]).reshape(1, 1, 4)
    z = Fn.max_pool1d(y, 2, 2).reshape(2)
    return z[0] - z[1]


def park_lemma7_twin(w):  # distinct biases b1..b4
    u = w[0]
    X = 1.0
    y = torch.stack([X * u + w[1], w[2], -X * u + w[3], w[4]]).reshape(1, 1, 4)
    z = Fn.max_pool1d(y, 2, 2).reshape(2)
    return z[0] - z[1]


def park_f1(w):  # f1(w) = g(w) - g(-w)  (errata), g = ReLU with g'(0) = 0
    return relu(w[0]) - relu(-w[0])


def park_f2(w):  # f2(w) = g(w) - h(w)  (errata), h'(0) = 1
    return relu(w[0]) - h_right(w[0])


def park_f3(w):  # f3(w) = h(-h(w))
    return h_right(-h_right(w[0]))


def park_f1_twin(w):
    return relu(w[0] + w[1]) - relu(-w[0] + w[2])


def park_f2_twin(w):
    return relu(w[0] + w[1]) - h_right(w[0] + w[2])


def park_f3_twin(w):
    return h_right(-h_right(w[0] + w[1]) + w[2])


def abs_sin(w):
    return w[0].abs() + torch.sin(w[0])


CASES: list[PaperCase] = [
    PaperCase("Park Lemma 2", "Park et al., Lemma 2", park_lemma2, (0,), "not_member", ((F(1),),), (F(0),)),
    PaperCase("Park Lemma 2, distinct biases", "Park et al., Theorem 1", park_lemma2_twin, (0, 0, 0), "member"),
    PaperCase("Park Lemma 3", "Park et al., Lemma 3", park_lemma3, (0,), "not_member", ((F(1, 6),),), (F(0),)),
    PaperCase("Park Lemma 3, batch 1", "Park et al., Theorem 1", park_lemma3_twin, (0,), "member",
              ((F(0),), (F(1, 6),))),
    PaperCase("Park Lemma 7", "Park et al., Lemma 7", park_lemma7, (0, 0), "not_member", ((F(1), F(0)),), (F(2), F(0))),
    PaperCase("Park Lemma 7, distinct biases", "Park et al., Theorem 8", park_lemma7_twin, (0, 0, 0, 0, 0), "member"),
    PaperCase("Park App. H f1", "Park et al., App. H", park_f1, (0,), "not_member", ((F(1),),), (F(0),)),
    PaperCase("Park App. H f2", "Park et al., App. H", park_f2, (0,), "not_member", ((F(0),),), (F(-1),)),
    PaperCase("Park App. H f3", "Park et al., App. H", park_f3, (0,), "not_member", ((F(0),),), (F(-1),)),
    PaperCase("Park App. H f1, distinct biases", "Park et al., Theorem 1", park_f1_twin, (0, 0, 0), "member"),
    PaperCase("Park App. H f2, distinct biases", "Park et al., Theorem 1", park_f2_twin, (0, 0, 0), "member"),
    PaperCase("Park App. H f3, distinct biases", "Park et al., Theorem 1", park_f3_twin, (0, 0, 0), "member"),
    PaperCase(
        "Despres Table 2 (max1 loop), t=0",
        "Després, Table 2",
        despres_table2,
        (0,),
        "not_member",
        ((F(0),),),
        (F(-3, 2),),
    ),
    PaperCase(
        "Despres Table 2 (max1 loop), t=0.5",
        "Després, Table 2",
        despres_table2,
        (0.5,),
        "member",
        ((F(0),),),
        (F(0),),
    ),
    PaperCase(
        "Despres Table 2 (max1 loop), t=-0.01",
        "Després, Table 2",
        despres_table2,
        (-0.01,),
        "member",
        ((F(0),),),
        (F(0),),
    ),
    PaperCase(
        "Despres Table 3 (maxpool pair), t=0",
        "Després, Table 3",
        despres_table3,
        (0,),
        "not_member",
        ((F(0),),),
        (F(-3),),
    ),
    PaperCase(
        "Despres Table 3 (maxpool pair), t=1",
        "Després, Table 3",
        despres_table3,
        (1,),
        "member",
        ((F(0),),),
        (F(0),),
    ),
    PaperCase("relu(t) at 0", "Boustany, Sec. 1.2.3", lambda w: relu(w[0]), (0,), "member", ((F(0),), (F(1),)),
              (F(0),)),
    PaperCase(
        "relu(-t)+t at 0",
        "Boustany, Sec. 1.2.3",
        lambda w: relu(-w[0]) + w[0],
        (0,),
        "member",
        ((F(0),), (F(1),)),
        (F(1),),
    ),
    PaperCase(
        "(relu(t)+relu(-t)+t)/2 at 0",
        "Boustany, Sec. 1.2.3",
        lambda w: (relu(w[0]) + relu(-w[0]) + w[0]) / 2,
        (0,),
        "member",
        ((F(0),), (F(1),)),
        (F(1, 2),),
    ),
    PaperCase("|x|+sin(x) at 0 (interval path)", "constructed", abs_sin, (0,), "member", ((F(0),), (F(2),)), (F(1),)),
]


def point(case: PaperCase) -> torch.Tensor:
    return _w(*case.w)


def kink_net(k: int, seed: int = 0):
    """``(fn, w)``: the pruning demonstration program, a loss with ``k`` simultaneous kink sites.

    A one-hidden-layer ReLU network (2 inputs, 4 hidden units, 1 output, MSE loss) on a batch of k samples, as
    a function of its first-layer parameters (12 coordinates).  Hidden unit 0 has zero incoming weights and
    bias (a dead-at-initialisation unit), so its pre-activation is exactly 0 on all k samples: k simultaneous
    kink sites, whose cones share the unit's 3 parameters; the other units are generic.  Naive enumeration
    solves one LP per sign pattern (2^k); the report's oracle section and asv_bench/benchmarks/oracle.py
    compare the pruned enumeration with that.
    """
    g = torch.Generator().manual_seed(seed)
    grid = torch.stack(torch.meshgrid(torch.arange(-8, 9), torch.arange(-8, 9), indexing="ij"), -1).reshape(-1, 2)
    X = grid[torch.randperm(len(grid), generator=g)[:k]].double() / 4  # k distinct dyadic inputs
    y = torch.randint(-4, 5, (k, 1), generator=g).double() / 2
    W2 = torch.tensor([[1.0, -0.5, 0.75, 2.0]], dtype=torch.float64)
    W1 = torch.randint(-4, 5, (4, 2), generator=g).double() / 2
    b1 = torch.randint(-4, 5, (4,), generator=g).double() / 2 + 0.0625  # never on a kink: generic units
    W1[0] = 0.0
    b1[0] = 0.0
    w = torch.cat([W1.reshape(-1), b1])

    def fn(wv):
        A = wv[:8].reshape(4, 2)
        b = wv[8:]
        h = torch.relu(X @ A.T + b)
        return ((h @ W2.T - y) ** 2).mean()

    return fn, w
