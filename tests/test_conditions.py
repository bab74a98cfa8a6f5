"""Park's premise checkers: Condition 1/2 detection, common lambda, exact rank, Algorithm 1 and its bounded LP."""

from dataclasses import replace
from fractions import Fraction as F

import numpy as np
import pytest
import torch
from torch import nn

from nsverify.ad import Activation
from nsverify.errors import UnsupportedOpError
from nsverify.oracle.park import algorithm1, cone, kinks, rank
from nsverify.papers.park import premises
from nsverify.papers.park import table1 as park
from nsverify.papers.park.conditions import detect
from nsverify.strategies.netspec import Pool


@pytest.mark.parametrize(
    "act, lam",
    [
        ("relu", F(0)),
        ("leaky_relu", F(0)),
        ("abs", F(1, 2)),
        ("relu6", None),
        ("hardtanh", None),
        ("hardsigmoid", None),
        ("clamp", None),
        ("relu[value=1/2]", F(1, 2)),
        ("relu[value=1]", F(1)),
        ("relu[value=2]", None),
        ("relu6[left,left]", F(0)),
        ("hardsigmoid[right,right]", F(1)),
        ("identity", F(0)),
    ],
)
def test_common_lambda(act, lam):
    """Park's lambda runs in the direction of mix=lambda: the weight of the right derivative."""
    assert kinks.common_lambda(act) == lam


def test_park_common_lambda_is_the_rule_mix_lambda():
    """By hand: hardsigmoid = 0 | x/6 + 1/2 | 1 with kinks at -3 and 3. mix=1/4 gives (3/4)*0 + (1/4)*(1/6) = 1/24
    at -3 and (3/4)*(1/6) + (1/4)*0 = 1/8 at 3; with these values as the rules, Park's common-lambda premise
    (D = (1 - lambda) D^- + lambda D^+ at every kink) holds with lambda = 1/24 / (1/6) = (1/8 - 1/6) / (0 - 1/6)
    = 1/4, the same lambda."""
    from nsverify.registry import Rule, get

    mix = Rule("mix", F(1, 4))
    assert mix.kink_derivative(F(0), F(1, 6)) == F(1, 24) and mix.kink_derivative(F(1, 6), F(0)) == F(1, 8)
    hs = get("hardsigmoid")
    assert hs.kink_derivative(0, mix) == F(1, 24) and hs.kink_derivative(1, mix) == F(1, 8)
    assert kinks.common_lambda("hardsigmoid[value=1/24,value=1/8]") == F(1, 4)
    assert kinks.common_lambda("hardsigmoid[mix=1/4]") == F(1, 4) == get("hardsigmoid").common_lambda(mix)
    # PyTorch's relu takes the left derivative: lambda 0, the rule mix=0, Park's side 'left'
    relu = Activation("relu")
    assert kinks.common_lambda(relu) == 0 and Rule("mix", F(0)).kink_side() == -1
    assert kinks.ad_side(relu, F(0)) == Rule("left")
    assert kinks.ad_side(Activation("relu[value=1]"), F(0)) == Rule("right")
    assert kinks.ad_side(Activation("abs"), F(0)) is None  # abs'(0) = 0: neither side


def test_detect_fully_connected_relu6():
    m = nn.Sequential(nn.Linear(4, 8), nn.ReLU6(), nn.Linear(8, 3), nn.Hardtanh(), nn.Linear(3, 2))
    cond = detect(m, batch=8)
    assert [L.activation for L in cond.layers] == ["relu6", "hardtanh"]
    assert cond.condition1 and cond.distinct_bias and not cond.common_lambda and cond.fully_connected
    th = cond.theorems()
    assert not th["theorem4"] and th["theorem5_structure"] and not th["theorem1"]


def test_detect_conv_maxpool_and_trivial_pool():
    m = nn.Sequential(
        nn.Conv2d(1, 4, 3),
        nn.BatchNorm2d(4),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(4 * 3 * 3, 2, bias=False),
        nn.ReLU(),
    )
    cond = detect(m)
    assert [(L.bias, L.pool) for L in cond.layers] == [("shared", "nontrivial"), ("none", "none")]
    assert not cond.theorems()["theorem6"]
    m2 = nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.MaxPool2d(1, 1), nn.Conv2d(4, 2, 3), nn.ReLU())
    cond2 = detect(m2)
    assert cond2.trivial_pools and cond2.shared_bias and cond2.theorems()["theorem6"]


def test_detect_residual_and_functional():
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2 = nn.Linear(5, 5), nn.Linear(5, 5)

        def forward(self, x):
            return torch.relu(self.fc2(torch.nn.functional.relu(self.fc1(x))) + x)

    cond = detect(Block())
    assert [L.activation for L in cond.layers] == ["relu", "relu"]
    assert cond.theorems()["theorem4"]


def test_detect_unsupported_layer_is_clear():
    m = nn.Sequential(nn.Linear(3, 3), nn.ReLU(), nn.LSTM(3, 3))
    with pytest.raises(UnsupportedOpError, match="LSTM"):
        detect(m)


