"""Float64 equivalence of INNAprop's forms (mechanical, psi, memory-saving, momentum) and of DINAdam."""
from __future__ import annotations

import itertools

import pytest
import torch

from nsverify.optim import DINAdam, INNAprop, INNApropMomentum
from nsverify.papers.innaprop.forms import FORMS, dinadam_mechanical, run_form

_G = torch.Generator().manual_seed(11)
_A = torch.randn(6, 6, generator=_G, dtype=torch.float64)
_Q = _A @ _A.T / 6 + 0.1 * torch.eye(6, dtype=torch.float64)
_B = torch.randn(6, generator=_G, dtype=torch.float64)
_T0 = torch.randn(6, generator=_G, dtype=torch.float64)


def _grad(theta):  # gradient of a smooth nonconvex function: 1/2 t'Qt - b't + sum log(1 + t^2)
    return _Q @ theta - _B + 2 * theta / (1 + theta ** 2)


def _optimizer_run(cls, steps, **kw):
    p = _T0.clone().requires_grad_()
    opt = cls([p], **kw)
    out = [p.detach().clone()]
    for _ in range(steps):
        p.grad = _grad(p.detach())
        opt.step()
        out.append(p.detach().clone())
    return out


@pytest.mark.parametrize("alpha,beta", [(0.1, 0.9), (1.0, 1.0), (2.0, 2.0), (0.5, 0.3)])
def test_four_forms_agree_in_float64(alpha, beta):
    kw = dict(lr=0.02, alpha=alpha, beta=beta, sigma=0.99, eps=1e-8)
    runs = {f: run_form(f, _grad, _T0, 200, **kw) for f in FORMS}
    for (fa, ra), (fb, rb) in itertools.combinations(runs.items(), 2):
        worst = max((x - y).abs().max().item() for x, y in zip(ra, rb))
        assert worst < 1e-10, (fa, fb, worst)
    # the trajectory moves: the comparison is not vacuous
    assert (runs["psi"][-1] - _T0).abs().max() > 0.1


@pytest.mark.parametrize("foreach", [False, True])
@pytest.mark.parametrize("alpha,beta", [(0.1, 0.9), (2.0, 2.0)])
def test_optimizers_follow_reference_forms(foreach, alpha, beta):
    kw = dict(lr=0.02, alpha=alpha, beta=beta, sigma=0.99, eps=1e-8)
    ref = run_form("memory_saving", _grad, _T0, 200, **kw)
    inn = _optimizer_run(INNAprop, 200, weight_decay=0.0, foreach=foreach, **kw)
    mom = _optimizer_run(INNApropMomentum, 200, weight_decay=0.0, foreach=foreach, **kw)
    for name, run in (("INNAprop", inn), ("INNApropMomentum", mom)):
        worst = max((x - y).abs().max().item() for x, y in zip(ref, run))
        assert worst < 1e-10, (name, worst)


def test_dinadam_memory_saving_form_and_printed_sign_erratum():
    kw = dict(lr=0.01, alpha=1.0, beta=0.5, sigma1=0.9, sigma2=0.99, eps=1e-8)
    ref = dinadam_mechanical(_grad, _T0, 150, **kw)
    for foreach in (False, True):
        run = _optimizer_run(DINAdam, 150, lr=0.01, alpha=1.0, beta=0.5, sigmas=(0.9, 0.99), eps=1e-8,
                             bias_correction=False, foreach=foreach)
        worst = max((x - y).abs().max().item() for x, y in zip(ref, run))
        assert worst < 1e-10, worst
    printed = dinadam_mechanical(_grad, _T0, 150, printed_sign=True, **kw)
    assert max((x - y).abs().max().item() for x, y in zip(ref, printed)) > 1e-2
