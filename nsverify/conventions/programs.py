"""Programs in the conventions matrix (issue 37): ties and kinks on COMPUTED operands inside a compiled region.

The op matrix (:mod:`nsverify.conventions.matrix`) runs one op on an exact input. The reports users file about
compiled gradients at ties come from programs: a matmul's output tied in an ``amax``, a conv's output tied in a
``max_pool``, two attention probabilities tied in a ``max``. Inductor fuses and recomputes, so an exact-equality
mask in a fused backward can compare a recomputed value with a stored one. This module holds one data table of
such programs, OpInfo style (:data:`PROGRAMS`, one :class:`Program` record each): the program (a torch function of
one flat input), its input (dyadic, so every intermediate value and the tie itself are exact in float32, bfloat16
and float16), and the Bouligand gradients at that input, derived by hand (each with a direction into the open set
where its piece is active; ``tests/test_programs.py`` re-derives every piece from one-sided float64 gradients and
checks that no piece is missing). The Clarke set at the input is their convex hull.

Each program is evaluated in every mode of :data:`MODES` (eager reverse; ``torch.func.grad``; forward mode, the
jvp along each unit tangent; eager under ``torch.use_deterministic_algorithms(True)``; ``torch.compile`` with
``backend="aot_eager"`` (AOTAutograd's decompositions, no codegen), with Inductor, and with Inductor's
``mode="max-autotune-no-cudagraphs"``), per dtype and device, and every returned gradient is judged exactly
against the Clarke set (:func:`judge_gradient`). Every disagreement between cells of one program and device, and
every gradient outside the Clarke set, is a finding (:func:`program_findings`) with a standalone reproduction
script (:func:`program_script`), the release it was measured on and, for a compiled cell that disagrees, the
stage that causes it: AOTAutograd's decomposition (``aot_eager`` already differs from eager) or Inductor's codegen
(``aot_eager`` agrees with eager, Inductor does not).

Compiles are slow and can crash, so :func:`run_programs` evaluates the compiled modes in child processes (one per
dtype, device and compiled mode, each with its own Inductor cache per CPU capability,
:mod:`nsverify.conventions.inductor`); a child that dies has its batch split in halves down to the program that
crashes it, which becomes a ``"crashed"`` cell with its script. ``nsverify conventions --programs`` prints the
table; the release sweep (:mod:`nsverify.conventions.releases`) runs the same cells in each release's environment.
Each table entry also carries its JAX twin (``Program.jax``: the same function from ``jax.numpy``/``jax.lax``);
the modes ``jax_grad`` and ``jax_jit`` (:mod:`nsverify.conventions.programs_jax`, the optional extra
``nsverify[jax]``) judge JAX's gradients against the same Clarke sets (``--programs --framework jax``).
"""
from __future__ import annotations

import inspect
import json
import math
import os
import sys
import tempfile
import textwrap
from dataclasses import asdict, dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Callable, Sequence

from nsverify.errors import BadArgumentError, NsverifyError
from nsverify.rational import in_hull

#: the modes a program is evaluated in; the compiled ones (``COMPILED``) run in child processes
MODES = ("eager", "func", "jvp", "deterministic", "aot_eager", "inductor", "max-autotune")
COMPILED = {"aot_eager": ("aot_eager", None), "inductor": ("inductor", None),
            "max-autotune": ("inductor", "max-autotune-no-cudagraphs")}
#: the modes of the default run and the nightly: max-autotune is slow on CPU (``--modes`` adds it)
DEFAULT_MODES = ("eager", "func", "jvp", "deterministic", "aot_eager", "inductor")
DEFAULT_DTYPES = ("float32", "bfloat16", "float16")
#: the JAX modes (``jax.grad``, ``jax.jit(jax.grad)``; CPU, :mod:`nsverify.conventions.programs_jax`): not in
#: ``MODES`` (they need the optional extra nsverify[jax]); ``ALL_MODES`` is what a run accepts
JAX_MODES = ("jax_grad", "jax_jit")
ALL_MODES = MODES + JAX_MODES
SCHEMA = "nsverify.conventions.programs/1"


# ----------------------------------------------------------------------------------------------------------
# the table
# ----------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Piece:
    """A selection function active on an open set next to the point: its label, a direction ``d`` such that
    ``x + t d`` lies in that open set for small t > 0, and its exact gradient at the point."""

    label: str
    direction: tuple
    gradient: tuple


@dataclass(frozen=True)
class Program:
    """One program: ``fn`` maps a flat 1-d tensor to a scalar; ``inputs`` is the point (dyadic values);
    ``pieces`` the hand-derived Bouligand gradients there (their hull is the Clarke set); ``where`` says which
    computed operands tie or sit on a kink."""

    name: str
    fn: Callable
    inputs: tuple
    pieces: tuple
    where: str
    #: the JAX twin: the same function of the same flat input from jax.numpy/jax.lax (None: no twin, ``jax_note``
    #: says why); ``jax_note`` also names what stands in where JAX has no op of the torch program's
    jax: Callable | None = None
    jax_note: str | None = None

    def __post_init__(self):
        if not self.pieces:
            raise BadArgumentError(f"program {self.name!r} has no pieces: give at least one Piece(label, direction, "
                                   "gradient) (the Clarke set is their convex hull).")
        for q in self.pieces:
            if len(q.gradient) != len(self.inputs) or len(q.direction) != len(self.inputs):
                raise BadArgumentError(f"program {self.name!r}, piece {q.label!r}: its direction and gradient need "
                                       f"{len(self.inputs)} entries, one per input value (got {len(q.direction)} "
                                       f"and {len(q.gradient)}).")

    @property
    def n(self) -> int:
        return len(self.inputs)

    def clarke(self, vec: Sequence[Fraction]) -> bool:
        """Exact test: is ``vec`` in the Clarke set (the hull of the pieces' gradients)?"""
        return in_hull([Fraction(v) for v in vec], [[Fraction(g) for g in p.gradient] for p in self.pieces])


def _k(x, rows):
    """A constant of the program in ``x``'s dtype and device."""
    import torch

    return torch.tensor(rows, dtype=x.dtype, device=x.device)


def _i(x, rows):
    """An index constant on ``x``'s device."""
    import torch

    return torch.tensor(rows, dtype=torch.long, device=x.device)


def p_matmul_amax(x):
    s = x.reshape(2, 2) @ _k(x, [1.0, 1.0])
    return s.amax()


def p_matmul_max_dim(x):
    s = x.reshape(2, 2) @ _k(x, [[1.0, 1.0], [1.0, -1.0]])
    return torch_max(s, 0).sum()


def torch_max(t, dim):
    """``torch.max(t, dim).values`` (the values of the reduction that returns indices)."""
    import torch

    return torch.max(t, dim=dim).values


def p_bmm_amin(x):
    import torch

    s = torch.bmm(x.reshape(1, 2, 2), _k(x, [[[1.0], [-1.0]]]))
    return s.amin(dim=1).sum()


def p_conv1d_relu_maxpool(x):
    import torch.nn.functional as F

    y = F.conv1d(x.reshape(1, 1, 4), _k(x, [[[1.0, -1.0]]]))
    return F.max_pool1d(F.relu(y), kernel_size=2, stride=1).sum()


def p_conv2d_relu_maxpool(x):
    import torch.nn.functional as F

    y = F.conv2d(x.reshape(1, 1, 3, 3), _k(x, [[[[1.0, 1.0], [1.0, 1.0]]]]), bias=_k(x, [-3.0]))
    return F.max_pool2d(F.relu(y), kernel_size=2).sum()


def _scores(x):
    q, k = x[:2], x[2:].reshape(2, 2)
    return k @ q  # s_j = <q, k_j>


def p_attention_softmax_amax(x):
    return _scores(x).softmax(dim=-1).amax()


def p_attention_softmax_max_dim(x):
    return torch_max(_scores(x).softmax(dim=-1), -1)


def p_residual_relu(x):
    import torch.nn.functional as F

    y = x + _k(x, [[1.0, -1.0], [0.0, -2.0]]) @ x
    return F.relu(y).sum()


def p_multi_margin_logits(x):
    import torch.nn.functional as F

    z = _k(x, [[1.0, 1.0], [1.0, 0.0], [0.0, -1.0], [-1.0, 0.0]]) @ x
    return F.multi_margin_loss(z.reshape(1, 4), _i(x, [0]))


