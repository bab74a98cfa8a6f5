"""Forward+backward time of the AD-variant ops against their native PyTorch counterparts.

Input: a 128x64x32x32 tensor (``common.AD_SHAPE``), float32 and bfloat16, on every available device; random
normal data, and plateau data (many ties) where the minimal/hybrid backward does real work.  Target: minimal
max-pool <= 1.5x ``F.max_pool2d``.  ``python asv_bench/ratios.py --area ad_ops`` measures the ratios side by
side in one run.
"""
from .common import AD_OPS, DEVICES, DtypeDevice, fwd_bwd, pool_input, sync


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
    """The same on plateau data (many ties): the minimal/hybrid backward does real work there."""

    params = [["float32"], list(DEVICES), ["max_pool2d", "maxpool_minimal", "maxpool_hybrid"]]
    param_names = DtypeDevice.param_names + ["op"]
    timeout = 300

    def setup(self, dtype, device, op):
        super().setup(dtype, device)
        self.x = pool_input(self.dtype, ties=True, device=self.device)

    def time_fwd_bwd(self, dtype, device, op):
        fwd_bwd(op, self.x)
        sync(self.device)
