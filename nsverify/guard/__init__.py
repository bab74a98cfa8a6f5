"""The training-time NaN guard: ``with nsverify.nan_guard(model): ...`` turns a bare NaN (or inf) gradient into a
report that names the step, the parameter block, the op whose backward made the first non-finite value, and --
from the exact oracle -- the class of the point (locally Lipschitz: a bug, with the value PyTorch's documented rule
gives; not locally Lipschitz or undefined: NaN/inf is allowed; a float overflow of a finite derivative) and the
expected value.

How it works, per training step (one forward of ``model`` and its backward):

- a forward hook keeps the model's inputs and the CPU random state, and a hook on the output keeps the gradient the
  loss sends into it; a hook on each parameter checks its accumulated gradient (one sum per block: a NaN or an inf
  makes it non-finite). A healthy step pays only for these;
- when a block's gradient holds NaN or inf, at the end of that backward the guard (1) replays the step's forward
  and backward (same inputs, same random state, the kept output gradient; buffers restored after) with a hook on
  every node of the graph: the first node whose incoming gradients are finite and whose outgoing ones are not is
  the culprit (``SqrtBackward0`` -> op ``sqrt``), and it notes whether its incoming gradient was 0 there (0 times
  an infinite derivative: the branch not taken of a ``where``); (2) diagnoses the first such parameter block:
  :func:`nsverify.check_gradient` of ``w -> sum(g * model(inputs; w))`` (``g``: the loss's gradient at the model's
  output, held fixed: the function whose gradient the backward pass computed for this block; where the model is
  locally Lipschitz in w and the loss continuously differentiable in its output, its Clarke set is the loss's),
  with a time limit;
- then it raises :class:`NanGuardError` (``on_nan="raise"``, the default), warns (``"warn"``: a
  :class:`NanGuardWarning`; the gradients stay as they are) or calls ``on_nan(report)``. It never continues
  silently: the error comes out of ``loss.backward()``, before the optimizer step applies the NaN.

The class comes only from the oracle (``Verdict.diagnosis`` or the diagnosis its error carries); when the oracle
gives none (an op it does not support, the time limit) the report says the class is unknown and why -- it never
guesses one. The culprit op comes from the backward pass itself and is always named.
"""
from __future__ import annotations

import math
import re
import warnings
from dataclasses import dataclass, field
from typing import Callable

import torch

from nsverify.errors import BadArgumentError, NonFiniteError, NsverifyError

__all__ = ["GuardReport", "NanGuard", "NanGuardError", "NanGuardWarning", "nan_guard"]

#: the classes of nsverify.oracle.diagnosis.NonFiniteDiagnosis, in words
CLASS_WORDS = {
    "lipschitz": "a bug: the function is locally Lipschitz here, so PyTorch's documented rule promises a finite "
                 "value",
    "not_lipschitz": "allowed: the function is not locally Lipschitz here (no Clarke set), and PyTorch's documented "
                     "rule allows NaN or inf",
    "undefined": "the value itself is undefined here (0/0, NaN): the program has to change",
    "overflow": "a float overflow: the exact derivative is finite, PyTorch's float gradient overflowed to inf",
}
ACTIONS = ("raise", "warn")


class NanGuardError(NonFiniteError):
    """A guarded training step produced a non-finite gradient; ``report`` (a :class:`GuardReport`) says where,
    which op and (from the exact oracle) whether it is a bug and what the value should be."""

    def __init__(self, report: GuardReport):
        super().__init__(report.message(), diagnosis=report.diagnosis)
        self.report = report


class NanGuardWarning(UserWarning):
    """``nan_guard(..., on_nan="warn")``: a guarded step produced a non-finite gradient (the message is the
    report)."""


def op_name(node_name: str) -> str:
    """The forward op of an autograd node's name: ``SqrtBackward0`` -> ``sqrt``, ``MaskedFillBackward0`` ->
    ``masked_fill``, ``AddmmBackward0`` -> ``addmm``."""
    base = re.sub(r"Backward\d*$", "", node_name)
    return re.sub(r"(?<!^)(?=[A-Z])", "_", base).lower()