def p_margin_ranking_scores(x):
    import torch.nn.functional as F

    s1, s2 = (x[0] + x[1]).reshape(1), x[1].reshape(1)
    return F.margin_ranking_loss(s1, s2, _k(x, [1.0]), margin=1.0)


def p_cumsum_cummax(x):
    import torch

    return torch.cummax(torch.cumsum(x, 0), 0).values.sum()


def p_cumsum_cummin(x):
    import torch

    return torch.cummin(torch.cumsum(x, 0), 0).values.sum()


def p_scatter_amax(x):
    import torch

    out = torch.zeros(2, dtype=x.dtype, device=x.device)
    return out.scatter_reduce(0, _i(x, [0, 0, 1, 1]), 2 * x, reduce="amax", include_self=False).sum()


def p_index_reduce_amax(x):
    import torch

    out = torch.zeros(2, dtype=x.dtype, device=x.device)
    return out.index_reduce(0, _i(x, [0, 0, 1, 1]), 2 * x, "amax", include_self=False).sum()


def p_normalize_clamp(x):
    import torch.nn.functional as F

    return F.normalize(x, dim=0).clamp(max=0.5).sum()


def p_norm_clamp(x):
    import torch

    return torch.linalg.vector_norm(x).clamp(min=2.0)


_A = [[1.0, 1.0, 0.0], [0.0, 1.0, 1.0], [1.0, 0.0, 1.0]]  # invertible: the scores move freely


def p_sort_scores(x):
    import torch

    return (torch.sort(_k(x, _A) @ x).values * _k(x, [1.0, 2.0, 3.0])).sum()


def p_topk_scores(x):
    import torch

    return (torch.topk(_k(x, _A) @ x, 2).values * _k(x, [1.0, 2.0])).sum()


def p_median_scores(x):
    return (_k(x, _A) @ x).median()


def p_quantile_scores(x):
    import torch

    return torch.quantile(2 * x, 0.75)


def p_maximum_branches(x):
    import torch

    return torch.maximum(x[0] + x[1], 3 * x[0])


def p_hardtanh_layer(x):
    import torch.nn.functional as F

    return F.hardtanh(_k(x, [0.5, 1.0]) @ x)


def p_leaky_relu_layer(x):
    import torch.nn.functional as F

    return F.leaky_relu(x[0] - x[1], 0.25)


def p_abs_sum(x):
    return x.sum().abs()


def p_square_amax(x):
    return (x * x).amax()


def p_square_amin(x):
    return (x * x).amin()


def p_square_max_all(x):
    import torch

    return torch.max(x * x)


def p_square_amax_dim(x):
    return (x * x).reshape(1, 3).amax(dim=1).sum()


def p_square_scatter_amax(x):
    import torch

    out = torch.zeros(2, dtype=x.dtype, device=x.device)
    return out.scatter_reduce(0, _i(x, [0, 0, 1]), x * x, reduce="amax", include_self=False).sum()


def p_square_index_reduce_amax(x):
    import torch

    out = torch.zeros(2, dtype=x.dtype, device=x.device)
    return out.index_reduce(0, _i(x, [0, 0, 1]), x * x, "amax", include_self=False).sum()


# ----------------------------------------------------------------------------------------------------------
# the JAX twins: the same function of the same flat input, from jax.numpy / jax.lax (each table entry's ``jax``)
# ----------------------------------------------------------------------------------------------------------
def _jk(x, rows):
    """A constant of a JAX twin in ``x``'s dtype."""
    import jax.numpy as jnp

    return jnp.asarray(rows, dtype=x.dtype)


def _jscatter_amax(x, index, y):
    """``zeros(n).scatter_reduce(0, index, y, "amax", include_self=False)`` in JAX: ``.at[].max`` on -inf (every
    slot receives an entry, so the initial value never wins)."""
    import jax.numpy as jnp

    return jnp.full(max(index) + 1, -jnp.inf, dtype=x.dtype).at[jnp.asarray(index)].max(y)


def _jmaxpool(y, window):
    """max_pool with stride 1 over the trailing ``len(window)`` axes: ``lax.reduce_window`` with ``lax.max`` and
    the Python scalar -inf as flax's max_pool writes it (a jnp array as the initial value is a tracer under jit,
    reduce_window then falls back to its generic primitive, which has no transpose: jit(grad) is refused)."""
    import jax.numpy as jnp
    from jax import lax

    dims = (1,) * (y.ndim - len(window)) + tuple(window)
    return lax.reduce_window(y, -jnp.inf, lax.max, dims, (1,) * y.ndim, "VALID")


def _jconv(x, w, b=None):
    """torch's conv1d/conv2d (a cross-correlation, no padding, stride 1) in JAX, on NC... arrays."""
    from jax import lax

    y = lax.conv_general_dilated(x, w, (1,) * (x.ndim - 2), "VALID")
    return y if b is None else y + b.reshape((1, -1) + (1,) * (x.ndim - 2))


def _jscores(x):
    q, k = x[:2], x[2:].reshape(2, 2)
    return k @ q


def j_matmul_amax(x):
    return (x.reshape(2, 2) @ _jk(x, [1.0, 1.0])).max()


def j_matmul_max_dim(x):
    return (x.reshape(2, 2) @ _jk(x, [[1.0, 1.0], [1.0, -1.0]])).max(axis=0).sum()


def j_bmm_amin(x):
    import jax.numpy as jnp

    return jnp.matmul(x.reshape(1, 2, 2), _jk(x, [[[1.0], [-1.0]]])).min(axis=1).sum()


def j_conv1d_relu_maxpool(x):
    import jax

    y = _jconv(x.reshape(1, 1, 4), _jk(x, [[[1.0, -1.0]]]))
    return _jmaxpool(jax.nn.relu(y), (2,)).sum()


def j_conv2d_relu_maxpool(x):
    import jax

    y = _jconv(x.reshape(1, 1, 3, 3), _jk(x, [[[[1.0, 1.0], [1.0, 1.0]]]]), _jk(x, [-3.0]))
    return _jmaxpool(jax.nn.relu(y), (2, 2)).sum()  # kernel 2 on a 2x2 map: one window, as torch's stride 2


def j_attention_softmax_amax(x):
    import jax

    return jax.nn.softmax(_jscores(x), axis=-1).max()


def j_attention_softmax_max_dim(x):
    import jax

    return jax.nn.softmax(_jscores(x), axis=-1).max(axis=-1)


def j_residual_relu(x):
    import jax

    return jax.nn.relu(x + _jk(x, [[1.0, -1.0], [0.0, -2.0]]) @ x).sum()


def j_multi_margin_logits(x):
    import jax.numpy as jnp

    z = _jk(x, [[1.0, 1.0], [1.0, 0.0], [0.0, -1.0], [-1.0, 0.0]]) @ x
    return jnp.maximum(0, 1 - z[0] + z[1:]).sum() / 4  # torch's formula: sum_{i != y} max(0, 1 - z_y + z_i) / C


def j_margin_ranking_scores(x):
    import jax.numpy as jnp

    s1, s2 = x[0] + x[1], x[1]
    return jnp.maximum(0, -(s1 - s2) + 1)  # torch's formula: max(0, -y (x1 - x2) + margin), y = 1, margin 1


def j_cumsum_cummax(x):
    import jax.numpy as jnp
    from jax import lax

    return lax.cummax(jnp.cumsum(x), axis=0).sum()


def j_cumsum_cummin(x):
    import jax.numpy as jnp
    from jax import lax

    return lax.cummin(jnp.cumsum(x), axis=0).sum()


def j_scatter_amax(x):
    return _jscatter_amax(x, [0, 0, 1, 1], 2 * x).sum()


def j_normalize_clamp(x):
    import jax.numpy as jnp

    y = x / jnp.maximum(jnp.linalg.norm(x), 1e-12)  # torch's F.normalize: x / max(||x||_2, eps)
    return jnp.clip(y, max=0.5).sum()


def j_norm_clamp(x):
    import jax.numpy as jnp

    return jnp.clip(jnp.linalg.norm(x), min=2.0)


def j_sort_scores(x):
    import jax.numpy as jnp

    return (jnp.sort(_jk(x, _A) @ x) * _jk(x, [1.0, 2.0, 3.0])).sum()


def j_topk_scores(x):
    from jax import lax

    return (lax.top_k(_jk(x, _A) @ x, 2)[0] * _jk(x, [1.0, 2.0])).sum()


