"""Measured (forward+backward)/forward ratios for MLPs and CNNs: wall-clock and FLOPs
(torch.utils.flop_counter.FlopCounterMode), side by side in one run, on any device and floating dtype.

The operation-count model of the thesis predicts a ratio <= 5 that is flat in depth and width (Theorem 3,
Corollary 2, Fig. 2.1).  FLOP counts of matmuls/convolutions give about 3 (one product forward, two backward);
wall-clock adds memory traffic, kernel launch and dtype effects, which the op-count model does not describe.
"""

from __future__ import annotations

import torch
from torch import nn

from nsverify.devices import dtype_name, parse_device, parse_dtype, time_side_by_side, torch_threads


def mlp(widths: list[int]) -> nn.Sequential:
    """Linear/ReLU stack with the given layer widths (input first, output last)."""
    layers: list[nn.Module] = []
    for i in range(len(widths) - 1):
        layers.append(nn.Linear(widths[i], widths[i + 1]))
        if i < len(widths) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


VGG11_CFG = [64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"]


def vgg11(width_mult: float = 1.0, num_classes: int = 10) -> nn.Sequential:
    """CIFAR-style VGG11 (3x32x32 input, conv3x3+BN-free+ReLU, max-pool 2x2, one linear classifier)."""
    layers: list[nn.Module] = []
    c_in = 3
    for v in VGG11_CFG:
        if v == "M":
            layers.append(nn.MaxPool2d(2))
        else:
            c = max(1, int(v * width_mult))
            layers += [nn.Conv2d(c_in, c, 3, padding=1), nn.ReLU()]
            c_in = c
    layers += [nn.Flatten(), nn.Linear(c_in, num_classes)]
    return nn.Sequential(*layers)


def flop_ratio(model: nn.Module, x: torch.Tensor) -> dict:
    """FLOPs of one forward and of forward+backward (sum of outputs as the loss)."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as fc:
        model(x).float().sum()
    f = fc.get_total_flops()
    with FlopCounterMode(display=False) as fc:
        model(x).float().sum().backward()
    fb = fc.get_total_flops()
    model.zero_grad(set_to_none=True)
    return dict(flops_fwd=f, flops_fwdbwd=fb, flop_ratio=fb / f if f else float("nan"))


def wall_ratio(model: nn.Module, x: torch.Tensor, reps: int = 5, warmup: int = 2,
               threads: int | None = 1) -> dict:
    """Wall-clock of forward (autograd on, as in training) and of forward+backward, interleaved; minimum over
    the repeats (robust to other load), and the ratio of each interleaved round (``ratio_samples``).  On CPU,
    ``threads`` intra-op threads (default 1)."""
    device = x.device

    def fwd():
        model(x).float().sum()

    def fwdbwd():
        model(x).float().sum().backward()

    with torch_threads(threads if device.type == "cpu" else None):
        t = time_side_by_side({"fwd": fwd, "fwdbwd": fwdbwd}, repeat=reps, warmup=warmup, device=device,
                              min_time=0.05)
    tf, tfb = t.stat("fwd"), t.stat("fwdbwd")
    model.zero_grad(set_to_none=True)
    # one ratio per interleaved round (the samples a decision rule needs; the minimum is the reported value)
    per_round = [b / a for a, b in zip(t.samples["fwd"], t.samples["fwdbwd"]) if a > 0]
    return dict(t_fwd=tf, t_fwdbwd=tfb, wall_ratio=tfb / tf, ratio_samples=per_round)


def measure(model: nn.Module, x: torch.Tensor, reps: int = 5) -> dict:
    out = flop_ratio(model, x)
    out.update(wall_ratio(model, x, reps=reps))
    return out


#: the largest MLP ``mlp_row`` builds (parameters): 2^28 is 1 GiB in float32
MAX_MLP_PARAMS = 2**28


def check_mlp_size(depth: int, width: int, batch: int, d_in: int = 784, d_out: int = 10) -> None:
    """Raise :class:`~nsverify.errors.BadArgumentError` unless the MLP is a positive size this machine can hold."""
    from nsverify.errors import BadArgumentError, check_number

    for name, v in (("depth", depth), ("width", width), ("batch", batch), ("d_in", d_in), ("d_out", d_out)):
        check_number(v, name, integer=True, lo=1)
    n = d_in * width + (depth - 1) * width * width + width * d_out
    if n > MAX_MLP_PARAMS:
        raise BadArgumentError(f"an MLP of depth {depth} and width {width} has {n:.3g} parameters, above the "
                               f"{MAX_MLP_PARAMS:.3g} this measurement allows; lower the width or the depth.")


def mlp_row(
    depth: int,
    width: int,
    dtype="float32",
    device="cpu",
    batch: int = 64,
    d_in: int = 784,
    d_out: int = 10,
    reps: int = 5,
    seed: int = 0,
) -> dict:
    """One MLP measurement: ``depth`` hidden layers of ``width`` units."""
    check_mlp_size(depth, width, batch, d_in, d_out)
    dt, dev = parse_dtype(dtype), parse_device(device)
    torch.manual_seed(seed)
    model = mlp([d_in] + [width] * depth + [d_out]).to(device=dev, dtype=dt)
    x = torch.randn(batch, d_in, device=dev, dtype=dt)
    row = dict(model="mlp", depth=depth, width=width, batch=batch, dtype=dtype_name(dt), device=str(dev))
    row.update(measure(model, x, reps=reps))
    return row


def cnn_row(
    width_mult: float = 0.25, dtype="float32", device="cpu", batch: int = 8, reps: int = 3, seed: int = 0
) -> dict:
    dt, dev = parse_dtype(dtype), parse_device(device)
    torch.manual_seed(seed)
    model = vgg11(width_mult).to(device=dev, dtype=dt)
    x = torch.randn(batch, 3, 32, 32, device=dev, dtype=dt)
    row = dict(
        model=f"vgg11x{width_mult:g}",
        depth=8,
        width=int(512 * width_mult),
        batch=batch,
        dtype=dtype_name(dt),
        device=str(dev),
    )
    row.update(measure(model, x, reps=reps))
    return row


def interpreter_mlp_omega(depth: int, width: int, d_in: int = 4) -> float:
    """Counted cost(backprop(P)) / cost(P) of an MLP program in the interpreter (unit costs, Assumption 1)."""
    from nsverify.papers.costs.ad import backprop
    from nsverify.papers.costs.randprog import mlp_program

    prog = mlp_program([d_in] + [width] * depth + [1])
    return backprop(prog, [0.5] * d_in).ratio
