"""Smooth non-polynomial ATen ops (exp, log, log1p, expm1, sin, cos, tanh, sigmoid, softplus, sqrt, rsqrt,
reciprocal, real powers, erf, gelu (both approximations), silu, log_softmax, softmax, nll_loss, mse_loss),
evaluated with the rigorous enclosures of :mod:`nsverify.oracle.numbers`.

A value is an exact Fraction only where it is proved rational (exp(0) = 1, sqrt of a square, ...); otherwise it
is an interval guaranteed to contain it.  Each op's derivative (forward mode) is enclosed the same way.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from nsverify.errors import InexactError, NonFiniteError, UnsupportedOpError
from nsverify.oracle.numbers import (
    NEG_INF,
    cos_i,
    erf_i,
    exp_i,
    expm1_i,
    log1p_i,
    log_i,
    normal_cdf_i,
    normal_pdf_i,
    pi_i,
    sigmoid_i,
    sign,
    sin_i,
    smooth,
    softplus_i,
    sqrt_i,
    tanh_i,
    val,
)
from nsverify.oracle.ops_linear import arr, ipow, objmap
from nsverify.oracle.tensor import op

F = Fraction


def _positive(x, what):
    s = sign(x)
    if s is None or s <= 0:
        raise InexactError(
            f"{what} of a value that is not provably positive ({x}); the exact oracle needs the "
            "argument bounded away from 0 (add an epsilon)"
        )
    return x


def exp(x):
    return smooth(x, exp_i, exp_i)


def log(x):
    _positive(val(x), "log")
    return smooth(x, log_i, lambda v: 1 / v)


def tanh(x):
    return smooth(x, tanh_i, lambda v: 1 - tanh_i(v) * tanh_i(v))


def sigmoid(x):
    return smooth(x, sigmoid_i, lambda v: sigmoid_i(v) * (1 - sigmoid_i(v)))


def erf(x):
    """erf, derivative 2 exp(-x^2) / sqrt(pi)."""
    return smooth(x, erf_i, lambda v: 2 * exp_i(-(v * v)) / sqrt_i(pi_i()))


def gelu(x, approximate="none"):
    """PyTorch's gelu: x Phi(x) (``none``), or 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (``tanh``; the
    constants are the real numbers sqrt(2/pi) and 0.044715, which PyTorch rounds to the dtype)."""
    return smooth(x, *_gelu_parts(approximate))


def gelu_derivative(v, approximate="none"):
    """gelu's derivative at the plain value v (its backward: one tanh or Phi/phi evaluation, not the value's too)."""
    return _gelu_parts(approximate)[1](v)


_KAPPA = F(44715, 10**6)


def _gelu_parts(approximate):
    """(value, derivative) of gelu as functions of a plain exact value."""
    if approximate == "none":
        return (lambda v: v * normal_cdf_i(v)), (lambda v: normal_cdf_i(v) + v * normal_pdf_i(v))
    if approximate != "tanh":
        raise UnsupportedOpError(f"gelu with approximate={approximate!r}: PyTorch knows 'none' and 'tanh'")
    c = sqrt_i(2 / pi_i())

    def value(v):
        return v * (1 + tanh_i(c * (v + _KAPPA * v * v * v))) / 2

    def der(v):
        t = tanh_i(c * (v + _KAPPA * v * v * v))
        return (1 + t) / 2 + v * (1 - t * t) * c * (1 + 3 * _KAPPA * v * v) / 2

    return value, der


def silu(x):
    """x sigmoid(x), derivative s (1 + x (1 - s))."""
    return smooth(x, lambda v: v * sigmoid_i(v), lambda v: sigmoid_i(v) * (1 + v * (1 - sigmoid_i(v))))


def _pos_smooth(what, f_val, f_der):
    def f(x):
        _positive(val(x), what)
        return smooth(x, f_val, f_der)

    return f


def _map(fn):
    return lambda a, *args, **kw: objmap(fn, arr(a))


op("exp")(_map(exp))
op("log")(_map(log))
op("sin")(_map(lambda x: smooth(x, sin_i, cos_i)))
op("cos")(_map(lambda x: smooth(x, cos_i, lambda v: -sin_i(v))))
op("tanh")(_map(tanh))
op("sigmoid")(_map(sigmoid))
op("erf")(_map(erf))
op("silu")(_map(silu))
op("log1p")(_map(lambda x: smooth(x, log1p_i, lambda v: 1 / _positive(1 + v, "log1p"))))
op("expm1")(_map(lambda x: smooth(x, expm1_i, exp_i)))


@op("gelu")
def _gelu(a, approximate="none"):
    return objmap(lambda x: gelu(x, approximate), arr(a))


#: sqrt of one exact scalar (Fraction, Ival or Aff), its argument proved positive
sqrt = _pos_smooth("sqrt", sqrt_i, lambda v: 1 / (2 * sqrt_i(v)))


def rsqrt(x):
    """1 / sqrt(x) of one exact scalar, x proved positive (exact where x is the square of a rational)."""
    return 1 / sqrt(x)


@op("sqrt")
def _sqrt_op(a):
    return objmap(sqrt, arr(a))


@op("rsqrt")
def _rsqrt(a):
    return objmap(lambda x: 1 / x, _sqrt_op(a))


@op("reciprocal")
def _recip(a):
    return objmap(lambda x: 1 / x, arr(a))


@op("pow.Tensor_Scalar")
def _pow(a, e):
    """Integer exponents exactly (polynomial; negative ones as 1/x^-e); any other real exponent as
    exp(e log x), x > 0."""
    if isinstance(e, float) and e.is_integer():
        e = int(e)
    if isinstance(e, int):
        return objmap(lambda x: ipow(x, e) if e >= 0 else 1 / ipow(x, -e), arr(a))
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
        return smooth(x * beta, softplus_i, sigmoid_i) / beta

    return objmap(f, arr(a))


def _lse(xs):
    m = max((val(x) for x in xs), key=lambda v: float(v))  # any shift is exact algebraically
    return log(sum((exp(x - m) for x in xs), F(0))) + m


def logsumexp(xs):
    """log(sum(exp(x) for x in xs)) of exact scalars (a Fraction only where provably rational)."""
    return _lse(xs)


@op("logsumexp")
def _logsumexp(a, dim, keepdim=False):
    a = arr(a)
    dims = [d % a.ndim for d in ([dim] if isinstance(dim, int) else dim)] if a.ndim else []
    if not dims:
        return a.copy()
    am = np.moveaxis(a, dims, list(range(a.ndim - len(dims), a.ndim)))
    lead = am.shape[: a.ndim - len(dims)]
    flat = am.reshape(lead + (-1,))
    out = np.empty(lead, dtype=object)
    for pos in np.ndindex(*lead):
        out[pos] = _lse(list(flat[pos]))
    if keepdim:
        out = out.reshape(tuple(1 if i in dims else n for i, n in enumerate(a.shape)))
    return out


def _by_rows(a, dim, safe: bool, fill, row):
    """Apply ``row(xs, live)`` to every row of ``a`` along ``dim`` (``live``: its entries that are not -inf, an
    attention mask's :class:`~nsverify.oracle.numbers.NegInf`). A row that is all -inf raises (PyTorch's softmax
    gives NaN there), unless ``safe`` (``_safe_softmax``): then it is all ``fill``."""
    a = arr(a)
    am = np.moveaxis(a, dim, -1)
    out = np.empty(am.shape, dtype=object)
    for pos in np.ndindex(*am.shape[:-1]):
        xs = list(am[pos])
        live = [x for x in xs if x is not NEG_INF]
        if not live and not safe:
            raise NonFiniteError("softmax of a row that is all -inf (a fully masked attention row) is NaN; "
                                 "exact analysis needs finite values")
        for i, v in enumerate(row(xs, live) if live else [fill] * len(xs)):
            out[pos + (i,)] = v
    return np.moveaxis(out, -1, dim)


@op("_log_softmax", "log_softmax")
def _log_softmax(a, dim, half_to_float=False, safe=False):
    """log softmax along ``dim``; -inf entries (a mask) stay -inf and leave the others' normaliser."""
    def row(xs, live):
        lse = _lse(live)
        return [x if x is NEG_INF else x - lse for x in xs]

    return _by_rows(a, dim, safe, NEG_INF, row)


