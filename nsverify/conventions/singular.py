"""Singular-point cells of the conventions matrix: what PyTorch's (and JAX's) AD returns where a gradient is most
often NaN or inf -- ``sqrt`` at 0, a norm at 0, ``F.normalize`` at 0, ``std`` of a constant vector, ``atan2`` at the
origin, ``xlogy`` at 0, ``acos``/``asin`` at the ends of their domain, the ``where(x > 0, sqrt(x), 0)`` pattern
whose branch not taken is NaN, a fully masked softmax row, an overflowing ``exp``.

One data table (:data:`TABLE`, OpInfo style): each :class:`Singular` row holds the program at its point, whether the
function is locally Lipschitz there (its class, one of :data:`nsverify.oracle.diagnosis.KINDS`' names), the exact
Clarke set derived by hand (and an exact membership test), PyTorch's documented rule there (autograd notes,
"Gradients for non-differentiable functions": the gradient where differentiable, the minimum-norm sub- or
super-gradient where locally convex or concave, the value by continuity where the function is defined (inf
possible), an arbitrary value where it is undefined) with the value it gives, and the value class PyTorch returned
when the row was recorded (``torch``, float64 eager on torch 2.13; ``mode_torch`` its per-mode exceptions).

A measured cell is a :class:`nsverify.conventions.matrix.Result`, the matrix's own record: ``rule`` is the value
class of the derivative (:func:`value_class`: ``nan``, ``+inf``, ``-inf``, ``±inf``, ``rule`` (the documented
rule's value), ``clarke`` (another Clarke element), ``finite`` (a finite value outside the Clarke set));
``expected`` the recorded class; ``in_clarke`` yes / rounding / no, or n/a where there is no Clarke set;
``extra`` the class of the point, whether PyTorch follows its documented rule there and the culprit op. So the
cells travel in the conventions JSON, are compared with the recorded releases and dated like every other cell
(:mod:`nsverify.conventions.baselines`); ``nsverify conventions --singular`` adds them to a run.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Callable, Sequence

import torch

from nsverify.claims import decide
from nsverify.claims.record import ClaimSpec, spec_table
from nsverify.conventions.matrix import Result, error_text
from nsverify.devices import dtype_name, parse_dtype
from nsverify.errors import NsverifyError

#: the classes of a singular point (the names of nsverify.oracle.diagnosis.KINDS, which sits above this package)
KINDS = ("lipschitz", "not_lipschitz", "undefined", "overflow")
TORCH_MODES = ("eager", "func", "jvp", "compile")
JAX_MODES = ("grad", "jvp", "jit")
DTYPES = ("bfloat16", "float32", "float64")
#: the jax release whose values ``Singular.jax_value`` records (the one constraints.txt pins)
JAX_RECORDED = "0.10.2"
INF = float("inf")

# ----------------------------------------------------------------------------------------------------------
# exact Clarke sets (hand-derived; each a test on an exact vector of Fractions)
# ----------------------------------------------------------------------------------------------------------


def _finite(v) -> bool:
    return all(isinstance(a, Fraction) for a in v)


def _ball(radius_sq: Fraction = Fraction(1)):
    """{g : |g|^2 <= radius_sq}: the Clarke set of a Euclidean norm (scaled) at its zero."""
    return lambda v: _finite(v) and sum(a * a for a in v) <= radius_sq


def _interval(lo, hi):
    return lambda v: _finite(v) and len(v) == 1 and lo <= v[0] <= hi


def _point(p: Sequence):
    return lambda v: _finite(v) and tuple(v) == tuple(Fraction(a) for a in p)


def _centred_ball(n: int):
    """std at a constant vector of length n: std(x) = |Px| / sqrt(n - 1) with P = I - 11^T/n, convex, so its Clarke
    set is P(unit ball)/sqrt(n - 1) = {g : sum(g) = 0, (n - 1)|g|^2 <= 1}."""
    return lambda v: _finite(v) and sum(v) == 0 and (n - 1) * sum(a * a for a in v) <= 1


def _nowhere(v) -> bool:
    """A Clarke set no float vector is in (an irrational or unrepresentable value)."""
    return False


def _eps_in(dtype: str) -> Fraction:
    """``F.normalize``'s eps (1e-12) as the dtype holds it, exactly."""
    return Fraction(torch.tensor(1e-12, dtype=parse_dtype(dtype)).double().item())


