"""Linear ReLU networks with skip connections, eq (2.13) of Boustany, Ch.2 (Sec. 2.9.2):
F(x) = M_L Phi_{L-1}(M_{L-1} ... Phi_1(M_1 x)), each Phi_i applying ReLU or the identity per coordinate.

Includes Lemma 3 (max of 2^k numbers with k ReLU layers of width <= 3 * 2^(k-1), weights in {-1, 0, 1}) and
the 3-SAT reduction of Theorem 6 (proof in Sec. 2.9.3): F >= 0, F(0) = 0, and F > 0 somewhere iff the formula is
satisfiable, with log2(n) + 3 ReLU layers of width <= 6n.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Sequence

from nsverify.errors import NsverifyError

Matrix = list[list[int]]


@dataclass
class ReluNet:
    mats: list[Matrix]  # M_1 .. M_L; M_i has p_i rows and p_{i-1} columns, M_L has one row
    relu: list[list[bool]]  # relu[i][k]: coordinate k of hidden layer i+1 uses ReLU (else identity)

    def __post_init__(self):
        if not self.mats:
            raise NsverifyError("a ReLU network needs at least one matrix M_1.")
        if len(self.relu) != len(self.mats) - 1:
            raise NsverifyError(
                f"{len(self.mats)} matrices need {len(self.mats) - 1} activation layers, "
                f"got {len(self.relu)}."
            )
        for i, M in enumerate(self.mats):
            if not M or any(len(r) != len(M[0]) for r in M):
                raise NsverifyError(f"M_{i + 1} is empty or ragged.")
            if i > 0 and len(M[0]) != len(self.mats[i - 1]):
                raise NsverifyError(
                    f"M_{i + 1} has {len(M[0])} columns but layer {i} has {len(self.mats[i - 1])} units."
                )
            if i < len(self.relu) and len(self.relu[i]) != len(M):
                raise NsverifyError(
                    f"activation layer {i + 1} has {len(self.relu[i])} flags for {len(M)} units."
                )
        if len(self.mats[-1]) != 1:
            raise NsverifyError("the last matrix M_L must have one row (a scalar network).")

    @property
    def p(self) -> int:
        return len(self.mats[0][0])

    @property
    def widths(self) -> list[int]:
        return [len(M) for M in self.mats[:-1]]

    @property
    def n_relu_layers(self) -> int:
        return sum(any(flags) for flags in self.relu)

    @property
    def n_neurons(self) -> int:
        return sum(sum(f) for f in self.relu)

    def size(self) -> int:
        """Representation size p_{L-1} + sum_i p_i p_{i-1} + p_i (Sec. 2.9.2)."""
        return len(self.mats[-1][0]) + sum(len(M) * len(M[0]) + len(M) for M in self.mats[:-1])

    def entries(self) -> set:
        return {v for M in self.mats for r in M for v in r}

    def preactivations(self, x: Sequence) -> list[list]:
        """Exact pre-activations of every hidden layer at x (Fractions in, Fractions out)."""
        if len(x) != self.p:
            raise NsverifyError(f"the network has {self.p} inputs, got {len(x)} values.")
        h, out = [Fraction(v) for v in x], []
        for M, flags in zip(self.mats[:-1], self.relu):
            z = [sum(a * b for a, b in zip(row, h)) for row in M]
            out.append(z)
            h = [max(v, 0) if f else v for v, f in zip(z, flags)]
        return out

    def __call__(self, x: Sequence) -> Fraction:
        h = [Fraction(v) for v in x]
        for M, flags in zip(self.mats[:-1], self.relu):
            h = [sum(a * b for a, b in zip(row, h)) for row in M]
            h = [max(v, 0) if f else v for v, f in zip(h, flags)]
        return sum(a * b for a, b in zip(self.mats[-1][0], h))


def to_torch_fn(net: ReluNet):
    """The network as a torch function of a 1-D input tensor (for torch autograd and the issue-3 oracle)."""
    import torch

    def fn(x):
        h = x
        for M, flags in zip(net.mats[:-1], net.relu):
            h = torch.tensor(M, dtype=x.dtype) @ h
            h = torch.where(torch.tensor(flags), torch.relu(h), h)
        return (torch.tensor(net.mats[-1], dtype=x.dtype) @ h).sum()

    return fn


def matmul(A: Matrix, B: Matrix) -> Matrix:
    return [[sum(A[i][k] * B[k][j] for k in range(len(B))) for j in range(len(B[0]))] for i in range(len(A))]


def blockdiag(*blocks: Matrix) -> Matrix:
    cols = sum(len(b[0]) for b in blocks)
    out, off = [], 0
    for b in blocks:
        for r in b:
            out.append([0] * off + list(r) + [0] * (cols - off - len(r)))
        off += len(b[0])
    return out


_A = [[1, -1], [0, 1], [0, -1]]
_B = [[1, 1, -1]]


def lemma3_max(k: int) -> list[Matrix]:
    """Matrices M_1..M_{k+1} of Lemma 3: B ReLU(M_k ... ReLU(M_1 x)) = max of the 2^k inputs."""
    if k < 1:
        raise NsverifyError(f"Lemma 3 needs k >= 1 (2^k >= 2 inputs), got k={k}.")
    mats = [_A, _B]
    for _ in range(1, k):
        doubled = [blockdiag(M, M) for M in mats]
        mats = doubled[:-1] + [matmul(_A, doubled[-1]), _B]
    return mats


def max_network(k: int) -> ReluNet:
    mats = lemma3_max(k)
    return ReluNet(mats, [[True] * len(M) for M in mats[:-1]])


def _clause_literal_matrix(clause: Sequence[int], p: int) -> Matrix:
    """4 x p literal rows (a, b, c, c) ordered so that the pair (a, b) is not complementary (keeps the first
    layer's entries in {-1, 0, 1} after composing with A)."""
    lits = list(clause)
    for a, b, c in ((0, 1, 2), (0, 2, 1), (1, 2, 0)):
        if lits[a] != -lits[b]:
            order = [lits[a], lits[b], lits[c], lits[c]]
            break
    rows = []
    for lit in order:
        r = [0] * p
        r[abs(lit) - 1] = 1 if lit > 0 else -1
        rows.append(r)
    return rows


def sat_network(clauses: Sequence[Sequence[int]], p: int) -> ReluNet:
    """Theorem 6's network for a 3-CNF formula (DIMACS literals +-v, v in 1..p):
    F(x) = min_clauses ReLU(max(literals)), clauses padded to n = 2^k with tautologies (1, -1, 1)."""
    from nsverify.papers.costs.sat import check_formula

    check_formula(clauses, p)
    cl = [tuple(c) for c in clauses]
    n = 1
    while n < len(cl):
        n *= 2
    cl += [(1, -1, 1)] * (n - len(cl))
    k = n.bit_length() - 1
    m1, m2, m3 = lemma3_max(2)  # max of 4: 6 x 4, 3 x 6, 1 x 3
    L1 = blockdiag(*[matmul(m1, _clause_literal_matrix(c, p)) for c in cl])
    # blockdiag stacks columns per clause; all clauses read the same x: sum the column blocks
    L1 = [[sum(r[j * p + v] for j in range(n)) for v in range(p)] for r in L1]
    L2 = blockdiag(*[m2] * n)
    L3 = blockdiag(*[m3] * n)  # outer ReLU of each clause
    mats = [L1, L2, L3]
    if k == 0:
        mats.append([[1]])
    else:
        mx = lemma3_max(k)  # min(c) = -max(-c)
        mats.append([[-v for v in r] for r in mx[0]])
        mats += mx[1:-1]
        mats.append([[-v for v in r] for r in mx[-1]])
    return ReluNet(mats, [[True] * len(M) for M in mats[:-1]])
