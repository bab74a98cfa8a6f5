"""``nsverify zones``: volume estimation and thresholds from the command line (also under torchrun)."""
from __future__ import annotations

import json
import sys

from nsverify.argtypes import (
    Checked,
    Choice,
    CsvList,
    InputDir,
    InputFile,
    KeyValue,
    Number,
    OutputFile,
    deferred,
    inf_or_number,
    resume_hint,
)
from nsverify.errors import BadArgumentError

#: torch's dtype and device parsers, imported when an option is parsed (``--help`` imports no torch)
parse_dtype = deferred("nsverify.devices", "parse_dtype")
parse_device = deferred("nsverify.devices", "parse_device")


def _program(text: str) -> str:
    from nsverify.papers.zones.rules import as_program

    as_program(text)
    return text


def _models() -> list[str]:
    from nsverify.workloads.models import MODELS

    return list(MODELS)


def _datasets() -> list[str]:
    from nsverify.workloads.datasets import DATASETS

    return list(DATASETS)


def _common(p):
    from nsverify.papers.zones.volume import MAX_N_DATA, MAX_WIDTH

    p.add_argument("--model", default="lenet5", type=Choice(_models, "model", example="lenet5"),
                   help="the network: mlp, lenet5, vgg11/13/16/19, resnet18")
    p.add_argument("--width", type=Number(lo=0, lo_open=True, hi=MAX_WIDTH, hint="channel/hidden width factor"),
                   default=1.0, help="channel/hidden width factor of the model")
    p.add_argument("--bn", action="store_true", help="BatchNorm after each convolution (CNNs)")
    p.add_argument("--dataset", default="digits28", type=Choice(_datasets, "dataset", example="digits28"),
                   help="the images: digits28, plateaus, natural (built in), mnist, cifar10 (from --data-root)")
    p.add_argument("--data-root", default=None, type=InputDir("--data-root"),
                   help="directory with MNIST/CIFAR files you already have")
    p.add_argument("--n-data", type=Number(integer=True, lo=1, hi=MAX_N_DATA, hint="number of synthetic images"),
                   default=512, help="number of synthetic images (built-in datasets)")
    p.add_argument("--batch-size", type=Number(integer=True, lo=1, hi=65536, hint="images per minibatch"),
                   default=64, help="images per minibatch")
    p.add_argument("--draws", type=Number(integer=True, lo=1, hi=10**6, hint="M, the number of parameter draws"),
                   default=8, help="M, the number of parameter draws")
    p.add_argument("--batches", type=Number(integer=True, lo=1, hi=10**6, hint="R, minibatches per draw"),
                   default=4, help="R, the number of minibatches per draw")
    p.add_argument("--dtypes", default="bfloat16,float32,float64",
                   type=CsvList(Checked(parse_dtype, "float32"), "dtypes"),
                   help="comma-separated precisions to measure")
    p.add_argument("--programs", default="native,minimal",
                   type=CsvList(Checked(_program, "native"), "programs", count=2, example="native,minimal"),
                   help="the two backward programs P,Q compared: native, minimal, relu1, 'beta=10', ...")
    p.add_argument("--norm", default="1", type=Choice(["1", "2", "inf"], "norm", convert=inf_or_number),
                   help="norm of the gradient difference D: 1 (Boustany eq. 3.11), 2 or inf")
    p.add_argument("--reduction", default="mean", type=Choice(["mean", "sum"], "reduction"),
                   help="loss reduction over the minibatch: mean or sum")
    p.add_argument("--seed", type=Number(integer=True, lo=0, hi=2**63 - 1, hint="a random seed"), default=0,
                   help="random seed of the draws and the data")
    p.add_argument("--device", default="cpu", type=Checked(parse_device, "cpu"), help="cpu, cuda or cuda:N")
    p.add_argument("--allow-slow-fp16", action="store_true", help="run float16 on CPU anyway (slow)")


def _config(a):
    from nsverify.papers.zones.volume import VolumeConfig

    return VolumeConfig(model=a.model, width=a.width, bn=a.bn, dataset=a.dataset, data_root=a.data_root,
                        n_data=a.n_data, batch_size=a.batch_size, draws=a.draws, batches=a.batches,
                        dtypes=list(a.dtypes), programs=tuple(a.programs), norm=a.norm, reduction=a.reduction,
                        seed=a.seed, device=a.device, allow_slow=a.allow_slow_fp16)


def _taus(items: list[tuple[str, float]] | None) -> dict:
    from nsverify.devices import dtype_name

    out: dict = {}
    for dt, tau in items or []:
        name = dtype_name(parse_dtype(dt))
        if name in out:
            raise BadArgumentError(f"--tau {name} given twice; give one threshold per dtype.")
        out[name] = tau
    return out


