"""Measurements read from data files (GPU runs committed under ``nsverify/data/gpu/``) and their provenance.

A measured figure in the report comes from this run or from such a file; the file must say where its numbers
came from: ``{"provenance": {"device", "torch", "date", "command"}, ...}``. :func:`load_measurement` is the one
reader of these files (every stored GPU run is read through it, named by :func:`gpu_file`); it refuses a file
without the block, so a figure can never enter the report without its device, torch version, date and command.
The two older files that describe their machine in a block of their own (``conventions.json``: ``meta``,
``optim.json``: ``info``) are read with ``require_provenance=False``. Scripts that write such files call
:func:`provenance` for the block. :func:`runtime` is the CPU kernel path of this run, which every judged claim
records.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import shlex
import sys
from pathlib import Path

from nsverify.errors import NsverifyError

REQUIRED = ("device", "torch", "date", "command")
DATA_DIR = Path(__file__).resolve().parents[1] / "data" / "gpu"


class ProvenanceError(NsverifyError, ValueError):
    """A measurement file without its provenance block (device, torch, date, command), or unreadable."""


def provenance(device: str, command: list[str] | None = None) -> dict:
    """The provenance block for a measurement made now: ``device`` (its name), this torch, the UTC date and the
    command line (``sys.argv`` by default)."""
    import torch

    cmd = command if command is not None else [Path(sys.executable).name, *sys.argv]
    return {"device": device, "torch": torch.__version__,
            "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "command": " ".join(shlex.quote(c) for c in cmd), "commit": source_commit()}


def source_commit() -> str | None:
    """The git commit of the code that made a measurement: ``NSVERIFY_COMMIT`` when set (a copy of the tree
    without its ``.git``, as on a lent GPU machine), else ``git rev-parse HEAD`` in the checkout, else None."""
    import subprocess

    if os.environ.get("NSVERIFY_COMMIT"):
        return os.environ["NSVERIFY_COMMIT"]
    try:
        res = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).resolve().parent, capture_output=True,
                             text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return res.stdout.strip() or None if res.returncode == 0 else None


def runtime() -> dict:
    """The CPU kernel path a claim judged now ran with, recorded in every claim (``Claim.to_json``'s ``runtime``):
    ``cpu_capability``, the kernel level ATen dispatches to (``torch.backends.cpu.get_cpu_capability()``: DEFAULT,
    AVX2, AVX512, ...), ``aten_cpu_capability``, the ``ATEN_CPU_CAPABILITY`` that forced it (None when unset), and
    ``nsverify_kernels``, the ``NSVERIFY_KERNELS`` mode of nsverify's fused max-pool kernels (None when unset: auto).
    A floating-point result can change with the CPU kernel, so a verdict is only comparable under the same path."""
    import torch

    return {"cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "aten_cpu_capability": os.environ.get("ATEN_CPU_CAPABILITY"),
            "nsverify_kernels": os.environ.get("NSVERIFY_KERNELS")}


def gpu_file(name: str) -> Path:
    """The stored GPU run ``name`` (``"zones"``, ``"costs"``, ``"claims"``, ``"conventions"``, ``"optim"``):
    ``nsverify/data/gpu/<name>.json``."""
    return DATA_DIR / f"{name}.json"


def load_measurement(path: str | Path, require_provenance: bool = True) -> dict | None:
    """The JSON measurement at ``path`` (None when the file does not exist); raises :class:`ProvenanceError` when
    it is unreadable, is not a JSON object, or (``require_provenance``) lacks a complete ``provenance`` block."""
    path = Path(path)
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ProvenanceError(f"{path}: unreadable measurement file ({exc}); regenerate it with its scripts/gpu "
                              f"script or delete it.") from exc
    if not isinstance(data, dict):
        raise ProvenanceError(f"{path}: a measurement file holds a JSON object, not {type(data).__name__}; "
                              f"regenerate it with its scripts/gpu script or delete it.")
    if not require_provenance:
        return data
    prov = data.get("provenance")
    missing = [k for k in REQUIRED if not (isinstance(prov, dict) and prov.get(k))]
    if missing:
        raise ProvenanceError(f"{path}: no provenance for its figures (missing {', '.join(missing)}); a measurement "
                              f"file must say {', '.join(REQUIRED)} (nsverify.claims.provenance.provenance()).")
    return data


def describe(prov: dict) -> str:
    """One line: ``device, torch X, date, `command```."""
    return f"{prov['device']}, torch {prov['torch']}, {prov['date']}, `{prov['command']}`"
