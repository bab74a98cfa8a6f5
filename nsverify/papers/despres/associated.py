"""Associated gradients (Després, Sec. 3, Def. 1): the gradient of the active piece of a program's piecewise
representation, with the piece chosen by the AD rules at the exact kinks and ties.

For a :class:`~nsverify.strategies.netspec.NetSpec` at its exact point, :func:`associated_gradient` rebuilds the network
with every activation entry replaced by one smooth piece of the registry entry (at a kink: the piece whose
derivative the layer's rule takes, :meth:`~nsverify.registry.Elementwise.derivative_piece` -- ``left``, ``right``,
``inside``, or a value equal to one side's derivative) and every max-pool window replaced by the selection of one
entry (PyTorch's rule: the first maximal index in row-major window order), and differentiates that smooth program.
Després' observation (Sec. 5) is that PyTorch's AD equals such an associated gradient.
"""

from __future__ import annotations

import numpy as np
import torch

from nsverify.errors import UnsupportedOpError
from nsverify.strategies.netspec import NetSpec, pool_windows


def _selected_piece(entry, y, rules) -> int:
    """The piece of ``entry`` active at ``y`` for AD: at kink j the piece whose derivative ``rules[j]`` takes."""
    if y in entry.breakpoints:
        j = entry.breakpoints.index(y)
        piece = entry.derivative_piece(j, rules[j])
        if piece is None:
            raise UnsupportedOpError(
                f"{entry.name}'s rule at {y} is {rules[j]}: its derivative there is no piece's derivative, so "
                f"there is no associated gradient for the elementwise-piece representation"
            )
        return piece
    return entry.piece_index(y)


def _piece_activation(entry, pieces_idx: np.ndarray):
    polys = [p.poly for p in entry.pieces]

    def act(y):
        out = torch.zeros_like(y)
        for k, poly in enumerate(polys):
            mask = torch.as_tensor(pieces_idx == k, device=y.device)
            if not mask.any():
                continue
            val = torch.zeros_like(y)
            for deg, c in enumerate(poly):
                if c:
                    val = val + float(c) * y**deg
            out = torch.where(mask, val, out)
        return out

    return act


def _selected_pool(layer, trace_a: np.ndarray):
    B = trace_a.shape[0]
    pre = trace_a.shape[1:]
    wins = list(pool_windows(layer, pre))
    idx = np.zeros((B, len(wins)), dtype=np.int64)
    for b in range(B):
        for w, (_oidx, members) in enumerate(wins):
            vals = [trace_a[(b, *m)] for m in members]
            top = max(vals)
            idx[b, w] = np.ravel_multi_index(members[vals.index(top)], pre)  # first maximal entry
    from nsverify.strategies.netspec import _pool_shape

    out_shape = _pool_shape(layer, pre)

    def pool(a):
        flat = a.reshape(B, -1)
        return torch.gather(flat, 1, torch.as_tensor(idx, device=a.device)).reshape(B, *out_shape)

    return pool


def associated_gradient(spec: NetSpec, dtype=torch.float64, device="cpu") -> torch.Tensor:
    """The associated gradient of ``spec``'s loss w.r.t. its parameters, in ``dtype`` (float64: exact for small
    dyadic networks whose pieces have dyadic coefficients)."""
    trace = spec.exact()
    net = spec.build(dtype, device)
    for i, L in enumerate(spec.layers):
        entry = L.activation.primitive()
        if entry is not None:
            rules = L.activation.rules
            sel = np.vectorize(
                lambda y, e=entry, r=rules: _selected_piece(e, y, r), otypes=[np.int64]
            )(trace.y[i])
            net._acts[i] = _piece_activation(entry, sel)
        if L.pool is not None:
            net.pool_override[i] = _selected_pool(L, trace.a[i])
    fn, w = spec.loss_fn(dtype, device, net=net)
    return grad_of(fn, w)


def grad_of(fn, w: torch.Tensor) -> torch.Tensor:
    """Autograd gradient of the scalar fn at w (zeros when the output does not depend on w)."""
    wf = w.detach().clone().requires_grad_(True)
    out = fn(wf)
    if not out.requires_grad:
        return torch.zeros_like(wf)
    (g,) = torch.autograd.grad(out, wf, allow_unused=True)
    return torch.zeros_like(wf) if g is None else g
