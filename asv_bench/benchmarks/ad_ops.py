"""Forward+backward time of the AD-variant ops against their native PyTorch counterparts (CPU).

Input: a 128x64x32x32 tensor (the issue's size), float32 and bfloat16.  Target: minimal maxpool <= 1.5x
F.max_pool2d.  ``python3 scripts/bench_ad_ops.py`` measures the ratios side by side once.
"""
import torch
import torch.nn.functional as F

from nsverify import ad

SHAPE = (128, 64, 32, 32)


def _inputs(dtype, shape=SHAPE, ties=False):
    gen = torch.Generator().manual_seed(0)
    if ties:  # plateau data: small integers give many ties per 2x2 window
        x = torch.randint(0, 3, shape, generator=gen).to(dtype)
    else:
        x = torch.randn(shape, generator=gen).to(dtype)
    return x.requires_grad_()


OPS = {
    "relu": lambda x: torch.relu(x),
    "relu_s": lambda x: ad.relu_s(x, 0.5),
    "max_pool2d": lambda x: F.max_pool2d(x, 2),
    "maxpool_native": lambda x: ad.max_pool2d(x, 2, rule="first"),
    "maxpool_minimal": lambda x: ad.max_pool2d(x, 2, rule="even"),
    "maxpool_hybrid": lambda x: ad.max_pool2d(x, 2, rule="hybrid=0.5"),
    "maxpool_minimal_overlap": lambda x: ad.max_pool2d(x, 3, stride=2, padding=1, rule="even"),
    "max_pool2d_overlap": lambda x: F.max_pool2d(x, 3, stride=2, padding=1),
}


def fwd_bwd(op, x):
    y = OPS[op](x)
    (g,) = torch.autograd.grad(y, x, torch.ones_like(y))
    return g


class ADOps:
    params = (list(OPS), ["float32", "bfloat16"])
    param_names = ["op", "dtype"]
    timeout = 300

    def setup(self, op, dtype):
        self.x = _inputs(getattr(torch, dtype))

    def time_fwd_bwd(self, op, dtype):
        fwd_bwd(op, self.x)


class ADOpsTies:
    """The same on plateau data (many ties): the minimal/hybrid backward does real work there."""

    params = (["max_pool2d", "maxpool_minimal", "maxpool_hybrid"], ["float32"])
    param_names = ["op", "dtype"]
    timeout = 300

    def setup(self, op, dtype):
        self.x = _inputs(getattr(torch, dtype), ties=True)

    def time_fwd_bwd(self, op, dtype):
        fwd_bwd(op, self.x)
