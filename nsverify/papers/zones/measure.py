"""The numerical backprop variation D (Boustany eq 3.11) and the thresholds tau1/tau2 (eqs 3.12, 3.13).

D(P, Q) = || backprop[loss_P] - backprop[loss_Q] ||  over the full parameter vector of one minibatch, where
P and Q differ only in their backward rule.  The norm (``norm``: 1 = L1 as in eq 3.11, 2, or inf) and the
loss reduction over the minibatch (``reduction``: "sum" = eq 3.11's backprop of sum_i P_i, or "mean" =
PyTorch's default) are explicit.  Both gradients come from ONE forward pass (:mod:`.rules`); the difference
is taken after an exact cast to float64, so D measures what the dtype's backward produced, not the
subtraction.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from nsverify.devices import dtype_name
from nsverify.errors import DeviceUnavailableError, NsverifyError, UnsupportedDtypeError
from nsverify.papers.zones.rules import is_relu, nonsmooth_layers, pool_geometry, use_rule


class NoNonsmoothLayersError(NsverifyError, ValueError):
    """The model has no switchable ReLU/MaxPool layer, so every program computes the same gradient."""


class MissingThresholdError(NsverifyError, ValueError):
    """A precision was requested without a threshold tau for it."""


def require_nonsmooth(model: nn.Module) -> list:
    layers = nonsmooth_layers(model)
    if not layers:
        plain = [n for n, m in model.named_modules() if isinstance(m, (nn.ReLU, nn.MaxPool2d))]
        extra = (f" It has plain torch layers ({', '.join(plain[:4])}...): convert them with "
                 f"nsverify.papers.zones.switchable(model).") if plain else (
            " If it calls F.relu / F.max_pool2d inside forward, use nsverify.papers.zones.ReLUS / MaxPool2dS modules "
            "instead; a model without kinks has no bifurcation or compensation zone.")
        raise NoNonsmoothLayersError(
            f"{type(model).__name__} has no switchable nonsmooth layer (ReLUS / MaxPool2dS), so all programs "
            f"give the same gradient and D is identically 0.{extra}")
    return layers


def check_dtype_device(dtype: torch.dtype, device: torch.device, allow_slow: bool = False) -> None:
    """float16 convolution/matmul on CPU is very slow (and not what the papers measured): refuse with advice."""
    if device.type == "cuda" and not torch.cuda.is_available():
        raise DeviceUnavailableError("CUDA requested but no GPU is available; use device='cpu'.")
    if dtype == torch.float16 and device.type == "cpu" and not allow_slow:
        raise UnsupportedDtypeError(
            "float16 on CPU: PyTorch runs half-precision convolutions/matmuls on CPU through slow fallbacks "
            "(tens of times slower) and 16-bit GPU kernels round differently. Use bfloat16 on CPU, run float16 on "
            "a GPU (scripts/gpu/zones.py), or pass allow_slow=True / --allow-slow-fp16 to run it anyway.")


def loss_fn(logits, y, reduction: str = "mean"):
    if reduction not in ("sum", "mean"):
        raise NsverifyError(f"reduction must be 'sum' (eq 3.11) or 'mean' (PyTorch default), got {reduction!r}.")
    return F.cross_entropy(logits, y, reduction=reduction)


@dataclass
class ForwardView:
    """What one float forward pass saw: exact zeros before ReLUs and tied maxpool windows, per layer."""

    relu_zeros: int = 0
    relu_total: int = 0
    pool_tied_windows: int = 0
    pool_windows: int = 0
    min_abs_preact: float = math.inf
    per_layer: list = field(default_factory=list)
    masks: list = field(default_factory=list, repr=False)


def _view_hooks(model, keep_masks: bool = False):
    view = ForwardView()
    hooks = []

    def relu_hook(mod, inp, out):
        x = inp[0].detach()
        z = int((x == 0).sum())
        view.relu_zeros += z
        view.relu_total += x.numel()
        nz = x.abs()
        view.min_abs_preact = min(view.min_abs_preact, float(nz.min()))
        view.per_layer.append(("relu", z))
        if keep_masks:
            view.masks.append((x == 0).cpu().numpy())

    def pool_hook(mod, inp, out):
        x = inp[0].detach()
        n, c, h, w = x.shape
        k, s, p, d = pool_geometry(mod)
        xp = F.pad(x, (p[1], p[1], p[0], p[0]), value=float("-inf")) if any(p) else x
        cols = F.unfold(xp.reshape(n * c, 1, *xp.shape[-2:]), k, dilation=d, stride=s)
        tmask = (cols == out.detach().reshape(n * c, 1, -1)).sum(1) > 1
        tied = int(tmask.sum())
        if keep_masks:
            view.masks.append(tmask.reshape(out.shape).cpu().numpy())
        view.pool_tied_windows += tied
        view.pool_windows += out.numel()
        view.per_layer.append(("maxpool", tied))

    for _, m in nonsmooth_layers(model):
        hooks.append(m.register_forward_hook(relu_hook if is_relu(m) else pool_hook))
    return view, hooks


def program_grads(model: nn.Module, x, y, programs=("native", "minimal"), reduction: str = "mean",
                  view: bool = False, keep_masks: bool = False):
    """Flat float64 gradients of the loss for each program, from ONE forward pass.

    Returns ``(grads, loss, forward_view)``; ``forward_view`` is a :class:`ForwardView` when ``view``."""
    require_nonsmooth(model)
    params = [p for p in model.parameters() if p.requires_grad]
    fv, hooks = _view_hooks(model, keep_masks) if view else (None, [])
    try:
        loss = loss_fn(model(x), y, reduction)
    finally:
        for h in hooks:
            h.remove()
    grads = []
    for i, prog in enumerate(programs):
        with use_rule(prog):
            gs = torch.autograd.grad(loss, params, retain_graph=i < len(programs) - 1)
        grads.append(torch.cat([g.reshape(-1).to(torch.float64) for g in gs]))
    return grads, loss.detach(), fv


def variation(g1: torch.Tensor, g2: torch.Tensor, norm: float = 1) -> float:
    """|| g1 - g2 ||_norm in float64 (norm in {1, 2, inf})."""
    if norm not in (1, 2, math.inf, float("inf")):
        raise NsverifyError(f"norm must be 1 (eq 3.11), 2 or inf; got {norm!r}.")
    return float(torch.linalg.vector_norm(g1 - g2, ord=norm))


def backprop_variation(model, x, y, p="native", q="minimal", norm: float = 1, reduction: str = "mean") -> float:
    """D(P, Q) on one minibatch (eq 3.11 with explicit norm and reduction)."""
    (gp, gq), _, _ = program_grads(model, x, y, (p, q), reduction)
    return variation(gp, gq, norm)


def rerun_variation(model, x, y, program="native", norm: float = 1, reduction: str = "mean") -> float:
    """D(P, P~): the same program run twice, forward included (eq 3.12's inner term).  Zero on CPU (kernels
    are deterministic); non-zero only under nondeterministic kernels (GPU atomics)."""
    g = []
    for _ in range(2):
        (gp,), _, _ = program_grads(model, x, y, (program,), reduction)
        g.append(gp)
    return variation(g[0], g[1], norm)


@dataclass
class Thresholds:
    """tau1 (max run-to-run variation of one program) and tau2 (min non-zero D between ReLU'(0)=0 and 1)."""

    dtype: str
    tau1: float | None
    tau1_note: str
    tau2: float | None
    n_pairs: int
    n_nonzero_relu: int
    n_rerun_differ: int | None = None

    def as_dict(self):
        return dict(self.__dict__)


def thresholds(model_factory, batches, dtype: torch.dtype, device: torch.device | str = "cpu",
               norm: float = 1, reduction: str = "mean", tau1_program: str = "native",
               allow_slow: bool = False) -> Thresholds:
    """Measure tau1 (eq 3.12) and tau2 (eq 3.13) over ``batches`` (list of (x, y)) and fresh models.

    ``model_factory(i)`` returns the i-th parameter draw.  On CPU, tau1 is reported as None with the note
    'not measurable' (deterministic kernels make every rerun identical); tau2 is None when ReLU'(0)=0 and 1 never
    differed (no kink was hit in this dtype)."""
    device = torch.device(device)
    check_dtype_device(dtype, device, allow_slow)
    nondet = device.type == "cuda"
    d1, d2 = [], []
    for i, (x, y) in enumerate(batches):
        model = model_factory(i).to(device=device, dtype=dtype)
        x, y = x.to(device=device, dtype=dtype), y.to(device)
        (g0, g1), _, _ = program_grads(model, x, y, ("native", "relu1"), reduction)
        d2.append(variation(g0, g1, norm))
        if nondet:
            d1.append(rerun_variation(model, x, y, tau1_program, norm, reduction))
    nz = [d for d in d2 if d > 0]
    note = ("measured with nondeterministic CUDA kernels" if nondet else
            "not measurable on CPU: kernels are deterministic, reruns are bitwise identical (tau1 = 0)")
    return Thresholds(dtype_name(dtype), max(d1, default=0.0) if nondet else None, note, min(nz) if nz else None,
                      len(d2), len(nz), sum(d > 0 for d in d1) if nondet else None)


#: Boustany Table 3.4 (powers of ten); the values the paper used for the volume estimates (tau2 at 16 bits,
#: tau1 at 32 and 64 bits; Sec. 3.3.2 and Appendix 3.5.4).  bfloat16 is not in the paper.
PAPER_THRESHOLDS = {
    "lenet5": {"float16": 1e-5, "float32": 1e-6, "float64": 1e-14},
    "vgg11": {"float16": 1e-1, "float32": 1e-8, "float64": 1e-14},
    "vgg13": {"float16": 1e-1, "float32": 1e-9, "float64": 1e-14},
    "vgg16": {"float16": 1e-2, "float32": 1e-10, "float64": 1e-15},
    "vgg19": {"float16": 1e-3, "float32": 1e-11, "float64": 1e-15},
    "resnet18": {"float16": 1.0, "float32": 1e-3, "float64": 1e-13},
}


def threshold_for(thresholds_map: dict, dtype: torch.dtype | str) -> float:
    name = dtype if isinstance(dtype, str) else dtype_name(dtype)
    if name not in thresholds_map or thresholds_map[name] is None:
        raise MissingThresholdError(
            f"no threshold tau given for {name}: a pair (draw, batch) is 'impacted' when D > tau, and tau "
            f"depends on the precision. Pass thresholds={{'{name}': tau, ...}} (CLI: --tau {name}=1e-8), measure "
            f"one with nsverify.papers.zones.measure.thresholds(...), or start from Boustany Table 3.4 "
            f"(nsverify.papers.zones.measure.PAPER_THRESHOLDS).")
    return float(thresholds_map[name])
