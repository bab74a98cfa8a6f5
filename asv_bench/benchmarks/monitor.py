"""Park et al.'s training monitor (nsverify.papers.park.monitor) against plain training steps.

VGG11 and ResNet18 at reduced width (``nsverify.papers.park.overhead.OVERHEAD_MODELS``), natural-image crops,
batch 64, SGD: one training step (forward, backward, optimizer step) without the monitor, and one with it
(forward, ``Monitor.check()``, backward, step). Target (issue 15): monitored / plain <= 1.2x on CPU (Park et al.,
App. J.2: 1.77x). ``python asv_bench/ratios.py --area monitor`` measures the ratio side by side in one run and
prints the tied windows per step; ``nsverify.papers.park.overhead.monitor_overhead`` reports it per tie count.
"""
from .common import DEVICES, MONITOR_MODELS, DtypeDevice, monitor_steps, sync


class MonitorStep(DtypeDevice):
    params = [["float32"], list(DEVICES), list(MONITOR_MODELS), ["plain", "monitored"]]
    param_names = DtypeDevice.param_names + ["model", "step"]
    timeout = 600

    def setup(self, dtype, device, model, step):
        super().setup(dtype, device)
        self.run = monitor_steps(model, self.dtype, self.device)
        self.run.plain()  # warm-up (and the fused kernels' first use) outside the timing
        self.run.monitored()

    def teardown(self, dtype, device, model, step):
        self.run.close()

    def time_step(self, dtype, device, model, step):
        getattr(self.run, step)()
        sync(self.device)
