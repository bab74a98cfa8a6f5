"""What every nsverify benchmark shares: the dtype x device axes, device synchronisation and the workloads.

One file per area sits next to this one (``ad_ops``, ``costs``, ``optim``, ``oracle``, ``report``, ``zones``);
each holds only asv classes and builds its inputs here.  ``asv_bench/ratios.py`` measures the side-by-side
ratios from the same workloads.  Timing goes through the library's one helper (:mod:`nsverify.devices`).

Axes (classic asv ``params``)::

    from .common import DtypeDevice, sync

    class ReluBackward(DtypeDevice):
        params = DtypeDevice.params + [[1_000, 1_000_000]]      # extra axes go after dtype, device
        param_names = DtypeDevice.param_names + ["n"]

        def setup(self, dtype, device, n):
            super().setup(dtype, device)           # sets self.dtype, self.device (torch objects)
            self.x = torch.zeros(n, dtype=self.dtype, device=self.device, requires_grad=True)

        def time_backward(self, dtype, device, n):
            torch.relu(self.x).sum().backward()
            sync(self.device)                      # wait for CUDA before the timer stops

Impossible combinations raise ``NotImplementedError`` in ``setup``, which asv records as skipped ("n/a"):
CUDA without a GPU, float16 on CPU (very slow there: use bfloat16), bfloat16 on a GPU without bf16 support.
Classes without dtype/device params call :func:`resolve` directly.

asv treats every module-level function or class method named ``time_*``, ``track_*``, ``mem_*`` or
``peakmem_*`` as a benchmark, so this module and the area files import the timing helpers as the module
``devices`` (``devices.time_call``), never by name.

No relative imports here: tests and ``ratios.py`` load this file on its own.
"""
from __future__ import annotations

import contextlib
import copy

import torch
import torch.nn.functional as F

from nsverify import ad, devices, kernels
from nsverify.devices import parse_device, parse_dtype
from nsverify.errors import DeviceUnavailableError
from nsverify.papers.cases import kink_net  # noqa: F401 - the oracle's pruning program, also the report's

# ---------------------------------------------------------------------------------------------------------------
# Axes and synchronisation

DTYPES = ["float32", "float64", "bfloat16", "float16"]
DEVICES = ["cpu", "cuda"]

#: Block until queued CUDA work is done (no-op on CPU); call it at the end of every timed CUDA body.
sync = devices.synchronize


def resolve(dtype: str, device: str, allow_cpu_float16: bool = False):
    """``(torch.dtype, torch.device)`` for the axis values; ``NotImplementedError`` if impossible here.

    A misspelt dtype raises nsverify's ``UnsupportedDtypeError``: that is a bug in the benchmark, not a skip.
    """
    try:
        dev = parse_device(device)
    except DeviceUnavailableError as exc:
        raise NotImplementedError(f"skipped: {exc}") from exc
    dt = parse_dtype(dtype)
    if dt == torch.float16 and dev.type == "cpu" and not allow_cpu_float16:
        raise NotImplementedError("skipped: float16 on CPU is emulated and very slow; "
                                  "benchmark bfloat16 on CPU")
    if dt == torch.bfloat16 and dev.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise NotImplementedError(f"skipped: {torch.cuda.get_device_name(dev)} has no bfloat16 support")
    return dt, dev


class DtypeDevice:
    """Base class giving a benchmark the dtype x device axes; subclasses add time_*/track_* methods."""

    params = [list(DTYPES), list(DEVICES)]
    param_names = ["dtype", "device"]

    def setup(self, dtype, device, *rest):
        self.dtype, self.device = resolve(dtype, device)


# ---------------------------------------------------------------------------------------------------------------
# AD-variant ops against native PyTorch (ad_ops)

#: The tie-aware max-pool size of the redesign issues: batch 128, 64 channels, 32x32.
AD_SHAPE = (128, 64, 32, 32)
SMALL_AD_SHAPE = (8, 8, 16, 16)

