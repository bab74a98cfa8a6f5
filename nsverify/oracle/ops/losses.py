"""Exact implementations of the losses with switch points and margins (issue 36): ``smooth_l1_loss``,
``huber_loss``, ``multi_margin_loss``, ``multilabel_margin_loss`` (forward and backward ops), and the smooth
``soft_margin_loss`` (enclosures).

Each piecewise loss applies a registry elementwise op to the residual or the margin term, so its switch points
are kink sites of the oracle (branch points in pieces mode, PyTorch's rule -- or the rule given in ``rules=`` for
the loss's registry name -- in AD mode), exactly as an activation's kinks are: the piece of the loss is built as
an instance of the loss's registry entry (:mod:`nsverify.registry.entries_losses`), whose recorded rule is
PyTorch's. Composite losses (l1_loss, hinge_embedding_loss, margin_ranking_loss, cosine and triplet losses) reach
the oracle as the ops they are made of and need no record here.

``reduction`` is ATen's enum: 0 none, 1 mean, 2 sum.
"""

from __future__ import annotations

import dataclasses
from fractions import Fraction

import numpy as np

from nsverify import registry
from nsverify.errors import UnsupportedOpError
from nsverify.oracle.numbers import sigmoid_i, smooth, softplus_i, val
from nsverify.oracle.ops.common import arr, scalar
from nsverify.oracle.ops.kinks import _apply_elementwise, ad_derivative, check_steps
from nsverify.oracle.ops.record import ExactOp
from nsverify.registry.types import Piece, lin

F = Fraction


def _instance(name: str, breakpoints, pieces):
    """The registry entry ``name`` with the pieces of this call (its recorded rules are PyTorch's)."""
    return dataclasses.replace(registry.get(name), breakpoints=tuple(breakpoints), pieces=tuple(pieces),
                               torch_fn=None)


def _huber(name: str, t) -> registry.Elementwise:
    """The residual's piecewise function: smooth_l1 (beta = t: |d| - t/2 outside, d^2 / (2t) inside) or huber
    (delta = t: t (|d| - t/2) outside, d^2 / 2 inside)."""
    t = scalar(t)
    if not t > 0:
        raise UnsupportedOpError(f"{name} with {'beta' if name == 'smooth_l1_loss' else 'delta'}={t}: the exact "
                                 "oracle evaluates a positive switch point only (beta=0 is l1_loss: call "
                                 "F.l1_loss, which the oracle reads as abs)")
    if name == "smooth_l1_loss":
        pieces = (lin(-1, -t / 2), Piece(poly=(F(0), F(0), 1 / (2 * t))), lin(1, -t / 2))
    else:
        pieces = (lin(-t, -t * t / 2), Piece(poly=(F(0), F(0), F(1, 2))), lin(t, -t * t / 2))
    return _instance(name, (-t, t), pieces)


def _reduce(terms: np.ndarray, reduction, count=None):
    """ATen's reduction of the loss terms: none (the terms), mean (over ``count``, default every term), sum."""
    if int(reduction) == 0:
        return terms
    out = np.empty((), dtype=object)
    total = sum(terms.reshape(-1).tolist(), F(0))
    out[()] = total / (terms.size if count is None else count) if int(reduction) == 1 else total
    return out


def _apply(ew, a: np.ndarray) -> np.ndarray:
    """``ew`` on every entry of ``a`` (a residual or margin array: no float shadow of its own)."""
    out = np.empty(a.shape, dtype=object)
    of, af = out.reshape(-1), a.reshape(-1)
    for i in range(af.size):
        of[i] = _apply_elementwise(ew, af[i], (i,), None)
    return out


def _grad_scale(grad, shape, reduction, count):
    """The incoming gradient over the loss terms: as it is for reduction none, else its one value on every term
    (divided by ``count`` for mean)."""
    g = arr(grad)
    if int(reduction) == 0:
        return np.broadcast_to(g, shape)
    one = g.reshape(-1)[0] * (F(1, count) if int(reduction) == 1 else 1)
    out = np.empty(shape, dtype=object)
    out.fill(one)
    return out