def j_median_scores(x):
    import jax.numpy as jnp

    return jnp.median(_jk(x, _A) @ x)  # 3 values: the middle one, as torch.median's


def j_quantile_scores(x):
    import jax.numpy as jnp

    return jnp.quantile(2 * x, 0.75)  # method "linear", torch.quantile's default


def j_maximum_branches(x):
    import jax.numpy as jnp

    return jnp.maximum(x[0] + x[1], 3 * x[0])


def j_hardtanh_layer(x):
    import jax

    return jax.nn.hard_tanh(_jk(x, [0.5, 1.0]) @ x)


def j_leaky_relu_layer(x):
    import jax

    return jax.nn.leaky_relu(x[0] - x[1], 0.25)


def j_abs_sum(x):
    import jax.numpy as jnp

    return jnp.abs(x.sum())


def j_square_amax(x):
    return (x * x).max()


def j_square_amin(x):
    return (x * x).min()


def j_square_max_all(x):
    import jax.numpy as jnp

    return jnp.max(x * x)


def j_square_amax_dim(x):
    return (x * x).reshape(1, 3).max(axis=1).sum()


def j_square_scatter_amax(x):
    return _jscatter_amax(x, [0, 0, 1], x * x).sum()


#: what a JAX twin is made of where JAX has no op of the torch program's (shown with the JAX cells)
_NO_MAX_DIM = "JAX has no max(dim) returning indices: jnp.max(axis) (lax.reduce_max)"
_NO_INDEX_REDUCE = "JAX has no index_reduce: .at[].max, the twin of scatter_reduce(amax) too"
_NO_MARGIN = "JAX has no {}: the twin writes torch's documented formula with jnp.maximum"


def _pc(label, direction, gradient) -> Piece:
    return Piece(label, tuple(Fraction(d) for d in direction), tuple(Fraction(g) for g in gradient))


def _normalize_pieces() -> tuple:
    """F.normalize(x) at x = (1,1,1,1) is y = (1/2,...); sum(min(y_i, 1/2)): y moves on the sphere, to first
    order along sum-zero directions, so the coordinates below 1/2 form any nonempty proper subset S; the piece
    sum_{i in S} y_i has gradient sum_{i in S} (e_i - y_i y)/|x| = (1_S - |S|/4) / 2."""
    out = []
    for mask in range(1, 15):
        s = [(mask >> i) & 1 for i in range(4)]
        k = sum(s)
        out.append(_pc("S=" + "".join(map(str, s)), [-(4 - k) if b else k for b in s],
                       [Fraction(b, 2) - Fraction(k, 8) for b in s]))
    return tuple(out)


_Q = Fraction(1, 4)
#: a = 1 + 2^-6 is exact in every dtype and so is 2a, but a^2 = 1 + 2^-5 + 2^-12 needs 13 significant bits: a
#: 16-bit dtype rounds the tied VALUE when it is stored, while the tie itself (x0 = x1) stays exact
_A2 = 1 + Fraction(1, 64)
_SQUARE = "y = x * x with x0 = x1 = 1 + 2^-6: y0 = y1 tie exactly, but their value is not representable in float16 " \
          "or bfloat16 (a recomputed fp32 y differs from the stored 16-bit one)"
