"""Exact implementations of the ops that jump (issue 36): ``round`` (fake quantisation), ``floor``, ``ceil``,
``trunc``, ``frac``, ``hardshrink`` (and its backward op) and ``heaviside``.

Between its jumps each op is locally constant (round, floor, ceil, trunc, heaviside) or locally the identity or
0 (hardshrink, frac: x - trunc(x)), so it is evaluated exactly there, derivative included (0 for the steps, as
PyTorch's formulas give). At a jump an argument that depends on w makes fn discontinuous at w: it has no Clarke
set, and the oracle refuses with :class:`~nsverify.errors.NotLipschitzError` (``diagnosis`` kind
``"not_lipschitz"``: PyTorch's documented rule allows any value there) -- it never answers member or
not_member. A constant argument sitting on a jump is evaluated (quantile's ``ceil`` of a position).
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from nsverify.errors import NotLipschitzError, UnsupportedOpError
from nsverify.oracle import context
from nsverify.oracle.numbers import Jet, sign, straddle_error, val
from nsverify.oracle.ops.common import arr, objmap, scalar
from nsverify.oracle.ops.kinks import depends_on_w
from nsverify.oracle.ops.record import ExactOp

F = Fraction


def _refuse(op: str, at, where: str):
    from nsverify.oracle.diagnosis import NonFiniteDiagnosis

    msg = (f"fn is discontinuous at w: {op}() of a value that depends on w jumps at {where}, and the value is "
           f"exactly {at} here; no Clarke set (the Clarke oracle needs a locally Lipschitz fn). PyTorch's "
           "derivative there is 0 by its formula, which no rule can judge. Check a point off the jump, or replace "
           f"{op} by a Lipschitz surrogate (a straight-through estimator is a different function)")
    raise NotLipschitzError(msg, diagnosis=NonFiniteDiagnosis("not_lipschitz", f"aten.{op}", msg))


def _floor_of(op: str, x):
    """floor(value of x) for an exact value or an enclosure; an enclosure that straddles an integer raises."""
    v = val(x)
    k = math.floor(float(v))
    for cand in (k - 1, k, k + 1):  # the float's floor is within one of the exact one
        lo, hi = sign(v - cand), sign(v - (cand + 1))
        if lo is None or hi is None:
            raise straddle_error(op)
        if lo >= 0 and hi < 0:
            return cand
    raise straddle_error(op)


def _step(op: str, jumps_at, value_at, where: str):
    """A piecewise-constant op: ``jumps_at(v)`` says whether the exact value v is a jump, ``value_at(v)`` is the
    op's value (an exact Fraction)."""
    def f(x):
        x = x.c[0] if isinstance(x, Jet) and not depends_on_w(x) else x
        v = val(x.c[0] if isinstance(x, Jet) else x)
        if depends_on_w(x) and jumps_at(x, v):
            _refuse(op, v, where)
        return F(value_at(x, v))

    def forward(a, *args, **kw):
        if args or kw:
            decimals = (args or (kw.get("decimals", 0),))[0]
            if int(decimals) != 0:
                raise UnsupportedOpError(f"{op} with decimals={decimals}: the exact oracle evaluates decimals=0 "
                                         "only (round(x * 10**d) / 10**d is the same function)")
        return objmap(f, arr(a))
    return forward


def _is_int(op):
    def test(x, v):
        return sign(v - _floor_of(op, x)) == 0
    return test


def _round_value(x, v):
    fl = _floor_of("round", x)
    s = sign(v - fl - F(1, 2))
    if s is None:
        raise straddle_error("round")
    if s == 0:  # half to even, as PyTorch rounds
        return fl if fl % 2 == 0 else fl + 1
    return fl if s < 0 else fl + 1


def _round_jump(x, v):
    return sign(v - _floor_of("round", x) - F(1, 2)) == 0


def _trunc_value(x, v):
    fl = _floor_of("trunc", x)
    return fl if fl >= 0 or sign(v - fl) == 0 else fl + 1


def _trunc_jump(x, v):
    return sign(v - _floor_of("trunc", x)) == 0 and sign(v) != 0  # trunc is 0 on (-1, 1): no jump at 0


def _frac(a):
    """x - trunc(x): the identity minus a step; jumps at every non-zero integer."""
    step = _step("frac", _trunc_jump, _trunc_value, "every non-zero integer")
    a = arr(a)
    return a - step(a)


def _hardshrink_jump(lambd):
    lam = scalar(lambd)

    def at(x):
        v = val(x.c[0] if isinstance(x, Jet) else x)
        s_hi, s_lo = sign(v - lam), sign(v + lam)
        if s_hi is None or s_lo is None:
            raise straddle_error("hardshrink")
        on = lam != 0 and (s_hi == 0 or s_lo == 0)
        if on and depends_on_w(x):
            _refuse("hardshrink", v, f"+-lambd = +-{lam}")
        return s_hi > 0 or s_lo < 0  # |x| > lambd: the identity piece
    return at


def _hardshrink(a, lambd=0.5):
    """x where |x| > lambd, else 0; with lambd = 0 the identity everywhere (0 at 0 is x there: no jump)."""
    if scalar(lambd) == 0:
        return arr(a).copy()
    outside = _hardshrink_jump(lambd)
    return objmap(lambda x: x if outside(x) else F(0), arr(a))


def _hardshrink_backward(grad, x, lambd):
    """grad where |x| > lambd, else 0 (PyTorch's formula); at a jump of an argument that depends on w (a program
    reading the derivative inside fn), refused like the forward."""
    outside = _hardshrink_jump(lambd)
    mask = objmap(lambda v: F(1) if outside(v) else F(0), arr(x))
    return arr(grad) * mask


def _heaviside(a, values):
    """0 below 0, 1 above, ``values`` at 0: a step at 0."""
    a_b, v_b = np.broadcast_arrays(arr(a), arr(values))
    out = np.empty(a_b.shape, dtype=object)
    of, af, vf = out.reshape(-1), a_b.reshape(-1), v_b.reshape(-1)
    for i in context.polled_range(af.size):
        x = af[i]
        v = val(x.c[0] if isinstance(x, Jet) else x)
        s = sign(v)
        if s is None:
            raise straddle_error("heaviside")
        if s == 0 and depends_on_w(x):
            _refuse("heaviside", v, "0")
        of[i] = vf[i] if s == 0 else F(1 if s > 0 else 0)
    return out


RECORDS = (
    ExactOp(("round",), _step("round", _round_jump, _round_value, "every half-integer")),
    ExactOp(("floor",), _step("floor", _is_int("floor"), lambda x, v: _floor_of("floor", x), "every integer")),
    ExactOp(("ceil",), _step("ceil", _is_int("ceil"),
                             lambda x, v: _floor_of("ceil", x) + (sign(v - _floor_of("ceil", x)) != 0),
                             "every integer")),
    ExactOp(("trunc", "fix"), _step("trunc", _trunc_jump, _trunc_value, "every non-zero integer")),
    ExactOp(("frac",), _frac),
    ExactOp(("hardshrink",), _hardshrink, backward_names=("hardshrink_backward",), backward=_hardshrink_backward),
    ExactOp(("heaviside",), _heaviside),
)
