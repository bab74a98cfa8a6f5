"""Print the benchmark ratios, each measured side by side in one run (candidates interleaved round by round).

    python asv_bench/ratios.py                                   # areas ad_ops, oracle, zones; CPU
    python asv_bench/ratios.py --area ad_ops --dtype bfloat16 --repeat 11 --threads 2
    python asv_bench/ratios.py --area zones_dist                 # torchrun ranks vs threads (slow, opt-in)
    python asv_bench/ratios.py --area ad_ops,monitor,optim       # issue 15's CPU targets in one run (opt-in areas)
    python asv_bench/ratios.py --small --json ratios.json        # tiny sizes; every sample written as JSON
    python asv_bench/ratios.py --area oracle_models              # issue 34's real models: check_module vs a step
    python asv_bench/ratios.py --area oracle_models --cases a,e --json before.json   # some of its cases

asv (``tox -e bench``) keeps the history of absolute times; this command answers "how many times slower is A
than B on this machine now".  A ratio is candidate time / baseline time; the median-of-samples ratio is
checked against the target where the issues set one, and the min-of-samples ratio is printed next to it.
Workloads come from ``benchmarks/common.py``; timing from :func:`nsverify.devices.time_side_by_side`.
Exit status: 0 after measuring (a missed target is reported, not an error), 2 for bad arguments.
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import torch  # noqa: E402
from benchmarks import common  # noqa: E402  (puts the working tree on sys.path if nsverify is not installed)

from nsverify import devices  # noqa: E402
from nsverify.errors import NsverifyError  # noqa: E402


@dataclass(frozen=True)
class Pair:
    """``candidate`` time / ``baseline`` time; ``target``: (">=" or "<=", bound) on the median ratio."""

    candidate: str
    baseline: str
    target: tuple[str, float] | None = None


@dataclass
class RatioCase:
    """Callables timed together (interleaved) and the ratios read from them; ``info`` values may be callables,
    read after the timing (e.g. what the timed steps saw)."""

    name: str
    fns: dict[str, Callable[[], object]]
    pairs: list[Pair]
    info: dict = field(default_factory=dict)
    repeat: int | None = None  # overrides --repeat (e.g. 1 for multi-second subprocess runs)
    warmup: int | None = None


@dataclass(frozen=True)
class Area:
    cases: Callable[[torch.dtype, torch.device, bool], Iterator[RatioCase]]
    dtypes: tuple[str, ...] | None  # default dtypes; None: independent of dtype (exact rationals)
    cpu_only: bool = False
    default: bool = True


# ---------------------------------------------------------------------------------------------------------------
# Cases per area


def ad_ops_cases(dtype, device, small) -> Iterator[RatioCase]:
    shape = common.SMALL_AD_SHAPE if small else common.AD_SHAPE
    gpu = device.type == "cuda"
    pool_target = ("<=", 1.2 if gpu else 1.5)  # issue 15: fused minimal/hybrid max pool
    pairs = [Pair("relu_s", "relu"), Pair("maxpool_native", "max_pool2d"),
             Pair("maxpool_minimal", "max_pool2d", pool_target), Pair("maxpool_hybrid", "max_pool2d", pool_target),
             Pair("maxpool_minimal@reference", "max_pool2d"), Pair("maxpool_hybrid@reference", "max_pool2d"),
             Pair("maxpool_minimal_overlap", "max_pool2d_overlap"),
             Pair("maxpool_hybrid_overlap", "max_pool2d_overlap")]
    ops = sorted({o for p in pairs for o in (p.candidate, p.baseline)})
    backend = common.pool_backend(device)
    for ties in (False, True):
        x = common.pool_input(dtype, shape, ties, device)
        fns = {o: (lambda o=o, x=x: common.fwd_bwd(o, x)) for o in ops}
        yield RatioCase(f"{'plateaus (ties)' if ties else 'randn'} {'x'.join(map(str, shape))}", fns, pairs,
                   info={"minimal/hybrid backward": backend})


#: the monitor's target, at both widths (Park et al. report 1.77x on a GPU; on CPU it stays within 1.15x)
MONITOR_TARGET = 1.15


def monitor_widths(small: bool) -> list[tuple[str, float | None]]:
    """The monitor area's (network, width) cases: each network at its reduced width and at full width (width 1),
    so that both are tracked; ``small``: VGG11 at width 1/16 only (checks that the case runs)."""
    from nsverify.papers.park.overhead import OVERHEAD_MODELS

    return [("vgg11", None)] if small else [(n, w) for n in common.MONITOR_MODELS for w in (OVERHEAD_MODELS[n][0], 1.0)]


def monitor_cases(dtype, device, small) -> Iterator[RatioCase]:
    """Park's monitor: monitored / plain training step, VGG11 / ResNet18 on natural crops, at the reduced width
    and at full width (width 1), so that both are tracked (:func:`monitor_widths`)."""
    from nsverify.papers.park.overhead import tj_path_totals

    for name, width in monitor_widths(small):
        run = common.monitor_steps(name, dtype, device, small, steps=4 if small else 12, width=width)
        run.plain()
        run.monitored()
        run.rewind()
        ties = run.records  # filled while the case is measured

        def tied_per_step(records=ties):
            per = [sum(c.tied_positive for c in r.layers) for r in records]
            return f"{min(per)}-{max(per)}" if per else "-"

        yield RatioCase(f"{name} (width {'1/16' if small else f'{width:g}'}), batch "
                   f"{len(run.batches[0][0])}, natural crops: training step",
                   {"plain": run.plain, "monitored": run.monitored},
                   [Pair("monitored", "plain", ("<=", MONITOR_TARGET))],
                   info={"tied windows per step": tied_per_step,
                         "T_j pairs decided by (flat/patch/field/exact)": lambda records=ties: "/".join(
                             str(v) for v in tj_path_totals(records).values())}, warmup=0)
        run.close()


def optim_cases(dtype, device, small) -> Iterator[RatioCase]:
    """INNAprop's foreach step against AdamW's (nsverify.papers.innaprop.checks.bench_optimizer)."""
    from nsverify.papers.innaprop.checks import bench_optimizer

    for n in (10_000,) if small else (10_000, 1_000_000, 10_000_000):
        opts = {kind: bench_optimizer(kind, n, dtype, device) for kind in ("adamw", "innaprop")}
        yield RatioCase(f"{n:,} parameters: optimizer step", {k: o.step for k, o in opts.items()},
                   [Pair("innaprop", "adamw", ("<=", 1.15))])


def oracle_cases(dtype, device, small) -> Iterator[RatioCase]:
    import nsverify

    for k in (2, 4) if small else (4, 8):
        fn, w = common.kink_net(k)
        rows = nsverify.oracle.kink_rows(fn, w)
        naive = nsverify.oracle.naive_enumeration_lps
        lps = nsverify.check_gradient(fn, w).stats["lps"]
        yield RatioCase(f"kink net, k={k} kink sites", {"naive": lambda rows=rows, naive=naive: naive(rows),
                                                    "pruned": lambda fn=fn, w=w: nsverify.check_gradient(fn, w)},
                   [Pair("naive", "pruned")], info={"pruned_lps": lps, "naive_lps": 2**k})
    k = 4 if small else 10
    fn, w = common.separable_program(k)
    v = nsverify.check_gradient(fn, w, progress=False)
    yield RatioCase(f"separable, k={k} kinks ({2**k} pieces): plain enumeration vs separable blocks",
               {"plain": lambda fn=fn, w=w: nsverify.check_gradient(fn, w, progress=False, shortcuts=False),
                "blocks": lambda fn=fn, w=w: nsverify.check_gradient(fn, w, progress=False)},
               [Pair("plain", "blocks", None if small else (">=", 9.0))],
               info={"block_traces": v.stats["traces"], "plain_traces": 2**k, "target": "blocks <= 1 s"},
               repeat=3 if not small else None)
    if not small:
        net, loss, x, y = common.lenet_tie()

        def float_step(net=net, loss=loss, x=x, y=y):
            net.zero_grad()
            loss(net(x), y).backward()

        yield RatioCase("LeNet-5 size, parameter ties (61,706 parameters, batch 2): check_module vs one float backward",
                   {"check_module": lambda: nsverify.check_module(net, loss, x, y, progress=False),
                    "float_backward": float_step},
                   [Pair("check_module", "float_backward")],
                   info={"parameters": sum(p.numel() for p in net.parameters()), "target": "check_module <= 10 s"},
                   repeat=3, warmup=1)


#: issue 34's real-model cases: label -> (real_models.build arguments, time_limit, what the issue asks)
ORACLE_MODEL_CASES = {
    "w1/8": (dict(kind="resnet18", width=0.125), 60, "curve"),
    "w1/4": (dict(kind="resnet18", width=0.25), 60, "curve"),
    "w1/2": (dict(kind="resnet18", width=0.5), 60, "curve"),
    "a": (dict(kind="resnet18", width=1.0), 60, "decided <= 60 s"),
    "b": (dict(kind="resnet18", width=1.0, train=True), 60, "decided <= 60 s"),
    "c": (dict(kind="vgg11_bn", width=1.0), 60, "decided <= 60 s"),
    "d": (dict(kind="opt_decoder", width=1.0), 60, "decided <= 60 s"),
    "e": (dict(kind="resnet18", width=1.0, lemma2=True), 10, "not_member <= 10 s"),
}
#: the labels run by --small (one small case per workload kind)
SMALL_ORACLE_MODEL_CASES = {
    "w1/8": (dict(kind="resnet18", width=0.125), 3, "curve"),
    "d/16": (dict(kind="opt_decoder", width=1 / 16), 3, "runs"),
    "e/8": (dict(kind="resnet18", width=0.125, lemma2=True), 3, "runs"),
}
#: --cases: the labels to run (None: all of the table's)
ORACLE_MODELS_ONLY: list[str] | None = None


def oracle_models_cases(dtype, device, small) -> Iterator[RatioCase]:
    """Issue 34's targets (a)-(e) and ResNet-18's time against parameters (widths 1/8, 1/4, 1/2; width 1 is (a)):
    ``check_module(model, loss, x, y, wrt="parameters", time_limit=T, on_limit="unknown")`` side by side with one
    plain float32 forward and backward of the same model and batch (models:
    :func:`nsverify.workloads.real_models.build`).  Each check runs once (minutes in all); its outcome, its wall
    time and whether it returned within the promised 1.1 x T + 1 s are printed."""
    import gc
    import time

    import nsverify
    from nsverify.workloads import real_models

    table = SMALL_ORACLE_MODEL_CASES if small else ORACLE_MODEL_CASES
    for label in ORACLE_MODELS_ONLY or list(table):
        if label not in table:
            raise NsverifyError(f"--cases {label}: choose from {', '.join(table)}")
        spec, limit, target = table[label]
        model, loss, x, y = real_models.build(**spec)
        seen: dict = {}

        def check(model=model, loss=loss, x=x, y=y, seen=seen, limit=limit):
            t0 = time.perf_counter()
            v = nsverify.check_module(model, loss, x, y, wrt="parameters", time_limit=limit, on_limit="unknown",
                                      progress=False)
            seen["wall_s"] = round(time.perf_counter() - t0, 2)
            seen["outcome"], seen["reason"] = v.status, v.reason
            seen["certificate"] = (v.certificate or {}).get("kind")

        def float_step(model=model, loss=loss, x=x, y=y):
            model.zero_grad()
            loss(model(x), y).backward()

        gc.collect()  # the previous case's exact numbers: not this case's float step
        float_step()  # the first backward pays one-off set-up costs: not part of a training step
        steps = []
        for _ in range(3):  # one sample in the timed round: also the fastest of three here, against load spikes
            t0 = time.perf_counter()
            float_step()
            steps.append(time.perf_counter() - t0)
        mode = "train" if spec.get("train") else "eval"
        name = (f"({label}) {spec['kind']}{' + Lemma 2 term' if spec.get('lemma2') else ''} width "
                f"{spec.get('width', 1.0):g} {mode}, float32, batch {len(x)}, time_limit {limit}")
        # the float step first in each round: right after a check, freeing (and the cyclic collector's passes
        # over) the check's exact numbers would land in the float step's time
        yield RatioCase(name, {"float_step": float_step, "check_module": check},
                        [Pair("check_module", "float_step")],
                        info={"parameters": sum(p.numel() for p in model.parameters()), "target": target,
                              "time_limit": limit, "float_step_min3_s": round(min(steps), 4),
                              "wall_s": lambda seen=seen: seen.get("wall_s"),
                              "within_1.1T+1": lambda seen=seen, limit=limit: (
                                  None if "wall_s" not in seen else seen["wall_s"] <= 1.1 * limit + 1),
                              "outcome": lambda seen=seen: seen.get("outcome"),
                              "reason": lambda seen=seen: seen.get("reason"),
                              "certificate": lambda seen=seen: seen.get("certificate")},
                        repeat=1, warmup=0)


def zones_cases(dtype, device, small) -> Iterator[RatioCase]:
    for name in ("lenet5",) if small else tuple(common.ZONE_WORKLOADS):
        model, x, y = common.zone_workload(name, dtype, device, batch=8 if small else None)
        models = common.two_models(model)
        yield RatioCase(f"{name}, batch {len(x)}: D(native, minimal)",
                   {"one_forward": lambda m=model, x=x, y=y: common.d_one_forward(m, x, y),
                    "two_models": lambda ms=models, x=x, y=y: common.d_two_models(ms, x, y)},
                   [Pair("two_models", "one_forward", (">=", 1.3))])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def zones_dist_cases(dtype, device, small) -> Iterator[RatioCase]:
    """The zone volume estimator on 2 cores: 2 torchrun ranks x 1 thread against 1 rank x 2 threads."""
    draws = 2 if small else 8
    args = ["-m", "nsverify", "zones", "volume", "--model", "lenet5", "--draws", str(draws), "--batches", "2",
            "--batch-size", "64", "--dtypes", "float32", "--tau", "float32=1e-8"]

    def launcher(nproc: int, threads: int):
        def run():
            env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": str(threads)}
            cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc),
                   "--master_addr", "127.0.0.1", "--master_port", str(_free_port()), *args]
            subprocess.run(cmd, cwd=ROOT, env=env, check=True, capture_output=True)
        return run

    yield RatioCase(f"zones volume, lenet5, {draws} draws (wall clock incl. start-up)",
               {"1rank_2threads": launcher(1, 2), "2ranks_1thread": launcher(2, 1)},
               [Pair("1rank_2threads", "2ranks_1thread")], repeat=1, warmup=0)


AREAS = {
    "ad_ops": Area(ad_ops_cases, ("float32", "bfloat16")),
    "oracle": Area(oracle_cases, None, cpu_only=True),
    "zones": Area(zones_cases, ("float32",)),
    "zones_dist": Area(zones_dist_cases, ("float32",), cpu_only=True, default=False),
    "monitor": Area(monitor_cases, ("float32",), default=False),
    "optim": Area(optim_cases, ("float32",), default=False),
    "oracle_models": Area(oracle_models_cases, ("float32",), cpu_only=True, default=False),
}


# ---------------------------------------------------------------------------------------------------------------
# Measuring and printing


def _met(ratio: float, target) -> bool | None:
    if target is None:
        return None
    op, bound = target
    return ratio >= bound if op == ">=" else ratio <= bound


def measure(case: RatioCase, *, repeat: int, warmup: int, device) -> dict:
    t = devices.time_side_by_side(case.fns, repeat=case.repeat or repeat,
                                  warmup=warmup if case.warmup is None else case.warmup, device=device)
    ratios = []
    for p in case.pairs:
        med, best = t.ratio(p.candidate, p.baseline, "median"), t.ratio(p.candidate, p.baseline, "min")
        iqr = t.ratio_iqr(p.candidate, p.baseline)
        ratios.append({"candidate": p.candidate, "baseline": p.baseline, "ratio_median": med, "ratio_min": best,
                       "round_ratio_iqr": list(iqr),
                       "candidate_median_s": t.stat(p.candidate, "median"),
                       "baseline_median_s": t.stat(p.baseline, "median"),
                       "target": None if p.target is None else f"{p.target[0]} {p.target[1]:g}",
                       "met": _met(med, p.target)})
    info = {k: v() if callable(v) else v for k, v in case.info.items()}  # callables: read after the timing
    return {"case": case.name, "info": info, "ratios": ratios, "timing": t.to_json()}


def _print(area: str, dtype_label: str, res: dict) -> None:
    info = ", ".join(f"{k} {v}" for k, v in res["info"].items())
    print(f"\n{area} | {dtype_label} | {res['case']} ({res['timing']['rounds']} rounds{'; ' + info if info else ''})")
    for r in res["ratios"]:
        verdict = "" if r["met"] is None else f"  target {r['target']}: {'met' if r['met'] else 'MISSED'}"
        print(f"  {r['candidate']:24s} {r['candidate_median_s'] * 1e3:10.2f} ms  vs  {r['baseline']:20s} "
              f"{r['baseline_median_s'] * 1e3:10.2f} ms   ratio {r['ratio_median']:6.2f}x "
              f"(min {r['ratio_min']:.2f}x, per-round IQR {r['round_ratio_iqr'][0]:.2f}-{r['round_ratio_iqr'][1]:.2f}x)"
              f"{verdict}", flush=True)


def _csv(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 epilog=f"areas: {', '.join(AREAS)} (zones_dist only when named)")
    ap.add_argument("--area", type=_csv, default=[a for a, spec in AREAS.items() if spec.default],
                    help="comma-separated areas (default: %(default)s)")
    ap.add_argument("--dtype", type=_csv, default=None,
                    help="comma-separated dtypes (default: each area's own, e.g. float32,bfloat16 for ad_ops)")
    ap.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")
    ap.add_argument("--repeat", type=int, default=15,
                    help="timed interleaved rounds per case (default 15: a median with its interquartile range)")
    ap.add_argument("--warmup", type=int, default=1, help="untimed rounds first (default 1)")
    ap.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    ap.add_argument("--small", action="store_true", help="tiny sizes: checks that every case runs")
    ap.add_argument("--json", type=Path, default=None, help="write every sample and ratio to this file")
    ap.add_argument("--cases", type=_csv, default=None,
                    help="oracle_models only: the cases to run, comma-separated labels (default all: "
                         f"{', '.join(ORACLE_MODEL_CASES)}; with --small: {', '.join(SMALL_ORACLE_MODEL_CASES)})")
    args = ap.parse_args(argv)
    unknown = [a for a in args.area if a not in AREAS]
    if unknown or not args.area:
        ap.error(f"--area {','.join(unknown) or '(empty)'}: choose from {', '.join(AREAS)}")
    if args.repeat < 1 or args.warmup < 0 or (args.threads is not None and args.threads < 1):
        ap.error("--repeat and --threads must be >= 1, --warmup >= 0")
    try:
        args.dtype = None if args.dtype is None else [devices.dtype_name(devices.parse_dtype(d)) for d in args.dtype]
        args.device_obj = devices.parse_device(args.device)
    except NsverifyError as exc:
        ap.error(str(exc))
    table = SMALL_ORACLE_MODEL_CASES if args.small else ORACLE_MODEL_CASES
    bad = [c for c in args.cases or [] if c not in table]
    if bad or args.cases == []:
        ap.error(f"--cases {','.join(bad) or '(empty)'}: choose from {', '.join(table)}")
    if args.json is not None and (args.json.is_dir() or not args.json.parent.is_dir()):
        ap.error(f"--json {args.json}: give a file path in an existing directory")
    return args


def main(argv=None) -> int:
    global ORACLE_MODELS_ONLY
    args = parse_args(argv)
    ORACLE_MODELS_ONLY = args.cases
    results = []
    print(f"torch {torch.__version__}, device {args.device}, threads {args.threads or torch.get_num_threads()}, "
          f"load average {os.getloadavg()[0]:.1f}", flush=True)
    with devices.torch_threads(args.threads):
        for area in args.area:
            spec = AREAS[area]
            if spec.cpu_only and args.device_obj.type != "cpu":
                print(f"\n{area}: skipped (runs on CPU only)")
                continue
            for dtype in (["float64 (exact)"] if spec.dtypes is None else args.dtype or list(spec.dtypes)):
                if spec.dtypes is not None:
                    try:
                        dt, dev = common.resolve(dtype, args.device)
                    except NotImplementedError as exc:
                        print(f"\n{area} | {dtype}: {exc}")
                        continue
                else:
                    dt, dev = torch.float64, args.device_obj
                for case in spec.cases(dt, dev, args.small):
                    res = measure(case, repeat=args.repeat, warmup=args.warmup, device=dev)
                    _print(area, dtype, res)
                    results.append({"area": area, "dtype": dtype, **res})
    if args.json is not None:
        meta = {"torch": torch.__version__, "device": args.device, "threads": torch.get_num_threads()
                if args.threads is None else args.threads, "small": args.small, "repeat": args.repeat,
                "load_average": os.getloadavg()[0], "cpu_count": os.cpu_count()}
        args.json.write_text(json.dumps({"schema": "nsverify.bench_ratios/1", "meta": meta, "cases": results},
                                        indent=1))
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