AD_OPS = {
    "relu": lambda x: torch.relu(x),
    "relu_s": lambda x: ad.relu_s(x, 0.5),
    "max_pool2d": lambda x: F.max_pool2d(x, 2),
    "maxpool_native": lambda x: ad.max_pool2d(x, 2, rule="first"),
    "maxpool_minimal": lambda x: ad.max_pool2d(x, 2, rule="even"),
    "maxpool_hybrid": lambda x: ad.max_pool2d(x, 2, rule="hybrid=0.5"),
    "maxpool_minimal_overlap": lambda x: ad.max_pool2d(x, 3, stride=2, padding=1, rule="even"),
    "maxpool_hybrid_overlap": lambda x: ad.max_pool2d(x, 3, stride=2, padding=1, rule="hybrid=0.5"),
    "max_pool2d_overlap": lambda x: F.max_pool2d(x, 3, stride=2, padding=1),
}
#: the same ops with the backward forced to the pure-PyTorch reference (nsverify.kernels mode "reference"): the
#: path every fused kernel is checked against, and the fallback where no compiler is present
REFERENCE = "@reference"
REFERENCE_OPS = [f"{op}{REFERENCE}" for op in ("maxpool_minimal", "maxpool_hybrid")]


def pool_input(dtype=torch.float32, shape=AD_SHAPE, ties: bool = False, device="cpu") -> torch.Tensor:
    """A leaf tensor for the ops above; ``ties``: small integers 0..2, so most 2x2 windows hold a tie."""
    gen = torch.Generator().manual_seed(0)
    if ties:
        x = torch.randint(0, 3, shape, generator=gen).to(dtype)
    else:
        x = torch.randn(shape, generator=gen).to(dtype)
    return x.to(device).requires_grad_()


def fwd_bwd(op: str, x: torch.Tensor) -> torch.Tensor:
    """Forward and backward of ``AD_OPS[op]`` (incoming gradient of ones); returns the input gradient.

    ``op`` may end in ``@reference``: the same op with the pure-PyTorch reference backward."""
    base, ref, _ = op.partition(REFERENCE)
    with kernels.use("reference") if ref else contextlib.nullcontext():
        y = AD_OPS[base](x)
        (g,) = torch.autograd.grad(y, x, torch.ones_like(y))
    return g


def pool_backend(device) -> str:
    """Which backward the minimal/hybrid max pools use on ``device`` (builds the CPU kernel if needed)."""
    x = torch.zeros(1, 1, 2, 2, device=device, requires_grad=True)
    fwd_bwd("maxpool_minimal", x)
    st = kernels.status()
    if torch.device(device).type == "cpu":
        cpu = st["cpu"] or {}
        return "fused C++" if cpu.get("ok") else f"reference ({cpu.get('error')})"
    cuda = st["cuda"] or {}
    return "Triton" if cuda.get("triton") else f"reference ({cuda.get('error')})"


# ---------------------------------------------------------------------------------------------------------------
# Park et al.'s training monitor against plain training steps (monitor)

#: the overhead workloads (nsverify.papers.park.overhead): reduced-width VGG11 / ResNet18, natural crops, batch 64
MONITOR_MODELS = ("vgg11", "resnet18")


def monitor_steps(model_name: str, dtype=torch.float32, device="cpu", small: bool = False, steps: int = 4,
                  width: float | None = None):
    """A :class:`nsverify.papers.park.overhead.TrainingSteps` (``.plain()``, ``.monitored()``, ``.records``):
    batch 64 at ``width`` (default: the model's reduced width); ``small``: batch 8, width 1/16 (checks that the
    case runs)."""
    from nsverify.papers.park.overhead import TrainingSteps

    if small:
        return TrainingSteps(model_name, steps, width=1 / 16, batch=8, device=device, dtype=dtype)
    return TrainingSteps(model_name, steps, width=width, device=device, dtype=dtype)


# ---------------------------------------------------------------------------------------------------------------
# (forward+backward)/forward of ReLU networks (costs; Boustany Ch.2)


def costs_mlp(depth: int, width: int, dtype, device):
    """``(model, x)``: a 784-(width x depth)-10 ReLU MLP; batch 1024 on CUDA, 64 on CPU."""
    from nsverify.papers.costs.measure import mlp

    torch.manual_seed(0)
    batch = 1024 if device.type == "cuda" else 64
    model = mlp([784] + [width] * depth + [10]).to(device, dtype)
    return model, torch.randn(batch, 784, device=device, dtype=dtype)


def costs_vgg11(width_mult: float, dtype, device):
    """``(model, x)``: CIFAR-style VGG11 at ``width_mult``; batch 128 on CUDA, 8 on CPU."""
    from nsverify.papers.costs.measure import vgg11

    torch.manual_seed(0)
    batch = 128 if device.type == "cuda" else 8
    model = vgg11(width_mult).to(device, dtype)
    return model, torch.randn(batch, 3, 32, 32, device=device, dtype=dtype)


