"""The one table of exact ATen ops, collected explicitly from the areas' ``RECORDS``, and what derives from it.

* :data:`TABLE`: every :class:`~nsverify.oracle.ops.record.ExactOp` by ATen name (forward and backward ops), then
  the registry's exact elementwise entries (:class:`~nsverify.oracle.ops.kinks.RegistryOps`, read from the
  registry on each lookup, so an entry registered at run time is evaluated at once).
  :func:`nsverify.oracle.tensor.dispatch` reads it and nothing else.
* :data:`ANALYTIC_NODES`: the autograd nodes of the analytic ops, the ops Park et al.'s ``tau_l`` may contain
  (Sec. 2.2, eq. (1)); the autograd-graph reading of Theorem 8 (:mod:`nsverify.oracle.park.optrace`) declines
  any other node.

The smooth functions with exact enclosures, named in the advice of a refused smooth op, are
:data:`nsverify.oracle.ops.smooth.SMOOTH_OPS`, derived from that area's records.
"""

from __future__ import annotations

from typing import Callable

from nsverify.oracle.ops import (
    attention,
    conv,
    jumps,
    kinks,
    layers,
    linalg,
    losses,
    norm,
    pool,
    reductions,
    select,
    shape,
    singular,
    smooth,
)
from nsverify.oracle.ops.record import ExactOp

#: area -> its records, in the order the docs list them
AREAS: dict[str, tuple[ExactOp, ...]] = {
    "linear algebra": linalg.RECORDS,
    "shapes and indexing": shape.RECORDS,
    "convolution": conv.RECORDS,
    "pooling": pool.RECORDS,
    "selection": select.RECORDS,
    "normalisation": norm.RECORDS,
    "attention": attention.RECORDS,
    "smooth functions": smooth.RECORDS,
    "layers": layers.RECORDS,
    "elementwise kinks": kinks.RECORDS,
    "singular points": singular.RECORDS,
    "reductions": reductions.RECORDS,
    "losses": losses.RECORDS,
    "jumps": jumps.RECORDS,
}


class OpTable:
    """The exact ops by ATen name.  ``impls`` maps every name (forward and backward) to its function and
    ``records`` to its :class:`ExactOp`; a name given twice is an error at import."""

    def __init__(self, records, resolvers=()):
        self.records: dict[str, ExactOp] = {}
        self.impls: dict[str, Callable] = {}
        self.resolvers = tuple(resolvers)
        for rec in records:
            pairs = [(n, rec.forward) for n in rec.names] + [(n, rec.backward) for n in rec.backward_names]
            for n, fn in pairs:
                if n in self.impls:
                    raise ValueError(f"aten op {n!r} has two exact records ({self.records[n].names[0]} and "
                                     f"{rec.names[0]}); keep one")
                self.impls[n], self.records[n] = fn, rec

    def find(self, name: str, base: str):
        """``(implementation, record)`` of ATen op ``name`` (overload, e.g. "relu.default") of packet ``base``:
        the table's own records first, then the resolvers (record None); ``(None, None)`` when there is none."""
        for key in (name, base):
            impl = self.impls.get(key)
            if impl is not None:
                return impl, self.records.get(key)
        for r in self.resolvers:
            impl = r.resolve(name, base)
            if impl is not None:
                return impl, None
        return None, None

    def supported(self) -> list[str]:
        """ATen op names evaluated (backward ops included; refused ops left out)."""
        names = {k.split(".")[0] for k in self.impls
                 if k not in self.records or self.records[k].refuses is None}
        for r in self.resolvers:  # in-place overloads are implied (dispatch writes the result back)
            names |= {n for n in r.names() if not n.endswith("_") and n not in self.impls}
        return sorted(names)

    def refused(self) -> list[str]:
        """ATen names whose record only refuses them (with rewrite advice)."""
        return sorted(n for n, rec in self.records.items() if rec.refuses is not None)


RECORDS: tuple[ExactOp, ...] = tuple(rec for recs in AREAS.values() for rec in recs)
TABLE = OpTable(RECORDS, resolvers=(kinks.RegistryOps(),))

#: autograd nodes of ops that are analytic wherever the exact trace evaluates them (shape ops, linear algebra,
#: normalisations, softmax, smooth activations, dropout with its fixed mask, ``where``/``masked_fill`` with a
#: condition that does not depend on the parameters -- the watcher of optrace declines one that does)
ANALYTIC_NODES: frozenset[str] = frozenset(n for rec in RECORDS if rec.analytic for n in rec.nodes)

