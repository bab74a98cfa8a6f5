"""Unsupported ops found up front: a survey of the ATen ops that PyTorch's own float run of ``fn`` applies to
values that depend on w, made during the float run the oracle does anyway (no extra call of ``fn``).

The exact interpreter sees exactly those ops (``ExactTensor`` disables ``__torch_function__``, so ops reach it
at the same dispatch level as a :class:`~torch.utils._python_dispatch.TorchDispatchMode`), and it stops at the
first one it cannot evaluate.  The survey lists them all, each with the ``nn.Module`` class it ran in, so that
:func:`~nsverify.oracle.check_gradient` refuses an unsupported program at once, in one short message, before
the exact run (which for a large model may take a while to reach the op).

A value depends on w when it is w itself or the output of an op that read such a value; an in-place op or an
``out=`` argument that writes a dependent value into a tensor makes that tensor dependent (as the exact run's
``ExactTensor`` would be).  Ops on constants alone are not listed: the exact run evaluates them in plain
PyTorch.

The same survey notes two things about how ``fn`` computes that change what its gradient means:

* **grad mode disabled inside fn** (:attr:`OpSurvey.no_grad`): an op on a value that depends on w ran under
  ``torch.no_grad()``, ``torch.inference_mode()`` or ``torch.set_grad_enabled(False)``, so PyTorch records no
  gradient through it;
* **random draws** (:attr:`OpSurvey.random`): an op that draws random numbers (``aten.native_dropout`` of a
  Dropout in training mode, ``aten.bernoulli``, ``aten.randn``, ...; PyTorch tags them
  ``nondeterministic_seeded``), so fn is checked as the function it computes at the draw made on entry.
"""

from __future__ import annotations

import os
import sys
import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from nsverify.errors import UnsupportedOpError
from nsverify.oracle.context import poll_deadline

#: the longest message the refusal prints (names of further ops are counted, not listed)
MAX_MESSAGE = 300


_FUNCTION_PY = os.path.join("torch", "autograd", "function.py")


def _in_custom_function() -> bool:
    """Whether a custom ``torch.autograd.Function`` is running (its forward runs with grad mode off by design)."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "apply" and frame.f_code.co_filename.endswith(_FUNCTION_PY):
            return True
        frame = frame.f_back
    return False


def _draws(func, args, kwargs) -> bool:
    """Whether a ``nondeterministic_seeded`` op really draws here: not with ``dropout_p=0`` (the fused attention
    kernels in eval mode), ``train=False``, ``training=False`` (rrelu in eval mode: the mean slope), or a
    dropout's ``p=0``."""
    schema = func._schema.arguments
    given = {a.name: a.default_value for a in schema if a.has_default_value()}  # what was not passed
    given.update(zip((a.name for a in schema), args))
    given.update(kwargs)
    if given.get("dropout_p", None) == 0 or given.get("train", None) is False or given.get("training") is False:
        return False
    return not ("dropout" in func.overloadpacket.__name__ and given.get("p", None) == 0)


