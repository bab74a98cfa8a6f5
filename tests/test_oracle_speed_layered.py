"""Layered network decisions (Park et al.'s Theorems 5 and 8): every "member" they give must agree with the
plain enumeration, and their premises must fail on the paper's own counterexample."""

from __future__ import annotations

import copy
import importlib.util
import random
from fractions import Fraction
from pathlib import Path

import pytest
import torch

import nsverify
from nsverify.oracle.park.rank import independent_columns, nonsingular

F = Fraction
ROOT = Path(__file__).resolve().parents[1]


def _common():
    spec = importlib.util.spec_from_file_location("bench_common", ROOT / "asv_bench" / "benchmarks" / "common.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _dyadic_(module, rng, scale=2):
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.tensor([rng.randint(-2 * scale, 2 * scale) / (2 * scale) for _ in range(p.numel())],
                                 dtype=torch.float64).reshape(p.shape))


def test_park_lemma7_network_is_declined_and_enumerated():
    """Park et al.'s Lemma 7 as a network: Conv1d(1, 1, 1) on X = (1, 0, -1, 0) gives (u + b, b, -u + b, b), max
    pools of width 2, loss x1 - x2 (their errata).  At w = 0 the Clarke set is {(1, 0)} and AD gives (2, 0): P_1
    has the rows (1, 0) and (-1, 0), so Algorithm 1 is empty, the shortcut declines, and the enumeration finds
    the violation."""
    net = torch.nn.Sequential(torch.nn.Conv1d(1, 1, 1), torch.nn.MaxPool1d(2), torch.nn.Flatten()).double()
    with torch.no_grad():
        net[0].weight.zero_()
        net[0].bias.zero_()
    X = torch.tensor([[[1.0, 0.0, -1.0, 0.0]]], dtype=torch.float64)
    loss = lambda o, t: (o[:, 0] - o[:, 1]).sum()  # noqa: E731
    v = nsverify.check_module(net, loss, X, None, progress=False)
    assert "P_l is empty" in v.stats["layers_declined"]
    assert v.status == "not_member" and v.exact_ad == (F(2), F(0)) and set(v.bouligand) == {(F(1), F(0))}


