"""``ExactOp``: the record of one exact ATen op (or of a family of overloads sharing one implementation).

Every op the exact interpreter evaluates has one record in the module of its area (:mod:`.linalg`,
:mod:`.shape`, :mod:`.conv`, :mod:`.pool`, :mod:`.select`, :mod:`.norm`, :mod:`.attention`, :mod:`.smooth`,
:mod:`.layers`, :mod:`.kinks`); :mod:`.table` collects the areas' ``RECORDS`` into the one table that dispatch
reads and derives :data:`~nsverify.oracle.ops.table.ANALYTIC_NODES` from it.  docs/oracle.md, "Adding an exact
op", walks through one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class ExactOp:
    """One exact ATen op.

    * ``names``: the ATen ops ``forward`` evaluates: ``"relu"`` is every overload, ``"sum.dim_IntList"`` one.
    * ``forward``: the exact implementation, called with the op's arguments unwrapped (exact values as numpy
      object arrays of Fractions, :class:`~nsverify.oracle.numbers.Aff`, :class:`~nsverify.oracle.numbers.Jet` or
      :class:`~nsverify.oracle.numbers.Ival` entries; Python scalars as they come); it returns arrays (or a
      tuple of them) in the same form.
    * ``backward_names`` / ``backward``: the ATen backward ops of this op (the ones its autograd formula calls,
      e.g. ``convolution_backward``) and their exact implementation -- empty when PyTorch's formula is made of
      other forward ops (``mm``'s is two ``mm``).
    * ``analytic``: declared analytic (smooth) wherever the exact trace evaluates it (an exact division by zero, a
      square root of zero or a comparison stops the trace first); Park et al.'s layered theorems (Sec. 2.2,
      eq. (1)) accept it inside ``tau_l``.  False (the default) is always safe: Park's autograd-graph route
      declines the op and the enumeration decides.
    * ``nodes``: the autograd node classes (``grad_fn`` names) the op's forward records, as read off PyTorch
      (``type(op(x).grad_fn).__name__``); those of analytic records make
      :data:`~nsverify.oracle.ops.table.ANALYTIC_NODES`, and a node not listed is declined.
    * ``enclosure``: values that are not rational in general (exp, sqrt, softmax ...): a result is an exact
      Fraction where it is proved rational and otherwise a rigorous interval enclosure
      (:class:`~nsverify.oracle.numbers.Ival`) whose width the certificates account for.
    * ``refuses``: set for an op named only to be refused: ``forward`` raises
      :class:`~nsverify.errors.UnsupportedOpError` and this text is the rewrite advice the pre-pass prints.
    * ``reenters``: ``forward`` is a decomposition into ATen ops run on the interpreter's own tensors (every op
      of it dispatches again, kinks included): it is called as ``forward(tensor, *args)``, where
      ``tensor(array)`` makes an exact array a tensor the interpreter evaluates.
    """

    names: tuple[str, ...]
    forward: Callable
    backward_names: tuple[str, ...] = ()
    backward: Callable | None = None
    analytic: bool = False
    nodes: tuple[str, ...] = ()
    enclosure: bool = False
    refuses: str | None = None
    reenters: bool = False

    def __post_init__(self):
        for field in ("names", "backward_names", "nodes"):
            v = getattr(self, field)
            if not isinstance(v, tuple) or not all(isinstance(n, str) and n for n in v):
                raise TypeError(f"ExactOp.{field} must be a tuple of non-empty strings, got {v!r}; write "
                                f"{field}=(\"name\",) for one name")
        if not self.names:
            raise ValueError("an ExactOp needs at least one ATen name in names=(...)")
        if not callable(self.forward):
            raise TypeError(f"ExactOp {self.names[0]}: forward must be a function, got {self.forward!r}")
        if bool(self.backward_names) != (self.backward is not None):
            raise ValueError(f"ExactOp {self.names[0]}: give backward_names and backward together (the ATen "
                             "backward ops and their exact implementation), or neither")
        if self.refuses is not None and (self.analytic or self.nodes or self.backward is not None):
            raise ValueError(f"ExactOp {self.names[0]}: an op that is refused has no backward, nodes or analytic "
                             "flag; drop them or drop refuses=")

    @property
    def title(self) -> str:
        """The op's user-facing name: its first ATen name without a leading underscore, overload or
        ``_forward`` suffix (``_log_softmax`` -> ``log_softmax``, ``nll_loss_forward`` -> ``nll_loss``)."""
        n = self.names[0].split(".")[0].lstrip("_")
        return n[: -len("_forward")] if n.endswith("_forward") else n
