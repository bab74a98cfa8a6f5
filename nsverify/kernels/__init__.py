"""Fused kernels for the tie-aware max-pool backward: the minimal (even split) and hybrid(beta) Jacobians of
Boustany Def. 10 in one pass over x, the pooled output and the incoming gradient.

* CPU: a C++ kernel (``cpu/maxpool_ties.cpp``, OpenMP over the (n, c) planes) built at first use by
  :mod:`.loader` (torch.utils.cpp_extension, cached; see there for the build time and the cache directory);
* CUDA: Triton kernels (:mod:`.triton_maxpool`), used when ``triton`` is importable (CUDA builds of torch bring
  it); the training monitor's detection (:func:`tie_scan`, :func:`count_equal`) likewise (:mod:`.triton_monitor`);
* everywhere else, and as the reference the kernels are tested against: the pure-PyTorch path of
  :func:`nsverify.ad.max_pool2d` (``_TieWindows``).

The kernels perform the reference's floating-point operations in its order, so their gradients are equal to it
(the same numbers; NaN where it has NaN). :func:`nsverify.ad.max_pool2d` calls :func:`maxpool2d_tie_backward` and
takes the reference when it returns ``None``: under ``torch.func`` transforms (vmap, grad of grad), a backward that
builds a graph (``create_graph=True``), ``torch.compile`` tracing, non-contiguous inputs, or mode ``reference``.
Forward mode (jvp) always uses the reference.

Mode: ``NSVERIFY_KERNELS`` = ``auto`` (default: fused where available, else the reference with one warning),
``reference`` (never fused) or ``fused`` (raise :class:`KernelUnavailableError` instead of falling back); in code
``with nsverify.kernels.use("reference"): ...`` or :func:`set_mode`. :func:`status` says what is in use.
"""
from __future__ import annotations

import contextlib
import logging
import os
from dataclasses import asdict

import torch

from nsverify.errors import NsverifyError
from nsverify.kernels import loader

__all__ = ["ENV", "MODES", "KernelUnavailableError", "KernelModeError", "mode", "set_mode", "use", "status",
           "maxpool2d_tie_backward", "fused_applies", "tie_counts", "tie_scan", "tie_scan_windows",
           "count_equal", "cpu_kernels_ok", "monitor_pool_scan"]

log = logging.getLogger("nsverify.kernels")

ENV = "NSVERIFY_KERNELS"
MODES = ("auto", "reference", "fused")
_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_MODE: str | None = None
_TRITON: dict = {}
_TRITON_MONITOR: dict = {}


class KernelUnavailableError(NsverifyError, RuntimeError):
    """Mode ``fused`` was asked for, but no fused kernel can run here (no compiler, failed build, no triton)."""


class KernelModeError(NsverifyError, ValueError):
    """An unknown kernel mode (``NSVERIFY_KERNELS`` or :func:`set_mode`)."""


def _check_mode(m: str, where: str) -> str:
    if m not in MODES:
        raise KernelModeError(f"{where}={m!r} is not a kernel mode; use one of {', '.join(MODES)}.")
    return m


def mode() -> str:
    """The mode in force: the one set by :func:`set_mode` / :func:`use`, else ``$NSVERIFY_KERNELS``, else auto."""
    if _MODE is not None:
        return _MODE
    return _check_mode(os.environ.get(ENV, "auto").strip().lower() or "auto", ENV)


def set_mode(m: str | None) -> None:
    """Set the mode process-wide (``None``: back to ``$NSVERIFY_KERNELS``)."""
    global _MODE
    _MODE = None if m is None else _check_mode(m, "mode")


@contextlib.contextmanager
def use(m: str):
    """Within the block, max-pool backwards use mode ``m`` (``auto``, ``reference`` or ``fused``)."""
    global _MODE
    saved = _MODE
    set_mode(m)
    try:
        yield
    finally:
        _MODE = saved


