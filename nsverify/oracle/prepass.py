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
"""

from __future__ import annotations

import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from nsverify.errors import UnsupportedOpError

#: the longest message the refusal prints (names of further ops are counted, not listed)
MAX_MESSAGE = 300


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
        self._modules: list[str] = []
        self._hooks: list = []

    def _depends(self, t) -> bool:
        return isinstance(t, torch.Tensor) and self._dep.get(id(t)) is t

    def _mark(self, t) -> None:
        if isinstance(t, torch.Tensor):
            self._dep[id(t)] = t

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if any(self._depends(a) for a in tree_leaves((args, kwargs))):
            self.ops += 1
            name = func.__name__.removesuffix(".default")
            if not self._supported(func) and name not in self.unsupported:
                self.unsupported[name] = self._modules[-1] if self._modules else None
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