#: the programs: each piece's gradient derived by hand (the derivation in ``where``); tests/test_programs.py
#: re-derives each from one-sided float64 gradients and checks that no piece is missing
PROGRAMS: tuple[Program, ...] = (
    Program("matmul_amax", p_matmul_amax, (1, 2, 2, 1),
            (_pc("row0", (1, 0, 0, 0), (1, 1, 0, 0)), _pc("row1", (0, 0, 1, 0), (0, 0, 1, 1))),
            "s = W @ (1,1) = (3,3): amax ties s0 = W00+W01 and s1 = W10+W11",
            jax=j_matmul_amax),
    Program("matmul_max_dim", p_matmul_max_dim, (1, 2, 2, 1),
            (_pc("row0", (1, 0, 0, 0), (1, 1, 1, -1)), _pc("row1", (0, 0, 1, 0), (0, 0, 2, 0))),
            "s = W @ [[1,1],[1,-1]] = [[3,-1],[3,1]]: max(dim=0) ties column 0; column 1 picks W10-W11",
            jax=j_matmul_max_dim, jax_note=_NO_MAX_DIM),
    Program("bmm_amin", p_bmm_amin, (2, 1, 3, 2),
            (_pc("row0", (-1, 0, 0, 0), (1, -1, 0, 0)), _pc("row1", (0, 0, -1, 0), (0, 0, 1, -1))),
            "s = bmm(W, (1,-1)) = (1,1): amin(dim=1) ties W00-W01 and W10-W11",
            jax=j_bmm_amin),
    Program("conv1d_relu_maxpool1d", p_conv1d_relu_maxpool, (2, 2, 3, 1),
            (_pc("relu_off", (-1, 0, 0, 0), (0, 0, 1, -1)), _pc("relu_on", (1, 0, 0, 0), (1, -1, 1, -1))),
            "y = conv1d(x, (1,-1)) = (0,-1,2); relu(y0) sits on its kink and ties relu(y1) = 0 in max_pool1d's "
            "first window: locally f = relu(x0-x1) + (x2-x3)",
            jax=j_conv1d_relu_maxpool),
    Program("conv2d_relu_maxpool2d", p_conv2d_relu_maxpool, (1, 1, 0, 1, 0, 1, 0, 1, 1),
            (_pc("zero", (0, 0, 0, 0, -1, 0, 0, 0, 0), (0,) * 9),
             _pc("o00", (1, 0, 0, 0, 0, 0, 0, 0, 0), (1, 1, 0, 1, 1, 0, 0, 0, 0)),
             _pc("o11", (0, 0, 0, 0, 0, 0, 0, 0, 1), (0, 0, 0, 0, 1, 1, 0, 1, 1))),
            "o = conv2d(x, ones 2x2) - 3 = [[0,-1],[-1,0]]: relu(o00) and relu(o11) sit on their kinks and tie "
            "the two zeros in max_pool2d's one window: locally f = max(0, o00, o11)",
            jax=j_conv2d_relu_maxpool),
    Program("attention_softmax_amax", p_attention_softmax_amax, (1, 1, 1, 0, 0, 1),
            (_pc("p0", (0, 0, 1, 0, 0, 0), (_Q, -_Q, _Q, _Q, -_Q, -_Q)),
             _pc("p1", (0, 0, 0, 0, 1, 0), (-_Q, _Q, -_Q, -_Q, _Q, _Q))),
            "x = (q, k0, k1); scores s = (<q,k0>, <q,k1>) = (1,1), p = softmax(s) = (1/2,1/2): amax ties p0, p1; "
            "grad p0 = p0 p1 (grad s0 - grad s1) = (1/4)(1,-1,1,1,-1,-1)",
            jax=j_attention_softmax_amax),
    Program("attention_softmax_max_dim", p_attention_softmax_max_dim, (1, 1, 1, 0, 0, 1),
            (_pc("p0", (0, 0, 1, 0, 0, 0), (_Q, -_Q, _Q, _Q, -_Q, -_Q)),
             _pc("p1", (0, 0, 0, 0, 1, 0), (-_Q, _Q, -_Q, -_Q, _Q, _Q))),
            "as attention_softmax_amax, through max(dim=-1) (which returns an index)",
            jax=j_attention_softmax_max_dim, jax_note=_NO_MAX_DIM),
    Program("residual_relu", p_residual_relu, (1, 2),
            (_pc("off", (-1, 0), (0, 0)), _pc("on", (1, 0), (2, -1))),
            "y = x + W x = (0,-2): relu(y0) on its kink, y0 = 2x0 - x1",
            jax=j_residual_relu),
    Program("multi_margin_logits", p_multi_margin_logits, (1, 1),
            (_pc("inactive", (0, 1), (0, 0)), _pc("active", (0, -1), (0, Fraction(-1, 4)))),
            "logits z = W x = (2,1,-1,-1), target 0: the margin term max(0, 1 - z0 + z1) = max(0, 1 - x1) sits "
            "on its kink (divided by 4 classes)",
            jax=j_multi_margin_logits, jax_note=_NO_MARGIN.format("multi_margin_loss")),
    Program("margin_ranking_scores", p_margin_ranking_scores, (1, 2),
            (_pc("inactive", (1, 0), (0, 0)), _pc("active", (-1, 0), (-1, 0))),
            "scores s1 = x0+x1, s2 = x1, y = 1, margin 1: max(0, 1 - (s1 - s2)) = max(0, 1 - x0) on its kink",
            jax=j_margin_ranking_scores, jax_note=_NO_MARGIN.format("margin_ranking_loss")),
    Program("cumsum_cummax", p_cumsum_cummax, (1, 0, 1, -1),
            (_pc("c0", (0, -1, 0, 0), (4, 2, 2, 0)), _pc("c1", (0, 1, 0, 0), (4, 3, 2, 0))),
            "c = cumsum(x) = (1,1,2,1): cummax's second output ties c0 and c1; f = c0 + max(c0,c1) + 2 c2",
            jax=j_cumsum_cummax),
    Program("cumsum_cummin", p_cumsum_cummin, (1, 0, -1, 1),
            (_pc("c0", (0, 1, 0, 0), (4, 2, 2, 0)), _pc("c1", (0, -1, 0, 0), (4, 3, 2, 0))),
            "c = cumsum(x) = (1,1,0,1): cummin's second output ties c0 and c1; f = c0 + min(c0,c1) + 2 c2",
            jax=j_cumsum_cummin),
    Program("scatter_amax", p_scatter_amax, (1, 1, 0, 2),
            (_pc("y0", (1, 0, 0, 0), (2, 0, 0, 2)), _pc("y1", (0, 1, 0, 0), (0, 2, 0, 2))),
            "y = 2x scattered by index (0,0,1,1) with amax: slot 0 ties y0 = y1 = 2",
            jax=j_scatter_amax),
    Program("index_reduce_amax", p_index_reduce_amax, (1, 1, 0, 2),
            (_pc("y0", (1, 0, 0, 0), (2, 0, 0, 2)), _pc("y1", (0, 1, 0, 0), (0, 2, 0, 2))),
            "as scatter_amax through index_reduce(amax)",
            jax=j_scatter_amax, jax_note=_NO_INDEX_REDUCE),
    Program("normalize_clamp", p_normalize_clamp, (1, 1, 1, 1), _normalize_pieces(),
            "y = normalize(x) = (1/2,1/2,1/2,1/2) with clamp(max=1/2): all four on their kinks; 14 pieces",
            jax=j_normalize_clamp, jax_note="JAX has no normalize: x / max(||x||, 1e-12), torch's formula"),
    Program("norm_clamp", p_norm_clamp, (1, 1, 1, 1),
            (_pc("norm", (1, 1, 1, 1), (Fraction(1, 2),) * 4), _pc("const", (-1, -1, -1, -1), (0,) * 4)),
            "||x|| = 2 with clamp(min=2): on the kink; grad ||x|| = x/||x|| = (1/2,...)",
            jax=j_norm_clamp),
    Program("sort_scores", p_sort_scores, (1, 1, 0),
            (_pc("s1<s2", (1, 0, 0), (5, 4, 3)), _pc("s2<s1", (0, 1, 0), (4, 5, 3))),
            "s = A x = (2,1,1) sorted, weighted (1,2,3): f = min(s1,s2) + 2 max(s1,s2) + 3 s0",
            jax=j_sort_scores),
    Program("topk_scores", p_topk_scores, (1, 1, 0),
            (_pc("s1", (0, 1, 0), (1, 3, 2)), _pc("s2", (1, 0, 0), (3, 1, 2))),
            "s = A x = (2,1,1), topk(2) weighted (1,2): f = s0 + 2 max(s1,s2)",
            jax=j_topk_scores),
    Program("median_scores", p_median_scores, (0, 1, 1),
            (_pc("s0", (0, 1, 0), (1, 1, 0)), _pc("s2", (0, 0, 1), (1, 0, 1))),
            "s = A x = (1,2,1): the lower median is max(s0, s2) (the two smallest tie)",
            jax=j_median_scores),
    Program("quantile_scores", p_quantile_scores, (0, Fraction(1, 2), 1, 1),
            (_pc("s2<s3", (0, 0, 0, 1), (0, 0, Fraction(3, 2), Fraction(1, 2))),
             _pc("s3<s2", (0, 0, 1, 0), (0, 0, Fraction(1, 2), Fraction(3, 2)))),
            "s = 2x = (0,1,2,2), quantile 0.75 = (3/4) s_(2) + (1/4) s_(3) with s_(2), s_(3) tied",
            jax=j_quantile_scores),
    Program("maximum_branches", p_maximum_branches, (1, 2),
            (_pc("a", (0, 1), (1, 1)), _pc("b", (1, 0), (3, 0))),
            "maximum(a, b) of two computed branches a = x0+x1 = 3, b = 3 x0 = 3",
            jax=j_maximum_branches),
    Program("hardtanh_layer", p_hardtanh_layer, (1, Fraction(1, 2)),
            (_pc("inside", (-1, 0), (Fraction(1, 2), 1)), _pc("clipped", (1, 0), (0, 0))),
            "y = (1/2, 1) . x = 1: hardtanh on its upper kink",
            jax=j_hardtanh_layer),
    Program("leaky_relu_layer", p_leaky_relu_layer, (1, 1),
            (_pc("right", (1, 0), (1, -1)), _pc("left", (-1, 0), (_Q, -_Q))),
            "y = x0 - x1 = 0: leaky_relu (slope 1/4) on its kink",
            jax=j_leaky_relu_layer),
    Program("square_amax", p_square_amax, (_A2, _A2, Fraction(1, 2)),
            (_pc("y0", (1, 0, 0), (2 * _A2, 0, 0)), _pc("y1", (0, 1, 0), (0, 2 * _A2, 0))), _SQUARE + "; amax",
            jax=j_square_amax),
    Program("square_amin", p_square_amin, (_A2, _A2, 2),
            (_pc("y0", (-1, 0, 0), (2 * _A2, 0, 0)), _pc("y1", (0, -1, 0), (0, 2 * _A2, 0))), _SQUARE + "; amin",
            jax=j_square_amin),
    Program("square_max_all", p_square_max_all, (_A2, _A2, Fraction(1, 2)),
            (_pc("y0", (1, 0, 0), (2 * _A2, 0, 0)), _pc("y1", (0, 1, 0), (0, 2 * _A2, 0))),
            _SQUARE + "; torch.max (the full reduction)",
            jax=j_square_max_all),
    Program("square_amax_dim", p_square_amax_dim, (_A2, _A2, Fraction(1, 2)),
            (_pc("y0", (1, 0, 0), (2 * _A2, 0, 0)), _pc("y1", (0, 1, 0), (0, 2 * _A2, 0))),
            _SQUARE + "; amax(dim=1)",
            jax=j_square_amax_dim),
    Program("square_scatter_amax", p_square_scatter_amax, (_A2, _A2, Fraction(1, 2)),
            (_pc("y0", (1, 0, 0), (2 * _A2, 0, 1)), _pc("y1", (0, 1, 0), (0, 2 * _A2, 1))),
            _SQUARE + "; scatter_reduce(amax) by index (0,0,1): f = max(y0, y1) + y2",
            jax=j_square_scatter_amax),
    Program("square_index_reduce_amax", p_square_index_reduce_amax, (_A2, _A2, Fraction(1, 2)),
            (_pc("y0", (1, 0, 0), (2 * _A2, 0, 1)), _pc("y1", (0, 1, 0), (0, 2 * _A2, 1))),
            _SQUARE + "; index_reduce(amax) by index (0,0,1)",
            jax=j_square_scatter_amax, jax_note=_NO_INDEX_REDUCE),
    Program("abs_sum", p_abs_sum, (1, -1, 2, -2),
            (_pc("plus", (1, 0, 0, 0), (1, 1, 1, 1)), _pc("minus", (-1, 0, 0, 0), (-1, -1, -1, -1))),
            "|sum(x)| with sum(x) = 0",
            jax=j_abs_sum),
)


#: programs given as :class:`Program` records (not in the table) in this process, by name
_GIVEN: dict[str, Program] = {}


def get(name: str) -> Program:
    for p in PROGRAMS:
        if p.name == name:
            return p
    if name in _GIVEN:
        return _GIVEN[name]
    raise BadArgumentError(f"unknown program {name!r}: choose from {', '.join(p.name for p in PROGRAMS)}, or "
                           "pass a Program record.")


