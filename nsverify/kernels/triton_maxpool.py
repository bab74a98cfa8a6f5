"""Triton kernels for the tie-aware max-pool backward on CUDA (minimal and hybrid(beta), Boustany Def. 10).

The same arithmetic as the C++ kernel and the pure-PyTorch reference (see ``cpu/maxpool_ties.cpp``): values are
computed in float32 (float64 for float64 tensors) and rounded to the tensor's dtype after each operation; a
window's tie set A_j (entries equal to its max) gets ``g_j / |A_j|`` (minimal) or ``(g_j beta) / |A_j|`` plus
``g_j (1 - beta)`` on its first entry (hybrid; tie-free windows get exactly ``g_j``); a window whose max is NaN sends
``g_j`` to PyTorch's argmax. bfloat16 is rounded to nearest even with integer operations, so that Triton's
interpreter (``TRITON_INTERPRET=1``, which truncates in its own bfloat16 casts) computes what the GPU computes.

* Non-overlapping windows: one program per block of windows reads each window once and writes each of its
  entries once.
* Overlapping windows: a window pass stores ``r_j``, the first index and the native part per window; a gather
  pass then computes each input entry from the windows that cover it (deterministic: no atomics), adding the
  spread parts in decreasing window order and the native parts in increasing order, as the reference does. On
  CUDA the reference's ``scatter_add`` of native parts uses atomics (order not fixed): where two overlapping tied
  windows share a first index, the reference itself can differ from run to run in the last bit.

Imported lazily by :mod:`nsverify.kernels` (triton is not a dependency of the CPU install).
"""
from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

BLOCK = 256

# dtype codes for the kernels' rounding: 0 float32, 1 float64, 2 bfloat16, 3 float16
_KIND = {torch.float32: 0, torch.float64: 1, torch.bfloat16: 2, torch.float16: 3}


@triton.jit
def _rnd(v, KIND: tl.constexpr):
    """v (float32, or float64 for KIND 1) rounded to the tensor's dtype, returned in the compute type."""
    if KIND == 2:
        bits = v.to(tl.uint32, bitcast=True)
        up = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
        return tl.where(v != v, v, up.to(tl.float32, bitcast=True))
    elif KIND == 3:
        return v.to(tl.float16).to(tl.float32)
    else:
        return v


@triton.jit
def _up(v, KIND: tl.constexpr):
    """A loaded value in the compute type: float64 for float64 tensors, float32 otherwise."""
    if KIND == 1:
        return v.to(tl.float64)
    else:
        return v.to(tl.float32)


@triton.jit
def _div(a, b, KIND: tl.constexpr):
    """a / b correctly rounded (Triton's float32 ``/`` may be approximate on GPUs)."""
    if KIND == 1:
        return a / b
    else:
        return tl.div_rn(a, b)


@triton.jit
def _window_values(gj, cnt, beta, omb, HYBRID: tl.constexpr, SCALED: tl.constexpr, KIND: tl.constexpr):
    """(r_j, native part) of windows with tie counts ``cnt`` and upstream ``gj`` (compute type)."""
    tied = cnt > 1
    num = gj
    if SCALED:
        num = tl.where(tied, _rnd(gj * beta, KIND), gj)
    r = _rnd(_div(num, cnt.to(gj.dtype), KIND), KIND)
    native = tl.zeros_like(gj)
    if HYBRID:
        native = tl.where(tied, _rnd(gj * omb, KIND), native)
    return r, native


