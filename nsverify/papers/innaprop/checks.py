"""Cheap in-report checks of the optimizer identities (used by the report section; the tests are stricter)."""
from __future__ import annotations

import torch

from nsverify.devices import time_side_by_side
from nsverify.optim.innaprop import INNAprop


def _trajectory(make, steps: int, seed: int = 0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    ps = [torch.randn(64, generator=g, dtype=dtype).requires_grad_(),
          torch.randn(8, 8, generator=g, dtype=dtype).requires_grad_()]
    opt = make(ps)
    out = []
    for _ in range(steps):
        opt.zero_grad()
        sum(p.abs().sum() + torch.log1p((3 * p - 1) ** 2).sum() for p in ps).backward()
        opt.step()
        out.append([p.detach().clone() for p in ps])
    return out, opt


def adamw_mismatches(alpha: float, beta: float, steps: int = 50, dtype=torch.float32) -> dict:
    """Steps at which INNAprop(alpha, beta) and AdamW(lr*beta, betas=(0, sigma)) single-tensor paths differ
    bitwise,
    plus whether psi stayed exactly 0 (meaningful for alpha*beta == 1 in floating point)."""
    lr = 1e-2
    a, _ = _trajectory(lambda ps: torch.optim.AdamW(ps, lr=lr * beta, betas=(0.0, 0.999), weight_decay=0.0,
                                                    foreach=False), steps, dtype=dtype)
    b, opt = _trajectory(lambda ps: INNAprop(ps, lr=lr, alpha=alpha, beta=beta, weight_decay=0.0,
                                             foreach=False), steps, dtype=dtype)
    bad = sum(not all(torch.equal(x, y) for x, y in zip(sa, sb)) for sa, sb in zip(a, b))
    psi_zero = all(torch.count_nonzero(s["psi"]) == 0 for s in opt.state.values())
    return {"mismatched_steps": bad, "steps": steps, "psi_zero": psi_zero}


def bench_optimizer(kind: str, n: int, dtype=torch.float32, device="cpu"):
    """An optimizer over ``n`` parameters in four tensors of unequal size, with gradients set and state
    created.

    ``kind`` is "adamw" or "innaprop" (both foreach, weight decay 0.01, lr 1e-3). Shared by the asv
    benchmarks, the report section and scripts/gpu/optim.py.
    """
    sizes = [n // 2, n // 4, n // 8, n - (n // 2 + n // 4 + n // 8)]
    g = torch.Generator(device=device).manual_seed(0)
    params = [torch.randn(s, generator=g, device=device).to(dtype).requires_grad_() for s in sizes]
    for p in params:
        p.grad = (torch.randn(p.shape, generator=g, device=device) * 1e-2).to(dtype)
    if kind == "adamw":
        opt = torch.optim.AdamW(params, lr=1e-3, weight_decay=0.01, foreach=True)
    elif kind == "innaprop":
        opt = INNAprop(params, lr=1e-3, alpha=0.1, beta=0.9, weight_decay=0.01, foreach=True)
    else:
        raise ValueError(f"unknown benchmark optimizer {kind!r}: use 'adamw' or 'innaprop'")
    opt.step()
    return opt


def state_bytes_per_param(opt) -> float:
    n = sum(p.numel() for g in opt.param_groups for p in g["params"])
    total = sum(t.numel() * t.element_size() for s in opt.state.values() for t in s.values()
                if torch.is_tensor(t))
    return total / n


def step_time_ratio(n: int = 1_000_000, reps: int = 10, rounds: int = 5, dtype=torch.float32,
                    device="cpu") -> dict:
    """Best-of-rounds time per step of INNAprop over AdamW (both foreach), measured side by side."""
    opts = {k: bench_optimizer(k, n, dtype, device) for k in ("adamw", "innaprop")}
    t = time_side_by_side({k: o.step for k, o in opts.items()}, repeat=rounds, warmup=0, number=reps, device=device)
    best = {k: t.stat(k) for k in opts}
    return {"n_params": n, "dtype": str(dtype).removeprefix("torch."), "device": str(device),
            "adamw_s": best["adamw"], "innaprop_s": best["innaprop"],
            "ratio": best["innaprop"] / best["adamw"],
            "ratio_samples": [b / a for a, b in zip(t.samples["adamw"], t.samples["innaprop"])],
            "state_bytes_per_param": {k: state_bytes_per_param(o) for k, o in opts.items()}}
