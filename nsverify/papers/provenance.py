"""Measurements read from data files (GPU runs committed under ``nsverify/data/gpu/``) and their provenance.

A measured figure in the report comes from this run or from such a file; the file must say where its numbers
came from: ``{"provenance": {"device", "torch", "date", "command"}, ...}``. :func:`load_measurement` refuses a
file without it, so a figure can never enter the report without its device, torch version, date and command.
Scripts that write such files call :func:`provenance` for the block.
"""
from __future__ import annotations

import datetime as _dt
import json
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
            "command": " ".join(shlex.quote(c) for c in cmd)}


def load_measurement(path: str | Path) -> dict | None:
    """The JSON measurement at ``path`` (None when the file does not exist); raises :class:`ProvenanceError` when
    it is unreadable or lacks a complete ``provenance`` block."""
    path = Path(path)
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ProvenanceError(f"{path}: unreadable measurement file ({exc}); regenerate it with its scripts/gpu "
                              f"script or delete it.") from exc
    prov = data.get("provenance") if isinstance(data, dict) else None
    missing = [k for k in REQUIRED if not (isinstance(prov, dict) and prov.get(k))]
    if missing:
        raise ProvenanceError(f"{path}: no provenance for its figures (missing {', '.join(missing)}); a measurement "
                              f"file must say {', '.join(REQUIRED)} (nsverify.papers.provenance.provenance()).")
    return data


def describe(prov: dict) -> str:
    """One line: ``device, torch X, date, `command```."""
    return f"{prov['device']}, torch {prov['torch']}, {prov['date']}, `{prov['command']}`"
