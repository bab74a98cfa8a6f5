"""A small reproduction of Park et al.'s experiments (Sec. 4, Table 2) on a 2-core CPU.

Scenario 1: fully connected nets (two hidden layers) with ReLU6 / HardTanh / HardSigmoid on scikit-learn's
digits; per step, kink touches and Theorem 5's exact rank premise at the touched layers.
Scenario 2: mini-VGG, mini-VGG-BN, mini-ResNet on digits upsampled to 28x28 plus synthetic plateau images
(constant blocks on a zero background); the :class:`~nsverify.papers.park.monitor.Monitor` records, per
pooling layer, the share of max operations with ties, the steps with non-trivial ties (S_j \\ T_j non-empty),
the average |S_j \\ T_j| and whether Algorithm 1 certified every step; the monitor's overhead is timed against
plain training on the same batches.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from nsverify.devices import time_call
from nsverify.papers.park.monitor import Monitor
from nsverify.papers.park.rank import full_column_rank
from nsverify.workloads.datasets import digits64, digits_upsampled

ACTS = {"ReLU6": nn.ReLU6, "HardTanh": nn.Hardtanh, "HardSigmoid": nn.Hardsigmoid}


def fc_net(act: str, hidden=(64, 32)) -> nn.Module:
    A = ACTS[act]
    return nn.Sequential(
        nn.Linear(64, hidden[0]), A(), nn.Linear(hidden[0], hidden[1]), A(), nn.Linear(hidden[1], 10)
    )


def mini_vgg(bn: bool = False, width: int = 8) -> nn.Module:
    def block(cin, cout):
        layers = [nn.Conv2d(cin, cout, 3, padding=1)] + ([nn.BatchNorm2d(cout)] if bn else [])
        return layers + [nn.ReLU(), nn.MaxPool2d(2)]

    return nn.Sequential(
        *block(1, width),
        *block(width, 2 * width),
        *block(2 * width, 2 * width),
        nn.Flatten(),
        nn.Linear(2 * width * 3 * 3, 10),
    )


class _Res(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c1, self.b1, self.r1 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c), nn.ReLU()
        self.c2, self.b2, self.r2 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c), nn.ReLU()

    def forward(self, x):
        return self.r2(self.b2(self.c2(self.r1(self.b1(self.c1(x))))) + x)


def mini_resnet(width: int = 8) -> nn.Module:
    """ResNet18's layout in miniature: conv-BN-ReLU-maxpool(3, 2, 1) stem (the only non-trivial max pool), one
    residual block, global average pooling."""
    return nn.Sequential(
        nn.Conv2d(1, width, 3, padding=1, bias=False),
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
    "mini-VGG": lambda: mini_vgg(False),
    "mini-VGG-BN": lambda: mini_vgg(True),
    "mini-ResNet": mini_resnet,
}


def scenario2(steps: int = 12, batch: int = 64, seed: int = 0, progress=None, timing_steps: int = 6) -> dict:
    """Table-2 statistics per network and pooling layer, plus monitor overhead (monitored / plain step
    time)."""
    X, y = digits_upsampled(28, plateau=400, seed=seed)
    out = {"rows": [], "overhead": {}}
    for name, make in NETS.items():
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
        for s in mon.summary():
            if s["pool"] is None:
                continue
            out["rows"].append(
                {
                    "network": name,
                    "pool": s["pool"],
                    "max_ops": s["max_ops"],
                    "tied": s["tied_max_ops"],
                    "tie_share": s["tie_share"],
                    "steps_nontrivial": s["steps_nontrivial"],
                    "steps": total,
                    "avg_nontrivial": s["avg_nontrivial"],
                    "unchecked": s["unchecked"],
                    "correct": "yes" if good == total else f"{good}/{total} certified",
                }
            )
        mon.close()
        out["overhead"][name] = overhead(make, X, y, batch, timing_steps, seed)
        if progress:
            progress(f"scenario 2 {name}: overhead x{out['overhead'][name]['ratio']:.2f}")
    return out


def overhead(make, X, y, batch: int, steps: int, seed: int = 0) -> dict:
    """Seconds per training step without and with the monitor, measured side by side (alternating)."""
    torch.manual_seed(seed)
    net = make()
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    batches = list(_batches(X, y, batch, steps))
    plain, monitored = [], []

    def step(xb, yb, mon):
        loss = F.cross_entropy(net(xb), yb)
        if mon is not None:
            mon.check()
        loss.backward()
        opt.step()
        opt.zero_grad()

    def block(mon) -> list[float]:  # seconds of one training step on each batch in turn
        it = iter(batches)
        return time_call(lambda: step(*next(it), mon), repeat=len(batches), warmup=0)

    step(*batches[0], None)  # warm-up
    mon = Monitor(net)  # hooks installed once, as in a user's loop
    step(*batches[0], mon)
    for _rep in range(2):  # blocks of plain and monitored steps on the same batches, side by side
        mon.close()
        plain.extend(block(None))
        mon = Monitor(net)
        monitored.extend(block(mon))
    mon.close()
    p, m = sorted(plain)[len(plain) // 2], sorted(monitored)[len(monitored) // 2]
    return {"plain_s": p, "monitored_s": m, "ratio": m / p,
            "ratio_samples": [b / a for a, b in zip(plain, monitored)]}  # same batch, plain vs monitored


def rank_example():
    """Theorem 5's premise on a digits minibatch of 32 (64 features): exact full column rank."""
    X, _ = digits64()
    return full_column_rank(X[:32].t())