# ----------------------------------------------------------------------------------------------------------
# the table
# ----------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Singular:
    """One program at its singular point."""

    op: str  # the program, as a user writes it
    case: str  # the point
    kind: str  # one of KINDS
    values: tuple  # the point, exact
    expr: str  # the torch program, an expression in the tensor ``t`` (shape ``shape``); the cell differentiates its sum
    clarke_text: str  # the exact Clarke set, or why there is none
    rule_text: str  # PyTorch's documented rule here, in words
    torch: str  # the value class PyTorch's AD returned when recorded (float64, eager, torch 2.13)
    culprit: str = ""  # the op whose backward turns the value non-finite ("" when it stays finite)
    fix: str = ""  # what to write instead, when PyTorch's value is not the rule's
    shape: tuple = (1,)
    clarke: Callable | None = None  # exact vector -> bool; None: not locally Lipschitz, no Clarke set
    #: dtype name -> the documented rule's value (exact Fractions, or +-inf by continuity); None: arbitrary
    rule_value: Callable | None = None
    jax: Callable | None = None  # jax.numpy -> the JAX program (None: no JAX counterpart)
    #: the value class JAX's AD returned when recorded (JAX_RECORDED, every dtype and mode; "mode" -> exceptions)
    jax_value: str = ""
    jax_modes: dict = field(default_factory=dict)
    family: str = ""  # "where": the NaN-branch program family
    #: "mode", "dtype" or "dtype/mode" -> the recorded class where it differs from ``torch``
    mode_torch: dict = field(default_factory=dict)
    #: dtype -> the class of the point where that dtype's arithmetic changes the function (F.normalize's eps
    #: underflows to 0 in float16, so the point is 0/0 there)
    dtype_kind: dict = field(default_factory=dict)
    cotangent = None  # the matrix's interface (matrix._compiled_grads): the cell differentiates the plain sum

    #: the program as a function of one tensor (``expr`` compiled once, with ``torch`` and ``F`` in scope; a plain
    #: attribute, so torch.compile traces the program itself)
    fn: Callable = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        object.__setattr__(self, "fn", _compiled(self.expr))

    def jax_for(self, mode: str) -> str:
        return self.jax_modes.get(mode, self.jax_value)

    def kind_for(self, dtype: str) -> str:
        return self.dtype_kind.get(dtype, self.kind)

    def lipschitz_in(self, dtype: str) -> bool:
        return self.kind_for(dtype) in ("lipschitz", "overflow")

    def torch_for(self, mode: str, dtype: str = "float64") -> str:
        for key in (f"{dtype}/{mode}", dtype, mode):
            if key in self.mode_torch:
                return self.mode_torch[key]
        return self.torch


def _compiled(expr: str) -> Callable:
    return eval(compile(f"lambda t: {expr}", f"<singular cell: {expr}>", "eval"),  # noqa: S307 (the table's text)
                {"torch": torch, "F": torch.nn.functional})


def _jax_special():
    import jax.scipy.special

    return jax.scipy.special


def _const(*vals):
    return lambda dtype: tuple(v if isinstance(v, float) else Fraction(v) for v in vals)


def _zeros(n):
    return lambda dtype: (Fraction(0),) * n


Z3 = (0, 0, 0)
C3 = (1, -2, 3)  # a point away from 0, exact in every dtype
ONES3 = (1, 1, 1)
UNIT_BALL = "the closed unit ball {g : |g| <= 1} (the norm is convex; its subdifferential at 0)"
MIN_NORM_0 = "min-norm element of the Clarke set: 0"
ARBITRARY = "no limit of the gradient exists: any value (NaN or inf included) is allowed"