def select(names: Sequence | None) -> list[Program]:
    """The table's programs named in ``names`` (all when None); a :class:`Program` record given instead of a name
    is used as it is (your own program: its pieces derived by you)."""
    if not names:
        return list(PROGRAMS)
    out = []
    for n in names:
        if isinstance(n, Program):
            if any(p.name == n.name for p in PROGRAMS) or _GIVEN.get(n.name, n) is not n:
                raise BadArgumentError(f"program name {n.name!r} is taken: give your program another name.")
            _GIVEN[n.name] = n
            out.append(n)
        else:
            out.append(get(n))
    return out


def _fn_path(fn) -> str | None:
    """``module:qualname`` of a function a child process can import, else None (a lambda, a local function, one
    defined in ``__main__``)."""
    mod, qual = getattr(fn, "__module__", None), getattr(fn, "__qualname__", "")
    if not mod or mod == "__main__" or "<" in qual:
        return None
    return f"{mod}:{qual}"


def _program_spec(p: Program) -> str | dict:
    """How a child process finds ``p``: its name (the table's), or its record with the function's import path."""
    if any(q is p for q in PROGRAMS):
        return p.name
    return {"name": p.name, "fn": _fn_path(p.fn), "inputs": [str(Fraction(v)) for v in p.inputs],
            "where": p.where, "pieces": [[q.label, [str(d) for d in q.direction], [str(g) for g in q.gradient]]
                                         for q in p.pieces]}


def _program_from_spec(spec) -> Program:
    if isinstance(spec, str):
        return get(spec)
    import importlib

    mod, _, qual = spec["fn"].partition(":")
    fn = importlib.import_module(mod)
    for part in qual.split("."):
        fn = getattr(fn, part)
    return Program(spec["name"], fn, tuple(Fraction(v) for v in spec["inputs"]),
                   tuple(_pc(lb, d, g) for lb, d, g in spec["pieces"]), spec["where"])


# ----------------------------------------------------------------------------------------------------------
# judging a gradient
# ----------------------------------------------------------------------------------------------------------
def judge_gradient(program: Program, vec: Sequence[Fraction]) -> tuple[str, str]:
    """(piece, in_clarke) for an exact gradient: ``piece`` is the label of the Bouligand gradient it equals,
    ``hull`` when it is in the Clarke set but no piece, ``outside`` otherwise; ``in_clarke`` "yes"/"no". Exact:
    the pieces are dyadic and representable in every dtype measured, so no rounding enters the test."""
    vec = [Fraction(v) for v in vec]
    for p in program.pieces:
        if list(p.gradient) == vec:
            return p.label, "yes"
    if program.clarke(vec):
        return "hull", "yes"
    return "outside", "no"


# ----------------------------------------------------------------------------------------------------------
# evaluating one cell
# ----------------------------------------------------------------------------------------------------------
@dataclass
class Cell:
    program: str
    dtype: str
    device: str
    mode: str
    gradient: list  # the returned gradient (floats; exact values of the dtype)
    piece: str  # the piece it equals, "hull", "outside", "error", "crashed", "not_run"
    in_clarke: str  # "yes", "no", "n/a"
    error: str | None = None
    extra: dict = field(default_factory=dict)


def _point(program: Program, dtype, device):
    from nsverify import registry

    return registry.exact_tensor(program.inputs, dtype, device)


def _gradient(program: Program, x, mode: str, compiled=None):
    import torch

    f = program.fn
    if mode in ("eager", "deterministic") or mode in COMPILED:
        g = compiled if compiled is not None else f
        xr = x.clone().requires_grad_(True)
        if mode == "deterministic":
            before = torch.are_deterministic_algorithms_enabled()
            torch.use_deterministic_algorithms(True)
            try:
                return torch.autograd.grad(g(xr), xr)[0]
            finally:
                torch.use_deterministic_algorithms(before)
        return torch.autograd.grad(g(xr), xr)[0]
    if mode == "func":
        return torch.func.grad(f)(x)
    if mode == "jvp":
        rows = []
        for i in range(x.numel()):
            e = torch.zeros_like(x)
            e[i] = 1
            rows.append(torch.func.jvp(f, (x,), (e,))[1])
        return torch.stack(rows)
    raise BadArgumentError(f"unknown program mode {mode!r}: choose from {', '.join(MODES)}.")


def evaluate(program: Program, dtype, device, mode: str, compiled=None) -> Cell:
    """One cell in this process (``compiled``: the program's compiled function, for a compiled mode)."""
    from nsverify.conventions.matrix import error_text
    from nsverify.devices import dtype_name, parse_device, parse_dtype

    dt, dev = parse_dtype(dtype), parse_device(device)
    try:
        x = _point(program, dt, dev)
        g = _gradient(program, x, mode, compiled)
        vals = g.detach().double().cpu().flatten().tolist()
    except NsverifyError:
        raise
    except Exception as exc:  # a mode torch refuses for this program (e.g. no forward-mode formula): recorded
        return Cell(program.name, dtype_name(dt), str(dev), mode, [], "error", "n/a", error=error_text(exc))
    return judged_cell(program, dtype_name(dt), str(dev), mode, vals)


def judged_cell(program: Program, dtype: str, device: str, mode: str, vals: Sequence[float],
                extra: dict | None = None) -> Cell:
    """The cell of a returned gradient (``vals``: its float64 values, exact for the dtype), judged by
    :func:`judge_gradient`; a NaN/inf gradient is ``nonfinite``, outside every Clarke set (torch's cells and
    JAX's, :mod:`nsverify.conventions.programs_jax`)."""
    if not all(math.isfinite(v) for v in vals):
        return Cell(program.name, dtype, device, mode, [str(v) for v in vals], "nonfinite", "no",
                    extra=dict(extra or {}))
    vec = [Fraction(v) for v in vals]
    piece, inside = judge_gradient(program, vec)
    return Cell(program.name, dtype, device, mode, [float(v) for v in vec], piece, inside, extra=dict(extra or {}))


def evaluate_compiled(programs: Sequence[Program], dtype, device, mode: str) -> list[Cell]:
    """The compiled cells of ``programs`` in this process: each program compiled on its own (its own region)."""
    import torch

    from nsverify.conventions.inductor import capability_cache_dir
    from nsverify.conventions.matrix import error_text
    from nsverify.devices import dtype_name, parse_dtype

    backend, cmode = COMPILED[mode]
    capability_cache_dir()
    torch._dynamo.reset()
    out = []
    for p in programs:
        try:
            fc = torch.compile(p.fn, backend=backend, mode=cmode, fullgraph=False, dynamic=False)
        except Exception as exc:  # pragma: no cover - torch.compile is lazy; errors surface at the call
            out.append(Cell(p.name, dtype_name(parse_dtype(dtype)), str(device), mode, [], "error", "n/a",
                            error=error_text(exc)))
            continue
        out.append(evaluate(p, dtype, device, mode, compiled=fc))
    return out


#: the JAX side of the table (:mod:`nsverify.conventions.programs_jax`), set when that module is imported: it builds
#: on this one, so this one never imports it; the callers that ask for the JAX modes import it first (the CLI with
#: JAX modes, the report's programs section, the tests)
JAX_BACKEND = None


def jax_backend():
    """The JAX side, or a clear error naming what to import."""
    if JAX_BACKEND is None:
        raise BadArgumentError("the JAX program modes need nsverify.conventions.programs_jax: import it first "
                               "(`nsverify conventions --programs --framework jax` and the report do)")
    return JAX_BACKEND


def evaluate_batch(programs: Sequence[Program], dtype, device, mode: str) -> list[Cell]:
    if mode in JAX_MODES:
        return jax_backend().evaluate_batch(programs, dtype, mode)
    if mode in COMPILED:
        return evaluate_compiled(programs, dtype, device, mode)
    return [evaluate(p, dtype, device, mode) for p in programs]


# ----------------------------------------------------------------------------------------------------------
# isolation: compiled cells in child processes
# ----------------------------------------------------------------------------------------------------------
def _child(request: dict) -> dict:
    sys.path.extend(p for p in request.get("sys_path", []) if p not in sys.path)  # the parent's: its modules
    try:
        programs = [_program_from_spec(n) for n in request["programs"]]
    except (ImportError, AttributeError) as exc:
        raise NsverifyError(f"the child process cannot import a program's function ({exc}): define it at the top "
                            "level of an importable module, or evaluate in this process (isolate=False).") from None
    cells = evaluate_batch(programs, request["dtype"], request["device"], request["mode"])
    return {"cells": [asdict(c) for c in cells]}


