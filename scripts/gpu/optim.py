"""GPU measurement: INNAprop vs AdamW (both foreach) time per step at 1e8 parameters, CUDA fp32 and bf16.

Usage:
    PYTHONPATH=. python3 scripts/gpu/optim.py --out DIR          # DIR/optim.json; about 30-60 s on an H100
    PYTHONPATH=. python3 scripts/gpu/optim.py --out DIR --smoke  # tiny sizes on CPU, checks the script runs
The report section reads nsverify/data/gpu/optim.json (copy the output there).
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import torch

from nsverify.papers.innaprop.checks import step_time_ratio


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="directory for optim.json")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes on CPU (no GPU needed)")
    ap.add_argument("--n-params", type=float, default=1e8)
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.smoke:
        device, sizes, reps, rounds = "cpu", [10_000], 3, 2
    else:
        if not torch.cuda.is_available():
            print("no CUDA GPU: run with --smoke on CPU, or on a GPU machine", file=sys.stderr)
            return 2
        device, sizes, reps, rounds = "cuda", [int(args.n_params)], 10, 3
        torch.backends.cuda.matmul.allow_tf32 = False
    results = []
    t0 = time.time()
    for n in sizes:
        for dtype in (torch.float32, torch.bfloat16):
            print(f"[optim gpu {time.time() - t0:.1f}s] n={n:.0e} {dtype} ...", flush=True)
            r = step_time_ratio(n, reps=reps, rounds=rounds, dtype=dtype, device=device)
            print(f"   AdamW {r['adamw_s'] * 1e3:.3f} ms  INNAprop {r['innaprop_s'] * 1e3:.3f} ms  "
                  f"ratio {r['ratio']:.3f}", flush=True)
            results.append(r)
            if device == "cuda":
                torch.cuda.empty_cache()
    info = {"torch": torch.__version__, "python": platform.python_version(), "device": device,
            "gpu": torch.cuda.get_device_name(0) if device == "cuda" else None, "smoke": args.smoke,
            "wall_s": time.time() - t0}
    (out / "optim.json").write_text(json.dumps({"schema": "nsverify.gpu.optim/1", "info": info,
                                               "results": results}, indent=2))
    print(f"wrote {out / 'optim.json'}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
