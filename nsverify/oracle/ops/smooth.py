"""Smooth non-polynomial ATen ops (exp, log, log1p, expm1, sin, cos, tanh, sigmoid, softplus, sqrt, rsqrt,
reciprocal, real powers, erf, gelu (both approximations), silu, logsumexp, log_softmax, softmax, nll_loss,
mse_loss) and their backward ops, evaluated with the rigorous enclosures of :mod:`nsverify.oracle.numbers`;
:data:`SMOOTH_OPS` names them.  Smooth ops without an interval rule yet (elu, mish, atan, ...) have a record that
refuses them with that list as advice.

A value is an exact Fraction only where it is proved rational (exp(0) = 1, sqrt of a square, ...); otherwise it
is an interval guaranteed to contain it.  Each op's derivative (forward mode) is enclosed the same way.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from nsverify.errors import InexactError, NonFiniteError, UnsupportedOpError
from nsverify.oracle import context
from nsverify.oracle.numbers import (
    NEG_INF,
    Aff,
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
from nsverify.oracle.ops.common import arr, filled, objmap, scalar
from nsverify.oracle.ops.linalg import ipow
from nsverify.oracle.ops.record import ExactOp
from nsverify.oracle.ops.singular import log_at, pow_at, sqrt_at

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


def _log_pos(x):
    return smooth(x, log_i, lambda v: 1 / v)


def log(x):
    if not _surely_positive(x):  # 0, < 0, undecided or undefined: the singular point's rules (ops.singular)
        return log_at(x, _log_pos)
    return _log_pos(x)


def _surely_positive(x) -> bool:
    try:
        return sign(val(x)) == 1
    except InexactError:  # an Undefined value (ops.singular) refuses comparisons
        return False


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


_exp = _map(exp)
_log = _map(log)
_sin = _map(lambda x: smooth(x, sin_i, cos_i))
_cos = _map(lambda x: smooth(x, cos_i, lambda v: -sin_i(v)))
_tanh = _map(tanh)
_sigmoid = _map(sigmoid)
_erf = _map(erf)
_silu = _map(silu)
_log1p = _map(lambda x: smooth(x, log1p_i, lambda v: 1 / _positive(1 + v, "log1p")))
_expm1 = _map(lambda x: smooth(x, expm1_i, exp_i))


def _gelu(a, approximate="none"):
    return objmap(lambda x: gelu(x, approximate), arr(a))


#: sqrt of one exact scalar (Fraction, Ival or Aff), its argument proved positive
_sqrt_pos = _pos_smooth("sqrt", sqrt_i, lambda v: 1 / (2 * sqrt_i(v)))


def sqrt(x):
    """sqrt of one exact scalar: the smooth rule where it is proved positive, else the singular point's rules
    (:func:`nsverify.oracle.ops.singular.sqrt_at`: 0 of a sum of squares is a norm, < 0 is undefined, ...)."""
    if _surely_positive(x):
        return _sqrt_pos(x)
    return sqrt_at(x, _sqrt_pos)


def rsqrt(x):
    """1 / sqrt(x) of one exact scalar, x proved positive (exact where x is the square of a rational)."""
    return 1 / sqrt(x)


def _sqrt_op(a):
    return objmap(sqrt, arr(a))


def _rsqrt(a):
    return objmap(lambda x: 1 / x, _sqrt_op(a))


def _recip(a):
    return objmap(lambda x: 1 / x, arr(a))


def _pow(a, e):
    """Integer exponents exactly (polynomial; negative ones as 1/x^-e); any other real exponent as
    exp(e log x), x > 0."""
    if isinstance(e, float) and e.is_integer():
        e = int(e)
    if isinstance(e, int):
        return objmap(lambda x: ipow(x, e) if e >= 0 else 1 / ipow(x, -e), arr(a))
    e = F(e)

    def pos(x):
        _positive(val(x), "pow with a non-integer exponent")
        return exp(log(x) * e)

    def f(x):
        if _surely_positive(x):
            return pos(x)
        return pow_at(x, e, pos)

    return objmap(f, arr(a))


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


def _softmax(a, dim, half_to_float=False, safe=False):
    """softmax along ``dim`` as exp(x_i - m) / sum_j exp(x_j - m) (:func:`shifted_exps`); -inf entries (an
    attention mask) get weight exactly 0."""
    def row(xs, live):
        es, total, _ = shifted_exps(xs)
        return [e / total for e in es]

    return _by_rows(a, dim, safe, F(0), row)


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


# ------------------------------------------------------------------------------------------- backward ops
def _sigmoid_backward(grad, out):
    o = arr(out)
    return arr(grad) * o * (1 - o)


def _tanh_backward(grad, out):
    o = arr(out)
    return arr(grad) * (1 - o * o)


def _softplus_backward(grad, x, beta, threshold):
    b, th = scalar(beta), scalar(threshold)

    def d(v):
        if sign(val(v) * b - th) > 0:
            return F(1)
        z = exp(v * b)
        return z / (z + 1)

    return arr(grad) * objmap(d, arr(x))


def _der(fn, x):
    """The derivative of a smooth scalar function at the value x (reverse mode: a plain number), read off a
    forward-mode probe x + d (exact, or enclosed)."""
    return fn(Aff(x, {0: F(1)})).g.get(0, F(0))


def _gelu_backward(grad, x, approximate="none"):
    return arr(grad) * objmap(lambda v: gelu_derivative(val(v), approximate), arr(x))


def _silu_backward(grad, x):
    return arr(grad) * objmap(lambda v: _der(silu, val(v)), arr(x))


def _log_softmax_backward(grad, out, dim, input_dtype=None):
    g, o = arr(grad), arr(out)
    s = np.sum(g, axis=dim, keepdims=True)
    return g - objmap(exp, o) * s


def _softmax_backward(grad, out, dim, input_dtype=None):
    g, o = arr(grad), arr(out)
    return o * (g - np.sum(g * o, axis=dim, keepdims=True))


def _nll_backward(grad, x, target, weight, reduction, ignore_index, total_weight):
    x = arr(x)
    batched = x.ndim == 2
    xs = x if batched else x[None]
    t = np.asarray(target).reshape(-1)
    g = arr(grad)
    out = filled(xs.shape, F(0))
    tw = arr(total_weight)[()] if reduction == 1 else F(1)
    for n in range(xs.shape[0]):
        if int(t[n]) == ignore_index:
            continue
        wt = F(1) if weight is None else arr(weight)[int(t[n])]
        gn = g.reshape(-1)[n] if reduction == 0 else g.reshape(-1)[0]
        out[n, int(t[n])] = -wt * gn / tw
    return out if batched else out[0]


def _mse_backward(grad, x, target, reduction):
    d = arr(x) - arr(target)
    scale = F(2, d.size) if reduction == 1 else F(2)
    return d * arr(grad) * scale


# ---------------------------------------------------------------------------------------------- the records
def _smooth(names, fn, nodes=(), **kw):
    return ExactOp(names, fn, analytic=True, nodes=nodes, enclosure=True, **kw)


_EVALUATED = (
    _smooth(("exp",), _exp, ("ExpBackward0",)),
    _smooth(("log",), _log, ("LogBackward0",)),
    _smooth(("log1p",), _log1p, ("Log1pBackward0",)),
    _smooth(("expm1",), _expm1, ("Expm1Backward0",)),
    _smooth(("sin",), _sin, ("SinBackward0",)),
    _smooth(("cos",), _cos, ("CosBackward0",)),
    _smooth(("tanh",), _tanh, ("TanhBackward0",), backward_names=("tanh_backward",), backward=_tanh_backward),
    _smooth(("sigmoid",), _sigmoid, ("SigmoidBackward0",),
            backward_names=("sigmoid_backward",), backward=_sigmoid_backward),
    _smooth(("softplus",), _softplus, backward_names=("softplus_backward",), backward=_softplus_backward),
    _smooth(("sqrt",), _sqrt_op, ("SqrtBackward0",)),
    _smooth(("rsqrt",), _rsqrt, ("RsqrtBackward0",)),
    _smooth(("reciprocal",), _recip, ("ReciprocalBackward0",)),
    _smooth(("pow.Tensor_Scalar",), _pow),  # PowBackward0: optrace accepts it for a safe exponent only
    _smooth(("erf",), _erf, ("ErfBackward0",)),
    _smooth(("gelu",), _gelu, ("GeluBackward0",), backward_names=("gelu_backward",), backward=_gelu_backward),
    _smooth(("silu",), _silu, ("SiluBackward0",), backward_names=("silu_backward",), backward=_silu_backward),
    _smooth(("logsumexp",), _logsumexp, ("LogsumexpBackward0",)),
    _smooth(("_log_softmax", "log_softmax"), _log_softmax, ("LogSoftmaxBackward0",),
            backward_names=("_log_softmax_backward_data",), backward=_log_softmax_backward),
    _smooth(("_softmax", "softmax"), _softmax, ("SoftmaxBackward0",),
            backward_names=("_softmax_backward_data",), backward=_softmax_backward),
    _smooth(("nll_loss_forward",), _nll, ("NllLossBackward0",),
            backward_names=("nll_loss_backward",), backward=_nll_backward),
    _smooth(("mse_loss",), _mse, ("MseLossBackward0",), backward_names=("mse_loss_backward",), backward=_mse_backward),
)

#: the smooth functions with exact enclosures, by their user-facing names (the advice of a refused smooth op)
SMOOTH_OPS: tuple[str, ...] = tuple(rec.title for rec in _EVALUATED)


def _unsupported_smooth(*a, **k):
    raise UnsupportedOpError(
        f"aten.{context.current().op_name} has no interval implementation in the exact oracle yet; supported "
        f"smooth ops: {', '.join(SMOOTH_OPS)}. Rewrite with those (e.g. log(sigmoid(x)) for logsigmoid) or "
        "check a piecewise-linear surrogate")


RECORDS = _EVALUATED + (
    ExactOp(("elu", "mish", "logsigmoid", "log_sigmoid_forward", "erfc", "tan",
             "atanh", "asinh", "acosh", "log2", "log10", "exp2", "lgamma", "digamma"), _unsupported_smooth,
            refuses=f"Smooth ops with exact enclosures: {', '.join(SMOOTH_OPS)}"),
)
