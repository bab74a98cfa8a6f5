"""An independent fuzz oracle for :func:`nsverify.check_gradient`: random programs at exact ties, each verdict
compared with a method that shares no code with the exact interpreter.

**Programs.**  :func:`random_expr` draws an expression tree over w: affine leaves ``a.w + c`` (small integers a,
c chosen so that most leaves vanish at the point, which makes kinks and ties coincide), kinks (relu, abs,
leaky_relu, hardtanh, clamp, hardsigmoid), smooth ops (tanh, sigmoid, exp, gelu both ways, erf, softplus,
silu, sin), selections (maximum/minimum, clamp with tensor bounds, max/amax/max(dim)/x[argmax x], sort stable
and unstable, ascending and descending, 17 entries and more included, topk largest and smallest, kthvalue,
median with and without dim), max pooling (padding, ceil mode), 1-d convolution followed by pooling,
``torch.where``, Python branches on tensor values (the max1 idiom), sums and products.  Each node renders the
PyTorch program *and* its own reference semantics.

With ``vector_nodes=True`` (:func:`run_fuzz`, :func:`random_expr`) it also draws vector-valued nodes
(:func:`random_vector`): :class:`LayerNorm` (``F.layer_norm`` over stacked children, with or without
elementwise affine weights) and single-head :class:`Attention` (``F.scaled_dot_product_attention``, or
``softmax(q @ k.T * s) @ v`` written out with ``@`` or ``torch.bmm``; head dims 1, 2, 4), also LayerNorm of an
attention output.  Their entries feed the scalar nodes (:class:`Entry`: a kink at 0 on one entry, a selection
over all of them, a maximum/where/branch between two), and their inputs are drawn to make the outputs tie at w:
leaves that vanish there (LayerNorm output 0, uniform attention weights, zero attention output), (x, -x)
pairs, repeated inputs.  :func:`vector_ties` counts the kinks and ties met exactly by such outputs at w
(:func:`summarize`: ``vector_tie_programs``, ``vector_tie_decided``).  Rendered with
``F.scaled_dot_product_attention``, three in ten attention nodes are causal (the math decomposition PyTorch takes
on exact tensors builds a ``-inf`` mask, which the oracle carries as an exact mask value).  Without
``vector_nodes`` a seed draws the same programs as before these nodes existed.

**Reference.**  :meth:`Expr.ref` evaluates the expression with its own dual numbers: exact Fractions when the
program has no smooth op, mpmath at 60 digits otherwise (always with LayerNorm or attention: their mean,
biased variance, 1/sqrt, exp, sums and quotients are its own, :func:`layer_norm_ref`, :func:`attention_ref`);
at a sample point a kink argument or a tie between entries with different local functions makes the point
non-generic (it is skipped).

**What it shares with the oracle: nothing but the public API.**  It calls :func:`nsverify.check_gradient` as a
user would and reads the returned verdict (status, tested vector, certificate); it imports nothing from
:mod:`nsverify.oracle` (not the interpreter, ``tensor``, ``ops``, ``numbers``, ``membership``), nor
:mod:`nsverify.rational`, :mod:`nsverify.registry` or :mod:`nsverify.ad`, which is why it lives in its own
package above the oracle; ``tests/test_oracle_fuzz.py`` checks that.

**Comparison** (:func:`check_program`), with the verdict's vertex set V, tested vector t and status:

* ``exact_ad``: the tested vector (PyTorch's AD evaluated exactly) equals float64 autograd at w, exactly for
  piecewise-affine programs (their float computation is exact), to 1e-9 relative otherwise;
* ``reference``: at generic points w + 2^-24 d float64 autograd equals the reference gradient (the reference
  computes the program PyTorch runs);
* gradients at points w + 2^-k d in a shrinking ball (random d, and the certificate's witness directions) are
  Bouligand gradients in the limit: on piecewise-affine programs each must be a vertex of V when the verdict
  says its set is exact (``unsound``) and a witness must realise its vertex (``unrealised``); on curved ones
  they must approach V: within 1e-12 at the smallest generic scale t = 2^-k, or, where a curved piece's O(t)
  drift is larger (only 2^-24 generic: a kink argument that vanishes to high order along d), their limit
  extrapolated from t, t/2 and t/4 within 1e-12 plus the extrapolation's error bound, O(t^2) times the local
  curvature (:func:`_limit_gradient`);
* ``member``: t must lie in the hull of the gradients realised this way; ``not_member``: t must not lie in the
  hull of the sampled gradients (a float LP, counted only when clearly decided).

Any failed comparison is a *disagreement*: a bug, never a tolerance to widen.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from fractions import Fraction

import mpmath
import torch
import torch.nn.functional as Fn

F = Fraction
_DPS = 60


class NonGeneric(Exception):
    """The sample point sits on a kink or a tie between different local functions."""


# ----------------------------------------------------------------------------------------------------------
# reference dual numbers
# ----------------------------------------------------------------------------------------------------------
class R:
    """A value and its gradient (a tuple), Fractions (exact mode) or mpmath floats (approximate mode)."""

    __slots__ = ("v", "g")

    def __init__(self, v, g):
        self.v, self.g = v, tuple(g)

    def __add__(self, o):
        o = _lift(o, self)
        return R(self.v + o.v, [a + b for a, b in zip(self.g, o.g)])

    __radd__ = __add__

    def __neg__(self):
        return R(-self.v, [-a for a in self.g])

    def __sub__(self, o):
        return self + (-_lift(o, self))

    def __rsub__(self, o):
        return _lift(o, self) - self

    def __mul__(self, o):
        o = _lift(o, self)
        return R(self.v * o.v, [a * o.v + self.v * b for a, b in zip(self.g, o.g)])

    __rmul__ = __mul__

    def scale(self, c):
        return R(self.v * c, [a * c for a in self.g])

    def chain(self, value, slope):
        """f(self) for a smooth f with f(v) = value, f'(v) = slope."""
        return R(value, [a * slope for a in self.g])

    def same(self, o) -> bool:
        return self.v == o.v and self.g == o.g


def _lift(o, like: R) -> R:
    if isinstance(o, R):
        return o
    return R(o, [0 * a for a in like.g])


_TINY = mpmath.mpf(2) ** -150


def _sign(x) -> int:
    """The sign of a reference value; a non-zero mpmath value this small counts as undecided (non-generic)."""
    if isinstance(x, Fraction):
        return (x > 0) - (x < 0)
    if abs(x) < _TINY:
        raise NonGeneric()
    return 1 if x > 0 else -1


def _cmp(a: R, b: R) -> int:
    """Exact order of two reference values; a tie is allowed only between identical local functions."""
    d = a.v - b.v
    if isinstance(d, Fraction) and d == 0:
        if a.same(b):
            return 0
        raise NonGeneric()
    if not isinstance(d, Fraction) and abs(d) < _TINY:
        if all(abs(x - y) < _TINY for x, y in zip(a.g, b.g)) and d == 0:
            return 0
        raise NonGeneric()
    return 1 if d > 0 else -1


