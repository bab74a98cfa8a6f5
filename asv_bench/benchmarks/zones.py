"""Zone estimator throughput: one forward + two backward passes vs two model copies (target >= 1.3x).

``python asv_bench/ratios.py --area zones`` measures the ratio side by side in one run.
"""
from __future__ import annotations

from .common import DtypeDevice, d_one_forward, d_two_models, sync, two_models, zone_workload


class BackpropVariation(DtypeDevice):
    """Time of computing D(P, Q) for one minibatch; ``method`` one_forward (the estimator) or two_models."""

    params = DtypeDevice.params + [["lenet5", "vgg11"], ["one_forward", "two_models"]]
    param_names = DtypeDevice.param_names + ["model", "method"]
    timeout = 120

    def setup(self, dtype, device, model, method):
        super().setup(dtype, device)
        self.model, self.x, self.y = zone_workload(model, self.dtype, self.device)
        self.models = two_models(self.model)

    def time_variation(self, dtype, device, model, method):
        if method == "one_forward":
            d_one_forward(self.model, self.x, self.y)
        else:
            d_two_models(self.models, self.x, self.y)
        sync(self.device)
