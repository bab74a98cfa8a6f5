"""The exact interpreter: run a PyTorch callable on :class:`ExactTensor` inputs.

Public helpers:

* :func:`exact_gradient` -- the program's AD evaluated in exact arithmetic at the rational point ``w``, with
  PyTorch's rules at kinks or user overrides (``conventions={"relu": 1, "max_pool2d": "minimal"}``);
* :func:`exact_module_gradient` -- the same for ``loss_fn(model(inputs), targets)``
  with respect to the model's
  parameters or its inputs;
* :func:`run` -- one evaluation in a given mode, returning value, gradient and the kink/tie sites met.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import torch

from nsverify.errors import NonFiniteError, NsverifyError, UnsupportedDtypeError
from nsverify.oracle import ops_kinks, ops_linear, ops_select, ops_smooth  # noqa: F401  (register the op implementations)
from nsverify.oracle.context import Ctx
from nsverify.oracle.numbers import Aff, grad, is_lin, val
from nsverify.oracle.tensor import ExactTensor

F = Fraction


@dataclass
class RunResult:
    value: object  # exact value of the output (Fraction or Ival)
    gradient: tuple  # exact first-order derivative (dense, length n)
    sites: list
    nonaffine: bool  # a kink site with a non-affine argument was met
    lin: bool  # the output itself is affine in w on this piece
    calls: int


def point_to_fractions(w: torch.Tensor) -> list[Fraction]:
    """The exact rationals a float tensor represents (NaN/inf rejected)."""
    if not isinstance(w, torch.Tensor):
        raise TypeError("w must be a torch.Tensor")
    if not w.is_floating_point():
        raise UnsupportedDtypeError(f"w has dtype {w.dtype}; give a floating tensor (e.g. w.double())")
    x = w.detach().cpu().double().reshape(-1)
    if not torch.isfinite(x).all():
        raise NonFiniteError("w contains NaN or inf: the exact oracle needs a finite point; check the values")
    return [F(v) for v in x.tolist()]


def exact_input(values: list, shape, dtype) -> ExactTensor:
    arr = np.empty(len(values), dtype=object)
    for i, v in enumerate(values):
        arr[i] = Aff(F(v), {i: F(1)})
    return ExactTensor(arr.reshape(tuple(shape)), dtype=dtype)


def run(fn, w, *, mode: str = "ad", conventions: dict | None = None, decide=None, values=None,
        float_shadow: bool = False) -> RunResult:
    """Evaluate ``fn(w)`` exactly once.  ``values`` overrides the point (exact rationals, flattened).

    ``float_shadow``: also run every op in ``w``'s dtype alongside, so that each kink site records whether the
    float computation saw the same tie (``Site.float_tie``) and ties that only rounding created are listed.
    """
    if values is None:
        values = point_to_fractions(w)
    n = len(values)
    ctx = Ctx(n=n, mode=mode, conventions=dict(conventions or {}), decide=decide, dtype=w.dtype,
              shadow=float_shadow)
    with ctx:
        x = exact_input(values, w.shape, w.dtype)
        if float_shadow:
            x.shadow = w.detach().clone()
        out = fn(x)
    y = _scalar_output(out)
    g = grad(y)
    dense = tuple(g.get(i, F(0)) for i in range(n))
    return RunResult(val(y), dense, ctx.sites, ctx.nonaffine, is_lin(y), ctx.call + 1)


def _scalar_output(out):
    if isinstance(out, ExactTensor):
        if out.arr.size != 1:
            raise NsverifyError(
                f"fn must return a scalar tensor, got shape {tuple(out.arr.shape)}; reduce it "
                "(e.g. .sum()) or pass a cotangent by writing (cotangent * fn(w)).sum()"
            )
        return out.arr.reshape(-1)[0]
    if isinstance(out, torch.Tensor):  # output does not depend on w at all
        if out.numel() != 1:
            raise NsverifyError(f"fn must return a scalar tensor, got shape {tuple(out.shape)}")
        return F(float(out.detach().reshape(-1)[0]))
    raise NsverifyError(f"fn must return a scalar torch tensor, got {type(out).__name__}")


def exact_gradient(fn, w: torch.Tensor, conventions: dict | None = None, *, return_value: bool = False):
    """The AD of ``fn`` at ``w`` in exact arithmetic with PyTorch's kink conventions (or ``conventions``).

    ``conventions`` maps a registry op name to its AD rule at kinks/ties, in the one rule vocabulary
    (:func:`nsverify.registry.parse_conventions`): elementwise ops ("relu", "abs", "hardtanh", "relu6",
    "leaky_relu", "hardsigmoid", "hardswish", "clamp", "threshold") take a kink rule -- "left", "right",
    "inside", "mid" / "mix=<lam>", a number or "value=<d>" (``{"relu": 1}``: ReLU'(0) = 1) -- or one per kink;
    selections ("max_pool2d", "amax", "max", "maximum", "max_dim", ...) take a tie rule -- "first"/"native",
    "last", "even"/"minimal", "hybrid=<beta>" or ``("hybrid", beta)``.  Returns a tuple of Fractions (Ival
    entries where smooth parts are irrational),
    or ``(gradient, value)`` with ``return_value=True``.
    """
    r = run(fn, w, mode="ad", conventions=conventions)
    return (r.gradient, r.value) if return_value else r.gradient


def module_function(model: torch.nn.Module, loss_fn, inputs, targets, wrt: str = "parameters"):
    """(fn, w) such that fn(w) = loss_fn(model(inputs), targets) with w the flattened parameters or inputs."""
    if wrt == "parameters":
        names = [n for n, p in model.named_parameters() if p.requires_grad]
        params = [p for n, p in model.named_parameters() if p.requires_grad]
        if not params:
            raise NsverifyError("the model has no trainable parameters; use wrt='inputs'")
        dtype = params[0].dtype
        shapes = [p.shape for p in params]
        sizes = [p.numel() for p in params]
        w = torch.cat([p.detach().reshape(-1).to(dtype) for p in params])
        buffers = dict(model.named_buffers())

        def fn(wv):
            chunks, off = {}, 0
            for n, s, k in zip(names, shapes, sizes):
                chunks[n] = wv[off : off + k].reshape(s)
                off += k
            out = torch.func.functional_call(model, {**chunks, **buffers}, (inputs,))
            return loss_fn(out, targets)

        return fn, w
    if wrt == "inputs":
        shape = inputs.shape

        def fn(wv):
            return loss_fn(model(wv.reshape(shape)), targets)

        return fn, inputs.detach().reshape(-1)
    raise NsverifyError(f"wrt must be 'parameters' or 'inputs', got {wrt!r}")


def exact_module_gradient(
    model,
    loss_fn,
    inputs,
    targets,
    wrt: str = "parameters",
    conventions: dict | None = None,
    *,
    return_value: bool = False,
):
    """Exact AD of ``loss_fn(model(inputs), targets)`` w.r.t. the flattened parameters (or inputs)."""
    fn, w = module_function(model, loss_fn, inputs, targets, wrt)
    return exact_gradient(fn, w, conventions, return_value=return_value)


def exact_forward(fn, *args):
    """Evaluate ``fn(*args)`` exactly (no derivative): returns nested Fractions (lists for tensors)."""
    ctx = Ctx(n=0, mode="ad", dtype=next((a.dtype for a in args if isinstance(a, torch.Tensor)), None))
    with ctx:
        ex = [ExactTensor(ops_linear.arr(_to_arr(a))) if isinstance(a, torch.Tensor) else a for a in args]
        out = fn(*ex)
    if isinstance(out, ExactTensor):
        return ops_linear.values(out.arr)
    return out


def _to_arr(t):
    from nsverify.oracle.tensor import to_exact_array

    return to_exact_array(t)
