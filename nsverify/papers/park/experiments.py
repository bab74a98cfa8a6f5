"""A small reproduction of Park et al.'s experiments (Sec. 4, Table 2) on a 2-core CPU.

Scenario 1: fully connected nets (two hidden layers) with ReLU6 / HardTanh / HardSigmoid on scikit-learn's
digits; per step, kink touches and Theorem 5's exact rank premise at the touched layers.
Scenario 2: mini-VGG, mini-VGG-BN, mini-ResNet on CIFAR-shaped natural-image crops (``data="natural"``, the
default: 8-bit pixels of scikit-learn's sample photographs) or on digits upsampled to 28x28 plus synthetic
plateau images (``data="digits"``: tie-saturated); the :class:`~nsverify.papers.park.monitor.Monitor` records,
per pooling layer, the share of max operations with ties counted as Algorithm 2 does (|S_j| >= 2 and a positive
max; all-zero windows excluded) next to all ties, the steps with non-trivial ties (S_j \\ T_j non-empty), the
average |S_j \\ T_j| and whether Algorithm 1 certified every step. The monitor's overhead is timed per step
against plain training on the same batches (interleaved), with the tied windows of each monitored step.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from nsverify.devices import time_call
from nsverify.oracle.park.rank import full_column_rank
from nsverify.papers.park.monitor import Monitor
from nsverify.workloads.datasets import digits64, digits_upsampled, natural_crops

ACTS = {"ReLU6": nn.ReLU6, "HardTanh": nn.Hardtanh, "HardSigmoid": nn.Hardsigmoid}


def fc_net(act: str, hidden=(64, 32)) -> nn.Module:
    A = ACTS[act]
    return nn.Sequential(
        nn.Linear(64, hidden[0]), A(), nn.Linear(hidden[0], hidden[1]), A(), nn.Linear(hidden[1], 10)
    )


def mini_vgg(bn: bool = False, width: int = 8, in_channels: int = 1, size: int = 28) -> nn.Module:
    def block(cin, cout):
        layers = [nn.Conv2d(cin, cout, 3, padding=1)] + ([nn.BatchNorm2d(cout)] if bn else [])
        return layers + [nn.ReLU(), nn.MaxPool2d(2)]

    side = size // 8
    return nn.Sequential(
        *block(in_channels, width),
        *block(width, 2 * width),
        *block(2 * width, 2 * width),
        nn.Flatten(),
        nn.Linear(2 * width * side * side, 10),
    )


class _Res(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c1, self.b1, self.r1 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c), nn.ReLU()
        self.c2, self.b2, self.r2 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c), nn.ReLU()

    def forward(self, x):
        return self.r2(self.b2(self.c2(self.r1(self.b1(self.c1(x))))) + x)


def mini_resnet(width: int = 8, in_channels: int = 1) -> nn.Module:
    """ResNet18's layout in miniature: conv-BN-ReLU-maxpool(3, 2, 1) stem (the only non-trivial max pool), one
    residual block, global average pooling."""
    return nn.Sequential(
        nn.Conv2d(in_channels, width, 3, padding=1, bias=False),
        nn.BatchNorm2d(width),
        nn.ReLU(),
        nn.MaxPool2d(3, 2, 1),
        _Res(width),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(width, 10),
    )


def _batches(X, y, bs, steps):
    n = len(X)
    for s in range(steps):
        i = (s * bs) % (n - bs)
        yield X[i : i + bs], y[i : i + bs]


def scenario1(steps: int = 56, batch: int = 32, seed: int = 0, progress=None) -> list[dict]:
    """Per activation: kink touches over training, steps whose touched layers pass Theorem 5's rank test."""
    X, y = digits64()
    rows = []
    for act in ACTS:
        torch.manual_seed(seed)
        net = fc_net(act)
        opt = torch.optim.SGD(net.parameters(), lr=0.05, weight_decay=1e-4)
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps)
        mon = Monitor(net)
        touches = touched_steps = rank_ok_steps = 0
        for xb, yb in _batches(X, y, batch, steps):
            loss = F.cross_entropy(net(xb), yb)
            rec = mon.check()
            k = sum(c.kink_touches for c in rec.layers)
            touches += k
            if k:
                touched_steps += 1
                rank_ok_steps += all(rec.rank_ok.values())
            loss.backward()
            opt.step()
            opt.zero_grad()
            sched.step()
        mon.close()
        rows.append(
            {
                "network": f"FC-{act}",
                "steps": steps,
                "kink_touches": touches,
                "touched_steps": touched_steps,
                "rank_ok_steps": rank_ok_steps,
                "correct": "yes" if rank_ok_steps == touched_steps else "not certified",
            }
        )
        if progress:
            progress(f"scenario 1 {act}: {touches} kink touches")
    return rows


NETS = {
    "mini-VGG": lambda c, size: mini_vgg(False, in_channels=c, size=size),
    "mini-VGG-BN": lambda c, size: mini_vgg(True, in_channels=c, size=size),
    "mini-ResNet": lambda c, size: mini_resnet(in_channels=c),
}
DATA = ("natural", "digits")


def scenario2_data(data: str = "natural", seed: int = 0, n: int = 1024):
    """(X, y) for Scenario 2: ``natural`` (3x32x32 crops of scikit-learn's sample photographs, 8-bit pixels,
    CIFAR-shaped) or ``digits`` (digits upsampled to 28x28 plus 400 plateau images: tie-saturated)."""
    if data == "natural":
        return natural_crops(n, seed=seed)
    if data == "digits":
        return digits_upsampled(28, plateau=400, seed=seed)
    from nsverify.errors import NsverifyError

    raise NsverifyError(f"unknown Scenario 2 data {data!r}; use one of {', '.join(DATA)}")


