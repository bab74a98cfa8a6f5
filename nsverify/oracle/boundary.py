"""The oracle's API boundary: arguments checked before any work, and raw errors turned into nsverify errors.

Every public entry point (:func:`~nsverify.oracle.check_gradient`, :func:`~nsverify.oracle.check_module`)
calls these checks first, so a bad argument costs nothing and names its fix:

==========================================  ===========================  =====================================
input                                       error                        fix named in the message
==========================================  ===========================  =====================================
``fn`` / ``loss_fn`` not callable          :class:`OracleInputError`    a function of w
``w`` not a tensor, empty, on ``meta``      :class:`OracleInputError`    a non-empty tensor with values
``w`` integer / complex                     :class:`UnsupportedDtypeError`  ``w.double()``
``w`` or a constant with NaN/inf            :class:`NonFiniteError`      finite values
``ad`` of the wrong length, non-numeric     :class:`OracleInputError`    one number per coordinate of w
``ad`` with NaN/inf                         :class:`NonFiniteError`      finite entries
``max_pieces`` < 1, ``time_limit`` < 0/NaN  :class:`OracleInputError`    the valid range
``model`` not a Module, meta parameters     :class:`OracleInputError`    a module with real parameters
==========================================  ===========================  =====================================

While the oracle runs, :func:`translated` turns what would escape as a raw Python, numpy or torch exception
into an nsverify error: values beyond the float range (an OverflowError inside fn's exact evaluation, or in
the float LPs) and exact division by zero become :class:`NonFiniteError`; any other failure of the *exact*
evaluation (fn ran in plain PyTorch at w, so the failure is the exact interpreter's) becomes
:class:`UnsupportedOpError` naming the ATen op and the fix.  Errors that ``fn`` itself raises on the plain float
point propagate unchanged: they are the program's own (as if ``fn(w)`` had been called).
"""

from __future__ import annotations

import contextlib
import math
from fractions import Fraction

import torch

from nsverify.errors import NonFiniteError, NsverifyError, OracleInputError, UnsupportedDtypeError, UnsupportedOpError
from nsverify.oracle import callenv


def check_limits(max_pieces, on_limit, time_limit) -> None:
    if on_limit not in ("raise", "unknown"):
        raise NsverifyError(f"on_limit must be 'raise' or 'unknown', got {on_limit!r}")
    if isinstance(max_pieces, bool) or not isinstance(max_pieces, int) or max_pieces < 1:
        raise OracleInputError(f"max_pieces={max_pieces!r} is invalid: give an integer >= 1 (default 10000)")
    if time_limit is not None:
        ok = isinstance(time_limit, (int, float)) and not isinstance(time_limit, bool)
        if not ok or math.isnan(time_limit) or time_limit < 0:
            raise OracleInputError(
                f"time_limit={time_limit!r} is invalid: give seconds >= 0 (default 60), or None for no limit")


def check_program(fn, name: str = "fn") -> None:
    """``fn`` can be called (a function, lambda or module of w)."""
    if not callable(fn):
        raise OracleInputError(
            f"{name} must be callable (a function of w returning a scalar tensor), got {type(fn).__name__} "
            f"{fn!r:.60}; e.g. check_gradient(lambda w: torch.relu(w).sum(), w)")


def check_point(w) -> None:
    """``w`` is a non-empty floating tensor with readable values (NaN/inf are rejected when read)."""
    if not isinstance(w, torch.Tensor):
        raise OracleInputError(
            f"w must be a torch.Tensor, got {type(w).__name__}; e.g. torch.tensor([...], dtype=torch.float64)")
    if w.device.type == "meta":
        raise OracleInputError(
            "w is a meta tensor: it has a shape but no values, and the exact oracle needs the point's values. "
            "Give a CPU (or CUDA) tensor; for a model built on the meta device, load or initialise its "
            "parameters first (e.g. model.to_empty(device='cpu') and then initialise them)")
    if w.is_complex() or not w.is_floating_point():
        raise UnsupportedDtypeError(f"w has dtype {w.dtype}; give a floating tensor (e.g. w.double())")
    if w.numel() == 0:
        raise OracleInputError(
            f"w is empty (shape {tuple(w.shape)}): there is no coordinate to differentiate; give the point "
            "at which to check the gradient (at least one entry)")


