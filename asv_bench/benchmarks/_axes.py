"""The dtype and device axes shared by every nsverify benchmark (classic asv ``params``).

Use it in ``asv_bench/benchmarks/<topic>.py``::

    from ._axes import DtypeDevice, sync

    class ReluBackward(DtypeDevice):
        params = DtypeDevice.params + [[1_000, 1_000_000]]      # extra axes go after dtype, device
        param_names = DtypeDevice.param_names + ["n"]

        def setup(self, dtype, device, n):
            super().setup(dtype, device)           # sets self.dtype, self.device (torch objects)
            self.x = torch.zeros(n, dtype=self.dtype, device=self.device, requires_grad=True)

        def time_backward(self, dtype, device, n):
            torch.relu(self.x).sum().backward()
            sync(self.device)                      # wait for CUDA before the timer stops

Impossible combinations raise ``NotImplementedError`` in ``setup``, which asv records as skipped ("n/a"):
CUDA without a GPU, float16 on CPU (very slow there: use bfloat16), bfloat16 on a GPU without bf16 support.
Classes without params use :func:`resolve` directly.
"""
from __future__ import annotations

DTYPES = ["float32", "float64", "bfloat16", "float16"]
DEVICES = ["cpu", "cuda"]


def resolve(dtype: str, device: str, allow_cpu_float16: bool = False):
    """``(torch.dtype, torch.device)`` for the axis values; ``NotImplementedError`` if impossible here."""
    import torch

    from nsverify.devices import parse_device, parse_dtype
    from nsverify.errors import DeviceUnavailableError

    try:
        dev = parse_device(device)
    except DeviceUnavailableError as exc:
        raise NotImplementedError(f"skipped: {exc}") from exc
    dt = parse_dtype(dtype)
    if dt == torch.float16 and dev.type == "cpu" and not allow_cpu_float16:
        raise NotImplementedError("skipped: float16 on CPU is emulated and very slow; "
                                  "benchmark bfloat16 on CPU")
    if dt == torch.bfloat16 and dev.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise NotImplementedError(f"skipped: {torch.cuda.get_device_name(dev)} has no bfloat16 support")
    return dt, dev


def sync(device) -> None:
    """Block until queued CUDA work is done (no-op on CPU); call at the end of every timed CUDA body."""
    import torch

    if getattr(device, "type", device) == "cuda":
        torch.cuda.synchronize()


class DtypeDevice:
    """Base class giving a benchmark the dtype x device axes; subclasses add time_*/peakmem_* methods."""

    params = [list(DTYPES), list(DEVICES)]
    param_names = ["dtype", "device"]

    def setup(self, dtype, device, *rest):
        self.dtype, self.device = resolve(dtype, device)
