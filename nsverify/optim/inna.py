"""INNA (Boustany, Ch.4, Table 4.5): the inertial Newton algorithm without RMS scaling.

    psi   <- psi + gamma ((1/beta - alpha) theta - psi/beta)
    theta <- theta + gamma ((1/beta - alpha) theta - psi_old/beta - beta g)

with psi_0 = (1 - alpha beta) theta_0 by default (``psi_init="default"``) or 0 (``psi_init="zero"``).
With alpha = beta = 1 and psi_0 = 0, psi stays 0 and the update is exactly SGD's ``theta - gamma g``.
"""
from __future__ import annotations

import torch

from nsverify.optim._base import InertialOptimizer, OptimizerConfigError, check_finite


class INNA(InertialOptimizer):
    """INNA with single-tensor and foreach paths. State per parameter: ``psi`` (plus ``step``)."""

    _slots = ("psi",)
    _name = "INNA"

    def __init__(self, params, lr: float = 1e-2, alpha: float = 0.5, beta: float = 0.1,
                 weight_decay: float = 0.0, psi_init: str = "default", *, foreach: bool | None = None):
        if psi_init not in ("default", "zero"):
            raise OptimizerConfigError(f"psi_init={psi_init!r} is unknown; use 'default' "
                                       "(psi_0 = (1 - alpha beta) theta_0) or 'zero' (psi_0 = 0).")
        defaults = dict(lr=lr, alpha=alpha, beta=beta, weight_decay=weight_decay, psi_init=psi_init,
                        foreach=foreach)
        super().__init__(params, defaults)

    def _validate_group(self, group, where):
        check_finite("lr", group["lr"], low=0.0)
        check_finite("alpha", group["alpha"], low=0.0)
        check_finite("beta", group["beta"], low=0.0, low_open=True, hint="INNA divides by beta.")
        check_finite("weight_decay", group["weight_decay"], low=0.0)

    def _init_slots(self, p, group):
        if group["psi_init"] == "zero":
            return {"psi": torch.zeros_like(p, memory_format=torch.preserve_format)}
        return {"psi": (1 - group["alpha"] * group["beta"])
                * p.detach().clone(memory_format=torch.preserve_format)}

    def _single(self, group, params, grads, states):
        lr, alpha, beta, wd = float(group["lr"]), group["alpha"], group["beta"], group["weight_decay"]
        for p, g, st in zip(params, grads, states):
            if wd != 0:
                p.mul_(1 - lr * wd)
            psi = st["psi"]
            # common = (1/beta - alpha) theta - psi/beta, shared by both updates
            common = torch.mul(p, 1 / beta - alpha).sub_(psi, alpha=1 / beta)
            psi.add_(common, alpha=lr)
            p.add_(common.sub_(g, alpha=beta), alpha=lr)

    def _foreach(self, group, params, grads, states):
        lr, alpha, beta, wd = float(group["lr"]), group["alpha"], group["beta"], group["weight_decay"]
        if wd != 0:
            torch._foreach_mul_(params, 1 - lr * wd)
        psis = [s["psi"] for s in states]
        common = torch._foreach_mul(params, 1 / beta - alpha)
        torch._foreach_sub_(common, psis, alpha=1 / beta)
        torch._foreach_add_(psis, common, alpha=lr)
        torch._foreach_sub_(common, grads, alpha=beta)
        torch._foreach_add_(params, common, alpha=lr)
