"""Triton kernels for the training monitor's detection on CUDA: the max-pool tie scan and the kink count, one launch
each, with their counts summed on the device (integer atomics: the sums do not depend on the order).

* :func:`tie_scan`: per window of a 2-d max pool, |A_j| (entries equal to the window's max; padding and a NaN
  max never count), in one read of x and out; writes the mask of the windows Park et al.'s Algorithm 2 counts
  (|A_j| >= 2 and the max not a saturated value of the activation) and adds ``[windows with |A_j| >= 2, counted
  windows]`` into an int64 pair. The same results as :func:`nsverify.kernels.tie_counts` followed by the
  elementwise tests of :func:`nsverify.kernels.tie_scan`, which the tests compare it with.
* :func:`count_equal`: how many entries of y equal one of the activation's kinks, in one read of y.

Comparisons are made in float32 (float64 for float64 tensors) after widening both sides from the tensor's
dtype, so they are the tensor dtype's comparisons; the saturated values and kinks are first rounded to the
tensor's dtype, as PyTorch's tensor-scalar comparisons do. Nothing is read back to the host: the monitor reads
every layer's counts in its one transfer per step. Imported lazily by :mod:`nsverify.kernels` (triton is not a
dependency of the CPU install); ``TRITON_INTERPRET=1`` runs the kernels on CPU tensors (the tests).
"""
from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

BLOCK = 256


@triton.jit
def _up(v, F64: tl.constexpr):
    if F64:
        return v.to(tl.float64)
    else:
        return v.to(tl.float32)


@triton.jit
def _tie_scan_kernel(x_ptr, out_ptr, sat_ptr, mask_ptr, counts_ptr, n_win, H, W, Ho, Wo,
                     SH: tl.constexpr, SW: tl.constexpr, PH: tl.constexpr, PW: tl.constexpr,
                     DH: tl.constexpr, DW: tl.constexpr, KH: tl.constexpr, KW: tl.constexpr,
                     NSAT: tl.constexpr, F64: tl.constexpr, BLOCK_W: tl.constexpr):
    j = tl.program_id(0).to(tl.int64) * BLOCK_W + tl.arange(0, BLOCK_W)
    live = j < n_win
    plane = j // (Ho * Wo)
    oh = (j // Wo) % Ho
    ow = j % Wo
    m = _up(tl.load(out_ptr + j, mask=live, other=0.0), F64)
    cnt = tl.zeros((BLOCK_W,), dtype=tl.int32)
    for t in tl.static_range(KH * KW):
        ih = oh * SH - PH + (t // KW) * DH
        iw = ow * SW - PW + (t % KW) * DW
        inside = live & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
        v = _up(tl.load(x_ptr + plane * H * W + ih * W + iw, mask=inside, other=0.0), F64)
        cnt += (inside & (v == m)).to(tl.int32)
    many = live & (cnt >= 2)
    counted = many
    for t in tl.static_range(NSAT):
        counted = counted & (m != _up(tl.load(sat_ptr + t), F64))
    tl.store(mask_ptr + j, counted.to(tl.int8), mask=live)
    tl.atomic_add(counts_ptr, tl.sum(many.to(tl.int64), axis=0))
    tl.atomic_add(counts_ptr + 1, tl.sum(counted.to(tl.int64), axis=0))


@triton.jit
def _count_equal_kernel(y_ptr, val_ptr, count_ptr, n, NVAL: tl.constexpr, F64: tl.constexpr,
                        BLOCK_I: tl.constexpr):
    i = tl.program_id(0).to(tl.int64) * BLOCK_I + tl.arange(0, BLOCK_I)
    live = i < n
    y = _up(tl.load(y_ptr + i, mask=live, other=0.0), F64)
    hit = tl.zeros((BLOCK_I,), dtype=tl.int64)
    for t in tl.static_range(NVAL):
        hit += (live & (y == _up(tl.load(val_ptr + t), F64))).to(tl.int64)
    tl.atomic_add(count_ptr, tl.sum(hit, axis=0))


def _values(values, like: torch.Tensor) -> torch.Tensor:
    """The values rounded to the tensor's dtype (as a tensor-scalar comparison rounds them), on its device; one
    dummy entry when there are none (the kernels never read it). Made once per (values, dtype, device): a
    blocking host-to-device copy (``.to(device)``) synchronises the CUDA stream, so a fresh tensor per call
    would make every layer's detection wait for the forward."""
    return _device_values(tuple(float(v) for v in values) or (0.0,), like.dtype, like.device)


@functools.lru_cache(maxsize=256)
def _device_values(values: tuple, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64).to(dtype).to(device)


def tie_scan(x: torch.Tensor, out: torch.Tensor, kernel, stride, padding, dilation,
             saturated=()) -> tuple[torch.Tensor, torch.Tensor]:
    """``(counts, mask)`` as :func:`nsverify.kernels.tie_scan` returns them: x (N, C, H, W), out (N, C, Ho, Wo),
    both contiguous and of one floating dtype; geometry as pairs."""
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = kernel, stride, padding, dilation
    n, c, h, w = x.shape
    ho, wo = out.shape[-2:]
    n_win = n * c * ho * wo
    mask = torch.empty(out.shape, dtype=torch.int8, device=x.device)
    counts = torch.zeros(2, dtype=torch.int64, device=x.device)
    if n_win:
        _tie_scan_kernel[(triton.cdiv(n_win, BLOCK),)](
            x, out, _values(saturated, x), mask, counts, n_win, h, w, ho, wo, SH=sh, SW=sw, PH=ph, PW=pw, DH=dh,
            DW=dw, KH=kh, KW=kw, NSAT=len(saturated), F64=x.dtype == torch.float64, BLOCK_W=BLOCK)
    return counts, mask.view(torch.bool)


def count_equal(y: torch.Tensor, values) -> torch.Tensor:
    """How many entries of y (contiguous, floating) equal one of ``values``: a 0-d int64 tensor on y's device."""
    count = torch.zeros(1, dtype=torch.int64, device=y.device)
    n = y.numel()
    if n and values:
        _count_equal_kernel[(triton.cdiv(n, BLOCK),)](y, _values(values, y), count, n, NVAL=len(values),
                                                      F64=y.dtype == torch.float64, BLOCK_I=BLOCK)
    return count[0]
