"""Benchmarks of nsverify.optim: INNAprop step time against AdamW (both foreach), state bytes per parameter.

Targets: INNAprop time per step <= 1.15x AdamW's at 1e4, 1e6 and 1e7 parameters; state bytes per parameter
equal to AdamW's (track_ value, 8.0 bytes in float32 plus the scalar step counters).
"""
from nsverify.papers.innaprop.checks import bench_optimizer, state_bytes_per_param


class OptimizerStep:
    params = (["adamw", "innaprop"], [10_000, 1_000_000, 10_000_000])
    param_names = ["optimizer", "n_params"]
    timeout = 240

    def setup(self, kind, n):
        self.opt = bench_optimizer(kind, n)

    def time_step(self, kind, n):
        self.opt.step()


class StateBytes:
    params = (["adamw", "innaprop"],)
    param_names = ["optimizer"]

    def setup(self, kind):
        self.opt = bench_optimizer(kind, 10_000)

    def track_state_bytes_per_param(self, kind):
        return state_bytes_per_param(self.opt)

    track_state_bytes_per_param.unit = "bytes"
