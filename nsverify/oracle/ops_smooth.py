"""Smooth non-polynomial ATen ops (exp, log, tanh, sigmoid, softplus, sin, cos, sqrt, log_softmax, softmax,
nll_loss, cross-entropy's pieces, mse_loss) evaluated with rigorous interval arithmetic (``mpmath.iv``).

Values that the intervals pin to a point (exp(0) = 1, sin(0) = 0, ...) collapse back to exact Fractions, so
exact verdicts survive smooth parts whenever the smooth parts are evaluated at such points.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
from mpmath import iv

from nsverify.errors import InexactError, UnsupportedOpError
from nsverify.oracle.numbers import Ival, sign, simplify, smooth, to_iv, val
from nsverify.oracle.ops_linear import arr, ipow, objmap
from nsverify.oracle.tensor import op

F = Fraction


def _ivf(fn):
    """Lift an mpmath.iv function to our numbers (Fraction / Ival)."""

    def f(x):
        return simplify(Ival(fn(to_iv(x))))

    return f


_exp = _ivf(iv.exp)
_log = _ivf(iv.log)
_sin = _ivf(iv.sin)
_cos = _ivf(iv.cos)
_tanh = _ivf(lambda x: iv.tanh(x))
_sqrt = _ivf(iv.sqrt)


def _sigmoid_v(x):
    return 1 / (1 + _exp(-x))


def _positive(x, what):
    s = sign(x)
    if s is None or s <= 0:
        raise InexactError(
            f"{what} of a value that is not provably positive ({x}); the exact oracle needs the "
            "argument bounded away from 0 (add an epsilon)"
        )
    return x


def exp(x):
    return smooth(x, _exp, _exp)


def log(x):
    _positive(val(x), "log")
    return smooth(x, _log, lambda v: 1 / v)


op("exp")(lambda a: objmap(exp, arr(a)))
op("log")(lambda a: objmap(log, arr(a)))
op("sin")(lambda a: objmap(lambda x: smooth(x, _sin, _cos), arr(a)))
op("cos")(lambda a: objmap(lambda x: smooth(x, _cos, lambda v: -_sin(v)), arr(a)))
op("tanh")(lambda a: objmap(lambda x: smooth(x, _tanh, lambda v: 1 - _tanh(v) * _tanh(v)), arr(a)))
op("sigmoid")(
    lambda a: objmap(lambda x: smooth(x, _sigmoid_v, lambda v: _sigmoid_v(v) * (1 - _sigmoid_v(v))), arr(a))
)
op("log1p")(lambda a: objmap(lambda x: log(1 + x), arr(a)))
op("expm1")(lambda a: objmap(lambda x: exp(x) - 1, arr(a)))


@op("sqrt")
def _sqrt_op(a):
    def f(x):
        _positive(val(x), "sqrt")
        return smooth(x, _sqrt, lambda v: 1 / (2 * _sqrt(v)))

    return objmap(f, arr(a))


@op("rsqrt")
def _rsqrt(a):
    return objmap(lambda x: 1 / x, _sqrt_op(a))


@op("reciprocal")
def _recip(a):
    return objmap(lambda x: 1 / x, arr(a))


@op("pow.Tensor_Scalar")
def _pow(a, e):
    """Integer exponents >= 0 exactly (polynomial); any other real exponent as exp(e log x), x > 0."""
    if isinstance(e, float) and e.is_integer():
        e = int(e)
    if isinstance(e, int) and e >= 0:
        return objmap(lambda x: ipow(x, e), arr(a))
    e = F(e)

    def f(x):
        _positive(val(x), "pow with a non-integer exponent")
        return exp(log(x) * e)

    return objmap(f, arr(a))


@op("softplus")
def _softplus(a, beta=1, threshold=20):
    beta, threshold = F(beta), F(threshold)

    def f(x):
        s = sign(val(x) * beta - threshold)
        if s is None or s == 0:
            raise InexactError(
                "softplus at its linear-switch threshold: PyTorch's softplus is not smooth there"
            )
        if s > 0:
            return x
        return log(1 + exp(x * beta)) / beta

    return objmap(f, arr(a))


def _lse(xs):
    m = max((val(x) for x in xs), key=lambda v: float(v))  # any shift is exact algebraically
    return log(sum((exp(x - m) for x in xs), F(0))) + m


@op("_log_softmax", "log_softmax")
def _log_softmax(a, dim, half_to_float=False):
    a = arr(a)
    am = np.moveaxis(a, dim, -1)
    out = np.empty(am.shape, dtype=object)
    for pos in np.ndindex(*am.shape[:-1]):
        xs = list(am[pos])
        lse = _lse(xs)
        for i, x in enumerate(xs):
            out[pos + (i,)] = x - lse
    return np.moveaxis(out, -1, dim)


@op("_softmax", "softmax")
def _softmax(a, dim, half_to_float=False):
    return objmap(exp, _log_softmax(a, dim))


@op("nll_loss_forward")
def _nll(x, target, weight, reduction, ignore_index):
    x = arr(x)
    if x.ndim == 1:
        x = x[None]
        target = np.asarray(target).reshape(1)
    terms, total = [], F(0)
    for n in range(x.shape[0]):
        t = int(target[n])
        if t == ignore_index:
            terms.append(F(0))
            continue
        wt = F(1) if weight is None else arr(weight)[t]
        terms.append(-x[n, t] * wt)
        total += wt
    if reduction == 0:
        return np.asarray(terms, dtype=object), _scalar(total)
    s = sum(terms, F(0))
    if reduction == 1:
        if total == 0:
            raise InexactError("nll_loss: every target is ignored (total weight 0)")
        s = s / total
    return _scalar(s), _scalar(total)


@op("mse_loss")
def _mse(a, b, reduction=1):
    d = arr(a) - arr(b)
    sq = d * d
    if reduction == 0:
        return sq
    s = np.sum(sq)
    return _scalar(s / sq.size if reduction == 1 else s)


def _scalar(v):
    out = np.empty((), dtype=object)
    out[()] = v
    return out


@op("gelu", "elu", "silu", "mish", "logsigmoid", "erf", "atan", "asin", "acos", "tan", "sinh", "cosh")
def _unsupported_smooth(*a, **k):
    from nsverify.oracle import context

    raise UnsupportedOpError(
        f"aten.{context.current().op_name} has no interval implementation in the exact oracle yet; supported "
        "smooth ops: exp, log, tanh, sigmoid, softplus, sin, cos, sqrt, log_softmax, softmax, "
        "cross_entropy/nll_loss, mse_loss. Rewrite with those (e.g. sigmoid(1.702 x) x for gelu) or check "
        "a piecewise-linear surrogate")


_unsupported_smooth.unsupported = True
