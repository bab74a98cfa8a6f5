"""Measure, once and side by side, the two numbers the zones issue asks for:

1. samples/s of the one-forward-two-backward estimator vs the naive two-model approach (target >= 1.3x);
2. the speedup of the volume estimator from 2 torchrun ranks on 2 cores (gloo, 1 thread per rank) against
   1 rank using both cores.

    PYTHONPATH=. python3 scripts/bench_zones.py [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]


def per_sample(fn, batch, reps):
    fn()  # warm-up
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    ts.sort()
    return batch / ts[len(ts) // 2]  # samples per second at the median time


def ratio_bench(reps: int) -> dict:
    from nsverify.papers.zones import bench as bench

    out = {}
    for name in bench.WORKLOADS:
        model, x, y = bench.setup_workload(name)
        models = bench.make_two_models(model)
        # interleave the two methods so machine load hits both alike
        one, two = [], []
        for _ in range(3):
            one.append(per_sample(lambda m=model, x=x, y=y: bench.d_one_forward(m, x, y), len(x), reps))
            two.append(per_sample(lambda ms=models, x=x, y=y: bench.d_two_models(ms, x, y), len(x), reps))
        a, b = max(one), max(two)
        out[name] = {"one_forward_samples_s": a, "two_models_samples_s": b, "ratio": a / b}
        print(f"{name}: one forward + two backward {a:.1f} samples/s, two models {b:.1f} samples/s, "
              f"ratio {a / b:.2f}x", flush=True)
    return out


def _port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def dist_bench(draws: int) -> dict:
    args = ["-m", "nsverify", "zones", "volume", "--model", "lenet5", "--draws", str(draws), "--batches", "2",
            "--batch-size", "64", "--dtypes", "float32", "--tau", "float32=1e-8"]
    res = {}
    for nproc, threads in ((1, 2), (2, 1)):
        env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": str(threads)}
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc), "--master_addr",
               "127.0.0.1", "--master_port", str(_port()), *args]
        t = time.perf_counter()
        subprocess.run(cmd, cwd=ROOT, env=env, check=True, capture_output=True)
        res[f"{nproc}rank_{threads}thread_s"] = time.perf_counter() - t
    res["speedup_2_ranks"] = res["1rank_2thread_s"] / res["2rank_1thread_s"]
    print(f"volume estimator, {draws} draws: 1 rank x 2 threads {res['1rank_2thread_s']:.1f}s, 2 ranks x 1 thread "
          f"{res['2rank_1thread_s']:.1f}s, speedup {res['speedup_2_ranks']:.2f}x (wall clock, incl. start-up)")
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--json")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--draws", type=int, default=8)
    a = ap.parse_args(argv)
    load = os.getloadavg()[0]
    print(f"torch {torch.__version__}, {os.cpu_count()} cores, load average {load:.1f}")
    out = {"ratio": ratio_bench(a.reps), "distributed": dist_bench(a.draws), "load_average": load}
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
