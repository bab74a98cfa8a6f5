"""The exact ATen ops of the oracle, one area per module, in one table.

* :mod:`.record`: :class:`~nsverify.oracle.ops.record.ExactOp`, one op's record (names, exact forward and
  backward, analytic or not, the autograd nodes it records, enclosures);
* the areas, each holding its ops' forward and backward and a ``RECORDS`` tuple: :mod:`.linalg` (arithmetic,
  sums, matrix products), :mod:`.shape` (copies, views, indexing, creation), :mod:`.conv`, :mod:`.pool` (average
  pools, nearest upsampling), :mod:`.select` (max/min, max pools, sorts: the tie rules), :mod:`.norm`,
  :mod:`.attention`, :mod:`.smooth` (enclosed smooth functions and losses), :mod:`.layers` (embedding, dropout),
  :mod:`.kinks` (the registry's elementwise ops, threshold, prelu, comparisons, ``where``); :mod:`.common` holds
  what they share;
* :mod:`.table`: ``TABLE``, collected explicitly from the areas (no registration by import side effect), and
  ``ANALYTIC_NODES`` derived from it.  :mod:`nsverify.oracle.tensor` dispatches through it.
"""
