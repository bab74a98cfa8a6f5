"""Monte Carlo volume of the numerical bifurcation zone (Boustany, Ch.3, Criteria 1, eqs 3.17-3.18).

M parameter draws (PyTorch default init, i.e. Kaiming-uniform, one seed per draw) x R minibatches; for each
dtype, each (draw, batch) pair gets D(P, Q) from ONE forward pass and two backward passes (P, Q differ only
in the backward rule).  A pair is *impacted* when D > tau[dtype]; a draw is impacted when any of its batches
is.  Reported: both shares with Hoeffding, McDiarmid and Clopper-Pearson intervals
(:mod:`nsverify.claims.stats`).

Resumable: every finished draw is appended to a JSON partial file (atomically); a rerun with the same
configuration skips finished draws (the thresholds are applied at the end, so they may change between runs).
Distributed: under ``torchrun`` (WORLD_SIZE > 1) draw m runs on rank m % world_size, with gloo on CPU and NCCL
on GPU; counts are all-reduced and the per-pair D values gathered, so every rank returns the same result,
identical to a 1-rank run with the same seeds.
"""
from __future__ import annotations

import copy
import hashlib
import json
import math
import os
import pickle
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from nsverify.claims.stats import share_intervals
from nsverify.devices import parse_device, parse_dtype
from nsverify.errors import NsverifyError
from nsverify.papers.zones.measure import check_dtype_device, program_grads, require_nonsmooth, threshold_for, variation

PARTIAL_SCHEMA = "nsverify.papers.zones.partial/1"


#: bounds of VolumeConfig: a width factor above 4 makes VGG/ResNet layers of 2048+ channels; 10^5 synthetic
#: images are tens of seconds to generate
MAX_WIDTH = 4.0
MAX_N_DATA = 100_000


@dataclass
class VolumeConfig:
    model: str = "lenet5"
    width: float = 1.0
    bn: bool = False
    dataset: str = "digits28"
    data_root: str | None = None
    n_data: int = 512
    batch_size: int = 64
    draws: int = 8
    batches: int = 4
    dtypes: list = field(default_factory=lambda: ["bfloat16", "float32", "float64"])
    programs: tuple = ("native", "minimal")
    norm: float = 1
    reduction: str = "mean"
    seed: int = 0
    device: str = "cpu"
    allow_slow: bool = False

    def __post_init__(self):
        from nsverify.errors import BadArgumentError, check_number

        check_number(self.width, "width", lo=0, lo_open=True, hi=MAX_WIDTH, hint="the channel/hidden width factor")
        for name, hi in (("n_data", MAX_N_DATA), ("batch_size", 65536), ("draws", 10**6), ("batches", 10**6)):
            check_number(getattr(self, name), name, integer=True, lo=1, hi=hi)
        check_number(self.seed, "seed", integer=True, lo=0, hi=2**63 - 1)
        if self.norm not in (1, 2, math.inf):
            raise BadArgumentError(f"norm={self.norm!r} is invalid: use 1 (eq 3.11), 2 or inf.")
        if not self.dtypes:
            raise BadArgumentError("dtypes is empty: give at least one, e.g. ['float32'].")
        if len(self.programs) != 2 or self.programs[0] == self.programs[1]:
            raise BadArgumentError(f"programs={self.programs!r}: give two different programs P, Q, e.g. "
                                   f"('native', 'minimal').")

    def key(self) -> str:
        """Hash of everything that changes the per-draw results (not ``draws``: runs can be extended)."""
        d = asdict(self)
        for k in ("draws", "allow_slow", "data_root"):
            d.pop(k)
        d["programs"] = list(d["programs"])
        return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]


