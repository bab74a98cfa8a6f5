"""Bifurcation mechanism (Bertoin et al., the definition of backprop_s): backprop_s uses ReLU'(0) = s.

* With no pre-activation exactly at 0 in the float computation, backprop with ReLU'(0) = s is bitwise
  independent of s, in every dtype.
* With exact zeros confined to one layer, the exact AD is affine in s (and float64 autograd reproduces it)."""

from dataclasses import replace
from fractions import Fraction

import torch
from hypothesis import assume, given, note
from hypothesis import strategies as st

from nsverify.oracle.interp import exact_gradient
from nsverify.papers.despres.associated import grad_of
from nsverify.strategies import networks, tie_points

S_VALUES = ("0", "1/2", "1", "3")


def _with_s(spec, s: str):
    return replace(
        spec, layers=tuple(replace(L, act=f"relu[value={s}]") if L.act == "relu" else L for L in spec.layers)
    )


def _grad(spec, dtype, device, record=None):
    net = spec.build(dtype, device)
    fn, w = spec.loss_fn(dtype, device, net=net)
    if record is not None:
        with torch.no_grad():
            net(spec.inputs(dtype, device), record=record)
    return grad_of(fn, w)


@given(
    spec=networks(
        depth=(1, 3),
        activations=("relu",),
        losses=("linear", "squared"),
        max_int=7,
        frac_bits=3,
        pooling=("none", "maxpool"),
    )
)
def test_no_zero_preactivation_backprop_independent_of_s(spec, nsverify_dtype, nsverify_device):
    rec: list = []
    base = _grad(_with_s(spec, "0"), nsverify_dtype, nsverify_device, record=rec)
    assume(not any(bool((y == 0).any()) for y, _a, _z in rec))  # premise: no float pre-activation at 0
    for s in S_VALUES[1:]:
        g = _grad(_with_s(spec, s), nsverify_dtype, nsverify_device)
        note(f"{spec}\ns=0: {base.tolist()}\ns={s}: {g.tolist()}")
        assert torch.equal(g, base), f"backprop_s depends on s={s} although no pre-activation is 0"


@given(st.data())
def test_zeros_in_one_layer_ad_affine_in_s(data):
    spec = data.draw(
        tie_points(
            networks(depth=(1, 3), activations=("relu",), losses=("linear", "squared"), pooling=("none",)),
            kinds=("kink",),
            dtype=torch.float64,
        )
    )
    layers = {s.layer for s in spec.sites() if s.kind == "kink"}
    assume(len(layers) == 1)  # premise: every exact zero lies in one layer
    fn, w = spec.loss_fn(torch.float64)
    g = {s: exact_gradient(fn, w, {"relu": Fraction(s)}) for s in (0, 1, 2, Fraction(1, 2), -1)}
    note(spec.describe())
    for s in (2, Fraction(1, 2), -1):
        want = tuple(a + s * (b - a) for a, b in zip(g[0], g[1]))
        assert g[s] == want, f"AD at s={s} is not affine in s: {g[s]} vs {want}"
    for s in ("0", "1"):  # the float64 variant op reproduces the exact AD (small dyadic network: exact)
        gf = _grad(_with_s(spec, s), torch.float64, "cpu")
        assert [Fraction(v) for v in gf.tolist()] == list(g[Fraction(s)])
