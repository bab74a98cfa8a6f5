"""The cost of nonsmooth AD (Boustany Ch.2).

* ``MlpRatio`` / ``CnnRatio``: (forward+backward)/forward of ReLU MLPs (depth x width) and CIFAR-style VGG11,
  per dtype and device: ``track_wall_ratio`` (interleaved, min over repeats, both timings in the same call) and
  ``track_flop_ratio`` (torch.utils.flop_counter).  The op-count model predicts <= 5, flat in depth and width.
* ``InterpreterOmega``: counted cost(backprop(P)) / cost(P) of MLP programs in the interpreter (unit costs).
* ``HadamardScaling``: Theorem 4, p directional derivatives at the kink / one gradient at a smooth point.
* ``Hardness``: exact Clarke set at 0 of the 3-SAT network (exponential) vs Proposition 4 (polynomial).
"""

from .common import DtypeDevice, costs_mlp, costs_vgg11


class MlpRatio(DtypeDevice):
    params = DtypeDevice.params + [[1, 5, 20], [64, 256, 2048]]
    param_names = DtypeDevice.param_names + ["depth", "width"]
    timeout = 300

    def setup(self, dtype, device, depth, width):
        super().setup(dtype, device)
        if self.device.type == "cpu" and depth * width > 20 * 256:
            raise NotImplementedError("skipped: keep the CPU grid modest (depth x width <= 20 x 256)")
        self.model, self.x = costs_mlp(depth, width, self.dtype, self.device)

    def track_wall_ratio(self, dtype, device, depth, width):
        from nsverify.papers.costs.measure import wall_ratio

        return wall_ratio(self.model, self.x, reps=5)["wall_ratio"]

    track_wall_ratio.unit = "x"

    def track_flop_ratio(self, dtype, device, depth, width):
        from nsverify.papers.costs.measure import flop_ratio

        return flop_ratio(self.model, self.x)["flop_ratio"]

    track_flop_ratio.unit = "x"


class CnnRatio(DtypeDevice):
    params = DtypeDevice.params + [[0.25, 1.0]]
    param_names = DtypeDevice.param_names + ["width_mult"]
    timeout = 300

    def setup(self, dtype, device, width_mult):
        super().setup(dtype, device)
        if self.device.type == "cpu" and width_mult > 0.25:
            raise NotImplementedError("skipped: full-width VGG11 only on a GPU")
        self.model, self.x = costs_vgg11(width_mult, self.dtype, self.device)

    def track_wall_ratio(self, dtype, device, width_mult):
        from nsverify.papers.costs.measure import wall_ratio

        return wall_ratio(self.model, self.x, reps=3)["wall_ratio"]

    track_wall_ratio.unit = "x"

    def track_flop_ratio(self, dtype, device, width_mult):
        from nsverify.papers.costs.measure import flop_ratio

        return flop_ratio(self.model, self.x)["flop_ratio"]

    track_flop_ratio.unit = "x"


class InterpreterOmega:
    params = ([1, 5, 20], [2, 8, 32])
    param_names = ["depth", "width"]

    def track_omega(self, depth, width):
        from nsverify.papers.costs.measure import interpreter_mlp_omega

        return interpreter_mlp_omega(depth, width)

    track_omega.unit = "x"


class HadamardScaling:
    params = ([64, 256, 1024],)
    param_names = ["p"]
    timeout = 300

    def setup(self, p):
        from nsverify.papers.costs.hadamard import measure_scaling

        # the ratio at p, measured side by side with its baseline (one gradient at a smooth point)
        self.row = [r for r in measure_scaling(ps=(p // 2, p), reps=5)["rows"] if r["p"] == p][0]

    def track_ratio_wall(self, p):
        return self.row["ratio_wall"]

    track_ratio_wall.unit = "x"

    def track_ratio_flops(self, p):
        return self.row["ratio_flops"]

    track_ratio_flops.unit = "x"


class Hardness:
    params = (["3x1", "3x4", "4x8"],)
    param_names = ["vars_x_clauses"]
    timeout = 600

    def setup(self, size):
        from nsverify.papers.costs.relunet import sat_network
        from nsverify.papers.costs.sat import random_3cnf

        p, n = (int(v) for v in size.split("x"))
        self.p = p
        self.net = sat_network(random_3cnf(p, n, 0), p)

    def time_exact_clarke(self, size):
        from nsverify.papers.costs.bouligand import bouligand_set

        bouligand_set(self.net, [0] * self.p)

    def time_prop4(self, size):
        from nsverify.papers.costs.prop4 import ad_set_two

        ad_set_two(self.net, [0] * self.p)

    def track_regions(self, size):
        from nsverify.papers.costs.bouligand import bouligand_set

        return bouligand_set(self.net, [0] * self.p).regions

    track_regions.unit = "regions"