# ---------------------------------------------------------------------------------------------------------------
# The exact oracle (oracle)


def separable_program(k: int = 10):
    """``(fn, w)``: f(w) = sum_i a_i relu(w_i) + b_i w_i at w = 0, one kink per coordinate: 2^k genuine pieces,
    whose Clarke set is the box prod_i [b_i, a_i + b_i].  The oracle's separable blocks decide it with about
    2k traces; ``check_gradient(..., shortcuts=False)`` enumerates all 2^k pieces."""
    a = torch.tensor([1.0 + (i % 3) / 4 for i in range(k)], dtype=torch.float64)
    b = torch.tensor([(i % 5 - 2) / 8 for i in range(k)], dtype=torch.float64)

    def fn(w):
        return (a * torch.relu(w)).sum() + (b * w).sum()

    return fn, torch.zeros(k, dtype=torch.float64)


_FIRST_CALL = """
import sys, time
import torch
{pre}
t0 = time.perf_counter()
import nsverify
v = nsverify.check_gradient(lambda w: torch.relu(w).sum() + torch.abs(w[0] - w[1]),
                            torch.zeros(2, dtype=torch.float64), ad=[0.5, 0.25], progress=False)
assert v.status == "member", v.status
print(time.perf_counter() - t0)
"""

_TORCH_FLOOR = """
import time
import torch
t0 = time.perf_counter()
import torch.distributed.tensor  # what torch imports on the first __torch_dispatch__ of any tensor subclass
print(time.perf_counter() - t0)
"""


_BYTECODE: list = []


def _python(code: str) -> float:
    """Run ``code`` in a fresh interpreter and return the float it prints last.  Bytecode is cached as after an
    install (the first run writes it, even where PYTHONDONTWRITEBYTECODE is set): a first call must not be
    charged for compiling nsverify's sources."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = str(root) + os.pathsep + os.environ.get("PYTHONPATH", "")
    runs = 1 if _BYTECODE else 2  # the first run of the process writes the bytecode
    _BYTECODE.append(True)
    for _ in range(runs):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def first_call_seconds(own_only: bool = False) -> float:
    """Seconds from ``import nsverify`` to the end of the first ``check_gradient`` (a kink, a coupled abs, an LP
    for the convex weights) in a fresh interpreter where torch is already imported.  ``own_only``: with
    ``torch.distributed.tensor`` imported beforehand, i.e. without torch's own one-time cost of the first
    tensor-subclass dispatch (torch 2.13 imports DTensor there, with sympy: most of a cold first call)."""
    return _python(_FIRST_CALL.format(pre="import torch.distributed.tensor" if own_only else ""))


def torch_dispatch_floor_seconds() -> float:
    """torch's one-time cost on the first ``__torch_dispatch__`` in a process (its import of DTensor), measured
    in a fresh interpreter: the part of a cold first oracle call that nsverify cannot remove."""
    return _python(_TORCH_FLOOR)


#: multiply-accumulates of :func:`lenet_forward`'s network on one 28x28 image
LENET_MACS = 6 * 28 * 28 * 25 + 16 * 10 * 10 * 150 + 400 * 120 + 120 * 84 + 84 * 10


def lenet_forward():
    """``(net, x)``: a LeNet-5-sized network (conv 6@5x5, pool, conv 16@5x5, pool, 120, 84, 10) and one
    28x28 image with padding 2, all dyadic, for the exact interpreter's throughput (no derivative tracking)."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(1, 6, 5, padding=2), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(6, 16, 5), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Flatten(),
        torch.nn.Linear(400, 120), torch.nn.ReLU(),
        torch.nn.Linear(120, 84), torch.nn.ReLU(),
        torch.nn.Linear(84, 10),
    ).double()
    with torch.no_grad():
        for p in net.parameters():  # dyadic weights keep the rationals short
            p.copy_(torch.round(p * 64) / 64)
    x = torch.round(torch.rand(1, 1, 28, 28, dtype=torch.float64) * 16) / 16
    return net, x