@dataclass
class GuardReport:
    """What the guard found at one step."""

    step: int  # the guarded forward pass (1-based) whose backward produced the non-finite gradient
    parameters: list  # names of the parameter blocks whose gradient holds NaN or inf, in named_parameters order
    entries: dict  # name -> the flat indices of the first non-finite entries (at most 8)
    culprit: str | None = None  # the backward node where the first non-finite value appeared (e.g. SqrtBackward0)
    diagnosed: str | None = None  # the parameter block the oracle was asked about
    diagnosis: object = None  # the oracle's NonFiniteDiagnosis, when it gave one
    status: str = "unknown"  # the oracle's verdict status, or "error" / "skipped"
    reason: str = ""  # why there is no diagnosis (when there is none)
    upstream: bool = False  # the gradient flowing into the model's output was already non-finite
    #: the culprit node's incoming gradient was exactly 0: the non-finite value is 0 times an infinite or undefined
    #: local derivative (the branch not taken of a where or a mask, or sqrt/pow at 0)
    zero_incoming: bool = False
    extra: dict = field(default_factory=dict)

    @property
    def op(self) -> str | None:
        """The culprit op: the diagnosis's when the oracle named one, else the backward node's forward op."""
        if self.diagnosis is not None and getattr(self.diagnosis, "op", None):
            # the oracle names ATen ops ("aten.sqrt", "aten.where.self"): the op's own name, as op_name gives it
            name = str(self.diagnosis.op)
            name = name[len("aten."):] if name.startswith("aten.") else name
            return name.split(".")[0]
        return op_name(self.culprit) if self.culprit else None

    @property
    def kind(self) -> str | None:
        """The class of the point (a NonFiniteDiagnosis kind), or None when the oracle did not decide it."""
        return getattr(self.diagnosis, "kind", None)

    def message(self) -> str:
        where = ", ".join(f"{n} (entries {self.entries[n]})" for n in self.parameters)
        lines = [f"nan_guard: step {self.step} produced a non-finite gradient in {where}."]
        if self.upstream:
            lines.append("The gradient flowing into the model's output was already NaN/inf: it comes from the loss "
                         "(or whatever follows the model), not from the model; check the loss at this step.")
        if self.culprit:
            lines.append(f"The first non-finite value appeared in the backward of {self.op!r} "
                         f"(autograd node {self.culprit})"
                         + (": its incoming gradient was exactly 0, so this is 0 times an infinite or undefined "
                            "derivative of that op (typically the branch not taken of a torch.where or a mask: "
                            "make the op's input safe inside that branch, the double-where trick)."
                            if self.zero_incoming else "."))
        d = self.diagnosis
        if d is not None:
            lines.append(f"Class: {d.kind}: {CLASS_WORDS.get(d.kind, d.kind)}.")
            if d.expected is not None:
                lines.append(f"Expected value by PyTorch's documented rule (parameter {self.diagnosed}): "
                             f"{_short(d.expected)}.")
            if d.magnitude is not None:
                lines.append(f"Exact magnitude of the overflowing derivative: {d.magnitude}.")
            lines.append(f"The oracle says: {d.message}")
        elif not self.upstream:
            lines.append(f"Class: unknown ({self.reason or 'no diagnosis'}). docs/nan.md lists the common culprits "
                         "with their exact answer.")
        return "\n".join(lines)


def _short(vec, n: int = 6) -> str:
    from nsverify.oracle.verdict import _s  # exact numbers as fractions, enclosures as their rounded digits

    vals = [_s(v) for v in vec]
    return "(" + ", ".join(vals[:n]) + (f", ... {len(vals)} entries" if len(vals) > n else "") + ")"


def _tensors(obj) -> list:
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (list, tuple)):
        return [t for o in obj for t in _tensors(o)]
    if isinstance(obj, dict):
        return [t for o in obj.values() for t in _tensors(o)]
    return []


def _finite(ts) -> bool:
    return all(t is None or bool(torch.isfinite(t).all()) for t in ts)


def _zero_where_nonfinite(grad_inputs, grad_outputs) -> bool:
    """Was the incoming gradient exactly 0 where the outgoing one is not finite? Elementwise (one incoming gradient
    shaped like the outgoing one): at those entries; otherwise: everywhere."""
    ins = [g for g in grad_outputs if g is not None]
    for out in (g for g in grad_inputs if g is not None and not bool(torch.isfinite(g).all())):
        if len(ins) == 1 and ins[0].shape == out.shape:
            if bool(ins[0][~torch.isfinite(out)].any()):
                return False
        elif any(bool(g.any()) for g in ins):
            return False
    return True


def _detach(obj):
    if isinstance(obj, torch.Tensor):
        return obj.detach().clone()
    if isinstance(obj, (list, tuple)):
        return type(obj)(_detach(o) for o in obj)
    if isinstance(obj, dict):
        return {k: _detach(v) for k, v in obj.items()}
    return obj


