"""The registry's loss entries: the losses at their switch points and margins, where training sits (issue 36).

A loss takes an input and a target (and a margin); each entry is the loss as a function of ONE input entry with the
others fixed as its ``doc`` says (``reduction="none"``), so that it is an elementwise function with exact pieces
whose kinks are the loss's switch points. ``torch_fn`` computes it with PyTorch's own loss. The entries list no
``nn`` modules or functional forms: those take a target tensor, and the readers of a model (Park's engine) take
a listed form for an activation of one tensor. ``aten`` lists a loss's ATen op only where the exact oracle has its
record with the target (:mod:`nsverify.oracle.ops.losses`); a composite loss (l1_loss, hinge_embedding_loss,
margin_ranking_loss) reaches the oracle as the ops it is made of.

PyTorch's rule at each kink was measured on torch 2.13 CPU (eager, torch.func.grad and jvp agree; float64,
float32, bfloat16, float16), then on torch 2.14.0 and 2.14.1 (CPU kernels of the CUDA wheels): the changes
between 2.13.0 and 2.14.0 are recorded (releases before 2.13 were not measured for these entries).
"""
from __future__ import annotations

from fractions import Fraction

import mpmath

from nsverify.registry.types import Elementwise, Piece, RuleChange, installed_release, lin, release_key

F = Fraction

#: multi_margin_loss and multilabel_margin_loss: PyTorch 2.13 has no forward-mode formula and no CPU kernel for
#: the 16-bit dtypes (the errors it raises, measured)
_MARGIN_GAPS = {
    "jvp": "NotImplementedError: forward AD is not implemented for this loss (tools/autograd/derivatives.yaml)",
    "float16": "RuntimeError: the CPU kernel is not implemented for 'Half'",
    "bfloat16": "RuntimeError: the CPU kernel is not implemented for 'BFloat16'",
}
_NO_JAX = "JAX has no loss functions: jax, jax.numpy and jax.nn define none (optax, outside JAX, does)"


def _compile_right_before_2_14() -> dict:
    """The margin losses' compiled rule: Inductor's decomposition took the right piece up to torch 2.13 and takes
    the left piece, like eager, from 2.14.0 on (measured on 2.13.0, 2.14.0 and 2.14.1). A mode rule holds for the
    installed release (``mode_rules`` has no release axis)."""
    return {"compile": ("right",)} if release_key(installed_release()) < release_key("2.14.0") else {}


def _zeros_target(loss):
    def fn(t, **kw):
        import torch

        return loss(t, torch.zeros_like(t), reduction="none", **kw)
    return fn


def _hinge_embedding(t, margin=1.0):
    """hinge_embedding_loss with target -1 everywhere: max(0, margin - t)."""
    import torch
    import torch.nn.functional as tF

    return tF.hinge_embedding_loss(t, -torch.ones_like(t), margin=margin, reduction="none")


def _margin_ranking(t, margin=0.0):
    """margin_ranking_loss(t, 0, y=1): max(0, -(t - 0) + margin)."""
    import torch
    import torch.nn.functional as tF

    return tF.margin_ranking_loss(t, torch.zeros_like(t), torch.ones_like(t), margin=margin, reduction="none")


def _two_classes(t):
    """Each entry t as the logit of class 0 of a two-class sample whose class-1 logit is 1."""
    import torch

    return torch.stack([t.reshape(-1), torch.ones_like(t).reshape(-1)], 1)


def multi_margin_fn(t, margin=1.0):
    """multi_margin_loss of the samples (t, 1) with target class 1 (p=1): max(0, margin - 1 + t) / 2 per entry."""
    import torch
    import torch.nn.functional as tF

    x = _two_classes(t)
    target = torch.ones(x.shape[0], dtype=torch.long, device=t.device)
    return tF.multi_margin_loss(x, target, margin=margin, reduction="none").reshape(t.shape)


def multilabel_margin_fn(t):
    """multilabel_margin_loss of the samples (t, 1) with the target set {1}: max(0, 1 - (1 - t)) / 2 per entry."""
    import torch
    import torch.nn.functional as tF

    x = _two_classes(t)
    target = torch.tensor([[1, -1]], device=t.device).expand(x.shape[0], 2)
    return tF.multilabel_margin_loss(x, target, reduction="none").reshape(t.shape)


def _soft_margin(t):
    import torch
    import torch.nn.functional as tF

    return tF.soft_margin_loss(t, torch.ones_like(t), reduction="none")


def _softplus_neg() -> Piece:
    """log(1 + exp(-x)) (mpmath; not rational)."""
    return Piece(mp=lambda x: mpmath.log1p(mpmath.exp(-x)), dmp=lambda x: -1 / (1 + mpmath.exp(x)))


def _huber_pieces(delta: Fraction) -> tuple[Piece, ...]:
    """Huber with threshold delta (scaled as torch.huber_loss): delta (|x| - delta / 2) outside, x^2 / 2 inside."""
    return (lin(-delta, -delta * delta / 2), Piece(poly=(F(0), F(0), F(1, 2))), lin(delta, -delta * delta / 2))


