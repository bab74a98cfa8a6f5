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
    """NaN or infinite values where exact analysis needs finite numbers."""


class InexactError(NsverifyError, ValueError):
    """A value that was asked to be exact (e.g. a tie) is not representable in the target dtype."""


class DataDependentControlFlowError(NsverifyError):
    """A branch on tensor values that the analysis cannot resolve."""


class TooManyPieces(NsverifyError):
    """Exact enumeration would exceed its limit; the message gives the number of kink sites and advice."""


class OutputDirError(NsverifyError, OSError):
    """An output directory that cannot be created or written."""


class ReportFormatError(NsverifyError, ValueError):
    """A report.json that is corrupted, foreign, or of an unknown schema version."""


class OracleInputError(NsverifyError, ValueError):
    """An input the exact oracle cannot take: an empty or meta-device point, a tested vector of the wrong length
    or with NaN/inf entries, a negative or NaN limit, a progress reporter that is not callable."""
