"""-inf as an attention mask in the exact oracle (nsverify.oracle.numbers.NegInf): causal and masked attention get
verdicts, checked against float64 autograd on both sides of the kink; every other use of -inf (and NaN, +inf)
is refused with NonFiniteError."""

from fractions import Fraction

import pytest
import torch
import torch.nn.functional as F

import nsverify
from nsverify.errors import NonFiniteError

D = torch.float64


def _one_sided(fn, w, d, t=2.0**-20):
    """float64 autograd at w + t d: the gradient of the piece on that side (the programs here are smooth off
    their one kink)."""
    x = (w + t * d).clone().requires_grad_(True)
    fn(x).backward()
    return x.grad


def _causal(w):
    q, k, v = w.reshape(1, 3, 1), (2 * w).reshape(1, 3, 1), (w - 1).reshape(1, 3, 1)
    return F.scaled_dot_product_attention(q, k, v, is_causal=True).sum()


def _masked(w):
    """The same attention written with a boolean mask through masked_fill(-inf) and softmax."""
    q, k, v = w.reshape(3, 1), (2 * w).reshape(3, 1), (w - 1).reshape(3, 1)
    s = (q @ k.T).masked_fill(~torch.ones(3, 3, dtype=torch.bool).tril(), float("-inf"))
    return (torch.softmax(s, dim=-1) @ v).sum()


def _flash(w):
    """The CPU flash kernel itself (what a float run of nn.MultiheadAttention names), causal."""
    q, k, v = w.reshape(1, 1, 3, 1), (2 * w).reshape(1, 1, 3, 1), (w - 1).reshape(1, 1, 3, 1)
    return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, is_causal=True)[0].sum()


def _float_mask(w):
    """A float additive mask holding -inf, passed to scaled_dot_product_attention."""
    q, k, v = w.reshape(1, 3, 1), (2 * w).reshape(1, 3, 1), (w - 1).reshape(1, 3, 1)
    mask = torch.zeros(3, 3, dtype=w.dtype).masked_fill(~torch.ones(3, 3, dtype=torch.bool).tril(), float("-inf"))
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask).sum()


@pytest.mark.parametrize("attn", [_causal, _masked, _flash, _float_mask])
def test_masked_attention_at_a_kink_matches_float64_on_both_sides(attn):
    """relu(attention(w) + 3) at w = 0: the scores are 0, so query i averages v_0..v_i = -1 exactly (a kink at
    w), and the scores' derivatives vanish there, so the attention's gradient is sum over i >= j of 1/(i+1):
    (11/6, 5/6, 1/3) by hand. The oracle's set is {0, that gradient}, each the one-sided float64 gradient along a
    direction crossing the kink; AD (relu'(0) = 0) is the 0 side, a member."""
    w = torch.zeros(3, dtype=D)
    fn = lambda x: torch.relu(attn(x) + 3)  # noqa: E731
    v = nsverify.check_gradient(fn, w)
    assert v.status == "member" and v.exact, v
    g = torch.tensor([11 / 6, 5 / 6, 1 / 3], dtype=D)
    d = g / g.norm()
    up, down = _one_sided(fn, w, d), _one_sided(fn, w, -d)
    assert torch.allclose(up, g, rtol=1e-5) and torch.equal(down, torch.zeros(3, dtype=D))
    verts = sorted(tuple(float(x) for x in vx) for vx in v.bouligand)
    assert len(verts) == 2 and verts[0] == (0.0, 0.0, 0.0)
    assert torch.allclose(torch.tensor(verts[1], dtype=D), g, rtol=1e-12)
    half = (Fraction(11, 12), Fraction(5, 12), Fraction(1, 6))  # the segment's midpoint, exactly
    assert nsverify.check_gradient(fn, w, ad=half).status == "member"
    assert nsverify.check_gradient(fn, w, ad=tuple(2 * c for c in half) + ()).status == "member"
    assert nsverify.check_gradient(fn, w, ad=tuple(4 * c for c in half)).status == "not_member"


def _kink_of(f):
    return lambda x: torch.relu(f(x) + 3)


def test_masked_and_causal_give_the_same_verdict_and_set():
    w = torch.zeros(3, dtype=D)
    verdicts = [nsverify.check_gradient(_kink_of(f), w) for f in (_causal, _masked, _flash, _float_mask)]
    assert all(v.status == "member" and v.exact for v in verdicts)
    sets = {tuple(sorted(tuple(vx) for vx in v.bouligand)) for v in verdicts}
    assert sets == {((0, 0, 0), (Fraction(11, 6), Fraction(5, 6), Fraction(1, 3)))}  # exactly, by hand


@pytest.mark.parametrize("fn, what", [
    (lambda w: torch.relu(torch.maximum(w, torch.tensor([float("-inf"), 0.0], dtype=D))).sum(), "compared"),
    (lambda w: (w * torch.tensor([float("-inf"), 1.0], dtype=D)).sum(), "times a parameter"),
    (lambda w: torch.softmax(torch.full((2,), float("-inf"), dtype=D) + w, 0).sum(), "a fully masked softmax row"),
    (lambda w: (w + torch.tensor([float("inf"), 0.0], dtype=D)).sum(), "+inf"),
    (lambda w: (w + torch.tensor([float("nan"), 0.0], dtype=D)).sum(), "NaN"),
])
def test_other_uses_of_non_finite_values_are_refused(fn, what):
    with pytest.raises(NonFiniteError):
        nsverify.check_gradient(fn, torch.tensor([0.0, 1.0], dtype=D))