def test_theorem5_rank_certificate_on_an_mlp():
    """Two samples with linearly independent inputs, one hidden unit exactly at its kink on both: Theorem 5."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.ReLU(), torch.nn.Linear(2, 1)).double()
    X = torch.tensor([[1.0, 2.0], [3.0, -1.0]], dtype=torch.float64)
    with torch.no_grad():
        net[0].weight.copy_(torch.tensor([[0.0, 0.0], [0.5, -0.25]]))
        net[0].bias.copy_(torch.tensor([0.0, 0.125]))
        net[2].weight.copy_(torch.tensor([[1.0, -2.0]]))
    y = torch.tensor([[1.0], [0.5]], dtype=torch.float64)
    v = nsverify.check_module(net, torch.nn.functional.mse_loss, X, y, progress=False)
    assert v.status == "member" and v.certificate["kind"] == "park_theorem5" and nsverify.verify_certificate(v)
    assert v.stats["layers"][0]["kinks"] == 2
    p = nsverify.check_module(net, torch.nn.functional.mse_loss, X, y, progress=False, shortcuts=False)
    assert p.status == "member"
    # dependent inputs (the second sample is twice the first): the rank test fails, Algorithm 1 decides
    X2 = torch.tensor([[1.0, 2.0], [2.0, 4.0]], dtype=torch.float64)
    v2 = nsverify.check_module(net, torch.nn.functional.mse_loss, X2, y, progress=False)
    assert v2.certificate is None or v2.certificate["kind"] != "park_theorem5"


def test_rank_certificate_helpers():
    Z = [[F(1), F(2), F(0)], [F(2), F(4), F(1)]]
    import numpy as np

    A = np.empty((2, 3), dtype=object)
    A[:] = Z
    assert independent_columns(A) == [0, 2]
    assert nonsingular([[F(1), F(0)], [F(2), F(1)]]) and not nonsingular([[F(1), F(2)], [F(2), F(4)]])
    assert not nonsingular([[F(1), F(2)]])  # not square


def _random_net(rng: random.Random):
    """(model, inputs, targets, description): a tiny dyadic network with exact ties in its parameters."""
    u = rng.random()
    if u < 0.2:  # Park et al.'s Lemma 7 shape: identity activation, tied max pools with opposite slopes
        net = torch.nn.Sequential(torch.nn.Conv1d(1, 1, 1), torch.nn.MaxPool1d(2), torch.nn.Flatten(),
                                  torch.nn.Linear(2, 1)).double()
        _dyadic_(net, rng)
        a = rng.choice([-1.0, -0.5, 0.5, 1.0, 2.0])
        X = torch.tensor([[[a, 0.0, -a, 0.0]]], dtype=torch.float64)
        with torch.no_grad():
            net[0].weight.zero_()
            net[0].bias.zero_()
        desc = f"lemma-7 net, a = {a}"
    elif u < 0.6:
        n0, h, B = rng.randint(1, 3), rng.randint(1, 3), rng.randint(1, 3)
        net = torch.nn.Sequential(torch.nn.Linear(n0, h), torch.nn.ReLU(), torch.nn.Linear(h, 1)).double()
        _dyadic_(net, rng)
        X = torch.tensor([[rng.randint(-4, 4) / 2 for _ in range(n0)] for _ in range(B)], dtype=torch.float64)
        with torch.no_grad():
            for _ in range(rng.randint(1, 2)):
                j = rng.randrange(h)
                if rng.random() < 0.5:  # a dead unit: at its kink on every sample
                    net[0].weight[j] = 0.0
                    net[0].bias[j] = 0.0
                else:  # a unit exactly at its kink on one sample
                    b = rng.randrange(B)
                    net[0].bias[j] = -float((net[0].weight[j] * X[b]).sum())
        desc = f"mlp {n0}-{h}-1, batch {B}"
    else:
        C, L, B = rng.randint(1, 2), rng.randint(4, 5), rng.randint(1, 2)
        net = torch.nn.Sequential(torch.nn.Conv1d(1, C, 2), torch.nn.ReLU(), torch.nn.MaxPool1d(2),
                                  torch.nn.Flatten(), torch.nn.Linear(C * ((L - 1) // 2), 1)).double()
        _dyadic_(net, rng)
        X = torch.tensor([[[rng.randint(-2, 2) / 2 for _ in range(L)]] for _ in range(B)], dtype=torch.float64)
        with torch.no_grad():
            c = rng.randrange(C)
            net[0].weight[c] = 0.0
            net[0].bias[c] = 0.0 if rng.random() < 0.6 else 0.5  # dead (ties at 0) or flat (ties at 1/2)
        desc = f"conv1d {C}ch, length {L}, batch {B}"
    y = torch.tensor([[rng.randint(-2, 2) / 2] for _ in range(X.shape[0])], dtype=torch.float64)
    return net, X, y, desc


def _agreement(count: int, seed: int):
    rng = random.Random(seed)
    counts = {"layered": 0, "agree_member": 0, "plain_undecided": 0, "declined_same": 0, "declined_not_member": 0}
    for _ in range(count):
        net, X, y, desc = _random_net(rng)
        loss = torch.nn.functional.mse_loss
        v = nsverify.check_module(net, loss, X, y, progress=False, max_pieces=512, on_limit="unknown")
        p = nsverify.check_module(net, loss, X, y, progress=False, shortcuts=False, max_pieces=512,
                                  on_limit="unknown")
        if v.stats.get("shortcut"):
            counts["layered"] += 1
            assert v.status == "member" and nsverify.verify_certificate(v), desc
            assert p.status != "not_member", desc  # the enumeration must never refute the theorem's verdict
            if p.status == "member":
                counts["agree_member"] += 1
            else:
                counts["plain_undecided"] += 1
            assert v.exact_ad == p.exact_ad, desc
        else:
            assert v.status == p.status, desc
            counts["declined_same"] += 1
            counts["declined_not_member"] += p.status == "not_member"
    return counts


def test_layered_agrees_with_plain_enumeration_on_generated_networks():
    c = _agreement(24, seed=5)
    assert c["layered"] >= 8 and c["agree_member"] >= 5 and c["declined_not_member"] >= 1, c


@pytest.mark.slow
def test_layered_agrees_with_plain_enumeration_many():
    c = _agreement(150, seed=99)
    assert c["layered"] >= 50 and c["agree_member"] >= 30 and c["declined_not_member"] >= 5, c


def test_tampered_park_certificates_are_rejected():
    net = torch.nn.Sequential(torch.nn.Conv1d(1, 2, 2), torch.nn.ReLU(), torch.nn.MaxPool1d(2),
                              torch.nn.Flatten(), torch.nn.Linear(4, 1)).double()
    _dyadic_(net, random.Random(3))
    with torch.no_grad():
        net[0].weight[0] = 0.0
        net[0].bias[0] = 0.0
    X = torch.tensor([[[1.0, -0.5, 2.0, 0.5, 1.5]]], dtype=torch.float64)
    y = torch.tensor([[0.5]], dtype=torch.float64)
    v = nsverify.check_module(net, torch.nn.functional.mse_loss, X, y, progress=False)
    assert v.status == "member" and v.certificate["kind"] == "park_theorem8"
    d = v.to_dict()
    assert nsverify.verify_certificate(d)
    layer = next(i for i, L in enumerate(d["certificate"]["layers"]) if L["rows"])
    cases = []
    c = copy.deepcopy(d)
    c["certificate"]["layers"][layer]["witness"] = {k: str(-F(x)) for k, x in
                                                    c["certificate"]["layers"][layer]["witness"].items()}
    cases.append(("flipped witness", c))
    c = copy.deepcopy(d)
    c["certificate"]["proxies"] = {"relu": "right"}
    cases.append(("relu proxy said to be the right derivative", c))
    c = copy.deepcopy(d)
    c["tested_is"] = "ad"
    cases.append(("tested is not the exact AD", c))
    c = copy.deepcopy(d)
    c["certificate"]["kind"] = "park_theorem9"
    cases.append(("renamed kind", c))
    c = copy.deepcopy(d)
    c["certificate"]["layers"] = "garbage"
    cases.append(("malformed layers", c))
    for what, rec in cases:
        assert not nsverify.verify_certificate(rec), what


@pytest.mark.slow
def test_lenet_with_parameter_ties_is_decided():
    """The benchmark workload: a LeNet-5-size network (61,706 parameters) with dead units and tied windows."""
    net, loss, x, y = _common().lenet_tie()
    v = nsverify.check_module(net, loss, x, y, progress=False)
    assert v.status == "member" and v.certificate["kind"] == "park_theorem8" and nsverify.verify_certificate(v)
    layers = {L["layer"]: L for L in v.stats["layers"]}
    assert layers["0"]["kinks"] >= 2 * 784 and layers["0"]["tied_windows"] >= 2 * 196
    wf = torch.cat([p.detach().reshape(-1) for p in net.parameters()]).clone().requires_grad_(True)
    assert len(v.exact_ad) == wf.numel() == 61706
