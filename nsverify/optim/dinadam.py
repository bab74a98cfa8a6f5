"""DINAdam (Boustany, Ch.4, Section 4.6.3, Algorithm 6), with the sign of the alpha*beta*g term corrected.

The memory-saving change of variables m~_k = m_k - alpha beta g_{k-1} applied to (4.28) gives
m_{k+1} = m~_{k+1} + alpha beta g_k, so (4.29) reads theta_{k+1} = theta_k - eta (m~_{k+1} + alpha beta g_k).
The thesis prints a minus sign in (4.31), (4.34) and Algorithm 6 line 9; with that sign the algorithm is not
(4.28)-(4.29) (our float64 equivalence test fails with it). Implemented:

    v  <- sigma2 v + (1 - sigma2) g^2
    m~ <- sigma1 m~ + (1 - sigma1)(1 - alpha beta) g        (= (1 - s1 + b a s1 - b a) g, printed form)
    theta <- theta - lr (m~ + alpha beta g)/bc1 / (sqrt(v/bc2) + eps)

with Adam's bias corrections bc1 = 1 - sigma1^k, bc2 = 1 - sigma2^k when ``bias_correction=True``
(default) and bc1 = bc2 = 1 otherwise (Algorithm 6 verbatim). With beta = 0 it is Adam (Remark 17).
"""
from __future__ import annotations

import torch

from nsverify.optim._base import InertialOptimizer, check_finite


class DINAdam(InertialOptimizer):
    """DINAdam with single-tensor and foreach paths. State: ``exp_avg`` (m~) and ``exp_avg_sq`` (v)."""

    _slots = ("exp_avg", "exp_avg_sq")
    _name = "DINAdam"

    def __init__(self, params, lr: float = 1e-3, alpha: float = 1.0, beta: float = 0.1,
                 sigmas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.0,
                 bias_correction: bool = True, *, foreach: bool | None = None):
        defaults = dict(lr=lr, alpha=alpha, beta=beta, sigmas=tuple(sigmas), eps=eps,
                        weight_decay=weight_decay, bias_correction=bool(bias_correction), foreach=foreach)
        super().__init__(params, defaults)

    def _validate_group(self, group, where):
        check_finite("lr", group["lr"], low=0.0)
        check_finite("alpha", group["alpha"], low=0.0)
        check_finite("beta", group["beta"], low=0.0)
        s1, s2 = group["sigmas"]
        check_finite("sigma1", s1, low=0.0, high=1.0, high_open=True)
        check_finite("sigma2", s2, low=0.0, high=1.0, high_open=True)
        check_finite("eps", group["eps"], low=0.0)
        check_finite("weight_decay", group["weight_decay"], low=0.0)

    def _init_slots(self, p, group):
        return {"exp_avg": torch.zeros_like(p, memory_format=torch.preserve_format),
                "exp_avg_sq": torch.zeros_like(p, memory_format=torch.preserve_format)}

    @staticmethod
    def _corrections(group, step: float):
        s1, s2 = group["sigmas"]
        if not group["bias_correction"]:
            return 1.0, 1.0
        return 1 - s1 ** step, (1 - s2 ** step) ** 0.5

    def _single(self, group, params, grads, states):
        lr, ab, wd = float(group["lr"]), group["alpha"] * group["beta"], group["weight_decay"]
        s1, s2 = group["sigmas"]
        for p, g, st in zip(params, grads, states):
            if wd != 0:
                p.mul_(1 - lr * wd)
            bc1, bc2_sqrt = self._corrections(group, st["step"].item())
            v, m = st["exp_avg_sq"], st["exp_avg"]
            v.mul_(s2).addcmul_(g, g, value=1 - s2)
            m.mul_(s1).add_(g, alpha=(1 - s1) * (1 - ab))
            denom = (v.sqrt() / bc2_sqrt).add_(group["eps"])
            p.addcdiv_(m.add(g, alpha=ab), denom, value=-lr / bc1)

    def _foreach(self, group, params, grads, states):
        lr, ab, wd = float(group["lr"]), group["alpha"] * group["beta"], group["weight_decay"]
        s1, s2 = group["sigmas"]
        if wd != 0:
            torch._foreach_mul_(params, 1 - lr * wd)
        corr = [self._corrections(group, s["step"].item()) for s in states]
        vs, ms = [s["exp_avg_sq"] for s in states], [s["exp_avg"] for s in states]
        torch._foreach_mul_(vs, s2)
        torch._foreach_addcmul_(vs, grads, grads, 1 - s2)
        torch._foreach_mul_(ms, s1)
        torch._foreach_add_(ms, grads, alpha=(1 - s1) * (1 - ab))
        denoms = torch._foreach_sqrt(vs)
        torch._foreach_div_(denoms, [c[1] for c in corr])
        torch._foreach_add_(denoms, group["eps"])
        num = torch._foreach_add(ms, grads, alpha=ab)
        torch._foreach_addcdiv_(params, num, denoms, [-lr / c[0] for c in corr])
