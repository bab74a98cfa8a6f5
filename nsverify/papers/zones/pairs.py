"""Per-pair measurements for the zone claims: D(P, Q) and the rerun variations D(P, P~) that set tau, per
(parameter draw, minibatch, dtype).

For each pair, from ONE forward pass with the batch-summed loss (Boustany eq. 3.11; the mean reduction is D / B,
exact for the power-of-two batch sizes used here since the 1/B scaling of the upstream gradient is exact):

* ``D``: || backprop[P] - backprop[Q] ||_1 for the pair's two programs (default: native vs minimal max-pool
  Jacobian);
* ``D_relu``: the same for ReLU'(0) = 0 vs 1 (Bertoin's backprop_0 vs backprop_1), when asked;
* ``G`` = || backprop[P] ||_1 and ``u`` the dtype's unit roundoff: ``u * G`` is the size of a variation "at
  machine precision" for this pair (every gradient entry moved by one relative rounding);
* the variations of P against itself rerun (forward and backward again), which measure the run-to-run noise the
  threshold tau1 (Boustany eq. 3.12) is meant to bound:

  - ``D_order`` (the default): P on the same minibatch in reversed sample order -- the same program, its sums
    accumulated in another order, which is what nondeterministic GPU reductions do run to run;
  - ``D_threads``: P rerun with another intra-op thread count (reductions split differently across threads; on
    CUDA a plain rerun with nondeterministic kernels). On the CPUs we measured it stayed below ``D_order``
    (float32 VGG11: about 1e-5 against 3e-5), and with two threads on a loaded 2-core machine it costs ten
    times a one-thread pass, so it is opt-in;
  - ``D_same``: P rerun unchanged (0 on deterministic kernels: Fig. 3.3's sanity check).

tau1 of a setting is the largest rerun variation over its pairs (:func:`tau1`); a pair is *impacted* when
D > tau1. The 16-bit affine layers are emulated with split biases (:mod:`.emulate`) unless asked otherwise, and
each dtype's kernel path is recorded.
"""
from __future__ import annotations

import copy
import hashlib
import json
from dataclasses import asdict, dataclass

import torch

from nsverify.devices import parse_device, parse_dtype
from nsverify.errors import NsverifyError
from nsverify.papers.zones.emulate import prepare
from nsverify.papers.zones.measure import check_dtype_device, program_grads, variation

RERUNS = ("threads", "order", "same")


