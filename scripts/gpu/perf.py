"""GPU measurements for issue 15 (performance at realistic scale), one prepared run:

1. the Triton tie-aware max-pool backward (nsverify.kernels.triton_maxpool) against the pure-PyTorch reference on
   CUDA (equality on every geometry/dtype below), then minimal and hybrid max-pool forward+backward against
   ``F.max_pool2d``'s, 128x64x32x32 plateau data (frequent ties), float32 and bfloat16, side by side
   (target <= 1.2x);
2. Park's training monitor on VGG11 and ResNet18 at full width and at width 0.25 (the CPU measurement's; natural
   crops, batch 64): monitored / plain step, side by side, per tied windows per step, with how often each T_j test
   decided (``tj_paths``; nsverify.papers.park.overhead.monitor_overhead) and a profile of ``Monitor.check``;
3. ``pytest -m cuda tests/`` (the CUDA tests, skipped on every CPU run so far);
4. the monitor's verdicts with its default T_j tests against the per-window exact test on the device, step by
   step (``monitor_agreement``).

Usage:
    PYTHONPATH=. python3 scripts/gpu/perf.py --out DIR              # DIR/perf.json; about 2.5 min on an H200
    PYTHONPATH=. python3 scripts/gpu/perf.py --out DIR --parts monitor,pool   # issue 39's measurements only
    PYTHONPATH=. python3 scripts/gpu/perf.py --out DIR --dry-run    # CPU, tiny sizes: checks that every part runs
The JSON keeps its provenance (device, GPU, torch / CUDA / triton versions, git commit, UTC date, command line) and
is rewritten after every part, so a run stopped by its time limit keeps the parts it finished. A part that would
start after ``--budget-s`` seconds (default 270: the whole run stays under 5 minutes of device time) is skipped
and recorded as skipped. ``pool`` is short for ``pool_ratios``.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "asv_bench"))

from benchmarks import common  # noqa: E402

from nsverify import devices, kernels  # noqa: E402
from nsverify.ad import _maxpool_vjp_reference  # noqa: E402
from nsverify.claims.provenance import source_commit  # noqa: E402
from nsverify.papers.park.overhead import monitor_overhead  # noqa: E402

GEOMS = [((2, 2), (2, 2), (0, 0), (1, 1), False), ((3, 3), (2, 2), (1, 1), (1, 1), False),
         ((3, 3), (1, 1), (0, 0), (1, 1), False), ((2, 3), (1, 2), (1, 1), (2, 1), True)]


def _same(a, b) -> bool:
    nan = a.isnan()
    return bool(torch.equal(nan, b.isnan()) and torch.equal(a.masked_fill(nan, 0), b.masked_fill(nan, 0)))


def kernel_equality(device, small: bool) -> list[dict]:
    """The device's fused kernel (Triton on CUDA) against the reference computed on the CPU (bitwise, NaN where it
    has NaN), and against a second run of itself (``deterministic``), per dtype, geometry and Jacobian."""
    rows = []
    gen = torch.Generator().manual_seed(0)
    shape = (2, 3, 9, 11) if small else (16, 32, 33, 31)
    for dtype in (torch.float32, torch.float64, torch.bfloat16, torch.float16):
        for geom in GEOMS:
            k, s, p, d, cm = geom
            x = torch.randint(0, 3, shape, generator=gen).to(dtype)
            x.view(-1)[::97] = float("nan")
            x = x.to(device)
            out, idx = F.max_pool2d(x, k, s, p, d, ceil_mode=cm, return_indices=True)
            g = torch.randn(out.shape, generator=gen).to(dtype).to(device)
            for jac, beta in (("minimal", None), ("hybrid", 0.5), ("hybrid", 0.1)):
                with torch.no_grad(), kernels.use("fused"):
                    got = kernels.maxpool2d_tie_backward(g, x, out, idx, geom, jac, beta)
                    again = kernels.maxpool2d_tie_backward(g, x, out, idx, geom, jac, beta)
                # the reference on the CPU: its scatter_add adds in increasing window order, the order the kernels
                # fix; on CUDA the reference's scatter_add uses atomics (no fixed order where windows overlap)
                want = _maxpool_vjp_reference(g.cpu(), x.cpu(), out.cpu(), idx.cpu(), geom, jac, beta)
                got = got.cpu()
                overlap = s[0] < (k[0] - 1) * d[0] + 1 or s[1] < (k[1] - 1) * d[1] + 1
                rows.append({"dtype": str(dtype).removeprefix("torch."), "geom": str(geom), "jacobian": jac,
                             "beta": beta, "equal": _same(got, want), "deterministic": _same(got, again.cpu()),
                             "overlapping": overlap,
                             "max_abs_diff": float((got.double() - want.double()).abs().nan_to_num(0).max())})
    return rows


def pool_ratios(device, small: bool, repeat: int) -> list[dict]:
    """minimal / hybrid (fused and reference) forward+backward against F.max_pool2d's, side by side."""
    shape = common.SMALL_AD_SHAPE if small else common.AD_SHAPE
    ops = ["max_pool2d", "maxpool_minimal", "maxpool_hybrid", "maxpool_minimal@reference", "maxpool_hybrid@reference"]
    rows = []
    for dtype in (torch.float32, torch.bfloat16):
        x = common.pool_input(dtype, shape, ties=True, device=device)
        t = devices.time_side_by_side({o: (lambda o=o, x=x: common.fwd_bwd(o, x)) for o in ops}, repeat=repeat,
                                      warmup=2, device=device)
        for o in ops[1:]:
            rows.append({"dtype": str(dtype).removeprefix("torch."), "shape": list(shape), "candidate": o,
                         "baseline": "max_pool2d", "ratio_median": t.ratio(o, "max_pool2d", "median"),
                         "candidate_median_s": t.stat(o, "median"), "baseline_median_s": t.stat("max_pool2d", "median"),
                         "target": "<= 1.2" if o in ("maxpool_minimal", "maxpool_hybrid") else None})
    return rows


