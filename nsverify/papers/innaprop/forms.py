"""Reference recursions of INNAprop in its four algebraically equivalent forms (constant step gamma).

All forms share the scaled gradient G_k = g_k / (sqrt(v_{k+1}/(1 - sigma^(k+1))) + eps) with
v_{k+1} = sigma v_k + (1 - sigma) g_k^2, and the initialization
of Algorithm 3 (psi_0 = (1 - alpha beta) theta_0).

- ``mechanical``: (4.11), theta_{k+1} = theta_k + (1 - alpha gamma)(theta_k - theta_{k-1})
  - beta gamma (G_k - G_{k-1}) - gamma^2 G_{k-1}, started from theta_{-1} = theta_0, G_{-1} = 0;
- ``psi``: (4.13)-(4.14), the theta update reads the *old* psi_k (no division by beta - gamma);
- ``memory_saving``: Algorithm 3, the theta update reads psi_{k+1};
- ``momentum``: (4.21)-(4.23) with m~_0 = 0.

The starting values of ``mechanical`` and ``momentum`` are the ones that make their first step equal to
INNAprop's first step theta_1 = theta_0 - gamma beta G_0 (derived in docs/optim.md).
"""
from __future__ import annotations

from typing import Callable

import torch

GradFn = Callable[[torch.Tensor], torch.Tensor]
FORMS = ("mechanical", "psi", "memory_saving", "momentum")


class _Rms:
    def __init__(self, like: torch.Tensor, sigma: float, eps: float):
        self.v = torch.zeros_like(like)
        self.k = 0
        self.sigma, self.eps = sigma, eps

    def scaled(self, g: torch.Tensor) -> torch.Tensor:
        self.k += 1
        self.v = self.sigma * self.v + (1 - self.sigma) * g * g
        return g / (torch.sqrt(self.v / (1 - self.sigma ** self.k)) + self.eps)


def run_form(form: str, grad_fn: GradFn, theta0: torch.Tensor, steps: int, *, lr: float, alpha: float,
             beta: float, sigma: float = 0.999, eps: float = 1e-8) -> list[torch.Tensor]:
    """Iterate ``form`` for ``steps`` steps from ``theta0``; return [theta_0, ..., theta_steps]."""
    if form not in FORMS:
        raise ValueError(f"unknown INNAprop form {form!r}; choose from {', '.join(FORMS)}")
    rms = _Rms(theta0, sigma, eps)
    theta = theta0.clone()
    out = [theta.clone()]
    gam = lr
    if form == "mechanical":
        prev, G_prev = theta.clone(), torch.zeros_like(theta)
        for _ in range(steps):
            G = rms.scaled(grad_fn(theta))
            new = theta + (1 - alpha * gam) * (theta - prev) - beta * gam * (G - G_prev) - gam * gam * G_prev
            prev, theta, G_prev = theta, new, G
            out.append(theta.clone())
    elif form in ("psi", "memory_saving"):
        psi = (1 - alpha * beta) * theta
        for _ in range(steps):
            G = rms.scaled(grad_fn(theta))
            psi_new = psi * (1 - gam / beta) + gam * (1 / beta - alpha) * theta
            if form == "psi":
                theta = theta * (1 + gam * (1 / beta - alpha)) - gam / beta * psi - gam * beta * G
            else:
                theta = ((1 + gam * (1 - alpha * beta) / (beta - gam)) * theta - gam / (beta - gam) * psi_new
                         - gam * beta * G)
            psi = psi_new
            out.append(theta.clone())
    else:
        a = 1 - alpha * gam
        m = torch.zeros_like(theta)
        for _ in range(steps):
            G = rms.scaled(grad_fn(theta))
            m = a * m + gam * gam * (1 - alpha * beta) / a * G
            theta = theta - m - gam * (beta - gam) / a * G
            out.append(theta.clone())
    return out


def dinadam_mechanical(grad_fn: GradFn, theta0: torch.Tensor, steps: int, *, lr: float, alpha: float,
                       beta: float, sigma1: float, sigma2: float, eps: float,
                       printed_sign: bool = False) -> list[torch.Tensor]:
    """(4.28)-(4.29) with RMS scaling of the step, m_0 = 0, g_{-1} = 0, no bias correction.

    ``printed_sign=True`` runs Algorithm 6 exactly as printed instead (memory-saving variable with
    theta <- theta - lr (m~ - alpha beta g)/(sqrt(v) + eps)), which is *not* this recursion.
    """
    theta = theta0.clone()
    m, g_prev, v = torch.zeros_like(theta), torch.zeros_like(theta), torch.zeros_like(theta)
    out = [theta.clone()]
    for _ in range(steps):
        g = grad_fn(theta)
        v = sigma2 * v + (1 - sigma2) * g * g
        if printed_sign:
            m = sigma1 * m + (1 - sigma1 + beta * alpha * sigma1 - beta * alpha) * g
            step = m - alpha * beta * g
        else:
            m = sigma1 * m + (1 - sigma1) * g + beta * alpha * sigma1 * (g - g_prev)
            step = m
        theta = theta - lr * step / (torch.sqrt(v) + eps)
        g_prev = g
        out.append(theta.clone())
    return out
