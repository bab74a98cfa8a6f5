"""Programs for zone measurements: rules of :mod:`nsverify.ad`'s switchable layers chosen at BACKWARD time.

A *program* (Boustany Def 5 / Def 10, Bertoin's backprop_s) is a :class:`~nsverify.registry.Rules`, the one
mapping from op keys to rules (:mod:`nsverify.registry.rules`), over the switchable layers' ops::

    Rules("relu[value=0]; max_pool2d[first]")       # "native": what PyTorch computes

ReLU'(0) is the ``relu`` rule (``value=s``); the MaxPool Jacobian is the ``max_pool2d`` tie rule of the hybrid
family (``first`` = beta 0, the native first index; ``even`` = beta 1, minimal 1/|A| on the tie set;
``hybrid=beta`` = (1-beta) native + beta minimal). The layers are :class:`nsverify.ad.ReLUVariant` /
:class:`nsverify.ad.MaxPool2dVariant` built without a rule (``ReLUS`` / ``MaxPool2dS`` here): their forward
is PyTorch's, bitwise, and their backward reads the rule active when the backward runs, so

    loss = loss_fn(model(x), y)                 # one forward
    with use_rule("native"):  gP = torch.autograd.grad(loss, params, retain_graph=True)
    with use_rule("minimal"): gQ = torch.autograd.grad(loss, params, retain_graph=True)

gives both programs' gradients of the *same* forward values (no second model copy, no second forward).

Programs are named (:data:`PROGRAMS`: native, minimal, relu1, relu1_minimal), given as a mapping, or as their
label ``"relu_s=<s>,beta=<b>"`` (:func:`program_label`, the form reports and the zones CLI print).
"""
from __future__ import annotations

import contextlib
from collections.abc import Mapping
from fractions import Fraction

from torch import nn

from nsverify import ad, registry
from nsverify.errors import NsverifyError, UnsupportedOpError
from nsverify.registry import Rules, parse_rule, parse_rules

#: the op keys of a zone program: the switchable layers' registry ops
PROGRAM_OPS = ("relu", "max_pool2d")


def hybrid_program(relu_s: float = 0.0, beta: float = 0.0) -> Rules:
    """The program with ReLU'(0) = ``relu_s`` and the hybrid MaxPool Jacobian of weight ``beta`` (0: first,
    1: even, else hybrid=beta; the native and minimal Jacobians keep their own kernels)."""
    pool = {0: "first", 1: "even"}.get(Fraction(beta), ("hybrid", beta))
    return parse_rules({"relu": parse_rule(relu_s, kind="kink"), "max_pool2d": parse_rule(pool, kind="tie")})


#: named programs; "native" is what PyTorch itself computes
PROGRAMS: dict[str, Rules] = {
    "native": hybrid_program(0.0, 0.0),
    "minimal": hybrid_program(0.0, 1.0),
    "relu1": hybrid_program(1.0, 0.0),
    "relu1_minimal": hybrid_program(1.0, 1.0),
}
NATIVE = PROGRAMS["native"]
MINIMAL = PROGRAMS["minimal"]


def as_program(program) -> Rules:
    """A program (a :class:`~nsverify.registry.Rules`) from a name in :data:`PROGRAMS`, a label
    ``"relu_s=<s>,beta=<b>"`` or a mapping ``{"relu": ..., "max_pool2d": ...}`` / Rules (rules in any form
    :func:`~nsverify.registry.rules.parse_rule` reads; a missing op keeps PyTorch's rule)."""
    if isinstance(program, Mapping):
        unknown = set(program) - set(PROGRAM_OPS)
        if unknown:
            raise UnsupportedOpError(f"a zone program gives rules for {', '.join(PROGRAM_OPS)}; got "
                                     f"{', '.join(sorted(unknown))}.")
        return parse_rules(program)
    name = str(program)
    if name in PROGRAMS:
        return PROGRAMS[name]
    try:
        fields = dict(part.split("=") for part in name.split(","))
        relu_s, beta = float(fields.pop("relu_s", 0.0)), float(fields.pop("beta", 0.0))
        if not fields:
            return hybrid_program(relu_s, beta)
    except (ValueError, TypeError):
        pass
    raise NsverifyError(f"unknown program {program!r}: use one of {', '.join(PROGRAMS)}, "
                        f"'relu_s=<s>,beta=<b>' (e.g. 'beta=1e3'), or a mapping such as "
                        f"{{'relu': 'value=1', 'max_pool2d': 'hybrid=10'}}.")


def program_params(program) -> tuple[float, float | None]:
    """(ReLU'(0), beta) of a program: beta of its max-pool rule in the hybrid family (None outside it)."""
    prog = as_program(program)
    relu = prog.get("relu", registry.torch_rule("relu"))
    relu = relu[0] if isinstance(relu, tuple) else relu
    pool = prog.get("max_pool2d", registry.torch_rule("max_pool2d")).hybrid_beta
    return float(registry.get("relu").kink_derivative(0, relu)), None if pool is None else float(pool)


def program_label(program) -> str:
    """The program's label ``"relu_s=<s>,beta=<b>"`` (what reports and the zones CLI print)."""
    relu_s, beta = program_params(program)
    return f"relu_s={relu_s:g},beta={beta:g}"


@contextlib.contextmanager
def use_rule(program):
    """Make ``program`` (a name, label or mapping: see :func:`as_program`) the backward rule of every rule-less
    ReLU/MaxPool variant for the block."""
    prog = as_program(program)
    with ad.backward_rules(prog):
        yield prog


#: the switchable layers: :class:`nsverify.ad.ReLUVariant` / :class:`nsverify.ad.MaxPool2dVariant` built without
#: a rule, so their backward reads the active program (``ReLUS()``, ``MaxPool2dS(kernel, stride, padding)``)
ReLUS = ad.ReLUVariant
MaxPool2dS = ad.MaxPool2dVariant


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
    return isinstance(m, ad.ReLUVariant) and m.rule is None


def is_maxpool(m: nn.Module) -> bool:
    return isinstance(m, ad.MaxPool2dVariant) and m.rule is None and not m.ceil_mode


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