def child_main(argv: Sequence[str]) -> int:
    """``python -m nsverify.conventions.programs REQUEST OUT``: evaluate a batch, write its cells to OUT."""
    from nsverify.conventions.isolation import serve_child

    return serve_child(argv, _child)


def evaluate_isolated(programs: Sequence[Program], dtype: str, device: str, mode: str, *, timeout: float,
                      repro_dir=None) -> list[Cell]:
    """The cells of ``programs`` evaluated in a child process; a child that dies is split in halves down to the
    program that crashes it (a ``"crashed"`` cell with its reproduction script)."""
    from nsverify.conventions.isolation import run_child

    local = [p for p in programs if not any(q is p for q in PROGRAMS) and _fn_path(p.fn) is None]
    if local:  # a child cannot import these: evaluated here, said so
        cells = evaluate_batch(local, dtype, device, mode)
        for c in cells:
            c.extra["in_process"] = "its function cannot be imported by a child process (a lambda, a local " \
                                    "function or one in __main__): evaluated without crash isolation"
        rest = [p for p in programs if p not in local]
        done = {c.program: c for c in cells}
        if rest:
            done.update({c.program: c for c in evaluate_isolated(rest, dtype, device, mode, timeout=timeout,
                                                                 repro_dir=repro_dir)})
        return [done[p.name] for p in programs]
    request = {"programs": [_program_spec(p) for p in programs], "dtype": dtype, "device": device, "mode": mode,
               "sys_path": [p for p in sys.path if p]}
    data, why = run_child(request, timeout, module="nsverify.conventions.programs")
    if data is not None:
        return [Cell(**c) for c in data["cells"]]
    if len(programs) == 1 or why.startswith("timed out"):
        out = []
        for p in programs:
            cell = Cell(p.name, dtype, device, mode, [], "crashed", "n/a", error=why)
            cell.extra["repro"] = str(write_script(p, dtype, device, [mode], repro_dir, head=f"crashed: {why}"))
            out.append(cell)
        return out
    half = len(programs) // 2
    return (evaluate_isolated(programs[:half], dtype, device, mode, timeout=timeout, repro_dir=repro_dir)
            + evaluate_isolated(programs[half:], dtype, device, mode, timeout=timeout, repro_dir=repro_dir))


def plan(names: Sequence[str] | None, dtypes: Sequence, devices: Sequence, modes: Sequence[str]) -> tuple:
    """The checked inputs of a run, every option validated before any work."""
    from nsverify.devices import dtype_name, parse_device, parse_dtype

    for what, given in (("programs", names), ("dtypes", dtypes), ("devices", devices), ("modes", modes)):
        if given is not None and not list(given):
            raise BadArgumentError(f"{what} is empty, so nothing would be evaluated: name at least one.")
    bad = [m for m in modes if m not in ALL_MODES]
    if bad:
        raise BadArgumentError(f"unknown program mode(s) {bad}: choose from {', '.join(ALL_MODES)}.")
    dts, devs = [dtype_name(parse_dtype(d)) for d in dtypes], [str(parse_device(d)) for d in devices]
    if any(m in JAX_MODES for m in modes):  # checked before any work: jax installed, CPU among the devices
        jax_backend().import_jax()
        if "cpu" not in devs:
            raise BadArgumentError(f"the JAX program modes run on the CPU only: add cpu to the devices (got "
                                   f"{', '.join(devs)}).")
    return select(names), dts, devs, list(modes)


def run_programs(names: Sequence[str] | None = None, dtypes: Sequence = DEFAULT_DTYPES,
                 devices: Sequence = ("cpu",), modes: Sequence[str] = DEFAULT_MODES, *, isolate: bool = True,
                 timeout: float = 3600.0, repro_dir=None, progress: Callable | None = None) -> list[Cell]:
    """Every cell of the programs: the eager/func/jvp/deterministic cells in this process, the compiled ones in
    child processes (``isolate``) or here. Rows ordered by device, dtype, mode, program."""
    programs, dts, devs, modes = plan(names, dtypes, devices, modes)
    out: list[Cell] = []
    for dev in devs:
        for dt in dts:
            for mode in modes:
                if mode in JAX_MODES and dev != "cpu":  # JAX's cells: CPU only (checked in plan)
                    continue
                if mode in COMPILED and isolate:
                    cells = evaluate_isolated(programs, dt, dev, mode, timeout=timeout, repro_dir=repro_dir)
                else:
                    cells = evaluate_batch(programs, dt, dev, mode)
                out += cells
                if progress:
                    progress(f"{len(cells)} {mode} cells ({dt}, {dev})")
    return out


# ----------------------------------------------------------------------------------------------------------
# findings
# ----------------------------------------------------------------------------------------------------------
def _installed_release() -> str:
    import torch

    return torch.__version__.split("+")[0]


def _cause(cells: dict) -> str | None:
    """The stage a compiled disagreement comes from, with the dtype/mode cells it explains: AOTAutograd's
    decomposition when aot_eager already differs from eager, Inductor's codegen when aot_eager agrees with eager
    and Inductor (or max-autotune) does not."""
    def ok(c):
        return c is not None and c.piece not in ("error", "crashed", "not_run")

    by_stage: dict = {}
    for dt in sorted({k[0] for k in cells}):
        eager, aot = cells.get((dt, "eager")), cells.get((dt, "aot_eager"))
        if not ok(eager) or not ok(aot):
            continue
        if aot.gradient != eager.gradient:
            by_stage.setdefault("AOTAutograd's decomposition (aot_eager already differs from eager)", []).append(
                f"{dt}/aot_eager")
            continue
        for m in ("inductor", "max-autotune"):
            c = cells.get((dt, m))
            if ok(c) and c.gradient != eager.gradient:
                by_stage.setdefault("Inductor's codegen (aot_eager agrees with eager)", []).append(f"{dt}/{m}")
    return "; ".join(f"{stage} in {', '.join(where)}" for stage, where in by_stage.items()) or None


def program_findings(rows: Sequence, first_release: str | None = None, script_dir=None) -> list[dict]:
    """The findings of a programs run (``rows``: :class:`Cell` records or their dicts), in the shape of the
    conventions findings: per program and device where the cells disagree (different gradients across modes or
    dtypes) or some gradient is outside the Clarke set, one dict with an OpInfo-like ``sample`` (op/program,
    input, args, kwargs, expected gradient: the Clarke set's pieces), the cells grouped by gradient, the cause
    (:func:`_cause`), the reproduction script (its text, and its path when ``script_dir`` is given) and the first
    release (``first_release``: default the installed release, the only one measured by this run)."""
    cells = [r if isinstance(r, Cell) else Cell(**{k: v for k, v in r.items() if k in Cell.__dataclass_fields__})
             for r in rows]
    jax_cells = [c for c in cells if c.mode in JAX_MODES]  # JAX's findings: its own rule (programs_jax.findings)
    cells = [c for c in cells if c.mode not in JAX_MODES]
    by: dict = {}
    for c in cells:
        by.setdefault((c.program, c.device), []).append(c)
    out = []
    for (name, dev), cs in by.items():
        measured = [c for c in cs if c.piece not in ("error", "crashed", "not_run")]
        groups = _groups(measured)
        outside = [c for c in measured if c.in_clarke == "no"]
        crashed = [c for c in cs if c.piece == "crashed"]
        if len(groups) <= 1 and not outside and not crashed:
            continue
        p = get(name)
        kind = "outside_clarke" if outside else ("crashed" if crashed and len(groups) <= 1 else "modes_disagree")
        modes = sorted({c.mode for c in cs}, key=lambda m: MODES.index(m) if m in MODES else len(MODES))
        dtype = (outside or crashed or measured)[0].dtype
        script = program_script(p, dtype, dev, modes)
        finding = {
            "kind": kind, "program": name, "device": dev,
            "sample": finding_sample(p), "cells": cell_groups(measured),
            "crashed": [f"{c.dtype}/{c.mode}: {c.error}" for c in crashed],
            "cause": _cause({(c.dtype, c.mode): c for c in cs}),
            "first_release": first_release or _installed_release(),
            "repro_script": script,
        }
        if script_dir is not None:
            finding["repro"] = str(write_script(p, dtype, dev, modes, script_dir, text=script))
        out.append(finding)
    if jax_cells:
        out += jax_backend().findings(jax_cells, script_dir=script_dir)
    return out


