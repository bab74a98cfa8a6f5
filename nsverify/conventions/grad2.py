"""Second order at kinks and ties (issue 37): the ``grad2`` mode of the conventions matrix.

At a kink or a tie PyTorch's second-order AD differentiates its first-order rule: double backward
(``create_graph=True``) differentiates the backward formula, forward-over-reverse (``jvp`` of ``grad``,
``torch.func.hessian``) pushes a tangent through it. This module holds one data table of scalar functions whose
nonsmooth op sits on a kink or tie at a dyadic point (:data:`CASES`, one :class:`Case2` each), each with its pieces
derived by hand: the selection functions active on an open set next to the point, with their exact gradient and
Hessian there. It evaluates PyTorch's Hessian in every mode of :data:`MODES` and decides exactly
(:func:`judge_hessian`):

- ``bouligand``: is the returned matrix a *Bouligand Hessian*, the Hessian at the point of a piece active on an
  open set next to it (docs/conventions.md, "Second order at kinks", gives the definition)? If so, which piece;
- ``in_hull``: is it in the convex hull of those Hessians (a matrix outside even the hull is no limit of Hessians
  nor an average of limits);
- ``consistent``: is there one piece whose gradient is AD's first-order gradient AND whose Hessian is the returned
  one (AD's gradient and Hessian describe the same piece);
- and, per case, whether reverse-over-reverse and forward-over-reverse agree exactly (:func:`agreement`).

Everything is measured in float64 by default, where every value here is exact."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from fractions import Fraction
from typing import Callable, Sequence

from nsverify.errors import BadArgumentError, NsverifyError
from nsverify.rational import in_hull

#: reverse-over-reverse: ``double_backward`` (autograd.grad with create_graph, row by row), ``hvp`` (torch.autograd
#: .functional.hvp, the double-backward trick), ``jacrev_grad`` (torch.func.jacrev of torch.func.grad);
#: forward-over-reverse: ``fwd_over_rev`` (torch.func.jvp of torch.func.grad, column by column),
#: ``func_hessian`` (torch.func.hessian = jacfwd(jacrev))
MODES = ("double_backward", "hvp", "jacrev_grad", "fwd_over_rev", "func_hessian")
REVERSE_OVER_REVERSE = ("double_backward", "hvp", "jacrev_grad")
FORWARD_OVER_REVERSE = ("fwd_over_rev", "func_hessian")


@dataclass(frozen=True)
class Piece2:
    """A piece active on an open set next to the point: ``x + t d`` (t > 0 small) lies in it; its exact gradient
    and Hessian at the point."""

    label: str
    direction: tuple
    gradient: tuple
    hessian: tuple  # rows


@dataclass(frozen=True)
class Case2:
    name: str
    op: str  # the nonsmooth op at the point
    fn: Callable  # flat tensor -> scalar
    inputs: tuple
    pieces: tuple
    where: str


def _f(v):
    return Fraction(v)


def _p(label, d, g, h) -> Piece2:
    return Piece2(label, tuple(map(_f, d)), tuple(map(_f, g)), tuple(tuple(map(_f, r)) for r in h))


def g_relu(x):
    import torch

    return (x * torch.relu(x)).sum()


def g_abs(x):
    return (x * x.abs()).sum()


def g_clamp(x):
    return (x * x.clamp(-1.0, 1.0)).sum()


def g_hardtanh(x):
    import torch.nn.functional as F

    return (x * F.hardtanh(x)).sum()


def g_leaky_relu(x):
    import torch.nn.functional as F

    return (x * F.leaky_relu(x, 0.25)).sum()


def g_elu(x):
    import torch.nn.functional as F

    return F.elu(x).sum()


def g_smooth_l1(x):
    import torch.nn.functional as F

    return F.smooth_l1_loss(x, x.new_zeros(x.shape), beta=1.0)


def g_maximum(x):
    import torch

    return torch.maximum(x[0], x[1]) ** 2


def g_amax(x):
    return x.amax() ** 2


def g_max_dim(x):
    import torch

    return torch.max(x, dim=0).values ** 2


def g_max_pool1d(x):
    import torch.nn.functional as F

    return (F.max_pool1d(x.reshape(1, 1, -1), kernel_size=2) ** 2).sum()


def g_sort(x):
    import torch

    s = torch.sort(x).values
    return s[0] ** 2 + 2 * s[1] ** 2


def g_topk(x):
    import torch

    return (torch.topk(x, 1).values ** 2).sum()


def g_multi_margin_sq(x):
    import torch
    import torch.nn.functional as F

    return F.multi_margin_loss(x.reshape(1, 2), torch.zeros(1, dtype=torch.long, device=x.device), p=2)


def g_margin_ranking_sq(x):
    import torch.nn.functional as F

    return F.margin_ranking_loss(x[:1], x[1:], x.new_ones(1), margin=0.0) ** 2


_XW = ((2, 0), (0, 0))  # Hessian of x0^2
_YW = ((0, 0), (0, 2))  # Hessian of x1^2
#: the cases; each piece's gradient and Hessian derived by hand in ``where`` and re-derived from one-sided float64
#: second differences in tests/test_grad2.py
CASES: tuple[Case2, ...] = (
    Case2("relu", "relu", g_relu, (0,), (_p("left", [-1], [0], [[0]]), _p("right", [1], [0], [[2]])),
          "x relu(x) at 0: 0 (x<0), x^2 (x>0)"),
    Case2("abs", "abs", g_abs, (0,), (_p("left", [-1], [0], [[-2]]), _p("right", [1], [0], [[2]])),
          "x |x| at 0: -x^2 (x<0), x^2 (x>0)"),
    Case2("clamp", "clamp", g_clamp, (1,), (_p("inside", [-1], [2], [[2]]), _p("clipped", [1], [1], [[0]])),
          "x clamp(x,-1,1) at 1: x^2 (x<1), x (x>1)"),
    Case2("hardtanh", "hardtanh", g_hardtanh, (-1,),
          (_p("clipped", [-1], [-1], [[0]]), _p("inside", [1], [-2], [[2]])),
          "x hardtanh(x) at -1: -x (x<-1), x^2 (x>-1)"),
    Case2("leaky_relu", "leaky_relu", g_leaky_relu, (0,),
          (_p("left", [-1], [0], [[Fraction(1, 2)]]), _p("right", [1], [0], [[2]])),
          "x leaky_relu(x, 1/4) at 0: x^2/4 (x<0), x^2 (x>0)"),
    Case2("elu", "elu", g_elu, (0,), (_p("left", [-1], [1], [[1]]), _p("right", [1], [1], [[0]])),
          "elu(x) at 0: exp(x)-1 (x<0; gradient and Hessian 1 at 0), x (x>0)"),
    Case2("smooth_l1_loss", "smooth_l1_loss", g_smooth_l1, (1,),
          (_p("quadratic", [-1], [1], [[1]]), _p("linear", [1], [1], [[0]])),
          "smooth_l1(x, 0), beta 1, at 1: x^2/2 (|x|<1), |x| - 1/2 (x>1); C^1, the Hessian jumps"),
    Case2("maximum", "maximum", g_maximum, (1, 1), (_p("x0", [1, 0], [2, 0], _XW), _p("x1", [0, 1], [0, 2], _YW)),
          "maximum(x0, x1)^2 at (1,1): x0^2 or x1^2"),
    Case2("amax", "amax", g_amax, (1, 1), (_p("x0", [1, 0], [2, 0], _XW), _p("x1", [0, 1], [0, 2], _YW)),
          "amax(x)^2 at (1,1)"),
    Case2("max_dim", "max", g_max_dim, (1, 1), (_p("x0", [1, 0], [2, 0], _XW), _p("x1", [0, 1], [0, 2], _YW)),
          "max(x, dim=0).values^2 at (1,1)"),
    Case2("max_pool1d", "max_pool1d", g_max_pool1d, (1, 1),
          (_p("x0", [1, 0], [2, 0], _XW), _p("x1", [0, 1], [0, 2], _YW)), "max_pool1d(x, 2)^2 at (1,1)"),
    Case2("sort", "sort", g_sort, (1, 1),
          (_p("x0<x1", [0, 1], [2, 4], ((2, 0), (0, 4))), _p("x1<x0", [1, 0], [4, 2], ((4, 0), (0, 2)))),
          "s = sort(x) at (1,1), s0^2 + 2 s1^2: x0^2 + 2 x1^2 or x1^2 + 2 x0^2"),
    Case2("topk", "topk", g_topk, (1, 1, 0),
          (_p("x0", [1, 0, 0], [2, 0, 0], ((2, 0, 0), (0, 0, 0), (0, 0, 0))),
           _p("x1", [0, 1, 0], [0, 2, 0], ((0, 0, 0), (0, 2, 0), (0, 0, 0)))),
          "topk(x, 1)^2 at (1,1,0)"),
    Case2("multi_margin_loss", "multi_margin_loss", g_multi_margin_sq, (1, 0),
          (_p("inactive", [1, 0], [0, 0], ((0, 0), (0, 0))), _p("active", [-1, 0], [0, 0], ((1, -1), (-1, 1)))),
          "multi_margin_loss(x, 0, p=2) = max(0, 1 - x0 + x1)^2 / 2 at (1,0): C^1, the Hessian jumps"),
    Case2("margin_ranking_loss", "margin_ranking_loss", g_margin_ranking_sq, (1, 1),
          (_p("inactive", [1, 0], [0, 0], ((0, 0), (0, 0))), _p("active", [-1, 0], [0, 0], ((2, -2), (-2, 2)))),
          "margin_ranking_loss(x0, x1, 1, margin 0)^2 = max(0, x1 - x0)^2 at (1,1)"),
)


def get(name: str) -> Case2:
    for c in CASES:
        if c.name == name:
            return c
    raise BadArgumentError(f"unknown grad2 case {name!r}: choose from {', '.join(c.name for c in CASES)}.")


# ----------------------------------------------------------------------------------------------------------
# evaluating
# ----------------------------------------------------------------------------------------------------------
def _hessian(fn, x, mode: str):
    import torch

    n = x.numel()
    eye = torch.eye(n, dtype=x.dtype, device=x.device)
    if mode == "double_backward":
        xr = x.clone().requires_grad_(True)
        (g,) = torch.autograd.grad(fn(xr), xr, create_graph=True)
        rows = []
        for i in range(n):
            if not g.requires_grad:  # the backward formula does not depend on x: its derivative is zero
                rows.append(torch.zeros_like(x))
                continue
            (r,) = torch.autograd.grad(g[i], xr, retain_graph=True, allow_unused=True)
            rows.append(torch.zeros_like(x) if r is None else r)
        return torch.stack(rows)
    if mode == "hvp":
        return torch.stack([torch.autograd.functional.hvp(fn, x, eye[i])[1] for i in range(n)])
    if mode == "jacrev_grad":
        return torch.func.jacrev(torch.func.grad(fn))(x)
    if mode == "fwd_over_rev":
        cols = [torch.func.jvp(torch.func.grad(fn), (x,), (eye[i],))[1] for i in range(n)]
        return torch.stack(cols, dim=1)
    if mode == "func_hessian":
        return torch.func.hessian(fn)(x)
    raise BadArgumentError(f"unknown grad2 mode {mode!r}: choose from {', '.join(MODES)}.")


@dataclass
class Cell2:
    case: str
    op: str
    dtype: str
    mode: str
    hessian: list  # rows (floats, exact values of the dtype)
    gradient: list  # AD's first-order gradient (eager reverse)
    bouligand: str | None  # the piece whose Hessian it is, None when none
    in_hull: str  # "yes", "no", "n/a"
    consistent: str | None  # the piece whose gradient AND Hessian AD returned, None when none
    error: str | None = None
    extra: dict = field(default_factory=dict)


def judge_hessian(case: Case2, grad: Sequence[Fraction], hess: Sequence[Sequence[Fraction]]
                  ) -> tuple[str | None, str, str | None]:
    """(Bouligand piece or None, "yes"/"no" in the hull of the pieces' Hessians, consistent piece or None):
    exact comparisons of the returned values with the hand-derived pieces."""
    h = [[Fraction(v) for v in row] for row in hess]
    g = [Fraction(v) for v in grad]
    bou = next((p.label for p in case.pieces if [list(r) for r in p.hessian] == h), None)
    inside = in_hull([v for row in h for v in row], [[v for row in p.hessian for v in row] for p in case.pieces])
    cons = next((p.label for p in case.pieces if [list(r) for r in p.hessian] == h and list(p.gradient) == g),
                None)
    return bou, "yes" if inside else "no", cons


def evaluate(case: Case2, mode: str, dtype="float64", device="cpu") -> Cell2:
    import torch

    from nsverify import registry
    from nsverify.conventions.matrix import error_text
    from nsverify.devices import dtype_name, parse_device, parse_dtype

    dt, dev = parse_dtype(dtype), parse_device(device)
    x = registry.exact_tensor(case.inputs, dt, dev)
    xr = x.clone().requires_grad_(True)
    grad: list = []
    try:
        grad = [Fraction(v) for v in torch.autograd.grad(case.fn(xr), xr)[0].double().cpu().tolist()]
        h = _hessian(case.fn, x, mode).double().cpu()
    except NsverifyError:
        raise
    except Exception as exc:  # an order (or a dtype) torch does not implement here: recorded
        return Cell2(case.name, case.op, dtype_name(dt), mode, [], [float(v) for v in grad], None, "n/a", None,
                     error=error_text(exc))
    rows = h.reshape(x.numel(), x.numel()).tolist()
    import math

    if not all(math.isfinite(v) for r in rows for v in r):
        return Cell2(case.name, case.op, dtype_name(dt), mode, rows, [float(v) for v in grad], None, "no", None,
                     extra={"nonfinite": True})
    exact = [[Fraction(v) for v in r] for r in rows]
    bou, inside, cons = judge_hessian(case, grad, exact)
    return Cell2(case.name, case.op, dtype_name(dt), mode, rows, [float(v) for v in grad], bou, inside, cons)


def run_grad2(names: Sequence[str] | None = None, modes: Sequence[str] = MODES, dtypes: Sequence = ("float64",),
              device="cpu") -> list[Cell2]:
    bad = [m for m in modes if m not in MODES]
    if bad:
        raise BadArgumentError(f"unknown grad2 mode(s) {bad}: choose from {', '.join(MODES)}.")
    cases = list(CASES) if not names else [get(n) for n in names]
    return [evaluate(c, m, dt, device) for dt in dtypes for c in cases for m in modes]


def agreement(cells: Sequence[Cell2]) -> list[dict]:
    """Per case and dtype: do reverse-over-reverse and forward-over-reverse return the same matrix (exactly)?
    Cells that errored are listed, not compared."""
    by: dict = {}
    for c in cells:
        by.setdefault((c.case, c.dtype), []).append(c)
    out = []
    for (case, dt), cs in by.items():
        ok = {c.mode: c.hessian for c in cs if c.error is None}
        rr = {tuple(map(tuple, ok[m])) for m in REVERSE_OVER_REVERSE if m in ok}
        fr = {tuple(map(tuple, ok[m])) for m in FORWARD_OVER_REVERSE if m in ok}
        out.append({"case": case, "dtype": dt, "agree": (len(rr | fr) == 1) if rr and fr else None,
                    "reverse_over_reverse": [list(map(list, m)) for m in rr],
                    "forward_over_reverse": [list(map(list, m)) for m in fr],
                    "errors": {c.mode: c.error for c in cs if c.error}})
    return out


def to_json(cells: Sequence[Cell2]) -> dict:
    return {"grad2": [asdict(c) for c in cells], "grad2_agreement": agreement(cells)}


def format_table(cells: Sequence[Cell2]) -> str:
    """One row per case: the Bouligand piece (or ``none``) each mode returns, ``!`` outside the hull."""
    rows: dict = {}
    for c in cells:
        txt = "error" if c.error else (c.bouligand or "none") + ("" if c.in_hull != "no" else "!")
        rows.setdefault((c.case, c.dtype), {}).setdefault(txt, []).append(c.mode)
    lines = []
    for (case, dt), by in rows.items():
        summary = next(iter(by)) if len(by) == 1 else "; ".join(f"{t} in {', '.join(ms)}" for t, ms in by.items())
        lines.append(f"{case:20s} {dt:8s} {summary}")
    return "\n".join(lines)
