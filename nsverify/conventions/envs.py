"""One virtual environment per torch release: create it (``uv`` with a shared cache, or ``venv`` + pip), install
torch and the matrix's own dependency, run the conventions matrix there, keep the JSON, delete the environment.

The index is whatever the installer is configured for. ``uv`` does not read pip's configuration, so the local
wheel folders and extra indexes pip is configured with here (``pip config list``, ``PIP_FIND_LINKS``,
``PIP_EXTRA_INDEX_URL``) are passed on to it; every other release comes from the package index as pip would
fetch it (CUDA builds on Linux: about 5 GB of nvidia wheels per release, shared through uv's cache by hard
links)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

from nsverify.errors import NsverifyError

#: what the matrix needs besides torch, pinned to the versions of this environment: mpmath
MATRIX_DEPS = ("mpmath",)
#: needed but not pinned: setuptools, which torch.compile's inductor imports up to torch 2.6 (uv's environments do
#: not seed it); some releases bound its version (torch 2.12.1 requires setuptools<82), so the resolver picks it
UNPINNED_DEPS = ("setuptools",)


class ReleaseEnvError(NsverifyError):
    """An environment for a torch release could not be created or the matrix could not run in it."""


def _pip_config() -> dict[str, list[str]]:
    """find-links and extra index URLs pip is configured with here (config files and PIP_* variables)."""
    out: dict[str, list[str]] = {"find-links": [], "extra-index-url": []}
    try:
        text = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True,
                              timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        text = ""
    for line in text.splitlines():
        key, _, value = line.partition("=")
        name = key.split(".", 1)[-1]
        if name in out:
            out[name] += value.strip().strip("'\"").split()
    for name, var in (("find-links", "PIP_FIND_LINKS"), ("extra-index-url", "PIP_EXTRA_INDEX_URL")):
        out[name] += os.environ.get(var, "").split()
    return {k: list(dict.fromkeys(v)) for k, v in out.items()}


def _local_exists(url: str) -> bool:
    path = url[len("file://"):] if url.startswith("file://") else url
    return "://" in url and not url.startswith("file://") or Path(path).exists()


def find_uv() -> str | None:
    """The uv executable: on PATH, or next to this Python."""
    here = Path(sys.executable).parent / "uv"
    return shutil.which("uv") or (str(here) if here.exists() else None)


@dataclass
class Installer:
    """How release environments are made: ``kind`` "uv" (fast, shared cache) or "pip" (``venv`` + pip)."""

    kind: str = "uv"
    uv: str | None = None
    cache_dir: str | None = None
    python: str = sys.executable
    index_args: list[str] = field(default_factory=list)

    @classmethod
    def detect(cls, kind: str = "auto", cache_dir: str | None = None) -> Installer:
        if kind not in ("auto", "uv", "pip"):
            raise ReleaseEnvError(f"unknown installer {kind!r}: use uv, pip or auto.")
        uv = find_uv()
        if kind == "uv" and uv is None:
            raise ReleaseEnvError("uv is not installed: `pip install uv`, or use --installer pip (slower, no "
                                  "shared cache).")
        chosen = "uv" if (kind == "uv" or (kind == "auto" and uv)) else "pip"
        args: list[str] = []
        if chosen == "uv":
            conf = _pip_config()
            for url in conf["find-links"]:
                if _local_exists(url):
                    args += ["--find-links", url]
            for url in conf["extra-index-url"]:
                if _local_exists(url):
                    args += ["--extra-index-url", url]
            if args:  # pick each package's best version across every index, as pip does
                args += ["--index-strategy", "unsafe-best-match"]
        return cls(chosen, uv, cache_dir, sys.executable, args)

    def _env(self) -> dict:
        env = dict(os.environ)
        if self.cache_dir:
            env["UV_CACHE_DIR"] = str(self.cache_dir)
        env.pop("PYTHONPATH", None)
        return env

    def create(self, env_dir: Path, release: str, log, framework: str = "torch") -> None:
        """A fresh environment at ``env_dir`` with torch==release (``framework`` "jax": jax[cpu]==release, which
        pins its jaxlib, next to this environment's torch, which the registry imports) and the matrix's
        dependencies."""
        if env_dir.exists():
            shutil.rmtree(env_dir)
        if framework == "jax":
            wanted = [f"jax[cpu]=={release}", f"torch=={metadata.version('torch')}"]
        else:
            wanted = [f"torch=={release}"]
        pins = []
        for dep in MATRIX_DEPS:
            try:
                pins.append(f"{dep}=={metadata.version(dep)}")
            except metadata.PackageNotFoundError:
                pins.append(dep)
        pins += UNPINNED_DEPS
        if self.kind == "uv":
            cmds = [[self.uv, "venv", "--quiet", "--python", self.python, str(env_dir)],
                    [self.uv, "pip", "install", "--python", str(env_dir / "bin" / "python"), *self.index_args,
                     *wanted, *pins]]
        else:
            cmds = [[self.python, "-m", "venv", str(env_dir)],
                    [str(env_dir / "bin" / "python"), "-m", "pip", "install", "-q", *wanted, *pins]]
        for cmd in cmds:
            run_logged(cmd, log, env=self._env(), timeout=3600, what=f"installing {framework} {release}")

    def remove(self, env_dir: Path) -> None:
        shutil.rmtree(env_dir, ignore_errors=True)


def run_logged(cmd: list[str], log, env: dict | None = None, timeout: float = 3600, what: str = "") -> None:
    """Run ``cmd``, appending its output to the open file ``log``; ReleaseEnvError with the last lines on failure."""
    log.write(f"$ {' '.join(cmd)}\n")
    log.flush()
    try:
        res = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                             timeout=timeout)
    except subprocess.TimeoutExpired:
        raise ReleaseEnvError(f"{what}: timed out after {timeout:.0f} s") from None
    except OSError as exc:
        raise ReleaseEnvError(f"{what}: {exc}") from None
    log.write(res.stdout)
    log.flush()
    if res.returncode != 0:
        tail = [ln for ln in res.stdout.strip().splitlines() if ln.strip()][-3:]
        raise ReleaseEnvError(f"{what} failed (exit {res.returncode}): {' | '.join(tail)[:600]}")


def snapshot_source(dest: Path) -> Path:
    """Copy this nsverify package to ``dest/nsverify`` (the code every release runs; nothing of this environment's
    site-packages comes along). Returns the directory to put on PYTHONPATH."""
    import nsverify

    src = Path(nsverify.__file__).resolve().parent
    target = dest / "nsverify"
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(src, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "data"))
    return dest


def run_matrix_in(env_dir: Path, src: Path, out_json: Path, modes: str, dtypes: str, log,
                  timeout: float = 3600, compile_dtypes: str | None = None, framework: str = "torch") -> dict:
    """Run ``python -m nsverify.conventions [--framework jax]`` in the environment; returns the JSON it wrote."""
    env = dict(os.environ, PYTHONPATH=str(src))
    cmd = [str(env_dir / "bin" / "python"), "-m", "nsverify.conventions", "--framework", framework, "--modes", modes,
           "--dtype", dtypes, "--baseline", "none", "--json", str(out_json), "--singular"]
    if compile_dtypes and "compile" in modes.split(","):
        cmd += ["--compile-dtype", compile_dtypes]
    run_logged(cmd, log, env=env, timeout=timeout, what="running the conventions matrix")
    try:
        return json.loads(out_json.read_text())
    except (OSError, ValueError) as exc:
        raise ReleaseEnvError(f"the matrix wrote no readable JSON ({exc})") from None


def timed(fn, *args, **kwargs):
    t0 = time.monotonic()
    out = fn(*args, **kwargs)
    return out, time.monotonic() - t0
