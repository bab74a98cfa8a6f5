"""Errors that name the problem and the way out.

Every error nsverify raises for bad input derives from :class:`NsverifyError`, so callers can catch one type.
Each message states what is wrong and what to do instead.
"""
from __future__ import annotations


class NsverifyError(Exception):
    """Base class of every nsverify error."""


class UnknownOpError(NsverifyError, KeyError):
    """An op name that the registry of nonsmooth primitives does not know."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class UnsupportedOpError(NsverifyError):
    """A traced program uses an op the exact analysis cannot handle."""


class UnsupportedDtypeError(NsverifyError, TypeError):
    """An integer/bool dtype, or a dtype the device cannot run."""


class DeviceUnavailableError(NsverifyError, RuntimeError):
    """A device (e.g. CUDA) was requested but is not present."""


class NonFiniteError(NsverifyError, ValueError):
    """NaN or infinite values where exact analysis needs finite numbers. ``diagnosis`` (a
    :class:`nsverify.oracle.diagnosis.NonFiniteDiagnosis`, or None) says which op and why, when known."""

    def __init__(self, *args, diagnosis=None):
        super().__init__(*args)
        self.diagnosis = diagnosis


class NotLipschitzError(NsverifyError, ValueError):
    """The function is not locally Lipschitz at the point (an infinite one-sided slope, a jump, a value undefined
    nearby): it has no Clarke set there, so no gradient can be judged, and PyTorch's documented rule allows NaN or
    inf. ``diagnosis`` names the op."""

    def __init__(self, *args, diagnosis=None):
        super().__init__(*args)
        self.diagnosis = diagnosis


class InexactError(NsverifyError, ValueError):
    """A value that was asked to be exact (e.g. a tie) is not representable in the target dtype."""


class DataDependentControlFlowError(NsverifyError):
    """A branch on tensor values that the analysis cannot resolve."""


class NondeterministicError(NsverifyError):
    """The oracle's calls of ``fn`` at one point returned different values, from the same random state."""


class TooManyPieces(NsverifyError):
    """Exact enumeration would exceed its limit; the message gives the number of kink sites and advice."""


class OutputDirError(NsverifyError, OSError):
    """An output directory or file that cannot be created or written."""


class InputFileError(NsverifyError, OSError):
    """An input file that is missing, unreadable, of the wrong kind, or corrupted."""


class BadArgumentError(NsverifyError, ValueError):
    """An argument outside its valid range: a count below 1, a NaN or infinite number, an empty list."""


def check_number(value, name: str | None, *, integer: bool = False, lo: float | None = None, lo_open: bool = False,
                 hi: float | None = None, allow_inf: bool = False, hint: str = ""):
    """Return ``value`` if it is a number in range, else raise :class:`BadArgumentError` naming the fix.

    ``integer``: an int (bools are not numbers here); ``lo``/``hi``: bounds (``lo_open``: strictly above
    ``lo``); NaN is never accepted and +-inf only with ``allow_inf``. ``hint`` says what the number means;
    ``name`` (e.g. ``"draws"``) starts the message, None for the value alone (the CLI names the option).
    """
    import math

    def fmt(x) -> str:
        return str(x) if isinstance(x, int) else (str(int(x)) if x.is_integer() and abs(x) < 1e16 else f"{x:g}")

    want = "an integer" if integer else ("a number" if allow_inf else "a finite number")
    if lo is not None:
        want += f" {'>' if lo_open else '>='} {fmt(lo)}"
    if hi is not None:
        want += f"{' and' if lo is not None else ''} <= {fmt(hi)}"
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if ok and integer:
        ok = isinstance(value, int)
    if ok:
        ok = not math.isnan(value) and (allow_inf or not math.isinf(value))
    if ok and lo is not None:
        ok = value > lo if lo_open else value >= lo
    if ok and hi is not None:
        ok = value <= hi
    if not ok:
        what = f"{name}={value!r}" if name else repr(value)
        raise BadArgumentError(f"{what} is invalid: give {want}{f' ({hint})' if hint else ''}.")
    return value


class ReportFormatError(NsverifyError, ValueError):
    """A report.json that is corrupted, foreign, or of an unknown schema version."""


class OracleInputError(NsverifyError, ValueError):
    """An input the exact oracle cannot take: an empty or meta-device point, a tested vector of the wrong length
    or with NaN/inf entries, a negative or NaN limit, a progress reporter that is not callable."""
