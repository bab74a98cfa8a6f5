"""Shared machinery of the inertial optimizers: validation, lazy state, single-tensor/foreach dispatch.

Subclasses set ``_slots`` (names of the per-parameter state tensors besides ``step``) and implement
``_init_slots`` (new state for one parameter), ``_single`` (one parameter at a time, ``torch.Tensor`` in-place
ops) and ``_foreach`` (lists of tensors of one device and dtype, ``torch._foreach_*`` ops).
"""
from __future__ import annotations

import abc
import math
from collections import defaultdict

import torch
from torch.optim import Optimizer

from nsverify.errors import NsverifyError


class OptimizerConfigError(NsverifyError, ValueError):
    """A hyper-parameter that makes the optimizer ill-posed (e.g. INNAprop with lr >= beta)."""


def check_finite(name: str, value: float, *, low: float | None = None, high: float | None = None,
                 low_open: bool = False, high_open: bool = False, hint: str = "") -> float:
    """Return ``float(value)`` or raise :class:`OptimizerConfigError` naming the bound that failed."""
    try:
        x = float(value)
    except (TypeError, ValueError) as exc:
        raise OptimizerConfigError(f"{name}={value!r} is not a number; pass a float.") from exc
    if not math.isfinite(x):
        raise OptimizerConfigError(f"{name}={x} is not finite; pass a finite float. {hint}".strip())
    if low is not None and (x <= low if low_open else x < low):
        op = ">" if low_open else ">="
        raise OptimizerConfigError(f"{name}={x} is invalid: it must be {op} {low}. {hint}".strip())
    if high is not None and (x >= high if high_open else x > high):
        op = "<" if high_open else "<="
        raise OptimizerConfigError(f"{name}={x} is invalid: it must be {op} {high}. {hint}".strip())
    return x


class InertialOptimizer(Optimizer, metaclass=abc.ABCMeta):
    """Base class: gathers parameters with gradients, creates state lazily, dispatches to a path."""

    _slots: tuple[str, ...] = ()
    _name = "optimizer"

    def __init__(self, params, defaults: dict):
        self._validate_group(defaults, where="at construction")
        super().__init__(params, defaults)
        for i, group in enumerate(self.param_groups):
            self._validate_group(group, where=f"for param group {i} at construction")

    # -- hooks -------------------------------------------------------------------------------------------
    def _validate_group(self, group: dict, where: str) -> None:  # pragma: no cover - overridden
        check_finite("lr", group["lr"], low=0.0)

    @abc.abstractmethod
    def _init_slots(self, p: torch.Tensor, group: dict) -> dict:
        """New state slots for one parameter (called lazily at its first step)."""

    @abc.abstractmethod
    def _single(self, group, params, grads, states) -> None:
        """One step, one parameter at a time, with in-place tensor ops."""

    @abc.abstractmethod
    def _foreach(self, group, params, grads, states) -> None:
        """One step on lists of tensors of one device and dtype, with torch._foreach_* ops."""

    # -- machinery ---------------------------------------------------------------------------------------
    def __setstate__(self, state):
        super().__setstate__(state)
        for group in self.param_groups:
            group.setdefault("foreach", None)

    def _gather(self, group):
        params, grads, states = [], [], []
        for p in group["params"]:
            if p.grad is None:
                continue
            if p.grad.is_sparse:
                raise NsverifyError(f"{self._name} does not support sparse gradients; use a dense embedding "
                                    "(sparse=False) or torch.optim.SparseAdam for that parameter.")
            if torch.is_complex(p):
                raise NsverifyError(f"{self._name} does not support complex parameters; optimize "
                                    "torch.view_as_real(p) as a real parameter instead.")
            state = self.state[p]
            if len(state) == 0:
                state["step"] = torch.tensor(0.0, dtype=torch.float32)
                state.update(self._init_slots(p, group))
            params.append(p)
            grads.append(p.grad)
            states.append(state)
        return params, grads, states

    @torch.no_grad()
    def step(self, closure=None):
        """Perform one optimization step; re-validates every param group first (schedulers change lr)."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for i, group in enumerate(self.param_groups):
            self._validate_group(group, where=f"for param group {i} at step")
        for group in self.param_groups:
            params, grads, states = self._gather(group)
            if not params:
                continue
            foreach = group.get("foreach")
            if foreach is None:
                foreach = all(p.is_cuda for p in params)
            if foreach:
                buckets = defaultdict(lambda: ([], [], []))
                for p, g, s in zip(params, grads, states):
                    b = buckets[(p.device, p.dtype)]
                    b[0].append(p)
                    b[1].append(g)
                    b[2].append(s)
                for bp, bg, bs in buckets.values():
                    torch._foreach_add_([s["step"] for s in bs], 1.0)
                    self._foreach(group, bp, bg, bs)
            else:
                for p, g, s in zip(params, grads, states):
                    s["step"] += 1
                    self._single(group, [p], [g], [s])
        return loss

    def state_bytes(self) -> int:
        """Bytes held by per-parameter state tensors (all slots, including ``step``)."""
        return sum(t.numel() * t.element_size() for st in self.state.values() for t in st.values()
                   if torch.is_tensor(t))


def rms_denominators(exp_avg_sqs, grads, steps, sigma: float, eps: float, *, scale_eps: bool):
    """Update ``v <- sigma v + (1-sigma) g^2`` in place (foreach) and return the denominators.

    With ``scale_eps=False`` the result is ``sqrt(v)/sqrt(1-sigma^k) + eps`` computed exactly as
    torch.optim.AdamW's foreach path does.  With ``scale_eps=True`` it is ``sqrt(v) + eps*sqrt(1-sigma^k)``
    (one pass less); the caller then multiplies its step by ``sqrt(1-sigma^k)``.
    Returns ``(denoms, bc_sqrt)``.
    """
    torch._foreach_mul_(exp_avg_sqs, sigma)
    torch._foreach_addcmul_(exp_avg_sqs, grads, grads, 1 - sigma)
    bc_sqrt = [(1 - sigma ** s.item()) ** 0.5 for s in steps]
    denoms = torch._foreach_sqrt(exp_avg_sqs)
    if scale_eps:
        torch._foreach_add_(denoms, [eps * b for b in bc_sqrt])
    else:
        torch._foreach_div_(denoms, bc_sqrt)
        torch._foreach_add_(denoms, eps)
    return denoms, bc_sqrt


def rms_denominator(exp_avg_sq: torch.Tensor, grad: torch.Tensor, step: float, sigma: float, eps: float):
    """Single-tensor twin of :func:`rms_denominators`, op for op as torch.optim.AdamW's single-tensor path."""
    exp_avg_sq.mul_(sigma).addcmul_(grad, grad, value=1 - sigma)
    bc_sqrt = (1 - sigma ** step) ** 0.5
    return (exp_avg_sq.sqrt() / bc_sqrt).add_(eps)
