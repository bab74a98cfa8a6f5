"""Crash isolation for the conventions matrix: its cells evaluated in child processes, so that a crash inside
torch (a segfault in a compiled backward, an abort) becomes a ``"crashed"`` cell with a standalone reproduction
script, never a dead process.

One child runs a batch: the eager/func/jvp cells of one device (every dtype), or the compile cells of one dtype
and device (one compile, as in-process). A child that dies (killed by a signal, or exiting without writing its
results) has its batch split in halves, each rerun in a child of its own, down to single cells: the cells that
still crash alone are marked crashed; every other cell keeps the result it gives in a part that ran. A crash that
needs the cells together (every part runs alone) is kept in each cell's ``extra["batch_crash"]``. A child that
runs past its time limit is not split (every half could wait as long again): its whole batch is marked crashed,
with the limit in the message.

Each child also keeps its own Inductor cache per CPU capability
(:func:`nsverify.conventions.inductor.capability_cache_dir`).

Test hook (not a user option): with :data:`TEST_CRASH_ENV` set to ``op|case|dtype|mode`` a child about to
evaluate that cell calls :func:`os.abort`, standing in for a crash inside torch.
"""
from __future__ import annotations

import faulthandler
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Sequence

from nsverify.conventions.inductor import capability_cache_dir
from nsverify.errors import NsverifyError

#: test hook only: ``op|case|dtype|mode`` of a cell whose child process aborts (simulates a crash in torch)
TEST_CRASH_ENV = "NSVERIFY_TEST_CRASH_CELL"
#: the default time limit of one child (seconds): an inductor compile of a whole dtype takes about a minute on a
#: small CPU, several under load
DEFAULT_TIMEOUT = 1200.0


# ----------------------------------------------------------------------------------------------------------
# the child
# ----------------------------------------------------------------------------------------------------------
def _child(request: dict) -> dict:
    """Evaluate a batch in this process (the child's side): ``request`` = {device, backend, cells:
    [[op, label, dtype, mode], ...]}."""
    from nsverify.conventions import matrix

    capability_cache_dir()
    wanted = [tuple(c) for c in request["cells"]]
    by_key = {(c.op, c.label): c for c in matrix.build_cases(sorted({w[0] for w in wanted}))}
    missing = [w[:2] for w in wanted if w[:2] not in by_key]
    if missing:
        raise NsverifyError(f"cases {missing} are not in the registry of the child process (a scoped "
                            f"registration is not seen by a child: run without isolation).")
    crash = os.environ.get(TEST_CRASH_ENV)
    if crash and crash in {"|".join(w) for w in wanted}:
        os.abort()  # the test hook: a crash inside the batch
    results, messages = [], []
    i = 0
    while i < len(wanted):  # consecutive cells of one dtype and mode are one batch (one compile in mode compile)
        j = i
        while j < len(wanted) and wanted[j][2:] == wanted[i][2:]:
            j += 1
        rs, msg = matrix.evaluate_batch([by_key[w[:2]] for w in wanted[i:j]], wanted[i][2], request["device"],
                                        wanted[i][3], request["backend"])
        results += rs
        messages += [msg] if msg else []
        i = j
    return {"results": [r.__dict__ for r in results], "message": "; ".join(messages)}


def serve_child(argv: Sequence[str], child) -> int:
    """A child process's whole life (``python -m MODULE REQUEST OUT``): read the JSON request, run ``child`` on
    it, write its JSON answer (or ``{"fatal": message}`` for an nsverify error) to OUT."""
    faulthandler.enable()  # a segfault prints the Python stack to stderr, which the parent quotes
    request = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    try:
        out = child(request)
    except NsverifyError as exc:
        out = {"fatal": str(exc)}
    Path(argv[1]).write_text(json.dumps(out), encoding="utf-8")
    return 0


def child_main(argv: Sequence[str]) -> int:
    """``python -m nsverify.conventions.isolation REQUEST OUT``: run a batch, write its results to OUT."""
    return serve_child(argv, _child)