def _kink(x: R, at=0) -> int:
    """Side of the kink ``at`` that x is on (+1 above, -1 below); a constant exactly on it: 0 (no derivative
    flows); a value that depends on w exactly on it: non-generic."""
    d = x.v - at
    if d == 0 and not any(x.g):
        return 0
    s = _sign(d)
    if s == 0:
        raise NonGeneric()
    return s


def _mp(v):
    """mpmath value of a number (mode approximate)."""
    if isinstance(v, Fraction):
        return mpmath.mpf(v.numerator) / v.denominator
    return v


def _smooth(x: R, f, df) -> R:
    v = _mp(x.v)
    return R(f(v), [_mp(a) * df(v) for a in x.g])


def _order(xs: list, descending: bool, stable_first=True) -> list:
    """Indices of xs sorted (a stable sort; ties only between identical local functions)."""
    import functools

    def c(i, j):
        r = _cmp(xs[i], xs[j])
        r = -r if descending else r
        return r or (i - j)

    return sorted(range(len(xs)), key=functools.cmp_to_key(c))


def _untied(xs: list, i: int) -> int:
    """``i``, after checking that every entry with ``xs[i]``'s value is the same local function (raises
    NonGeneric otherwise): a tie matters only at the selected value, not among the other entries."""
    top = xs[i].v
    for r in xs:
        if r.v == top or (not isinstance(top - r.v, Fraction) and abs(top - r.v) < _TINY):
            _cmp(r, xs[i])
    return i


def _num_key(v):
    return v if isinstance(v, Fraction) else mpmath.mpf(v)


def _at_rank(xs: list, rank: int) -> int:
    """The index a stable ascending sort puts at ``rank`` (see :func:`_untied` for ties)."""
    return _untied(xs, sorted(range(len(xs)), key=lambda i: _num_key(xs[i].v))[rank])


def _argbest(xs: list, larger: bool) -> int:
    """The first index of the largest (``larger``) or smallest value (see :func:`_untied` for ties)."""
    pick = max if larger else min
    return _untied(xs, pick(range(len(xs)), key=lambda i: _num_key(xs[i].v)))


# ----------------------------------------------------------------------------------------------------------
# expressions
# ----------------------------------------------------------------------------------------------------------
def _vec(xs) -> torch.Tensor:
    return torch.tensor([float(x) for x in xs], dtype=torch.float64)


class Expr:
    smooth = False  # contains a smooth (transcendental) op
    curved = False  # pieces that are not affine (smooth ops or products)
    kids: tuple = ()

    def torch(self, w):  # pragma: no cover - abstract
        raise NotImplementedError

    def ref(self, w: list) -> R:  # pragma: no cover - abstract
        raise NotImplementedError

    def __str__(self):  # pragma: no cover - abstract
        return type(self).__name__


def _any(kids, attr) -> bool:
    return any(getattr(k, attr) for k in kids)


class ExprLeaf(Expr):
    def __init__(self, a, c):
        self.a, self.c = tuple(a), F(c)

    def torch(self, w):
        return (_vec(self.a) * w).sum() + float(self.c)

    def ref(self, w):
        if isinstance(w[0], Fraction):
            return R(sum((F(a) * x for a, x in zip(self.a, w)), F(0)) + self.c, [F(a) for a in self.a])
        return R(sum((a * x for a, x in zip(self.a, w)), mpmath.mpf(0)) + _mp(self.c),
                 [mpmath.mpf(a) for a in self.a])

    def __str__(self):
        terms = "+".join(f"{a}*w{i}" for i, a in enumerate(self.a) if a)
        return f"({terms or '0'}{float(self.c):+g})"


_KINKS = {  # name: (torch function, breakpoints, piece slopes and intercepts)
    "relu": (torch.relu, (0,), ((0, 0), (1, 0))),
    "abs": (torch.abs, (0,), ((-1, 0), (1, 0))),
    "leaky": (lambda x: Fn.leaky_relu(x, 0.25), (0,), ((F(1, 4), 0), (1, 0))),
    "hardtanh": (lambda x: Fn.hardtanh(x, -0.5, 1.0), (F(-1, 2), 1), ((0, F(-1, 2)), (1, 0), (0, 1))),
    "clamp": (lambda x: torch.clamp(x, min=0.0, max=0.5), (0, F(1, 2)), ((0, 0), (1, 0), (0, F(1, 2)))),
    "hardsigmoid": (Fn.hardsigmoid, (-3, 3), ((0, 0), (F(1, 6), F(1, 2)), (0, 1))),
}


class Kink(Expr):
    def __init__(self, name, x):
        self.name, self.kids = name, (x,)
        self.smooth, self.curved = x.smooth, x.curved

    def torch(self, w):
        return _KINKS[self.name][0](self.kids[0].torch(w))

    def ref(self, w):
        x = self.kids[0].ref(w)
        _, bps, pieces = _KINKS[self.name]
        k = 0
        for b in bps:
            s = _kink(x, b)
            if s == 0:  # a constant on the kink
                return R(_conv(pieces[k][0], x) * _conv(b, x) + _conv(pieces[k][1], x), [0 * a for a in x.g])
            if s > 0:
                k += 1
            else:
                break
        slope, icpt = pieces[k]
        return x.scale(_conv(slope, x)) + _conv(icpt, x)

    def __str__(self):
        return f"{self.name}{self.kids[0]}"


def _conv(c, like: R):
    return F(c) if isinstance(like.v, Fraction) else _mp(F(c))


_SMOOTH = {  # name: (torch function, value, derivative) in mpmath
    "tanh": (torch.tanh, mpmath.tanh, lambda v: 1 - mpmath.tanh(v) ** 2),
    "sigmoid": (torch.sigmoid, lambda v: 1 / (1 + mpmath.exp(-v)),
                lambda v: mpmath.exp(-v) / (1 + mpmath.exp(-v)) ** 2),
    "exp": (lambda x: torch.exp(x / 4) - 1, lambda v: mpmath.exp(v / 4) - 1, lambda v: mpmath.exp(v / 4) / 4),
    "gelu": (Fn.gelu, lambda v: v * mpmath.ncdf(v), lambda v: mpmath.ncdf(v) + v * mpmath.npdf(v)),
    "gelu_tanh": (lambda x: Fn.gelu(x, approximate="tanh"),
                  lambda v: v * (1 + mpmath.tanh(mpmath.sqrt(2 / mpmath.pi) * (v + mpmath.mpf("0.044715") * v**3))) / 2,
                  None),
    "erf": (torch.erf, mpmath.erf, lambda v: 2 * mpmath.exp(-v * v) / mpmath.sqrt(mpmath.pi)),
    "softplus": (Fn.softplus, lambda v: mpmath.log1p(mpmath.exp(v)), lambda v: 1 / (1 + mpmath.exp(-v))),
    "silu": (Fn.silu, lambda v: v / (1 + mpmath.exp(-v)),
             lambda v: (1 + mpmath.exp(-v) + v * mpmath.exp(-v)) / (1 + mpmath.exp(-v)) ** 2),
    "sin": (torch.sin, mpmath.sin, mpmath.cos),
}


