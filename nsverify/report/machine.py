"""Machine and environment header of a report: CPU, GPU, torch, CUDA/cuDNN, TF32 and determinism flags, the ATen
CPU capability."""
from __future__ import annotations

import os
import platform
import socket


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def gpu_model() -> str | None:
    import torch

    if torch.cuda.is_available():
        return torch.cuda.get_device_name(0)
    return None


def source_commit() -> str | None:
    """The git commit of the nsverify source this process runs (``git describe --always --dirty``), or None
    when it is not a git checkout (an installed wheel) or git is missing."""
    import subprocess
    from pathlib import Path

    try:
        proc = subprocess.run(["git", "describe", "--always", "--dirty", "--abbrev=12"], capture_output=True,
                              text=True, timeout=10, cwd=Path(__file__).resolve().parents[1])
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout.strip() or None if proc.returncode == 0 else None


def machine_info() -> dict:
    """A JSON-able description of this machine; ``machine_id`` is what runs are compared by."""
    import torch  # here, not at module level: reading and comparing reports needs no torch

    gpu = gpu_model()
    info = {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "gpu": gpu,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "tf32_matmul": bool(torch.backends.cuda.matmul.allow_tf32),
        "tf32_cudnn": bool(torch.backends.cudnn.allow_tf32),
        "deterministic_algorithms": bool(torch.are_deterministic_algorithms_enabled()),
        "num_threads": torch.get_num_threads(),
        "commit": source_commit(),
        # the CPU kernel level ATen dispatches to, and the ATEN_CPU_CAPABILITY that forced it (None when unset):
        # a floating-point result can change with it, as a verdict can
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "aten_cpu_capability": os.environ.get("ATEN_CPU_CAPABILITY"),
    }
    info["machine_id"] = f"{info['hostname']}|{info['cpu']}|{gpu or 'no-gpu'}"
    return info