#: monitored steps profiled after the timing (the timed steps run without the profiler)
PROFILE_STEPS = 3


def monitor(device, small: bool, steps: int) -> list[dict]:
    """Monitored / plain step per model at full width (Park et al.'s comparison) and at the CPU measurement's
    width (0.25), median of ``steps`` interleaved rounds with the per-round IQR; then, untimed, where
    ``Monitor.check`` spends its time (cProfile of :data:`PROFILE_STEPS` further monitored steps, top functions by
    own time: the profiler would inflate the timed steps), and the forward-only breakdown
    (:func:`forward_breakdown`: detection hooks and ``check()`` against the plain forward)."""
    from nsverify.papers.park.overhead import TrainingSteps

    out = []
    for name in ("vgg11", "resnet18"):
        for width in ((1 / 16,) if small else (1.0, 0.25)):
            batch = 8 if small else 64
            res = monitor_overhead(name, steps=steps, width=width, batch=batch, device=device)
            run = TrainingSteps(name, PROFILE_STEPS, width, batch, device=device)
            try:
                run.monitored()  # warm-up
                with _profiled_check() as prof:
                    for _ in range(PROFILE_STEPS):
                        run.monitored()
            finally:
                run.close()
            res["check_profile"] = prof
            res["breakdown"] = forward_breakdown(name, width, batch, device, steps)
            out.append(res)
    return out


def forward_breakdown(name: str, width: float, batch: int, device, repeat: int) -> dict:
    """Where a monitored step's extra time goes, forward only (no backward, no optimizer step), interleaved on one
    batch: the plain forward, the forward with the monitor's hooks (the detection kernels), and that forward
    followed by ``Monitor.check()``. Medians in seconds, and each over the plain forward."""
    from nsverify.papers.park.overhead import TrainingSteps

    run = TrainingSteps(name, 1, width, batch, device=device)
    model, mon, (xb, _yb) = run.model, run.monitor, run.batches[0]

    def plain():
        with mon.paused():
            model(xb)

    def hooks():
        model(xb)
        mon._store.clear()  # the captured tensors of a step that is not checked

    def hooks_check():
        out = model(xb)
        mon.check()
        del out

    try:
        t = devices.time_side_by_side({"forward": plain, "forward_hooks": hooks, "forward_check": hooks_check},
                                      repeat=repeat, warmup=2, device=device)
    finally:
        run.close()
    return {"median_s": {k: t.stat(k, "median") for k in ("forward", "forward_hooks", "forward_check")},
            "hooks_ratio": t.ratio("forward_hooks", "forward", "median"),
            "check_ratio": t.ratio("forward_check", "forward", "median"), "rounds": repeat}


