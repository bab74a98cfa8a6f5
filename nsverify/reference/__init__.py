"""Independent references the exact oracle is compared with; they sit above the oracle and share no code
with it.

- :mod:`.fuzz` -- random piecewise-affine (and smooth) programs at exact ties, LayerNorm and attention outputs
  among them on request, each evaluated with its own dual numbers and compared with
  :func:`nsverify.check_gradient`'s verdict. It shares nothing with the oracle but the public API
  (``nsverify.check_gradient`` and the returned :class:`~nsverify.oracle.Verdict`'s fields), called as a user
  would; ``tests/test_oracle_fuzz.py`` checks its imports.
"""
