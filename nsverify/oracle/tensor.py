"""``ExactTensor``: a torch Tensor subclass whose entries are exact numbers (or affine forms in w).

Running a program on ExactTensors makes every ATen op reach :func:`dispatch`, which evaluates it exactly with
its record in the one table of exact ops (:data:`nsverify.oracle.ops.table.TABLE`).  Python branching on tensor values
(``if x[i] > best:``) goes through ``aten._local_scalar_dense`` on a comparison whose outcome was already
resolved exactly (or chosen by the enumerator at a tie), so data-dependent control flow is analysed too.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import torch

from nsverify.errors import NonFiniteError, UnsupportedOpError
from nsverify.oracle import callenv, context
from nsverify.oracle.numbers import NEG_INF, Aff, Jet
from nsverify.oracle.ops.table import TABLE


class ExactTensor(torch.Tensor):
    arr: np.ndarray

    @staticmethod
    def __new__(cls, arr: np.ndarray, dtype=None, requires_grad: bool = False):
        if dtype is None:
            dtype = _dtype_of(arr)
        t = torch.Tensor._make_wrapper_subclass(
            cls, tuple(arr.shape), dtype=dtype, device="cpu", requires_grad=requires_grad
        )
        t.arr = arr
        return t

    __torch_function__ = torch._C._disabled_torch_function_impl

    def __repr__(self, *, tensor_contents=None):
        return f"ExactTensor(shape={tuple(self.arr.shape)}, {self.arr.tolist()!r})"

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        return dispatch(func, args, kwargs or {})


def _dtype_of(arr: np.ndarray):
    if arr.dtype == bool:
        return torch.bool
    if np.issubdtype(arr.dtype, np.integer):
        return torch.int64
    ctx = context.active()
    return ctx.dtype if ctx is not None and ctx.dtype is not None else torch.float64


def to_exact_array(t) -> np.ndarray:
    """A plain tensor (constant of the program) as an exact array: floats become exact Fractions."""
    if isinstance(t, ExactTensor):
        return t.arr
    t = t.detach().cpu()
    if t.dtype == torch.bool:
        return t.numpy().astype(bool)
    if not t.is_floating_point():
        if t.is_complex():
            raise UnsupportedOpError("complex tensors are not supported by the exact oracle")
        return t.numpy().astype(np.int64)
    x = t.double().numpy() if t.dtype != torch.float64 else t.numpy()
    neg_inf = None
    if not np.isfinite(x).all():
        neg_inf = x == -np.inf  # an attention mask's -inf: NEG_INF (masks only; any other use raises)
        if not np.isfinite(x[~neg_inf]).all():
            raise NonFiniteError(
                "a constant tensor of the program holds NaN or +inf: exact analysis needs finite "
                "values; replace them (e.g. torch.nan_to_num) before checking"
            )
        x = np.where(neg_inf, 0.0, x)
    out = np.empty(x.shape, dtype=object)
    flat, xf = out.reshape(-1), x.reshape(-1)
    for sl in context.chunks(xf.size, 8 * context.POLL_EVERY):
        flat[sl] = [Fraction(v) for v in xf[sl].tolist()]
    if neg_inf is not None:
        out[neg_inf] = NEG_INF
    return out


def unwrap(x):
    if isinstance(x, ExactTensor):
        return x.arr
    if isinstance(x, torch.Tensor):
        return to_exact_array(x)
    if isinstance(x, (list, tuple)):
        return type(x)(unwrap(y) for y in x)
    return x


def wrap(x):
    if isinstance(x, np.generic):  # numpy reductions/logical ops on 0-d arrays return scalars (np.bool_, ...)
        x = np.asarray(x)
    if isinstance(x, np.ndarray):
        return ExactTensor(x)
    if isinstance(x, (Aff, Fraction, Jet)) or type(x).__name__ == "Ival":
        a = np.empty((), dtype=object)
        a[()] = x
        return ExactTensor(a)
    if isinstance(x, (list, tuple)):
        return type(x)(wrap(y) for y in x)
    return x


def supported_ops() -> list[str]:
    """ATen op names the exact interpreter evaluates (backward ops included)."""
    return TABLE.supported()


def lookup(func):
    """``(implementation, record)`` of an ATen op from the table (``(None, None)`` when there is none; the record
    is None for an elementwise op of the registry); an in-place variant has the out-of-place op's semantics, its
    result written back."""
    name = func.__name__  # e.g. "relu.default"
    base = func.overloadpacket.__name__
    impl, rec = TABLE.find(name, base)
    if impl is None and base.endswith("_"):
        impl, rec = TABLE.find(name.replace("_.", ".", 1), base[:-1])
    return impl, rec


def rewrite_hint(func) -> str | None:
    """An op's own advice on what to use instead, when its record only refuses it (None otherwise)."""
    rec = lookup(func)[1]
    return None if rec is None else rec.refuses