def _plain(t: torch.Tensor) -> bool:
    """A real tensor the kernels can read: not a functorch wrapper (vmap, grad), fake or other subclass."""
    if type(t) not in (torch.Tensor, torch.nn.Parameter):
        return False
    try:
        return not torch._C._functorch.is_functorch_wrapped_tensor(t)
    except (AttributeError, RuntimeError):  # pragma: no cover - older torch
        return True


def fused_applies(g, x, out, idx) -> str | None:
    """Why the reference must run for these tensors (a short reason), or None when a fused kernel can."""
    if torch.compiler.is_compiling():
        return "torch.compile tracing"
    if torch.is_grad_enabled():
        return "the backward builds a graph (create_graph=True): the reference is differentiable"
    if not all(_plain(t) for t in (g, x, out, idx)):
        return "torch.func transform or tensor subclass"
    if x.dim() != 4 or x.dtype not in _FLOATS or g.dtype != x.dtype or idx.dtype != torch.int64:
        return "shape or dtype"
    if not (x.is_contiguous() and out.is_contiguous() and g.is_contiguous() and idx.is_contiguous()):
        return "non-contiguous (e.g. channels_last) tensors"
    if x.device.type not in ("cpu", "cuda") or not (x.device == g.device == out.device == idx.device):
        return f"device {x.device}"
    return None


def _triton_module():
    """The Triton kernels module, or None (with the reason kept for :func:`status`)."""
    if "module" not in _TRITON:
        try:
            from nsverify.kernels import triton_maxpool

            _TRITON.update(module=triton_maxpool, error=None)
            log.info("nsverify.kernels: Triton max-pool backward in use on CUDA (triton %s)",
                     triton_maxpool.triton.__version__)
        except ImportError as exc:
            _TRITON.update(module=None, error=f"triton is not importable ({exc}); CUDA builds of torch bring it")
            log.warning("nsverify.kernels: %s; using the pure-PyTorch reference on CUDA", _TRITON["error"])
    return _TRITON["module"]


def maxpool2d_tie_backward(g, x, out, idx, geom, jacobian: str, beta: float | None):
    """The input gradient of a 2-d max pool under ``jacobian`` ("minimal" or "hybrid" with ``beta``), from the
    fused kernel of x's device, or ``None`` when the reference must compute it (see the module docstring).

    ``geom``: (kernel, stride, padding, dilation, ceil_mode) as pairs; ``out``, ``idx``: the forward's output and
    PyTorch's argmax (read only at windows whose max is NaN); ``g``: the incoming gradient."""
    m = mode()
    if m == "reference" or jacobian not in ("minimal", "hybrid") or fused_applies(g, x, out, idx) is not None:
        return None
    hybrid = jacobian == "hybrid"
    b = 1.0 if beta is None else float(beta)
    k, s, p, d, _ceil = geom
    if x.device.type == "cpu":
        state = loader.cpu_extension()
        if not state.ok:
            if m == "fused":
                raise KernelUnavailableError(f"NSVERIFY_KERNELS=fused but the C++ kernel is unavailable: {state.error}")
            return None
        return torch.ops.nsverify_kernels.maxpool2d_tie_backward(g, x, out, idx, list(k), list(s), list(p), list(d),
                                                                  hybrid, b, 1.0 - b)
    tk = _triton_module()
    if tk is None:
        if m == "fused":
            raise KernelUnavailableError(f"NSVERIFY_KERNELS=fused but {_TRITON['error']}")
        return None
    return tk.maxpool2d_tie_backward(g, x, out, idx, geom, hybrid, b)


def status() -> dict:
    """What the kernels are: the mode, the CPU extension's state (None until first requested) and its cache
    directory, the Triton state (None until a CUDA backward asked for it) and whether the monitor's detection
    runs its Triton kernels (``cuda_monitor``; None until a CUDA detection asked for them)."""
    cpu = loader.state()
    return {"mode": mode(), "cpu": None if cpu is None else asdict(cpu), "cpu_cache": str(loader.cache_root()),
            "cuda": None if not _TRITON else {"triton": _TRITON["module"] is not None, "error": _TRITON["error"]},
            "cuda_monitor": None if not _TRITON_MONITOR else {"triton": _TRITON_MONITOR["module"] is not None}}