def shifted_exps(xs: list) -> tuple[list, object, object]:
    """``(es, total, m)``: es = exp(x - m) for each x (0 for -inf, an attention mask), their sum and the shift m,
    the largest value among the finite entries (at least one). The entries equal to m give exp(0) = 1 exactly,
    so softmax weights es / total are exact where scores tie (1/n for a row of equal scores)."""
    m = max((val(x) for x in xs if x is not NEG_INF), key=lambda v: float(v))  # any shift is exact algebraically
    es = [F(0) if x is NEG_INF else exp(x - m) for x in xs]
    return es, sum(es, F(0)), m


@op("_softmax", "softmax")
def _softmax(a, dim, half_to_float=False, safe=False):
    """softmax along ``dim`` as exp(x_i - m) / sum_j exp(x_j - m) (:func:`shifted_exps`); -inf entries (an
    attention mask) get weight exactly 0."""
    def row(xs, live):
        es, total, _ = shifted_exps(xs)
        return [e / total for e in es]

    return _by_rows(a, dim, safe, F(0), row)


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


@op("_safe_softmax")
def _safe_softmax(a, dim, dtype=None):
    """scaled_dot_product_attention's softmax: 0 on rows that are all -inf (a fully masked row), softmax
    elsewhere."""
    return _softmax(a, dim, safe=True)


SMOOTH_OPS = ("exp", "log", "log1p", "expm1", "sin", "cos", "tanh", "sigmoid", "softplus", "sqrt", "rsqrt",
              "reciprocal", "pow", "erf", "gelu", "silu", "log_softmax", "softmax", "nll_loss", "mse_loss")


def _scalar(v):
    out = np.empty((), dtype=object)
    out[()] = v
    return out


@op("elu", "mish", "logsigmoid", "log_sigmoid_forward", "erfc", "atan", "asin", "acos", "tan", "sinh", "cosh",
    "atanh", "asinh", "acosh", "log2", "log10", "exp2", "lgamma", "digamma")
def _unsupported_smooth(*a, **k):
    from nsverify.oracle import context

    raise UnsupportedOpError(
        f"aten.{context.current().op_name} has no interval implementation in the exact oracle yet; supported "
        f"smooth ops: {', '.join(SMOOTH_OPS)}. Rewrite with those (e.g. log(sigmoid(x)) for logsigmoid) or "
        "check a piecewise-linear surrogate")


_unsupported_smooth.unsupported = True
_unsupported_smooth.hint = f"Smooth ops with exact enclosures: {', '.join(SMOOTH_OPS)}"
