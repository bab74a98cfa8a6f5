"""INNAprop (Boustany's thesis, Ch.4, Algorithm 3; signs as in the rewritten system of Sec. 4.2.2 and the
reference code).

Per step, with gamma = lr:

    theta <- (1 - lambda gamma) theta                                   (decoupled weight decay)
    v     <- sigma v + (1 - sigma) g^2 ;  vhat = v / (1 - sigma^k)
    psi   <- (1 - gamma/beta) psi + gamma (1/beta - alpha) theta
    theta <- (1 + gamma (1 - alpha beta)/(beta - gamma)) theta - gamma/(beta - gamma) psi
             - gamma beta g / (sqrt(vhat) + eps)

with psi_0 = (1 - alpha beta) theta_0 taken lazily at the first step (before weight decay). The division by
beta - gamma requires beta > gamma; it is checked at construction and before every step.
"""
from __future__ import annotations

import torch

from nsverify.optim._base import (
    InertialOptimizer,
    OptimizerConfigError,
    check_finite,
    rms_denominator,
    rms_denominators,
)


class INNAprop(InertialOptimizer):
    """INNAprop with a single-tensor path (``foreach=False``) and a foreach path (``foreach=True``).

    State per parameter: ``psi`` and ``exp_avg_sq`` (plus the scalar ``step``), the same bytes as AdamW.
    """

    _slots = ("psi", "exp_avg_sq")
    _name = "INNAprop"

    def __init__(self, params, lr: float = 1e-3, alpha: float = 0.1, beta: float = 0.9, sigma: float = 0.999,
                 eps: float = 1e-8, weight_decay: float = 0.01, *, foreach: bool | None = None):
        defaults = dict(lr=lr, alpha=alpha, beta=beta, sigma=sigma, eps=eps, weight_decay=weight_decay,
                        foreach=foreach)
        super().__init__(params, defaults)

    def _validate_group(self, group: dict, where: str) -> None:
        lr = check_finite("lr", group["lr"], low=0.0)
        check_finite("alpha", group["alpha"], low=0.0)
        beta = check_finite("beta", group["beta"], low=0.0, low_open=True)
        check_finite("sigma", group["sigma"], low=0.0, high=1.0, high_open=True)
        check_finite("eps", group["eps"], low=0.0)
        check_finite("weight_decay", group["weight_decay"], low=0.0)
        if not lr < beta:
            raise OptimizerConfigError(
                f"INNAprop is ill-posed {where}: lr={lr} >= beta={beta}. Algorithm 3 divides by (beta - lr), "
                "so it needs beta > lr at every step (Boustany, Ch.4, Remark 12). Lower lr (check your "
                "scheduler's peak and warm-up) or raise beta.")

    def _init_slots(self, p, group):
        return {"psi": (1 - group["alpha"] * group["beta"])
                * p.detach().clone(memory_format=torch.preserve_format),
                "exp_avg_sq": torch.zeros_like(p, memory_format=torch.preserve_format)}

    @staticmethod
    def _coefficients(group):
        lr, alpha, beta = float(group["lr"]), group["alpha"], group["beta"]
        return lr, alpha, beta, (lr * (1 - alpha * beta)) / (beta - lr), lr / (beta - lr)

    def _single(self, group, params, grads, states):
        lr, alpha, beta, s1, s2 = self._coefficients(group)
        wd = group["weight_decay"]
        for p, g, st in zip(params, grads, states):
            if wd != 0:
                p.mul_(1 - lr * wd)
            denom = rms_denominator(st["exp_avg_sq"], g, st["step"].item(), group["sigma"], group["eps"])
            psi = st["psi"]
            psi.mul_(1 - lr / beta).add_(p, alpha=lr * (1 / beta - alpha))
            p.mul_(1 + s1).add_(psi, alpha=-s2).addcdiv_(g, denom, value=-lr * beta)

    def _foreach(self, group, params, grads, states):
        lr, alpha, beta, s1, s2 = self._coefficients(group)
        decay = 1 - lr * group["weight_decay"]
        psis = [s["psi"] for s in states]
        denoms, bc_sqrt = rms_denominators([s["exp_avg_sq"] for s in states], grads,
                                           [s["step"] for s in states], group["sigma"], group["eps"],
                                           scale_eps=True)
        # weight decay is folded into the two coefficients that read theta (one pass less than a separate mul)
        torch._foreach_mul_(psis, 1 - lr / beta)
        torch._foreach_add_(psis, params, alpha=lr * (1 / beta - alpha) * decay)
        torch._foreach_mul_(params, (1 + s1) * decay)
        torch._foreach_add_(params, psis, alpha=-s2)
        torch._foreach_addcdiv_(params, grads, denoms, [-lr * beta * b for b in bc_sqrt])