def evaluates(func) -> bool:
    """Whether the exact interpreter evaluates this ATen op (a record that only refuses it does not count)."""
    impl, rec = lookup(func)
    return impl is not None and (rec is None or rec.refuses is None)


#: callables ``observer(op base name, args, result)`` told of every exact ATen op (the autograd-graph reading of
#: :mod:`nsverify.oracle.park.optrace` registers one while the program runs; empty otherwise)
OBSERVERS: list = []


def dispatch(func, args, kwargs):
    ctx = context.current()
    name = func.__name__  # e.g. "relu.default"
    base = func.overloadpacket.__name__
    impl, rec = lookup(func)
    if impl is None:
        raise UnsupportedOpError(
            f"op aten.{name} is not supported by the exact oracle. Rewrite the program with supported ops "
            f"(e.g. torch.where / torch.maximum / relu for piecewise-linear logic), or open an issue. "
            f"Supported: {', '.join(supported_ops())}."
        )
    ctx.call += 1
    ctx.op_name = base
    context.check_deadline()
    a = unwrap(args)
    kw = {k: unwrap(v) for k, v in kwargs.items()}
    try:
        fout = _shadow_run(ctx, func, base, args, kwargs)
        ctx.shadow_out = fout
        out = impl(wrap, *a, **kw) if rec is not None and rec.reenters else impl(*a, **kw)
    except Exception as e:
        callenv.mark(e, "op")  # raised by the exact interpreter, not by fn's own code
        raise
    finally:
        ctx.shadow_args = ctx.shadow_in = ctx.shadow_out = None
    if OBSERVERS:
        for ob in OBSERVERS:
            ob(base, args, out)
    if base == "_local_scalar_dense":
        return out
    if base.endswith("_"):
        target = args[0]
        if not isinstance(target, ExactTensor):
            raise UnsupportedOpError(
                f"aten.{name} writes values that depend on w into a constant tensor in place; the exact "
                "oracle cannot follow that. Build the tensor out of place instead (torch.stack, torch.cat, "
                "torch.where)")
        if isinstance(out, np.ndarray) and target.arr.flags.writeable:
            target.arr[...] = np.broadcast_to(out, target.arr.shape)  # write through numpy views
        else:
            target.arr = np.broadcast_to(out, target.arr.shape).copy() if isinstance(out, np.ndarray) else \
                out
        return target
    res = wrap(out)
    if (isinstance(res, ExactTensor) and isinstance(fout, torch.Tensor) and res.dtype != fout.dtype
            and not fout.is_floating_point() and not fout.is_complex() and fout.dtype != torch.bool):
        res = ExactTensor(res.arr, dtype=fout.dtype)  # an integer result (a count of bools): PyTorch's dtype
    if fout is not None:
        _attach_shadow(res, fout)
    return res


# ------------------------------------------------------------------------------------------------------------
# float shadow: the same op run in w's dtype alongside, so kink sites can say whether floats saw the same tie
# ------------------------------------------------------------------------------------------------------------
def _shadow_of(x):
    if isinstance(x, ExactTensor):
        sh = getattr(x, "shadow", None)
        if sh is None:
            raise _NoShadow()
        return sh
    if isinstance(x, (list, tuple)):
        return type(x)(_shadow_of(y) for y in x)
    return x


class _NoShadow(Exception):
    pass


def _float_arrays(sargs) -> list:
    out = []
    for x in sargs:
        if isinstance(x, torch.Tensor):
            out.append(x.detach().cpu().double().numpy() if x.is_floating_point() else None)
        elif isinstance(x, (list, tuple)):
            out.extend(_float_arrays(x))
    return out


def _cloned(x):
    if isinstance(x, torch.Tensor):
        return x.detach().clone()
    if isinstance(x, (list, tuple)):
        return type(x)(_cloned(y) for y in x)
    return x


def _shadow_run(ctx, func, base, args, kwargs):
    ctx.shadow_args = ctx.shadow_in = None
    if not ctx.shadow or base == "_local_scalar_dense":
        return None
    try:
        sargs = _shadow_of(args)
        skw = {k: _shadow_of(v) for k, v in kwargs.items()}
        # what the op reads: a snapshot when it writes in place (relu_, add_, out=), which would overwrite it
        snap = _cloned(sargs) if base.endswith("_") or "out" in kwargs else sargs
        ctx.shadow_args = _float_arrays(snap)
        ctx.shadow_in = snap
        with torch.no_grad():
            return func(*sargs, **skw)
    except Exception:  # the float program cannot run this op alongside: no float-tie information here
        ctx.shadow_args = None
        return None


def _attach_shadow(res, fout):
    if isinstance(res, ExactTensor) and isinstance(fout, torch.Tensor):
        res.shadow = fout
    elif isinstance(res, (list, tuple)) and isinstance(fout, (list, tuple)):
        for r, f in zip(res, fout):
            _attach_shadow(r, f)
