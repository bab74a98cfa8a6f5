"""Benchmarks of nsverify.optim: INNAprop step time against AdamW (both foreach), state bytes per parameter.

Target: INNAprop time per step <= 1.15x AdamW's at 1e4, 1e6 and 1e7 parameters; state bytes equal AdamW's.
"""
import torch

from nsverify.optim import INNAprop


def _make(kind: str, n: int, dtype=torch.float32, device="cpu"):
    # a few tensors of unequal size, like a small network's parameter list
    sizes = [n // 2, n // 4, n // 8, n - (n // 2 + n // 4 + n // 8)]
    g = torch.Generator(device=device).manual_seed(0)
    params = [torch.randn(s, generator=g, dtype=dtype, device=device).requires_grad_() for s in sizes]
    for p in params:
        p.grad = torch.randn(p.shape, generator=g, dtype=dtype, device=device) * 1e-2
    if kind == "adamw":
        opt = torch.optim.AdamW(params, lr=1e-3, weight_decay=0.01, foreach=True)
    elif kind == "innaprop":
        opt = INNAprop(params, lr=1e-3, alpha=0.1, beta=0.9, weight_decay=0.01, foreach=True)
    else:
        raise NotImplementedError(kind)
    opt.step()  # create state
    return opt


class OptimizerStep:
    params = (["adamw", "innaprop"], [10_000, 1_000_000, 10_000_000])
    param_names = ["optimizer", "n_params"]
    timeout = 240

    def setup(self, kind, n):
        self.opt = _make(kind, n)

    def time_step(self, kind, n):
        self.opt.step()


class StateBytes:
    params = (["adamw", "innaprop"],)
    param_names = ["optimizer"]

    def setup(self, kind):
        self.opt = _make(kind, 10_000)

    def track_state_bytes_per_param(self, kind):
        n = sum(p.numel() for g in self.opt.param_groups for p in g["params"])
        total = sum(t.numel() * t.element_size() for s in self.opt.state.values() for t in s.values()
                    if torch.is_tensor(t))
        return total / n

    track_state_bytes_per_param.unit = "bytes"
