"""The exact Clarke oracle (nsverify.oracle).

* ``KinkNet``: a one-hidden-layer ReLU network (2-4-1, MSE loss), gradient with respect to its first-layer
  parameters (12 coordinates), with k = 1..16 simultaneous kink sites (a zero-initialised hidden unit sitting
  exactly at its kink on all k samples of the batch).  ``time_verdict``: one full ``check_gradient`` call;
  ``track_lps``: LPs solved by the pruned enumeration; ``track_naive_lps``: 2^k, the LPs of naive
  enumeration (one per sign pattern); ``track_lp_ratio``: naive / pruned.
  Targets: median <= 0.25 s per verdict for k <= 8 on the 2-core machine; >= 10x fewer LPs than naive at k=12.
* ``LeNetForward``: the exact interpreter's throughput on a LeNet-5-sized forward pass (28x28 input, no
  derivative tracking): ``time_forward`` and ``track_macs_per_second``.

* ``Separable``: f(w) = sum_i a_i relu(w_i) + b_i w_i at 0 (k kinks, 2^k genuine pieces), decided by separable
  blocks: ``time_verdict`` (target: <= 1 s at k = 10), ``track_traces`` (about 2k + 1), ``track_product_pieces``.
* ``LeNetTie``: ``check_module`` on a LeNet-5-size network (61,706 parameters, batch 2) with zero-initialised
  units and tied pooling windows, decided by Park et al.'s Theorem 8 (target: <= 10 s).
* ``ResNetTie``: ``check_module`` on nsverify.workloads' ResNet18 at widths 1/32, 1/16 and 1/8 (channels 2-4-8-16,
  4-8-16-32, 8-16-32-64: 11,178 / 44,322 / 176,402 parameters) with exact BatchNorm, integer inputs and one dead
  stem channel (``common.resnet_tie``), MSE or cross-entropy loss: ``time_check_module`` (target (a) of issue 23:
  <= 60 s at width 1/8; the widths give curve (d)) and ``track_decided`` (1 when decided, 0 for unknown).
* ``TransformerTie``: ``check_module`` on a 2-block pre-norm transformer encoder (d = 8 or 16, 2 heads, GELU MLPs,
  LayerNorm with its default eps, 1,906 / 7,034 parameters; batch 2 x 8 tokens) with one head unit at its ReLU kink
  (``common.transformer_tie``), MSE or cross-entropy loss, decided by Park et al.'s Theorem 8 with the layers read
  from the autograd graph: ``time_check_module`` (target (b) of issue 23: <= 60 s) and ``track_decided``.
* ``PoolPlateau``: ``check_module`` on a conv-ReLU-maxpool-linear net whose plateau input ties every pooling
  window 4 ways (4^9 tie patterns per channel, ``common.pool_plateau_ties``): ``time_check_module`` (target (c)
  of issue 23: <= 10 s).
* ``FirstCall``: seconds from ``import nsverify`` to the end of a first ``check_gradient`` in a fresh interpreter
  (torch imported): ``track_first_call`` (target < 0.5 s for nsverify's own share), ``track_own_share``
  (torch.distributed.tensor imported beforehand) and ``track_torch_dispatch_floor`` (torch's one-time import of
  DTensor on the first ``__torch_dispatch__``, which any tensor subclass pays).

``python asv_bench/ratios.py --area oracle`` times naive enumeration against the pruned verdict, and the plain
enumeration against the separable blocks, side by side.
"""

from .common import (
    LENET_MACS,
    first_call_seconds,
    kink_net,
    lenet_forward,
    lenet_tie,
    pool_plateau_ties,
    resnet_tie,
    separable_program,
    torch_dispatch_floor_seconds,
    transformer_tie,
)


def _warm():
    """One tiny oracle call, so that a timed call excludes the process's one-time costs (imports, torch's first
    tensor-subclass dispatch): FirstCall measures those."""
    import torch

    import nsverify

    nsverify.check_gradient(lambda w: torch.relu(w).sum(), torch.zeros(1, dtype=torch.float64), progress=False)


class KinkNet:
    params = ([1, 2, 4, 6, 8, 10, 12, 14, 16],)
    param_names = ["k"]
    timeout = 600

    def setup(self, k):
        _warm()
        self.fn, self.w = kink_net(k)

    def time_verdict(self, k):
        import nsverify

        nsverify.check_gradient(self.fn, self.w, progress=False)

    def track_lps(self, k):
        import nsverify

        return nsverify.check_gradient(self.fn, self.w, progress=False).stats["lps"]

    def track_naive_lps(self, k):
        return 2**k

    def track_lp_ratio(self, k):
        import nsverify

        return 2**k / max(1, nsverify.check_gradient(self.fn, self.w, progress=False).stats["lps"])


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


class Separable:
    params = ([4, 10, 16],)
    param_names = ["k"]
    timeout = 600

    def setup(self, k):
        _warm()
        self.fn, self.w = separable_program(k)

    def time_verdict(self, k):
        import nsverify

        nsverify.check_gradient(self.fn, self.w, progress=False)

    def track_traces(self, k):
        import nsverify

        return nsverify.check_gradient(self.fn, self.w, progress=False).stats["traces"]

    def track_product_pieces(self, k):
        import nsverify

        return nsverify.check_gradient(self.fn, self.w, progress=False).stats["product_pieces"]


class _DecidedMember:
    """``check_module`` on a workload of ``common`` that the oracle decides ``member`` (asv skips this base: its
    name is private)."""

    number = 1
    repeat = 3

    def setup(self):
        _warm()
        self.net, self.loss, self.x, self.y = self.workload()

    def time_check_module(self):
        import nsverify

        v = nsverify.check_module(self.net, self.loss, self.x, self.y, progress=False)
        assert v.status == "member", v.status


class LeNetTie(_DecidedMember):
    timeout = 900
    workload = staticmethod(lenet_tie)


class PoolPlateau(_DecidedMember):
    timeout = 300
    workload = staticmethod(pool_plateau_ties)


class ResNetTie:
    timeout = 900
    number = 1
    repeat = 1
    params = ([0.03125, 0.0625, 0.125], ["mse", "cross_entropy"])
    param_names = ["width", "loss"]

    def setup(self, width, loss):
        _warm()
        self.net, self.loss, self.x, self.y = resnet_tie(width, loss=loss)

    def _check(self):
        import nsverify

        return nsverify.check_module(self.net, self.loss, self.x, self.y, progress=False, time_limit=300,
                                     on_limit="unknown")

    def time_check_module(self, width, loss):
        self._check()

    def track_decided(self, width, loss):
        v = self._check()
        return int(v.status != "unknown")


class TransformerTie(ResNetTie):
    params = ([8, 16], ["mse", "cross_entropy"])
    param_names = ["d", "loss"]

    def setup(self, d, loss):
        _warm()
        self.net, self.loss, self.x, self.y = transformer_tie(d, loss=loss)


class FirstCall:
    timeout = 600

    def track_first_call(self):
        return first_call_seconds()

    def track_own_share(self):
        return first_call_seconds(own_only=True)

    def track_torch_dispatch_floor(self):
        return torch_dispatch_floor_seconds()

    track_first_call.unit = track_own_share.unit = track_torch_dispatch_floor.unit = "seconds"
