"""Parsing and validation of dtype and device arguments, shared by the CLI, generators and benchmarks."""
from __future__ import annotations

import contextlib

import torch

from nsverify.errors import DeviceUnavailableError, UnsupportedDtypeError

#: Floating dtypes nsverify analyses, by canonical short name.
FLOAT_DTYPES: dict[str, torch.dtype] = {
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float32": torch.float32,
    "float64": torch.float64,
}
_ALIASES = {"fp16": "float16", "half": "float16", "bf16": "bfloat16", "fp32": "float32", "float": "float32",
            "fp64": "float64", "double": "float64"}


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def parse_dtype(spec: str | torch.dtype) -> torch.dtype:
    """Return the torch floating dtype named by ``spec``; raise a clear error for integer or unknown dtypes."""
    if isinstance(spec, torch.dtype):
        if not spec.is_floating_point:
            raise UnsupportedDtypeError(
                f"dtype {spec} is not a floating dtype: gradients at kinks need one of "
                f"{', '.join(FLOAT_DTYPES)}. Cast with .to(torch.float32) (or pass --dtype float32).")
        return spec
    name = _ALIASES.get(str(spec).lower(), str(spec).lower().removeprefix("torch."))
    if name in FLOAT_DTYPES:
        return FLOAT_DTYPES[name]
    if hasattr(torch, name) and isinstance(getattr(torch, name), torch.dtype):
        raise UnsupportedDtypeError(
            f"dtype {name!r} is not a floating dtype: autograd is undefined for it. "
            f"Use one of {', '.join(FLOAT_DTYPES)}.")
    raise UnsupportedDtypeError(f"unknown dtype {spec!r}; choose from {', '.join(FLOAT_DTYPES)}.")


def cuda_available() -> bool:
    return torch.cuda.is_available()


def available_devices() -> list[str]:
    return ["cpu"] + (["cuda"] if cuda_available() else [])


def parse_device(spec: str | torch.device) -> torch.device:
    """Return a torch.device; raise :class:`DeviceUnavailableError` for CUDA without a GPU."""
    try:
        dev = torch.device(spec)
    except RuntimeError as exc:
        raise DeviceUnavailableError(f"unknown device {spec!r}: use 'cpu' or 'cuda[:N]'.") from exc
    if dev.type == "cuda" and not cuda_available():
        raise DeviceUnavailableError(
            f"device {spec!r} was requested but no CUDA GPU is available (torch {torch.__version__}, "
            f"built with CUDA {torch.version.cuda}). Run with --device cpu, or on a machine with a GPU.")
    if dev.type not in ("cpu", "cuda"):
        raise DeviceUnavailableError(f"device type {dev.type!r} is not supported; use 'cpu' or 'cuda'.")
    return dev


def dtype_supported_fast(dtype: torch.dtype, device: torch.device) -> bool:
    """float16 matmul/convolution on CPU is extremely slow; callers warn or switch to bfloat16."""
    return not (dtype == torch.float16 and device.type == "cpu")


@contextlib.contextmanager
def torch_threads(n: int | None = 1):
    """Temporarily set torch's intra-op thread count (None: leave it as is).

    Small problems run ~20x slower when two intra-op threads fight other jobs on a 2-core machine."""
    if n is None:
        yield
        return
    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)
