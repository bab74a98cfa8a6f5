"""Programs for zone measurements, as backward rules of :mod:`nsverify.ad` chosen at BACKWARD time.

A *program* (Boustany Def 5 / Def 10, Bertoin's backprop_s) is described by a :class:`BackwardRule`:
``relu_s`` is ReLU'(0) and ``pool_beta`` the hybrid MaxPool Jacobian weight (0 = native first index,
1 = minimal 1/|A| on the tie set, other values = (1-beta) native + beta minimal).  The layers are
:class:`nsverify.ad.ReLUVariant` / :class:`nsverify.ad.MaxPool2dVariant` built with ``None`` rules
(:class:`ReLUS` / :class:`MaxPool2dS` here): their forward is PyTorch's, bitwise, and their backward reads the
rule active when the backward runs, so

    loss = loss_fn(model(x), y)                 # one forward
    with use_rule("native"):  gP = torch.autograd.grad(loss, params, retain_graph=True)
    with use_rule("minimal"): gQ = torch.autograd.grad(loss, params, retain_graph=True)

gives both programs' gradients of the *same* forward values (no second model copy, no second forward).
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass

from torch import nn

from nsverify import ad
from nsverify.errors import NsverifyError, UnsupportedOpError


@dataclass(frozen=True)
class BackwardRule:
    """ReLU'(0) = ``relu_s``; MaxPool Jacobian = (1-pool_beta)*native + pool_beta*minimal."""

    relu_s: float = 0.0
    pool_beta: float = 0.0

    def __str__(self) -> str:
        return f"relu_s={self.relu_s:g},beta={self.pool_beta:g}"

    def ad_rules(self) -> dict:
        """The same program as keyword arguments of :func:`nsverify.ad.backward_rules`."""
        if self.pool_beta == 0.0:
            pool = {"maxpool": "native"}
        elif self.pool_beta == 1.0:
            pool = {"maxpool": "minimal"}
        else:
            pool = {"maxpool": "hybrid", "beta": float(self.pool_beta)}
        return {"relu_s": float(self.relu_s), **pool}


#: named programs; "native" is what PyTorch itself computes
PROGRAMS: dict[str, BackwardRule] = {
    "native": BackwardRule(0.0, 0.0),
    "minimal": BackwardRule(0.0, 1.0),
    "relu1": BackwardRule(1.0, 0.0),
    "relu1_minimal": BackwardRule(1.0, 1.0),
}
NATIVE = PROGRAMS["native"]
MINIMAL = PROGRAMS["minimal"]


def as_rule(program: str | BackwardRule) -> BackwardRule:
    """A :class:`BackwardRule` from a name in :data:`PROGRAMS`, ``"relu_s=<s>,beta=<b>"`` or a rule."""
    if isinstance(program, BackwardRule):
        return program
    name = str(program)
    if name in PROGRAMS:
        return PROGRAMS[name]
    try:
        fields = dict(part.split("=") for part in name.split(","))
        rule = BackwardRule(float(fields.pop("relu_s", 0.0)), float(fields.pop("beta", 0.0)))
        if not fields:
            return rule
    except (ValueError, TypeError):
        pass
    raise NsverifyError(f"unknown program {program!r}: use one of {', '.join(PROGRAMS)}, "
                        f"or 'relu_s=<s>,beta=<b>' (e.g. 'beta=1e3').")


@contextlib.contextmanager
def use_rule(program: str | BackwardRule):
    """Make ``program`` the backward rule of every rule-less ReLU/MaxPool variant for the block."""
    rule = as_rule(program)
    with ad.backward_rules(**rule.ad_rules()):
        yield rule


class ReLUS(ad.ReLUVariant):
    """ReLU whose derivative at 0 is the active rule's ``relu_s`` (read at backward time)."""

    def __init__(self):
        super().__init__(None)


class MaxPool2dS(ad.MaxPool2dVariant):
    """MaxPool2d whose Jacobian is the active rule's hybrid(beta), read at backward time."""

    def __init__(self, kernel_size, stride=None, padding=0, dilation=1):
        super().__init__(kernel_size, stride, padding, dilation, False, None, None)


def switchable(model: nn.Module) -> nn.Module:
    """Replace every ``nn.ReLU`` and ``nn.MaxPool2d`` submodule of ``model`` (in place) by the switchable
    variants; return the model.  Functional calls (``F.relu`` inside ``forward``) cannot be replaced."""
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


def is_relu(m: nn.Module) -> bool:
    return isinstance(m, ad.ReLUVariant) and m.s is None


def is_maxpool(m: nn.Module) -> bool:
    return isinstance(m, ad.MaxPool2dVariant) and m.jacobian is None and not m.ceil_mode


def nonsmooth_layers(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """The switchable nonsmooth layers of ``model`` (name, module): rule-less nsverify.ad variants."""
    return [(n, m) for n, m in model.named_modules() if is_relu(m) or is_maxpool(m)]


def _pair(v) -> tuple[int, int]:
    return (int(v), int(v)) if isinstance(v, int) else tuple(int(a) for a in v)


def pool_geometry(m: nn.Module) -> tuple:
    """((kh, kw), (sh, sw), (ph, pw), (dh, dw)) of an nn.MaxPool2d or nsverify.ad.MaxPool2dVariant."""
    k = _pair(m.kernel_size)
    s = k if m.stride is None or m.stride == [] else _pair(m.stride)
    return k, s, _pair(m.padding), _pair(m.dilation)
