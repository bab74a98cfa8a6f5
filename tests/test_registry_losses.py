"""The loss, shrinkage and smooth-control entries of issue 36, item 3: each Clarke set derived by hand (below, in
Fractions, from the loss's textbook formula), checked against the entry and against PyTorch's own function by
one-sided float64 difference quotients; PyTorch's derivative at each kink as the entry records it; and the exact
oracle on small programs, member and not_member (Park et al.'s Lemma 2 construction: f(w) = g(w) - g(-w) with a
kink of g at 0 is affine, and AD's derivative at 0 misses its one Clarke element)."""
from __future__ import annotations

import warnings
from fractions import Fraction

import mpmath
import pytest
import torch
import torch.nn.functional as tF

import nsverify
from nsverify import registry
from nsverify.errors import UnsupportedOpError

F = Fraction
D = torch.float64

# name -> {kink: (left derivative, right derivative)}, by hand from the loss's formula at its margin/switch point
#   l1_loss(x, 0) = |x|                                   at 0: -1 | 1
#   smooth_l1_loss(x, 0, beta=1): x^2/2 inside, |x| - 1/2  at -1: -1 | -1 (x), at 1: 1 | 1     (C^1)
#   huber_loss(x, 0, delta=1): the same function           at -1, 1 as smooth_l1_loss
#   hinge_embedding_loss(x, -1, margin=1) = max(0, 1 - x)  at 1: -1 | 0
#   margin_ranking_loss(x, 0, 1, margin=0) = max(0, -x)    at 0: -1 | 0
#   multi_margin_loss((x, 1), class 1) = max(0, 1 - 1 + x) / 2 classes          at 0: 0 | 1/2
#   multilabel_margin_loss((x, 1), {1}) = max(0, 1 - (1 - x)) / 2 classes       at 0: 0 | 1/2
#   softshrink(x, 1/2) = x + 1/2 | 0 | x - 1/2             at -1/2: 1 | 0, at 1/2: 0 | 1
#   rrelu(x, training=False) = s x (x < 0), x; s = (1/8 + 1/3) / 2 in double      at 0: s | 1
S = F((1.0 / 8 + 1.0 / 3) / 2)
HAND_KINKS = {
    "l1_loss": {F(0): (F(-1), F(1))},
    "smooth_l1_loss": {F(-1): (F(-1), F(-1)), F(1): (F(1), F(1))},
    "huber_loss": {F(-1): (F(-1), F(-1)), F(1): (F(1), F(1))},
    "hinge_embedding_loss": {F(1): (F(-1), F(0))},
    "margin_ranking_loss": {F(0): (F(-1), F(0))},
    "multi_margin_loss": {F(0): (F(0), F(1, 2))},
    "multilabel_margin_loss": {F(0): (F(0), F(1, 2))},
    "softshrink": {F(-1, 2): (F(1), F(0)), F(1, 2): (F(0), F(1))},
    "rrelu": {F(0): (S, F(1))},
}
# PyTorch's derivative at each kink, measured on torch 2.13 CPU (eager; see the entries' docs)
MEASURED = {
    "l1_loss": [F(0)], "smooth_l1_loss": [F(-1), F(1)], "huber_loss": [F(-1), F(1)],
    "hinge_embedding_loss": [F(-1)], "margin_ranking_loss": [F(-1)], "multi_margin_loss": [F(0)],
    "multilabel_margin_loss": [F(0)], "softshrink": [F(0), F(0)], "rrelu": [S],
}
# torch 2.14.0 moved both margins to the flat piece's 0 (measured on 2.14.0 and 2.14.1; the entries' RuleChange)
if registry.release_key(registry.installed_release()) >= registry.release_key("2.14.0"):
    MEASURED.update({"hinge_embedding_loss": [F(0)], "margin_ranking_loss": [F(0)]})
# the smooth controls: their derivative at the control point, by hand
#   soft_margin_loss(x, 1) = log(1 + exp(-x)): -1 / (1 + e^0) = -1/2;  mish'(0) = tanh(log 2) = 3/5;  celu'(0) = 1
SMOOTH = {"soft_margin_loss": (F(0), F(-1, 2)), "mish": (F(0), F(3, 5)), "celu": (F(0), F(1))}
NEW_ELEMENTWISE = set(HAND_KINKS) | set(SMOOTH)


