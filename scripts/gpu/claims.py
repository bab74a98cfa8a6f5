"""GPU measurements for the claim ledger, with provenance; the report judges them with the CPU runs' rules.

* Boustany Table 3.2 and Fig. 3.6 (BN): full-width VGG11 on CIFAR-shaped natural-image crops, batch 128,
  float16 / bfloat16 / float32 / float64 (TF32 off), without and with BN; tau1 from reruns of the same program
  with nondeterministic CUDA kernels and in reversed sample order;
* Bertoin et al.'s dichotomy: the 784-2048^3-10 MLP at initialization on digits, ReLU'(0) = 0 vs 1, in float16
  on the native CUDA kernels and with the split-bias 16-bit emulation, next to float32 / float64;
* Park et al.'s App. J.2 overhead: the training monitor on a ResNet18 (width 1, natural crops, batch 64), per step
  against plain steps, with the tied windows of each step.

Writes OUT/claims.json; copy it to nsverify/data/gpu/claims.json and commit it: the zones and park sections read
it (nsverify.papers.gpu_claims).

    PYTHONPATH=. python3 scripts/gpu/claims.py --out $OUT             # on one CUDA GPU, about 8 minutes
    PYTHONPATH=. python3 scripts/gpu/claims.py --out /tmp/c --dry-run  # tiny sizes on CPU: checks that it runs
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import torch


def log(msg: str) -> None:
    print(f"[gpu claims {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def sizes(dry_run: bool) -> dict:
    if dry_run:
        return dict(device="cpu", width=0.0625, batch=8, draws=1, batches=2, dtypes=("bfloat16", "float32",
                                                                                       "float64"),
                    mlp_width=0.0625, mlp_draws=1, mlp_batches=2, mlp_batch=32, park_width=0.0625, park_steps=3,
                    park_batch=8, emulate=(True,))
    return dict(device="cuda", width=1.0, batch=128, draws=8, batches=4,
                dtypes=("float16", "bfloat16", "float32", "float64"), mlp_width=1.0, mlp_draws=8, mlp_batches=4,
                mlp_batch=128, park_width=1.0, park_steps=40, park_batch=64, emulate=(False, True))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="directory for claims.json")
    ap.add_argument("--dry-run", action="store_true", help="tiny sizes on CPU, to check that the script runs")
    ap.add_argument("--resume", metavar="CLAIMS_JSON",
                    help="an earlier run's claims.json with the same sizes (stopped by its time limit): its finished "
                         "parts are kept and only the others run; each run's provenance is recorded")
    a = ap.parse_args(argv)

    from nsverify.claims.provenance import provenance
    from nsverify.errors import NsverifyError
    from nsverify.files import make_output_dir
    from nsverify.papers.park.experiments import overhead, scenario2_data
    from nsverify.papers.zones.pairs import PairConfig, measure_pairs
    from nsverify.workloads.models import ResNet18, plain_layers

    try:
        out = make_output_dir(a.out, "--out")
    except NsverifyError as exc:
        print(f"claims.py: {exc}", file=sys.stderr)
        return 2
    z = sizes(a.dry_run)
    if not a.dry_run:
        if not torch.cuda.is_available():
            raise NsverifyError("no CUDA GPU: run on a GPU machine, or pass --dry-run for the CPU check")
        torch.backends.cuda.matmul.allow_tf32 = False  # TF32 would make "float32" a 10-bit-mantissa computation
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cudnn.deterministic = False  # tau1 needs the nondeterministic kernels
        torch.backends.cudnn.benchmark = True
    if a.dry_run:
        torch.set_num_threads(1)  # a shared CPU: one intra-op thread is much faster than two fighting others
    name = torch.cuda.get_device_name() if z["device"] == "cuda" else "cpu (dry run)"
    result = {"provenance": provenance(name), "dry_run": a.dry_run, "sizes": {k: v for k, v in z.items()},
              "tf32": False, "settings": {}, "bertoin": {}, "park_overhead": {}}
    if a.resume:
        prev = json.loads(open(a.resume).read())
        if json.dumps(prev.get("sizes"), sort_keys=True) != json.dumps(result["sizes"], sort_keys=True) \
                or prev.get("dry_run") != a.dry_run:
            print(f"claims.py: {a.resume} was measured with other sizes; run without --resume", file=sys.stderr)
            return 2
        runs = prev.get("runs") or [{"provenance": prev["provenance"], "parts": prev.get("finished_parts", [])}]
        result = {**prev, "runs": runs + [{"provenance": result["provenance"], "parts": []}]}
    done = set(result.get("finished_parts", []))
    t0 = time.monotonic() - result.get("elapsed_s", 0.0)

    def save(part: str) -> None:
        """Write what is measured so far (a run stopped by its time limit still leaves its finished parts)."""
        result["elapsed_s"] = time.monotonic() - t0
        result["finished_parts"] = result.get("finished_parts", []) + [part]
        if "runs" in result:
            result["runs"][-1]["parts"].append(part)
        (out / "claims.json").write_text(json.dumps(result))
        log(f"{part} done; wrote {out / 'claims.json'} at {result['elapsed_s']:.1f}s")

    # 1. Table 3.2 / BN: full-width VGG11 on natural crops
    result["settings"].setdefault("natural", {})
    # noBN16: Table 3.2 at 16 bits is judged at tau2 (Sec. 3.3.2: the least nonzero D between ReLU'(0) = 0 and 1),
    # which needs the ReLU pair -- the 16-bit dtypes again, same draws, with the relu1 program
    sixteen = tuple(d for d in z["dtypes"] if d in ("float16", "bfloat16"))
    for label, bn, dts, relu_pair in (("noBN", False, z["dtypes"], False), ("BN", True, z["dtypes"], False),
                                      ("noBN16", False, sixteen, True)):
        if f"VGG11 {label}" in done or not dts:
            continue
        # reruns: "threads" is a plain rerun on CUDA (nondeterministic kernels), "order" the reversed batch
        cfg = PairConfig("vgg11", z["width"], bn, "natural", z["batch"], z["draws"], z["batches"], dts,
                         reruns=("threads", "order"), emulate16=False, device=z["device"], relu_pair=relu_pair,
                         n_data=max(1024, z["batch"] * z["batches"]))
        log(f"VGG11 width {z['width']} {label}{' (with the ReLU pair)' if relu_pair else ''}: {dts}, {z['draws']} "
            f"draws x {z['batches']} batches of {z['batch']}")
        result["settings"]["natural"][label] = measure_pairs(cfg, progress=lambda msg, *_: log(msg))
        save(f"VGG11 {label}")
    # 2. Bertoin: MLP 784-2048^3-10, ReLU'(0) = 0 vs 1, native kernels and the split-bias emulation
    for emulate in z["emulate"]:
        key = "emulated" if emulate else "native"
        if f"Bertoin {key}" in done:
            continue
        dts = z["dtypes"] if not emulate else sixteen
        cfg = PairConfig("mlp", z["mlp_width"], False, "digits28", z["mlp_batch"], z["mlp_draws"], z["mlp_batches"],
                         dts, programs=("native", "relu1"), reruns=(), emulate16=emulate, device=z["device"])
        log(f"Bertoin MLP width {z['mlp_width']} ({key}): {dts}")
        result["bertoin"][key] = measure_pairs(cfg)
        save(f"Bertoin {key}")
    # 3. Park: monitor overhead on ResNet18 per step, against tied windows
    X, y = scenario2_data("natural", 0, n=max(256, z["park_batch"] * (z["park_steps"] + 1)))

    def make():
        return plain_layers(ResNet18(z["park_width"], bn=True))

    if "Park overhead" in done:
        return 0
    log(f"Park overhead: ResNet18 width {z['park_width']}, {z['park_steps']} steps of {z['park_batch']}")
    result["park_overhead"]["ResNet18"] = overhead(make, X, y, z["park_batch"], z["park_steps"],
                                                   device=torch.device(z["device"]))
    save("Park overhead")
    return 0


if __name__ == "__main__":
    sys.exit(main())