def loss_entries():
    import torch.nn.functional as tF

    yield Elementwise(
        "l1_loss", (), _zeros_target(tF.l1_loss), (F(0),), (lin(-1), lin(1)), ("mix=1/2",),
        doc="F.l1_loss(x, 0, reduction='none') = |x|: the residual at 0. PyTorch runs it as abs(x - y), whose "
            "derivative at 0 is sgn(0) = 0, the minimum-norm element of [-1, 1]. Composite: the oracle sees sub "
            "and abs",
        jax_note=_NO_JAX, autograd_nodes=("AbsBackward0",))
    yield Elementwise(
        "smooth_l1_loss", ("smooth_l1_loss",), _zeros_target(tF.smooth_l1_loss), (F(-1), F(1)),
        _huber_pieces(F(1)), ("right", "left"), kwargs={"beta": 1.0},
        doc="F.smooth_l1_loss(x, 0, beta=1): x^2/2 for |x| < 1, |x| - 1/2 outside. The switch points +-1 are C^1 "
            "(both one-sided derivatives are +-1): a control, no kink. PyTorch's backward takes the inner piece "
            "x / beta there (smooth_l1_loss_backward)",
        backward=("smooth_l1_loss_backward",), jax_note=_NO_JAX, autograd_nodes=("SmoothL1LossBackward0",))
    yield Elementwise(
        "huber_loss", ("huber_loss",), _zeros_target(tF.huber_loss), (F(-1), F(1)), _huber_pieces(F(1)),
        ("right", "left"), kwargs={"delta": 1.0},
        doc="F.huber_loss(x, 0, delta=1): x^2/2 for |x| <= 1, |x| - 1/2 outside (smooth_l1_loss with beta=1, "
            "times delta in general). The switch points are C^1: a control, no kink",
        backward=("huber_loss_backward",), jax_note=_NO_JAX, autograd_nodes=("HuberLossBackward0",))
    yield Elementwise(
        "hinge_embedding_loss", (), _hinge_embedding, (F(1),), (lin(-1, 1), lin(0)), ("left",),
        kwargs={"margin": 1.0},
        doc="F.hinge_embedding_loss(x, -1, margin=1) = max(0, 1 - x): the margin at x = 1. PyTorch (measured): "
            "derivative -1 there, the left piece's (clamp_min(margin - x, 0) passes the gradient at 0); the "
            "minimum-norm element of [-1, 0] is 0. From torch 2.14.0 on: 0, the right piece's (measured on 2.14.0 and "
            "2.14.1). Composite: the oracle sees clamp_min and where",
        rule_changes=(RuleChange("2.14.0", ("left",), ("right",),
                                 note="hinge_embedding_loss's derivative at its margin: -1 -> 0 (the documented "
                                      "rule's minimum-norm element; measured by nsverify on 2.14.0 and 2.14.1)"),),
        jax_note=_NO_JAX, autograd_nodes=("WhereBackward0",))
    yield Elementwise(
        "margin_ranking_loss", (), _margin_ranking, (F(0),), (lin(-1), lin(0)), ("left",),
        kwargs={"margin": 0.0},
        doc="F.margin_ranking_loss(x, 0, 1, margin=0) = max(0, -x): the margin at x = 0. PyTorch (measured): "
            "derivative -1, the left piece's (clamp_min at 0 passes the gradient); from torch 2.14.0 on 0, the right "
            "piece's (measured on 2.14.0 and 2.14.1). Composite: the oracle sees clamp_min",
        rule_changes=(RuleChange("2.14.0", ("left",), ("right",),
                                 note="margin_ranking_loss's derivative at its margin: -1 -> 0 (the documented "
                                      "rule's minimum-norm element; measured by nsverify on 2.14.0 and 2.14.1)"),),
        jax_note=_NO_JAX, autograd_nodes=("ClampMinBackward0",))
    yield Elementwise(
        "multi_margin_loss", ("multi_margin_loss",), multi_margin_fn, (F(0),), (lin(0), lin(F(1, 2))), ("left",),
        kwargs={"margin": 1.0},
        doc="F.multi_margin_loss on the two-class sample (x, 1) with target class 1 (p=1, margin=1): "
            "max(0, 1 - 1 + x) / 2, the margin at x = 0. PyTorch's kernel adds the gradient only where the "
            "margin term is > 0: derivative 0 at 0, the left piece's (measured). Compiled (inductor), its "
            "decomposition takes the right piece, 1/2 (measured on 2.13.0); from torch 2.14.0 on compiled takes the "
            "left piece like eager (measured on 2.14.0 and 2.14.1). No jvp, no CPU half kernel",
        mode_rules=_compile_right_before_2_14(),
        backward=("multi_margin_loss_backward",), jax_note=_NO_JAX, unsupported=dict(_MARGIN_GAPS),
        autograd_nodes=("MultiMarginLossBackward0",))
    yield Elementwise(
        "multilabel_margin_loss", ("multilabel_margin_loss_forward",), multilabel_margin_fn, (F(0),),
        (lin(0), lin(F(1, 2))), ("left",),
        doc="F.multilabel_margin_loss on the two-class sample (x, 1) with target set {1}: max(0, 1 - (1 - x)) / 2, "
            "the margin at x = 0. PyTorch adds the gradient only where the term is > 0: derivative 0 at 0, the "
            "left piece's (measured). Compiled (inductor), the right piece, 1/2 (measured on 2.13.0); from torch "
            "2.14.0 on the left piece like eager (measured on 2.14.0 and 2.14.1). No jvp, no CPU half kernel",
        mode_rules=_compile_right_before_2_14(),
        backward=("multilabel_margin_loss_backward",), jax_note=_NO_JAX, unsupported=dict(_MARGIN_GAPS),
        autograd_nodes=("MultilabelMarginLossBackward0",))
    yield Elementwise(
        "soft_margin_loss", ("soft_margin_loss",), _soft_margin, (F(0),), (_softplus_neg(), _softplus_neg()),
        ("left",),
        doc="F.soft_margin_loss(x, 1) = log(1 + exp(-x)): smooth everywhere, a control at the margin x = 0 "
            "(derivative -1/2, mpmath)",
        backward=("soft_margin_loss_backward",), jax_note=_NO_JAX, autograd_nodes=("SoftMarginLossBackward0",))