def test_exact_rank_and_full_column_rank():
    rng = np.random.default_rng(0)
    z = rng.standard_normal((16, 6)).astype(np.float32)
    assert rank.full_column_rank(torch.from_numpy(z))
    zi = rng.integers(-5, 6, (16, 6)).astype(np.float32)
    zi[:, 3] = zi[:, 1] * 2 - zi[:, 0]  # exactly dependent (small integers: exact in float32)
    assert not rank.full_column_rank(torch.from_numpy(zi))
    assert rank.exact_rank(zi.T.tolist()) == 5
    z[:, 3] = z[:, 1] * 2 - z[:, 0]  # rounded in float32: the stored matrix is (exactly) of full rank
    assert rank.full_column_rank(torch.from_numpy(z)) == (rank.exact_rank(z.T.tolist()) == 6)
    assert not rank.full_column_rank(torch.zeros(3, 4))  # more samples than features
    # a matrix whose float rank looks full but whose exact rank is not: 1e-30-scale entries are still exact
    tiny = torch.tensor([[1e-30, 2e-30], [1.0, 2.0]], dtype=torch.float64)
    assert rank.full_column_rank(tiny) == (rank.exact_rank(tiny.t().tolist()) == 2)


def test_p_nonempty_point_and_farkas():
    r = cone.p_nonempty([[1, 0], [0, 1], [1, 1]])
    assert r.status == "nonempty"
    assert all(sum(F(a) * x for a, x in zip(row, r.point)) > 0 for row in ([1, 0], [0, 1], [1, 1]))
    e = cone.p_nonempty([[1, -1, 0], [-1, 1, 0]])
    assert e.status == "empty" and e.farkas == [F(1, 2), F(1, 2)]
    assert cone.p_nonempty([]).status == "trivial"
    assert cone.p_nonempty([[0, 0]]).status == "empty"  # 0 > 0 is infeasible
    # strictly positive margin needed: {x1 > 0, -x1 > 0, x2 > 0}
    assert cone.p_nonempty([[1, 0], [-1, 0], [0, 1]]).status == "empty"


def test_algorithm1_on_paper_lemma7_and_its_twin():
    pr = premises.spec_premises(park.PAPER_CASES["lemma7"])
    (chk,) = pr.algorithm1
    assert chk.tied_windows == 2 and chk.nontrivial_windows == 2 and chk.status == "empty"
    assert not pr.theorem8
    # twin: untied rows with distinct biases: the tie is non-trivial but P_1 is non-empty (Theorem 8 applies)
    L = park.PAPER_CASES["lemma7"].layers[0]
    twin = replace(
        park.PAPER_CASES["lemma7"],
        layers=(
            replace(
                L,
                tied=False,
                wshape=(4, 1),
                weight=(F(0),) * 4,
                bias_mode="distinct",
                bias=(F(0),) * 4,
                bshape=(4,),
                pool=Pool(2, 2),
            ),
        ),
    )
    pr2 = premises.spec_premises(twin)
    assert pr2.algorithm1[0].status == "nonempty" and pr2.theorem8
    assert park.verdict(twin).status == "member"


def test_theorem5_rank_premise_on_paper_cases():
    pr = premises.spec_premises(park.PAPER_CASES["lemma2"])
    assert pr.kinks == 2 and not pr.holds()["theorem5"]  # tied rows are not a free fully connected layer
    pr3 = premises.spec_premises(park.PAPER_CASES["lemma3"])
    assert pr3.theorem5_rank is False  # X = (3, -3): columns of z_0 dependent


def test_algorithm1_layer_counts_kinks_with_sides():
    y = torch.tensor([[0.0, 1.0, 0.0]], requires_grad=True)
    w = torch.ones(3, requires_grad=True)
    a = torch.relu(y * w)  # pi_i = y_i e_i = 0 at the kinks: no direction moves them -> P empty
    chk = algorithm1.algorithm1_layer("l", y * w, a, Activation("relu"), [w], [w])
    assert chk.kink_touches == 2 and chk.p.status == "empty"
    yy = y + w - 1  # pi_i = e_i: AD uses the left derivative, so x = -e_0 - e_2 lies in P
    chk = algorithm1.algorithm1_layer("l", yy, torch.relu(yy), Activation("relu"), [w], [w])
    assert chk.kink_touches == 2 and chk.p.status == "nonempty"
    assert chk.p.point[0] < 0 and chk.p.point[2] < 0


