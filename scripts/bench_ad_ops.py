"""Measure the AD-variant ops' fwd+bwd time ratios side by side, once (the issue's numbers).

Usage: PYTHONPATH=. python3 scripts/bench_ad_ops.py [--repeat 7] [--threads N] [--small]
Interleaves the candidates and their baseline in each round, reports medians and ratios.
"""
import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "asv_bench"))
from benchmarks.ad_ops import _inputs, fwd_bwd  # noqa: E402

PAIRS = [("relu_s", "relu"), ("maxpool_native", "max_pool2d"), ("maxpool_minimal", "max_pool2d"),
         ("maxpool_hybrid", "max_pool2d"), ("maxpool_minimal_overlap", "max_pool2d_overlap")]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--small", action="store_true", help="a small input (smoke test)")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    shape = (8, 8, 16, 16) if args.small else (128, 64, 32, 32)
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, shape {shape}")
    for dtype in [torch.float32, torch.bfloat16]:
        for ties in [False, True]:
            x = _inputs(dtype, shape, ties)
            ops = sorted({o for pair in PAIRS for o in pair})
            times = {o: [] for o in ops}
            for o in ops:
                fwd_bwd(o, x)  # warm up
            for _ in range(args.repeat):
                for o in ops:
                    t0 = time.perf_counter()
                    fwd_bwd(o, x)
                    times[o].append(time.perf_counter() - t0)
            med = {o: statistics.median(v) for o, v in times.items()}
            data = "plateau (ties)" if ties else "randn"
            for cand, base in PAIRS:
                print(f"{str(dtype)[6:]:9s} {data:15s} {cand:24s} {med[cand] * 1e3:8.1f} ms  vs {base:18s} "
                      f"{med[base] * 1e3:8.1f} ms  ratio {med[cand] / med[base]:.2f}")


if __name__ == "__main__":
    main()
