"""Issue 7 CUDA rows: (forward+backward)/forward wall-clock and FLOP ratios on a GPU.

    PYTHONPATH=. python3 scripts/gpu/costs.py --out DIR          # on a CUDA machine, <= ~90 s
    PYTHONPATH=. python3 scripts/gpu/costs.py --out DIR --smoke  # tiny sizes on CPU (CI check)

Rows: MLP 784-2048-2048-2048-10 at batch 1024 and CIFAR-style VGG11 at batch 128, in float32, bfloat16 and
float16, then (time permitting) an MLP depth/width sweep in float32.  Writes DIR/costs.json, which the report
section reads from nsverify/data/gpu/costs.json.  The issue quotes an H200 anchor (torch 2.11):
MLP 2.9 / 6.6 / 6.8 and VGG11 5.6 / 5.0 / 3.9 for fp32 / bf16 / fp16.
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import torch


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="directory for costs.json")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes on CPU, to check that the script runs")
    ap.add_argument("--budget", type=float, default=80.0, help="seconds; optional sweep rows stop past it")
    args = ap.parse_args(argv)

    from nsverify.errors import NsverifyError
    from nsverify.files import make_output_dir
    from nsverify.papers.costs.measure import flop_ratio, mlp, vgg11, wall_ratio

    try:
        out = make_output_dir(args.out, "--out")
    except NsverifyError as exc:
        print(f"costs.py: {exc}", file=sys.stderr)
        return 2
    t0 = time.monotonic()
    if args.smoke:
        device, dtypes = torch.device("cpu"), ["float32", "bfloat16"]
        mlp_widths, mlp_batch, vgg_mult, vgg_batch, reps = [784, 32, 32, 32, 10], 8, 0.125, 2, 2
        sweep = [(1, 32), (2, 32)]
    else:
        if not torch.cuda.is_available():
            raise NsverifyError("no CUDA GPU: run on a GPU machine, or pass --smoke for the CPU check")
        device, dtypes = torch.device("cuda"), ["float32", "bfloat16", "float16"]
        mlp_widths, mlp_batch, vgg_mult, vgg_batch, reps = [784, 2048, 2048, 2048, 10], 1024, 1.0, 128, 20
        sweep = [(1, 2048), (5, 2048), (10, 2048), (20, 2048), (3, 64), (3, 256), (3, 1024), (3, 4096)]

    rows = []

    def run(model_name, build, x_shape, dtype, batch, extra=None):
        dt = getattr(torch, dtype)
        torch.manual_seed(0)
        model = build().to(device=device, dtype=dt)
        x = torch.randn(batch, *x_shape, device=device, dtype=dt)
        row = dict(model=model_name, batch=batch, dtype=dtype, device=str(device), **(extra or {}))
        row.update(flop_ratio(model, x))
        row.update(wall_ratio(model, x, reps=reps, warmup=3))
        rows.append(row)
        print(f"[{time.monotonic() - t0:6.1f}s] {model_name:6} {dtype:9} batch {batch:5}: wall "
              f"{row['wall_ratio']:.2f}x  FLOPs {row['flop_ratio']:.3f}x  t_fwd {row['t_fwd'] * 1e3:.2f} ms",
              flush=True)
        del model, x
        if device.type == "cuda":
            torch.cuda.empty_cache()

    for dtype in dtypes:
        run("mlp", lambda: mlp(mlp_widths), (784,), dtype, mlp_batch,
            dict(depth=len(mlp_widths) - 2, width=mlp_widths[1]))
        run("vgg11", lambda: vgg11(vgg_mult), (3, 32, 32), dtype, vgg_batch, dict(width_mult=vgg_mult))
    for depth, width in sweep:
        if time.monotonic() - t0 > args.budget:
            print(f"budget {args.budget}s reached: sweep stopped", flush=True)
            break
        run("mlp_sweep", lambda d=depth, w=width: mlp([784] + [w] * d + [10]), (784,), "float32", mlp_batch,
            dict(depth=depth, width=width))
    info = dict(device=torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu (smoke)",
                torch=torch.__version__, smoke=args.smoke, seconds=time.monotonic() - t0,
                tf32_matmul=bool(torch.backends.cuda.matmul.allow_tf32), rows=rows)
    path = out / "costs.json"
    path.write_text(json.dumps(info, indent=1))
    print(f"wrote {path} ({len(rows)} rows, {info['seconds']:.1f}s)")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception as exc:  # noqa: BLE001 - report and fail clearly
        print(f"costs.py: error: {exc}", file=sys.stderr)
        sys.exit(2)
