"""Inductor's cache, one per CPU capability: Inductor's cache does not key on ``ATEN_CPU_CAPABILITY``, and a
compiled backward cached under one capability segfaults when reused under another (torch 2.13 CPU). The matrix's
compiled cells, the children of :mod:`nsverify.conventions.isolation` and the crash scripts of
:mod:`nsverify.conventions.scripts` all point ``TORCHINDUCTOR_CACHE_DIR`` here (:func:`capability_cache_dir`)."""
from __future__ import annotations

import os
import tempfile

_CACHE_ENV = "TORCHINDUCTOR_CACHE_DIR"
_CACHE_PREFIX = "nsverify-"


def cpu_capability() -> str:
    """The CPU kernel level ATen dispatches to (``torch.backends.cpu.get_cpu_capability()``: ``DEFAULT``,
    ``AVX2``, ``AVX512``, ...); it follows ``ATEN_CPU_CAPABILITY`` when that is set."""
    import torch

    return torch.backends.cpu.get_cpu_capability()


def capability_cache_dir(environ=os.environ) -> str:
    """Point ``TORCHINDUCTOR_CACHE_DIR`` at a directory of this CPU capability and return it: ``<dir>/nsverify-
    <capability>``, where ``<dir>`` is the user's ``TORCHINDUCTOR_CACHE_DIR`` or Inductor's default. Idempotent: a
    directory already named ``nsverify-<capability>`` is kept, one named for another capability (inherited from a
    parent run under another ``ATEN_CPU_CAPABILITY``) is replaced by its sibling. Inductor reads the variable at
    each cache access (``torch._inductor.runtime.cache_dir_utils.cache_dir``), so this must run before the first
    compile of the process."""
    leaf = _CACHE_PREFIX + cpu_capability().lower()
    base = environ.get(_CACHE_ENV)
    if base is None:
        base = _inductor_default_dir()
    base = os.path.abspath(base)
    name = os.path.basename(base)
    if name == leaf:
        return base
    path = os.path.join(os.path.dirname(base), leaf) if name.startswith(_CACHE_PREFIX) else os.path.join(base, leaf)
    environ[_CACHE_ENV] = path
    return path


def _inductor_default_dir() -> str:
    """Inductor's default cache directory (where it lives moved across torch releases)."""
    try:
        from torch._inductor.runtime.cache_dir_utils import default_cache_dir
    except ImportError:
        try:
            from torch._inductor.runtime.runtime_utils import default_cache_dir
        except ImportError:
            import getpass

            return os.path.join(tempfile.gettempdir(), "torchinductor_" + getpass.getuser())
    return default_cache_dir()