class OpSurvey(TorchDispatchMode):
    """``with OpSurvey(wf) as s: fn(wf)``: ``s.unsupported`` maps each op name the exact interpreter cannot
    evaluate to the ``nn.Module`` class it first ran in (None outside any module)."""

    def __init__(self, root: torch.Tensor, supported, hint=lambda func: None):
        super().__init__()
        self._dep: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
        self._dep[id(root)] = root
        self._supported, self._hint = supported, hint
        self.hints: list[str] = []
        self.unsupported: dict[str, str | None] = {}
        self.ops = 0
        self.no_grad: dict[str, str | None] = {}  # op -> module, for dependent ops run with grad mode off
        self.random: dict[str, str | None] = {}  # op -> module, for ops that draw random numbers
        self._modules: list[str] = []
        self._hooks: list = []

    def _depends(self, t) -> bool:
        return isinstance(t, torch.Tensor) and self._dep.get(id(t)) is t

    def _mark(self, t) -> None:
        if isinstance(t, torch.Tensor):
            self._dep[id(t)] = t

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        poll_deadline()  # the float run of a large model takes seconds: the time limit holds inside it too
        out = func(*args, **kwargs)
        name = func.__name__.removesuffix(".default")
        where = self._modules[-1] if self._modules else None
        if torch.Tag.nondeterministic_seeded in func.tags and _draws(func, args, kwargs):
            self.random.setdefault(func.overloadpacket.__name__, where)
        if any(self._depends(a) for a in tree_leaves((args, kwargs))):
            self.ops += 1
            if not torch.is_grad_enabled() and not _in_custom_function():
                self.no_grad.setdefault(name, where)
            if not self._supported(func) and name not in self.unsupported:
                self.unsupported[name] = where
                h = self._hint(func)
                if h and h not in self.hints:
                    self.hints.append(h)
            for t in tree_leaves(out):
                self._mark(t)
            base = func.overloadpacket.__name__
            if base.endswith("_") and args:  # in place: the written tensor now holds dependent values
                self._mark(args[0])
            for t in tree_leaves(kwargs.get("out")):
                self._mark(t)
        return out

    # the module each op runs in (global module hooks, removed on exit)
    def __enter__(self):
        from torch.nn.modules import module as nn_module

        def pre(m, _inputs):
            self._modules.append(type(m).__name__)

        def post(m, _inputs, _output):
            if self._modules:
                self._modules.pop()

        self._hooks = [nn_module.register_module_forward_pre_hook(pre), nn_module.register_module_forward_hook(post)]
        return super().__enter__()

    def __exit__(self, *exc):
        for h in self._hooks:
            h.remove()
        self._hooks = []
        return super().__exit__(*exc)

    def refusal(self) -> UnsupportedOpError | None:
        """The one error that names every unsupported op (None when there is none), at most MAX_MESSAGE long:
        the ops first (further ones counted), then what to do (an op's own advice when it has one, cut to fit)."""
        if not self.unsupported:
            return None
        items = [f"aten.{op}" + (f" (in {mod})" if mod else "") for op, mod in self.unsupported.items()]
        head = f"fn uses {len(items)} ATen op{'s' if len(items) > 1 else ''} the exact oracle cannot evaluate: "
        end = " (all: nsverify.oracle.tensor.supported_ops())"
        advice = "; ".join(self.hints) or "Rewrite it with supported ops (torch.where, torch.maximum or relu for " \
                                          "piecewise-linear logic)"
        shown: list[str] = []
        for i, it in enumerate(items):
            rest = len(items) - i
            if shown and len(head + ", ".join([*shown, it])) + len(f", and {rest - 1} more") > MAX_MESSAGE - 90:
                shown.append(f"and {rest} more")
                break
            shown.append(it)
        text = head + ", ".join(shown) + ". "
        room = MAX_MESSAGE - len(text) - len(end)
        if len(advice) > room:
            advice = advice[: max(room - 4, 0)].rsplit(",", 1)[0] + ", ..."
        return UnsupportedOpError((text + advice + end)[:MAX_MESSAGE])


def _ops(found: dict) -> str:
    """``aten.relu (in ReLU), aten.mul`` for a survey's op -> module map (three at most, then a count)."""
    items = [f"aten.{op}" + (f" (in {mod})" if mod else "") for op, mod in found.items()]
    return ", ".join(items[:3]) + (f" and {len(items) - 3} more" if len(items) > 3 else "")


def no_grad_note(survey: OpSurvey | None) -> str | None:
    """The explanation when fn disabled grad mode around ops on w (None when it did not)."""
    if survey is None or not survey.no_grad:
        return None
    return (f"fn disables grad mode (torch.no_grad(), torch.inference_mode() or torch.set_grad_enabled(False)) "
            f"around {_ops(survey.no_grad)}: PyTorch records no gradient through that part, so its AD treats it "
            "as a constant. Remove the no_grad from fn, or move it outside fn (the oracle runs fn with grad mode on)")


def random_note(survey: OpSurvey | None) -> str | None:
    """The explanation when fn drew random numbers (None when it did not)."""
    if survey is None or not survey.random:
        return None
    return (f"fn draws random numbers ({_ops(survey.random)}): it is checked as the function it computes at the "
            "draw made on entry (every call of fn starts from that random state). For the model as it is used "
            "at test time call model.eval() first; to check one training step reproducibly fix the seed "
            "(torch.manual_seed) before the call")
