"""The same programs in torch: for comparing the interpreter with torch autograd (float64)."""

from __future__ import annotations

from typing import Sequence

import torch
import torch.nn.functional as F

from nsverify.papers.costs.program import Program


def _node(op: str, a: list, prm):
    if op == "add":
        return a[0] + a[1]
    if op == "mul":
        return a[0] * a[1]
    if op == "addc":
        return a[0] + float(prm)
    if op == "mulc":
        return a[0] * float(prm)
    if op == "inv":
        return 1.0 / a[0]
    if op == "exp":
        return torch.exp(a[0])
    if op == "log":
        return torch.log(a[0])
    if op == "relu":
        return torch.relu(a[0])
    if op == "mulrelu":
        return a[0] * torch.relu(a[1])
    if op == "abs":
        return torch.abs(a[0])
    if op == "elu":
        return F.elu(a[0], alpha=float(prm))
    if op == "maxpool3x3":
        patch = torch.tensor([[float(v) for v in row] for row in prm], dtype=a[0].dtype)
        w = torch.stack(a).reshape(1, 1, 3, 3)
        return F.conv2d(patch.reshape(1, 1, 5, 5), w).amax()
    if op == "l1":
        return torch.stack(a).abs().sum()
    if op == "linf":
        return torch.stack(a).abs().amax()
    raise KeyError(op)


def torch_value_and_grad(prog: Program, x: Sequence[float], dtype=torch.float64):
    """Evaluate the program with torch ops and return (value, gradient) from torch autograd."""
    xs = torch.tensor([float(v) for v in x], dtype=dtype, requires_grad=True)
    mem = list(xs.unbind())
    for node in prog.nodes:
        mem.append(_node(node.op, [mem[j] for j in node.pr], node.param))
    out = mem[-1]
    (g,) = torch.autograd.grad(out, xs, allow_unused=True)
    if g is None:
        g = torch.zeros_like(xs)
    return out.item(), g.tolist()