def _derivatives(ew, grad: np.ndarray, z: np.ndarray, name: str) -> np.ndarray:
    """``grad`` times AD's derivative of ``ew`` at every entry of ``z`` (refusing the steps of a derivative read
    inside fn where z depends on w and sits on a kink, :func:`nsverify.oracle.ops.kinks.check_steps`)."""
    check_steps(ew, grad, z, name)
    out = np.empty(z.shape, dtype=object)
    of, zf, gf = out.reshape(-1), z.reshape(-1), np.broadcast_to(grad, z.shape).reshape(-1)
    for i in range(zf.size):
        of[i] = gf[i] * ad_derivative(ew, val(zf[i]))
    return out


# ------------------------------------------------------------------------------------ smooth_l1 and huber
def _huber_ops(name: str):
    """The exact forward and backward of ``name`` (smooth_l1_loss or huber_loss: the same pieces, scaled by its
    beta or delta argument), called as ATen calls them: (x, target, reduction, beta/delta)."""
    def forward(x, target, reduction=1, param=1.0):
        d = arr(x) - arr(target)
        return _reduce(_apply(_huber(name, param), d), reduction)

    def backward(grad, x, target, reduction, param):
        d = arr(x) - arr(target)
        return _derivatives(_huber(name, param), _grad_scale(grad, d.shape, reduction, d.size), d, name)

    return forward, backward


_smooth_l1, _smooth_l1_backward = _huber_ops("smooth_l1_loss")
_huber_loss, _huber_backward = _huber_ops("huber_loss")


# ------------------------------------------------------------------------------------ margin losses
def _hinge(name: str, p=1) -> registry.Elementwise:
    """max(0, z) (p = 1) or max(0, z)^2 (p = 2), with the rule recorded for the loss ``name``."""
    if int(p) not in (1, 2):
        raise UnsupportedOpError(f"{name} with p={p}: PyTorch accepts p = 1 or 2 only.")
    return _instance(name, (F(0),), (lin(0), lin(1) if int(p) == 1 else Piece(poly=(F(0), F(0), F(1)))))


def _rows(x: np.ndarray, target):
    """The input as (N, C) rows and the targets as a list of ints (a 1-d input is one sample)."""
    t = np.asarray(target)
    if x.ndim == 1:
        return x[None], t.reshape(1, *t.shape), True
    return x, t, False


def _margin_terms(x2: np.ndarray, targets, margin):
    """multi_margin_loss: for each sample n, the margin terms margin - x[n, y] + x[n, i], i != y (with i)."""
    out = []
    for n in range(x2.shape[0]):
        y = int(targets[n])
        out.append([(i, margin - x2[n, y] + x2[n, i]) for i in range(x2.shape[1]) if i != y])
    return out


def _multi_margin(x, target, p=1, margin=1, weight=None, reduction=1):
    x2, t, single = _rows(arr(x), target)
    ew, m, c = _hinge("multi_margin_loss", p), scalar(margin), x2.shape[1]
    w = None if weight is None else arr(weight)
    terms = np.empty(x2.shape[0], dtype=object)
    for n, row in enumerate(_margin_terms(x2, t, m)):
        s = sum(_apply(ew, np.array([zi for _, zi in row], dtype=object)).tolist(), F(0)) if row else F(0)
        terms[n] = (s if w is None else s * w[int(t[n])]) / c
    return _reduce(terms.reshape(()) if single else terms, reduction)


def _multi_margin_backward(grad, x, target, p, margin, weight=None, reduction=1):
    xa = arr(x)
    x2, t, single = _rows(xa, target)
    ew, m, (nrow, c) = _hinge("multi_margin_loss", p), scalar(margin), x2.shape
    w = None if weight is None else arr(weight)
    g = _grad_scale(grad, (nrow,), reduction, nrow)
    out = np.empty(x2.shape, dtype=object)
    out.fill(F(0))
    for n, row in enumerate(_margin_terms(x2, t, m)):
        y = int(t[n])
        scale = g[n] / c * (1 if w is None else w[y])
        if not row:
            continue
        z = np.array([zi for _, zi in row], dtype=object)
        d = _derivatives(ew, np.full(z.shape, scale, dtype=object), z, "multi_margin_loss")
        for (i, _), di in zip(row, d.tolist()):
            out[n, i] = out[n, i] + di
            out[n, y] = out[n, y] - di
    return out.reshape(xa.shape)


