"""The training monitor's overhead on realistic networks (Park et al., App. J.2: 419 s / 237 s = 1.77x per epoch,
ResNet18 on CIFAR-10, GPU).

:func:`monitor_overhead` trains VGG11 or ResNet18 (:mod:`nsverify.workloads.models`, channel widths scaled down
so that a 2-core CPU runs them) on natural-image crops (:func:`nsverify.workloads.datasets.natural_crops`: 32x32
crops of scikit-learn's sample photographs, 8-bit pixels, so ties come from equal pixel values as in CIFAR), batch
64, SGD. Plain and monitored steps are timed side by side (:func:`nsverify.devices.time_side_by_side`): round i
runs a plain step and then a monitored step on batch i, so machine load hits both alike; the monitored step is
forward, :meth:`~.monitor.Monitor.check`, backward and the optimizer step, the plain one the same without the
monitor's hooks. Per step it keeps the times and what the monitor found (Algorithm-2-counted tied windows, kink
touches), so the overhead is reported as a function of tied windows per step.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from nsverify.devices import time_side_by_side
from nsverify.errors import NsverifyError
from nsverify.papers.park.monitor import Monitor

#: Park et al., App. J.2: 419 s with Algorithm 2 against 237 s without per epoch (ResNet18, CIFAR-10, GPU)
PAPER_OVERHEAD = 419 / 237
#: model -> (default width multiplier on CPU, BatchNorm): VGG11 as in Park's Table 2 (no BN), ResNet18 with BN
OVERHEAD_MODELS = {"vgg11": (0.25, False), "resnet18": (0.25, True)}
#: tied-window buckets of the per-step report
TIE_BUCKETS = ((0, 0), (1, 9), (10, 99), (100, None))


def _bucket(n: int) -> str:
    for lo, hi in TIE_BUCKETS:
        if n >= lo and (hi is None or n <= hi):
            return f"{lo}" if lo == hi else (f">={lo}" if hi is None else f"{lo}-{hi}")
    raise AssertionError(n)


def overhead_workload(model_name: str, steps: int, width: float | None = None, batch: int = 64, seed: int = 0,
                      device="cpu", dtype=torch.float32):
    """``(model, batches)``: the reference model at ``width`` (default: :data:`OVERHEAD_MODELS`) and ``steps``
    minibatches of natural crops, on ``device``/``dtype``."""
    from nsverify.workloads.datasets import natural_crops
    from nsverify.workloads.models import build_model

    if model_name not in OVERHEAD_MODELS:
        raise NsverifyError(f"monitor_overhead: unknown model {model_name!r}; choose from {', '.join(OVERHEAD_MODELS)}")
    if steps < 1 or batch < 1:
        raise NsverifyError(f"monitor_overhead: steps={steps}, batch={batch}; both must be >= 1")
    default_width, bn = OVERHEAD_MODELS[model_name]
    x, y = natural_crops(n=steps * batch, seed=seed)
    torch.manual_seed(seed)
    model = build_model(model_name, default_width if width is None else width, bn=bn).to(device=device, dtype=dtype)
    batches = [(x[i * batch:(i + 1) * batch].to(device, dtype), y[i * batch:(i + 1) * batch].to(device))
               for i in range(steps)]
    return model, batches


class TrainingSteps:
    """One model, its SGD optimizer, a :class:`~.monitor.Monitor` on it and a cycle of minibatches: ``plain()`` runs
    one training step on the next batch without the monitor's hooks, ``monitored()`` one with them and
    :meth:`~.monitor.Monitor.check` (its record appended to ``records``). Shared by :func:`monitor_overhead`, the
    asv benchmarks and ``asv_bench/ratios.py --area monitor``; call :meth:`close` at the end."""

    def __init__(self, model_name: str, steps: int, width: float | None = None, batch: int = 64, seed: int = 0,
                 device="cpu", dtype=torch.float32, lr: float = 0.05):
        self.model, self.batches = overhead_workload(model_name, steps, width, batch, seed, device, dtype)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=lr)
        self.monitor = Monitor(self.model)
        self.records: list = []
        self._plain_i = self._monitored_i = 0

    def _step(self, xb, yb, monitored: bool):
        loss = F.cross_entropy(self.model(xb), yb)
        if monitored:
            self.records.append(self.monitor.check())
        loss.backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)

    def plain(self):
        xb, yb = self.batches[self._plain_i % len(self.batches)]
        self._plain_i += 1
        with self.monitor.paused():
            self._step(xb, yb, False)

    def monitored(self):
        xb, yb = self.batches[self._monitored_i % len(self.batches)]
        self._monitored_i += 1
        self._step(xb, yb, True)

    def rewind(self):
        """Back to the first batch, records cleared (after warm-up steps)."""
        self.records.clear()
        self._plain_i = self._monitored_i = 0

    def close(self):
        self.monitor.close()


def monitor_overhead(model_name: str, steps: int = 12, *, width: float | None = None, batch: int = 64,
                     seed: int = 0, device="cpu", dtype=torch.float32, warmup: int = 1, lr: float = 0.05) -> dict:
    """Monitored / plain training-step time of ``model_name`` ("vgg11" or "resnet18") over ``steps`` batches of
    natural crops, measured side by side (see the module docstring).

    Returns ``{"model", "width", "batch", "steps", "device", "dtype", "plain_s", "monitored_s", "ratio"`` (median
    monitored step / median plain step), ``"paper_ratio"`` (1.77), ``"per_step": [{"tied_windows"`` (Algorithm 2's
    count), ``"tied_windows_all", "kink_touches", "tj_paths", "certified"`` (the step's verdict),
    ``"uncertified_layers"`` ([name, status, kink touches, tied windows, unchecked] of each layer whose P_l is not
    shown non-empty),
    ``"plain_s", "monitored_s", "ratio"}]``, ``"by_ties":
    [{"tied_windows": bucket, "steps", "ratio"}]`` (median of the per-step ratios in each bucket of tied windows per
    step), ``"certified": [correct steps, steps], "tj_paths"`` (:func:`tj_path_totals`)``}``. ``warmup`` plain and
    monitored steps come first, untimed."""
    device = torch.device(device)
    run = TrainingSteps(model_name, steps, width, batch, seed, device, dtype, lr)
    try:
        for _ in range(warmup):
            run.plain()
            run.monitored()
        run.rewind()
        t = time_side_by_side({"plain": run.plain, "monitored": run.monitored}, repeat=steps, warmup=0,
                              device=device)
    finally:
        run.close()
    per_step = []
    for p_s, m_s, rec in zip(t.samples["plain"], t.samples["monitored"], run.records):
        per_step.append({"tied_windows": sum(c.tied_positive for c in rec.layers),
                         "tied_windows_all": sum(c.tied_windows for c in rec.layers),
                         "kink_touches": sum(c.kink_touches for c in rec.layers), "tj_paths": rec.tj_paths,
                         "certified": rec.correct,
                         "uncertified_layers": [[c.name, c.status, c.kink_touches, c.tied_positive, c.unchecked]
                                                for c in rec.layers if c.status not in ("nonempty", "trivial")],
                         "plain_s": p_s, "monitored_s": m_s, "ratio": m_s / p_s})
    by_ties = []
    for lo, hi in TIE_BUCKETS:
        ratios = [r["ratio"] for r in per_step if r["tied_windows"] >= lo and (hi is None or r["tied_windows"] <= hi)]
        if ratios:
            by_ties.append({"tied_windows": _bucket(lo), "steps": len(ratios), "ratio": statistics.median(ratios)})
    good = sum(1 for r in run.records if r.correct == "yes")
    return {"model": model_name, "width": OVERHEAD_MODELS[model_name][0] if width is None else width,
            "batch": batch, "steps": steps, "device": str(device), "dtype": str(dtype).removeprefix("torch."),
            "plain_s": t.stat("plain", "median"), "monitored_s": t.stat("monitored", "median"),
            "ratio": t.ratio("monitored", "plain", "median"),
            "round_ratio_iqr": list(t.ratio_iqr("monitored", "plain")), "paper_ratio": PAPER_OVERHEAD,
            "per_step": per_step, "by_ties": by_ties, "certified": [good, len(run.records)],
            "tj_paths": tj_path_totals(run.records)}


def tj_path_totals(records: list) -> dict:
    """``{path: pairs}`` summed over steps: how often each T_j test of the monitor decided a tied pair
    (:data:`nsverify.papers.park.monitor.TJ_PATHS`)."""
    from nsverify.papers.park.monitor import TJ_PATHS

    return {k: sum(r.tj_paths[k] for r in records) for k in TJ_PATHS}


# ---------------------------------------------------------------------------------------------------------------
# The stored GPU runs of the overhead (nsverify/data/gpu/*.json): which is newest, which are stale

#: the stored GPU runs that measure the monitor's overhead: file name (:func:`~nsverify.claims.provenance.gpu_file`)
#: and the key of its overhead part. ``perf.json`` (``scripts/gpu/perf.py``): a list of :func:`monitor_overhead`
#: results (one per network and width); ``claims.json`` (``scripts/gpu/claims.py``): ``{network: experiments.overhead
#: result}``, at the width its ``sizes.park_width`` names.
GPU_OVERHEAD_FILES = (("perf", "monitor"), ("claims", "park_overhead"))

#: the networks' names as the report spells them
NETWORK_NAMES = {"vgg11": "VGG11", "resnet18": "ResNet18"}


@dataclass
class GpuOverheadRun:
    """One stored GPU measurement of the monitor's overhead, read by :func:`gpu_overhead_runs`.

    ``networks``: ``{(network, width): {"per_step": [{"plain_s", "monitored_s", "tied", "tied_positive"}],
    "plain_s", "monitored_s", "ratio", "batch"}}`` (the shape :func:`~.repro.overhead_claims` reads; network as
    :data:`NETWORK_NAMES` spells it); ``date``: the run's UTC date (ISO 8601); ``gpu``: the device's name;
    ``stale``: a newer stored run measured the overhead too (this one describes older code)."""

    name: str  # the file's stem: "perf", "claims"
    path: Path
    date: str
    commit: str | None
    gpu: str
    torch: str
    command: str
    networks: dict
    stale: bool = False
    newer: str | None = None  # the newest run's name, when stale

    def at_width(self, width: float = 1.0) -> dict:
        """``{network: measurement}`` at ``width`` (Park et al.'s comparison is at full width)."""
        return {n: m for (n, w), m in self.networks.items() if w == width}

    def describe(self) -> str:
        """One line: GPU, torch, date, commit and command (and 'stale' with the newer run)."""
        commit = f", commit {self.commit[:7]}" if self.commit else ""
        text = f"{self.gpu}, torch {self.torch}, {self.date}{commit}, `{self.command}`"
        return text + (f" [stale: {self.newer} is newer]" if self.stale else "")


def _provenance_fields(prov: dict) -> dict:
    """date, commit, gpu, torch, command of a provenance block in either spelling: the standard one
    (:func:`nsverify.claims.provenance.provenance`: date, commit, device) or perf.py's older one (date_utc,
    git_commit, gpu)."""
    return {"date": prov.get("date") or prov.get("date_utc"), "commit": prov.get("commit") or prov.get("git_commit"),
            "gpu": prov.get("gpu") or prov.get("device"), "torch": prov.get("torch"), "command": prov.get("command")}


def _networks(name: str, raw: dict, part) -> dict:
    """The overhead part of a stored run, keyed (network, width), in :func:`~.repro.overhead_claims`'s shape."""
    out = {}
    if name == "perf":
        for m in part:
            if not isinstance(m, dict) or not m.get("per_step"):
                continue
            steps = [{"plain_s": r["plain_s"], "monitored_s": r["monitored_s"],
                      "tied": r.get("tied_windows_all", r["tied_windows"]), "tied_positive": r["tied_windows"]}
                     for r in m["per_step"]]
            out[(NETWORK_NAMES.get(m["model"], m["model"]), float(m["width"]))] = {
                "per_step": steps, "plain_s": m["plain_s"], "monitored_s": m["monitored_s"], "ratio": m["ratio"],
                "batch": m.get("batch")}
    else:
        sizes = raw.get("sizes") or {}
        width = sizes.get("park_width")
        if width is None:  # a claims run names its width; without it the run cannot be compared at width 1
            return {}
        for net, o in part.items():
            if isinstance(o, dict) and o.get("per_step"):
                out[(NETWORK_NAMES.get(net.lower(), net), float(width))] = {**o, "batch": sizes.get("park_batch")}
    return out


def gpu_overhead_runs(data_dir: Path | str | None = None) -> list[GpuOverheadRun]:
    """Every stored GPU run that measured the monitor's overhead (:data:`GPU_OVERHEAD_FILES` under ``data_dir``,
    default ``nsverify/data/gpu``), newest first by the date of its provenance; every run but the newest is marked
    ``stale``. Dry runs (``"dry_run": true``, CPU rehearsals) and files without the overhead part are left out;
    a file whose provenance lacks its date, device or command raises
    :class:`~nsverify.claims.provenance.ProvenanceError` (a figure never enters the report without them)."""
    from nsverify.claims.provenance import DATA_DIR, ProvenanceError, load_measurement

    base = Path(data_dir) if data_dir is not None else DATA_DIR
    runs = []
    for name, key in GPU_OVERHEAD_FILES:
        path = base / f"{name}.json"
        raw = load_measurement(path, require_provenance=False)  # perf.py's older runs spell date as date_utc
        if raw is None or raw.get("dry_run") or not raw.get(key):
            continue
        prov = _provenance_fields(raw.get("provenance") or {})
        missing = [k for k in ("date", "gpu", "torch", "command") if not prov[k]]
        if missing:
            raise ProvenanceError(f"{path}: no provenance for its overhead figures (missing {', '.join(missing)}); "
                                  f"rerun {'scripts/gpu/' + name + '.py'} or delete the file.")
        nets = _networks(name, raw, raw[key])
        if nets:
            runs.append(GpuOverheadRun(name, path, networks=nets, **prov))
    runs.sort(key=lambda r: _utc(r.date), reverse=True)
    for r in runs[1:]:
        r.stale, r.newer = True, f"{runs[0].name}.json of {runs[0].date}"
    return runs


def _utc(date: str):
    """A provenance date as an aware UTC datetime (naive dates are read as UTC)."""
    import datetime as dt

    from nsverify.claims.provenance import ProvenanceError

    try:
        d = dt.datetime.fromisoformat(date)
    except ValueError as exc:
        raise ProvenanceError(f"provenance date {date!r} is not ISO 8601 (YYYY-MM-DDTHH:MM:SS+00:00)") from exc
    return d if d.tzinfo else d.replace(tzinfo=dt.timezone.utc)


def newest_gpu_run(data_dir: Path | str | None = None) -> GpuOverheadRun | None:
    """The newest stored GPU run of the monitor's overhead (:func:`gpu_overhead_runs`), or None without one. The
    GPU overhead claim and the report read this one; the older runs are stale."""
    runs = gpu_overhead_runs(data_dir)
    return runs[0] if runs else None


# ---------------------------------------------------------------------------------------------------------------
# CPU and GPU side by side

#: the stored CPU run of the monitor's overhead (``asv_bench/ratios.py --area monitor``: median of interleaved
#: rounds with the per-round IQR, both networks at both widths), with its provenance
CPU_RUN = Path(__file__).resolve().parents[2] / "data" / "monitor_cpu.json"


def cpu_overhead_run(path: Path | str = CPU_RUN) -> dict | None:
    """The stored CPU run: ``{"date", "commit", "device", "networks": {(network, width): {"ratio", "iqr",
    "rounds"}}}``, or None without the file. The ratio is the median monitored step over the median plain step of
    the interleaved rounds, the IQR that of the per-round ratios (:class:`nsverify.devices.SideBySide`)."""
    from nsverify.claims.provenance import load_measurement

    raw = load_measurement(path)
    if raw is None:
        return None
    prov = raw["provenance"]
    nets = {(NETWORK_NAMES.get(c["model"], c["model"]), float(c["width"])):
            {"ratio": c["ratio_median"], "iqr": tuple(c["round_ratio_iqr"]), "rounds": c["rounds"]}
            for c in raw["cases"]}
    return {"date": prov["date"], "commit": prov.get("commit"), "device": prov["device"], "networks": nets}


def side_by_side(cpu: dict | None, gpu: GpuOverheadRun | None) -> dict:
    """The monitor's overhead on the CPU and on the GPU next to each other, per network and width, each with the
    date (and commit) of its run, against Park et al.'s 1.77x (App. J.2: a GPU, full width): ``{"columns",
    "rows"}``. A GPU row at width 1 says whether the ratio is within 1.77x on its device class; the CPU ratio is
    never compared with a GPU figure."""
    keys = sorted(set(cpu["networks"] if cpu else ()) | set(gpu.networks if gpu else ()), key=lambda k: (k[0], -k[1]))
    when = lambda date, commit: f"{date[:10]}" + (f", {commit[:7]}" if commit else "")  # noqa: E731
    rows = []
    for net, width in keys:
        c = (cpu or {}).get("networks", {}).get((net, width))
        g = gpu.networks.get((net, width)) if gpu else None
        cpu_txt = (f"{c['ratio']:.2f}x (IQR {c['iqr'][0]:.2f}-{c['iqr'][1]:.2f}, {c['rounds']} rounds; "
                   f"{when(cpu['date'], cpu['commit'])})" if c else "not measured")
        if g:
            gpu_txt = f"{g['ratio']:.2f}x ({gpu.gpu}; {when(gpu.date, gpu.commit)}{'; stale' if gpu.stale else ''})"
            vs = ("within" if g["ratio"] <= round(PAPER_OVERHEAD, 2) else "above") + f" {PAPER_OVERHEAD:.2f}x" \
                if width == 1.0 else "n/a (Park et al. ran full width)"
        else:
            gpu_txt, vs = "not measured", "pending (no GPU run)" if width == 1.0 else "n/a (Park et al. ran full width)"
        rows.append([net, f"{width:g}", cpu_txt, gpu_txt, vs])
    return {"columns": ["network", "width", "CPU: monitored / plain step", "GPU: monitored / plain step",
                        f"GPU vs Park et al.'s {PAPER_OVERHEAD:.2f}x"], "rows": rows}
