"""Measure the oracle benchmark numbers of issue 3 once, side by side (wall and CPU time), and print JSON.

PYTHONPATH=. python3 scripts/bench_oracle.py [--ks 1,2,...] [--repeat 3] [--naive-upto 10] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--ks", default="1,2,3,4,5,6,7,8,10,12,14,16")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--naive-upto", type=int, default=10)
    ap.add_argument("--lenet", action="store_true")
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    import nsverify
    from nsverify.oracle.bench import kink_net, lenet_forward, lenet_macs, naive_lps

    rows = []
    for k in [int(x) for x in a.ks.split(",")]:
        fn, w = kink_net(k)
        walls, cpus = [], []
        for _ in range(a.repeat if k <= 8 else 1):
            t0, c0 = time.perf_counter(), time.process_time()
            v = nsverify.check_gradient(fn, w)
            walls.append(time.perf_counter() - t0)
            cpus.append(time.process_time() - c0)
        row = {
            "k": k,
            "status": v.status,
            "exact": v.exact,
            "pieces": v.stats["pieces"],
            "lps": v.stats["lps"],
            "naive_lps": 2**k,
            "lp_ratio": 2**k / max(1, v.stats["lps"]),
            "wall_s": statistics.median(walls),
            "cpu_s": statistics.median(cpus),
            "lp_s": v.stats["lp_seconds"],
        }
        if k <= a.naive_upto:
            n, t = naive_lps(fn, w)
            row.update(naive_lp_count=n, naive_lp_wall_s=t)
        rows.append(row)
        print(json.dumps(row), flush=True)
    small = [r for r in rows if r["k"] <= 8]
    res = {
        "kink_net": rows,
        "median_wall_s_k_le_8": statistics.median(r["wall_s"] for r in small) if small else None,
        "median_cpu_s_k_le_8": statistics.median(r["cpu_s"] for r in small) if small else None,
        "lp_ratio_k12": next((r["lp_ratio"] for r in rows if r["k"] == 12), None),
    }
    if a.lenet:
        net, x = lenet_forward()
        from nsverify.oracle import exact_forward

        t0, c0 = time.perf_counter(), time.process_time()
        exact_forward(net, x)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        res["lenet"] = {
            "macs": lenet_macs(),
            "wall_s": wall,
            "cpu_s": cpu,
            "macs_per_wall_s": lenet_macs() / wall,
            "macs_per_cpu_s": lenet_macs() / cpu,
        }
    try:
        import os

        res["loadavg"] = os.getloadavg()
    except OSError:
        pass
    print(json.dumps({k: v for k, v in res.items() if k != "kink_net"}))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