@contextlib.contextmanager
def _profiled_check(top: int = 15):
    """cProfile of every ``Monitor.check`` call inside the block; yields a list filled at exit with the ``top``
    functions by own time: ``{"function", "calls", "own_s", "cumulative_s"}``."""
    import cProfile
    import pstats

    from nsverify.papers.park.monitor import Monitor

    prof, rows, check = cProfile.Profile(), [], Monitor.check

    def profiled(self):
        prof.enable()
        try:
            return check(self)
        finally:
            prof.disable()

    Monitor.check = profiled
    try:
        yield rows
    finally:
        Monitor.check = check
        stats = pstats.Stats(prof).stats
        for (file, line, fn), (_cc, calls, own, cum, _callers) in sorted(stats.items(), key=lambda kv: -kv[1][2])[:top]:
            rows.append({"function": f"{Path(file).name}:{line}({fn})", "calls": calls, "own_s": own,
                         "cumulative_s": cum})


def monitor_agreement(device, small: bool, steps: int = 4) -> list[dict]:
    """The monitor's verdicts with its default T_j tests (``tie_test="auto"``) against the per-window exact test, step
    by step on the device, on the overhead workloads after SGD steps: per step the certified verdict and per layer
    (status, tied windows, windows outside T_j, unchecked), and where they differ."""
    from nsverify.papers.park.monitor import Monitor
    from nsverify.papers.park.overhead import TrainingSteps

    out = []
    cases = [("vgg11", 1 / 16, 8), ("resnet18", 1 / 16, 8)] if small else [
        ("resnet18", 1.0, 64), ("resnet18", 0.25, 64), ("vgg11", 0.25, 64)]
    for name, width, batch in cases:
        run = TrainingSteps(name, steps, width=width, batch=batch, device=device)
        run.close()
        rows = []
        for xb, _ in run.batches:
            run.plain()  # one SGD step between checks, as in training
            seen = {}
            for test in ("exact", "auto"):
                with Monitor(run.model, tie_test=test) as mon:
                    y = run.model(xb)
                    rec = mon.check()
                    del y
                seen[test] = {"correct": rec.correct, "layers": [
                    (c.name, c.status, c.tied_positive, c.nontrivial_windows, c.unchecked) for c in rec.layers]}
            rows.append({**seen, "same": seen["exact"] == seen["auto"]})
        out.append({"model": name, "width": width, "batch": batch, "steps": len(rows),
                    "agree": sum(r["same"] for r in rows), "per_step": rows})
    return out


#: the parts of a run, in order (``--parts`` picks some)
PARTS = ("cuda_tests", "kernel_equality", "monitor", "monitor_agreement", "pool_ratios")
#: short names ``--parts`` accepts
ALIASES = {"pool": "pool_ratios"}
#: seconds of the run after which no further part starts (the whole run stays under 5 minutes of device time)
BUDGET_S = 270

#: seconds the CUDA tests may take before they are stopped (their output so far is kept)
TESTS_LIMIT_S = 150


def cuda_tests(small: bool) -> dict:
    cmd = [sys.executable, "-m", "pytest", "-q", "-m", "cuda", "tests/", "-p", "no:cacheprovider"]
    t0 = time.time()
    try:
        res = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=TESTS_LIMIT_S)
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or b"").decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        return {"command": " ".join(cmd[1:]), "returncode": None, "summary": f"stopped after {TESTS_LIMIT_S} s",
                "tail": out.strip().splitlines()[-30:], "wall_s": time.time() - t0}
    tail = (res.stdout + res.stderr).strip().splitlines()[-30:]
    return {"command": " ".join(cmd[1:]), "returncode": res.returncode, "summary": tail[-1] if tail else "",
            "tail": tail, "wall_s": time.time() - t0}


