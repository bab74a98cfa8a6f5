"""nsverify.optim: INNAprop step time against AdamW (both foreach), state bytes per parameter.

Targets: INNAprop time per step <= 1.15x AdamW's at 1e4, 1e6 and 1e7 parameters; state bytes per parameter
equal to AdamW's (track_ value, 8.0 bytes in float32 plus the scalar step counters).  The optimizers come
from :func:`nsverify.papers.innaprop.checks.bench_optimizer`, which the report's optim section times too.
"""
from .common import DEVICES, DtypeDevice, sync


class OptimizerStep(DtypeDevice):
    params = [["float32", "bfloat16"], list(DEVICES), ["adamw", "innaprop"], [10_000, 1_000_000, 10_000_000]]
    param_names = DtypeDevice.param_names + ["optimizer", "n_params"]
    timeout = 240

    def setup(self, dtype, device, kind, n):
        from nsverify.papers.innaprop.checks import bench_optimizer

        super().setup(dtype, device)
        self.opt = bench_optimizer(kind, n, self.dtype, self.device)

    def time_step(self, dtype, device, kind, n):
        self.opt.step()
        sync(self.device)


class StateBytes:
    params = (["adamw", "innaprop"],)
    param_names = ["optimizer"]

    def setup(self, kind):
        from nsverify.papers.innaprop.checks import bench_optimizer

        self.opt = bench_optimizer(kind, 10_000)

    def track_state_bytes_per_param(self, kind):
        from nsverify.papers.innaprop.checks import state_bytes_per_param

        return state_bytes_per_param(self.opt)

    track_state_bytes_per_param.unit = "bytes"