class Smooth(Expr):
    smooth = curved = True

    def __init__(self, name, x):
        self.name, self.kids = name, (x,)

    def torch(self, w):
        return _SMOOTH[self.name][0](self.kids[0].torch(w))

    def ref(self, w):
        x = self.kids[0].ref(w)
        _, f, df = _SMOOTH[self.name]
        if df is None:
            df = lambda v: mpmath.diff(f, v)  # noqa: E731 - gelu's tanh form: mpmath's derivative
        return _smooth(x, f, df)

    def __str__(self):
        return f"{self.name}{self.kids[0]}"


class Lin(Expr):
    def __init__(self, terms):
        self.terms = tuple(terms)  # ((coef, expr), ...)
        self.kids = tuple(e for _, e in self.terms)
        self.smooth, self.curved = _any(self.kids, "smooth"), _any(self.kids, "curved")

    def torch(self, w):
        return sum((float(a) * e.torch(w) for a, e in self.terms), torch.zeros((), dtype=torch.float64))

    def ref(self, w):
        out = None
        for a, e in self.terms:
            r = e.ref(w)
            r = r.scale(_conv(a, r))
            out = r if out is None else out + r
        return out

    def __str__(self):
        return "(" + " + ".join(f"{a}*{e}" for a, e in self.terms) + ")"


class Mul(Expr):
    curved = True

    def __init__(self, a, b):
        self.kids = (a, b)
        self.smooth = _any(self.kids, "smooth")

    def torch(self, w):
        return self.kids[0].torch(w) * self.kids[1].torch(w)

    def ref(self, w):
        return self.kids[0].ref(w) * self.kids[1].ref(w)

    def __str__(self):
        return f"({self.kids[0]}*{self.kids[1]})"


class Pair(Expr):
    """maximum / minimum / clamp with tensor bounds / where / a Python branch (the max1 idiom)."""

    def __init__(self, kind, kids):
        self.kind, self.kids = kind, tuple(kids)
        self.smooth, self.curved = _any(self.kids, "smooth"), _any(self.kids, "curved")

    def torch(self, w):
        a, b = self.kids[0].torch(w), self.kids[1].torch(w)
        if self.kind == "maximum":
            return torch.maximum(a, b)
        if self.kind == "minimum":
            return torch.minimum(a, b)
        if self.kind == "where":
            return torch.where(a >= b, a - b, 2 * (b - a))
        if self.kind == "branch":
            return a if a > b else b  # data-dependent Python control flow
        lo, hi = torch.minimum(b, self.kids[2].torch(w)), torch.maximum(b, self.kids[2].torch(w))
        return torch.clamp(a, lo, hi)

    def ref(self, w):
        a, b = self.kids[0].ref(w), self.kids[1].ref(w)
        if self.kind in ("maximum", "branch"):
            return a if _cmp(a, b) > 0 else b
        if self.kind == "minimum":
            return a if _cmp(a, b) < 0 else b
        if self.kind == "where":
            return (a - b) if _cmp(a, b) >= 0 else (b - a).scale(2)
        c = self.kids[2].ref(w)
        lo, hi = (b, c) if _cmp(b, c) <= 0 else (c, b)
        if _cmp(a, lo) < 0:
            return lo
        if _cmp(a, hi) > 0:
            return hi
        return a

    def __str__(self):
        return f"{self.kind}({', '.join(map(str, self.kids))})"