def test_the_registry_has_at_least_60_ops():
    assert len(registry.names()) >= 60
    assert NEW_ELEMENTWISE <= set(registry.names("elementwise"))


@pytest.mark.parametrize("name", sorted(HAND_KINKS))
def test_clarke_sets_by_hand(name):
    e = registry.get(name)
    assert set(e.breakpoints) == set(HAND_KINKS[name])
    for b, (left, right) in HAND_KINKS[name].items():
        assert e.one_sided(b) == (left, right), (name, b)
        assert e.clarke(b) == (min(left, right), max(left, right))
    assert set(e.kinks) == {b for b, (lo, hi) in HAND_KINKS[name].items() if lo != hi}


def _float(e, x: float) -> float:
    return e.torch_fn(torch.tensor([x], dtype=D), **e.kwargs).item()


@pytest.mark.parametrize("name", sorted(HAND_KINKS))
def test_one_sided_float64_differences_of_pytorchs_function(name):
    """PyTorch's own loss, differenced in float64 on each side of each kink (h = 2^-20: exact for the affine
    pieces, within h for the quadratic ones), gives the one-sided derivatives derived by hand: the entry's pieces
    are PyTorch's function."""
    e = registry.get(name)
    h = 2.0 ** -20
    for b, (left, right) in HAND_KINKS[name].items():
        x = float(b)
        dl = (_float(e, x) - _float(e, x - h)) / h
        dr = (_float(e, x + h) - _float(e, x)) / h
        assert abs(dl - float(left)) <= 2 * h and abs(dr - float(right)) <= 2 * h, (name, b, dl, dr)
        assert F(_float(e, x)) == e.value(b)  # the value at the kink too (exact: dyadic)


@pytest.mark.parametrize("name", sorted(HAND_KINKS))
def test_pytorchs_derivative_at_each_kink_is_the_recorded_rule(name):
    e = registry.get(name)
    x = torch.tensor([float(b) for b in e.breakpoints], dtype=D, requires_grad=True)
    (g,) = torch.autograd.grad(e.torch_fn(x, **e.kwargs).sum(), x)
    assert [F(v) for v in g.tolist()] == MEASURED[name] == [e.torch_derivative(b) for b in e.breakpoints]
    for b, d in zip(e.breakpoints, MEASURED[name]):
        lo, hi = e.clarke(b)
        assert lo <= d <= hi  # every measured derivative lies in the hand Clarke interval


@pytest.mark.parametrize("name", sorted(SMOOTH))
def test_smooth_controls(name):
    e = registry.get(name)
    b, d = SMOOTH[name]
    left, right = e.one_sided(b)
    with mpmath.workdps(40):
        want = mpmath.mpf(d.numerator) / d.denominator
        assert abs(left - want) < 1e-30 and abs(right - want) < 1e-30
    assert e.kinks == ()
    x = torch.tensor([float(b)], dtype=D, requires_grad=True)
    (g,) = torch.autograd.grad(e.torch_fn(x, **e.kwargs).sum(), x)
    assert abs(g.item() - float(d)) < 1e-15
    h = 2.0 ** -26  # central difference of PyTorch's function
    assert abs((_float(e, float(b) + h) - _float(e, float(b) - h)) / (2 * h) - float(d)) < 1e-7


def test_pytorchs_gaps_are_recorded_and_left_out_of_the_matrix():
    """multi_margin_loss has no forward-mode formula and no CPU half kernel in torch 2.13 (measured here); the
    entry records both and the conventions matrix does not evaluate those cells."""
    from nsverify.conventions import matrix

    x = torch.zeros(1, 2, dtype=torch.float16, requires_grad=True)
    with pytest.raises(RuntimeError, match="Half"):
        tF.multi_margin_loss(x, torch.tensor([1]))
    with pytest.raises(NotImplementedError, match="forward AD"):
        torch.func.jvp(lambda t: tF.multi_margin_loss(t, torch.tensor([1])), (torch.zeros(1, 2),),
                       (torch.ones(1, 2),))
    for name in ("multi_margin_loss", "multilabel_margin_loss"):
        assert set(registry.get(name).unsupported) == {"jvp", "float16", "bfloat16"}
    res = matrix.run_matrix(["multi_margin_loss"], ["float16", "float32"], ["cpu"], ["eager", "jvp"])
    assert [(r.dtype, r.mode, r.rule) for r in res] == [("float32", "eager", "left")]
    assert all(r.as_expected for r in res)


