"""Embedding and dropout, evaluated exactly.

* ``embedding``: rows of the weight picked by constant indices (linear in the weight); its backward
  ``embedding_dense_backward`` adds each output row's gradient to its index's row (``padding_idx`` skipped,
  ``scale_grad_by_freq`` dividing by the index's count), as ATen does.
* **dropout** -- eval mode is the identity (no ATen op reaches the oracle).  In training mode the mask is drawn
  from the random generator; every call of ``fn`` starts from the same random state
  (:mod:`nsverify.oracle.callenv`), so the mask is a constant of the program and the layer is linear in its
  input.  ``nn.Dropout`` reaches ATen as ``empty_like`` + ``bernoulli_`` (+ ``div_`` + ``mul``); some paths use
  ``native_dropout``.  The mask is the float run's own where the float shadow ran the op (so the generator
  advances exactly once per draw, as in the float run), else it is drawn here the same way PyTorch draws it.
  Probabilities that depend on w (``torch.bernoulli(p(w))``) make the mask a discontinuous function of w: the
  oracle refuses them (:class:`~nsverify.errors.UnsupportedOpError`).
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import torch

from nsverify.errors import UnsupportedOpError
from nsverify.oracle import context
from nsverify.oracle.numbers import Aff
from nsverify.oracle.ops.common import arr, filled, float_output, objmap, scalar
from nsverify.oracle.ops.record import ExactOp

F = Fraction


# ------------------------------------------------------------------------------------------------- embedding
def _embedding(weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    return arr(weight)[np.asarray(indices, dtype=np.int64)]


def _embedding_backward(grad, indices, num_weights, padding_idx, scale_grad_by_freq):
    idx = np.asarray(indices, dtype=np.int64).reshape(-1)
    g = arr(grad)
    rows = g.reshape(idx.size, -1)
    out = filled((int(num_weights), rows.shape[1]), F(0))
    counts = np.bincount(idx, minlength=int(num_weights)) if scale_grad_by_freq else None
    for r, i in enumerate(idx.tolist()):
        if i == padding_idx:
            continue
        row = rows[r] if counts is None else rows[r] * F(1, int(counts[i]))
        out[i] = out[i] + row
    return out


# ---------------------------------------------------------------------------------------------------- dropout
def _exact_mask(m: torch.Tensor) -> np.ndarray:
    return objmap(lambda v: F(int(v)), m.detach().cpu().numpy().astype(np.int64))


def _float_dtype():
    ctx = context.active()
    return ctx.dtype if ctx is not None and ctx.dtype is not None and ctx.dtype.is_floating_point else \
        torch.float64


def _constant_probabilities(p) -> torch.Tensor:
    p = arr(p)
    if any(isinstance(v, Aff) for v in p.reshape(-1)):
        raise UnsupportedOpError(
            "bernoulli with probabilities that depend on w: the random mask is then a discontinuous function "
            "of w, which the exact oracle cannot analyse; draw the mask from constant probabilities")
    return torch.tensor(np.asarray(objmap(float, p), dtype=np.float64), dtype=_float_dtype())


def _empty_like(a, dtype=None, **kw):
    """Unspecified values in PyTorch; zeros here (every use overwrites them, e.g. bernoulli_)."""
    if dtype == torch.bool:
        return np.zeros(np.shape(a), dtype=bool)
    if dtype is not None and not dtype.is_floating_point:
        return np.zeros(np.shape(a), dtype=np.int64)
    return filled(np.shape(a), F(0))


def _draw(shape, p, generator):
    """The float run's mask for this op (its output, when the float shadow ran it), else drawn the same way."""
    fo = float_output()
    if fo is not None and tuple(fo.shape) == tuple(shape):
        return objmap(lambda v: F(int(v)), np.asarray(fo, dtype=np.int64))
    t = torch.empty(tuple(shape), dtype=_float_dtype())
    if isinstance(p, torch.Tensor):
        return _exact_mask(t.bernoulli_(p, generator=generator))
    return _exact_mask(t.bernoulli_(float(p), generator=generator))


def _bernoulli_p(a, p=0.5, generator=None):
    return _draw(np.shape(a), float(scalar(p)), generator)


def _bernoulli_tensor_(a, p, generator=None):
    return _draw(np.shape(a), _constant_probabilities(p), generator)


def _bernoulli(a, generator=None):
    p = _constant_probabilities(a)
    fo = float_output()
    if fo is not None and tuple(fo.shape) == tuple(p.shape):
        return objmap(lambda v: F(int(v)), np.asarray(fo, dtype=np.int64))
    return _exact_mask(torch.bernoulli(p, generator=generator))


def _native_dropout(x, p, train=None):
    x = arr(x)
    if train is False:
        return x.copy(), np.ones(x.shape, dtype=bool)
    fm = float_output(1)
    if fm is not None and tuple(fm.shape) == x.shape:
        mask = np.asarray(fm, dtype=bool)
    else:  # the same draw as PyTorch's kernel: replay it on a float tensor of x's shape
        mask = torch.native_dropout(torch.ones(x.shape, dtype=_float_dtype()), float(p), True)[1].numpy()
    scale = F(0) if p >= 1 else 1 / (1 - scalar(p))
    return x * objmap(lambda v: F(int(v)), mask.astype(np.int64)) * scale, mask


def _native_dropout_backward(grad, mask, scale):
    return arr(grad) * objmap(lambda v: F(int(v)), np.asarray(mask, dtype=np.int64)) * scalar(scale)


RECORDS = (
    ExactOp(("embedding",), _embedding, backward_names=("embedding_dense_backward",), backward=_embedding_backward,
            analytic=True, nodes=("EmbeddingBackward0",)),
    ExactOp(("empty_like",), _empty_like),
    ExactOp(("bernoulli_.float", "bernoulli.p"), _bernoulli_p),
    ExactOp(("bernoulli_.Tensor",), _bernoulli_tensor_),
    ExactOp(("bernoulli.default",), _bernoulli),
    # dropout: the mask is drawn once and fixed, so the op is linear in x
    ExactOp(("native_dropout",), _native_dropout, backward_names=("native_dropout_backward",),
            backward=_native_dropout_backward, analytic=True, nodes=("NativeDropoutBackward0",)),
)