TABLE: tuple[Singular, ...] = (
    Singular("sqrt", "x=0", "not_lipschitz", (0,), "torch.sqrt(t)",
             "none: sqrt has the infinite right slope +inf at 0 (and is undefined left of 0)",
             "defined at 0: the gradient by continuity, +inf", "+inf", rule_value=_const(INF),
             jax=lambda jnp: jnp.sqrt,
             jax_value="+inf"),
    Singular("sqrt(x**2)", "x=0", "lipschitz", (0,), "torch.sqrt(t ** 2)",
             "[-1, 1] (the function is |x|)", MIN_NORM_0, "nan", "sqrt",
             "torch.abs(x) (or x.norm()); sqrt's backward multiplies inf by 0",
             clarke=_interval(-1, 1), rule_value=_zeros(1), jax=lambda jnp: lambda x: jnp.sqrt(x ** 2),
             jax_value="nan"),
    Singular("sqrt((x**2).sum())", "x=0 (3 entries)", "lipschitz", Z3, "torch.sqrt((t ** 2).sum())",
             UNIT_BALL, MIN_NORM_0, "nan", "sqrt",
             "torch.linalg.vector_norm(x), whose backward gives 0 at 0", shape=(3,), clarke=_ball(),
             rule_value=_zeros(3), jax=lambda jnp: lambda x: jnp.sqrt(jnp.sum(x ** 2)),
             jax_value="nan"),
    Singular("abs(x)**0.5", "x=0", "not_lipschitz", (0,), "t.abs() ** 0.5",
             "none: slopes +inf right of 0 and -inf left of it",
             ARBITRARY, "nan", rule_value=None, jax=lambda jnp: lambda x: jnp.abs(x) ** 0.5,
             jax_value="+inf"),
    Singular("abs(x)**1.5", "x=0", "lipschitz", (0,), "t.abs() ** 1.5",
             "{0} (differentiable at 0: |x|^1.5 = o(|x|))", "differentiable: the gradient, 0", "rule",
             clarke=_point((0,)), rule_value=_zeros(1), jax=lambda jnp: lambda x: jnp.abs(x) ** 1.5,
             jax_value="rule"),
    Singular("linalg.vector_norm", "x=0 (3 entries)", "lipschitz", Z3, "torch.linalg.vector_norm(t)", UNIT_BALL,
             MIN_NORM_0, "rule", shape=(3,), clarke=_ball(), rule_value=_zeros(3),
             jax=lambda jnp: jnp.linalg.norm,
             jax_value="nan"),
    Singular("torch.norm", "x=0 (3 entries)", "lipschitz", Z3, "torch.norm(t)", UNIT_BALL, MIN_NORM_0,
             "rule",
             shape=(3,), clarke=_ball(), rule_value=_zeros(3)),
    Singular("dist(x, c)", "x=c=(1,-2,3)", "lipschitz", C3, "torch.dist(t, t.new_tensor([1.0, -2.0, 3.0]))",
             UNIT_BALL,
             MIN_NORM_0, "rule", shape=(3,), clarke=_ball(), rule_value=_zeros(3),
             jax=lambda jnp: lambda x: jnp.linalg.norm(x - jnp.asarray(C3, x.dtype)),
             jax_value="nan"),
    Singular("cdist(x, c)", "x=c=(1,-2,3)", "lipschitz", C3,
             "torch.cdist(t.reshape(1, 3), t.new_tensor([1.0, -2.0, 3.0]).reshape(1, 3))", UNIT_BALL,
             MIN_NORM_0, "rule",
             shape=(3,), clarke=_ball(), rule_value=_zeros(3),
             mode_torch={"jvp": "error", "bfloat16": "error", "float16": "error"}),
    Singular("F.normalize", "x=0 (3 entries)", "lipschitz", Z3, "F.normalize(t, dim=0)",
             "{(1/eps) 1}: below |x| = eps the function is x/eps (eps = 1e-12 in the dtype), so it is "
             "differentiable; in float16 eps underflows to 0 and the value is 0/0",
             "differentiable: the gradient, 1/eps per entry (about 1e12)", "rule", "div",
             "in float16, normalize in float32 (or pass an eps float16 holds, e.g. 1e-4)", shape=(3,),
             clarke=None, rule_value=lambda dt: (1 / _eps_in(dt),) * 3 if _eps_in(dt) else None,
             mode_torch={"float16": "nan"}, dtype_kind={"float16": "undefined"}),
    Singular("F.normalize(eps=0)", "x=0 (3 entries)", "undefined", Z3,
             "F.normalize(t, dim=0, eps=0.0)",
             "none: the value 0/0 is undefined", "undefined: an arbitrary value, most often NaN", "nan", "div",
             "keep eps > 0 (the default 1e-12)", shape=(3,)),
    Singular("std", "constant x=(1,1,1)", "lipschitz", ONES3, "torch.std(t)",
             "{g : sum(g) = 0, 2|g|^2 <= 1} (std = |x - mean| / sqrt(2) is convex)", MIN_NORM_0, "rule",
             shape=(3,), clarke=_centred_ball(3),
             rule_value=_zeros(3), jax=lambda jnp: lambda x: jnp.std(x, ddof=1),
             jax_value="nan"),
    Singular("var", "constant x=(1,1,1)", "lipschitz", ONES3, "torch.var(t)",
             "{0} (var is smooth; its gradient 2(x - mean)/2 is 0)", "differentiable: the gradient, 0", "rule",
             shape=(3,), clarke=_point(Z3), rule_value=_zeros(3), jax=lambda jnp: lambda x: jnp.var(x, ddof=1),
             jax_value="rule"),
    Singular("atan2(y, x)", "(y, x)=(0, 0)", "not_lipschitz", (0, 0), "torch.atan2(t[0], t[1])",
             "none: atan2 has no limit at the origin (every angle in (-pi, pi] is a limit value)", ARBITRARY,
             "finite", shape=(2,), mode_torch={"jvp": "nan"}, jax=lambda jnp: lambda t: jnp.arctan2(t[0], t[1]),
             jax_value="nan"),
    Singular("xlogy(x, x)", "x=0", "not_lipschitz", (0,), "torch.xlogy(t, t)",
             "none: x log x has the right slope -inf at 0 and is undefined left of 0",
             "defined at 0: the gradient by continuity from the right, -inf", "nan", "xlogy",
             rule_value=_const(-INF), jax=lambda jnp: lambda x: _jax_special().xlogy(x, x),
             jax_value="nan"),
    Singular("acos", "x=1", "not_lipschitz", (1,), "torch.acos(t)", "none: the left slope at 1 is -inf",
             "defined at 1: the gradient by continuity, -inf", "-inf", rule_value=_const(-INF),
             jax=lambda jnp: jnp.arccos,
             jax_value="-inf"),
    Singular("acos", "x=-1", "not_lipschitz", (-1,), "torch.acos(t)", "none: the right slope at -1 is -inf",
             "defined at -1: the gradient by continuity, -inf", "-inf", rule_value=_const(-INF),
             jax=lambda jnp: jnp.arccos,
             jax_value="-inf"),
    Singular("asin", "x=1", "not_lipschitz", (1,), "torch.asin(t)", "none: the left slope at 1 is +inf",
             "defined at 1: the gradient by continuity, +inf", "+inf", rule_value=_const(INF),
             jax=lambda jnp: jnp.arcsin,
             jax_value="+inf"),
    Singular("asin", "x=-1", "not_lipschitz", (-1,), "torch.asin(t)", "none: the right slope at -1 is +inf",
             "defined at -1: the gradient by continuity, +inf", "+inf", rule_value=_const(INF),
             jax=lambda jnp: jnp.arcsin,
             jax_value="+inf"),
    # the NaN-branch family: the branch not taken is evaluated, and its derivative times 0 is NaN
    Singular("where(x > 0, sqrt(x), 0)", "x=-1", "lipschitz", (-1,),
             "torch.where(t > 0, torch.sqrt(t), 0.0)", "{0} (the function is 0 near -1)",
             "differentiable: the gradient, 0", "nan", "sqrt",
             "sqrt(where(x > 0, x, 1)) inside the where (the double-where trick)", clarke=_point((0,)),
             rule_value=_zeros(1), family="where", mode_torch={"jvp": "rule"},
             jax=lambda jnp: lambda x: jnp.where(x > 0, jnp.sqrt(x), 0.0),
             jax_value="nan", jax_modes={"jvp": "rule"}),
    Singular("where(x > 0, sqrt(x), 0)", "x=0", "not_lipschitz", (0,),
             "torch.where(t > 0, torch.sqrt(t), 0.0)",
             "none: the right slope at 0 is +inf", "slopes 0 on the left, +inf on the right: " + ARBITRARY,
             "nan", "sqrt", family="where", mode_torch={"jvp": "finite"},
             jax=lambda jnp: lambda x: jnp.where(x > 0, jnp.sqrt(x), 0.0),
             jax_value="nan", jax_modes={"jvp": "finite"}),
    Singular("where(x > 1, log(x), 0)", "x=0", "lipschitz", (0,),
             "torch.where(t > 1, torch.log(t), 0.0)", "{0} (the function is 0 near 0)",
             "differentiable: the gradient, 0", "nan", "log", "log(where(x > 1, x, 1)) inside the where",
             clarke=_point((0,)), rule_value=_zeros(1), family="where", mode_torch={"jvp": "rule"},
             jax=lambda jnp: lambda x: jnp.where(x > 1, jnp.log(x), 0.0),
             jax_value="nan", jax_modes={"jvp": "rule"}),
    Singular("where(x > 0, x**1.5, 0)", "x=-1", "lipschitz", (-1,),
             "torch.where(t > 0, t ** 1.5, 0.0)", "{0} (the function is 0 near -1)",
             "differentiable: the gradient, 0", "nan", "pow", "where(x > 0, x, 0)**1.5 inside the where",
             clarke=_point((0,)), rule_value=_zeros(1), family="where", mode_torch={"jvp": "rule"},
             jax=lambda jnp: lambda x: jnp.where(x > 0, x ** 1.5, 0.0),
             jax_value="nan", jax_modes={"jvp": "rule"}),
    Singular("where(x > 1, 1/x, 0)", "x=0", "lipschitz", (0,),
             "torch.where(t > 1, 1 / t, 0.0)", "{0} (the function is 0 near 0)",
             "differentiable: the gradient, 0", "nan", "reciprocal", "1/where(x > 1, x, 1) inside the where",
             clarke=_point((0,)), rule_value=_zeros(1), family="where", mode_torch={"jvp": "rule"},
             jax=lambda jnp: lambda x: jnp.where(x > 1, 1 / x, 0.0),
             jax_value="nan", jax_modes={"jvp": "rule"}),
    Singular("softmax, fully masked row", "logits=(0,0,0), all masked", "undefined", Z3,
             "torch.softmax(t.masked_fill(t.new_ones(3, dtype=torch.bool), float('-inf')), 0)"
             " * t.new_tensor([1.0, 2.0, 3.0])",
             "none: every logit is -inf, the value exp(-inf)/0 is undefined",
             "undefined: an arbitrary value, most often NaN", "finite", "softmax",
             "leave one position unmasked, or zero the fully masked rows after the softmax", shape=(3,),
             mode_torch={"jvp": "nan"}),
    Singular("exp(1000 x)", "x=1", "overflow", (1,), "torch.exp(1000 * t)",
             "{1000 e^1000} (about 1.97e437: finite, above every float dtype's range)",
             "differentiable: the gradient, 1000 e^1000 (it overflows to +inf in every float dtype)", "+inf",
             "exp", "compute in log space (logsumexp, log_softmax)", clarke=_nowhere,
             jax=lambda jnp: lambda x: jnp.exp(1000 * x),
             jax_value="+inf"),
)