# ---------------------------------------------------------------------------------------------------------
# the exact oracle on small programs
# ---------------------------------------------------------------------------------------------------------
def _zero(w):
    return torch.zeros_like(w)


def _mm(row):
    return tF.multi_margin_loss(torch.stack(row).reshape(1, 2), torch.tensor([1]))


def _mlm(row):
    return tF.multilabel_margin_loss(torch.stack(row).reshape(1, 2), torch.tensor([[1, -1]]))


ONE = torch.ones((), dtype=D)
# (program, point, status, exact AD, Clarke set by hand (interval of the 1-d derivative))
LEMMA2 = {
    # hinge(w) - hinge(2 - w) with hinge(x) = max(0, 1 - x): = 1 - w; AD at w = 1: -1 - 1 = -2
    "hinge_embedding_loss": (lambda w: tF.hinge_embedding_loss(w, -ONE.expand(1)) -
                             tF.hinge_embedding_loss(2 - w, -ONE.expand(1)), F(1), F(-2), F(-1)),
    # max(0, -w) - max(0, w) = -w; AD at 0: -1 - 1 = -2
    "margin_ranking_loss": (lambda w: tF.margin_ranking_loss(w, _zero(w), ONE.expand(1)) -
                            tF.margin_ranking_loss(-w, _zero(w), ONE.expand(1)), F(0), F(-2), F(-1)),
    # max(0, w)/2 - max(0, -w)/2 = w/2; AD at 0: 0 - 0
    "multi_margin_loss": (lambda w: _mm([w[0], ONE]) - _mm([-w[0], ONE]), F(0), F(0), F(1, 2)),
    "multilabel_margin_loss": (lambda w: _mlm([w[0], ONE]) - _mlm([-w[0], ONE]), F(0), F(0), F(1, 2)),
    # softshrink(1/2 + w) - softshrink(1/2 - w) = max(0, w) - max(0, -w) = w; AD at 0: 0 - 0
    "softshrink": (lambda w: (tF.softshrink(0.5 + w) - tF.softshrink(0.5 - w)).sum(), F(0), F(0), F(1)),
    # rrelu(w) - rrelu(-w) = (1 + s) w; AD at 0: s + s
    "rrelu": (lambda w: (tF.rrelu(w, training=False) - tF.rrelu(-w, training=False)).sum(), F(0), 2 * S, 1 + S),
}

if registry.release_key(registry.installed_release()) >= registry.release_key("2.14.0"):
    # from torch 2.14.0 both margins take the flat piece (AD 0 at the margin): the Lemma 2 programs' AD is 0 - 0,
    # still outside their one-element Clarke sets
    for _name in ("hinge_embedding_loss", "margin_ranking_loss"):
        LEMMA2[_name] = LEMMA2[_name][:2] + (F(0),) + LEMMA2[_name][3:]


@pytest.mark.parametrize("name", sorted(LEMMA2))
def test_oracle_not_member_on_the_lemma2_program(name):
    fn, at, ad, clarke = LEMMA2[name]
    with warnings.catch_warnings():  # rrelu in eval mode draws nothing: no random-draw warning
        warnings.simplefilter("error", UserWarning)
        v = nsverify.check_gradient(fn, torch.tensor([float(at)], dtype=D))
    assert v.status == "not_member" and v.exact, name
    assert v.exact_ad == (ad,) and v.clarke == (clarke, clarke)
    assert nsverify.oracle.verify_certificate(v.to_json())


