"""Backward rules chosen at BACKWARD time: one forward pass, several programs' gradients.

A *program* (Boustany Def 5 / Def 10, Bertoin's backprop_s) is described here by a :class:`BackwardRule`:
``relu_s`` is ReLU'(0) and ``pool_beta`` the hybrid MaxPool Jacobian weight (0 = native first index,
1 = minimal 1/|A| on the tie set, other values = (1-beta) native + beta minimal).  The layers
:class:`ReLUS` and :class:`MaxPool2dS` compute the ordinary forward once; their backward reads the rule that
is active *when the backward runs* (:func:`use_rule`), so

    loss = loss_fn(model(x), y)                 # one forward
    with use_rule(NATIVE):  gP = torch.autograd.grad(loss, params, retain_graph=True)
    with use_rule(MINIMAL): gQ = torch.autograd.grad(loss, params, retain_graph=True)

gives both programs' gradients of the *same* forward values (no second model copy, no second forward).
The rule is a process-wide setting (not thread-local: CUDA autograd runs backward on device threads).
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class BackwardRule:
    """ReLU'(0) = ``relu_s``; MaxPool Jacobian = (1-pool_beta)*native + pool_beta*minimal."""

    relu_s: float = 0.0
    pool_beta: float = 0.0

    def __str__(self) -> str:
        return f"relu_s={self.relu_s:g},beta={self.pool_beta:g}"


#: named programs; "native" is what PyTorch itself computes
PROGRAMS: dict[str, BackwardRule] = {
    "native": BackwardRule(0.0, 0.0),
    "minimal": BackwardRule(0.0, 1.0),
    "relu1": BackwardRule(1.0, 0.0),
    "relu1_minimal": BackwardRule(1.0, 1.0),
}
NATIVE = PROGRAMS["native"]
MINIMAL = PROGRAMS["minimal"]

_current: list[BackwardRule] = [NATIVE]


def current_rule() -> BackwardRule:
    return _current[-1]


def as_rule(program: str | BackwardRule) -> BackwardRule:
    """A :class:`BackwardRule` from a name in :data:`PROGRAMS`, ``"beta=<b>"``, ``"relu_s=<s>"`` or a rule."""
    from ..errors import NsverifyError

    if isinstance(program, BackwardRule):
        return program
    name = str(program)
    if name in PROGRAMS:
        return PROGRAMS[name]
    try:
        fields = dict(part.split("=") for part in name.split(","))
        return BackwardRule(float(fields.pop("relu_s", 0.0)), float(fields.pop("beta", 0.0)))
    except (ValueError, TypeError):
        pass
    raise NsverifyError(f"unknown program {program!r}: use one of {', '.join(PROGRAMS)}, "
                        f"or 'relu_s=<s>,beta=<b>' (e.g. 'beta=1e3').")


@contextlib.contextmanager
def use_rule(program: str | BackwardRule):
    """Make ``program`` the backward rule of every :class:`ReLUS`/:class:`MaxPool2dS` for the block."""
    _current.append(as_rule(program))
    try:
        yield _current[-1]
    finally:
        _current.pop()


class _ReLUSFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.relu(x)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        s = current_rule().relu_s
        out = g * (x > 0).to(g.dtype)
        if s != 0.0:  # ReLU'(0) = s multiplies the upstream gradient (not the constant s)
            out = out + (g * s) * (x == 0).to(g.dtype)
        return out


class ReLUS(nn.Module):
    """ReLU whose derivative at 0 is the active rule's ``relu_s`` (read at backward time)."""

    nonsmooth = "relu"

    def forward(self, x):
        return _ReLUSFn.apply(x)


def _minimal_pool_grad(g, x, out, k, s, p, d):
    """1/|A| on each window's tie set A (ties = entries equal to the window max, in x's dtype); overlapping
    windows accumulate (F.fold sums)."""
    n, c, h, w = x.shape
    xp = F.pad(x, (p[1], p[1], p[0], p[0]), value=float("-inf")) if any(p) else x
    hp, wp = xp.shape[-2:]
    cols = F.unfold(xp.reshape(n * c, 1, hp, wp), k, dilation=d, stride=s)  # (nc, kk, L)
    mask = (cols == out.reshape(n * c, 1, -1)).to(g.dtype)
    count = mask.sum(1, keepdim=True)
    contrib = mask * (g.reshape(n * c, 1, -1) / count)
    back = F.fold(contrib, (hp, wp), k, dilation=d, stride=s).reshape(n, c, hp, wp)
    if any(p):
        back = back[..., p[0]:p[0] + h, p[1]:p[1] + w]
    return back


class _MaxPoolSFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, k, s, p, d):
        out, idx = torch.ops.aten.max_pool2d_with_indices(x, k, s, p, d, False)
        ctx.save_for_backward(x, out, idx)
        ctx.geom = (k, s, p, d)
        return out

    @staticmethod
    def backward(ctx, g):
        x, out, idx = ctx.saved_tensors
        k, s, p, d = ctx.geom
        beta = current_rule().pool_beta
        grad = None
        if beta != 1.0:
            native = torch.ops.aten.max_pool2d_with_indices_backward(g, x, k, s, p, d, False, idx)
            grad = native if beta == 0.0 else native * (1.0 - beta)
        if beta != 0.0:
            minimal = _minimal_pool_grad(g, x, out, k, s, p, d)
            minimal = minimal if beta == 1.0 else minimal * beta
            grad = minimal if grad is None else grad + minimal
        return grad, None, None, None, None


def _pair(v) -> tuple[int, int]:
    return (v, v) if isinstance(v, int) else tuple(v)


class MaxPool2dS(nn.Module):
    """MaxPool2d (any kernel/stride/padding/dilation, ceil_mode=False) whose Jacobian is the active rule's
    hybrid(beta); the forward is computed once and equals torch's max exactly."""

    nonsmooth = "maxpool"

    def __init__(self, kernel_size, stride=None, padding=0, dilation=1):
        super().__init__()
        self.kernel_size = _pair(kernel_size)
        self.stride = _pair(stride if stride is not None else kernel_size)
        self.padding = _pair(padding)
        self.dilation = _pair(dilation)

    def forward(self, x):
        return _MaxPoolSFn.apply(x, self.kernel_size, self.stride, self.padding, self.dilation)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


def switchable(model: nn.Module) -> nn.Module:
    """Replace every ``nn.ReLU`` and ``nn.MaxPool2d`` submodule of ``model`` (in place) by the switchable
    variants; return the model.  Functional calls (``F.relu`` inside ``forward``) cannot be replaced."""
    from ..errors import UnsupportedOpError

    for name, child in list(model.named_children()):
        if isinstance(child, nn.ReLU):
            setattr(model, name, ReLUS())
        elif isinstance(child, nn.MaxPool2d):
            if child.ceil_mode or child.return_indices:
                raise UnsupportedOpError(f"{name}: MaxPool2d with ceil_mode/return_indices is not switchable; "
                                         f"use ceil_mode=False, return_indices=False.")
            setattr(model, name, MaxPool2dS(child.kernel_size, child.stride, child.padding, child.dilation))
        else:
            switchable(child)
    return model


def nonsmooth_layers(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """The switchable nonsmooth layers of ``model`` (name, module)."""
    return [(n, m) for n, m in model.named_modules() if isinstance(m, (ReLUS, MaxPool2dS))]
