"""``nsverify zones``: volume estimation and thresholds from the command line (also under torchrun)."""
from __future__ import annotations

import json
import math
import sys

from nsverify.errors import NsverifyError


def _taus(items: list[str]) -> dict:
    out = {}
    for it in items or []:
        name, _, val = it.partition("=")
        try:
            out[name] = float(val)
        except ValueError as exc:
            raise NsverifyError(f"--tau expects DTYPE=VALUE (e.g. --tau float32=1e-8), got {it!r}.") from exc
    return out


def _common(p):
    p.add_argument("--model", default="lenet5", help="mlp, lenet5, vgg11/13/16/19, resnet18")
    p.add_argument("--width", type=float, default=1.0, help="channel/hidden width factor")
    p.add_argument("--bn", action="store_true", help="BatchNorm after each convolution (CNNs)")
    p.add_argument("--dataset", default="digits28", help="digits28, plateaus, mnist, cifar10")
    p.add_argument("--data-root", default=None, help="directory with MNIST/CIFAR files you already have")
    p.add_argument("--n-data", type=int, default=512, help="number of synthetic plateau images")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--draws", type=int, default=8, help="M parameter draws")
    p.add_argument("--batches", type=int, default=4, help="R minibatches per draw")
    p.add_argument("--dtypes", default="bfloat16,float32,float64")
    p.add_argument("--programs", default="native,minimal", help="P,Q: native, minimal, relu1, 'beta=10', ...")
    p.add_argument("--norm", default="1", help="1 (eq 3.11), 2 or inf")
    p.add_argument("--reduction", default="mean", choices=["mean", "sum"])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cpu")
    p.add_argument("--allow-slow-fp16", action="store_true", help="run float16 on CPU anyway (slow)")


def _config(a):
    from nsverify.papers.zones.volume import VolumeConfig

    progs = tuple(a.programs.split(","))
    if len(progs) != 2:
        raise NsverifyError(f"--programs needs exactly two programs P,Q; got {a.programs!r}.")
    return VolumeConfig(model=a.model, width=a.width, bn=a.bn, dataset=a.dataset, data_root=a.data_root,
                        n_data=a.n_data, batch_size=a.batch_size, draws=a.draws, batches=a.batches,
                        dtypes=[d.strip() for d in a.dtypes.split(",") if d.strip()], programs=progs,
                        norm=math.inf if a.norm == "inf" else float(a.norm), reduction=a.reduction, seed=a.seed,
                        device=a.device, allow_slow=a.allow_slow_fp16)


def _volume(a) -> int:
    from nsverify.papers.zones.volume import dist_cleanup, estimate_volume

    cfg = _config(a)
    try:
        res = estimate_volume(cfg, _taus(a.tau), resume=a.resume)
    finally:
        dist_cleanup()
    rank = res.get("rank", 0)
    if a.json and rank == 0:
        with open(a.json, "w") as fh:
            json.dump(res, fh)
    if rank == 0:
        print(f"{cfg.model} width={cfg.width} bn={cfg.bn} batch={cfg.batch_size} M={res['draws_done']} "
              f"R={cfg.batches} ranks={res['world_size']} programs={'/'.join(cfg.programs)}")
        for name, d in res["dtypes"].items():
            ds, ps = d["draw_share"], d["pair_share"]
            print(f"  {name:9s} tau={res['thresholds'][name]:.0e}  draws {ds['count']}/{ds['n']} "
                  f"({ds['value']:.1%}, CP {ds['clopper_pearson'][0]:.2f}-{ds['clopper_pearson'][1]:.2f})  "
                  f"pairs {ps['count']}/{ps['n']} ({ps['value']:.1%}, McDiarmid {ps['mcdiarmid'][0]:.2f}-"
                  f"{ps['mcdiarmid'][1]:.2f})  max D {d['max_D']:.2e}")
    return 0


def _thresholds(a) -> int:
    import torch

    from nsverify.devices import parse_device, parse_dtype
    from nsverify.papers.zones.measure import thresholds
    from nsverify.papers.zones.volume import _Data, _draw_seed

    cfg = _config(a)
    data = _Data(cfg)
    from nsverify.workloads.models import build_model

    def factory(i):
        torch.manual_seed(_draw_seed(cfg.seed, i))
        return build_model(cfg.model, cfg.width, cfg.bn)

    out = {}
    for name in cfg.dtypes:
        batches = [b for m in range(cfg.draws) for b in data.batches(cfg, m)[:1]]
        th = thresholds(factory, batches, parse_dtype(name), parse_device(cfg.device),
                        cfg.norm, cfg.reduction, allow_slow=cfg.allow_slow)
        out[name] = th.as_dict()
        print(f"  {name:9s} tau1={th.tau1} ({th.tau1_note})  tau2={th.tau2}  "
              f"(ReLU'(0)=0 vs 1 differed on {th.n_nonzero_relu}/{th.n_pairs} batches)")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(out, fh)
    return 0


def register_cli(sub) -> None:
    p = sub.add_parser("zones", help="bifurcation/compensation zones: volume estimates and thresholds",
                       description="Zone measurements (Bertoin et al.; Boustany Ch.3). See docs/zones.md.")
    zs = p.add_subparsers(dest="zones_command", metavar="ACTION")
    v = zs.add_parser("volume", help="Monte Carlo share of impacted draws and minibatches (torchrun-aware)")
    _common(v)
    v.add_argument("--tau", action="append", metavar="DTYPE=VALUE", help="threshold per dtype (repeat)")
    v.add_argument("--resume", default=None, help="partial-results JSON; rerun the command to resume")
    v.add_argument("--json", default=None, help="write the full result here")
    v.set_defaults(func=_volume)
    t = zs.add_parser("thresholds", help="tau1 (GPU nondeterminism) and tau2 (ReLU'(0)=0 vs 1)")
    _common(t)
    t.add_argument("--json", default=None)
    t.set_defaults(func=_thresholds)
    p.set_defaults(func=lambda a: (p.print_help(file=sys.stderr), 2)[1])