def select(ops: Sequence[str] | None = None) -> list[Singular]:
    """The rows of ``ops`` (by ``op``; default all); an unknown name is an error naming the known ones."""
    if not ops:
        return list(TABLE)
    known = list(dict.fromkeys(s.op for s in TABLE))
    bad = [o for o in ops if o not in known]
    if bad:
        raise NsverifyError(f"no singular-point cell for {bad}: choose from {', '.join(known)}.")
    return [s for s in TABLE if s.op in ops]


# ----------------------------------------------------------------------------------------------------------
# judging a derivative
# ----------------------------------------------------------------------------------------------------------
def _rounded(value, dtype: str) -> float:
    """``value`` (a Fraction or +-inf) rounded to ``dtype``, as a float."""
    return torch.tensor(float(value), dtype=torch.float64).to(parse_dtype(dtype)).double().item()


def _as_exact(vec: Sequence[float]) -> tuple:
    """Finite floats as the Fractions they are; NaN and inf kept as floats."""
    return tuple(Fraction(v) if math.isfinite(v) else v for v in vec)


def in_clarke(row: Singular, vec: Sequence[float], dtype: str) -> str:
    """``yes`` (exactly in the Clarke set), ``rounding`` (the documented rule's value rounded to the dtype), ``no``,
    or ``n/a`` (no Clarke set: not locally Lipschitz, or undefined)."""
    if not row.lipschitz_in(dtype):
        return "n/a"
    ex = _as_exact(vec)
    if row.clarke is not None and row.clarke(ex):
        return "yes"
    if row.clarke is None and row.rule_value is not None and ex == tuple(row.rule_value(dtype)):
        return "yes"  # a differentiable point whose only Clarke element is the rule's value
    if follows_rule(row, vec, dtype) and all(math.isfinite(v) for v in vec):
        return "rounding"
    return "no"


