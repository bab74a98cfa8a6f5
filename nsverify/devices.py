"""Dtype and device arguments, and the one timing helper, shared by the CLI, generators, report and benchmarks.

* :func:`parse_dtype`, :func:`parse_device`: validate user input, with errors that name the fix.
* :func:`torch_threads`: a temporary intra-op thread count.
* :func:`synchronize`, :func:`time_call`, :func:`time_side_by_side`: wall-clock timing that waits for CUDA,
  returns every sample, and measures candidates interleaved in one run so that machine load hits them alike.
  The report sections' ratios, asv_bench/ and scripts/gpu/ all time through these.
* :class:`Heartbeat`: a "still compiling ... 20 s" line on stderr every 10 s during a long silent step
  (torch.compile in ``nsverify conventions``, the C++ kernel build).
"""
from __future__ import annotations

import contextlib
import math
import statistics
import sys
import threading
import time
from dataclasses import dataclass
from typing import Callable, Mapping

import torch

from nsverify.errors import DeviceUnavailableError, NsverifyError, UnsupportedDtypeError

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

    Small problems run ~20x slower when two intra-op threads fight other jobs on a 2-core machine.
    """
    if n is None:
        yield
        return
    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


# ---------------------------------------------------------------------------------------------------------------
# Timing


class TimingArgumentError(NsverifyError, ValueError):
    """A timing request that cannot be measured (no candidates, zero repeats, an unknown statistic...)."""


def _device_type(device) -> str | None:
    if device is None:
        return None
    return getattr(device, "type", None) or str(device).split(":")[0]


def synchronize(device=None) -> None:
    """Block until the work queued on ``device`` is done: ``torch.cuda.synchronize`` on CUDA, nothing on CPU.

    Call it before a timer stops: CUDA kernels run asynchronously, so without it a timer measures launches.
    """
    if _device_type(device) == "cuda":
        torch.cuda.synchronize(device)


#: Statistics over samples that :meth:`SideBySide.stat` and :meth:`SideBySide.ratio` accept.
STATISTICS: dict[str, Callable] = {"min": min, "median": statistics.median, "mean": statistics.fmean,
                                   "max": max}


@dataclass(frozen=True)
class SideBySide:
    """Seconds per call of each candidate, every sample kept (``samples[name]``, in measurement order).

    ``rounds`` is the number of interleaved rounds; each candidate has one sample per round.
    """

    samples: dict[str, list[float]]
    rounds: int

    def stat(self, name: str, how: str = "min") -> float:
        """One statistic (``min``, ``median``, ``mean``, ``max``) of a candidate's samples, in seconds."""
        if name not in self.samples:
            raise TimingArgumentError(f"no candidate {name!r} was timed; the candidates are "
                                      f"{', '.join(self.samples)}.")
        if how not in STATISTICS:
            raise TimingArgumentError(f"unknown statistic {how!r}; use one of {', '.join(STATISTICS)}.")
        return STATISTICS[how](self.samples[name])

    def ratio(self, candidate: str, baseline: str, how: str = "min") -> float:
        """``stat(candidate) / stat(baseline)``: how many times slower the candidate is (inf for a zero baseline)."""
        num, den = self.stat(candidate, how), self.stat(baseline, how)
        return num / den if den > 0 else math.inf

    def round_ratios(self, candidate: str, baseline: str) -> list[float]:
        """The candidate's time over the baseline's, round by round (the two samples of one interleaved round
        met the same load)."""
        self.stat(candidate)
        self.stat(baseline)
        return [c / b if b > 0 else math.inf for c, b in zip(self.samples[candidate], self.samples[baseline])]

    def ratio_iqr(self, candidate: str, baseline: str) -> tuple[float, float]:
        """The interquartile range (25th and 75th percentiles, linear interpolation) of :meth:`round_ratios`."""
        r = sorted(self.round_ratios(candidate, baseline))

        def q(p: float) -> float:
            k = (len(r) - 1) * p
            lo, hi = math.floor(k), math.ceil(k)
            return r[lo] + (r[hi] - r[lo]) * (k - lo)

        return q(0.25), q(0.75)

    def to_json(self) -> dict:
        return {"rounds": self.rounds, "samples_s": {k: list(v) for k, v in self.samples.items()}}