# (program, point, exact AD, Bouligand set by hand)
MEMBER = {
    # |w0| + |w1| at 0 via l1_loss (mean over 2): AD sgn(0) / 2 = 0; pieces (+-1/2, +-1/2)
    "l1_loss": (lambda w: tF.l1_loss(w, _zero(w)), (0.0, 0.0), (F(0), F(0)),
                {(F(a, 2), F(b, 2)) for a in (-1, 1) for b in (-1, 1)}),
    # smooth_l1 at its switch points (1, -1): smooth, the gradient (1/2, -1/2) (mean over 2)
    "smooth_l1_loss": (lambda w: tF.smooth_l1_loss(w, _zero(w)), (1.0, -1.0), (F(1, 2), F(-1, 2)),
                       {(F(1, 2), F(-1, 2))}),
    "huber_loss": (lambda w: tF.huber_loss(w, _zero(w), reduction="sum"), (1.0, -1.0), (F(1), F(-1)),
                   {(F(1), F(-1))}),
    # max(0, w0 - w1 + 1) / 2 at (0, 1): AD (0, 0) (left), pieces (0, 0) and (1/2, -1/2)
    "multi_margin_loss": (lambda w: tF.multi_margin_loss(w.reshape(1, 2), torch.tensor([1])), (0.0, 1.0),
                          (F(0), F(0)), {(F(0), F(0)), (F(1, 2), F(-1, 2))}),
    "multilabel_margin_loss": (lambda w: tF.multilabel_margin_loss(w.reshape(1, 2), torch.tensor([[1, -1]])),
                               (0.0, 1.0), (F(0), F(0)), {(F(0), F(0)), (F(1, 2), F(-1, 2))}),
    # max(0, 1 - w) at 1: AD -1 (left), pieces -1 and 0
    "hinge_embedding_loss": (lambda w: tF.hinge_embedding_loss(w, -torch.ones_like(w)), (1.0,), (F(-1),),
                             {(F(-1),), (F(0),)}),
}

if registry.release_key(registry.installed_release()) >= registry.release_key("2.14.0"):  # the flat piece's 0
    _hinge = MEMBER["hinge_embedding_loss"]
    MEMBER["hinge_embedding_loss"] = _hinge[:2] + ((F(0),),) + _hinge[3:]


@pytest.mark.parametrize("name", sorted(MEMBER))
def test_oracle_member_with_the_bouligand_set_by_hand(name):
    fn, at, ad, pieces = MEMBER[name]
    v = nsverify.check_gradient(fn, torch.tensor(at, dtype=D))
    assert v.status == "member" and v.exact, name
    assert v.exact_ad == ad
    assert {tuple(F(c) for c in g) for g in v.bouligand} == pieces


def test_oracle_rules_given_for_a_loss_key_its_kink():
    """The loss's registry name keys its rule in rules=: the right piece at multi_margin_loss's margin gives AD
    (1/2, -1/2), the other Bouligand gradient."""
    fn = MEMBER["multi_margin_loss"][0]
    v = nsverify.check_gradient(fn, torch.tensor([0.0, 1.0], dtype=D), rules={"multi_margin_loss": "right"})
    assert v.status == "member" and v.exact_ad == (F(1, 2), F(-1, 2))


def test_oracle_soft_margin_is_smooth_with_an_enclosure():
    v = nsverify.check_gradient(lambda w: tF.soft_margin_loss(w, torch.ones_like(w)),
                                torch.tensor([0.0, 0.0], dtype=D))
    assert v.status == "member" and not v.kinks
    for c in v.exact_ad:  # -1/2 / 2 (mean), enclosed
        assert abs(float(getattr(c, "lo", c)) + 0.25) < 1e-12 and abs(float(getattr(c, "hi", c)) + 0.25) < 1e-12


def test_rrelu_in_training_mode_is_refused_with_the_fix():
    with pytest.raises(UnsupportedOpError, match="model.eval"):
        registry.get("rrelu").instance((None, 0.125, 1 / 3, True))


