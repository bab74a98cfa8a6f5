"""The registry's shrinkage entry and the smooth activation controls (issue 36): softshrink with its two kinks,
and mish and celu, smooth at the point where their formula switches (controls: AD's value is the derivative).

PyTorch's rules were measured on torch 2.13 CPU (eager, torch.func.grad and jvp; every float dtype); no other
release could be measured here, so no entry records a rule change. hardshrink, round, floor, ceil, trunc and
heaviside jump: they have no Clarke set at their jumps and are no registry entries (an entry's pieces meet
continuously); the exact oracle refuses them there (:mod:`nsverify.oracle.ops.jumps`).
"""
from __future__ import annotations

import dataclasses
from fractions import Fraction

import mpmath

from nsverify.registry.types import Elementwise, Piece, Violation, functional_name, lin

F = Fraction


def softshrink_for(lambd=0.5, *_) -> Elementwise:
    """softshrink with threshold ``lambd`` (ATen's argument, a double): pieces x + lambd, 0, x - lambd, with
    PyTorch's rule (the middle piece's derivative 0 at both kinks)."""
    from nsverify.registry.table import get

    lam = F(lambd)
    if lam < 0:
        from nsverify.errors import UnsupportedOpError

        raise UnsupportedOpError(f"softshrink with lambd={lambd}: PyTorch requires lambd >= 0; pass a "
                                 "non-negative threshold.")
    return dataclasses.replace(get("softshrink"), breakpoints=(-lam, lam), pieces=_shrink_pieces(lam),
                               torch_fn=None)


def rrelu_for(noise=None, lower=1.0 / 8, upper=1.0 / 3, training=False, *_) -> Elementwise:
    """rrelu in evaluation mode (ATen ``rrelu_with_noise(self, noise, lower, upper, training)``): leaky_relu with
    the slope (lower + upper) / 2 computed in double, as PyTorch does. In training mode the slopes are random
    draws: that is no fixed function of the input, so it is refused with the fix."""
    from nsverify.errors import UnsupportedOpError
    from nsverify.registry.table import get

    if training:
        raise UnsupportedOpError("rrelu in training mode draws a random slope per entry: it is no registry op; "
                                 "check the model in evaluation mode (model.eval() or F.rrelu(x, training=False)), "
                                 "where the slope is (lower + upper) / 2.")
    return dataclasses.replace(get("rrelu"), pieces=(lin(F((float(lower) + float(upper)) / 2)), lin(1)),
                               torch_fn=None)


def _rrelu_eval(t):
    import torch.nn.functional as tF

    return tF.rrelu(t, training=False)


def _shrink_pieces(lam: Fraction) -> tuple[Piece, ...]:
    return (lin(1, lam), lin(0), lin(1, -lam))


def _mish_piece() -> Piece:
    """x tanh(log(1 + exp(x))) (mpmath); derivative tanh(sp) + x sigmoid(x) (1 - tanh(sp)^2), sp = softplus(x)."""
    def f(x):
        return x * mpmath.tanh(mpmath.log1p(mpmath.exp(x)))

    def df(x):
        t = mpmath.tanh(mpmath.log1p(mpmath.exp(x)))
        return t + x * (1 - t * t) / (1 + mpmath.exp(-x))
    return Piece(mp=f, dmp=df)


def shrink_entries():
    import torch.nn.functional as tF

    yield Elementwise(
        "softshrink", ("softshrink",), tF.softshrink, (F(-1, 2), F(1, 2)), _shrink_pieces(F(1, 2)),
        ("right", "left"), kwargs={"lambd": 0.5},
        doc="x + 1/2 below -1/2, 0 in between, x - 1/2 above 1/2 (lambd = 1/2). PyTorch: derivative 0 at both "
            "kinks, the middle piece's (softshrink_backward passes the gradient where |x| > lambd), which is the "
            "minimum-norm element of [0, 1] there",
        backward=("softshrink_backward",), modules=("Softshrink",),
        functionals=(functional_name("F.softshrink"),), from_args=softshrink_for,
        jax_note="JAX has no softshrink: jax.nn, jax.numpy and jax.lax define none",
        autograd_nodes=("SoftshrinkBackward0",))
    slope = F((1.0 / 8 + 1.0 / 3) / 2)  # the double PyTorch computes, not 11/48
    yield Elementwise(
        "rrelu", ("rrelu_with_noise",), _rrelu_eval, (F(0),), (lin(slope), lin(1)), ("left",),
        doc="F.rrelu(x, training=False): leaky_relu with the slope (1/8 + 1/3) / 2 = 11/48 computed in double "
            "(not dyadic: the registry's slope is that double); PyTorch's derivative at 0 is that slope, the left "
            "piece's. Training mode draws random slopes: no fixed function, refused",
        violations={F(0): (Violation(
            "rounding", "the left derivative (the double (1/8 + 1/3) / 2) is rounded to float16 downward, just "
            "below the Clarke interval [slope, 1] (bfloat16 and float32 round it upward, into it)",
            ("float16",)),)},
        backward=("rrelu_with_noise_backward",), modules=("RReLU",),
        functionals=(functional_name("F.rrelu"), functional_name("torch.rrelu")), from_args=rrelu_for,
        jax_note="JAX has no rrelu: jax.nn defines none", autograd_nodes=("RreluWithNoiseBackward0",))
    yield Elementwise(
        "mish", ("mish",), tF.mish, (F(0),), (_mish_piece(), _mish_piece()), ("left",),
        doc="x tanh(softplus(x)): smooth, a control at 0 (derivative 3/5 = tanh(log 2), mpmath)",
        violations={F(0): (Violation(
            "rounding", "mish'(0) = tanh(log 2) = 3/5 is not dyadic: every float dtype returns it rounded (float64 "
            "0.6, float32 0.6000000238...), just off the one-point Clarke set {3/5}"),)},
        modules=("Mish",), functionals=(functional_name("F.mish"),),
        jax_note="JAX has no mish: jax.nn defines none",
        autograd_nodes=("MishBackward0",))
    yield Elementwise(
        "celu", ("celu",), tF.celu, (F(0),),
        (Piece(mp=lambda x: mpmath.exp(x) - 1, dmp=mpmath.exp), lin(1)), ("left",), kwargs={"alpha": 1.0},
        doc="alpha = 1: exp(x) - 1 below 0, x above, both one-sided derivatives 1 (C^1, a piece boundary, no "
            "kink: a control). PyTorch runs it as celu (autograd node CeluBackward0)",
        modules=("CELU",), functionals=(functional_name("F.celu"), functional_name("torch.celu")),
        jax="jax.nn.celu(x, alpha=1.0)", autograd_nodes=("CeluBackward0",))