def _label_sets(t2: np.ndarray, c: int):
    """multilabel_margin_loss: each sample's target classes (its row up to the first -1) and the 0/1 mask."""
    sets, mask = [], np.zeros((t2.shape[0], c), dtype=object)
    mask.fill(F(0))
    for n in range(t2.shape[0]):
        ys = []
        for v in t2[n].tolist():
            if int(v) < 0:
                break
            ys.append(int(v))
        sets.append(ys)
        for y in ys:
            mask[n, y] = F(1)
    return sets, mask


def _label_terms(x2, sets, mask):
    """For each sample, the margin terms 1 - (x[y] - x[i]) over target classes y and non-target classes i."""
    return [[(y, i, 1 - (x2[n, y] - x2[n, i])) for y in ys for i in range(x2.shape[1]) if mask[n, i] == 0]
            for n, ys in enumerate(sets)]


def _multilabel_margin(x, target, reduction=1):
    xa = arr(x)
    x2, t, single = _rows(xa, target)
    ew, c = _hinge("multilabel_margin_loss"), x2.shape[1]
    sets, mask = _label_sets(t, c)
    terms = np.empty(x2.shape[0], dtype=object)
    for n, row in enumerate(_label_terms(x2, sets, mask)):
        h = _apply(ew, np.array([z for *_, z in row], dtype=object)) if row else np.zeros(0, dtype=object)
        terms[n] = sum(h.tolist(), F(0)) / c
    return _reduce(terms.reshape(()) if single else terms, reduction), mask.reshape(xa.shape)


def _multilabel_margin_backward(grad, x, target, reduction, is_target):
    xa = arr(x)
    x2, t, single = _rows(xa, target)
    ew, (nrow, c) = _hinge("multilabel_margin_loss"), x2.shape
    sets, mask = _label_sets(t, c)
    g = _grad_scale(grad, (nrow,), reduction, nrow)
    out = np.empty(x2.shape, dtype=object)
    out.fill(F(0))
    for n, row in enumerate(_label_terms(x2, sets, mask)):
        if not row:
            continue
        z = np.array([zi for *_, zi in row], dtype=object)
        d = _derivatives(ew, np.full(z.shape, g[n] / c, dtype=object), z, "multilabel_margin_loss")
        for (y, i, _), di in zip(row, d.tolist()):
            out[n, i] = out[n, i] + di
            out[n, y] = out[n, y] - di
    return out.reshape(xa.shape)


# ------------------------------------------------------------------------------------ soft margin (smooth)
def _soft_margin(x, target, reduction=1):
    z = -arr(target) * arr(x)
    terms = np.empty(z.shape, dtype=object)
    for i, v in enumerate(z.reshape(-1).tolist()):
        terms.reshape(-1)[i] = smooth(v, softplus_i, sigmoid_i)
    return _reduce(terms, reduction)


def _soft_margin_backward(grad, x, target, reduction):
    y = arr(target)
    z = -y * arr(x)
    g = _grad_scale(grad, z.shape, reduction, z.size)
    sig = np.empty(z.shape, dtype=object)
    for i, v in enumerate(z.reshape(-1).tolist()):
        sig.reshape(-1)[i] = smooth(v, sigmoid_i, lambda u: sigmoid_i(u) * (1 - sigmoid_i(u)))
    return -y * sig * g


RECORDS = (
    ExactOp(("smooth_l1_loss",), _smooth_l1, backward_names=("smooth_l1_loss_backward",),
            backward=_smooth_l1_backward),
    ExactOp(("huber_loss",), _huber_loss, backward_names=("huber_loss_backward",), backward=_huber_backward),
    ExactOp(("multi_margin_loss",), _multi_margin, backward_names=("multi_margin_loss_backward",),
            backward=_multi_margin_backward),
    ExactOp(("multilabel_margin_loss_forward",), _multilabel_margin,
            backward_names=("multilabel_margin_loss_backward",), backward=_multilabel_margin_backward),
    ExactOp(("soft_margin_loss",), _soft_margin, analytic=True, nodes=("SoftMarginLossBackward0",),
            enclosure=True, backward_names=("soft_margin_loss_backward",), backward=_soft_margin_backward),
)
