"""Zone estimator throughput: one forward + two backward passes vs two model copies (target >= 1.3x)."""
from __future__ import annotations

from ._axes import DtypeDevice, sync


class BackpropVariation(DtypeDevice):
    """Samples/s of computing D(P, Q) for one minibatch; ``method`` one_forward (the estimator) or two_models."""

    params = DtypeDevice.params + [["lenet5", "vgg11"], ["one_forward", "two_models"]]
    param_names = DtypeDevice.param_names + ["model", "method"]
    timeout = 120

    def setup(self, dtype, device, model, method):
        super().setup(dtype, device)
        from nsverify.papers.zones import bench as bench

        self.bench = bench
        self.model, self.x, self.y = bench.setup_workload(model, self.dtype, self.device)
        self.models = bench.make_two_models(self.model)

    def time_variation(self, dtype, device, model, method):
        if method == "one_forward":
            self.bench.d_one_forward(self.model, self.x, self.y)
        else:
            self.bench.d_two_models(self.models, self.x, self.y)
        sync(self.device)