# ----------------------------------------------------------------------------------------------------------
# the parent
# ----------------------------------------------------------------------------------------------------------
def _child_env() -> dict:
    """The child's environment: this process's, with this nsverify first on the path (the child imports the
    same code)."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join([root] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return env


def _death(rc: int, stderr: str) -> str:
    """Why a child died, in one line: the signal (or exit status) and the last line it printed."""
    if rc < 0:
        try:
            how = f"killed by signal {signal.Signals(-rc).name} ({-rc})"
        except ValueError:
            how = f"killed by signal {-rc}"
    else:
        how = f"exited with status {rc} without writing its results"
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    fatal = [ln for ln in lines if ln.startswith("Fatal Python error")]  # faulthandler's line names the crash
    said = fatal[0] if fatal else (lines[-1] if lines else "")
    return (how + (f"; it printed: {said[:200]}" if said else ""))[:300]


def run_child(request: dict, timeout: float, module: str = "nsverify.conventions.isolation"
              ) -> tuple[dict | None, str]:
    """(the child's output, "") or (None, why it died) for one batch; ``module``: the child's entry (``python -m
    MODULE REQUEST OUT``; :mod:`nsverify.conventions.programs` runs its batches through it too)."""
    with tempfile.TemporaryDirectory(prefix="nsverify-cell-") as tmp:
        req, out = Path(tmp, "request.json"), Path(tmp, "out.json")
        req.write_text(json.dumps(request), encoding="utf-8")
        try:
            proc = subprocess.run([sys.executable, "-m", module, str(req), str(out)],
                                  env=_child_env(), capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return None, f"timed out: the child process ran past its limit of {timeout:g} s"
        if proc.stderr.strip() and out.exists():
            sys.stderr.write(proc.stderr)  # warnings of a child that finished
        if not out.exists():
            return None, _death(proc.returncode, proc.stderr)
        data = json.loads(out.read_text(encoding="utf-8"))
    if "fatal" in data:
        raise NsverifyError(data["fatal"])
    return data, ""


def evaluate_isolated(cells: list, device: str, backend: str, *, timeout: float = DEFAULT_TIMEOUT,
                      repro_dir: str | Path | None = None, progress: Callable | None = None) -> tuple[list, str]:
    """The results of ``cells`` (``(case, dtype name, mode)`` triples on one device) evaluated in child processes,
    in their order, and a progress message; crashed cells are ``"crashed"`` results with a reproduction script in
    ``repro_dir`` (a new temporary directory when None)."""
    from nsverify.conventions.matrix import crashed_result, result_from_json

    def run(group: list) -> tuple[list, str]:
        request = {"device": device, "backend": backend, "cells": [[c.op, c.label, dt, m] for c, dt, m in group]}
        data, why = run_child(request, timeout)
        if data is not None:
            return [result_from_json(r) for r in data["results"]], data["message"]
        if len(group) == 1 or why.startswith("timed out"):
            return ([crashed_result(c, dt, device, m, why, repro_dir) for c, dt, m in group],
                    f"{len(group)} cell(s) crashed ({why})")
        if progress:
            progress(f"a child process evaluating {len(group)} cells on {device} died ({why}); rerunning them in "
                     f"halves to find the crashing cell(s)")
        half = len(group) // 2
        out = run(group[:half])[0] + run(group[half:])[0]
        k = sum(r.rule == "crashed" for r in out)
        if k:
            return out, f"{k} of {len(group)} cells crashed on {device}"
        note = (f"the child evaluating {len(group)} cells on {device} together died ({why}), but every part ran "
                f"alone: each cell has its result from a part")
        for r in out:  # not a crashed cell, but a crash all the same: every cell of the batch says so
            r.extra.setdefault("batch_crash", note)
        return out, note

    return run(list(cells))


def run_matrix_isolated(ops: Sequence[str] | None = None, dtypes: Sequence = ("float32",),
                        devices: Sequence = ("cpu",), modes: Sequence[str] = ("eager", "func", "jvp"),
                        compile_dtypes: Sequence | None = None, compile_backend: str = "inductor",
                        progress: Callable | None = None, *, timeout: float | None = None,
                        repro_dir=None) -> list:
    """:func:`nsverify.conventions.matrix.run_matrix` in child processes, one per device for the eager/func/jvp
    cells and one per compiled dtype, each with a time limit of ``timeout`` seconds (default
    :data:`DEFAULT_TIMEOUT`); a cell that crashes its process is a ``"crashed"`` result with a reproduction script in
    ``repro_dir``. The results are the same as in this process otherwise. Children see the registry's built-in ops
    only, not scoped registrations."""
    from nsverify.conventions.matrix import matrix_plan
    from nsverify.conventions.promised import annotate

    cases, dts, devs, modes, cdts = matrix_plan(ops, dtypes, devices, modes, compile_dtypes)
    results = run_isolated(cases, devs, dts, modes, cdts, compile_backend, progress=progress,
                           timeout=timeout or DEFAULT_TIMEOUT, repro_dir=repro_dir)
    annotate(results)  # the promised column, as run_matrix fills it
    return results


def run_isolated(cases: list, devices: list, dtypes: list, modes: list, compile_dtypes: list, backend: str, *,
                 timeout: float = DEFAULT_TIMEOUT, repro_dir=None, progress: Callable | None = None) -> list:
    """:func:`nsverify.conventions.matrix.run_matrix` in child processes: one per device for the eager/func/jvp
    cells of every dtype, one per compiled dtype and device (one compile each); the results in the order the
    in-process run gives them."""
    from nsverify.devices import dtype_name

    plan = [(str(dev), dtype_name(dt), m) for dev in devices for dt in dtypes for m in modes
            if m != "compile" or dt in compile_dtypes]
    batches: dict = {}
    for dev, dt, m in plan:
        batches.setdefault((dev, dt if m == "compile" else ""), []).extend(
            (c, dt, m) for c in cases if c.supported(dt, m))  # PyTorch's recorded gaps are left out
    got = {}
    for i, ((dev, dt), cells) in enumerate(batches.items(), 1):
        t0 = time.monotonic()
        rs, msg = evaluate_isolated(cells, dev, backend, timeout=timeout, repro_dir=repro_dir, progress=progress)
        got.update({(r.op, r.case, r.dtype, r.device, r.mode): r for r in rs})
        if progress:
            what = f"compile ({dt})" if dt else "eager/func/jvp"
            progress(f"{len(cells)} {what} cells on {dev} in a child process, {time.monotonic() - t0:.1f}s"
                     + (f": {msg}" if msg else ""), i, len(batches))
    return [got[(c.op, c.label, dt, dev, m)] for dev, dt, m in plan for c in cases if c.supported(dt, m)]


if __name__ == "__main__":
    sys.exit(child_main(sys.argv[1:]))
