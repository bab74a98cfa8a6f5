"""Forward+backward time of the AD-variant ops against their native PyTorch counterparts.

Input: a 128x64x32x32 tensor (``common.AD_SHAPE``), float32 and bfloat16, on every available device; random
normal data, and plateau data (small integers: most 2x2 windows tie) where the minimal/hybrid backward does real
work. The minimal/hybrid max pools run the fused kernel of the device (C++ on CPU, Triton on CUDA;
:mod:`nsverify.kernels`); ``<op>@reference`` forces the pure-PyTorch reference backward. Targets (issue 15):
minimal and hybrid max-pool forward+backward <= 1.5x ``F.max_pool2d``'s on CPU, <= 1.2x on a GPU, on plateau
data. ``python asv_bench/ratios.py --area ad_ops`` measures the ratios side by side in one run.
"""
from .common import AD_OPS, DEVICES, REFERENCE_OPS, DtypeDevice, fwd_bwd, pool_input, sync


class ADOps(DtypeDevice):
    params = [["float32", "bfloat16"], list(DEVICES), list(AD_OPS)]
    param_names = DtypeDevice.param_names + ["op"]
    timeout = 300

    def setup(self, dtype, device, op):
        super().setup(dtype, device)
        self.x = pool_input(self.dtype, device=self.device)

    def time_fwd_bwd(self, dtype, device, op):
        fwd_bwd(op, self.x)
        sync(self.device)


class ADOpsTies(DtypeDevice):
    """Plateau data (many ties): the minimal/hybrid backward does real work there; fused kernel and reference."""

    params = [["float32", "bfloat16"], list(DEVICES),
              ["max_pool2d", "maxpool_minimal", "maxpool_hybrid", "max_pool2d_overlap", "maxpool_minimal_overlap",
               "maxpool_hybrid_overlap"] + REFERENCE_OPS]
    param_names = DtypeDevice.param_names + ["op"]
    timeout = 300

    def setup(self, dtype, device, op):
        super().setup(dtype, device)
        self.x = pool_input(self.dtype, ties=True, device=self.device)
        fwd_bwd(op, self.x)  # the first minimal/hybrid backward builds (or loads) the fused kernel: not timed

    def time_fwd_bwd(self, dtype, device, op):
        fwd_bwd(op, self.x)
        sync(self.device)
