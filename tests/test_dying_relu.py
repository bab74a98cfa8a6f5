"""Tests of nsverify.papers.arnekvist.dying_relu: dead-unit metric, linear-system facts, single-ReLU gradient,
dead cone."""
from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
import torch

from nsverify.devices import torch_threads
from nsverify.errors import NsverifyError
from nsverify.papers.arnekvist.dying_relu import (
    complex_eigen_interval,
    dead_units,
    eigen_facts,
    heavy_ball_as_torch_sgd,
    heavy_ball_matrix,
    in_dead_cone,
    in_linear_cone,
    network_experiment,
    network_run,
    region_map,
    single_relu_grad,
    single_relu_grad_quadrature,
)


@pytest.fixture(autouse=True)
def _one_thread():
    with torch_threads(1):
        yield


def test_dead_units_exact_counts_mlp_and_conv():
    lin = torch.nn.Linear(3, 4)
    with torch.no_grad():
        lin.weight.copy_(torch.tensor([[1.0, 0, 0], [0, 0, 0], [0, 1.0, 0], [0, 0, 0]]))
        lin.bias.copy_(torch.tensor([0.0, -1.0, 0.0, 0.0]))  # unit 1 dead (always -1), unit 3 dead (always 0)
    model = torch.nn.Sequential(lin, torch.nn.ReLU(), torch.nn.Linear(4, 2), torch.nn.ReLU())
    with torch.no_grad():
        model[2].weight.fill_(-1.0)
        model[2].bias.fill_(-0.5)  # both second-layer units dead on nonnegative inputs
    X = torch.rand(50, 3)
    r = dead_units(model, X, batch_size=7)
    assert [(x["units"], x["dead"]) for x in r["layers"]] == [(4, 2), (2, 2)]
    assert r["worst_layer"] == "3" and r["worst_share"] == 1.0 and r["overall_share"] == 4 / 6
    conv = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3), torch.nn.ReLU())
    with torch.no_grad():
        conv[0].weight.zero_()
        conv[0].bias.copy_(torch.tensor([1.0, -1.0]))
    assert dead_units(conv, torch.randn(4, 1, 5, 5))["layers"][0]["dead"] == 1


def test_dead_units_bad_input():
    with pytest.raises(NsverifyError, match="no torch.nn.ReLU"):
        dead_units(torch.nn.Linear(2, 2), torch.randn(3, 2))
    with pytest.raises(NsverifyError, match="no inputs"):
        dead_units(torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.ReLU()), torch.randn(0, 2))


@pytest.mark.parametrize("eta", ["0.1", "0.3", "0.05", "0.7"])
def test_linear_system_eigenvalues_complex_iff_interval_with_modulus_sqrt_beta(eta):
    with mpmath.workdps(50):
        e = mpmath.mpf(eta)
        lo, hi = complex_eigen_interval(e)
        for beta in [mpmath.mpf(k) / 40 for k in range(0, 40)]:
            if abs(beta - lo) < mpmath.mpf("1e-6"):
                continue
            f = eigen_facts(e, beta)
            assert f["complex"] == (lo < beta < hi), (eta, beta)
            if f["complex"]:
                for m in f["moduli"]:
                    assert abs(m - mpmath.sqrt(beta)) < mpmath.mpf("1e-40")
            # product of eigenvalues = det A = beta in every case
            assert abs(f["eigs"][0] * f["eigs"][1] - beta) < mpmath.mpf("1e-40")
        # Arnekvist Fig. 2: at eta = 0.1 the eigenvalues turn complex near beta = 0.7 (exactly (9/11)^2)
        if eta == "0.1":
            assert abs(lo - mpmath.mpf(81) / 121) < mpmath.mpf("1e-40")


def test_heavy_ball_is_torch_sgd_lr_eta_one_minus_beta():
    eta, beta = 0.1, 0.9
    Q = torch.tensor([[2.0, 0.3], [0.3, 0.5]], dtype=torch.float64)
    t0 = torch.tensor([1.0, -2.0], dtype=torch.float64)
    grad = lambda t: Q @ t
    theta, m, ref = t0.clone(), torch.zeros(2, dtype=torch.float64), []
    for _ in range(30):
        m = beta * m + (1 - beta) * grad(theta)
        theta = theta - eta * m
        ref.append(theta.clone())
    for make, should_match in ((lambda p: heavy_ball_as_torch_sgd([p], eta, beta), True),
                               (lambda p: torch.optim.SGD([p], lr=eta, momentum=beta, dampening=beta),
                                False)):
        p = t0.clone().requires_grad_()
        opt = make(p)
        worst = 0.0
        for r in ref:
            p.grad = grad(p.detach())
            opt.step()
            worst = max(worst, (p.detach() - r).abs().max().item())
        assert (worst < 1e-13) == should_match, worst