def scenario2(steps: int = 12, batch: int = 64, seed: int = 0, progress=None, timing_steps: int = 6,
              data: str = "natural", overhead_fn=None) -> dict:
    """Table-2 statistics per network and pooling layer, plus the monitor's overhead per step
    (``overhead_fn(make, X, y, batch, steps, seed)``, default :func:`overhead`)."""
    X, y = scenario2_data(data, seed)
    c, size = X.shape[1], X.shape[-1]
    overhead_fn = overhead_fn or overhead
    out = {"data": data, "rows": [], "overhead": {}, "steps": []}
    for name, build in NETS.items():
        make = lambda build=build: build(c, size)  # noqa: E731
        torch.manual_seed(seed)
        net = make()
        opt = torch.optim.SGD(net.parameters(), lr=0.05, weight_decay=1e-4)
        mon = Monitor(net)
        for xb, yb in _batches(X, y, batch, steps):
            loss = F.cross_entropy(net(xb), yb)
            mon.check()
            loss.backward()
            opt.step()
            opt.zero_grad()
        good, total = mon.correct_steps()
        pool_idx = [j for j, s in enumerate(mon.summary()) if s["pool"] is not None]
        for j in pool_idx:
            s = mon.summary()[j]
            chks = [st.layers[j] for st in mon.steps]
            out["rows"].append(
                {
                    "network": name,
                    "pool": s["pool"],
                    "max_ops": s["max_ops"],
                    "tied": s["tied_max_ops"],
                    "tied_positive": sum(ck.tied_positive for ck in chks),
                    "tie_share": s["tie_share"],
                    "steps_nontrivial": s["steps_nontrivial"],
                    "steps": total,
                    "avg_nontrivial": s["avg_nontrivial"],
                    "unchecked": s["unchecked"],
                    "correct": "yes" if good == total else f"{good}/{total} certified",
                }
            )
        # per step: was Theorem 8's condition exercised (a non-trivial tie somewhere), and did it hold?
        for st in mon.steps:
            out["steps"].append({"network": name, "nontrivial": any(ck.nontrivial_windows for ck in st.layers),
                                 "unknown": any(ck.status in ("unknown", "not_applicable") for ck in st.layers),
                                 "certified": st.correct == "yes",
                                 "first_pool_nontrivial": bool(pool_idx) and bool(
                                     st.layers[pool_idx[0]].nontrivial_windows)})
        mon.close()
        out["overhead"][name] = overhead_fn(make, X, y, batch, timing_steps, seed)
        if progress:
            o = out["overhead"][name]
            progress(f"scenario 2 {name}: overhead x{o['ratio']:.2f} (median monitored / median plain) over "
                     f"{len(o['per_step'])} steps")
    return out


def overhead(make, X, y, batch: int, steps: int, seed: int = 0, device=None) -> dict:
    """Seconds per training step without and with the monitor on the same batches, interleaved step by step
    (plain step on batch i, then monitored step on batch i), with the tied windows (all, and Algorithm 2's)
    of each monitored step: ``{"per_step": [{"plain_s", "monitored_s", "tied", "tied_positive"}], "plain_s",
    "monitored_s", "ratio"}`` (medians). Any function returning this shape can replace it (``overhead_fn``).
    ``device``: where the network and batches live (CUDA timings synchronise the device)."""
    torch.manual_seed(seed)
    net = make().to(device) if device is not None else make()
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    batches = [(xb.to(device), yb.to(device)) if device is not None else (xb, yb)
               for xb, yb in _batches(X, y, batch, steps)]

    def step(xb, yb, mon):
        loss = F.cross_entropy(net(xb), yb)
        rec = mon.check() if mon is not None else None
        loss.backward()
        opt.step()
        opt.zero_grad()
        return rec

    step(*batches[0], None)  # warm-up
    mon = Monitor(net)  # hooks installed once, as in a user's loop
    step(*batches[0], mon)
    per_step = []
    for xb, yb in batches:
        mon.close()
        (plain,) = time_call(lambda xb=xb, yb=yb: step(xb, yb, None), repeat=1, warmup=0, device=device)
        mon = Monitor(net)
        recs = []
        (monitored,) = time_call(lambda xb=xb, yb=yb, mon=mon, recs=recs: recs.append(step(xb, yb, mon)), repeat=1,
                                 warmup=0, device=device)
        layers = recs[-1].layers
        per_step.append({"plain_s": plain, "monitored_s": monitored,
                         "tied": sum(ck.tied_windows for ck in layers),
                         "tied_positive": sum(ck.tied_positive for ck in layers)})
    mon.close()
    med = lambda xs: sorted(xs)[len(xs) // 2]  # noqa: E731
    p, m = med([r["plain_s"] for r in per_step]), med([r["monitored_s"] for r in per_step])
    return {"per_step": per_step, "plain_s": p, "monitored_s": m, "ratio": m / p,
            "ratio_samples": [r["monitored_s"] / r["plain_s"] for r in per_step]}  # same batch, side by side


def rank_example():
    """Theorem 5's premise on a digits minibatch of 32 (64 features): exact full column rank."""
    X, _ = digits64()
    return full_column_rank(X[:32].t())
