"""16-bit arithmetic made explicit: the affine layers round their product to the dtype, then add the bias in the
dtype.

Why: on CPU, PyTorch's bfloat16/float16 ``Linear`` is one ``addmm`` that adds the bias inside a float32
accumulation and rounds once (and CPU convolutions fuse the bias the same way). A pre-activation is then exactly 0
only when the float32 sum rounds to 0, which is as rare as in float32, so a CPU run shows no 16-bit kinks. A
16-bit computation that rounds the product before adding the bias (two roundings, as when the bias is a separate
16-bit op) hits exact zeros whenever the rounded product equals minus the bias. :func:`split_bias` makes every
``nn.Linear``/``nn.Conv2d`` of a model compute that way; :func:`kernel_path` names the path a run used, and the
reports print it next to every 16-bit result.

The split-bias ``Linear`` forms its 16-bit product explicitly: operands upcast to float32 (exact), one float32
matrix product, one rounding to the dtype (:func:`rounded_matmul_linear`), in the forward and, through autograd,
in both backward products. That is the arithmetic of PyTorch's CPU 16-bit GEMM (float32 accumulation, one
rounding), up to summation order, and it avoids a slow CPU kernel: on torch 2.13 (CPU build, 2 cores, no AVX512-BF16)
a bfloat16 ``grad @ W`` of shape 128x2048 @ 2048x2048 took 4.0 s against 0.014 s in float32, which made one
backward pass of the full-width Bertoin MLP take 8 s.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

FUSED = "fused bias (addmm / conv with bias: float32 accumulation, one rounding)"
SPLIT = "split bias (product rounded to the dtype, then bias added in the dtype: 16-bit emulation)"
NATIVE_WIDE = "native (float32/float64: one accumulation in the dtype)"
SIXTEEN = (torch.float16, torch.bfloat16)


def rounded_matmul_linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``x @ weight.T`` for 16-bit operands as float32 accumulation rounded once to the dtype (differentiable:
    the backward products are formed the same way); other dtypes use ``F.linear`` unchanged."""
    if x.dtype not in SIXTEEN:
        return F.linear(x, weight)
    return F.linear(x.float(), weight.float()).to(x.dtype)


class SplitBiasLinear(nn.Linear):
    """``nn.Linear`` whose forward is ``x @ W.T`` (rounded to the dtype) ``+ b`` (added in the dtype)."""

    def forward(self, x):
        out = rounded_matmul_linear(x, self.weight)
        return out if self.bias is None else out + self.bias


class SplitBiasConv2d(nn.Conv2d):
    """``nn.Conv2d`` whose forward convolves without the bias (rounded to the dtype), then adds the bias."""

    def forward(self, x):
        out = self._conv_forward(x, self.weight, None)
        return out if self.bias is None else out + self.bias.view(1, -1, 1, 1)


def split_bias(model: nn.Module) -> nn.Module:
    """Turn every ``nn.Linear`` / ``nn.Conv2d`` of ``model`` (in place, parameters kept) into its split-bias
    form; returns the model. A no-op for layers without a bias."""
    for m in model.modules():
        if type(m) is nn.Linear:
            m.__class__ = SplitBiasLinear
        elif type(m) is nn.Conv2d:
            m.__class__ = SplitBiasConv2d
    return model


def is_split(model: nn.Module) -> bool:
    return any(isinstance(m, (SplitBiasLinear, SplitBiasConv2d)) for m in model.modules())


def kernel_path(model: nn.Module, dtype: torch.dtype) -> str:
    """Which arithmetic the affine layers of ``model`` use in ``dtype`` (a report label)."""
    if dtype not in SIXTEEN:
        return NATIVE_WIDE
    return SPLIT if is_split(model) else FUSED


def prepare(model: nn.Module, dtype: torch.dtype, emulate16: bool = True) -> tuple[nn.Module, str]:
    """``model`` cast to ``dtype``, with split biases when ``dtype`` is 16-bit and ``emulate16``; and its kernel
    path label."""
    if emulate16 and dtype in SIXTEEN:
        split_bias(model)
    model = model.to(dtype)
    return model, kernel_path(model, dtype)