class Select(Expr):
    """A selection over the stacked children (the entries of a vector child in place), reduced to a scalar with
    fixed weights."""

    def __init__(self, kind, kids, weights, **opts):
        self.kind, self.kids, self.weights, self.opts = kind, tuple(kids), tuple(weights), opts
        self.smooth, self.curved = _any(self.kids, "smooth"), _any(self.kids, "curved")

    def torch(self, w):
        x = _stack_torch(self.kids, w)
        o = self.opts
        kind = self.kind
        if kind == "max":
            return torch.max(x) * float(self.weights[0])
        if kind == "amax":
            return torch.amax(x) * float(self.weights[0])
        if kind == "max_dim":
            return torch.max(x.reshape(1, -1), 1).values.sum() * float(self.weights[0])
        if kind == "argmax":
            return x[torch.argmax(x)] * float(self.weights[0])
        if kind == "median":
            return torch.median(x) * float(self.weights[0])
        if kind == "median_dim":
            return torch.median(x, 0).values * float(self.weights[0])
        if kind == "kthvalue":
            return torch.kthvalue(x, o["k"]).values * float(self.weights[0])
        if kind == "sort":
            s = torch.sort(x, descending=o["descending"], stable=o["stable"]).values
            return (s * _vec(self.weights)).sum()
        if kind == "topk":
            return (torch.topk(x, o["k"], largest=o["largest"]).values * _vec(self.weights[: o["k"]])).sum()
        if kind == "pool":
            y = Fn.max_pool1d(x.reshape(1, 1, -1), o["kernel"], o["stride"], o["padding"],
                              ceil_mode=o["ceil"]).reshape(-1)
            return (y * _vec(_wts(self.weights, y.numel()))).sum()
        if kind == "convpool":
            k = _vec(o["conv"]).reshape(1, 1, -1)
            y = Fn.conv1d(x.reshape(1, 1, -1), k)
            y = Fn.max_pool1d(y, o["kernel"], o["stride"]).reshape(-1)
            return (y * _vec(_wts(self.weights, y.numel()))).sum()
        raise ValueError(kind)  # pragma: no cover

    def ref(self, w):
        xs = _stack_ref(self.kids, w)
        o, kind, c = self.opts, self.kind, self.weights
        n = len(xs)
        if kind in ("max", "amax", "max_dim", "argmax"):
            return _scaled(xs[_argbest(xs, True)], c[0])
        if kind in ("median", "median_dim"):
            return _scaled(xs[_at_rank(xs, (n - 1) // 2)], c[0])
        if kind == "kthvalue":
            return _scaled(xs[_at_rank(xs, o["k"] - 1)], c[0])
        if kind == "sort":
            order = _order(xs, o["descending"])
            return _dot([xs[i] for i in order], c)
        if kind == "topk":
            order = _order(xs, o["largest"])[: o["k"]]
            return _dot([xs[i] for i in order], c)
        if kind == "pool":
            ys = _pool(xs, o["kernel"], o["stride"], o["padding"], o["ceil"])
            return _dot(ys, _wts(c, len(ys)))
        if kind == "convpool":
            kern = o["conv"]
            ys = [_dot(xs[j:j + len(kern)], kern) for j in range(n - len(kern) + 1)]
            ys = _pool(ys, o["kernel"], o["stride"], 0, False)
            return _dot(ys, _wts(c, len(ys)))
        raise ValueError(kind)  # pragma: no cover

    def __str__(self):
        opts = ",".join(f"{k}={v}" for k, v in self.opts.items())
        return f"{self.kind}[{opts}]({', '.join(map(str, self.kids))}).{list(map(str, self.weights))}"


def _wts(c, length: int) -> list:
    """The weights, cycled to ``length`` outputs (a padded pool can have more outputs than inputs)."""
    return [c[j % len(c)] for j in range(length)]


def _scaled(x: R, c) -> R:
    return x.scale(_conv(c, x))


def _dot(xs, cs) -> R:
    out = None
    for x, c in zip(xs, cs):
        r = x.scale(_conv(c, x))
        out = r if out is None else out + r
    return out


def _pool(xs, k, s, p, ceil) -> list:
    """max_pool1d's windows (PyTorch's output size; windows past the padded end are dropped)."""
    n = len(xs)
    if ceil:
        out = -(-(n + 2 * p - k) // s) + 1
        if (out - 1) * s >= n + p:
            out -= 1
    else:
        out = (n + 2 * p - k) // s + 1
    res = []
    for j in range(out):
        win = [xs[q] for q in range(j * s - p, j * s - p + k) if 0 <= q < n]
        res.append(win[_argbest(win, True)])
    return res


# ----------------------------------------------------------------------------------------------------------
# vector nodes: LayerNorm and attention, whose entries feed the scalar nodes above
# ----------------------------------------------------------------------------------------------------------
class Vec(Expr):
    """A vector-valued node: :meth:`torch` gives a 1-d tensor, :meth:`ref` a list of reference numbers (mpmath:
    both nodes are curved, with irrational values).  :class:`Entry` picks one entry; a :class:`Select` child that
    is a Vec contributes all its entries."""

    smooth = curved = True
    size = 0


def _stack_torch(kids, w) -> torch.Tensor:
    if not any(isinstance(k, Vec) for k in kids):
        return torch.stack([k.torch(w) for k in kids])  # (the rendering of the scalar-only fuzz, unchanged)
    return torch.cat([k.torch(w).reshape(-1) for k in kids])


def _stack_ref(kids, w) -> list:
    out = []
    for k in kids:
        out.extend(k.ref(w) if isinstance(k, Vec) else [k.ref(w)])
    return out


def _recip(x: R) -> R:
    v = _mp(x.v)
    return R(1 / v, [-_mp(a) / (v * v) for a in x.g])


def _rsqrt(x: R) -> R:
    v = _mp(x.v)
    r = 1 / mpmath.sqrt(v)
    return R(r, [_mp(a) * (-r / (2 * v)) for a in x.g])


def _exp(x: R) -> R:
    return _smooth(x, mpmath.exp, mpmath.exp)


def layer_norm_ref(xs: list, eps, weight, bias) -> list:
    """LayerNorm of the entries xs (reference numbers): (x - mean) / sqrt(var + eps) * weight + bias with the
    biased variance, in the reference's own arithmetic."""
    m = len(xs)
    mean = _dot(xs, [F(1, m)] * m)
    d = [x - mean for x in xs]
    var = _dot([a * a for a in d], [F(1, m)] * m)
    rstd = _rsqrt(var + _mp(F(eps)))
    out = [a * rstd for a in d]
    if weight is not None:
        out = [_scaled(y, c) + _mp(F(b)) for y, c, b in zip(out, weight, bias)]
    return out


def attention_ref(q: list, k: list, v: list, scale, causal: bool) -> list:
    """softmax(q k^T * scale) v for q (Lq rows), k, v (Lk rows) given as lists of rows of reference numbers
    (``causal``: query i sees keys 0..i); the output rows, flattened."""
    out = []
    for i, qi in enumerate(q):
        keys = range(len(k)) if not causal else range(min(i + 1, len(k)))
        e = [_exp(_dot([a * b for a, b in zip(qi, k[j])], [1] * len(qi)).scale(scale)) for j in keys]
        z = _recip(_dot(e, [1] * len(e)))
        a = [x * z for x in e]
        for c in range(len(v[0])):
            out.append(_dot([a[j] * v[j][c] for j in range(len(a))], [1] * len(a)))
    return out


class LayerNorm(Vec):
    """``F.layer_norm`` over the stacked children (elementwise affine when ``weight`` is given; ``bias``
    defaults to 0 then)."""

    def __init__(self, kids, eps, weight=None, bias=None):
        self.kids, self.eps, self.size = tuple(kids), F(eps), len(kids)
        self.weight = None if weight is None else tuple(map(F, weight))
        self.bias = None if weight is None else tuple(map(F, bias if bias is not None else [0] * len(kids)))

    def torch(self, w):
        x = torch.stack([k.torch(w) for k in self.kids])
        wt = None if self.weight is None else _vec(self.weight)
        b = None if self.bias is None else _vec(self.bias)
        return Fn.layer_norm(x, (self.size,), wt, b, float(self.eps))

    def ref(self, w):
        return layer_norm_ref([k.ref(w) for k in self.kids], self.eps, self.weight, self.bias)

    def __str__(self):
        aff = "" if self.weight is None else f",w={list(map(str, self.weight))},b={list(map(str, self.bias))}"
        return f"layer_norm[eps={self.eps}{aff}]({', '.join(map(str, self.kids))})"


class Attention(Vec):
    """Single-head attention softmax(q k^T / sqrt(d)) v over children arranged as q (lq x d), k (lk x d),
    v (lk x dv); the (lq x dv) output flattened.  ``render``: ``"sdpa"`` (``F.scaled_dot_product_attention``,
    scale 1/sqrt(d) exactly, ``causal`` allowed), ``"math"`` (``softmax(q @ k.T * s) @ v`` with the float64
    constant s = 1/sqrt(d)) or ``"bmm"`` (the same with ``torch.bmm`` on a batch of one)."""

    def __init__(self, q, k, v, lq, lk, d, dv, render="sdpa", causal=False):
        self.q, self.k, self.v = tuple(q), tuple(k), tuple(v)
        if (len(q), len(k), len(v)) != (lq * d, lk * d, lk * dv):
            raise ValueError(f"attention {lq}x{lk}, d={d}, dv={dv}: {len(q)}, {len(k)}, {len(v)} children")
        self.kids = self.q + self.k + self.v
        self.shape, self.render, self.causal = (lq, lk, d, dv), render, causal
        self.size = lq * dv

    def torch(self, w):
        lq, lk, d, dv = self.shape
        q = torch.stack([e.torch(w) for e in self.q]).reshape(lq, d)
        k = torch.stack([e.torch(w) for e in self.k]).reshape(lk, d)
        v = torch.stack([e.torch(w) for e in self.v]).reshape(lk, dv)
        if self.render == "sdpa":
            return Fn.scaled_dot_product_attention(q[None], k[None], v[None], is_causal=self.causal).reshape(-1)
        if self.render == "bmm":
            a = torch.softmax(torch.bmm(q[None], k.T[None]) * (1 / d**0.5), dim=-1)
            return torch.bmm(a, v[None]).reshape(-1)
        return (torch.softmax(q @ k.T * (1 / d**0.5), dim=-1) @ v).reshape(-1)

    def ref(self, w):
        lq, lk, d, dv = self.shape
        rows = lambda xs, c: [[x.ref(w) for x in xs[r * c:(r + 1) * c]] for r in range(len(xs) // c)]  # noqa: E731
        scale = 1 / mpmath.sqrt(d) if self.render == "sdpa" else _mp(F(1 / d**0.5))
        return attention_ref(rows(self.q, d), rows(self.k, d), rows(self.v, dv), scale, self.causal)

    def __str__(self):
        lq, lk, d, dv = self.shape
        j = lambda xs: "[" + ", ".join(map(str, xs)) + "]"  # noqa: E731
        return (f"attention[{self.render},{lq}x{lk},d={d},dv={dv}{',causal' if self.causal else ''}]"
                f"(q={j(self.q)}, k={j(self.k)}, v={j(self.v)})")


class Entry(Expr):
    """One entry of a vector node."""

    smooth = curved = True

    def __init__(self, vec: Vec, i: int):
        self.kids, self.i = (vec,), i

    def torch(self, w):
        return self.kids[0].torch(w)[self.i]

    def ref(self, w):
        return self.kids[0].ref(w)[self.i]

    def __str__(self):
        return f"{self.kids[0]}[{self.i}]"


# ----------------------------------------------------------------------------------------------------------
# drawing programs
# ----------------------------------------------------------------------------------------------------------
_KINDS = ("leaf", "kink", "kink", "smooth", "lin", "mul", "pair", "select", "select", "select")
_SELECTS = ("max", "amax", "max_dim", "argmax", "median", "median_dim", "kthvalue", "sort", "sort", "topk",
            "pool", "convpool")


def random_expr(rng: random.Random, n: int, w0, depth: int = 3, smooth: bool = True,
                vector_nodes: bool = False) -> Expr:
    """A random expression over w in R^n, most of whose kinks and ties sit exactly at w0.  ``vector_nodes``:
    LayerNorm and attention nodes too (:func:`random_vector`), their entries under kinks and selections; without
    it a seed draws the same programs as before they existed."""
    kind = "leaf" if depth == 0 or rng.random() < 0.15 else rng.choice(_KINDS + _VEC_KINDS * vector_nodes)
    if kind == "vec":
        return _vector_use(rng, random_vector(rng, n, w0, smooth))
    if kind == "smooth" and not smooth:
        kind = "kink"
    if kind == "leaf":
        return random_leaf(rng, n, w0)
    sub = lambda: random_expr(rng, n, w0, depth - 1, smooth, vector_nodes)  # noqa: E731
    if kind == "kink":
        return Kink(rng.choice(list(_KINKS)), sub())
    if kind == "smooth":
        return Smooth(rng.choice(list(_SMOOTH)), sub())
    if kind == "lin":
        return Lin([(rng.choice([-2, -1, 1, 2, F(1, 2)]), sub()) for _ in range(rng.randint(1, 3))])
    if kind == "mul":
        return Mul(sub(), sub()) if rng.random() < 0.5 else Lin([(1, sub())])
    if kind == "pair":
        k = rng.choice(["maximum", "minimum", "where", "branch", "clamp"])
        return Pair(k, [sub() for _ in range(3 if k == "clamp" else 2)])
    sel = rng.choice(_SELECTS)
    big = rng.random() < 0.2 and sel in ("sort", "topk", "kthvalue", "median_dim")
    m = rng.randint(17, 20) if big else rng.randint(2, 5)
    if big:  # many entries sharing a few subprograms: ties that CPU's unstable sort reorders
        pool_ = [sub() for _ in range(3)]
        kids = [Lin([(rng.choice([1, 2]), rng.choice(pool_))]) for _ in range(m)]
    else:
        kids = [sub() for _ in range(m)]
    wts = [F(rng.randint(-3, 3), rng.choice([1, 2])) for _ in range(m)]
    return Select(sel, kids, wts, **_select_opts(rng, sel, m))


def _select_opts(rng: random.Random, sel: str, m: int) -> dict:
    """The options of a selection over m entries."""
    opts: dict = {}
    if sel == "sort":
        opts = {"descending": rng.random() < 0.5, "stable": rng.random() < 0.5}
    elif sel == "topk":
        opts = {"k": rng.randint(1, m), "largest": rng.random() < 0.6}
    elif sel == "kthvalue":
        opts = {"k": rng.randint(1, m)}
    elif sel == "pool":
        k = rng.randint(2, min(3, m)) if m >= 2 else 1
        opts = {"kernel": k, "stride": rng.randint(1, k), "padding": rng.randint(0, k // 2), "ceil": rng.random() < 0.3}
    elif sel == "convpool":
        kern = [F(rng.randint(-2, 2), rng.choice([1, 2])) for _ in range(rng.randint(1, min(2, m)))]
        if not any(kern):
            kern[0] = F(1)
        length = m - len(kern) + 1
        k = rng.randint(1, min(2, length))
        opts = {"conv": kern, "kernel": k, "stride": rng.randint(1, k)}
    return opts


def random_leaf(rng: random.Random, n: int, w0, vanish: float = 0.75) -> ExprLeaf:
    """An affine leaf a.w + c with small integers a, vanishing at w0 with probability ``vanish``."""
    a = [rng.randint(-3, 3) for _ in range(n)]
    if not any(a):
        a[rng.randrange(n)] = 1
    base = sum(F(x) * y for x, y in zip(a, w0))
    c = -base if rng.random() < vanish else -base + F(rng.randint(-4, 4), 2)
    return ExprLeaf(a, c)


_VEC_KINDS = ("vec",) * 5
#: LayerNorm's eps values drawn (float64 values, exact as Fractions; PyTorch's default 1e-5 among them)
LN_EPS = (F(1, 4), F(1), F(1, 16), F(1e-5))
_ZERO_KINKS = ("relu", "abs", "leaky", "clamp")  # kinks with a breakpoint at 0


def random_vector(rng: random.Random, n: int, w0, smooth: bool = True) -> Vec:
    """A LayerNorm or attention node over shallow inputs (affine leaves, nine in ten vanishing at w0, or now
    and then one node above leaves), drawn so that its outputs tie at w0: LayerNorm of inputs that are all 0
    there is 0 in every entry, of (x, -x) pairs has mean exactly 0, of repeated inputs has equal entries;
    attention with zero scores weighs the values uniformly, and with zero values outputs 0.  Sometimes a
    LayerNorm of an attention output (a transformer block's order)."""

    def sub():
        return random_leaf(rng, n, w0, 0.9) if rng.random() < 0.85 else random_expr(rng, n, w0, 1, smooth)

    if rng.random() < 0.5:
        shape = rng.choice(["plain", "plain", "pairs", "repeat", "attention"])
        if shape == "pairs":  # mean exactly 0
            kids = [y for x in (sub() for _ in range(rng.randint(1, 2))) for y in (x, Lin([(-1, x)]))]
        elif shape == "repeat":  # equal inputs: equal entries
            base = [sub() for _ in range(rng.randint(1, 2))]
            kids = [rng.choice(base) for _ in range(rng.randint(2, 4))]
        elif shape == "attention":
            att = _random_attention(rng, sub, min_size=2)
            kids = [Entry(att, i) for i in range(att.size)]
        else:
            kids = [sub() for _ in range(rng.randint(2, 4))]
        m = len(kids)
        eps = rng.choice(LN_EPS)
        if rng.random() < 0.5:
            return LayerNorm(kids, eps)
        bias = [0] * m if rng.random() < 0.6 else [F(rng.randint(-2, 2), 2) for _ in range(m)]
        return LayerNorm(kids, eps, [rng.choice([1, 2, -1, F(1, 2)]) for _ in range(m)], bias)
    return _random_attention(rng, sub)


def _random_attention(rng: random.Random, sub, min_size: int = 1) -> Attention:
    d = rng.choice([1, 1, 2, 4])
    lq, lk = (1, 2) if d == 4 else (rng.randint(1, 2), rng.randint(2, 3))
    dv = rng.randint(max(1, -(-min_size // lq)), 2)
    render = rng.choice(["sdpa", "math", "bmm"])
    causal = render == "sdpa" and rng.random() < 0.3  # its -inf mask reaches the oracle as an exact mask value
    return Attention([sub() for _ in range(lq * d)], [sub() for _ in range(lk * d)],
                     [sub() for _ in range(lk * dv)], lq, lk, d, dv, render, causal=causal)


def _vector_use(rng: random.Random, vec: Vec) -> Expr:
    """A scalar use of a vector node's outputs: a kink at 0 on one entry, a selection over all of them, a
    maximum/minimum/where/branch between two, or one entry (for a node above)."""
    u = rng.random()
    if u < 0.35 or vec.size == 1:
        return Kink(rng.choice(_ZERO_KINKS), Entry(vec, rng.randrange(vec.size)))
    if u < 0.7:
        sel = rng.choice(_SELECTS)
        wts = [F(rng.randint(-3, 3), rng.choice([1, 2])) for _ in range(vec.size)]
        return Select(sel, [vec], wts, **_select_opts(rng, sel, vec.size))
    i, j = rng.sample(range(vec.size), 2)
    if u < 0.85:
        return Pair(rng.choice(["maximum", "minimum", "where", "branch"]), [Entry(vec, i), Entry(vec, j)])
    return Entry(vec, i)


# ----------------------------------------------------------------------------------------------------------
# the comparison
# ----------------------------------------------------------------------------------------------------------
@dataclass
class FuzzRecord:
    description: str
    n: int
    status: str
    reason: str  # the verdict's reason (unknown) or ""
    exact: bool
    curved: bool
    samples: int = 0  # generic nearby points compared
    float_checks: int = 0  # generic points where float64 autograd was compared with the reference
    undecided: int = 0  # hull tests too close to call in floating point (not counted as agreement)
    vector_ties: int = 0  # nodes at a kink or tie at w with a LayerNorm or attention output below (vector_ties)
    disagreements: list = field(default_factory=list)
    seconds: float = 0.0


def _grad_at(expr: Expr, point, exact: bool):
    """The reference dual number (value, gradient) at a rational point, or None when it is not generic."""
    try:
        with mpmath.workdps(_DPS):
            w = [F(x) for x in point] if exact else [_mp(F(x)) for x in point]
            return expr.ref(w)
    except NonGeneric:
        return None


def _nodes(e: Expr):
    yield e
    for k in e.kids:
        yield from _nodes(k)


def vector_ties(expr: Expr, w0) -> int:
    """How many kink and selection nodes of ``expr`` sit exactly on a kink, or on a tie between different local
    functions, at w0 with a LayerNorm or attention node below them: their arguments evaluate at w0 but the node
    itself is not generic there (the reference raises :class:`NonGeneric`)."""
    count = 0
    for node in _nodes(expr):
        if not isinstance(node, (Kink, Pair, Select)) or not any(isinstance(x, Vec) for x in _nodes(node)):
            continue
        if all(_grad_at(k, w0, False) is not None for k in node.kids) and _grad_at(node, w0, False) is None:
            count += 1
    return count


def _torch_grad(expr: Expr, point) -> tuple | None:
    """float64 autograd of the PyTorch program at a point (floats), or None when it is not representable."""
    vals = [float(x) for x in point]
    if [F(v) for v in vals] != [F(x) for x in point]:
        return None
    w = torch.tensor(vals, dtype=torch.float64, requires_grad=True)
    y = expr.torch(w)
    if not y.requires_grad:
        return tuple(0.0 for _ in vals)
    (g,) = torch.autograd.grad(y, w, allow_unused=True)
    return tuple(0.0 for _ in vals) if g is None else tuple(g.tolist())


def _hull_distance(t, V) -> float | None:
    """The L1 distance from t to conv(V) by a float LP (None if the LP fails)."""
    import numpy as np
    from scipy.optimize import linprog

    if not V:
        return None
    n, m = len(t), len(V)
    A = np.array([[float(v[k]) for v in V] for k in range(n)])
    # variables: lambda (m), s_plus (n), s_minus (n);  A lambda - s+ + s- = t, sum lambda = 1
    A_eq = np.hstack([A, -np.eye(n), np.eye(n)])
    A_eq = np.vstack([A_eq, np.r_[np.ones(m), np.zeros(2 * n)]])
    b_eq = np.r_[np.array([float(x) for x in t]), 1.0]
    c = np.r_[np.zeros(m), np.ones(2 * n)]
    res = linprog(c, A_eq=A_eq, b_eq=b_eq, bounds=[(0, None)] * (m + 2 * n), method="highs")
    return float(res.fun) if res.status == 0 else None


def _num(x):
    """A verdict's number (Fraction or Ival, read through its public lo/hi) as a float midpoint."""
    if hasattr(x, "lo"):
        return (float(x.lo) + float(x.hi)) / 2
    return float(x)


def _directions(v, rng: random.Random, n: int, samples: int) -> list:
    """Random directions, then the certificate's witness directions (hints to realise every vertex)."""
    out = [("random", [F(rng.randint(-1024, 1024), 1024) for _ in range(n)]) for _ in range(samples)]
    cert = v.certificate or {}
    wits = dict(cert.get("witnesses") or {})
    if cert.get("kind") == "adjacent_piece":
        wits = {"ad": cert.get("witness")}
    for key, d in wits.items():
        vec = [F(0)] * n
        for k, x in (d or {}).items():
            vec[int(k)] = F(x)
        out.append((f"witness {key}", vec))
    return out


def _vertex_distance(g, Vf) -> float:
    """The max-norm distance from a float gradient to the nearest listed vertex."""
    return min(max(abs(a - b) for a, b in zip(g, vf)) for vf in Vf)


def _limit_gradient(expr: Expr, w0, d, k: int, g, exact: bool) -> tuple[tuple, float] | None:
    """The limit t -> 0 of the reference gradient along w0 + t d (a Bouligand gradient), from its values at
    t = 2^-k (``g``), t/2 and t/4, and a bound on the error: (limit, error) as floats, or None when t/2 or t/4 is
    not generic.

    On one smooth (curved) piece g(s) = g0 + a s + b s^2 + O(s^3): a sample at t is O(t) from g0, whatever the
    tolerance. Richardson's extrapolation 2 g(t/2) - g(t) = g0 - b t^2/2 + O(t^3) removes the O(t) term; the
    second difference g(t) - 3 g(t/2) + 2 g(t/4) = 3 b t^2/8 + O(t^3) measures what remains: b t^2/2 is 4/3 of it,
    and the O(t^3) rest, 2^-k times smaller than it, is bounded by as much again (error: twice the second
    difference, in the max norm). Computed in the reference's 60 digits."""
    samples = []
    for j in (k + 1, k + 2):
        r = _grad_at(expr, [F(a) + F(1, 2**j) * b for a, b in zip(w0, d)], exact)
        if r is None:
            return None
        samples.append(r.g)
    (h, q) = samples
    with mpmath.workdps(_DPS):
        limit = tuple(float(2 * _mp(b) - _mp(a)) for a, b in zip(g, h))
        second = max(abs(_mp(a) - 3 * _mp(b) + 2 * _mp(c)) for a, b, c in zip(g, h, q))
    return limit, 2 * float(second)


def check_program(expr: Expr, w0, rng: random.Random, samples: int = 8, time_limit: float = 30.0,
                  perturb: bool = False) -> FuzzRecord:
    """Run the oracle on ``expr`` at ``w0`` and compare its verdict with the independent reference.
    ``perturb``: test PyTorch's exact AD moved along one coordinate (``ad=``; mostly not_member verdicts)
    instead of the AD itself."""
    import nsverify

    t0 = time.perf_counter()
    n = len(w0)
    w = torch.tensor([float(x) for x in w0], dtype=torch.float64)
    exact_ref = not expr.smooth
    v = nsverify.check_gradient(expr.torch, w, max_pieces=2000, on_limit="unknown", time_limit=time_limit,
                                progress=False)
    if perturb and v.exact_ad is not None and not any(hasattr(x, "lo") for x in v.exact_ad):
        moved = list(v.exact_ad)
        moved[rng.randrange(n)] += rng.choice([F(-2), F(-1, 2), F(1, 2), F(1), F(2)])
        v = nsverify.check_gradient(expr.torch, w, ad=moved, max_pieces=2000, on_limit="unknown", progress=False,
                                    time_limit=time_limit)
    rec = FuzzRecord(str(expr), n, v.status, v.reason if v.status == "unknown" else "", v.exact, expr.curved)
    if any(isinstance(x, Vec) for x in _nodes(expr)):
        rec.vector_ties = vector_ties(expr, w0)
    bad = rec.disagreements
    # 1. the exact AD against float64 autograd at w (PyTorch itself)
    ad = _torch_grad(expr, w0)
    # float64 rounding of a few ops (1/3 of an even split, ...) only; PyTorch's hardsigmoid backward uses a
    # float32 1/6 even in float64
    tol = 1e-7 if "hardsigmoid" in rec.description else 1e-9 if not exact_ref else 2.0**-40
    if v.exact_ad is not None and ad is not None:
        ex = [_num(x) for x in v.exact_ad]
        if exact_ref and any(hasattr(x, "lo") for x in v.exact_ad):
            bad.append("exact_ad: an interval in a program without smooth ops")
        elif any(abs(a - b) > tol * (1 + abs(b)) for a, b in zip(ex, ad)):
            bad.append(f"exact_ad: {tuple(map(str, v.exact_ad))} but float64 autograd gives {ad}")
    # 2. gradients near w: the reference (and float64 autograd where representable)
    V = [tuple(x) for x in v.bouligand]
    Vf = [tuple(_num(x) for x in vert) for vert in V]
    realised, sampled = [], []
    scales = (24, 48, 100) if not exact_ref or expr.curved else (24, 48)
    for source, d in _directions(v, rng, n, samples):
        got = None
        for k in scales:
            p = [F(a) + F(1, 2**k) * b for a, b in zip(w0, d)]
            r = _grad_at(expr, p, exact_ref)
            if r is None:
                continue  # not generic at this scale
            got = (k, r)
            if k == 24:
                tg = _torch_grad(expr, p)
                if tg is not None:
                    rec.float_checks += 1
                    ref = [float(x) for x in r.g]
                    if any(abs(a - b) > tol * (1 + abs(b)) for a, b in zip(tg, ref)):
                        bad.append(f"reference: at w + 2^-24 d ({source}) float64 autograd gives {tg}, the "
                                   f"reference {ref}")
        if got is None:
            continue
        k, r = got
        rec.samples += 1
        g = tuple(r.g)
        gf = tuple(float(x) for x in g)
        sampled.append(gf)
        if source.startswith("witness"):
            realised.append(gf)
        if exact_ref and not expr.curved:
            if v.exact and v.status != "unknown" and g not in V:
                bad.append(f"unsound: the gradient {tuple(map(str, g))} at w + 2^-{k} d ({source}) is not a "
                           "listed Bouligand vertex")
            if source.startswith("witness ") and source != "witness ad":
                i = int(source.split()[1])
                if i < len(V) and g != V[i]:
                    bad.append(f"unrealised: witness of vertex {i} leads to {tuple(map(str, g))}")
        elif v.exact and v.status != "unknown" and Vf:
            dist = _vertex_distance(gf, Vf)
            near = 1e-12 * (1 + max(map(abs, gf)))
            if dist > near:  # on a curved piece g(t) drifts O(t) from its limit: extrapolate it away
                lim = _limit_gradient(expr, w0, d, k, r.g, exact_ref)
                if lim is None or _vertex_distance(lim[0], Vf) > near + lim[1]:
                    more = "" if lim is None else (
                        f" (its limit t -> 0 extrapolated from 2^-{k}, 2^-{k + 1}, 2^-{k + 2}: "
                        f"{_vertex_distance(lim[0], Vf):.3g}, remainder {lim[1]:.3g})")
                    bad.append(f"unsound: the gradient {gf} at w + 2^-{k} d ({source}) is {dist:.3g} from every "
                               f"listed vertex{more}")
    # 3. the status against the hull of what the reference realised
    tested = [_num(x) for x in v.tested]
    if v.status == "member" and realised:
        # on piecewise-affine programs every sampled gradient is a Bouligand gradient too (a witness may be
        # non-generic for the reference: a tie that does not matter to the oracle's cones)
        dist = _hull_distance(tested, realised + sampled if not v.exact or (exact_ref and not expr.curved)
                              else realised)
        if dist is None or 1e-12 < dist <= 1e-7:
            rec.undecided += 1
        elif dist > 1e-7:
            bad.append(f"member: the tested vector is {dist:.3g} (L1) from the hull of the realised gradients")
    if v.status == "not_member" and sampled:
        dist = _hull_distance(tested, sampled)
        if v.distance is not None and v.distance < 1e-9:
            # a certified separation below this float test's resolution (e.g. PyTorch's backward formula with a
            # float constant such as hardsigmoid's 1/6, evaluated exactly): the test cannot contradict it
            rec.undecided += 1
        elif dist is None or 1e-12 < dist <= 1e-7:
            rec.undecided += 1
        elif dist <= 1e-12:
            bad.append("not_member: the tested vector lies in the hull of gradients sampled near w")
    rec.seconds = time.perf_counter() - t0
    return rec


def run_fuzz(count: int, seed: int = 0, depth: int = 3, samples: int = 6, smooth: bool = True,
             time_limit: float = 30.0, progress=None, vector_nodes: bool = False) -> list[FuzzRecord]:
    """``count`` random programs (seeded) through :func:`check_program`; ``progress(message, i, count)`` after
    each program when given; ``vector_nodes``: with LayerNorm and attention nodes (:func:`random_expr`)."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        if progress is not None and out:
            bad = sum(len(r.disagreements) for r in out)
            progress(f"fuzz: {len(out)} programs, {bad} disagreements", i, count)
        n = rng.randint(1, 3)
        w0 = [F(rng.randint(-4, 4), 2) for _ in range(n)]
        expr = random_expr(rng, n, w0, depth, smooth, vector_nodes)
        out.append(check_program(expr, w0, rng, samples, time_limit, perturb=rng.random() < 0.35))
    return out


def reason_class(reason: str) -> str:
    """A short class for an "unknown" reason (for counting)."""
    r = reason.lower()
    for key, label in (("tie choice", "PyTorch's tie choice unreadable"),
                       ("straddles", "interval straddles a kink or tie"),
                       ("cannot be separated", "inseparable interval vertices"),
                       ("outer bracket", "in the outer bracket only (curved pieces)"),
                       ("pieces to enumerate", "piece limit"), ("time limit", "time limit"),
                       ("no exact certificate", "no exact certificate either way"),
                       ("not provably", "smooth argument not provably in domain"),
                       ("could not be evaluated", "exact AD not evaluable")):
        if key in r:
            return label
    return reason.split(";")[0][:80]


def summarize(records: list[FuzzRecord]) -> dict:
    """Counts: programs, statuses, disagreements (and their kinds), unknowns by reason, checks made."""
    unknown: dict = {}
    kinds: dict = {}
    for r in records:
        if r.status == "unknown":
            c = reason_class(r.reason)
            unknown[c] = unknown.get(c, 0) + 1
        for d in r.disagreements:
            k = d.split(":")[0]
            kinds[k] = kinds.get(k, 0) + 1
    return {
        "programs": len(records),
        "member": sum(r.status == "member" for r in records),
        "not_member": sum(r.status == "not_member" for r in records),
        "unknown": sum(r.status == "unknown" for r in records),
        "disagreements": sum(len(r.disagreements) for r in records),
        "disagreement_kinds": kinds,
        "unknown_reasons": unknown,
        "nearby_points": sum(r.samples for r in records),
        "float_checks": sum(r.float_checks for r in records),
        "undecided_hull_tests": sum(r.undecided for r in records),
        "smooth_programs": sum(r.curved for r in records),
        "vector_tie_programs": sum(r.vector_ties > 0 for r in records),
        "vector_tie_decided": sum(r.vector_ties > 0 and r.status != "unknown" for r in records),
        "seconds": round(sum(r.seconds for r in records), 2),
    }


# ----------------------------------------------------------------------------------------------------------
# the piecewise-affine generator other tests use (kept as it was)
# ----------------------------------------------------------------------------------------------------------
def _leaf(rng: random.Random, n: int, w0):
    a = [rng.randint(-3, 3) for _ in range(n)]
    if not any(a):
        a[rng.randrange(n)] = 1
    base = sum(F(x) * y for x, y in zip(a, w0))
    c = -base if rng.random() < 0.75 else -base + F(rng.randint(-4, 4), 2)
    at = torch.tensor([float(x) for x in a], dtype=torch.float64)
    cf = float(c)
    desc = f"({'+'.join(f'{x}*w{i}' for i, x in enumerate(a) if x)}{cf:+g})"
    return (lambda w: (at * w).sum() + cf), desc


def _py_max(x, y):
    return x if x > y else y  # data-dependent Python branch (the max1 idiom)


def random_program(rng: random.Random, n: int, w0, depth: int = 3):
    """(fn, description): a random piecewise-affine scalar program of w (used by the path and backprop
    tests)."""
    if depth == 0 or rng.random() < 0.2:
        return _leaf(rng, n, w0)
    kind = rng.choice(["relu", "abs", "maximum", "max", "pool", "branch", "lin", "relu", "min", "sort", "topk",
                       "hardtanh", "leaky", "clamp", "where"])
    if kind in ("relu", "abs", "hardtanh", "leaky", "clamp"):
        f, d = random_program(rng, n, w0, depth - 1)
        lo = F(rng.randint(-2, 0), 2)
        hi = lo + F(rng.randint(1, 3), 2)
        op = {
            "relu": torch.relu,
            "abs": torch.abs,
            "leaky": lambda x: Fn.leaky_relu(x, 0.25),
            "hardtanh": lambda x: Fn.hardtanh(x, float(lo), float(hi)),
            "clamp": lambda x: torch.clamp(x, min=float(lo), max=float(hi)),
        }[kind]
        return (lambda w: op(f(w))), f"{kind}{d}"
    if kind == "lin":
        (f, d1), (g, d2) = random_program(rng, n, w0, depth - 1), random_program(rng, n, w0, depth - 1)
        a, b = rng.choice([-2, -1, 1, 2]), rng.choice([-2, -1, 1, 2])
        return (lambda w: a * f(w) + b * g(w)), f"({a}*{d1}+{b}*{d2})"
    m = rng.randint(2, 3)
    subs = [random_program(rng, n, w0, depth - 1) for _ in range(m)]
    fs = [s[0] for s in subs]
    ds = ",".join(s[1] for s in subs)
    if kind in ("sort", "topk"):
        wts = torch.tensor([float(rng.randint(-2, 3)) for _ in range(m)], dtype=torch.float64)

        def srt(w):
            x = torch.stack([f(w) for f in fs])
            if kind == "sort":
                return (torch.sort(x)[0] * wts).sum()
            return torch.topk(x, 2).values.sum()

        return srt, f"{kind}({ds})"
    if kind == "where":
        return (
            lambda w: torch.where(fs[0](w) >= fs[1](w), fs[0](w) - fs[1](w), 2 * (fs[1](w) - fs[0](w)))
        ), f"where({ds})"
    if kind == "maximum":
        return (lambda w: torch.maximum(fs[0](w), fs[1](w))), f"maximum({ds})"
    if kind == "min":
        return (lambda w: torch.minimum(fs[0](w), fs[1](w))), f"minimum({ds})"
    if kind == "max":
        return (lambda w: torch.max(torch.stack([f(w) for f in fs]))), f"max({ds})"
    if kind == "pool":

        def pool(w):
            y = torch.stack([f(w) for f in fs]).reshape(1, 1, m)
            return Fn.max_pool1d(y, 2, 1).sum()

        return pool, f"sum(maxpool({ds}))"

    def branch(w):
        best = fs[0](w)
        for f in fs[1:]:
            best = _py_max(f(w), best)
        return best

    return branch, f"max1({ds})"