def lenet_tie(batch: int = 2):
    """``(model, loss_fn, inputs, targets)``: :func:`lenet_forward`'s network with exact ties in its parameters.

    Zero-initialised units sit exactly at their kink on every input: conv1's channel 0 (all 784 positions per
    image, so every one of its 196 pooling windows ties 4 ways at 0), conv2's channel 3 (100 positions, 25 tied
    windows), fc1's units 5 and 7 and fc2's unit 11 (one kink per image each).  MSE loss against one-hot targets,
    checked with respect to all 61,706 parameters (``check_module``'s default)."""
    net, _ = lenet_forward()
    with torch.no_grad():
        for layer, unit in ((0, 0), (3, 3), (7, 5), (7, 7), (9, 11)):
            net[layer].weight[unit] = 0.0
            net[layer].bias[unit] = 0.0
    g = torch.Generator().manual_seed(1)
    x = torch.round(torch.rand(batch, 1, 28, 28, generator=g, dtype=torch.float64) * 16) / 16
    y = torch.zeros(batch, 10, dtype=torch.float64)
    y[torch.arange(batch), torch.arange(batch) % 10] = 1.0
    return net, torch.nn.functional.mse_loss, x, y


def pool_plateau_ties(channels: int = 2, seed: int = 0):
    """``(model, loss_fn, inputs, targets)``: issue 23's scale target (c) -- a conv (3x3) -> ReLU -> 2x2 max pool ->
    linear net on an 8x8 plateau input: each channel's 9 pooling windows tie 4 ways (4^9 tie patterns per channel),
    the corner window aside; weights on a 1/8 grid, cross-entropy loss."""
    nn = torch.nn
    torch.manual_seed(seed)
    net = nn.Sequential(nn.Conv2d(1, channels, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                        nn.Linear(channels * 9, 3)).double()
    with torch.no_grad():
        for p in net.parameters():
            p.copy_(torch.round(p * 8) / 8)
        net[0].bias.fill_(0.25)
    x = torch.ones(1, 1, 8, 8, dtype=torch.float64)
    x[0, 0, 0, 0] = 2.0
    return net, torch.nn.functional.cross_entropy, x, torch.tensor([1])


def resnet_tie(width: float = 0.125, batch: int = 2, seed: int = 0, loss: str = "mse"):
    """``(model, loss_fn, inputs, targets)``: issue 23's scale target (a) -- nsverify.workloads' ResNet18 (BasicBlocks,
    BatchNorm in eval mode, a max-pool stem; width 0.125 gives channels 8-16-32-64, 176,402 parameters) with
    torch's own ReLU/MaxPool modules, weights on a 1/8 grid, every BatchNorm exact (eps = 2^-10, running variance
    1 - 2^-10: sqrt(var + eps) = 1; running means on a 1/8 grid), one dead stem channel (zero weights, beta = -1),
    integer inputs in [-2, 2] (batch x 3 x 32 x 32).  ``loss``: "mse" against one-hot targets (the exact AD stays
    rational) or "cross_entropy" (softmax makes it irrational: the backward pass runs in interval arithmetic)."""
    from nsverify.workloads.models import ResNet18, plain_layers

    torch.manual_seed(seed)
    net = plain_layers(ResNet18(width)).double().eval()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in net.parameters():
            p.copy_(torch.round(torch.randn(p.shape, generator=g, dtype=torch.float64) * 2) / 8)
        for m in net.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.eps = 2.0 ** -10
                m.running_var.fill_(1 - 2.0 ** -10)
                m.running_mean.copy_(torch.round(torch.randn(m.num_features, generator=g, dtype=torch.float64)) / 8)
        net.stem[0].weight[0] = 0.0
        net.stem[1].running_mean[0] = 0.0
        net.stem[1].bias[0] = -1.0
    x = torch.randint(-2, 3, (batch, 3, 32, 32), generator=g).double()
    y = torch.arange(batch) % 10
    if loss == "cross_entropy":
        return net, torch.nn.functional.cross_entropy, x, y
    onehot = torch.zeros(batch, 10, dtype=torch.float64)
    onehot[torch.arange(batch), y] = 1.0
    return net, torch.nn.functional.mse_loss, x, onehot


def transformer_tie(d: int = 16, blocks: int = 2, batch: int = 2, tokens: int = 8, seed: int = 0,
                    loss: str = "cross_entropy"):
    """``(model, loss_fn, inputs, targets)``: issue 23's scale target (b) -- a 2-block pre-norm transformer encoder
    (:class:`nsverify.workloads.models.PreNormTransformer`: d = 16, 2 heads, GELU MLPs, LayerNorm with its default
    eps, so every value behind a norm is irrational), weights on a 1/8 grid, integer inputs in [-2, 2]
    (batch x tokens x d), and one head unit exactly at its ReLU kink for every sample (zero weights and bias).
    ``loss``: "cross_entropy" or "mse" (against one-hot targets)."""
    from nsverify.workloads.models import PreNormTransformer

    torch.manual_seed(seed)
    net = PreNormTransformer(d, 2, blocks).double().eval()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in net.parameters():
            p.copy_(torch.round(torch.randn(p.shape, generator=g, dtype=torch.float64) * 2) / 8)
        net.head[0].weight[0] = 0.0
        net.head[0].bias[0] = 0.0
    x = torch.randint(-2, 3, (batch, tokens, d), generator=g).double()
    y = torch.arange(batch) % 10
    if loss == "cross_entropy":
        return net, torch.nn.functional.cross_entropy, x, y
    onehot = torch.zeros(batch, 10, dtype=torch.float64)
    onehot[torch.arange(batch), y] = 1.0
    return net, torch.nn.functional.mse_loss, x, onehot


# ---------------------------------------------------------------------------------------------------------------
# Reports of many metrics (report)


def synthetic_report(n: int, shift: float = 0.0) -> dict:
    """A valid run report with ``n`` metrics of the four compared kinds; ``shift`` moves every value."""
    metrics = []
    for i in range(n):
        kind = ("convention", "share", "convergence", "bench_ratio")[i % 4]
        m = {"key": f"m{i}", "kind": kind, "value": 0.5 + shift}
        if kind == "share":
            m.update(lo=0.4 + shift, hi=0.6 + shift)
        elif kind == "convergence":
            m["spread"] = 0.01
        metrics.append(m)
    return {"schema": "nsverify.report/1", "kind": "run", "created": f"2026-01-0{1 + int(shift * 10)}",
            "quick": True, "machine": {"machine_id": "bench"}, "regressions": [],
            "sections": {"s": {"title": "S", "status": "ok", "data": {"metrics": metrics}}}}


# ---------------------------------------------------------------------------------------------------------------
# Backprop variation D(P, Q) of the zones estimator (zones; Boustany Ch.3)

#: model -> (dataset, width multiplier, batch)
ZONE_WORKLOADS = {"lenet5": ("digits28", 1.0, 64), "vgg11": ("plateaus", 0.125, 32)}
ZONE_PROGRAMS = ("native", "minimal")


def zone_workload(model_name: str, dtype=torch.float32, device="cpu", batch: int | None = None, seed: int = 0):
    """``(model, x, y)``: a :data:`ZONE_WORKLOADS` model and one minibatch (``batch`` overrides its size)."""
    from nsverify.workloads.datasets import get_dataset
    from nsverify.workloads.models import build_model

    dataset, width, default_batch = ZONE_WORKLOADS[model_name]
    batch = batch or default_batch
    x, y = get_dataset(dataset, n=batch, seed=seed)
    torch.manual_seed(seed)
    model = build_model(model_name, width).to(device=device, dtype=dtype)
    return model, x[:batch].to(device, dtype), y[:batch].to(device)


def d_one_forward(model, x, y, programs=ZONE_PROGRAMS) -> float:
    """The estimator's way: one forward pass, one backward pass per program (Boustany eq. 3.11, 1-norm)."""
    from nsverify.papers.zones.measure import backprop_variation

    return backprop_variation(model, x, y, *programs)


def two_models(model):
    """The naive way's model pair: the model and a deep copy, one per program."""
    return model, copy.deepcopy(model)


def d_two_models(models, x, y, programs=ZONE_PROGRAMS) -> float:
    """The naive way: each program runs its own model copy, forward and backward."""
    from nsverify.papers.zones.measure import loss_fn, variation
    from nsverify.papers.zones.rules import use_rule

    grads = []
    for model, prog in zip(models, programs):
        loss = loss_fn(model(x), y)
        with use_rule(prog):
            gs = torch.autograd.grad(loss, list(model.parameters()))
        grads.append(torch.cat([g.reshape(-1).double() for g in gs]))
    return variation(grads[0], grads[1])
