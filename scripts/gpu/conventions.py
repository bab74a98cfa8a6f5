"""GPU run of the conventions matrix: every registry kink/tie on CUDA, 4 dtypes, eager/func/jvp/compile.

Usage:  PYTHONPATH=. python3 scripts/gpu/conventions.py --out DIR        (CUDA; ~1-1.5 min on an H200)
        PYTHONPATH=. python3 scripts/gpu/conventions.py --out DIR --smoke  (tiny, CPU: checks the script runs)
Writes DIR/conventions.json (schema nsverify.conventions/1, see docs/conventions.md); the report section reads
it from nsverify/data/gpu/conventions.json.  torch.compile is timed per dtype and stops starting new dtypes
once ``--compile-budget`` seconds are spent (skipped dtypes are listed in meta.compile_skipped).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

from nsverify import conventions as cv  # noqa: E402

DTYPES = ["float32", "bfloat16", "float16", "float64"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="output directory (created)")
    ap.add_argument("--smoke", action="store_true", help="tiny CPU run: few ops, float32, aot_eager compile")
    ap.add_argument("--compile-budget", type=float, default=25.0,
                    help="seconds for torch.compile, all dtypes together")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    progress = lambda msg, i=None, n=None: print(f"[{time.monotonic() - t0:6.1f}s] {msg}", flush=True)  # noqa: E731
    if args.smoke:
        device, dtypes, backend = "cpu", ["float32"], "aot_eager"
        ops = ["relu", "hardtanh", "amax", "max_pool2d"]
    else:
        if not torch.cuda.is_available():
            print("no CUDA GPU: run with --smoke on CPU, or on a GPU machine", file=sys.stderr)
            return 2
        device, ops, dtypes, backend = "cuda", None, DTYPES, "inductor"
    results = cv.run_matrix(ops, dtypes, [device], ["eager", "func", "jvp"], progress=progress)
    # the CPU eager run on the same machine, for the device comparison
    results += cv.run_matrix(ops, dtypes, ["cpu"], ["eager"], progress=progress)
    skipped, compile_times = [], {}
    spent = 0.0
    for dt in dtypes:
        if spent > args.compile_budget:
            skipped.append(dt)
            continue
        t1 = time.monotonic()
        results += cv.run_matrix(ops, [dt], [device], ["compile"], compile_backend=backend, progress=progress)
        compile_times[dt] = round(time.monotonic() - t1, 1)
        spent += compile_times[dt]
    meta = {"device": device, "device_name": torch.cuda.get_device_name(0) if device == "cuda" else "cpu",
            "cuda": torch.version.cuda, "compile_backend": backend, "compile_seconds": compile_times,
            "compile_skipped": skipped, "seconds": round(time.monotonic() - t0, 1), "smoke": args.smoke}
    data = cv.to_json(results, meta)
    from nsverify.claims.provenance import provenance

    data["provenance"] = provenance(meta["device_name"])
    path = out / "conventions.json"
    path.write_text(json.dumps(data, indent=1))
    print(f"wrote {path}: {len(results)} evaluations, {len(data['unexpected'])} not as expected, "
          f"{len(data['differences'])} cases differing across devices/dtypes/modes, {meta['seconds']}s")
    for d in data["differences"]:
        print("  differs:", d["op"], d["case"], d["rules"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