def _check(a) -> None:
    """Everything that involves several options or an input file's contents, before any work."""
    from nsverify.devices import dtype_name
    from nsverify.papers.zones.measure import check_dtype_device

    cfg = _config(a)
    dev = parse_device(cfg.device)
    for name in cfg.dtypes:
        check_dtype_device(parse_dtype(name), dev, cfg.allow_slow)
    if cfg.data_root is not None and cfg.dataset not in ("mnist", "cifar10"):
        raise BadArgumentError(f"--data-root is read only for --dataset mnist or cifar10 (files you already have); "
                               f"{cfg.dataset!r} is built in: drop --data-root or choose one of those datasets.")
    if a.zones_command != "volume":
        return
    from nsverify.papers.zones.measure import threshold_for
    from nsverify.papers.zones.volume import load_partial

    taus = _taus(a.tau)
    wanted = {dtype_name(parse_dtype(d)) for d in cfg.dtypes}
    extra = sorted(set(taus) - wanted)
    if extra:
        raise BadArgumentError(f"--tau given for {', '.join(extra)}, which is not in --dtypes "
                               f"{','.join(cfg.dtypes)}; drop it or add the dtype.")
    for name in cfg.dtypes:
        threshold_for(taus, dtype_name(parse_dtype(name)))
    load_partial(a.resume, cfg)  # a corrupted resume file, or one of another configuration


def _json_dir(path: str | None) -> None:
    """Create the missing directories of ``--json FILE`` before any work (exit 2 with one line if impossible)."""
    if path:
        from pathlib import Path

        from nsverify.files import make_output_dir

        make_output_dir(Path(path).parent, "--json")


def _volume(a) -> int:
    from nsverify.files import atomic_write_text
    from nsverify.papers.zones.volume import dist_cleanup, estimate_volume

    cfg = _config(a)
    _json_dir(a.json)
    try:
        res = estimate_volume(cfg, _taus(a.tau), resume=a.resume)
    finally:
        dist_cleanup()
    rank = res.get("rank", 0)
    if a.json and rank == 0:
        atomic_write_text(a.json, json.dumps(res))
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

    from nsverify.files import atomic_write_text
    from nsverify.papers.zones.measure import thresholds
    from nsverify.papers.zones.volume import _Data, _draw_seed
    from nsverify.workloads.models import build_model

    cfg = _config(a)
    _json_dir(a.json)
    data = _Data(cfg)

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
        atomic_write_text(a.json, json.dumps(out))
    return 0


def _interrupted(a) -> str:
    """After Ctrl-C: with --resume the finished draws are in that file (and its .rank<N> siblings under
    torchrun); without it nothing was kept."""
    if a.resume is None:
        return "interrupted (no draw was kept: give --resume FILE to make the run resumable)"
    return resume_hint(a.resume)


def register_cli(sub) -> None:
    p = sub.add_parser("zones", help="bifurcation/compensation zones: volume estimates and thresholds",
                       description="Zone measurements (Bertoin et al.; Boustany Ch.3). See docs/zones.md.")
    zs = p.add_subparsers(dest="zones_command", metavar="ACTION")
    v = zs.add_parser("volume", help="Monte Carlo share of impacted draws and minibatches (torchrun-aware)")
    _common(v)
    v.add_argument("--tau", action="append", metavar="DTYPE=VALUE", required=True,
                   type=KeyValue(Checked(parse_dtype, "float32"),
                                 Number(lo=0, hint="the threshold on D above which a pair is impacted"),
                                 example="float32=1e-8"),
                   help="the threshold on D above which a (draw, minibatch) pair is impacted, one per dtype of "
                        "--dtypes (repeat: --tau float32=1e-8 --tau float64=1e-14); `nsverify zones thresholds` "
                        "measures them, Boustany Table 3.4 gives the paper's")
    v.add_argument("--resume", default=None, type=InputFile("--resume", may_be_new=True),
                   help="partial-results JSON, written after every draw; rerun the same command to resume")
    v.add_argument("--json", default=None, type=OutputFile("--json"),
                   help="write the full result to this file (missing directories are created)")
    v.set_defaults(func=_volume, check=_check, on_interrupt=_interrupted)
    t = zs.add_parser("thresholds", help="tau1 (GPU nondeterminism) and tau2 (ReLU'(0)=0 vs 1)")
    _common(t)
    t.add_argument("--json", default=None, type=OutputFile("--json"),
                   help="write the thresholds to this file (missing directories are created)")
    t.set_defaults(func=_thresholds, check=_check)
    p.set_defaults(func=lambda a: (p.print_help(file=sys.stderr), 2)[1])