def follows_rule(row: Singular, vec: Sequence[float], dtype: str) -> bool:
    """Does ``vec`` equal the documented rule's value (exactly, or rounded to ``dtype``; an arbitrary rule
    accepts anything)? An overflowing exact value counts as followed when ``vec`` is its rounding (+-inf)."""
    if row.kind_for(dtype) == "overflow":
        return all(v == INF for v in vec)  # 1000 e^1000 rounds to +inf in every float dtype
    want = row.rule_value(dtype) if row.rule_value is not None and row.kind_for(dtype) != "undefined" else None
    if want is None:
        return True
    return len(want) == len(vec) and all(v == _rounded(w, dtype) for v, w in zip(vec, want))


def value_class(row: Singular, vec: Sequence[float], dtype: str) -> str:
    """The class of a derivative: ``nan``, ``+inf``, ``-inf``, ``±inf``, ``rule`` (the documented rule's finite
    value), ``clarke`` (another Clarke element) or ``finite`` (anything else)."""
    if any(math.isnan(v) for v in vec):
        return "nan"
    infs = {v for v in vec if math.isinf(v)}
    if infs:
        return "+inf" if infs == {INF} else "-inf" if infs == {-INF} else "±inf"
    if row.rule_value is not None and row.kind_for(dtype) != "undefined" and follows_rule(row, vec, dtype):
        return "rule"
    return "clarke" if in_clarke(row, vec, dtype) in ("yes", "rounding") else "finite"


