"""nsverify.papers.park.monitor: hooks on supported modules, tie/kink statistics, premise checks, clear errors."""

import pytest
import torch
from torch import nn

from nsverify.errors import UnsupportedOpError
from nsverify.papers.park.monitor import Monitor


def _step(model, mon, x, t):
    loss = nn.functional.cross_entropy(model(x), t)
    rec = mon.check()
    loss.backward()
    return rec


def test_dead_and_duplicated_windows_are_trivial_ties():
    torch.manual_seed(0)
    m = nn.Sequential(
        nn.Conv2d(1, 2, 3, padding=1), nn.ReLU(), nn.MaxPool2d(3, 2, 1), nn.Flatten(), nn.Linear(2 * 4 * 4, 3)
    )
    x = torch.zeros(2, 1, 8, 8)
    x[:, :, 2:6, 2:6] = 1.0  # a plateau: identical patches inside, zero background outside
    with Monitor(m) as mon:
        rec = _step(m, mon, x, torch.tensor([0, 1]))
    (chk,) = rec.layers
    assert chk.windows == 2 * 2 * 4 * 4 and chk.tied_windows > 0
    assert chk.nontrivial_windows == 0 and rec.correct == "yes"


def test_nontrivial_tie_in_linear_maxpool_is_found_and_checked():
    lin = nn.Linear(1, 4)
    with torch.no_grad():
        lin.weight[:] = torch.tensor([[1.0], [2.0], [0.0], [0.0]])
        lin.bias[:] = torch.tensor([0.0, -1.0, 3.0, 3.0])
    m = nn.Sequential(lin, nn.ReLU(), nn.Unflatten(1, (1, 4)), nn.MaxPool1d(2), nn.Flatten())
    x = torch.ones(1, 1)  # window 1: relu(1) = relu(2 - 1) = 1, different parameters -> non-trivial tie
    with Monitor(m, tie_test="exact") as mon:
        loss = m(x).sum()
        rec = mon.check()
    (chk,) = rec.layers
    assert chk.tied_windows == 2 and chk.nontrivial_windows == 2
    assert chk.p.status == "nonempty" and rec.correct == "yes"
    with Monitor(m, tie_test="jvp") as mon:
        m(x).sum()
        rec2 = mon.check()
    assert rec2.layers[0].nontrivial_windows == 2
    del loss


def test_kink_touch_and_rank_test_on_fully_connected():
    m = nn.Sequential(nn.Linear(3, 2), nn.Hardtanh(), nn.Linear(2, 2))
    with torch.no_grad():
        m[0].weight[:] = torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
        m[0].bias.zero_()
    x = torch.tensor([[1.0, 0.5, 0.0], [0.25, -1.0, 2.0]])  # y[0,0] = 1 and y[1,1] = -1: kinks of hardtanh
    with Monitor(m) as mon:
        m(x).sum()
        rec = mon.check()
    assert rec.layers[0].kink_touches == 2
    assert rec.rank_ok == {"1": True}  # the two samples are linearly independent


def test_inplace_relu_is_restored():
    m = nn.Sequential(nn.Linear(2, 2), nn.ReLU(inplace=True))
    mon = Monitor(m)
    assert m[1].inplace is False
    mon.close()
    assert m[1].inplace is True


def test_summary_table2_quantities_count_as_algorithm_2():
    """Zero images: each channel's pre-activation is its bias, so every window ties; Algorithm 2 (Park et al.,
    App. F, line 7) counts only windows whose max is positive: the channel with bias 0.5, not the one with -0.5."""
    m = nn.Sequential(nn.Conv2d(1, 2, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(2 * 3 * 3, 2))
    with torch.no_grad():
        m[0].bias[:] = torch.tensor([0.5, -0.5])
    with Monitor(m) as mon:
        for _ in range(2):
            _step(m, mon, torch.zeros(2, 1, 8, 8), torch.tensor([0, 1]))
        (s,) = [r for r in mon.summary() if r["pool"]]
    assert s["max_ops"] == 2 * 2 * 2 * 3 * 3 and s["tie_share"] == 1.0
    assert s["tied_positive"] == 2 * 2 * 3 * 3 and s["positive_share"] == 0.5
    assert mon.correct_steps() == (2, 2)


@pytest.mark.parametrize(
    "layer, match", [(nn.LSTM(3, 3), "LSTM"), (nn.MultiheadAttention(3, 1), "Multihead")]
)
def test_unsupported_layers_are_clear_errors(layer, match):
    m = nn.Sequential(nn.Linear(3, 3), nn.ReLU(), layer)
    with pytest.raises(UnsupportedOpError, match=match):
        Monitor(m)


def test_functional_relu_and_nondefault_kwargs_are_clear_errors():
    class F(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(2, 2)

        def forward(self, x):
            return torch.relu(self.fc(x))

    with pytest.raises(UnsupportedOpError, match="module"):
        Monitor(F())
    with pytest.raises(UnsupportedOpError, match="min_val"):
        Monitor(nn.Sequential(nn.Linear(2, 2), nn.Hardtanh(-2, 2)))
