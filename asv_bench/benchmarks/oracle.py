"""The exact Clarke oracle (nsverify.oracle).

* ``KinkNet``: a one-hidden-layer ReLU network (2-4-1, MSE loss), gradient with respect to its first-layer
  parameters (12 coordinates), with k = 1..16 simultaneous kink sites (a zero-initialised hidden unit sitting
  exactly at its kink on all k samples of the batch).  ``time_verdict``: one full ``check_gradient`` call;
  ``track_lps``: LPs solved by the pruned enumeration; ``track_naive_lps``: 2^k, the LPs of naive
  enumeration (one per sign pattern); ``track_lp_ratio``: naive / pruned.
  Targets: median <= 0.25 s per verdict for k <= 8 on the 2-core machine; >= 10x fewer LPs than naive at k=12.
* ``LeNetForward``: the exact interpreter's throughput on a LeNet-5-sized forward pass (28x28 input, no
  derivative tracking): ``time_forward`` and ``track_macs_per_second``.

``python asv_bench/ratios.py --area oracle`` times naive enumeration against the pruned verdict side by side.
"""

from .common import LENET_MACS, kink_net, lenet_forward


class KinkNet:
    params = ([1, 2, 4, 6, 8, 10, 12, 14, 16],)
    param_names = ["k"]
    timeout = 600

    def setup(self, k):
        self.fn, self.w = kink_net(k)

    def time_verdict(self, k):
        import nsverify

        nsverify.check_gradient(self.fn, self.w)

    def track_lps(self, k):
        import nsverify

        return nsverify.check_gradient(self.fn, self.w).stats["lps"]

    def track_naive_lps(self, k):
        return 2**k

    def track_lp_ratio(self, k):
        import nsverify

        return 2**k / max(1, nsverify.check_gradient(self.fn, self.w).stats["lps"])


class LeNetForward:
    timeout = 600

    def setup(self):
        self.net, self.x = lenet_forward()

    def time_forward(self):
        from nsverify.oracle import exact_forward

        exact_forward(self.net, self.x)

    def track_macs_per_second(self):
        from nsverify import devices
        from nsverify.oracle import exact_forward

        (seconds,) = devices.time_call(lambda: exact_forward(self.net, self.x), repeat=1, warmup=0)
        return LENET_MACS / seconds

    track_macs_per_second.unit = "MAC/s"