def test_affine_model_follows_linear_system():
    # gradient of the affine model is a = w - Gamma (Arnekvist et al., eq (17)); heavy-ball then evolves (m, a)
    # by A (eq (20))
    eta, beta, gamma = 0.1, 0.8, 0.3
    A = np.array(heavy_ball_matrix(eta, beta))
    w = torch.tensor([1.7], dtype=torch.float64, requires_grad=True)
    opt = heavy_ball_as_torch_sgd([w], eta, beta)
    s = np.array([0.0, 1.7 - gamma])
    for _ in range(25):
        w.grad = (w.detach() - gamma)
        opt.step()
        s = A @ s
        assert abs(w.item() - gamma - s[1]) < 1e-13


@pytest.mark.parametrize("w,b,G,D", [([0.3, -0.7], 0.2, [0.0, 0.5], 0.1), ([1.2, 0.4], -0.8, [0.0, 1.0], 0.0),
                                     ([-0.5, 0.9], 0.6, [0.2, -0.3], -0.4)])
def test_single_relu_closed_form_matches_quadrature(w, b, G, D):
    gw, gb = single_relu_grad(w, b, G, D)
    qw, qb = single_relu_grad_quadrature(w, b, G, D)
    np.testing.assert_allclose(gw, qw, rtol=1e-7, atol=1e-9)
    assert abs(gb - qb) < 1e-8


@pytest.mark.parametrize("wL", [0.8, -0.6])
def test_proposition_c1_simplified_gradient(wL):
    # (31)-(32): w = (0, w_L), Gamma = (0, gamma): dL/dw_L = a_L Phi + rho (c - rho a_L t) phi, dL/db = rho
    # a_L phi + c Phi
    from scipy.stats import norm

    gamma, b, D = 0.5, 0.3, 0.1
    gw, gb = single_relu_grad([0.0, wL], b, [0.0, gamma], D)
    t, rho, aL, c = b / abs(wL), math.copysign(1, wL), wL - gamma, b - D
    assert abs(gw[0]) < 1e-15
    assert abs(gw[1] - (aL * norm.cdf(t) + rho * (c - rho * aL * t) * norm.pdf(t))) < 1e-14
    assert abs(gb - (rho * aL * norm.pdf(t) + c * norm.cdf(t))) < 1e-14


def test_dead_cone_corrected_sign():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((200_000, 2))
    for w, b in [([1.0, 0.0], 0.0), ([0.1, 0.1], -0.5), ([0.3, -0.4], 1.5), ([1.0, 1.0], -3.5)]:
        p_mc = float(((X @ np.array(w) + b) > 0).mean())
        dead = in_dead_cone(w, b, eps=0.01)
        assert dead == (p_mc < 0.01)
        assert in_linear_cone(w, b, eps=0.01) == (p_mc > 0.99)
    # the printed rule b/||w|| < -Phi^-1(eps) calls (e_1, 0) dead although it is active half the time
    from scipy.stats import norm

    assert 0.0 < -norm.ppf(0.01) and not in_dead_cone([1.0, 0.0], 0.0)
    with pytest.raises(NsverifyError):
        in_dead_cone([1.0], 0.0, eps=0.7)


@pytest.mark.parametrize("grid", [6, 7])
def test_region_map_fractions_are_a_partition(grid):
    r = region_map(gammas=(1.0, 1e-3), betas=(0.0, 0.9), grid=grid, max_steps=1500)
    # the lattice has grid^2 points; an odd grid puts w_L = 0 on its middle column, whose grid points are
    # excluded (the ReLU's input weight must be non-zero): 7 x 7 - 7 = 42, while 6 x 6 keeps all 36
    expected_inits = grid * grid - (grid if grid % 2 else 0)
    for c in r["cells"]:
        assert c["n_inits"] == expected_inits
        assert 0 <= c["optimum"] <= 1 and 0 <= c["dead"] <= 1
        assert abs(c["optimum"] + c["dead"] + c["other"] - 1) < 1e-12
        # every share counts whole initializations
        for k in ("optimum", "dead", "unconverged"):
            assert abs(c[k] * expected_inits - round(c[k] * expected_inits)) < 1e-9


def test_network_experiment_runs_and_resumes_from_cache(tmp_path):
    cache = tmp_path / "runs.json"
    kw = dict(datasets=("diabetes",), gammas=(1.0, 1e-4), optimizers=("SGD", "Adam(beta1=0)"), seeds=(0,),
              steps=5)
    rows = network_experiment(cache=cache, **kw)
    assert len(rows) == 4 and all(0 <= r["dead_share"]["mean"] <= 1 for r in rows)
    assert len(__import__("json").loads(cache.read_text())) == 4
    assert network_experiment(cache=cache, **kw) == rows  # served from the cache
    # two worker processes give the runs computed here serially, bit for bit
    assert network_experiment(workers=2, **kw) == rows
    with pytest.raises(NsverifyError, match="workers"):
        network_experiment(workers=0, **kw)
    ran = []
    with pytest.raises(NsverifyError, match="unknown optimizer 'Lion'"):
        network_experiment(**{**kw, "optimizers": ("SGD", "Lion")}, progress=lambda *a: ran.append(a))
    assert ran == []  # checked before any run
    with pytest.raises(NsverifyError, match="unknown data set"):
        network_run("mnist", 1.0, "SGD", 0, 1)
    with pytest.raises(NsverifyError, match="unknown optimizer"):
        network_run("diabetes", 1.0, "Lion", 0, 1)
