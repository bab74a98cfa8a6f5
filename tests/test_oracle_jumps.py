"""The ops that jump (issue 36): round (fake quantisation), floor, ceil, trunc, frac, hardshrink, heaviside. At a
jump of an argument that depends on w the function has no Clarke set: the oracle refuses with NotLipschitzError
(its diagnosis ``not_lipschitz``), never member or not_member. Off the jumps (and for constants on one) the op is
evaluated exactly; the expected derivatives are by hand."""
from __future__ import annotations

from fractions import Fraction

import pytest
import torch
import torch.nn.functional as tF

import nsverify
from nsverify.errors import NotLipschitzError

F = Fraction
D = torch.float64

# (program, point at a jump of a w-dependent argument, op named in the refusal)
AT_THE_JUMP = {
    "round at 1/2": (lambda w: torch.round(w).sum(), [0.5], "round"),
    "round half to even at 5/2": (lambda w: torch.round(w).sum(), [2.5], "round"),
    "fake quantisation round(4 w) / 4 at w = 1/8": (lambda w: (torch.round(4 * w) / 4).sum(), [0.125], "round"),
    "floor at 1": (lambda w: torch.floor(w).sum(), [1.0], "floor"),
    "ceil at -2": (lambda w: torch.ceil(w).sum(), [-2.0], "ceil"),
    "trunc at -1": (lambda w: torch.trunc(w).sum(), [-1.0], "trunc"),
    "frac at 3": (lambda w: torch.frac(w).sum(), [3.0], "frac"),
    "hardshrink at 1/2": (lambda w: tF.hardshrink(w).sum(), [0.5], "hardshrink"),
    "hardshrink at -1/4 (lambd 1/4)": (lambda w: tF.hardshrink(w, 0.25).sum(), [-0.25], "hardshrink"),
}


@pytest.mark.parametrize("label", sorted(AT_THE_JUMP))
def test_a_jump_is_refused_never_decided(label):
    fn, at, op = AT_THE_JUMP[label]
    with pytest.raises(NotLipschitzError, match=f"discontinuous at w: {op}") as info:
        nsverify.check_gradient(fn, torch.tensor(at, dtype=D))
    assert info.value.diagnosis.kind == "not_lipschitz" and info.value.diagnosis.allowed
    assert info.value.diagnosis.op == f"aten.{op}"


# (program, point off the jumps, exact AD by hand)
OFF_THE_JUMPS = {
    # round(w) + w at 1/4: round is 0 nearby, derivative 1
    "round": (lambda w: (torch.round(w) + w).sum(), [0.25], (F(1),)),
    # fake quantisation times w: round(4 * 3/10) / 4 = 1/4 nearby, so d/dw (1/4) w = 1/4
    "fake quantisation": (lambda w: (torch.round(4 * w) / 4 * w).sum(), [0.3], (F(1, 4),)),
    # floor(w) * w at 3/2: floor is 1 nearby
    "floor": (lambda w: (torch.floor(w) * w).sum(), [1.5], (F(1),)),
    # ceil(w) * w at -3/2: ceil is -1 nearby
    "ceil": (lambda w: (torch.ceil(w) * w).sum(), [-1.5], (F(-1),)),
    # trunc is 0 on (-1, 1): no jump at 0, so trunc(w) + w at 0 has derivative 1
    "trunc at 0 (no jump)": (lambda w: (torch.trunc(w) + w).sum(), [0.0], (F(1),)),
    # frac(w) = w - 1 near 5/4
    "frac": (lambda w: torch.frac(w).sum(), [1.25], (F(1),)),
    # hardshrink: the identity where |w| > 1/2, 0 inside
    "hardshrink": (lambda w: tF.hardshrink(w).sum(), [0.75, 0.25, -2.0], (F(1), F(0), F(1))),
}


@pytest.mark.parametrize("label", sorted(OFF_THE_JUMPS))
def test_off_the_jumps_the_op_is_exact(label):
    fn, at, ad = OFF_THE_JUMPS[label]
    v = nsverify.check_gradient(fn, torch.tensor(at, dtype=D))
    assert v.status == "member" and v.exact and v.exact_ad == ad


def test_a_constant_on_a_jump_is_evaluated():
    """quantile's ceil of a constant position sits on an integer: nothing depends on w, so it is evaluated (the
    quantile of 5 entries at q = 1/2 picks rank 2: w2 here)."""
    v = nsverify.check_gradient(lambda w: torch.quantile(w, 0.5) + torch.ceil(torch.tensor(2.0, dtype=D)),
                                torch.tensor([0.0, 1.0, 2.0, 3.0, 4.0], dtype=D))
    assert v.status == "member" and v.exact_ad == (0, 0, 1, 0, 0)


def test_round_with_decimals_is_refused_naming_the_rewrite():
    with pytest.raises(nsverify.NsverifyError, match="decimals"):
        nsverify.check_gradient(lambda w: torch.round(w, decimals=1).sum(), torch.tensor([0.25], dtype=D))


def test_hardshrink_with_lambd_0_is_the_identity_but_its_gradient_at_0_is_0():
    """hardshrink(x, 0) = x everywhere (continuous, derivative 1), but PyTorch's backward passes the gradient only
    where |x| > lambd: 0 at x = 0, outside the Clarke set {1}."""
    x = torch.zeros(1, dtype=D, requires_grad=True)
    (g,) = torch.autograd.grad(tF.hardshrink(x, 0.0).sum(), x)
    assert g.item() == 0.0
    v = nsverify.check_gradient(lambda w: tF.hardshrink(w, 0.0).sum(), torch.zeros(1, dtype=D))
    assert v.status == "not_member" and v.exact and v.exact_ad == (F(0),) and v.clarke == (F(1), F(1))
    assert nsverify.oracle.verify_certificate(v.to_json())
