"""Writing nsverify's output files (low level: imports nothing from nsverify).

Crash-safe writes: a file is written beside its target and renamed into place, so no reader sees half of it.
Used by the report (``report.json``, ``index.html``, partial results) and by resumable experiments
(:mod:`nsverify.papers.zones.volume`, :mod:`nsverify.papers.arnekvist.dying_relu`).
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same directory and ``os.replace``."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def json_default(obj):
    """``json.dumps(default=...)`` for numpy scalars/arrays, Fractions (as strings), sets and tuples."""
    try:
        import numpy as np

        if isinstance(obj, np.generic):
            return obj.item()
        if isinstance(obj, np.ndarray):
            return obj.tolist()
    except ImportError:  # pragma: no cover
        pass
    from fractions import Fraction

    if isinstance(obj, Fraction):
        return str(obj)
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    raise TypeError(f"report sections must return JSON-able data; got {type(obj).__name__}")
