"""Build and load the fused C++ kernels at first use (``torch.utils.cpp_extension.load``, ninja, OpenMP).

Installation stays the README's one command: nothing is compiled by ``pip install`` (torch is not a build
requirement). The first backward that needs a fused kernel compiles ``cpu/*.cpp`` once, about 15 s of CPU time
(25-45 s wall on a busy 2-core machine), into torch's extension cache: ``$TORCH_EXTENSIONS_DIR`` if set, else
``~/.cache/torch_extensions/py<ver>_<cpu|cuXXX>/``, in a folder named after this module's extension and the torch
version, so a torch upgrade builds afresh. Later processes load the cached library in well under a second. The
build is announced once on the ``nsverify.kernels`` logger (WARNING, shown by default), loading from the cache once
at INFO; when no compiler or ninja is present, or the build fails, one WARNING names the reason and the fix, and
the pure-PyTorch reference (``nsverify.ad``) is used instead.
"""
from __future__ import annotations

import logging
import os
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import torch

log = logging.getLogger("nsverify.kernels")

SOURCES = [Path(__file__).parent / "cpu" / "maxpool_ties.cpp"]
#: compiler flags: no fused multiply-add contraction (the kernel must round like PyTorch's separate ops);
#: -fno-trapping-math only lets branch-free code vectorize (no result changes)
CFLAGS = ["-O3", "-ffp-contract=off", "-fno-trapping-math", "-fopenmp"]
LDFLAGS = ["-fopenmp"]


@dataclass
class BuildState:
    """What happened when the CPU extension was requested: ``ok``, the library ``path``, ``seconds`` spent
    (building or loading), ``built`` (compiled in this process, not loaded from the cache), ``error``."""

    ok: bool = False
    path: str | None = None
    seconds: float | None = None
    built: bool = False
    error: str | None = None


_STATE: BuildState | None = None
_LOCK = threading.Lock()


def extension_name() -> str:
    """The extension's name: nsverify's kernels for this torch version (a new torch builds a new library)."""
    tag = "".join(c if c.isalnum() else "_" for c in torch.__version__)
    return f"nsverify_kernels_torch{tag}"


def cache_root() -> Path:
    """Where torch's JIT builds extensions: $TORCH_EXTENSIONS_DIR, else its default under ~/.cache."""
    from torch.utils.cpp_extension import _get_build_directory

    return Path(_get_build_directory(extension_name(), verbose=False))


def _missing_tool() -> str | None:
    if shutil.which(os.environ.get("CXX", "c++")) is None:
        return "no C++ compiler (c++ / $CXX) on PATH: install g++ (e.g. apt-get install g++)"
    try:
        from torch.utils.cpp_extension import verify_ninja_availability

        verify_ninja_availability()
    except RuntimeError:
        return "ninja is not installed: pip install ninja (or apt-get install ninja-build)"
    return None


def cpu_extension() -> BuildState:
    """Build (first use) or load (cached) the CPU extension once per process; never raises."""
    global _STATE
    with _LOCK:
        if _STATE is not None:
            return _STATE
        state = BuildState()
        missing = _missing_tool()
        if missing:
            state.error = missing
        else:
            state = _load()
        _STATE = state
    if state.ok and state.built:
        log.warning("nsverify.kernels: built the fused C++ max-pool backward in %.1f s (cached in %s); "
                    "minimal/hybrid max-pool backwards on CPU now use it", state.seconds, state.path)
    elif state.ok:
        log.info("nsverify.kernels: fused C++ max-pool backward loaded from %s in %.2f s", state.path, state.seconds)
    else:
        log.warning("nsverify.kernels: the fused C++ max-pool backward is unavailable (%s); using the pure-PyTorch "
                    "reference (slower). Set NSVERIFY_KERNELS=reference to silence this.", state.error)
    return state


#: a build lock older than this (seconds; a build takes about 30-60 s) was left by a build that was killed
STALE_LOCK_S = 300.0


def clear_stale_lock(build_dir: Path, stale_s: float = STALE_LOCK_S, poll_s: float = 1.0) -> str | None:
    """torch's extension builder serialises builds with a ``lock`` file and waits for it *forever*; a build killed
    mid-way (Ctrl-C twice, SIGKILL, a CI timeout) leaves it behind, and every later process would hang. Wait while
    the lock is younger than ``stale_s`` (another process may be building), then remove it. Returns a note when
    a stale lock was removed."""
    lock = build_dir / "lock"
    warned = False
    while True:
        try:
            age = time.time() - lock.stat().st_mtime
        except FileNotFoundError:
            return None
        if age >= stale_s:
            try:
                lock.unlink()
            except FileNotFoundError:
                return None
            return f"removed a stale build lock ({age:.0f} s old, left by an interrupted build): {lock}"
        if not warned:
            log.warning("nsverify.kernels: waiting for another process's build of the C++ kernel (lock %s, "
                        "treated as stale after %.0f s)", lock, stale_s)
            warned = True
        time.sleep(min(poll_s, stale_s - age))


def _load() -> BuildState:
    from torch.utils.cpp_extension import load

    name = extension_name()
    build_dir = cache_root()
    note = clear_stale_lock(build_dir)
    if note:
        log.warning("nsverify.kernels: %s", note)
    before = {p: p.stat().st_mtime_ns for p in build_dir.glob("*.so")}
    t0 = time.perf_counter()
    try:
        path = load(name, [str(s) for s in SOURCES], extra_cflags=list(CFLAGS), extra_ldflags=list(LDFLAGS),
                    is_python_module=False, verbose=False)
    except Exception as exc:  # noqa: BLE001 - a compiler error, a missing header, a bad toolchain: fall back
        first = str(exc).strip().splitlines()
        log.debug("nsverify.kernels: build failed:\n%s", exc)
        return BuildState(error=f"build failed: {first[0] if first else type(exc).__name__}; run with the "
                                f"nsverify.kernels logger at DEBUG for the compiler output")
    seconds = time.perf_counter() - t0
    lib = Path(path) if isinstance(path, str) else build_dir
    built = not lib.is_file() or before.get(lib) != lib.stat().st_mtime_ns
    return BuildState(ok=True, path=str(lib), seconds=seconds, built=built)


def state() -> BuildState | None:
    """The CPU extension's state, or None when no backward has asked for it yet in this process."""
    return _STATE


def reset_for_tests() -> None:
    """Forget the build state (tests that simulate a missing compiler)."""
    global _STATE
    with _LOCK:
        _STATE = None
