"""Build and load the fused C++ kernels at first use (``torch.utils.cpp_extension.load``, ninja, OpenMP).

Installation stays the README's one command: nothing is compiled by ``pip install`` (torch is not a build
requirement). The first backward that needs a fused kernel compiles ``cpu/*.cpp`` once, about 15 s of CPU time
(25-45 s wall on a busy 2-core machine; a "still compiling" line every 10 s on stderr meanwhile), into nsverify's
kernel cache, shared by every environment of the user: ``$NSVERIFY_KERNEL_CACHE`` if set, else
``$XDG_CACHE_HOME/nsverify/kernels``, else ``~/.cache/nsverify/kernels`` (:func:`cache_dir`). Each build has its
own folder named after the :func:`build_key`: a hash of the torch version (with its CUDA/CPU tag and C++ ABI), the
kernel source, the compiler (its path and ``--version``), the flags and the Python ABI. Switching to another
virtual environment with the same torch therefore loads the library already built (well under a second, no
compiler run: torch's own JIT cache rebuilt it for every environment, whose include paths differ), and a torch
upgrade, a source change or another compiler builds afresh. The build is announced once on the
``nsverify.kernels`` logger (WARNING, shown by default), loading from the cache once at INFO; when no compiler or
ninja is present, or the build fails, one WARNING names the reason and the fix, and the pure-PyTorch reference
(``nsverify.ad``) is used instead.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import shutil
import subprocess
import sys
import sysconfig
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import torch

log = logging.getLogger(__package__)  # "nsverify.kernels", the logger the kernels share

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


#: the environment variable naming the kernel cache directory (shared across environments)
CACHE_ENV = "NSVERIFY_KERNEL_CACHE"
#: the file written in a build folder once its library is built and loaded: the key's inputs, for people
MARKER = "key.json"


def cache_dir() -> Path:
    """The kernel cache shared by all of a user's environments: ``$NSVERIFY_KERNEL_CACHE``, else
    ``$XDG_CACHE_HOME/nsverify/kernels``, else ``~/.cache/nsverify/kernels``."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "nsverify" / "kernels"


def compiler_id() -> str:
    """The C++ compiler torch's builder will call (``$CXX``, else ``c++``): its resolved path and the first line
    of its ``--version``; "" when there is none."""
    cxx = shutil.which(os.environ.get("CXX", "c++"))
    if cxx is None:
        return ""
    try:
        out = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        out = ""
    return f"{os.path.realpath(cxx)} {out.strip().splitlines()[0] if out.strip() else ''}".strip()


def key_inputs() -> dict:
    """What a built library depends on (:func:`build_key` hashes it)."""
    return {"torch": torch.__version__, "torch_cxx11_abi": bool(torch._C._GLIBCXX_USE_CXX11_ABI),
            "sources": hashlib.sha256(b"".join(p.read_bytes() for p in SOURCES)).hexdigest(),
            "compiler": compiler_id(), "cflags": list(CFLAGS), "ldflags": list(LDFLAGS),
            "python_abi": f"{sys.implementation.cache_tag}-{sysconfig.get_config_var('SOABI') or ''}",
            "machine": platform.machine()}


def build_key(inputs: dict) -> str:
    """The build's key: 16 hex digits of the SHA-256 of ``inputs`` (every input changes it)."""
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:16]


def cache_root(inputs: dict | None = None) -> Path:
    """The build folder of this torch, source, compiler and Python: ``cache_dir()/<extension name>-<key>``."""
    return cache_dir() / f"{extension_name()}-{build_key(key_inputs() if inputs is None else inputs)}"


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


def _load_built(build_dir: Path, name: str) -> BuildState | None:
    """Load the library a finished build left in ``build_dir`` (any environment's, same key); None when there is
    none or it does not load (then it is rebuilt)."""
    from torch.utils.cpp_extension import LIB_EXT

    lib = build_dir / f"{name}{LIB_EXT}"
    if not (build_dir / MARKER).is_file() or not lib.is_file():
        return None
    t0 = time.perf_counter()
    try:
        torch.ops.load_library(str(lib))
    except Exception as exc:  # noqa: BLE001 - a truncated or foreign file: build it again
        log.debug("nsverify.kernels: the cached library %s does not load (%s); rebuilding", lib, exc)
        (build_dir / MARKER).unlink(missing_ok=True)
        return None
    return BuildState(ok=True, path=str(lib), seconds=time.perf_counter() - t0, built=False)


def _load() -> BuildState:
    from torch.utils.cpp_extension import load

    from nsverify.devices import Heartbeat
    from nsverify.files import atomic_write_text

    name = extension_name()
    inputs = key_inputs()
    build_dir = cache_root(inputs)
    cached = _load_built(build_dir, name)
    if cached is not None:
        return cached
    try:
        build_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return BuildState(error=f"cannot create the kernel cache {build_dir} ({exc.strerror or exc}); set "
                                f"{CACHE_ENV} to a writable directory")
    note = clear_stale_lock(build_dir)
    if note:
        log.warning("nsverify.kernels: %s", note)
    before = {p: p.stat().st_mtime_ns for p in build_dir.glob("*.so")}
    t0 = time.perf_counter()
    try:
        with Heartbeat("compiling the C++ max-pool kernel (once per torch and compiler)",
                       prefix="nsverify.kernels: "):
            path = load(name, [str(s) for s in SOURCES], extra_cflags=list(CFLAGS), extra_ldflags=list(LDFLAGS),
                        build_directory=str(build_dir), is_python_module=False, verbose=False)
    except Exception as exc:  # noqa: BLE001 - a compiler error, a missing header, a bad toolchain: fall back
        first = str(exc).strip().splitlines()
        log.debug("nsverify.kernels: build failed:\n%s", exc)
        return BuildState(error=f"build failed: {first[0] if first else type(exc).__name__}; run with the "
                                f"nsverify.kernels logger at DEBUG for the compiler output")
    seconds = time.perf_counter() - t0
    lib = Path(path) if isinstance(path, str) else build_dir
    built = not lib.is_file() or before.get(lib) != lib.stat().st_mtime_ns
    try:  # the build is complete: other environments with the same key load it without a compiler run
        atomic_write_text(build_dir / MARKER, json.dumps(inputs, indent=1, sort_keys=True) + "\n")
    except OSError as exc:
        log.debug("nsverify.kernels: cannot write %s (%s); the next process will check the build again",
                  build_dir / MARKER, exc)
    return BuildState(ok=True, path=str(lib), seconds=seconds, built=built)


def state() -> BuildState | None:
    """The CPU extension's state, or None when no backward has asked for it yet in this process."""
    return _STATE


def reset_for_tests() -> None:
    """Forget the build state (tests that simulate a missing compiler)."""
    global _STATE
    with _LOCK:
        _STATE = None
