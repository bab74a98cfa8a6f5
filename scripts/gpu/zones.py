"""GPU measurements for the zones section: float16 and full-width VGG11 zone volumes, tau1 under
nondeterministic kernels, tau2 per dtype.  Writes OUT/zones.json (copy it to nsverify/data/gpu/zones.json).

    PYTHONPATH=. python3 scripts/gpu/zones.py --out $OUT          # ~1-2 min on one H200
    PYTHONPATH=. python3 scripts/gpu/zones.py --out /tmp/z --smoke  # tiny, CPU (checks that it runs)
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from nsverify.claims.provenance import provenance
from nsverify.papers.zones.measure import PAPER_THRESHOLDS, thresholds
from nsverify.papers.zones.volume import VolumeConfig, _Data, _draw_seed, estimate_volume


def log(msg):
    print(f"[gpu zones {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def measure_tau(cfg: VolumeConfig, dtype_name: str, device, pairs: int) -> dict:
    """tau1 (native program run twice, nondeterministic kernels allowed) and tau2 (ReLU'(0)=0 vs 1) over
    ``pairs`` (draw, batch) pairs, with :func:`nsverify.papers.zones.measure.thresholds`."""
    from nsverify.workloads.models import build_model

    data = _Data(cfg)

    def factory(m):
        torch.manual_seed(_draw_seed(cfg.seed, m))
        return build_model(cfg.model, cfg.width, cfg.bn)

    batches = [data.batches(cfg, m)[0] for m in range(pairs)]
    th = thresholds(factory, batches, getattr(torch, dtype_name), device, cfg.norm, cfg.reduction,
                    allow_slow=cfg.allow_slow)
    return {"tau1": th.tau1 if th.tau1 is not None else 0.0, "tau1_note": th.tau1_note,
            "tau1_nonzero_pairs": th.n_rerun_differ or 0, "tau2": th.tau2, "tau2_nonzero_pairs": th.n_nonzero_relu,
            "pairs": th.n_pairs}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", required=True)
    ap.add_argument("--smoke", action="store_true", help="tiny sizes on CPU, to check the script runs")
    ap.add_argument("--draws", type=int, default=None, help="override the number of parameter draws")
    ap.add_argument("--batches", type=int, default=None, help="override the minibatches per draw")
    a = ap.parse_args(argv)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    if a.smoke:
        device, width, batch, draws, batches, pairs = "cpu", 0.0625, 4, 1, 1, 1
        dtypes = ["bfloat16", "float32", "float64"]
    else:
        if not torch.cuda.is_available():
            print("no CUDA GPU: run with --smoke on CPU, or on a GPU machine", file=sys.stderr)
            return 2
        # 12 draws x 4 batches took 392 s on an H200 (float64 convolutions dominate); 6 x 3 fits ~150 s
        device, width, batch, draws, batches, pairs = "cuda", 1.0, 128, 6, 3, 8
        dtypes = ["float16", "bfloat16", "float32", "float64"]
        torch.backends.cuda.matmul.allow_tf32 = False  # TF32 would make "float32" a 10-bit-mantissa computation
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cudnn.deterministic = False  # tau1 needs the nondeterministic kernels
        torch.backends.cudnn.benchmark = True  # autotuned (possibly nondeterministic) algorithms, as in training
    draws, batches = a.draws or draws, a.batches or batches
    taus = {**PAPER_THRESHOLDS["vgg11"], "bfloat16": PAPER_THRESHOLDS["vgg11"]["float16"]}
    name = torch.cuda.get_device_name() if device == "cuda" else "cpu (smoke)"
    # the claims are judged from these raw numbers by nsverify.papers.zones.repro.gpu_results, with the CPU rules
    result = {"provenance": provenance(name), "device": name, "torch": torch.__version__, "smoke": a.smoke,
              "thresholds_used": taus, "volumes": {}, "shares": {}, "taus": {}}
    for bn in (False, True):
        cfg = VolumeConfig(model="vgg11", width=width, bn=bn, dataset="plateaus", n_data=max(512, batch * batches),
                           batch_size=batch, draws=draws, batches=batches, dtypes=dtypes, device=device)
        label = "BN" if bn else "noBN"
        log(f"VGG11 width {width} {label}: {draws} draws x {batches} batches of {batch}, {dtypes}")
        res = estimate_volume(cfg, taus, progress=lambda msg, *_: log(msg))
        result["volumes"][label] = res
        for name, d in res["dtypes"].items():
            result["shares"][f"vgg11|{name}|{label}|pairs"] = d["pair_share"]
            result["shares"][f"vgg11|{name}|{label}|draws"] = d["draw_share"]
            log(f"  {name} {label}: pairs {d['pair_share']['count']}/{d['pair_share']['n']}, "
                f"max D {d['max_D']:.2e}")
        for name in dtypes:
            log(f"tau1/tau2 {name} {label}")
            result["taus"][f"{name}|{label}"] = measure_tau(cfg, name, device, pairs)
    for key, t in result["taus"].items():
        log(f"  {key}: tau1 {t['tau1']:.2e} ({t['tau1_nonzero_pairs']}/{t['pairs']} reruns differ), tau2 {t['tau2']}")
    result["elapsed_s"] = time.time() - t0
    (out / "zones.json").write_text(json.dumps(result))
    log(f"wrote {out / 'zones.json'} in {result['elapsed_s']:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