def finding_sample(p: Program) -> dict:
    """A finding's OpInfo-like sample: the program, its input, the expected gradient (the pieces whose hull is the
    Clarke set) and where the tie sits."""
    return {"op": p.name, "program": p.name, "input": [str(Fraction(v)) for v in p.inputs], "args": [],
            "kwargs": {}, "expected_gradient": {"clarke_hull_of": {q.label: [str(g) for g in q.gradient]
                                                                   for q in p.pieces}},
            "where": p.where}


def _groups(measured: Sequence[Cell]) -> dict:
    groups: dict = {}
    for c in measured:
        groups.setdefault((tuple(c.gradient), c.piece), []).append(f"{c.dtype}/{c.mode}")
    return groups


def cell_groups(measured: Sequence[Cell]) -> list[dict]:
    """A finding's cells grouped by the gradient they returned, the largest group first."""
    return [{"gradient": list(g), "piece": piece, "in": sorted(ws)}
            for (g, piece), ws in sorted(_groups(measured).items(), key=lambda kv: -len(kv[1]))]


def finding_line(f: dict) -> str:
    """One line of a finding, for the report's first screen and the command's summary."""
    groups = "; ".join(f"{c['piece']} in {', '.join(c['in'][:4])}{' ...' if len(c['in']) > 4 else ''}"
                       for c in f["cells"])
    tail = f" -- {f['cause']}" if f.get("cause") else ""
    return (f"{f['program']} ({f['device']}, {f.get('framework', 'torch')} {f['first_release']}): {f['kind']}: "
            f"{groups}{tail}")


# ----------------------------------------------------------------------------------------------------------
# scripts
# ----------------------------------------------------------------------------------------------------------
def program_script(program: Program, dtype: str, device: str, modes: Sequence[str], head: str = "") -> str:
    """A standalone script (torch only) evaluating ``program`` at its point in ``modes`` and printing each
    gradient and whether it lies in the Clarke set (the hull of the hand-derived pieces it lists)."""
    helpers = [_k, _i]
    src = inspect.getsource(program.fn)
    if "torch_max(" in src:
        helpers.append(torch_max)
    if "_scores(" in src:
        helpers.append(_scores)
    consts = "_A = " + repr(_A) + "\n" if "_A" in src else ""
    body = "\n\n".join(textwrap.dedent(inspect.getsource(h)) for h in helpers + [program.fn])
    pieces = {q.label: [str(g) for g in q.gradient] for q in program.pieces}
    lines = [
        f'"""nsverify program {program.name}: {program.where}.',
        f"Clarke set at the point: the convex hull of {pieces}.",
        (head + "\n") if head else "",
        'Measured with nsverify.conventions.programs."""',
        "import math", "import torch", "from fractions import Fraction", "", consts + body, "",
        f"x = torch.tensor({[float(v) for v in program.inputs]!r}, dtype=torch.float64).to(torch.{dtype})"
        f".to({device!r})",
        f"f = {program.fn.__name__}", "", "def grad_of(g, deterministic=False):",
        "    xr = x.clone().requires_grad_(True)",
        "    torch.use_deterministic_algorithms(deterministic)",
        "    try:", "        return torch.autograd.grad(g(xr), xr)[0]",
        "    finally:", "        torch.use_deterministic_algorithms(False)", "",
        "def jvp_rows():", "    rows = []", "    for i in range(x.numel()):", "        e = torch.zeros_like(x)",
        "        e[i] = 1", "        rows.append(torch.func.jvp(f, (x,), (e,))[1])", "    return torch.stack(rows)",
        "", "MODES = {", '    "eager": lambda: grad_of(f),', '    "func": lambda: torch.func.grad(f)(x),',
        '    "jvp": jvp_rows,', '    "deterministic": lambda: grad_of(f, True),',
        '    "aot_eager": lambda: grad_of(torch.compile(f, backend="aot_eager")),',
        '    "inductor": lambda: grad_of(torch.compile(f)),',
        '    "max-autotune": lambda: grad_of(torch.compile(f, mode="max-autotune-no-cudagraphs")),', "}",
        f"PIECES = {pieces!r}", "", "for mode in " + repr(list(modes)) + ":",
        "    try:", "        g = MODES[mode]()", "    except Exception as exc:",
        '        print(f"{mode:14s} error: {type(exc).__name__}: {exc}".splitlines()[0])', "        continue",
        "    vals = g.double().cpu().flatten().tolist()",
        "    if not all(math.isfinite(v) for v in vals):",
        '        print(f"{mode:14s} {vals}  NOT FINITE: outside the Clarke set")',
        "        continue",
        "    vals = [Fraction(v) for v in vals]",
        "    piece = [k for k, p in PIECES.items() if [Fraction(v) for v in p] == vals]",
        '    print(f"{mode:14s} {[str(v) for v in vals]}  piece: {piece[0] if piece else \'none (hull or outside)\'}")',
        "",
    ]
    return "\n".join(lines)


def write_script(program: Program, dtype: str, device: str, modes: Sequence[str], out=None, *, head: str = "",
                 text: str | None = None, stem: str | None = None) -> Path:
    """Write :func:`program_script` (or ``text``) to ``out`` (a new temporary directory when None) as ``stem``
    (default ``program_<name>_<dtype>_<device>``); returns its path."""
    from nsverify.conventions.scripts import safe_name
    from nsverify.files import atomic_write_text

    d = Path(out) if out is not None else Path(tempfile.mkdtemp(prefix="nsverify-programs-"))
    d.mkdir(parents=True, exist_ok=True)
    path = d / safe_name(stem or f"program_{program.name}_{dtype}_{device}")
    atomic_write_text(path, text if text is not None else program_script(program, dtype, device, modes, head))
    return path


# ----------------------------------------------------------------------------------------------------------
# output, baselines
# ----------------------------------------------------------------------------------------------------------
def to_json(cells: Sequence[Cell], meta: dict | None = None) -> dict:
    import torch

    data = {"schema": SCHEMA, "torch": torch.__version__, "meta": meta or {},
            "programs": [asdict(c) for c in cells], "findings": program_findings(cells)}
    jax = next((c.extra["jax"] for c in cells if c.mode in JAX_MODES and c.extra.get("jax")), None)
    if jax:
        data["jax"] = jax
    return data


def compare_with_baseline(cells: Sequence[Cell], baseline: dict | None) -> list[str]:
    """Per cell, how it compares with a stored run (a baseline release's JSON): ``"not in the baseline"`` when the
    baseline holds no programs (runs recorded before issue 37) or not this cell, else ``"same"`` or
    ``"changed: <old piece> -> <new piece>"``."""
    old = {}
    for r in (baseline or {}).get("programs", []) or []:
        old[(r["program"], r["dtype"], r["device"], r["mode"])] = r
    out = []
    for c in cells:
        r = old.get((c.program, c.dtype, c.device, c.mode))
        if r is None:
            out.append("not in the baseline")
        elif r.get("gradient") == c.gradient:
            out.append("same")
        else:
            out.append(f"changed: {r.get('piece')} -> {c.piece}")
    return out


def format_table(cells: Sequence[Cell]) -> str:
    """One row per program and device: the piece each dtype/mode returned (``!`` outside the Clarke set)."""
    cols = list(dict.fromkeys((c.dtype, c.mode) for c in cells))
    rows: dict = {}
    for c in cells:
        rows.setdefault((c.program, c.device), {})[(c.dtype, c.mode)] = c
    lines = []
    for (name, dev), cs in rows.items():
        by: dict = {}
        for k in cols:
            c = cs.get(k)
            if c is None:
                continue
            txt = c.piece + ("!" if c.in_clarke == "no" else "")
            by.setdefault(txt, []).append(f"{k[0].replace('float', 'f')}/{k[1]}")
        summary = next(iter(by)) if len(by) == 1 else "; ".join(f"{t} in {', '.join(ks)}" for t, ks in by.items())
        lines.append(f"{name:26s} {dev:5s} {summary}")
    return "\n".join(lines)


def _baseline_data(spec: str | None) -> tuple[str, dict | None]:
    """(its name, the raw JSON) of the stored run ``--baseline`` names, or ("", None)."""
    from nsverify.conventions.baselines import installed_release, resolve_baseline

    run = resolve_baseline(spec, installed_release())
    if run is None or not run.source or not Path(run.source).is_file():
        return "", None
    return f"torch {run.release}", json.loads(Path(run.source).read_text(encoding="utf-8"))


