"""The exact interpreter: :class:`Evaluation`, one program at one point, and the traces it runs.

An Evaluation owns what every question about ``fn`` at ``w`` shares:

* the **exact values** -- the rationals that w's floats represent, converted once;
* the **context** -- :meth:`Evaluation.context` builds the evaluation context of every trace, with the
  rules given once (``rules=``: the AD rules at kinks and ties, a :class:`nsverify.registry.Rules`);
* the **float shadow** -- with ``shadow=True`` the AD trace also runs every op in w's dtype, so that each kink
  site records whether the float computation saw the same tie.

Its traces run ``fn`` (each at most once, cached; :attr:`Evaluation.calls` counts them):

* :meth:`Evaluation.float_ad` -- what PyTorch's autograd returns in w's dtype;
* :meth:`Evaluation.forward` -- forward-mode exact AD (the registry's rules at kinks), with the kink/tie sites;
* :meth:`Evaluation.reverse` -- reverse-mode exact AD: PyTorch's backward ATen ops evaluated exactly (the
  backward ops of the records in :mod:`nsverify.oracle.ops`), custom ``torch.autograd.Function`` backward rules
  included;
* :meth:`Evaluation.exact_ad` -- the AD that :func:`~nsverify.oracle.check_gradient` tests (reverse mode, forward
  mode as the fallback);
* :meth:`Evaluation.pieces_trace` -- one trace in ``"pieces"`` mode, where the piece enumerator
  (:mod:`nsverify.oracle.pieces`) decides every branch point.  A program whose AD trace met no kink or tie site
  has a single piece around w, and the AD trace is that piece's trace: it is reused, fn does not run again;
* :meth:`Evaluation.jet_trace` -- one ray trace in ``"jet"`` mode: the outcome of every kink/tie site along
  w + t d for all small t > 0 (:mod:`nsverify.oracle.jets` certifies pieces with it).

Public helpers: :func:`exact_gradient` / :func:`exact_module_gradient` (forward mode), :func:`exact_backprop` /
:func:`exact_module_backprop` (reverse mode), :func:`exact_forward` (values only), :func:`run` (one trace).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import torch

from nsverify.errors import InexactError, NonFiniteError, NsverifyError, UnsupportedDtypeError, UnsupportedOpError
from nsverify.oracle import callenv, context
from nsverify.oracle.context import Ctx
from nsverify.oracle.numbers import JET_ORDER, Aff, Jet, grad, is_lin, val
from nsverify.oracle.ops.common import arr, plain_values
from nsverify.oracle.ops.singular import Marker, NormForm
from nsverify.oracle.prepass import OpSurvey, no_grad_note
from nsverify.oracle.tensor import ExactTensor, evaluates, rewrite_hint, to_exact_array
from nsverify.registry import parse_rules, renamed_rules_argument

F = Fraction


@dataclass
class RunResult:
    """One trace of the program: its exact output, first-order derivative and the kink/tie sites it met."""

    value: object  # exact value of the output (Fraction or Ival)
    gradient: tuple  # exact first-order derivative (dense, length n)
    sites: list
    nonaffine: bool  # a kink site with a non-affine argument was met
    lin: bool  # the output itself is affine in w on this piece
    aten_calls: int  # ATen ops the trace dispatched
    #: the output's exact first-order model when it is not differentiable at w (a norm at its zero, an undefined
    #: value: :mod:`nsverify.oracle.ops.singular`); None otherwise
    form: object = None


def point_to_fractions(w: torch.Tensor) -> list[Fraction]:
    """The exact rationals a float tensor represents (NaN/inf rejected)."""
    if not isinstance(w, torch.Tensor):
        raise TypeError("w must be a torch.Tensor")
    if not w.is_floating_point():
        raise UnsupportedDtypeError(f"w has dtype {w.dtype}; give a floating tensor (e.g. w.double())")
    x = w.detach().cpu().double().reshape(-1)
    if not torch.isfinite(x).all():
        raise NonFiniteError("w contains NaN or inf: the exact oracle needs a finite point; check the values")
    vals = x.tolist()
    out: list = []
    step = context.POLL_EVERY_PLAIN
    for start in range(0, len(vals), step):  # millions of parameters take seconds: poll between the chunks
        if start:
            context.poll_deadline()
        out += [F(v) for v in vals[start:start + step]]
    return out


def exact_input(values: list, shape, dtype) -> ExactTensor:
    """The input of a forward-mode trace: entry i is the affine form w_i (value, derivative e_i)."""
    arr = np.empty(len(values), dtype=object)
    one, step = F(1), 8 * context.POLL_EVERY
    for i, v in enumerate(values):
        if i and not i % step:  # between chunks only: a small w reaches fn's first op, which polls
            context.poll_deadline()
        arr[i] = Aff(F(v), {i: one})
    return ExactTensor(arr.reshape(tuple(shape)), dtype=dtype)


def _watched(fn, mode, after):
    def run(x):
        with mode:
            out = fn(x)
        after(out, x)
        return out

    return run


def float_autograd(fn, w: torch.Tensor, survey: bool = False):
    """What PyTorch's autograd returns for fn at w, in w's dtype (as Python floats).  ``survey=True``: also
    the :class:`~nsverify.oracle.prepass.OpSurvey` of the forward run, returned as ``(gradient, survey)``."""
    with callenv.user_environment():  # grad mode on even inside the caller's torch.no_grad()
        wf = w.detach().clone().requires_grad_(True)
        if not survey:
            return _float_grad(fn(wf), wf, w)
        with OpSurvey(wf, evaluates, rewrite_hint) as s:
            y = fn(wf)
        return _float_grad(y, wf, w), s


def _float_grad(y, wf, w) -> tuple:
    if not isinstance(y, torch.Tensor) or y.numel() != 1:
        raise NsverifyError("fn must return a scalar tensor")
    if not y.requires_grad:
        return tuple(0.0 for _ in range(w.numel()))
    (g,) = torch.autograd.grad(y.reshape(()), wf, allow_unused=True)
    if g is None:
        return tuple(0.0 for _ in range(w.numel()))
    return tuple(float(x) for x in g.detach().reshape(-1).tolist())


def _new_context(n: int, dtype, *, mode: str = "ad", rules=None, decide=None, shadow: bool = False) -> Ctx:
    """The one way an evaluation context is built (every trace gets a fresh one: its own site list)."""
    return Ctx(n=n, mode=mode, rules=rules if rules is not None else {}, decide=decide,
               dtype=dtype, shadow=shadow)


class Evaluation:
    """``fn`` at ``w``: the exact values, the context and the float shadow, shared by every trace.

    ``rules``: AD rules at kinks/ties for the exact AD (see :func:`exact_gradient`).  ``values``: exact
    rationals to evaluate at instead of w's floats (w then gives only the shape and dtype).  ``shadow``: every
    trace also runs in w's dtype, recording float ties and the indices PyTorch's selections return (only at
    w's own floats; the default there).
    """

    def __init__(self, fn, w: torch.Tensor, rules=None, *, values=None,
                 shadow: bool | None = None):
        if shadow is None:  # at w's own floats the float run is always there: selections read its indices
            shadow = values is None
        if values is not None and shadow:
            raise NsverifyError("the float shadow runs at w's own floats: give either values= or shadow=True")
        self.fn = fn
        self.values = point_to_fractions(w) if values is None else list(values)
        self.w = w
        self.n = len(self.values)
        self.rules = parse_rules(rules)  # validated once, before fn runs
        self.shadow = shadow
        self.calls = 0  # how many times fn has run (float and exact traces)
        self.record = callenv.CallRecord()  # every call's output, checked against the first (determinism)
        self._float_ad: tuple | None = None
        self.survey = None  # the ops of the float run (prepass.OpSurvey), once float_ad has run
        self._forward: RunResult | None = None
        self._reverse: tuple | None = None
        self.notes: list[str] = []  # what the user should know about how fn was judged (Verdict.stats["notes"])

    def ran(self, trace: str) -> bool:
        """Whether the cached trace ``"float_ad"``, ``"forward"`` or ``"reverse"`` has already run."""
        return {"float_ad": self._float_ad, "forward": self._forward, "reverse": self._reverse}[trace] is not None

    def context(self, mode: str = "ad", decide=None, *, shadow: bool = False, n: int | None = None) -> Ctx:
        """A fresh evaluation context for one trace of this program (n: coordinates carried; 0 in reverse)."""
        return _new_context(self.n if n is None else n, self.w.dtype, mode=mode, rules=self.rules,
                            decide=decide, shadow=shadow)

    def _call(self, x, mode: str | None = None, fn=None):
        """Run fn (or ``fn``, a wrapper of it) once (:func:`callenv.call`: the entry random state, grad mode on)
        and check that its output
        agrees with every earlier call at this point (``mode="ad"``: the exact value too, which traces that
        follow AD's own choices share)."""
        self.calls += 1
        out = callenv.call(self.fn if fn is None else fn, x)
        if isinstance(out, ExactTensor):
            sh = getattr(out, "shadow", None)
            if isinstance(sh, torch.Tensor):
                self.record.float_output(sh, self.calls)
            if mode == "ad" and out.arr.size == 1:
                self.record.exact_value(val(out.arr.reshape(-1)[0]), self.calls)
        elif isinstance(out, torch.Tensor):
            self.record.float_output(out, self.calls)
        return out

    # ------------------------------------------------------------------------------------------------- traces
    def trace(self, mode: str = "ad", decide=None, *, shadow: bool = False) -> RunResult:
        """Run ``fn`` once on the exact input in ``mode`` ("ad" or "pieces"; ``decide`` chooses at branch points)."""
        ctx = self.context(mode, decide, shadow=shadow)
        with ctx:
            x = exact_input(self.values, self.w.shape, self.w.dtype)
            if shadow:
                x.shadow = self.w.detach().clone()
            out = self._call(x, mode)
        y = _scalar_output(out)
        if isinstance(y, Marker):  # a singular value reached the output: no Lipschitz function here, or unknown
            raise y.exception()
        form = y if isinstance(y, NormForm) else None
        if form is not None:  # no derivative: the gradient is the AD's (a norm term taking 0), or none
            g, value = (y.ad_gradient() if y.ad_zero else {}), y.v
        else:
            g, value = grad(y), val(y)
        zero = F(0)
        dense = tuple(g.get(i, zero) for i in context.polled_range(self.n, 16 * context.POLL_EVERY))
        return RunResult(value, dense, ctx.sites, ctx.nonaffine, is_lin(y), ctx.call + 1, form)

    def float_ad(self) -> tuple:
        """PyTorch's autograd in w's dtype (floats); fn runs once, on a float copy of w."""
        if self._float_ad is None:
            self._float_ad, self.survey = float_autograd(self._call, self.w, survey=True)
        return self._float_ad

    def forward(self) -> RunResult:
        """Forward-mode exact AD: PyTorch's rules at kinks (or ``rules``), the sites met, the value."""
        if self._forward is None:
            self._forward = self.trace("ad", shadow=self.shadow)
        return self._forward

    def reverse(self, watch=None) -> tuple:
        """(gradient, value): PyTorch's own autograd run on ExactTensor, its backward formulas evaluated exactly.

        ``watch=(mode, after)``: a fresh run (not the cached one) with the TorchFunctionMode ``mode`` active
        around fn's own calls only, and ``after(output, input)`` called while the autograd graph is alive
        (:mod:`nsverify.oracle.park.optrace` reads the graph there)."""
        if self._reverse is None or watch is not None:
            a = np.empty(self.n, dtype=object)
            a[:] = self.values
            zero = (F(0),) * self.n
            with self.context("ad", n=0, shadow=self.shadow):
                x = ExactTensor(a.reshape(tuple(self.w.shape)), dtype=self.w.dtype, requires_grad=True)
                if self.shadow:  # selections read the indices PyTorch returns in w's dtype (ops.select)
                    x.shadow = self.w.detach().clone()
                out = self._call(x, "ad", fn=None if watch is None else _watched(self.fn, *watch))
                y = _scalar_output(out)
                if not (isinstance(out, torch.Tensor) and out.requires_grad):
                    g = zero
                else:
                    (gt,) = torch.autograd.grad(out.reshape(()), x, allow_unused=True)
                    g = zero if gt is None else tuple(gt.arr.reshape(-1).tolist())
            self._reverse = (g, val(y))
        return self._reverse

    def exact_ad(self, warn: bool = True) -> tuple[tuple, str]:
        """(gradient, where it came from): PyTorch's AD evaluated exactly.

        Reverse mode runs PyTorch's backward formulas, so custom ``torch.autograd.Function`` backward rules
        count too.  Forward mode (the registry's rules) is the fallback when a backward op has no exact
        implementation.  When the two differ -- a custom backward rule, or a registry entry that disagrees with
        PyTorch's formula -- the reverse mode is what PyTorch computes: it is used, and a warning names the
        difference.  With ``rules`` (the user's rules at kinks and ties), the forward mode is the AD: it
        applies them at every op, while PyTorch's backward formulas would ignore them. ``warn=False`` when the
        caller tests another vector (the warning would name the wrong one)."""
        forward = self.forward().gradient
        if self.rules:
            return forward, "forward (rules given)"
        try:
            g, _ = self.reverse()
        except (UnsupportedOpError, InexactError):
            return forward, "forward"
        except ZeroDivisionError:  # PyTorch's formula divides by an exact 0 and masks it (norm, std, cdist at 0)
            return forward, "forward (PyTorch's backward divides by an exact zero that it masks)"
        exact = all(isinstance(x, Fraction) for x in tuple(g) + tuple(forward))
        if exact and tuple(g) != tuple(forward):
            if not warn:
                return g, "backward (differs from the registry's forward-mode rules)"
            found = (f"PyTorch's backward evaluated exactly gives {_short(g)} but the forward mode gives "
                     f"{_short(forward)}")
            cause = no_grad_note(self.survey)
            if cause is not None:
                text = f"{cause} ({found}; the backward value, PyTorch's, is tested)"
            else:
                text = (f"{found}: the program has a custom autograd.Function backward (or a registry entry differs "
                        "from PyTorch's formula). The reverse-mode value, PyTorch's, is tested")
            self.notes.append(text)
            callenv.warn_user(text)
            return g, "backward (differs from the registry's forward-mode rules)"
        return g, "backward"

    def pieces_trace(self, decide) -> RunResult:
        """One trace in "pieces" mode: ``decide(site, options)`` chooses at every branch point.

        When the AD trace already ran and met no kink or tie site (float-only ties aside, which never branch),
        the pieces-mode trace would take the same path with no decision to make: the AD trace is returned as it
        (its float-only sites dropped, as a pieces trace runs no float shadow) and fn does not run."""
        fw = self._forward
        if fw is not None and all(s.extra.get("float_only") for s in fw.sites):
            return RunResult(fw.value, fw.gradient, [], False, fw.lin, fw.aten_calls)
        # the float run rides along only where AD read a tie choice from it (a "returned" index, ops.select):
        # then each branch site can tell which of its options is AD's own
        shadow = self.shadow and (fw is None or any("returned" in s.extra for s in fw.sites))
        return self.trace("pieces", decide, shadow=shadow)


    def jet_trace(self, direction: dict) -> list:
        """A ray trace (mode ``"jet"``): ``fn`` on the truncated Taylor series of w + t d in t (entry i:
        ``Jet((w_i, d_i, 0, ...))``, d sparse), every kink/tie site taking the outcome that holds for all small
        t > 0.  Returns the sites met, in order (``site.extra["jet"]``: (sign, order), or (winning entry, order) at a
        selection tie).  Raises :class:`~nsverify.oracle.numbers.JetDeclined` (or another error) where the ray
        cannot be followed."""
        zeros = (F(0),) * (JET_ORDER - 1)
        a = np.empty(self.n, dtype=object)
        for i, v in enumerate(self.values):
            a[i] = Jet((F(v), F(direction.get(i, 0))) + zeros)
        ctx = self.context("jet")
        with ctx:
            _scalar_output(self._call(ExactTensor(a.reshape(tuple(self.w.shape)), dtype=self.w.dtype)))
        return ctx.sites


def _short(v, k: int = 4) -> str:
    """A vector for a message: its first ``k`` entries."""
    v = tuple(map(str, v))
    return "(" + ", ".join(v[:k]) + (f", ... {len(v)} entries" if len(v) > k else "") + ")"


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


def run(fn, w, *, mode: str = "ad", rules=None, decide=None, values=None,
        float_shadow: bool = False) -> RunResult:
    """Evaluate ``fn(w)`` exactly once in ``mode`` (one :meth:`Evaluation.trace`).  ``values`` overrides the
    point (exact rationals, flattened); ``float_shadow`` runs every op in ``w``'s dtype alongside."""
    ev = Evaluation(fn, w, rules, values=values, shadow=float_shadow)
    return ev.trace(mode, decide, shadow=float_shadow)


def exact_gradient(fn, w: torch.Tensor, rules=None, *, return_value: bool = False, conventions=None):
    """The AD of ``fn`` at ``w`` in exact arithmetic with PyTorch's rules at kinks and ties (or ``rules``).

    ``rules`` maps a registry op name to its AD rule at kinks/ties, a :class:`nsverify.registry.Rules` or
    anything :func:`nsverify.registry.parse_rules` reads: elementwise ops (``registry.names("elementwise")``: "relu",
    "abs", "hardtanh", "relu6", ...; and "threshold") take a kink rule -- "left", "right",
    "inside", "mid" / "mix=<lam>", a number or "value=<d>" (``{"relu": 1}``: ReLU'(0) = 1) -- or one per kink;
    selections ("max_pool2d", "amax", "max", "maximum", "max_dim", ...) take a tie rule -- "first"/"native",
    "last", "even"/"minimal", "hybrid=<beta>" or ``("hybrid", beta)``.  Returns a tuple of Fractions (Ival
    entries where smooth parts are irrational),
    or ``(gradient, value)`` with ``return_value=True``.  ``conventions=``: the deprecated name of ``rules=``.
    """
    r = Evaluation(fn, w, renamed_rules_argument(rules, conventions, "exact_gradient")).forward()
    return (r.gradient, r.value) if return_value else r.gradient


def exact_backprop(fn, w: torch.Tensor, rules=None, *, return_value: bool = False, conventions=None):
    """PyTorch's AD of ``fn`` at ``w``, its backward formulas evaluated exactly (reverse mode; ``rules``: as in
    :func:`exact_gradient`)."""
    g, value = Evaluation(fn, w, renamed_rules_argument(rules, conventions, "exact_backprop")).reverse()
    return (g, value) if return_value else g


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
            # one split (not a slice per parameter): its backward is one concatenation, where slices would add
            # as many full-length zero-padded gradients as there are parameters
            chunks = {n: c.reshape(s) for n, s, c in zip(names, shapes, torch.split(wv, sizes))}
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
    rules=None,
    *,
    return_value: bool = False,
    conventions=None,
):
    """Exact AD of ``loss_fn(model(inputs), targets)`` w.r.t. the flattened parameters (or inputs)."""
    fn, w = module_function(model, loss_fn, inputs, targets, wrt)
    rules = renamed_rules_argument(rules, conventions, "exact_module_gradient")
    return exact_gradient(fn, w, rules, return_value=return_value)


def exact_module_backprop(
    model, loss_fn, inputs, targets, wrt="parameters", rules=None, *, return_value=False, conventions=None
):
    """:func:`exact_backprop` of ``loss_fn(model(inputs), targets)`` w.r.t. the parameters (or inputs)."""
    fn, w = module_function(model, loss_fn, inputs, targets, wrt)
    rules = renamed_rules_argument(rules, conventions, "exact_module_backprop")
    return exact_backprop(fn, w, rules, return_value=return_value)


def exact_forward(fn, *args):
    """Evaluate ``fn(*args)`` exactly (no derivative): returns nested Fractions (lists for tensors)."""
    dtype = next((a.dtype for a in args if isinstance(a, torch.Tensor)), None)
    with _new_context(0, dtype):
        ex = [ExactTensor(arr(to_exact_array(a))) if isinstance(a, torch.Tensor) else a for a in args]
        out = fn(*ex)
    if isinstance(out, ExactTensor):
        return plain_values(out.arr)
    return out