@triton.jit
def _scan_windows(x_ptr, out_ptr, g_ptr, j, live, H, W, Ho, Wo, SH: tl.constexpr, SW: tl.constexpr,
                  PH: tl.constexpr, PW: tl.constexpr, DH: tl.constexpr, DW: tl.constexpr, KH: tl.constexpr,
                  KW: tl.constexpr, KIND: tl.constexpr):
    """Windows ``j``: their plane, position, max, upstream gradient, tie count and first tied entry (-1: none)."""
    plane = j // (Ho * Wo)
    oh = (j // Wo) % Ho
    ow = j % Wo
    m = _up(tl.load(out_ptr + j, mask=live, other=0.0), KIND)
    gj = _up(tl.load(g_ptr + j, mask=live, other=0.0), KIND)
    cnt = tl.zeros_like(oh).to(tl.int32)
    first = tl.full(oh.shape, -1, tl.int64)
    for t in tl.static_range(KH * KW):
        ih = oh * SH - PH + (t // KW) * DH
        iw = ow * SW - PW + (t % KW) * DW
        inside = live & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
        pos = ih * W + iw
        v = _up(tl.load(x_ptr + plane * H * W + pos, mask=inside, other=0.0), KIND)
        hit = inside & (v == m)
        first = tl.where(hit & (cnt == 0), pos, first)
        cnt += hit.to(tl.int32)
    return plane, oh, ow, m, gj, cnt, first


@triton.jit
def _disjoint_kernel(x_ptr, out_ptr, idx_ptr, g_ptr, gx_ptr, scal_ptr, n_win, H, W, Ho, Wo,
                     SH: tl.constexpr, SW: tl.constexpr, PH: tl.constexpr, PW: tl.constexpr,
                     DH: tl.constexpr, DW: tl.constexpr, KH: tl.constexpr, KW: tl.constexpr,
                     HYBRID: tl.constexpr, SCALED: tl.constexpr, KIND: tl.constexpr, BLOCK_W: tl.constexpr):
    j = tl.program_id(0).to(tl.int64) * BLOCK_W + tl.arange(0, BLOCK_W)
    live = j < n_win
    plane, oh, ow, m, gj, cnt, first = _scan_windows(x_ptr, out_ptr, g_ptr, j, live, H, W, Ho, Wo, SH, SW, PH, PW,
                                                     DH, DW, KH, KW, KIND)
    beta = tl.load(scal_ptr)
    omb = tl.load(scal_ptr + 1)
    r, native = _window_values(gj, cnt, beta, omb, HYBRID, SCALED, KIND)
    rn = _rnd(r + native, KIND)
    nan_win = m != m
    arg = tl.load(idx_ptr + j, mask=live & nan_win, other=-1)
    for t in tl.static_range(KH * KW):
        ih = oh * SH - PH + (t // KW) * DH
        iw = ow * SW - PW + (t % KW) * DW
        inside = live & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
        pos = ih * W + iw
        v = tl.load(x_ptr + plane * H * W + pos, mask=inside, other=0.0)
        v = _up(v, KIND)
        val = tl.where(v == m, tl.where(pos == first, rn, r), tl.zeros_like(r))
        val = tl.where(nan_win, tl.where(pos == arg, gj, tl.zeros_like(gj)), val)
        tl.store(gx_ptr + plane * H * W + pos, val.to(gx_ptr.dtype.element_ty), mask=inside)


@triton.jit
def _window_kernel(x_ptr, out_ptr, idx_ptr, g_ptr, r_ptr, nat_ptr, first_ptr, scal_ptr, n_win, H, W, Ho, Wo,
                   SH: tl.constexpr, SW: tl.constexpr, PH: tl.constexpr, PW: tl.constexpr,
                   DH: tl.constexpr, DW: tl.constexpr, KH: tl.constexpr, KW: tl.constexpr,
                   HYBRID: tl.constexpr, SCALED: tl.constexpr, KIND: tl.constexpr, BLOCK_W: tl.constexpr):
    """Per window: r_j, the native part and the index that receives it (-1: none)."""
    j = tl.program_id(0).to(tl.int64) * BLOCK_W + tl.arange(0, BLOCK_W)
    live = j < n_win
    plane, oh, ow, m, gj, cnt, first = _scan_windows(x_ptr, out_ptr, g_ptr, j, live, H, W, Ho, Wo, SH, SW, PH, PW,
                                                     DH, DW, KH, KW, KIND)
    beta = tl.load(scal_ptr)
    omb = tl.load(scal_ptr + 1)
    r, native = _window_values(gj, cnt, beta, omb, HYBRID, SCALED, KIND)
    nan_win = m != m
    arg = tl.load(idx_ptr + j, mask=live & nan_win, other=-1)
    if not HYBRID:
        first = tl.full(first.shape, -1, tl.int64)
    receiver = tl.where(nan_win, arg, first)
    tl.store(r_ptr + j, r, mask=live)
    tl.store(nat_ptr + j, tl.where(nan_win, gj, native), mask=live)
    tl.store(first_ptr + j, receiver, mask=live)


@triton.jit
def _gather_kernel(x_ptr, out_ptr, r_ptr, nat_ptr, first_ptr, gx_ptr, n_in, H, W, Ho, Wo,
                   SH: tl.constexpr, SW: tl.constexpr, PH: tl.constexpr, PW: tl.constexpr,
                   DH: tl.constexpr, DW: tl.constexpr, KH: tl.constexpr, KW: tl.constexpr,
                   KIND: tl.constexpr, BLOCK_I: tl.constexpr):
    """Per input entry: the spread parts of the windows covering it (decreasing window order, rounded after each
    add), then their native parts (increasing order; 16-bit types accumulate these in float32 and round once,
    like PyTorch's CPU scatter_add)."""
    i = tl.program_id(0).to(tl.int64) * BLOCK_I + tl.arange(0, BLOCK_I)
    live = i < n_in
    plane = i // (H * W)
    pos = i % (H * W)
    ih = pos // W
    iw = pos % W
    v = tl.load(x_ptr + i, mask=live, other=0.0)
    v = _up(v, KIND)
    acc = tl.zeros_like(v)
    for t in tl.static_range(KH * KW):  # kernel offsets in row-major order = windows in decreasing order
        a = t // KW
        b = t % KW
        nh = ih + PH - a * DH
        nw = iw + PW - b * DW
        oh = nh // SH
        ow = nw // SW
        ok = live & (nh >= 0) & (nw >= 0) & (nh % SH == 0) & (nw % SW == 0) & (oh < Ho) & (ow < Wo)
        j = plane * Ho * Wo + oh * Wo + ow
        m = tl.load(out_ptr + j, mask=ok, other=0.0)
        m = _up(m, KIND)
        r = tl.load(r_ptr + j, mask=ok, other=0.0)
        acc = tl.where(ok & (v == m), _rnd(acc + r, KIND), acc)
    for t in tl.static_range(KH * KW):  # reverse offset order = increasing window order
        a = (KH * KW - 1 - t) // KW
        b = (KH * KW - 1 - t) % KW
        nh = ih + PH - a * DH
        nw = iw + PW - b * DW
        oh = nh // SH
        ow = nw // SW
        ok = live & (nh >= 0) & (nw >= 0) & (nh % SH == 0) & (nw % SW == 0) & (oh < Ho) & (ow < Wo)
        j = plane * Ho * Wo + oh * Wo + ow
        f = tl.load(first_ptr + j, mask=ok, other=-1)
        nat = tl.load(nat_ptr + j, mask=ok, other=0.0)
        acc = tl.where(ok & (f == pos), acc + nat, acc)  # float32 adds: 16-bit types round once below
    tl.store(gx_ptr + i, _rnd(acc, KIND).to(gx_ptr.dtype.element_ty), mask=live)


@functools.lru_cache(maxsize=64)
def _scalars(beta: float, op_dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """``[beta, 1 - beta]`` in the compute type on the device, made once per (beta, dtype, device): a fresh tensor
    per backward would copy from the host every call, and a blocking host-to-device copy (``.to(device)``)
    synchronises the CUDA stream, so the backward could not be queued while the
    forward runs. Read-only for the kernels."""
    return torch.tensor([beta, 1.0 - beta], dtype=torch.float64).to(op_dtype).to(device)


def maxpool2d_tie_backward(g, x, out, idx, geom, hybrid: bool, beta: float) -> torch.Tensor:
    """The input gradient (see the module docstring); tensors contiguous, (N, C, H, W) / (N, C, Ho, Wo)."""
    (kh, kw), (sh, sw), (ph, pw), (dh, dw), _ceil = geom
    n, c, h, w = x.shape
    ho, wo = out.shape[-2:]
    kind = _KIND[x.dtype]
    op_dtype = torch.float64 if kind == 1 else torch.float32
    scal = _scalars(beta, op_dtype, x.device)
    scaled = hybrid and beta != 1.0
    n_win = n * c * ho * wo
    geo = dict(SH=sh, SW=sw, PH=ph, PW=pw, DH=dh, DW=dw, KH=kh, KW=kw)
    overlap = sh < (kh - 1) * dh + 1 or sw < (kw - 1) * dw + 1
    if not overlap:
        covered = ph == 0 and pw == 0 and sh == kh and sw == kw and dh == dw == 1 and ho * kh == h and wo * kw == w
        gx = torch.empty_like(x) if covered else torch.zeros_like(x)
        if n_win:
            _disjoint_kernel[(triton.cdiv(n_win, BLOCK),)](x, out, idx, g, gx, scal, n_win, h, w, ho, wo, **geo,
                                                           HYBRID=hybrid, SCALED=scaled, KIND=kind, BLOCK_W=BLOCK)
        return gx
    r = torch.empty(out.shape, dtype=op_dtype, device=x.device)
    nat = torch.empty_like(r)
    first = torch.empty(out.shape, dtype=torch.int64, device=x.device)
    gx = torch.empty_like(x)
    if n_win:
        _window_kernel[(triton.cdiv(n_win, BLOCK),)](x, out, idx, g, r, nat, first, scal, n_win, h, w, ho, wo, **geo,
                                                     HYBRID=hybrid, SCALED=scaled, KIND=kind, BLOCK_W=BLOCK)
    else:
        return gx.zero_()
    n_in = x.numel()
    _gather_kernel[(triton.cdiv(n_in, BLOCK),)](x, out, r, nat, first, gx, n_in, h, w, ho, wo, **geo, KIND=kind,
                                                BLOCK_I=BLOCK)
    return gx
