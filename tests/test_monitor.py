"""nsverify.papers.park.monitor: hooks on supported modules, tie/kink statistics, premise checks, clear errors."""

import pytest
import torch
from torch import nn

from nsverify.errors import NsverifyError, UnsupportedOpError
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


# ------------------------------------------------------------------------------------------------------------------
# Cheap detection, Algorithm 2's count, identical receptive fields (issue 15)
# ------------------------------------------------------------------------------------------------------------------
from nsverify import kernels  # noqa: E402
from nsverify.ad import Activation  # noqa: E402
from nsverify.oracle.park import algorithm1  # noqa: E402
from nsverify.papers.park import monitor as monitor_mod  # noqa: E402


@pytest.mark.parametrize("key, want", [("relu", (0.0,)), ("relu6", (0.0, 6.0)), ("hardtanh", (-1.0, 1.0)),
                                       ("relu[value=1]", ()), ("leaky_relu", ()), ("hardsigmoid", ()),
                                       ("clamp", ()), ("identity", ())])
def test_saturated_values_are_the_flat_ends_with_zero_ad_derivative(key, want):
    """ReLU'(0) = 0 (PyTorch): alpha = 0 only where the AD derivative is 0; with ReLU'(0) = 1, alpha = 0 at y = 0
    has derivative 1; hardsigmoid's linear piece y/6 + 1/2 can round onto 1; clamp's AD rule at its kinks is 1."""
    assert monitor_mod.saturated_values(Activation(key)) == want


def _vgg_like(c=4):
    return nn.Sequential(nn.Conv2d(3, c, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(c, c, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(c * 4 * 4, 3))


def _plateau_images(n=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 256, (n, 3, 16, 16), generator=g).float() / 255
    x[:, :, :, :12] = 0.5  # a flat left part: identical fields inside it, and along the border
    x[:, :, 10:, 12:] = torch.tensor([0.2, 0.4, 0.6]).view(1, 3, 1, 1)
    return x


def test_receptive_fields_of_a_conv_pool_chain():
    # conv3/p1: rf 3, jump 1, start -1; pool 2/2: rf 4, jump 2; conv3/p1: rf 4 + 2*2 = 8, start -1 - 1*2 = -3
    m = _vgg_like()
    fields = monitor_mod.receptive_fields(m)
    assert fields[id(m[1])] == ((3, 1, -1), (3, 1, -1)) and fields[id(m[4])] == ((8, 2, -3), (8, 2, -3))
    assert monitor_mod.receptive_fields(nn.Sequential(nn.Conv2d(1, 1, 3), nn.Dropout(), nn.ReLU())) == {}


@pytest.mark.parametrize("mode", ["reference", "auto"])
def test_detection_counts_equal_algorithm_1s_own_count(mode):
    torch.manual_seed(0)
    m = _vgg_like()
    x = _plateau_images()
    with kernels.use(mode), Monitor(m) as mon:
        loss = nn.functional.cross_entropy(m(x), torch.tensor([0, 1, 2, 0]))
        rec = mon.check()
        for L, chk in zip(mon.layers, rec.layers):
            d = {}
            y = a = None

            def grab(mod, inp, out, d=d):
                d["y"], d["a"] = inp[0], out

            h = L.act_module.register_forward_hook(grab)
            m(x)
            h.remove()
            y, a = d["y"], d["a"]
            full = algorithm1.algorithm1_layer(L.name, y, a, L.activation, L.params_l, L.params_upto, L.pool_geom)
            assert (chk.windows, chk.tied_windows, chk.tied_positive) == (full.windows, full.tied_windows,
                                                                          full.tied_positive)
            assert chk.tied_positive > 0  # the plateaus tie with a positive max somewhere in every layer
    del loss


def test_nothing_tied_means_no_exact_check(monkeypatch):
    calls = []
    real = monitor_mod.algorithm1_layer
    monkeypatch.setattr(monitor_mod, "algorithm1_layer", lambda *a, **k: calls.append(1) or real(*a, **k))
    torch.manual_seed(0)
    m = _vgg_like()
    with Monitor(m) as mon:
        m(torch.randn(4, 3, 16, 16, dtype=torch.float32))  # continuous values: no ties, no kink touches
        rec = mon.check()
        assert not calls and all(c.status == "trivial" and c.tied_positive == 0 for c in rec.layers)
        m(_plateau_images())
        mon.check()
    assert calls  # ties: the exact check runs


def test_identical_fields_decide_ties_exactly(monkeypatch):
    """Every pair the receptive-field test calls identical has bitwise equal AD gradients (checked by exact
    per-entry backward passes, independently), and the plateaus need no directional derivatives at all."""
    torch.manual_seed(1)
    m = _vgg_like()
    x = _plateau_images()
    monkeypatch.setattr(algorithm1, "_jvps", lambda *a, **k: pytest.fail("directional derivatives were needed"))
    with Monitor(m) as mon:
        m(x)
        rec = mon.check()
        assert all(c.nontrivial_windows == 0 for c in rec.layers) and rec.correct == "yes"
        store = {}
        hooks = [L.act_module.register_forward_hook(lambda mod, i, o, n=L.name: store.__setitem__(n, (i[0], o)))
                 for L in mon.layers]
        m(x)
        for h in hooks:
            h.remove()
    L = mon.layers[1]
    y, a = store[L.name]
    same = monitor_mod._same_field(x, y, L.field_of_view)
    flat = a.detach().reshape(a.shape[0], -1)
    wo = a.shape[-1]
    checked = 0
    for b in range(a.shape[0]):
        for i in range(flat.shape[1] - wo):
            k = i + wo  # the unit below
            if flat[b, i] > 0 and same(b, i, k):
                gi, gk = algorithm1._batched_grads(a, [(b, i), (b, k)], L.params_upto)
                assert torch.equal(gi, gk)
                checked += 1
    assert checked > 5


def test_monitor_reads_nsverify_ad_variants():
    from nsverify import ad
    from nsverify.workloads.models import build_model

    m = build_model("vgg11", 1 / 16)
    with Monitor(m) as mon:
        loss = nn.functional.cross_entropy(m(_plateau_images(2).repeat(1, 1, 2, 2)), torch.tensor([0, 1]))
        rec = mon.check()
        loss.backward()
    assert len(rec.layers) == 8 and mon.layers[0].activation.key == "relu[left]"
    with pytest.raises(UnsupportedOpError, match="rule='first'"):
        Monitor(nn.Sequential(nn.Conv2d(1, 1, 3), ad.ReLUVariant(), ad.MaxPool2dVariant(2, rule="even")))


def test_monitor_overhead_reports_per_tie_count():
    from nsverify.papers.park.overhead import PAPER_OVERHEAD, monitor_overhead

    r = monitor_overhead("vgg11", steps=2, width=1 / 16, batch=4, warmup=0)
    assert r["paper_ratio"] == PAPER_OVERHEAD == 419 / 237 and len(r["per_step"]) == 2
    assert r["ratio"] > 0 and sum(b["steps"] for b in r["by_ties"]) == 2 and r["certified"][1] == 2
    with pytest.raises(NsverifyError, match="choose from vgg11, resnet18"):
        monitor_overhead("alexnet", steps=1)
