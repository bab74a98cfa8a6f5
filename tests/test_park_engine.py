"""The Park engine's shared pieces: the one max-pool window geometry (against torch's own max-pool indices), the
one P_l test on both sides of feasibility, and the one rank test."""

from fractions import Fraction as F

import numpy as np
import pytest
import torch

from nsverify.oracle.cones import check_gordan, holds
from nsverify.oracle.park.algorithm1 import pool_index_windows
from nsverify.oracle.park.cone import p_nonempty
from nsverify.oracle.park.rank import full_column_rank, independent_columns, nonsingular
from nsverify.oracle.park.walk import activation_of, chain
from nsverify.registry.windows import pool_window_table


def _geometries(n, seed):
    rng = np.random.default_rng(seed)
    for _ in range(n):
        nsp = int(rng.integers(1, 4))
        k = tuple(int(v) for v in rng.integers(1, 4, nsp))
        d = tuple(int(v) for v in rng.integers(1, 3, nsp))
        s = tuple(int(v) for v in rng.integers(1, 4, nsp))
        p = tuple(int(rng.integers(0, v // 2 + 1)) for v in k)  # torch: padding <= kernel / 2
        sp = tuple(int(d[i] * (k[i] - 1) + 1 + rng.integers(0, 5)) for i in range(nsp))
        yield sp, k, s, p, d, bool(rng.integers(0, 2))


@pytest.mark.parametrize("seed", range(4))
def test_window_table_matches_torch_max_pool_indices(seed):
    """Random 1-, 2- and 3-d geometries with padding, dilation and ceil_mode: the table's shape is torch's output
    shape, and on inputs with distinct values torch's returned index is the maximum over the table's window."""
    pools = {1: torch.nn.functional.max_pool1d, 2: torch.nn.functional.max_pool2d, 3: torch.nn.functional.max_pool3d}
    for sp, k, s, p, d, ceil in _geometries(12, seed):
        x = torch.randperm(int(np.prod(sp)), generator=torch.Generator().manual_seed(seed)).double().reshape(1, *sp)
        out, idx = pools[len(sp)](x, k, s, p, d, ceil_mode=ceil, return_indices=True)
        shape, table = pool_window_table(sp, k, s, p, d, ceil)
        assert shape == tuple(out.shape[1:]), (sp, k, s, p, d, ceil)
        flat = x.reshape(-1)
        for j, row in enumerate(table.tolist()):
            real = [i for i in row if i >= 0]
            assert real and max(real, key=lambda i: flat[i]) == idx.reshape(-1)[j]
            assert all(0 <= i < flat.numel() for i in real)


def test_window_table_marks_padding_and_per_sample_index_windows():
    shape, table = pool_window_table((3,), 2, 2, padding=1)
    assert shape == (2,) and table.tolist() == [[-1, 0], [1, 2]]
    wins = pool_index_windows((2, 3), 2, 2, 1)  # two channels: the second plane starts at 3
    assert wins.tolist() == [[-1, 0], [1, 2], [-1, 3], [4, 5]]
    assert pool_window_table((4, 4), 2)[1].tolist()[:2] == [[0, 1, 4, 5], [2, 3, 6, 7]]  # stride None: kernel


@pytest.mark.parametrize("sparse", [False, True])
def test_p_nonempty_on_both_sides(sparse):
    def rows(dense):
        return [{j: v for j, v in enumerate(r) if v} for r in dense] if sparse else dense

    open_rows = [[1, 0, 0, 0], [1, 1, 0, 0], [0, 0, 2, -1], [0, 0, 0, -1]]  # two coordinate-disjoint groups
    r = p_nonempty(rows(open_rows))
    assert r.status == "nonempty" and r.components == 2 and r.nonempty
    assert holds([{j: F(v) for j, v in enumerate(a) if v} for a in open_rows], r.witness)
    assert (r.point is None) == sparse
    empty_rows = [[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [-1, -1, 0, 0]]  # one group empty, one open
    e = p_nonempty(rows(empty_rows))
    assert e.status == "empty" and not e.nonempty and e.point is None
    assert check_gordan([{j: F(v) for j, v in enumerate(a) if v} for a in empty_rows], e.farkas)
    assert e.farkas[2] == 0  # the open group takes no part in the certificate
    # x2 < x1 < (1 + 2^-40) x2: a cone of width 2^-40 for x2 > 0, empty for x2 < 0; decided exactly either way
    eps = F(1, 2**40)
    assert p_nonempty([[1, -1], [-1, 1 + eps], [0, 1]]).status == "nonempty"
    thin = p_nonempty([[1, -1], [-1, 1 + eps], [0, -1]])
    assert thin.status == "empty" and check_gordan([{0: F(1), 1: F(-1)}, {0: F(-1), 1: 1 + eps}, {1: F(-1)}],
                                                   thin.farkas)


def test_rank_test_float_and_exact_forms_agree():
    Z = np.empty((2, 3), dtype=object)
    Z[:] = [[F(1, 3), F(2, 3), F(0)], [F(2, 3), F(4, 3), F(1, 7)]]
    assert independent_columns(Z) == [0, 2]
    z = torch.tensor([[0.5, 1.0], [1.0, 2.0], [0.0, 0.25]], dtype=torch.float64)  # N x B, columns independent
    assert full_column_rank(z) and independent_columns(z.t()) == [0, 2]
    assert not full_column_rank(torch.tensor([[1.0, 2.0], [2.0, 4.0]]))
    assert nonsingular([[F(1, 2**60), F(0)], [F(0), F(1)]]) and not nonsingular([[1, 2], [2, 4]])
    assert independent_columns(np.empty((0, 3), dtype=object)) == [] and nonsingular([])


def test_one_activation_map_and_the_exact_chain():
    assert [activation_of("call_module", c) for c in ("ReLU", "LeakyReLU", "Hardtanh", "Tanh")] == [
        "relu", "leaky_relu", "hardtanh", None]
    assert activation_of("call_function", "relu_") == "relu" and activation_of("call_method", "abs") is None
    net = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Sequential(torch.nn.ReLU(), torch.nn.Linear(2, 1)))
    assert [n for n, _ in chain(net)] == ["0", "1.0", "1.1"]

    class Branch(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)

        def forward(self, x):
            return self.a(x) + self.b(x)

    from nsverify.errors import UnsupportedOpError

    with pytest.raises(UnsupportedOpError):
        chain(torch.nn.Sequential(Branch()))


def test_park_proxies_are_derived_from_the_registry():
    """The certificates' one-sided proxies come from the registry: PyTorch's relu and leaky_relu take the left
    derivative at their one kink; abs (mix=1/2) and the two-kink ops are not in the map."""
    from nsverify.oracle.certificates import park_proxies

    assert park_proxies() == {"relu": "left", "leaky_relu": "left"}