def judged(row: Singular, vec: Sequence[float], dtype: str, device: str, mode: str, expected: str,
           framework: str = "torch") -> Result:
    cls = value_class(row, vec, dtype)
    return Result(row.op, row.case, dtype, device, mode, [float(v) for v in vec], cls, in_clarke(row, vec, dtype),
                  expected, cls == expected,
                  extra={"singular": True, "kind": row.kind_for(dtype), "follows_rule": follows_rule(row, vec, dtype),
                         "culprit": row.culprit, "framework": framework}, observed=cls)


def _error(row: Singular, dtype: str, device: str, mode: str, expected: str, exc: BaseException) -> Result:
    return Result(row.op, row.case, dtype, device, mode, [], "error", "n/a", expected, expected == "error",
                  error=error_text(exc),
                  extra={"singular": True, "kind": row.kind_for(dtype), "culprit": row.culprit})


# ----------------------------------------------------------------------------------------------------------
# measuring PyTorch
# ----------------------------------------------------------------------------------------------------------
def point(row: Singular, dtype, device="cpu") -> torch.Tensor:
    from nsverify.registry import exact_tensor

    return exact_tensor(row.values, parse_dtype(dtype), device).reshape(row.shape)


def torch_derivative(row: Singular, x: torch.Tensor, mode: str) -> torch.Tensor:
    """PyTorch's derivative of ``sum(row.fn(x))`` at ``x`` in mode eager, func or jvp (a tensor shaped like x)."""
    from nsverify.conventions.matrix import _jvp_rows

    def f(t):
        return row.fn(t).sum()

    if mode == "eager":
        leaf = x.clone().requires_grad_(True)
        return torch.autograd.grad(f(leaf), leaf)[0]
    if mode == "func":
        return torch.func.grad(f)(x)
    if mode == "jvp":
        return _jvp_rows(row, x, f)
    raise NsverifyError(f"unknown mode {mode!r} for a singular cell: choose from {', '.join(TORCH_MODES)}.")


def evaluate(row: Singular, dtype, mode: str, device="cpu", compiled=None) -> Result:
    """One cell (``compiled``: the derivative from the batch compile, mode ``compile``)."""
    dt, dev = dtype_name(parse_dtype(dtype)), str(device)
    expected = row.torch_for(mode, dt)
    try:
        g = compiled if mode == "compile" else torch_derivative(row, point(row, dt, dev), mode)
        if g is None:
            raise NsverifyError("the compiled function returned no gradient for this input")
        return judged(row, g.detach().double().cpu().flatten().tolist(), dt, dev, mode, expected)
    except NsverifyError as exc:
        if mode != "compile":
            raise
        return _error(row, dt, dev, mode, expected, exc)
    except Exception as exc:  # a mode PyTorch refuses for this op: recorded, the run goes on
        return _error(row, dt, dev, mode, expected, exc)


def run_singular(dtypes: Sequence = DTYPES, modes: Sequence[str] = ("eager", "func", "jvp"), devices=("cpu",),
                 ops: Sequence[str] | None = None, compile_backend: str = "inductor") -> list[Result]:
    """Every singular cell of ``ops`` in ``dtypes`` x ``modes`` x ``devices`` (mode ``compile``: one compiled
    function per dtype and device, as the matrix compiles)."""
    from nsverify.conventions.matrix import _compiled_grads_split

    bad = [m for m in modes if m not in TORCH_MODES]
    if bad:
        raise NsverifyError(f"unknown mode(s) {bad} for the singular cells: choose from {', '.join(TORCH_MODES)}.")
    rows = select(ops)
    out: list[Result] = []
    for dev in devices:
        for dt in dtypes:
            for mode in modes:
                if mode != "compile":
                    out += [evaluate(r, dt, mode, dev) for r in rows]
                    continue
                # a row Inductor cannot compile records why; the others are compiled without it
                grads = _compiled_grads_split(rows, parse_dtype(dt), torch.device(dev), compile_backend)
                name = dtype_name(parse_dtype(dt))
                out += [_error(r, name, str(dev), mode, r.torch_for(mode, name), g) if isinstance(g, Exception)
                        else evaluate(r, dt, mode, dev, g) for r, g in zip(rows, grads)]
    return out


