"""PyTorch's fused attention kernels, evaluated exactly: ``_scaled_dot_product_flash_attention_for_cpu`` and its
backward, and the fused inference paths ``_native_multi_head_attention`` and ``_transformer_encoder_layer_fwd``.

``scaled_dot_product_attention`` on float CPU tensors runs the flash kernel (``nn.MultiheadAttention`` and
``nn.TransformerEncoderLayer`` among others), so the float run of a stock transformer names it even though the
exact trace, on the interpreter's tensors, takes PyTorch's math decomposition.  Here it is the math:
``softmax(q k^T * scale + mask) v`` (``scale`` = 1/sqrt(E) by default: exact where E is a square, else an
interval), with ``is_causal`` leaving the entries above the diagonal out of the softmax and a float mask added to
the scores (its -inf entries, :class:`~nsverify.oracle.numbers.NegInf`, leave theirs out too).  The kernel's
second output is the log-sum-exp of each row of scores.  The backward recomputes the attention weights A exactly
and returns (dQ, dK, dV) = (dS k scale, dS^T q scale, A^T dO) with dS = A * (dO v^T - rowsum(A * dO v^T)).
Dropout inside the kernel (``dropout_p > 0``) draws its mask inside the fused kernel, where the oracle cannot read
it: refused.

In eval mode on tensors that do not require grad (the forward-mode traces), ``nn.MultiheadAttention`` and
``nn.TransformerEncoderLayer`` take their fused paths; both are evaluated as their reference decompositions
(the encoder layer's re-enters the interpreter, so its feed-forward ReLU's kinks are kink sites as usual).
``_safe_softmax`` is ``scaled_dot_product_attention``'s softmax: 0 on a fully masked row.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from nsverify.errors import NonFiniteError, UnsupportedOpError
from nsverify.oracle.numbers import NEG_INF
from nsverify.oracle.ops.common import arr, filled, scalar
from nsverify.oracle.ops.linalg import matmul
from nsverify.oracle.ops.record import ExactOp
from nsverify.oracle.ops.smooth import _softmax, log, rsqrt, shifted_exps

F = Fraction


def _swap(a: np.ndarray) -> np.ndarray:
    return np.swapaxes(a, -1, -2)


def _setup(q, k, dropout_p, is_causal, attn_mask, scale):
    """(scores, allowed, scale): q k^T * scale (+ a float mask), and which entries take part in the softmax."""
    if dropout_p:
        raise UnsupportedOpError(
            "scaled_dot_product_attention with dropout_p > 0: the fused kernel draws its dropout mask inside, "
            "where the exact oracle cannot read it; apply nn.Dropout to the attention weights instead")
    q, k = arr(q), arr(k)
    sc = rsqrt(F(q.shape[-1])) if scale is None else scalar(scale)
    s = matmul(q, _swap(k)) * sc
    allowed = np.ones(s.shape, dtype=bool)
    if is_causal:
        allowed &= np.tril(np.ones(s.shape[-2:], dtype=bool))
    if attn_mask is not None:  # the kernel takes float masks only (PyTorch turns boolean ones into -inf: NEG_INF)
        s = s + arr(attn_mask)
    return s, allowed, sc


def _weights(s, allowed):
    """Softmax over the allowed entries of each row (those not masked by ``is_causal`` or a -inf mask entry):
    (A, logsumexp of each row), with softmax's exact weights at tied scores (:func:`.smooth.shifted_exps`);
    a row with no allowed entry raises (PyTorch's kernel gives NaN there)."""
    a = filled(s.shape, F(0))
    lse = np.empty(s.shape[:-1], dtype=object)
    for pos in np.ndindex(*s.shape[:-1]):
        cols = [j for j in np.flatnonzero(allowed[pos]) if s[pos + (j,)] is not NEG_INF]
        if not cols:
            raise NonFiniteError("attention row with every key masked: PyTorch's softmax gives NaN there; exact "
                                 "analysis needs finite values")
        es, total, m = shifted_exps([s[pos + (j,)] for j in cols])
        lse[pos] = log(total) + m
        for j, e in zip(cols, es):
            a[pos + (j,)] = e / total
    return a, lse


def _flash_attention(q, k, v, dropout_p=0.0, is_causal=False, attn_mask=None, scale=None):
    s, allowed, _ = _setup(q, k, dropout_p, is_causal, attn_mask, scale)
    a, lse = _weights(s, allowed)
    return matmul(a, arr(v)), lse


def _flash_attention_backward(grad, q, k, v, out, lse, dropout_p, is_causal, attn_mask=None, scale=None):
    s, allowed, sc = _setup(q, k, dropout_p, is_causal, attn_mask, scale)
    a, _ = _weights(s, allowed)
    g, q, k, v = arr(grad), arr(q), arr(k), arr(v)
    da = matmul(g, _swap(v))
    ds = a * (da - np.asarray(np.sum(da * a, axis=-1, keepdims=True), dtype=object))
    return matmul(ds, k) * sc, matmul(_swap(ds), q) * sc, matmul(_swap(a), g)


# ------------------------------------------------------------------------------ fused inference paths
def _heads(x: np.ndarray, h: int) -> np.ndarray:
    """(B, L, E) -> (B, h, L, E / h)."""
    b, n, e = x.shape
    return x.reshape(b, n, h, e // h).transpose(0, 2, 1, 3)


def _native_mha(query, key, value, embed_dim, num_head, qkv_weight, qkv_bias, proj_weight, proj_bias, mask=None,
                need_weights=True, average_attn_weights=True, mask_type=None):
    """nn.MultiheadAttention's fast path (eval mode, batch first): the in-projection split in three, attention
    per head with scale 1/sqrt(E / heads), the output projection."""
    if mask is not None:
        raise UnsupportedOpError(
            "nn.MultiheadAttention's fused path with a mask: PyTorch passes masks as -inf entries, which the exact "
            "oracle refuses (non-finite constants); pass a finite additive mask to the math path instead")
    w, b = arr(qkv_weight), arr(qkv_bias)
    e = int(embed_dim)
    q, k, v = (matmul(arr(x), w[i * e:(i + 1) * e].T) + b[i * e:(i + 1) * e]
               for i, x in enumerate((query, key, value)))
    h = int(num_head)
    s, allowed, _ = _setup(_heads(q, h), _heads(k, h), 0.0, False, None, None)
    a, _ = _weights(s, allowed)
    o = matmul(a, _heads(v, h)).transpose(0, 2, 1, 3).reshape(q.shape[0], q.shape[1], e)
    out = matmul(o, arr(proj_weight).T) + arr(proj_bias)
    if not need_weights:
        return out, np.empty((0,), dtype=object)
    return out, (np.asarray(np.sum(a, axis=1), dtype=object) * F(1, h) if average_attn_weights else a)


def _encoder_layer(tensor, src, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias, use_gelu,
                   norm_first, eps, norm_weight_1, norm_bias_1, norm_weight_2, norm_bias_2, ffn_weight_1, ffn_bias_1,
                   ffn_weight_2, ffn_bias_2, mask=None, mask_type=None):
    """nn.TransformerEncoderLayer's fast path (eval mode), run as its reference decomposition on the
    interpreter's tensors (``tensor(array)``, given by the dispatcher: the record ``reenters``): every op
    dispatches again, so the feed-forward ReLU's kinks are kink sites as usual."""
    import torch

    if mask is not None:
        raise UnsupportedOpError(
            "nn.TransformerEncoderLayer's fused path with a mask: PyTorch passes masks as -inf entries, which the "
            "exact oracle refuses (non-finite constants)")
    x0, n1w, n1b, n2w, n2b = (tensor(arr(t)) for t in (src, norm_weight_1, norm_bias_1, norm_weight_2, norm_bias_2))
    qw, qb, pw, pb, f1w, f1b, f2w, f2b = (tensor(arr(t)) for t in (qkv_weight, qkv_bias, proj_weight, proj_bias,
                                                                ffn_weight_1, ffn_bias_1, ffn_weight_2, ffn_bias_2))
    e = int(embed_dim)

    def ln(t, wt, bs):  # inside dispatch, composite ops are not decomposed: call the ATen ops themselves
        return torch.ops.aten.native_layer_norm(t, [e], wt, bs, float(eps))[0]

    x = ln(x0, n1w, n1b) if norm_first else x0
    x = torch.ops.aten._native_multi_head_attention(x, x, x, e, int(num_heads), qw, qb, pw, pb, None, False)[0]
    x = x + x0
    if not norm_first:
        x = ln(x, n1w, n1b)
    res = x
    y = ln(x, n2w, n2b) if norm_first else x
    y = torch.ops.aten.linear(y, f1w, f1b)
    y = torch.ops.aten.gelu(y) if use_gelu else torch.ops.aten.relu(y)
    x = torch.ops.aten.linear(y, f2w, f2b) + res
    if not norm_first:
        x = ln(x, n2w, n2b)
    return x.arr


def _safe_softmax(a, dim, dtype=None):
    """scaled_dot_product_attention's softmax: 0 on rows that are all -inf (a fully masked row), softmax
    elsewhere."""
    return _softmax(a, dim, safe=True)


RECORDS = (
    ExactOp(("_scaled_dot_product_flash_attention_for_cpu",), _flash_attention,
            backward_names=("_scaled_dot_product_flash_attention_for_cpu_backward",),
            backward=_flash_attention_backward, analytic=True, enclosure=True,
            nodes=("ScaledDotProductFlashAttentionForCpuBackward0",)),
    ExactOp(("_safe_softmax",), _safe_softmax, analytic=True, enclosure=True, nodes=("SafeSoftmaxBackward0",)),
    ExactOp(("_native_multi_head_attention",), _native_mha, analytic=True, enclosure=True),
    # nn.TransformerEncoderLayer's fused path: its activation (relu or gelu) makes it piecewise
    ExactOp(("_transformer_encoder_layer_fwd",), _encoder_layer, enclosure=True, reenters=True),
)