def time_side_by_side(fns: Mapping[str, Callable[[], object]], *, repeat: int = 5, warmup: int = 1,
                      number: int = 1, device=None, min_time: float = 0.0, max_repeat: int = 200,
                      clock: Callable[[], float] = time.perf_counter) -> SideBySide:
    """Time several callables in one run, interleaved: every round calls each candidate once, in order.

    ``warmup`` untimed rounds come first.  Then at least ``repeat`` timed rounds, and more while some
    candidate's total measured time is below ``min_time`` seconds, up to ``max_repeat`` rounds.  A sample
    is the time of ``number`` consecutive calls divided by ``number``.  On a CUDA ``device`` the device is
    synchronised before and after each sample.  ``clock`` returns seconds (tests pass a fake one).

    Interleaving makes load from other jobs hit every candidate alike, so their ratio is meaningful on a
    shared machine; :meth:`SideBySide.ratio` takes it.
    """
    if not isinstance(fns, Mapping):
        raise TimingArgumentError(f"time_side_by_side takes a mapping {{name: callable}}, got {type(fns).__name__}; "
                                  "name each candidate, e.g. {'native': f, 'minimal': g}.")
    fns = dict(fns)
    if not fns:
        raise TimingArgumentError("time_side_by_side needs at least one callable to time; pass {name: fn}.")
    bad = [k for k, f in fns.items() if not callable(f)]
    if bad:
        raise TimingArgumentError(f"candidates {', '.join(map(repr, bad))} are not callable; pass functions "
                                  "that take no arguments (wrap calls in a lambda).")
    for name, value, low in (("repeat", repeat, 1), ("warmup", warmup, 0), ("number", number, 1),
                             ("max_repeat", max_repeat, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise TimingArgumentError(f"{name}={value!r} is invalid: give an integer >= {low}.")
    if max_repeat < repeat:
        raise TimingArgumentError(f"max_repeat={max_repeat} is below repeat={repeat}: raise max_repeat.")
    if not (isinstance(min_time, (int, float)) and math.isfinite(min_time) and min_time >= 0):
        raise TimingArgumentError(f"min_time={min_time!r} is invalid: give a finite number of seconds >= 0.")
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    samples: dict[str, list[float]] = {k: [] for k in fns}
    totals = dict.fromkeys(fns, 0.0)
    rounds = 0
    while rounds < max_repeat and (rounds < repeat or min(totals.values()) < min_time):
        for name, fn in fns.items():
            synchronize(device)
            t0 = clock()
            for _ in range(number):
                fn()
            synchronize(device)
            dt = clock() - t0
            samples[name].append(dt / number)
            totals[name] += dt
        rounds += 1
    return SideBySide(samples, rounds)


def time_call(fn: Callable[[], object], *, repeat: int = 5, warmup: int = 1, number: int = 1, device=None,
              clock: Callable[[], float] = time.perf_counter) -> list[float]:
    """Seconds per call of ``fn()``: ``warmup`` untimed calls, then ``repeat`` samples.

    The one-candidate case of :func:`time_side_by_side` (same arguments, same samples).
    """
    return time_side_by_side({"fn": fn}, repeat=repeat, warmup=warmup, number=number, device=device,
                             max_repeat=repeat, clock=clock).samples["fn"]


class Heartbeat:
    """``with Heartbeat("compiling X"):`` prints ``"<prefix>still compiling X ... 20 s"`` on stderr every
    ``every`` seconds while the block runs (nothing when it ends sooner), from a daemon thread, so that a long
    silent step (torch.compile, a C++ build) does not look hung. :meth:`beat` restarts the clock with a new
    label (a command that prints its own progress lines calls it after each)."""

    def __init__(self, what: str, every: float = 10.0, prefix: str = "", stream=None):
        self.what, self.every, self.prefix, self._stream = what, every, prefix, stream
        self._stop = threading.Event()
        self._since = time.monotonic()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def beat(self, what: str | None = None) -> None:
        with self._lock:
            self._since = time.monotonic()
            if what is not None:
                self.what = what

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            with self._lock:
                line = f"{self.prefix}still {self.what} ... {time.monotonic() - self._since:.0f} s"
            print(line, file=self._stream or sys.stderr, flush=True)

    def __enter__(self) -> Heartbeat:
        self.beat()
        self._thread = threading.Thread(target=self._run, name="nsverify-heartbeat", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