# ----------------------------------------------------------------------------------------------------------
# measuring JAX (imported only here, when asked)
# ----------------------------------------------------------------------------------------------------------
def run_singular_jax(dtypes: Sequence = DTYPES, modes: Sequence[str] = JAX_MODES,
                     ops: Sequence[str] | None = None) -> list[Result]:
    """JAX's derivative at every singular cell that has a JAX program; JaxMissingError (naming the fix) when
    JAX is not installed. A JAX cell's ``expected`` is the class recorded for JAX (``jax_value``), as a torch
    cell's is the one recorded for PyTorch."""
    from nsverify.conventions import jax_matrix as jm

    jm.require_jax()
    import jax.numpy as jnp
    import numpy as np

    bad = [m for m in modes if m not in JAX_MODES]
    if bad:
        raise NsverifyError(f"unknown JAX mode(s) {bad} for the singular cells: choose from {', '.join(JAX_MODES)}.")
    out = []
    for row in (r for r in select(ops) if r.jax is not None):
        prog = row.jax(jnp)
        for dt in dtypes:
            for mode in modes:
                try:
                    x = jm.exact_array(row.values, dt, row.shape)
                    g = jm.derivative(None, x, lambda a, p=prog: jnp.sum(p(a)), mode)
                    vec = [float(v) for v in np.asarray(g.astype(jnp.float64)).reshape(-1).tolist()]
                    out.append(judged(row, vec, dt, "cpu", mode, row.jax_for(mode), framework="jax"))
                except NsverifyError:
                    raise
                except Exception as exc:  # a mode this JAX release refuses: recorded
                    out.append(_error(row, dt, "cpu", mode, row.jax_for(mode), exc))
    return out


# ----------------------------------------------------------------------------------------------------------
# text
# ----------------------------------------------------------------------------------------------------------
def format_singular(results: Sequence[Result]) -> str:
    """The terminal table: one line per singular cell's program and point, with the class of the point, the
    value classes PyTorch returned over the columns measured, and whether that follows the documented rule."""
    rows: dict = {}
    for r in results:
        rows.setdefault((r.op, r.case), []).append(r)
    lines = [f"{'program':<28} {'point':<24} {'class':<13} {'AD returns':<22} follows rule"]
    for (op, case), rs in rows.items():
        row = next(s for s in TABLE if (s.op, s.case) == (op, case))
        classes = {}
        for r in rs:
            classes.setdefault(r.rule, []).append(f"{r.dtype.replace('float', 'f')}/{r.mode}")
        got = classes and next(iter(classes)) if len(classes) == 1 else "; ".join(
            f"{c} in {','.join(k)}" for c, k in classes.items())
        follows = {r.extra.get("follows_rule") for r in rs if r.rule != "error"}
        lines.append(f"{op:<28} {case:<24} {row.kind:<13} {got:<22} "
                     f"{'yes' if follows == {True} else 'no' if follows == {False} else 'partly'}")
    return "\n".join(lines)


def doc_table() -> str:
    """docs/nan.md's table of the common culprits, generated from :data:`TABLE` (``tests/test_singular_cells.py``
    checks the page holds exactly this)."""
    head = ("| program | point | class | exact Clarke set | PyTorch's documented rule | PyTorch 2.13 returns | "
            "JAX 0.10.2 returns | the op | fix |\n|---|---|---|---|---|---|---|---|---|")

    def cell(text: str) -> str:
        return text.replace("|", "\\|")  # |x| inside a Markdown table cell

    body = [f"| `{s.op}` | {cell(s.case)} | {s.kind}"
            + "".join(f" ({d}: {k})" for d, k in s.dtype_kind.items()) + " |"
            + f" {cell(s.clarke_text)} | {cell(s.rule_text)} | {s.torch}"
            + (f" ({', '.join(f'{m}: {c}' for m, c in s.mode_torch.items())})" if s.mode_torch else "")
            + f" | {s.jax_value or '-'}"
            + (f" ({', '.join(f'{m}: {c}' for m, c in s.jax_modes.items())})" if s.jax_modes else "")
            + f" | {'`' + s.culprit + '`' if s.culprit else '-'} | {cell(s.fix) if s.fix else '-'} |" for s in TABLE]
    return "\n".join([head, *body])