class NanGuard:
    """The context manager :func:`nan_guard` returns (``guard.reports``: every report so far)."""

    def __init__(self, model: torch.nn.Module, *, on_nan="raise", diagnose: bool = True,
                 time_limit: float | None = 10.0, max_pieces: int = 10_000):
        if not isinstance(model, torch.nn.Module):
            raise BadArgumentError(f"nan_guard needs a torch.nn.Module, got {type(model).__name__}: pass the model "
                                   "whose parameters you train.")
        if not (callable(on_nan) or on_nan in ACTIONS):
            raise BadArgumentError(f"nan_guard(on_nan={on_nan!r}): give 'raise', 'warn' or a callable taking the "
                                   "GuardReport.")
        if time_limit is not None and not (isinstance(time_limit, (int, float)) and time_limit > 0
                                           and math.isfinite(time_limit)):
            raise BadArgumentError(f"nan_guard(time_limit={time_limit!r}): give a positive number of seconds, or "
                                   "None for no limit.")
        self.model, self.on_nan, self.diagnose = model, on_nan, diagnose
        self.time_limit, self.max_pieces = time_limit, max_pieces
        self.step = 0
        self.reports: list[GuardReport] = []
        self._handles: list = []
        self._inputs = None
        self._cotangent = None
        self._rng = None
        self._replaying = False
        self._bad: dict = {}
        self._queued = False

    # --- hooks ---------------------------------------------------------------------------------------------
    def __enter__(self) -> NanGuard:
        if self._handles:
            raise NsverifyError("this nan_guard is already active: enter it once.")
        m = self.model
        self._handles.append(m.register_forward_pre_hook(self._pre_forward, with_kwargs=True))
        self._handles.append(m.register_forward_hook(self._post_forward))
        for name, p in m.named_parameters():
            if p.requires_grad:
                self._handles.append(p.register_post_accumulate_grad_hook(
                    lambda p, name=name: self._check_parameter(name, p)))
        return self

    def __exit__(self, *exc) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()

    def _pre_forward(self, module, args, kwargs):
        if torch.is_grad_enabled() and not self._replaying:
            self.step += 1
            self._inputs = (_detach(args), _detach(kwargs))
            self._rng = torch.get_rng_state()
            self._cotangent, self._bad, self._queued = None, {}, False

    def _post_forward(self, module, args, output):
        if not torch.is_grad_enabled() or self._replaying:
            return
        outs = [t for t in _tensors(output) if t.requires_grad]
        self._cotangent = [None] * len(outs)
        for i, t in enumerate(outs):
            t.register_hook(lambda g, i=i: self._keep_cotangent(i, g))

    def _keep_cotangent(self, i: int, g):
        self._cotangent[i] = g.detach().clone()

    def _replay(self) -> tuple[str | None, bool]:
        """The culprit node of the failed step and whether its incoming gradient was 0 there: the step's forward
        replayed (same inputs, same CPU random state, buffers restored after) and its backward with the kept output
        gradient, with a hook on every node of the graph -- only after a failure, so a healthy step pays nothing
        for it."""
        found: dict = {}

        def hook_for(name):
            def hook(grad_inputs, grad_outputs):  # grad_outputs flow in, grad_inputs flow on
                if "culprit" not in found and _finite(grad_outputs) and not _finite(grad_inputs):
                    found["culprit"] = name
                    found["zero"] = _zero_where_nonfinite(grad_inputs, grad_outputs)
            return hook

        args, kwargs = self._inputs
        buffers = [(b, b.detach().clone()) for b in self.model.buffers()]
        self._replaying = True
        try:
            with torch.random.fork_rng(devices=[]), torch.enable_grad():
                torch.set_rng_state(self._rng)
                out = self.model(*args, **kwargs)
            outs = [t for t in _tensors(out) if t.requires_grad]
            pairs = [(o, c) for o, c in zip(outs, self._cotangent) if c is not None]
            seen: set = set()
            todo = [o.grad_fn for o, _ in pairs]
            while todo:
                node = todo.pop()
                if node is None or id(node) in seen or type(node).__name__ == "AccumulateGrad":
                    continue
                seen.add(id(node))
                node.register_hook(hook_for(node.name()))
                todo += [n for n, _ in node.next_functions]
            params = [p for p in self.model.parameters() if p.requires_grad]
            if pairs and params:
                torch.autograd.grad([o for o, _ in pairs], params, [c for _, c in pairs], allow_unused=True)
        finally:
            self._replaying = False
            with torch.no_grad():
                for b, saved in buffers:
                    b.copy_(saved)
        return found.get("culprit"), found.get("zero", False)

    def _check_parameter(self, name: str, p):
        g = p.grad
        # the sum is finite when every entry is (a NaN or an inf makes it NaN or inf): one pass, no mask; an
        # overflowing sum of finite entries falls through to the exact test
        if g is None or bool(torch.isfinite(g.sum())) or bool(torch.isfinite(g).all()):
            return
        bad = (~torch.isfinite(g)).flatten().nonzero().flatten()[:8].tolist()
        self._bad[name] = bad
        if not self._queued:
            self._queued = True
            torch.autograd.Variable._execution_engine.queue_callback(self._finish)

    # --- the report ----------------------------------------------------------------------------------------
    def _finish(self):
        bad, self._bad, self._queued = self._bad, {}, False  # a second backward of the step is checked afresh
        order = [n for n, _ in self.model.named_parameters()]
        names = sorted(bad, key=order.index)
        report = GuardReport(self.step, names, {n: bad[n] for n in names})
        report.upstream = any(c is not None and not bool(torch.isfinite(c).all()) for c in self._cotangent or [])
        if not report.upstream and self._inputs is not None and self._cotangent:
            try:
                report.culprit, report.zero_incoming = self._replay()
            except Exception as exc:  # the replay is a convenience: its failure is reported, never raised
                report.extra["replay_error"] = f"{type(exc).__name__}: {exc}"
        if report.upstream:
            report.status, report.reason = "skipped", "the NaN/inf comes from outside the model"
        elif not self.diagnose:
            report.status, report.reason = "skipped", "diagnose=False"
        else:
            self._run_oracle(report, names[0])
        self.reports.append(report)
        if callable(self.on_nan):
            self.on_nan(report)
        elif self.on_nan == "warn":
            warnings.warn(report.message(), NanGuardWarning, stacklevel=2)
        else:
            raise NanGuardError(report)

    def diagnosed_function(self, name: str) -> tuple[Callable, torch.Tensor]:
        """``(fn, w)``: the function the guard hands the oracle for parameter block ``name`` at the last step --
        ``w -> sum(g * model(inputs; w))`` with the model's last inputs and the loss's gradient ``g`` at its
        output -- and the block's current value."""
        params = dict(self.model.named_parameters())
        if name not in params:
            raise BadArgumentError(f"the model has no parameter {name!r}: choose from {', '.join(params)}.")
        if self._inputs is None or not self._cotangent or all(c is None for c in self._cotangent):
            raise NsverifyError("no guarded forward and backward pass to diagnose yet: run a training step inside "
                                "the guard first.")
        args, kwargs = self._inputs
        cot = list(self._cotangent)  # an output the loss did not use has no gradient: it contributes nothing
        model = self.model

        def fn(w):
            out = torch.func.functional_call(model, {name: w}, args, kwargs)
            outs = [t for t in _tensors(out) if t.is_floating_point()]
            return sum((o * c).sum() for o, c in zip(outs, cot) if c is not None)

        return fn, params[name].detach().clone()

    def _run_oracle(self, report: GuardReport, name: str) -> None:
        from nsverify.oracle import check_gradient

        report.diagnosed = name
        try:
            fn, w = self.diagnosed_function(name)
            v = check_gradient(fn, w, time_limit=self.time_limit, max_pieces=self.max_pieces, on_limit="unknown",
                               progress=False)
        except Exception as exc:  # NotLipschitzError / NonFiniteError carry the diagnosis; others say why (the
            # guard's own report must come out, whatever the oracle met)
            report.diagnosis = getattr(exc, "diagnosis", None) if isinstance(exc, NsverifyError) else None
            report.status = type(exc).__name__
            report.reason = f"the oracle raised {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            return
        report.status = v.status
        report.diagnosis = getattr(v, "diagnosis", None)
        if report.diagnosis is None:
            report.reason = (f"the oracle answered {v.status!r} without a diagnosis"
                             + (f": {v.reason}" if v.reason else ""))


def nan_guard(model: torch.nn.Module, *, on_nan="raise", diagnose: bool = True, time_limit: float | None = 10.0,
              max_pieces: int = 10_000) -> NanGuard:
    """Guard the training steps of ``model`` against NaN/inf gradients::

        with nsverify.nan_guard(model):
            for x, y in data:
                opt.zero_grad()
                loss_fn(model(x), y).backward()   # raises NanGuardError at the first non-finite gradient
                opt.step()

    ``on_nan``: ``"raise"`` (:class:`NanGuardError`, out of ``backward()``, before the optimizer step), ``"warn"``
    (a :class:`NanGuardWarning`) or a callable taking the :class:`GuardReport`. ``diagnose=False``: name the step,
    the parameters and the culprit op only (no oracle call). ``time_limit`` (seconds; None: none) and
    ``max_pieces`` bound the oracle's diagnosis (past them its class is reported unknown)."""
    return NanGuard(model, on_nan=on_nan, diagnose=diagnose, time_limit=time_limit, max_pieces=max_pieces)