def test_smooth_l1_with_beta_zero_is_refused_naming_l1_loss():
    with pytest.raises(nsverify.NsverifyError, match="l1_loss"):
        nsverify.check_gradient(lambda w: torch.ops.aten.smooth_l1_loss(w, _zero(w), 1, 0.0),
                                torch.tensor([0.5], dtype=D))


@pytest.mark.slow
def test_compiled_margin_losses_take_the_right_piece():
    """Eager multi_margin_loss / multilabel_margin_loss give 0 at the margin (the left piece); compiled with
    inductor they give 1/2, the right piece (measured on torch 2.13 CPU): the entries record it as the compile
    mode's rule, and both values lie in the hand Clarke interval [0, 1/2]."""
    for name in ("multi_margin_loss", "multilabel_margin_loss"):
        e = registry.get(name)
        torch._dynamo.reset()
        f = torch.compile(lambda t, e=e: e.torch_fn(t, **e.kwargs).sum(), backend="inductor")
        x = torch.zeros(1, dtype=torch.float32, requires_grad=True)
        (g,) = torch.autograd.grad(f(x), x)
        assert F(g.item()) == F(1, 2) == e.kink_derivative(0, e.rules_for("compile")[0])
        assert e.rules_for("eager") == (registry.Rule("left"),)


# ---------------------------------------------------------------------------------------------------------
# the oracle's loss records against PyTorch, beyond the registry's one-input slices
# ---------------------------------------------------------------------------------------------------------
# dyadic, with points on the switches: multi_margin (p=1, targets 1, 0): 1 - 1.5 + 0.5 = 0 in sample 1;
# smooth_l1 (target 1/4, beta 1/2): 0.75 - 0.25 = beta; huber (target -1/2, delta 2): 1.5 + 0.5 = delta
_X = torch.tensor([[0.5, -1.0, 0.75], [1.5, 0.5, -0.25]], dtype=D)
_W3 = torch.tensor([0.5, 2.0, 1.0], dtype=D)
LOSS_PROGRAMS = {
    "multi_margin p=1": lambda w: tF.multi_margin_loss(w.reshape(2, 3), torch.tensor([1, 0])),
    "multi_margin p=2 margin 1/2 weight sum": lambda w: tF.multi_margin_loss(
        w.reshape(2, 3), torch.tensor([2, 1]), p=2, margin=0.5, weight=_W3, reduction="sum"),
    "multi_margin none": lambda w: (tF.multi_margin_loss(w.reshape(2, 3), torch.tensor([0, 2]), reduction="none")
                                    * torch.tensor([1.0, 3.0], dtype=D)).sum(),
    "multilabel_margin": lambda w: tF.multilabel_margin_loss(w.reshape(2, 3), torch.tensor([[0, 2, -1], [1, -1, 0]])),
    "multilabel_margin none": lambda w: (tF.multilabel_margin_loss(
        w.reshape(2, 3), torch.tensor([[2, -1, 0], [0, 1, -1]]), reduction="none") * torch.tensor([2.0, 1.0],
                                                                                                   dtype=D)).sum(),
    "smooth_l1 beta 1/2": lambda w: tF.smooth_l1_loss(w, torch.full_like(w, 0.25), beta=0.5),
    "huber delta 2 sum": lambda w: tF.huber_loss(w, torch.full_like(w, -0.5), delta=2.0, reduction="sum"),
}


@pytest.mark.parametrize("label", sorted(LOSS_PROGRAMS))
def test_oracle_loss_records_agree_with_pytorch(label):
    """Exact reverse mode (PyTorch's backward ops evaluated exactly: losses.py) = exact forward mode = PyTorch's
    float64 gradient, at dyadic points where every derivative is dyadic (the switch points included: PyTorch's
    rule there, the registry's)."""
    from nsverify.oracle.interp import exact_backprop, exact_gradient

    fn = LOSS_PROGRAMS[label]
    w = _X.flatten().clone()
    wt = w.clone().requires_grad_(True)
    (want,) = torch.autograd.grad(fn(wt), wt)
    rev, value = exact_backprop(fn, w, return_value=True)
    assert rev == exact_gradient(fn, w), label
    assert [float(x) for x in rev] == want.tolist(), label
    assert float(value) == fn(w).item()