def dist_info() -> tuple[int, int]:
    """(rank, world_size), initialising torch.distributed from torchrun's environment when needed."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return 0, 1
    import torch.distributed as dist

    if not dist.is_initialized():
        backend = "nccl" if torch.cuda.is_available() and os.environ.get("NSVERIFY_DIST_BACKEND") != "gloo" \
            else "gloo"
        dist.init_process_group(backend)
    return dist.get_rank(), dist.get_world_size()


def dist_cleanup() -> None:
    """Barrier and destroy the process group (if this module created one); safe to call always."""
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.barrier()
            dist.destroy_process_group()


def _draw_seed(seed: int, m: int) -> int:
    return (seed * 1_000_003 + m * 7919 + 12345) % (2**63)


class _Data:
    def __init__(self, cfg: VolumeConfig):
        from nsverify.errors import InputFileError
        from nsverify.workloads.datasets import get_dataset
        from nsverify.workloads.models import INPUT_SHAPE

        if cfg.model not in INPUT_SHAPE:
            raise NsverifyError(f"unknown model {cfg.model!r}; choose from {', '.join(INPUT_SHAPE)}.")
        try:
            self.x, self.y = get_dataset(cfg.dataset, cfg.data_root, cfg.n_data, cfg.seed, torch.float64)
        except (ValueError, EOFError, pickle.UnpicklingError, OSError) as exc:  # data files that are not the format
            raise InputFileError(f"the {cfg.dataset} files under {cfg.data_root!r} cannot be read as {cfg.dataset} "
                                 f"({type(exc).__name__}: {exc}); replace them with the original files.") from exc
        shape = tuple(self.x.shape[1:])
        if shape != INPUT_SHAPE[cfg.model]:
            fit = sorted(m for m, s in INPUT_SHAPE.items() if s == shape)
            raise NsverifyError(f"model {cfg.model!r} takes {'x'.join(map(str, INPUT_SHAPE[cfg.model]))} inputs but "
                                f"dataset {cfg.dataset!r} gives {'x'.join(map(str, shape))}; use a model among "
                                f"{', '.join(fit) or 'none'} or another dataset.")
        need = cfg.batch_size * cfg.batches
        if need > len(self.x):
            raise NsverifyError(f"{cfg.batches} batches of {cfg.batch_size} need {need} samples but dataset "
                                f"{cfg.dataset!r} has {len(self.x)}; lower --batches/--batch-size or raise --n-data.")

    def batches(self, cfg: VolumeConfig, m: int):
        g = torch.Generator().manual_seed(_draw_seed(cfg.seed, m))
        idx = torch.randperm(len(self.x), generator=g)[: cfg.batch_size * cfg.batches]
        return [(self.x[b], self.y[b]) for b in idx.split(cfg.batch_size)]


def run_draw(cfg: VolumeConfig, m: int, data: _Data, device: torch.device) -> dict:
    """{dtype: [[D, relu_zeros, tied_windows], ... one per batch]} for draw m."""
    from nsverify.workloads.models import build_model

    torch.manual_seed(_draw_seed(cfg.seed, m))
    base = build_model(cfg.model, cfg.width, cfg.bn)
    require_nonsmooth(base)
    out = {}
    batches = data.batches(cfg, m)
    for name in cfg.dtypes:
        dtype = parse_dtype(name)
        model = copy.deepcopy(base).to(device=device, dtype=dtype)
        rows = []
        for x, y in batches:
            (gp, gq), _, fv = program_grads(model, x.to(device, dtype), y.to(device), cfg.programs,
                                            cfg.reduction, view=True)
            rows.append([variation(gp, gq, cfg.norm), fv.relu_zeros, fv.pool_tied_windows])
        out[name] = rows
    return out


def _partial_paths(path: Path) -> list[Path]:
    return [path] + sorted(path.parent.glob(path.name + ".rank*"))


def load_partial(path: str | Path | None, cfg: VolumeConfig) -> dict:
    """Finished draws from a partial file (and its per-rank siblings); {} when none exist."""
    if path is None:
        return {}
    done: dict = {}
    for p in _partial_paths(Path(path)):
        if not p.exists():
            continue
        try:
            blob = json.loads(p.read_bytes().decode("utf-8"))
        except (OSError, ValueError) as exc:  # ValueError: not UTF-8, not JSON
            raise NsverifyError(f"resume file {str(p)!r} is unreadable or corrupted ({exc}); delete it to start "
                                f"over.") from exc
        if not isinstance(blob, dict) or blob.get("schema") != PARTIAL_SCHEMA or not isinstance(
                blob.get("draws"), dict):
            raise NsverifyError(f"resume file {str(p)!r} is not a zones partial-results file (schema "
                                f"{PARTIAL_SCHEMA}); choose another --resume path or delete it.")
        if blob.get("key") != cfg.key():
            raise NsverifyError(
                f"resume file {str(p)!r} belongs to another configuration (model, data, dtypes, batch size, "
                f"seed, ... differ); delete it or choose another --resume path.")
        try:
            draws = {int(k): v for k, v in blob["draws"].items()}
            ok = all(isinstance(v, dict) and all(isinstance(rows, list) for rows in v.values()) for v in draws.values())
        except ValueError:
            ok = False
        if not ok:
            raise NsverifyError(f"resume file {str(p)!r} is corrupted (its draws are not draw -> {{dtype: rows}}); "
                                f"delete it to start over.")
        done.update(draws)
    return done


def _save_partial(path: Path, cfg: VolumeConfig, draws: dict) -> None:
    from nsverify.files import atomic_write_text

    path.parent.mkdir(parents=True, exist_ok=True)
    blob = {"schema": PARTIAL_SCHEMA, "key": cfg.key(), "config": asdict(cfg),
            "draws": {str(k): v for k, v in sorted(draws.items())}}
    atomic_write_text(path, json.dumps(blob))


def _progress_default(msg, done=None, total=None):
    count = f" {done}/{total}" if done is not None else ""
    print(f"[zones{count}] {msg}", file=sys.stderr, flush=True)


def estimate_volume(cfg: VolumeConfig, thresholds: dict, resume: str | Path | None = None, progress=None,
                    alpha: float = 0.05) -> dict:
    """Run (or resume) the estimator; return shares with intervals per dtype (same result on every rank)."""
    progress = progress or _progress_default
    device = parse_device(cfg.device)
    for name in cfg.dtypes:
        check_dtype_device(parse_dtype(name), device, cfg.allow_slow)
        threshold_for(thresholds, name)  # fail before any work when a threshold is missing
    rank, world = dist_info()
    if device.type == "cuda" and world > 1:
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", rank)))
    done = load_partial(resume, cfg)
    own_path = None if resume is None else (Path(resume) if world == 1 else Path(f"{resume}.rank{rank}"))
    mine = {m: done[m] for m in done if m % world == rank and m < cfg.draws}
    todo = [m for m in range(cfg.draws) if m % world == rank and m not in done]
    data = _Data(cfg)
    if done:
        progress(f"rank {rank}: resuming, {len(mine)} of my draws already done", len(mine), len(mine) + len(todo))
    t0 = time.perf_counter()
    for i, m in enumerate(todo):
        mine[m] = run_draw(cfg, m, data, device)
        if own_path is not None:
            _save_partial(own_path, cfg, {**{k: v for k, v in done.items() if k % world == rank}, **mine})
        progress(f"rank {rank}/{world}: draw {m} done ({time.perf_counter() - t0:.1f}s)", i + 1, len(todo))
    elapsed = time.perf_counter() - t0
    records = _gather(mine, world)
    extra = {"world_size": world, "rank": rank, "elapsed_s_rank": elapsed, "computed_draws_rank": len(todo)}
    return summarize(cfg, records, thresholds, alpha, extra=extra, reduce_counts=(world > 1))


def _gather(mine: dict, world: int) -> dict:
    if world == 1:
        return mine
    import torch.distributed as dist

    parts = [None] * world
    dist.all_gather_object(parts, mine)
    merged = {}
    for p in parts:
        merged.update(p)
    return merged


def _counts(cfg, records, thresholds):
    """(draws impacted, pairs impacted) per dtype, in the order of cfg.dtypes, over ``records``."""
    out = []
    for name in cfg.dtypes:
        tau = threshold_for(thresholds, name)
        kd = kp = 0
        for rec in records.values():
            hits = [row[0] > tau for row in rec[name]]
            kd += any(hits)
            kp += sum(hits)
        out += [kd, kp]
    return out


def summarize(cfg: VolumeConfig, records: dict, thresholds: dict, alpha: float = 0.05, extra=None,
              reduce_counts: bool = False) -> dict:
    records = {m: r for m, r in records.items() if m < cfg.draws}
    if reduce_counts:  # all-reduce the per-rank counts (each rank counts the draws it owns)
        import torch.distributed as dist

        rank, world = dist.get_rank(), dist.get_world_size()
        local = torch.tensor(_counts(cfg, {m: r for m, r in records.items() if m % world == rank}, thresholds),
                             dtype=torch.int64)
        if dist.get_backend() == "nccl":
            local = local.cuda()
        dist.all_reduce(local)
        counts = [int(v) for v in local.cpu()]
    else:
        counts = _counts(cfg, records, thresholds)
    m_done = len(records)
    result = {"config": asdict(cfg), "thresholds": {k: thresholds[k] for k in cfg.dtypes}, "draws_done": m_done,
              "alpha": alpha, "dtypes": {}}
    for i, name in enumerate(cfg.dtypes):
        kd, kp = counts[2 * i], counts[2 * i + 1]
        rows = [row for m in sorted(records) for row in records[m][name]]
        ds = [row[0] for row in rows]
        nz = [d for d in ds if d > 0]
        result["dtypes"][name] = {
            "draw_share": share_intervals(kd, m_done, alpha),
            "pair_share": share_intervals(kp, m_done * cfg.batches, alpha, m=m_done, r=cfg.batches),
            "D": ds,
            "nonzero_share": len(nz) / len(ds) if ds else float("nan"),
            "max_D": max(ds) if ds else None,
            "min_nonzero_D": min(nz) if nz else None,
            "mean_relu_zeros": sum(r[1] for r in rows) / len(rows) if rows else None,
            "mean_tied_windows": sum(r[2] for r in rows) / len(rows) if rows else None,
        }
    result.update(extra or {})
    return result