def cli_programs(args) -> int:
    """``nsverify conventions --programs`` / ``--grad2``: the program cells (and the second-order cells), the
    findings with their scripts (next to ``--json FILE``), the comparison with the stored baseline."""
    from nsverify.conventions import grad2
    from nsverify.conventions.matrix import provenance

    data: dict = {"schema": SCHEMA, "torch": _installed_release(), "programs": [], "findings": []}
    cells: list[Cell] = []
    script_dir = None
    modes = jax_cli_modes(args)
    if args.json and args.json != "-":
        from nsverify.files import make_output_dir

        make_output_dir(Path(args.json).parent, "--json")  # its missing directories, before any work
        script_dir = Path(args.json).with_name(Path(args.json).stem + "-programs")
    if args.programs:
        cells = run_programs(args.program, args.dtype, args.device, modes,
                             isolate=not args.in_process, repro_dir=script_dir,
                             progress=lambda msg: print(f"[programs] {msg}", file=sys.stderr, flush=True))
        data = to_json(cells)
        data["findings"] = program_findings(cells, script_dir=script_dir)
    if args.grad2:
        g2 = grad2.run_grad2(None, grad2.MODES, args.dtype)
        data.update(grad2.to_json(g2))
    data["meta"] = {"provenance": provenance(args.device, getattr(args, "command_line", None)
                                             or ["nsverify", *sys.argv[1:]])}
    if args.json:
        text = json.dumps(data, indent=1)
        if args.json == "-":
            print(text)
            return 0
        from nsverify.files import atomic_write_text

        atomic_write_text(Path(args.json), text + "\n")
    if cells:
        print(format_table(cells))
        torch_cells = [c for c in cells if c.mode not in JAX_MODES]  # the stored runs are torch's
        name, base = _baseline_data(args.baseline) if torch_cells else ("", None)
        if name:
            verdicts = compare_with_baseline(torch_cells, base)
            counts = {v: verdicts.count(v) for v in dict.fromkeys(verdicts)}
            print(f"\nCompared with the stored run of {name}: "
                  + ", ".join(f"{n} cells {v}" for v, n in counts.items()))
        outside = sum(c.in_clarke == "no" for c in cells)
        print(f"\n{len(cells)} program cells, {outside} outside the Clarke set, "
              f"{sum(c.piece == 'error' for c in cells)} refused by the framework, "
              f"{sum(c.piece == 'crashed' for c in cells)} crashed; {len(data['findings'])} findings:")
        for f in data["findings"]:
            print("  " + finding_line(f) + (f" [{f['repro']}]" if f.get("repro") else ""))
        if any(c.mode in JAX_MODES for c in cells):
            print(jax_backend().summary(cells))
    if args.grad2:
        print("\nSecond order: the Bouligand piece each mode's Hessian is ('none': the Hessian of no "
              "piece; '!': outside even their hull)")
        print(grad2.format_table(g2))
        for a in grad2.agreement(g2):
            if a["agree"] is False:
                print(f"  reverse-over-reverse and forward-over-reverse disagree on {a['case']}")
    return 0


def jax_cli_modes(args) -> list[str]:
    """The program modes of a CLI run: ``--program-modes``; with ``--framework jax`` the JAX modes (the default
    list becomes jax_grad,jax_jit; torch modes named with it are an error naming the fix)."""
    modes = list(args.program_modes)
    if getattr(args, "framework", "torch") != "jax":
        return modes
    if getattr(args, "grad2", False):
        raise BadArgumentError("--grad2 measures PyTorch's second order: drop --framework jax (or --grad2).")
    if modes == list(DEFAULT_MODES):
        return list(JAX_MODES)
    torch_modes = [m for m in modes if m not in JAX_MODES]
    if torch_modes:
        raise BadArgumentError(f"--framework jax runs the JAX program modes ({', '.join(JAX_MODES)}), not "
                               f"{', '.join(torch_modes)}: drop --framework jax to mix frameworks in "
                               "--program-modes, or name only JAX modes.")
    return modes


def release_changes(prev_path, path, exact: bool = True) -> list[dict]:
    """The program cells whose gradient differs between two stored release runs (``<release>.json`` of a release
    sweep); a cell the earlier run lacks (a run recorded before issue 37, or a refused cell) is not a change. Each
    change: program, dtype, device, mode, the pieces before and after, the release it shows in (``since``) and
    ``exact`` (no unmeasured release between)."""
    def load(pth):
        try:
            data = json.loads(Path(pth).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}, ""
        rel = str((data.get("meta") or {}).get("release") or str(data.get("torch", "")).split("+")[0])
        cells = {(r["program"], r["dtype"], r["device"], r["mode"]): r for r in data.get("programs") or []}
        for r in data.get("grad2") or []:  # second order: the Hessian, named by its Bouligand piece
            cells[("grad2:" + r["case"], r["dtype"], "cpu", r["mode"])] = {
                "gradient": r.get("hessian"), "piece": "error" if r.get("error") else (r.get("bouligand") or "none"),
                "in_clarke": r.get("in_hull")}
        return cells, rel

    (old, prev_rel), (new, rel) = load(prev_path), load(path)
    out = []
    for key, r in new.items():
        o = old.get(key)
        if o is None or "error" in (o.get("piece"), r.get("piece")) or o.get("gradient") == r.get("gradient"):
            continue
        out.append({"program": key[0], "dtype": key[1], "device": key[2], "mode": key[3], "before": o.get("piece"),
                    "after": r.get("piece"), "prev": prev_rel, "since": rel, "exact": exact,
                    "in_clarke": f"{o.get('in_clarke')} -> {r.get('in_clarke')}"})
    return out


def change_text(ch: dict) -> str:
    return (f"program {ch['program']} ({ch['dtype']}, {ch['mode']}): {ch['before']} -> {ch['after']} "
            f"{'since' if ch['exact'] else 'between ' + str(ch['prev']) + ' and'} {ch['since']}")


def run_in_env(python: str, src, out_json, log, timeout: float = 3600) -> dict:
    """The program and second-order cells measured in a release environment (``python`` its interpreter, ``src``
    the snapshot of nsverify): ``{"programs": [...], "grad2": [...]}``, or ``{"programs_error": why}`` when that
    release cannot run them (the op matrix of the release is kept either way)."""
    from nsverify.conventions.envs import ReleaseEnvError, run_logged

    env = dict(os.environ, PYTHONPATH=str(src))
    try:
        run_logged(in_env_command(str(python), str(out_json)), log, env=env, timeout=timeout,
                   what="running the programs")
        data = json.loads(Path(out_json).read_text(encoding="utf-8"))
    except (ReleaseEnvError, OSError, ValueError) as exc:
        return {"programs_error": str(exc)[:300]}
    finally:
        Path(out_json).unlink(missing_ok=True)
    return {k: data[k] for k in ("programs", "grad2", "grad2_agreement") if k in data}


def in_env_command(python: str, out_json: str, modes: Sequence[str] = ("eager", "func", "jvp", "inductor"),
                   dtypes: Sequence[str] = ("float32",)) -> list[str]:
    """The command a release environment runs for its program cells (:mod:`nsverify.conventions.releases`)."""
    return [python, "-m", "nsverify.conventions.programs", "--run", "--modes", ",".join(modes), "--dtype",
            ",".join(dtypes), "--json", out_json]


def run_main(argv: Sequence[str]) -> int:
    """``python -m nsverify.conventions.programs --run [--modes M] [--dtype D] --json FILE`` (the release
    environments' entry: it needs nothing of the newer CLI)."""
    import argparse

    from nsverify.conventions.matrix import provenance

    p = argparse.ArgumentParser(prog="python -m nsverify.conventions.programs --run")
    p.add_argument("--modes", default=",".join(DEFAULT_MODES))
    p.add_argument("--dtype", default=",".join(DEFAULT_DTYPES))
    p.add_argument("--json", required=True)
    args = p.parse_args(list(argv))
    from nsverify.conventions import grad2

    cells = run_programs(None, args.dtype.split(","), ("cpu",), args.modes.split(","))
    data = to_json(cells, {"provenance": provenance(("cpu",))})
    data.update(grad2.to_json(grad2.run_grad2()))
    Path(args.json).write_text(json.dumps(data, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--run"]:
        sys.exit(run_main(sys.argv[2:]))
    os.environ.setdefault("PYTHONHASHSEED", "0")
    sys.exit(child_main(sys.argv[1:]))