def test_one_walker_for_detect_and_monitor():
    from nsverify.oracle.park.walk import walk
    from nsverify.papers.park.monitor import Monitor

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.bn, self.act = nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2), nn.ReLU()
            self.pool, self.fc = nn.MaxPool2d(2), nn.Linear(2 * 3 * 3, 2)

        def forward(self, x):
            return torch.relu(self.fc(self.pool(self.act(self.bn(self.conv(x)))).flatten(1)))

    nodes = walk(Net())
    assert [(n.kind, n.name, n.functional) for n in nodes] == [
        ("affine", "conv", False), ("affine", "bn", False), ("activation", "act", False), ("pool", "pool", False),
        ("affine", "fc", False), ("activation", "relu", True)]
    assert nodes[0].reads_input and not nodes[1].reads_input
    assert [n.activation for n in nodes if n.kind == "activation"] == ["relu", "relu"]
    # detect accepts the functional ReLU; the monitor, which hooks modules, rejects it by name
    assert [(L.activation, L.bias, L.pool) for L in detect(Net()).layers] == [
        ("relu", "shared", "nontrivial"), ("relu", "distinct", "none")]
    with pytest.raises(UnsupportedOpError, match="functional relu at 'relu'.*module form"):
        Monitor(Net())


@pytest.mark.parametrize("user", ["detect", "monitor"])
def test_walker_errors_are_shared(user):
    from nsverify.papers.park.monitor import Monitor

    check = detect if user == "detect" else Monitor

    class Abs(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(2, 2)

        def forward(self, x):
            return torch.abs(self.fc(x))

    with pytest.raises(UnsupportedOpError, match=r"\(abs\) is not supported by nsverify's Park-condition checks"):
        check(Abs())
    # a Hardtanh whose kinks are not the registry's (-1, 1)
    with pytest.raises(UnsupportedOpError, match="min_val=-2.0"):
        check(nn.Sequential(nn.Linear(2, 2), nn.Hardtanh(-2.0, 2.0)))
    with pytest.raises(UnsupportedOpError, match="LSTM"):
        check(nn.Sequential(nn.Linear(3, 3), nn.ReLU(), nn.LSTM(3, 3)))


def test_p_nonempty_float_rows_give_exact_certificates_for_the_rows_as_given():
    """Float rows are decided as integer rows (each times a power of two): the witness and the Gordan certificate
    still certify the rows as given, checked here in exact arithmetic."""
    from fractions import Fraction

    from nsverify.oracle.park.cone import p_nonempty

    a = {0: 0.1, 3: -2.5e-7}
    b = {0: -0.3, 3: 7.5e-7}  # -3 a, exactly in binary? no: checked below on the exact values
    rows = [a, {1: 1.0}, b]
    res = p_nonempty(rows, columns=4)
    exact = [{k: Fraction(v) for k, v in r.items()} for r in rows]
    if res.status == "empty":
        y = res.farkas
        assert all(v >= 0 for v in y) and any(y)
        assert all(sum(y[i] * exact[i].get(c, 0) for i in range(3)) == 0 for c in range(4))
    else:
        assert res.status == "nonempty"
        assert all(sum(v * res.witness.get(c, 0) for c, v in r.items()) > 0 for r in exact)
    opposite = [{0: 0.1, 2: 0.2}, {0: -0.1, 2: -0.2}, {1: 3.0}]
    res = p_nonempty(opposite, columns=3)
    assert res.status == "empty"
    y, ex = res.farkas, [{k: Fraction(v) for k, v in r.items()} for r in opposite]
    assert all(v >= 0 for v in y) and any(y) and all(sum(y[i] * ex[i].get(c, 0) for i in range(3)) == 0
                                                     for c in range(3))
    res = p_nonempty([{0: 0.1, 1: -0.2}, {1: 0.3}], columns=2)
    assert res.status == "nonempty"
    assert all(sum(Fraction(v) * res.witness.get(c, 0) for c, v in r.items()) > 0
               for r in ({0: 0.1, 1: -0.2}, {1: 0.3}))


def test_detect_and_the_monitor_group_layers_alike():
    """One grouping of the walk's nodes (walk.layer_groups) for detect() and the monitor: a max pool after an
    affine module without an activation of its own is a layer with the identity activation (Park et al., Sec.
    2.2, eq. (1)), not the pool of the activation before that affine module."""
    from nsverify.oracle.park.walk import layer_groups, walk
    from nsverify.papers.park.monitor import Monitor

    m = nn.Sequential(nn.Conv2d(1, 2, 3), nn.ReLU(), nn.Conv2d(2, 2, 1), nn.MaxPool2d(2), nn.ReLU(),
                      nn.MaxPool2d(1, 1))
    groups = layer_groups(walk(m))
    assert [(g.name, [n.name for n in g.affine], g.act and g.act.name, g.pool and g.pool.name) for g in groups] == [
        ("1", ["0"], "1", None), ("3", ["2"], None, "3"), ("4", [], "4", "5")]
    assert [(L.name, L.activation, L.bias, L.pool) for L in detect(m).layers] == [
        ("1", "relu", "shared", "none"), ("3", "identity", "shared", "nontrivial"), ("4", "relu", "shared", "trivial")]
    mon = Monitor(m)
    try:
        assert [(L.name, L.activation.key, L.pool_name) for L in mon.layers] == [
            ("1", "relu", None), ("3", "identity", "3"), ("4", "relu", "5")]
    finally:
        mon.close()
