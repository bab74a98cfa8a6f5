"""The momentum variant of INNAprop (Boustany, Ch.4, Section 4.6.2, equations (4.21)-(4.23)).

    v     <- sigma v + (1 - sigma) g^2 ;  G = g / (sqrt(v/(1 - sigma^k)) + eps)
    m~    <- (1 - alpha gamma) m~ + gamma^2 (1 - alpha beta)/(1 - alpha gamma) G
    theta <- theta - m~ - gamma (beta - gamma)/(1 - alpha gamma) G

With m~_0 = 0 it is, in exact arithmetic, the same sequence as INNAprop with psi_0 = (1 - alpha beta) theta_0
(both discretize (4.9)); the thesis reports that the gamma^2 factor makes it unstable at <= 32 bits
(Sec. 4.6.2, Fig. 4.10). Requires alpha * lr < 1 (division by 1 - alpha gamma).
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


class INNApropMomentum(InertialOptimizer):
    """Momentum form of INNAprop. State: ``momentum`` (m~) and ``exp_avg_sq`` (v)."""

    _slots = ("momentum", "exp_avg_sq")
    _name = "INNApropMomentum"

    def __init__(self, params, lr: float = 1e-3, alpha: float = 0.1, beta: float = 0.9, sigma: float = 0.999,
                 eps: float = 1e-8, weight_decay: float = 0.0, *, foreach: bool | None = None):
        defaults = dict(lr=lr, alpha=alpha, beta=beta, sigma=sigma, eps=eps, weight_decay=weight_decay,
                        foreach=foreach)
        super().__init__(params, defaults)

    def _validate_group(self, group, where):
        lr = check_finite("lr", group["lr"], low=0.0)
        alpha = check_finite("alpha", group["alpha"], low=0.0)
        check_finite("beta", group["beta"], low=0.0)
        check_finite("sigma", group["sigma"], low=0.0, high=1.0, high_open=True)
        check_finite("eps", group["eps"], low=0.0)
        check_finite("weight_decay", group["weight_decay"], low=0.0)
        if not alpha * lr < 1:
            raise OptimizerConfigError(
                f"INNApropMomentum is ill-posed {where}: alpha*lr = {alpha * lr} >= 1; (4.22)-(4.23) "
                "divide by (1 - alpha*lr). Lower lr or alpha.")

    def _init_slots(self, p, group):
        return {"momentum": torch.zeros_like(p, memory_format=torch.preserve_format),
                "exp_avg_sq": torch.zeros_like(p, memory_format=torch.preserve_format)}

    @staticmethod
    def _coefficients(group):
        lr, alpha, beta = float(group["lr"]), group["alpha"], group["beta"]
        a = 1 - alpha * lr
        return lr, a, lr * lr * (1 - alpha * beta) / a, lr * (beta - lr) / a

    def _single(self, group, params, grads, states):
        lr, a, b, c = self._coefficients(group)
        wd = group["weight_decay"]
        for p, g, st in zip(params, grads, states):
            if wd != 0:
                p.mul_(1 - lr * wd)
            denom = rms_denominator(st["exp_avg_sq"], g, st["step"].item(), group["sigma"], group["eps"])
            G = torch.div(g, denom)
            m = st["momentum"]
            m.mul_(a).add_(G, alpha=b)
            p.sub_(m).sub_(G, alpha=c)

    def _foreach(self, group, params, grads, states):
        lr, a, b, c = self._coefficients(group)
        if group["weight_decay"] != 0:
            torch._foreach_mul_(params, 1 - lr * group["weight_decay"])
        denoms, _ = rms_denominators([s["exp_avg_sq"] for s in states], grads, [s["step"] for s in states],
                                     group["sigma"], group["eps"], scale_eps=False)
        G = torch._foreach_div(grads, denoms)
        ms = [s["momentum"] for s in states]
        torch._foreach_mul_(ms, a)
        torch._foreach_add_(ms, G, alpha=b)
        torch._foreach_sub_(params, ms)
        torch._foreach_sub_(params, G, alpha=c)
