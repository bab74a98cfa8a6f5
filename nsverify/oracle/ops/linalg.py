"""Exact linear algebra: arithmetic, sums and means, matrix products (``mm`` .. ``linear``).

They act on numpy object arrays whose entries are Fractions or :class:`~nsverify.oracle.numbers.Aff`, so first-
order information (the local derivative in w) is carried by the operator overloading of ``Aff``.  None has a
backward op of its own: PyTorch's formulas for them are made of these same ops.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from nsverify.errors import UnsupportedOpError
from nsverify.oracle import context, fastexact
from nsverify.oracle.ops.common import arr, objmap, scalar
from nsverify.oracle.ops.record import ExactOp

F = Fraction


def _norm_dims(dim, ndim):
    if dim is None:
        return tuple(range(ndim))
    if isinstance(dim, int):
        dim = [dim]
    return tuple(sorted(d % ndim if ndim else 0 for d in dim))


def _asfrac_array(a: np.ndarray) -> np.ndarray:
    """Integer/bool arrays promoted to exact Fractions (for arithmetic with floats)."""
    if a.dtype == object:
        return a
    return objmap(lambda v: F(int(v)), a)


# ------------------------------------------------------------------------------------------------ arithmetic
def _bin(fn):
    def impl(a, b, alpha=None, **_):
        a, b = arr(a), arr(b)
        a, b = _asfrac_array(a), _asfrac_array(b)
        if alpha is not None:
            b = b * scalar(alpha)
        return broadcast_chunked(fn, a, b)

    return impl


def broadcast_chunked(fn, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``fn(a, b)`` for a broadcasting elementwise ``fn``, evaluated in chunks with deadline polls between them
    when the result is large (one numpy call on object arrays cannot be interrupted)."""
    shape = np.broadcast_shapes(a.shape, b.shape)
    n = int(np.prod(shape)) if shape else 1
    if n <= 4 * context.POLL_EVERY:
        return np.asarray(fn(a, b), dtype=object)
    af, bf = (np.broadcast_to(x, shape).reshape(-1) for x in (a, b))
    out = np.empty(n, dtype=object)
    for sl in context.chunks(n):
        out[sl] = fn(af[sl], bf[sl])
    return out.reshape(shape)


_add = _bin(lambda a, b: a + b if (s := fastexact.add(a, b)) is None else s)
_sub = _bin(lambda a, b: a - b)
_rsub = _bin(lambda a, b: b - a)
_mul = _bin(lambda a, b: a * b)


def _div(a, b, rounding_mode=None):
    if rounding_mode is not None:
        raise UnsupportedOpError(
            f"division with rounding_mode={rounding_mode!r} is not supported by the "
            "exact oracle (it is piecewise constant); use true division"
        )
    return _bin(lambda x, y: x / y)(a, b)


def _neg(a):
    return -arr(a)


def ipow(x, e: int):
    """x ** e for an integer e >= 0, by repeated exact multiplication (pow itself lives in :mod:`.smooth`)."""
    out = F(1)
    for _ in range(e):
        out = out * x
    return out


def _square(a):
    return objmap(lambda x: x * x, arr(a))


# ---------------------------------------------------------------------------------------------- reductions
def _sum(a, dim=None, keepdim=False, dtype=None):
    a = arr(a)
    if a.ndim == 0:
        return a.copy()
    dims = _norm_dims(dim if dim not in ([], ()) else None, a.ndim)
    return np.asarray(context.chunked_sum(a, dims, keepdim), dtype=object)


def _mean(a, dim=None, keepdim=False, dtype=None):
    a = arr(a)
    dims = _norm_dims(dim if dim not in ([], ()) else None, a.ndim)
    count = int(np.prod([a.shape[d] for d in dims])) if a.ndim else 1
    return _sum(a, dim, keepdim) * F(1, count)


# ------------------------------------------------------------------------------------------- linear algebra
#: exact multiply-adds of one large matmul between two polls of the deadline
MATMUL_CHUNK_WORK = 1 << 14


def matmul(a, b) -> np.ndarray:
    """Exact ``a @ b``; a large product is split into column (or row) blocks with deadline polls between them."""
    a, b = arr(a), arr(b)
    if a.ndim >= 2 and b.ndim >= 2:
        m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
        batch = int(np.prod(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) or (1,)))
        work = batch * m * k * n
        if work > 2 * MATMUL_CHUNK_WORK and max(m, n) > 1:
            along_b = n >= m
            step = max(1, MATMUL_CHUNK_WORK * (n if along_b else m) // work)
            parts = [_matmul(a, b[..., sl]) if along_b else _matmul(a[..., sl, :], b)
                     for sl in context.chunks(n if along_b else m, step)]
            return np.concatenate(parts, axis=-1 if along_b else -2)
    return _matmul(a, b)


def _matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    fast = fastexact.matmul(a, b)  # plain rationals: integer arithmetic, one normalisation per output entry
    if fast is None:  # rationals with intervals: exact endpoint products, one outward rounding per entry
        fast = fastexact.interval_matmul(a, b)
    if fast is not None:
        return fast
    if a.ndim >= 2 and b.ndim >= 2 and a.shape[-2] > 1:  # object entries (jets, surds): a row at a time, polling
        rows = []
        for i in range(a.shape[-2]):
            context.poll_deadline()
            rows.append(np.asarray(np.matmul(a[..., i:i + 1, :], b), dtype=object))
        return np.concatenate(rows, axis=-2)
    return np.asarray(np.matmul(a, b), dtype=object)


def _mm(a, b):
    return matmul(a, b)


def _addmm(bias, a, b, beta=1, alpha=1):
    out = matmul(a, b)
    if alpha != 1:
        out = out * scalar(alpha)
    return out + arr(bias) * scalar(beta) if beta != 0 else out


def _linear(x, weight, bias=None):
    out = matmul(x, arr(weight).T)
    return out + arr(bias) if bias is not None else out


def _lerp(a, b, weight):
    """start + weight * (end - start) (quantile's interpolation between two order statistics)."""
    a = arr(a)
    return a + arr(weight) * (arr(b) - a)


def _analytic(names, fn, nodes=()):
    return ExactOp(names, fn, analytic=True, nodes=nodes)


RECORDS = (
    _analytic(("add",), _add, ("AddBackward0", "AddBackward1")),
    _analytic(("sub",), _sub, ("SubBackward0", "SubBackward1")),
    _analytic(("rsub",), _rsub, ("RsubBackward0", "RsubBackward1")),
    _analytic(("mul",), _mul, ("MulBackward0", "MulBackward1")),
    _analytic(("div",), _div, ("DivBackward0", "DivBackward1")),  # a division by an exact 0 stops the trace
    _analytic(("neg",), _neg, ("NegBackward0",)),
    _analytic(("square",), _square),
    _analytic(("sum",), _sum, ("SumBackward0", "SumBackward1")),
    _analytic(("mean",), _mean, ("MeanBackward0", "MeanBackward1")),
    _analytic(("mm", "bmm", "matmul", "mv", "dot", "vdot", "inner"), _mm,
              ("MmBackward0", "BmmBackward0", "MvBackward0", "DotBackward0")),
    _analytic(("addmm", "addmv", "baddbmm"), _addmm, ("AddmmBackward0", "AddmvBackward0", "BaddbmmBackward0")),
    _analytic(("linear",), _linear),
    _analytic(("lerp",), _lerp, ("LerpBackward0", "LerpBackward1")),
)