@dataclass(frozen=True)
class PairConfig:
    model: str = "lenet5"
    width: float = 1.0
    bn: bool = False
    dataset: str = "digits28"
    batch_size: int = 128
    draws: int = 4
    batches: int = 4
    dtypes: tuple = ("float32",)
    programs: tuple = ("native", "minimal")
    relu_pair: bool = False
    reruns: tuple = ("order",)
    emulate16: bool = True
    seed: int = 0
    n_data: int = 1024
    device: str = "cpu"

    def __post_init__(self):
        for name in ("draws", "batches", "batch_size"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise NsverifyError(f"PairConfig.{name}={v!r}: give an integer >= 1")
        bad = [r for r in self.reruns if r not in RERUNS]
        if bad:
            raise NsverifyError(f"unknown rerun kind(s) {bad}; use {', '.join(RERUNS)}")

    def key(self) -> str:
        """Hash of everything that changes one draw's results (not ``draws``: a run can be extended)."""
        d = asdict(self)
        d.pop("draws")
        return hashlib.sha256(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _data(cfg: PairConfig):
    from nsverify.workloads.datasets import get_dataset

    x, y = get_dataset(cfg.dataset, None, max(cfg.n_data, cfg.batch_size * cfg.batches), cfg.seed, torch.float64)
    need = cfg.batch_size * cfg.batches
    if need > len(x):
        raise NsverifyError(f"{cfg.batches} batches of {cfg.batch_size} need {need} samples; dataset {cfg.dataset!r} "
                            f"has {len(x)}. Lower the batches or the batch size.")
    return x, y


def _seed(cfg: PairConfig, m: int) -> int:
    return (cfg.seed * 1_000_003 + m * 7919 + 12345) % (2**63)


def _grad(model, x, y, program) -> torch.Tensor:
    (g,), _, _ = program_grads(model, x, y, (program,), "sum")
    return g


def _rerun(kind: str, model, x, y, program, device) -> torch.Tensor:
    if kind == "order":
        idx = torch.arange(len(x) - 1, -1, -1, device=x.device)
        return _grad(model, x[idx], y[idx], program)
    if kind == "threads" and device.type == "cpu":
        n = torch.get_num_threads()
        torch.set_num_threads(1 if n > 1 else 2)
        try:
            return _grad(model, x, y, program)
        finally:
            torch.set_num_threads(n)
    return _grad(model, x, y, program)  # "same", or a CUDA rerun (nondeterministic kernels allowed)


def measure_draw(cfg: PairConfig, m: int, data=None) -> dict:
    """``{dtype: [row per batch]}`` for draw ``m`` (see the module docstring for the row fields)."""
    from nsverify.workloads.models import build_model

    device = parse_device(cfg.device)
    x, y = data if data is not None else _data(cfg)
    torch.manual_seed(_seed(cfg, m))
    base = build_model(cfg.model, cfg.width, cfg.bn)
    g = torch.Generator().manual_seed(_seed(cfg, m))
    idx = torch.randperm(len(x), generator=g)[: cfg.batch_size * cfg.batches].split(cfg.batch_size)
    programs = list(cfg.programs) + (["relu1"] if cfg.relu_pair else [])
    out, paths = {}, {}
    for name in cfg.dtypes:
        dtype = parse_dtype(name)
        check_dtype_device(dtype, device)
        model, paths[name] = prepare(copy.deepcopy(base), dtype, cfg.emulate16)
        model = model.to(device)
        rows = []
        for b in idx:
            xb, yb = x[b].to(device, dtype), y[b].to(device)
            grads, _, fv = program_grads(model, xb, yb, tuple(programs), "sum", view=True)
            row = {"B": len(b), "D": variation(grads[0], grads[1]), "G": float(grads[0].abs().sum()),
                   "u": torch.finfo(dtype).eps / 2, "relu_zeros": fv.relu_zeros, "tied": fv.pool_tied_windows}
            if cfg.relu_pair:
                row["D_relu"] = variation(grads[0], grads[-1])
            for kind in cfg.reruns:
                row[f"D_{kind}"] = variation(grads[0], _rerun(kind, model, xb, yb, cfg.programs[0], device))
            rows.append(row)
        out[name] = rows
    return {"pairs": out, "kernel_paths": paths}


def measure_pairs(cfg: PairConfig, memo=None, progress=None) -> dict:
    """Every draw of ``cfg`` (``memo(key, fn)`` may cache each draw: the report's checkpoints):
    ``{"config", "kernel_paths", "pairs": {dtype: [rows]}}``."""
    data = _data(cfg)
    memo = memo or (lambda _key, fn: fn())
    pairs = {name: [] for name in cfg.dtypes}
    paths = {}
    for m in range(cfg.draws):
        res = memo(f"pairs-{cfg.key()}-{m}", lambda m=m: measure_draw(cfg, m, data))
        for name in cfg.dtypes:
            pairs[name] += res["pairs"][name]
        paths = res["kernel_paths"]
        if progress:
            progress(f"{cfg.model} w={cfg.width:g} {'BN' if cfg.bn else 'noBN'} {cfg.dataset} B={cfg.batch_size}: "
                     f"draw {m + 1}/{cfg.draws}", m + 1, cfg.draws)
    return {"config": {**asdict(cfg), "dtypes": list(cfg.dtypes)}, "kernel_paths": paths, "pairs": pairs}


def tau1(rows: list[dict], kinds=("threads", "order")) -> float | None:
    """The largest rerun variation D(P, P~) over ``rows`` and rerun ``kinds`` (Boustany eq. 3.12 with this machine's
    reruns); None when no rerun was measured."""
    vals = [r[f"D_{k}"] for r in rows for k in kinds if f"D_{k}" in r]
    return max(vals) if vals else None


def impacted(rows: list[dict], tau: float, key: str = "D") -> int:
    """Pairs whose ``key`` variation exceeds ``tau``."""
    return sum(r[key] > tau for r in rows)