def lipschitz_nonfinite(results: Sequence[Result]) -> list[Result]:
    """The cells where the function is locally Lipschitz (a Clarke set exists, PyTorch's rule promises a finite
    value) and the AD returned NaN or inf: bugs by the documented rule (an overflow's inf is its rounding)."""
    return [r for r in results if r.extra.get("kind") == "lipschitz" and r.rule in ("nan", "+inf", "-inf", "±inf")]


def summary_line(results: Sequence[Result]) -> str:
    """One sentence over the singular cells of a run."""
    programs = {(r.op, r.case) for r in results}
    bad = lipschitz_nonfinite(results)
    unexpected = [r for r in results if not r.as_expected]
    broken = sorted({f"{r.op} at {r.case}" for r in bad})
    jax = any(r.extra.get("framework") == "jax" for r in results)
    return (f"Singular-point cells{' (JAX)' if jax else ''}: {len(results)} evaluations of {len(programs)} programs "
            f"at their singular points; {len(bad)} return NaN/inf where the function is locally Lipschitz (a bug by "
            f"PyTorch's documented rule{': ' + '; '.join(broken) if broken else ''}); {len(unexpected)} differ "
            "from the recorded value (docs/nan.md).")


# ----------------------------------------------------------------------------------------------------------
# claims (judged here, rendered by the nightly's NaN section)
# ----------------------------------------------------------------------------------------------------------
OURS = "nsverify (ours)"
CLAIMS = (
    ClaimSpec("conventions/singular-as-recorded", OURS, "conventions matrix, singular-point cells",
              "PyTorch's derivative at every singular point has the value class nsverify records (docs/nan.md)",
              "singular cells whose value class differs from the recorded one", "exact",
              "every singular-point program x its dtypes x eager/func/jvp on CPU", by="ours"),
    ClaimSpec("conventions/singular-lipschitz-nan", OURS, "conventions matrix, singular-point cells",
              "PyTorch's reverse-mode AD returns NaN at points where the function is locally Lipschitz (the where "
              "NaN-branch family, sqrt of a square or of a sum of squares), against its documented rule",
              "locally Lipschitz singular cells with a NaN/inf eager derivative", "exact",
              "every locally Lipschitz singular-point program, eager mode", by="ours"),
)
SPEC = spec_table(CLAIMS)


def singular_claims(results: Sequence[Result]) -> list[dict]:
    """The two claims this run's singular cells decide."""
    unexpected = [r for r in results if not r.as_expected]
    eager = [r for r in results if r.mode == "eager"]
    bad = lipschitz_nonfinite(eager)
    lip = [r for r in eager if r.extra.get("kind") == "lipschitz"]
    return [
        SPEC["conventions/singular-as-recorded"].judge(
            f"{len(unexpected)} of {len(results)} cells differ from the recorded class", decide.exact(not unexpected)),
        SPEC["conventions/singular-lipschitz-nan"].judge(
            f"{len(bad)} of {len(lip)} locally Lipschitz eager cells are NaN/inf", decide.exact(bool(bad))),
    ]


# ----------------------------------------------------------------------------------------------------------
# standalone scripts (a release change of a singular cell, as nsverify releases writes one per change)
# ----------------------------------------------------------------------------------------------------------
def find(op: str, case: str) -> Singular | None:
    """The row of a singular cell's (op, case), or None (a registry cell)."""
    return next((s for s in TABLE if (s.op, s.case) == (op, case)), None)


def cell_script(row: Singular, dtype: str, mode: str, head: str) -> str:
    """A standalone torch script evaluating one singular cell (the program's expression, its point, the mode),
    after the comment block ``head``, printing the derivative."""
    from nsverify.conventions.scripts import _MODE_CODE

    vals = ", ".join(str(float(v)) for v in row.values)
    return "\n".join([
        head, "import torch", "import torch.nn.functional as F", "", "",
        f"def f(t):  # {row.op} at {row.case}", f"    return ({row.expr}).sum()", "", "",
        f"x = torch.tensor([{vals}], dtype=torch.{dtype}).reshape({tuple(row.shape)!r})",
        _MODE_CODE[mode], 'print("torch", torch.__version__, "derivative:", g.flatten().tolist())', ""])
