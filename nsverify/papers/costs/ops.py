"""The dictionary: each elementary program g and its joint program gd (value and derivative), written over the
counted primitives of :class:`~nsverify.papers.costs.counting.OpCounter`.

Every program runs its worst-case path on every input (the thesis' costs are worst-case, Tables 2.2/2.3), so
counted costs do not depend on the input.  Selections at kinks follow the thesis: ReLU'(0) = 0 (Example 1),
|.|'(0) = -1 (Case 8 returns (-x, -1) unless x > 0), ELU'(0) = 1 (Case 9 branch x >= 0), max: first maximiser.

Each op also declares the closed-form costs ``cost_g(model, n)``/``cost_gd(model, n)`` (n = number of
arguments); the property tests check that what the programs actually execute equals these formulas, and
:mod:`.tables` compares them with the published Tables 2.1-2.3.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from nsverify.errors import UnknownOpError
from nsverify.papers.costs.counting import CostModel, OpCounter


@dataclass(frozen=True)
class OpSpec:
    name: str
    arity: int | None  # None: any number n >= 1 of arguments
    param: str | None  # name of the constant parameter ("c", "alpha", "patch") or None
    g: Callable[[OpCounter, list, Any], Any]
    gd: Callable[[OpCounter, list, Any], tuple[Any, list]]
    cost_g: Callable[[CostModel, int], float]
    cost_gd: Callable[[CostModel, int], float]
    rational: bool = True  # exact over fractions.Fraction
    doc: str = ""


def _g_from_gd(gd):
    return lambda c, a, prm: gd(c, a, prm)[0]


# --- smooth dictionary D_ReLU (2.6) ---
def _add_gd(c, a, _):
    return c.add(a[0], a[1]), [1, 1]


def _mul_gd(c, a, _):
    return c.mul(a[0], a[1]), [a[1], a[0]]


def _addc_gd(c, a, k):
    return c.addc(a[0], k), [1]


def _mulc_gd(c, a, k):
    return c.mulc(a[0], k), [k]


def _inv_g(c, a, _):
    return c.inv(a[0])


def _inv_gd(c, a, _):  # Case 5: d = -1/a^2: one square and one (-1) multiplication
    r = c.inv(a[0])
    return r, [c.mulc(c.mul(r, r), -1)]


def _exp_gd(c, a, _):  # Case 4: derivative = value
    v = c.exp(a[0])
    return v, [v]


def _log_g(c, a, _):
    return c.log(a[0])


def _log_gd(c, a, _):  # Case 3: derivative needs inv
    return c.log(a[0]), [c.inv(a[0])]


def _relu_gd(c, a, _):  # Case 6: one sign test gives both ReLU and ReLU'
    pos = c.sign_positive(a[0])
    return (a[0] if pos else 0 * a[0]), [1 if pos else 0]


def _mulrelu_gd(c, a, _):  # Case 7: (a, b) -> a * ReLU(b); one sign test and one multiplication
    x, b = a
    pos = c.sign_positive(b)
    prod = c.mul(x, b)
    if pos:
        return prod, [b, x]
    return 0 * prod, [0, 0]


# --- nonsmooth extensions (Table 2.3) ---
def _abs_gd(c, a, _):  # Case 8: sign test and one multiplication by +-1
    s = 1 if c.sign_positive(a[0]) else -1
    return c.mulc(a[0], s), [s]


def _elu_gd(c, a, alpha):  # Case 9: sign, exp, multiplication by alpha, subtraction of alpha
    x = a[0]
    c.tick("sign")
    nonneg = x >= 0
    e = c.exp(x if not nonneg else 0.0)
    ae = c.mulc(e, alpha)
    val = c.addc(ae, -alpha)
    if nonneg:
        return x, [1]
    return val, [ae]


def _maxpool_gd(
    c, a, patch
):  # Case 11: 9 kernel weights, fixed 5x5 patch: 9 x (9 mul + 8 add) + 8 comparisons
    outs = []
    for r in range(3):
        for s in range(3):
            acc = None
            for u in range(3):
                for v in range(3):
                    t = c.mulc(a[3 * u + v], patch[r + u][s + v])
                    acc = t if acc is None else c.add(acc, t)
            outs.append(acc)
    best = 0
    for k in range(1, 9):
        if c.greater(outs[k], outs[best]):
            best = k
    r, s = divmod(best, 3)
    return outs[best], [patch[r + u][s + v] for u in range(3) for v in range(3)]


def _l1_gd(c, a, _):  # Case 12: n multiplications by -1, n comparisons, n - 1 additions
    total, grad = None, []
    for x in a:
        neg = c.mulc(x, -1)
        if c.greater(x, neg):
            ax, d = x, 1
        else:
            ax, d = neg, -1
        grad.append(d)
        total = ax if total is None else c.add(total, ax)
    return total, grad


def _linf_gd(c, a, _):  # n absolute values (sign + multiplication each) and n - 1 comparisons
    absv, signs = [], []
    for x in a:
        s = 1 if c.sign_positive(x) else -1
        absv.append(c.mulc(x, s))
        signs.append(s)
    best = 0
    for k in range(1, len(a)):
        if c.greater(absv[k], absv[best]):
            best = k
    grad = [0] * len(a)
    grad[best] = signs[best]
    return absv[best], grad


def _const(v):
    return lambda m, n: float(v)


OPS: dict[str, OpSpec] = {}


def _reg(*specs: OpSpec) -> None:
    for s in specs:
        OPS[s.name] = s


_reg(
    OpSpec("add", 2, None, _g_from_gd(_add_gd), _add_gd, _const(1), _const(1), doc="a + b"),
    OpSpec("mul", 2, None, _g_from_gd(_mul_gd), _mul_gd, _const(1), _const(1), doc="a * b"),
    OpSpec("addc", 1, "c", _g_from_gd(_addc_gd), _addc_gd, _const(1), _const(1), doc="a + c"),
    OpSpec("mulc", 1, "c", _g_from_gd(_mulc_gd), _mulc_gd, _const(1), _const(1), doc="c * a"),
    OpSpec(
        "inv", 1, None, _inv_g, _inv_gd, lambda m, n: m.c_nonlin, lambda m, n: m.c_nonlin + 2, doc="1 / a"
    ),
    OpSpec(
        "exp",
        1,
        None,
        _g_from_gd(_exp_gd),
        _exp_gd,
        lambda m, n: m.c_nonlin,
        lambda m, n: m.c_nonlin,
        rational=False,
        doc="exp(a)",
    ),
    OpSpec(
        "log",
        1,
        None,
        _log_g,
        _log_gd,
        lambda m, n: m.c_nonlin,
        lambda m, n: 2 * m.c_nonlin,
        rational=False,
        doc="log(a)",
    ),
    OpSpec(
        "relu",
        1,
        None,
        _g_from_gd(_relu_gd),
        _relu_gd,
        lambda m, n: m.c_relu,
        lambda m, n: m.c_relu,
        doc="max(a, 0)",
    ),
    OpSpec(
        "mulrelu",
        2,
        None,
        _g_from_gd(_mulrelu_gd),
        _mulrelu_gd,
        lambda m, n: 1 + m.c_relu,
        lambda m, n: 1 + m.c_relu,
        doc="a * ReLU(b) (the xReLU of Table 2.2)",
    ),
    OpSpec(
        "abs",
        1,
        None,
        _g_from_gd(_abs_gd),
        _abs_gd,
        lambda m, n: 1 + m.c_relu,
        lambda m, n: 1 + m.c_relu,
        doc="|a|",
    ),
    OpSpec(
        "elu",
        1,
        "alpha",
        _g_from_gd(_elu_gd),
        _elu_gd,
        lambda m, n: 2 + m.c_relu + m.c_nonlin,
        lambda m, n: 2 + m.c_relu + m.c_nonlin,
        rational=False,
        doc="ELU(a) with parameter alpha",
    ),
    OpSpec(
        "maxpool3x3",
        9,
        "patch",
        _g_from_gd(_maxpool_gd),
        _maxpool_gd,
        lambda m, n: 153 + 8 * m.c_relu,
        lambda m, n: 153 + 8 * m.c_relu,
        doc="max over the 3x3 correlation of a fixed 5x5 patch with the 9 kernel weights (Case 11)",
    ),
    OpSpec(
        "l1",
        None,
        None,
        _g_from_gd(_l1_gd),
        _l1_gd,
        lambda m, n: 2 * n - 1 + n * m.c_relu,
        lambda m, n: 2 * n - 1 + n * m.c_relu,
        doc="sum |a_i|",
    ),
    OpSpec(
        "linf",
        None,
        None,
        _g_from_gd(_linf_gd),
        _linf_gd,
        lambda m, n: n + (2 * n - 1) * m.c_relu,
        lambda m, n: n + (2 * n - 1) * m.c_relu,
        doc="max |a_i|",
    ),
)

#: The dictionary D_ReLU of (2.6).
D_RELU = ("add", "mul", "addc", "mulc", "inv", "exp", "log", "relu")


def get_op(name: str) -> OpSpec:
    try:
        return OPS[name]
    except KeyError:
        raise UnknownOpError(
            f"unknown op {name!r} in a cost program; the dictionary has {', '.join(sorted(OPS))}."
        ) from None
