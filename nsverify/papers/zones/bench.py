"""Workloads shared by the zones benchmarks (asv_bench/benchmarks/zones.py) and scripts/bench_zones.py.

* ``one_forward``: the estimator's way -- one forward pass, two backward passes under two rules;
* ``two_models``: the naive way -- two model copies (one per program), each with its own forward and backward.
"""
from __future__ import annotations

import copy

import torch
import torch.nn.functional as F

from nsverify.papers.zones.measure import program_grads, variation
from nsverify.papers.zones.rules import use_rule

WORKLOADS = {"lenet5": ("digits28", 1.0, 64), "vgg11": ("plateaus", 0.125, 32)}


def setup_workload(model_name: str, dtype=torch.float32, device="cpu", seed: int = 0):
    from nsverify.workloads.datasets import get_dataset
    from nsverify.workloads.models import build_model

    dataset, width, batch = WORKLOADS[model_name]
    x, y = get_dataset(dataset, n=batch, seed=seed)
    torch.manual_seed(seed)
    model = build_model(model_name, width).to(device=device, dtype=dtype)
    return model, x[:batch].to(device, dtype), y[:batch].to(device)


def d_one_forward(model, x, y, programs=("native", "minimal")) -> float:
    (gp, gq), _, _ = program_grads(model, x, y, programs)
    return variation(gp, gq)


def make_two_models(model):
    return model, copy.deepcopy(model)


def d_two_models(models, x, y, programs=("native", "minimal")) -> float:
    grads = []
    for model, prog in zip(models, programs):
        loss = F.cross_entropy(model(x), y)
        with use_rule(prog):
            gs = torch.autograd.grad(loss, list(model.parameters()))
        grads.append(torch.cat([g.reshape(-1).double() for g in gs]))
    return variation(grads[0], grads[1])