def provenance(device, argv) -> dict:
    commit = source_commit()
    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    date = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    # date and commit as nsverify.claims.provenance spells them (date_utc, git_commit: the older runs' names)
    return {"date": date, "date_utc": date, "commit": commit,
            "command": " ".join([Path(sys.argv[0]).name, *argv]), "git_commit": commit,
            "device": str(device), "gpu": torch.cuda.get_device_name(0) if device.type == "cuda" else None,
            "torch": torch.__version__, "cuda": torch.version.cuda, "triton": triton_version,
            "python": platform.python_version(), "cpu_count": os.cpu_count(), "kernels": kernels.status()}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="directory for perf.json")
    ap.add_argument("--dry-run", action="store_true", help="CPU and tiny sizes: checks that every part runs")
    ap.add_argument("--steps", type=int, default=15,
                    help="monitor: timed interleaved steps per model and width (default 15: a median with its IQR)")
    ap.add_argument("--budget-s", type=float, default=BUDGET_S,
                    help=f"no part starts after this many seconds (default {BUDGET_S})")
    ap.add_argument("--repeat", type=int, default=15, help="max-pool ratios: timed rounds (default 15)")
    ap.add_argument("--skip-tests", action="store_true", help="do not run pytest -m cuda")
    ap.add_argument("--parts", default=None,
                    help="comma-separated parts to run (default all): " + ", ".join(PARTS))
    args = ap.parse_args(argv)
    if args.steps < 1 or args.repeat < 1:
        ap.error(f"--steps {args.steps} / --repeat {args.repeat}: both must be >= 1")
    if not args.budget_s > 0:
        ap.error(f"--budget-s {args.budget_s}: give a positive number of seconds")
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        ap.error(f"--out {out}: a file, not a directory")
    out.mkdir(parents=True, exist_ok=True)
    if args.dry_run:
        device, steps, repeat = torch.device("cpu"), 2, 2
    else:
        if not torch.cuda.is_available():
            print("no CUDA GPU: run with --dry-run on CPU, or on a GPU machine", file=sys.stderr)
            return 2
        device, steps, repeat = torch.device("cuda"), args.steps, args.repeat
    t0 = time.time()
    report = {"schema": "nsverify.gpu.perf/1", "dry_run": args.dry_run}
    parts = [("cuda_tests", lambda: cuda_tests(args.dry_run))] if not args.skip_tests else []
    parts += [("kernel_equality", lambda: kernel_equality(device, args.dry_run)),
              ("monitor", lambda: monitor(device, args.dry_run, steps)),
              ("monitor_agreement", lambda: monitor_agreement(device, args.dry_run)),
              ("pool_ratios", lambda: pool_ratios(device, args.dry_run, repeat))]
    if args.parts is not None:
        wanted = [ALIASES.get(w.strip(), w.strip()) for w in args.parts.split(",") if w.strip()]
        unknown = sorted(set(wanted) - set(PARTS))
        if unknown:
            ap.error(f"--parts: unknown part(s) {', '.join(unknown)}; choose from {', '.join(PARTS)} "
                     f"({', '.join(f'{a} = {p}' for a, p in ALIASES.items())})")
        parts = [(n, f) for n, f in parts if n in wanted]
    for name, part in parts:
        print(f"[perf {time.time() - t0:.0f}s] {name} ...", flush=True)
        try:
            if time.time() - t0 > args.budget_s:
                report[name] = {"skipped": f"not started: the run had spent {time.time() - t0:.0f} s of its "
                                           f"--budget-s {args.budget_s:g}"}
            else:
                report[name] = part()
        except Exception as exc:  # noqa: BLE001 - keep the other parts' results
            report[name] = {"error": f"{type(exc).__name__}: {exc}"}
        print(json.dumps(report[name], default=str)[:600], flush=True)
        # written after every part: a run stopped by its time limit keeps the parts it finished
        report["provenance"] = provenance(device, argv)
        report["wall_s"] = time.time() - t0
        (out / "perf.json").write_text(json.dumps(report, indent=1, default=str))
    print(f"wrote {out / 'perf.json'}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