def tie_counts(x: torch.Tensor, out: torch.Tensor, kernel, stride, padding=(0, 0), dilation=(1, 1)) -> torch.Tensor:
    """|A_j| for every window of a 2-d max pool: how many entries of x equal the window's max ``out`` (uint8; 0 for
    a window whose max is NaN; padding never counts). One vectorised pass on x's device, no copy of x: one strided
    slice of x per kernel offset, compared with the part of ``out`` whose windows that offset hits.

    x: (..., H, W); out: (..., Ho, Wo) as ``F.max_pool2d`` returns it (any ceil_mode); kernel, stride, padding,
    dilation: pairs. Windows of more than 255 entries raise (the count is uint8)."""
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = kernel, stride, padding, dilation
    if kh * kw > 255:
        raise NsverifyError(f"tie_counts: a {kh}x{kw} window has more entries than a uint8 count holds (255)")
    h, w = x.shape[-2:]
    ho, wo = out.shape[-2:]
    count = torch.zeros(out.shape, dtype=torch.uint8, device=out.device)

    def span(o, size, n_out, pad, step, dil):  # output rows whose offset-o input row lies inside
        lo = max(0, -(-(pad - o * dil) // step))
        hi = min(n_out - 1, (size - 1 + pad - o * dil) // step)
        return lo, hi

    for a in range(kh):
        oh0, oh1 = span(a, h, ho, ph, sh, dh)
        if oh1 < oh0:
            continue
        ih0 = oh0 * sh - ph + a * dh
        for b in range(kw):
            ow0, ow1 = span(b, w, wo, pw, sw, dw)
            if ow1 < ow0:
                continue
            iw0 = ow0 * sw - pw + b * dw
            xs = x[..., ih0: ih0 + (oh1 - oh0) * sh + 1: sh, iw0: iw0 + (ow1 - ow0) * sw + 1: sw]
            count[..., oh0: oh1 + 1, ow0: ow1 + 1] += xs == out[..., oh0: oh1 + 1, ow0: ow1 + 1]
    return count


def cpu_kernels_ok(*ts) -> bool:
    """Can the C++ monitor kernels (detection, the patch comparison) read these tensors (CPU, plain, floating;
    built, not mode reference)?"""
    if mode() == "reference" or torch.compiler.is_compiling():
        return False
    if not all(t.device.type == "cpu" and t.dtype in _FLOATS and _plain(t) for t in ts):
        return False
    return loader.cpu_extension().ok


def _triton_monitor(*ts):
    """The Triton monitor kernels (:mod:`.triton_monitor`) when they can read these tensors (CUDA, plain,
    floating, contiguous; triton importable; not mode reference), else None."""
    if mode() == "reference" or torch.compiler.is_compiling():
        return None
    if not all(t.device.type == "cuda" and t.dtype in _FLOATS and _plain(t) and t.is_contiguous() for t in ts):
        return None
    if "module" not in _TRITON_MONITOR:
        try:
            from nsverify.kernels import triton_monitor

            _TRITON_MONITOR["module"] = triton_monitor
        except ImportError:  # the reference path runs instead (equal counts); the max-pool backward's warning says why
            _TRITON_MONITOR["module"] = None
    return _TRITON_MONITOR["module"]


def tie_scan(x: torch.Tensor, out: torch.Tensor, kernel, stride, padding=(0, 0), dilation=(1, 1),
             saturated=()) -> tuple[torch.Tensor, torch.Tensor]:
    """``(counts, mask)`` of a 2-d max pool for the training monitor: ``counts`` = int64 tensor ``[windows with
    |A_j| >= 2, those whose max is not in saturated]``, ``mask`` = bool (..., Ho, Wo), True at the latter. One read
    of x and out (the C++ kernel on CPU, one Triton kernel on CUDA; :func:`tie_counts` and a few elementwise ops
    elsewhere). Counts stay on x's device; nothing waits for the device."""
    if cpu_kernels_ok(x, out) and x.dim() == 4 and x.is_contiguous() and out.is_contiguous():
        return torch.ops.nsverify_kernels.maxpool2d_tie_scan(x, out, list(kernel), list(stride), list(padding),
                                                              list(dilation), [float(v) for v in saturated])
    tm = _triton_monitor(x, out) if x.dim() == 4 else None
    if tm is not None:
        return tm.tie_scan(x, out, kernel, stride, padding, dilation, saturated)
    many = tie_counts(x, out, kernel, stride, padding, dilation) >= 2
    mask = many.clone()
    for v in saturated:
        mask &= out != v
    return torch.stack([many.sum(), mask.sum()]), mask


def tie_scan_windows(x: torch.Tensor, out: torch.Tensor, kernel, stride, padding=(0, 0), dilation=(1, 1),
                     saturated=()) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`tie_scan` with the Algorithm-2-counted windows as an (n, 2) int64 tensor of (sample, window) pairs
    (window = channel * Ho * Wo + flat output position: ``mask.reshape(N, -1).nonzero()``) instead of the mask;
    the C++ kernel collects them in its pass (no pass over the mask), elsewhere the mask's ``nonzero``."""
    if cpu_kernels_ok(x, out) and x.dim() == 4 and x.is_contiguous() and out.is_contiguous():
        return torch.ops.nsverify_kernels.maxpool2d_tie_scan_windows(
            x, out, list(kernel), list(stride), list(padding), list(dilation), [float(v) for v in saturated])
    counts, mask = tie_scan(x, out, kernel, stride, padding, dilation, saturated)
    return counts, mask.reshape(mask.shape[0], -1).nonzero()


def count_equal(y: torch.Tensor, values) -> torch.Tensor:
    """How many entries of y equal one of ``values`` (0-d int64 on y's device; kink touches), in one read of y (the
    C++ kernel on CPU, one Triton kernel on CUDA)."""
    values = [float(v) for v in values]
    if cpu_kernels_ok(y):
        return torch.ops.nsverify_kernels.count_equal(y, values)
    tm = _triton_monitor(y)
    if tm is not None:
        return tm.count_equal(y, values)
    total = torch.zeros((), dtype=torch.int64, device=y.device)
    for v in values:
        total = total + (y == v).sum()
    return total


def monitor_pool_scan(y: torch.Tensor | None, kinks, x: torch.Tensor, out: torch.Tensor, kernel, stride,
                      padding=(0, 0), dilation=(1, 1), saturated=()) -> tuple[torch.Tensor, torch.Tensor]:
    """The training monitor's detection for one layer with a 2-d max pool in one call: ``(counts, windows)``,
    ``counts`` = int64 ``[kink touches of y (entries equal to one of kinks; 0 when y is None), windows with
    |A_j| >= 2, those whose max is not in saturated]`` and ``windows`` the latter's (sample, window) pairs, as
    :func:`count_equal` and :func:`tie_scan_windows` give them. On CPU one call of the C++ kernel (one parallel
    region at most); elsewhere those two functions."""
    if (cpu_kernels_ok(x, out, *(() if y is None else (y,))) and x.dim() == 4 and x.is_contiguous()
            and out.is_contiguous() and (y is None or y.dtype == x.dtype)):
        return torch.ops.nsverify_kernels.monitor_pool_scan(
            y, [float(v) for v in kinks], x, out, list(kernel), list(stride), list(padding), list(dilation),
            [float(v) for v in saturated])
    counts, windows = tie_scan_windows(x, out, kernel, stride, padding, dilation, saturated)
    touches = (count_equal(y, kinks) if y is not None and len(kinks)
               else torch.zeros((), dtype=torch.int64, device=x.device))
    return torch.cat([touches.reshape(1), counts.to(torch.int64)]), windows