def check_module_args(model, inputs, loss_fn=None) -> None:
    if not isinstance(model, torch.nn.Module):
        raise OracleInputError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    check_program(loss_fn, "loss_fn")
    metas = [n for n, p in model.named_parameters() if p.device.type == "meta"]
    if metas or (isinstance(inputs, torch.Tensor) and inputs.device.type == "meta"):
        what = f"parameter {metas[0]!r}" if metas else "the inputs"
        raise OracleInputError(
            f"{what} of the model is a meta tensor (no values): the exact oracle needs real numbers; "
            "materialise the model first (model.to_empty(device='cpu') and initialise or load its weights)")


def tested_vector(ad, n: int | None, allow_nonfinite: bool = False) -> tuple:
    """A user-given vector to test as exact numbers (floats taken as the rationals they represent; NaN/inf kept as
    floats with ``allow_nonfinite``, for the NaN/inf diagnosis)."""
    from nsverify.oracle.numbers import Ival

    if isinstance(ad, torch.Tensor):
        if ad.device.type == "meta":
            raise OracleInputError("ad is a meta tensor (no values): give its numbers")
        if ad.is_complex():
            raise OracleInputError(f"ad has dtype {ad.dtype}: give real numbers")
        values = ad.detach().reshape(-1).cpu().double().tolist()
    elif isinstance(ad, (str, bytes)) or not hasattr(ad, "__iter__"):
        raise OracleInputError(f"ad must be a tensor or a sequence of numbers, got {type(ad).__name__}")
    else:
        values = list(ad)
    out = []
    for i, x in enumerate(values):
        if isinstance(x, (Fraction, Ival)):
            out.append(x)
            continue
        if isinstance(x, bool) or not isinstance(x, (int, float)):
            if isinstance(x, torch.Tensor) and x.numel() == 1:
                x = float(x)
            else:
                raise OracleInputError(f"ad[{i}] = {x!r} is not a number: give one number per coordinate of w")
        if not math.isfinite(x):
            if allow_nonfinite:
                out.append(float(x))
                continue
            raise NonFiniteError(f"ad[{i}] is {x}: the tested vector must be finite")
        out.append(Fraction(x))
    if n is not None and len(out) != n:
        raise OracleInputError(f"ad has {len(out)} entries but w has {n}; give one entry per coordinate of w")
    return tuple(out)


@contextlib.contextmanager
def translated(ev):
    """Turn raw exceptions of the exact analysis into nsverify errors (see the module docstring)."""
    from nsverify.oracle import context

    context.clear_failure()
    try:
        yield
    except NsverifyError:
        raise
    except Exception as e:
        if not ev.ran("float_ad"):  # fn failed in plain PyTorch at w: the program's own error, unchanged
            raise
        if callenv.raised_by_user_code(e):
            raise NsverifyError(
                f"fn raised {type(e).__name__} ({e}) in the oracle's exact evaluation at w, although its plain "
                "float run at w succeeded; it was raised in fn's own code (see the cause above), e.g. Python "
                "arithmetic on a value that fn read with .item() or float()") from e
        if isinstance(e, OverflowError):
            raise NonFiniteError(
                f"a value at w is beyond the float range ({e}): the exact evaluation is fine, but the oracle's "
                "linear programs work in floats. Rescale fn (e.g. divide the loss by a constant) so that its "
                "values and gradient stay below about 1e300") from e
        if isinstance(e, ZeroDivisionError):
            raise NonFiniteError(
                "fn divides by an exact zero at w, so its value (or derivative) there is not finite; move w off "
                "the pole or guard the division (e.g. x / (y + eps))") from e
        op, call = context.last_failure()
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        if not op:  # not inside a trace of fn: the oracle's own bug
            raise NsverifyError(f"internal error of the exact oracle ({type(e).__name__}: {msg}); please report "
                                "it with the program and the point") from e
        where = f"aten.{op} (ATen call {call} of the exact trace)"
        hint = ("fn mixes the oracle's CPU evaluation with tensors on another device: give w and every tensor "
                "fn uses on the CPU (check_module: model.cpu(), inputs.cpu(), targets.cpu())"
                if "device" in msg.lower() or "cuda" in msg.lower() else
                "rewrite that part of fn with supported ops (nsverify.oracle.tensor.supported_ops()), or report "
                "it: fn runs in plain PyTorch at w, so this is a limit of the exact interpreter")
        raise UnsupportedOpError(f"the exact evaluation of fn failed in {where}: {type(e).__name__}: {msg}. "
                                 f"{hint}") from e

