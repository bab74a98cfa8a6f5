"""The paper reproductions, one package per paper.

- :mod:`.park` -- Park, Chun and Lee, *What does automatic differentiation compute for neural networks?*
  (ICLR 2024): Conditions 1-2, the premise checkers, the training monitor, Table 1 and Sec. 4;
- :mod:`.despres` -- Despres, *A functional framework for nonsmooth autodiff with maxpooling functions*:
  associated gradients;
- :mod:`.arnekvist` -- Arnekvist et al., *The effect of target normalization and momentum on dying ReLU*;
- :mod:`.zones` -- Bertoin et al., *Numerical influence of ReLU'(0) on backpropagation* (NeurIPS 2021), and
  Boustany's thesis, Ch.3: bifurcation and compensation zones;
- :mod:`.costs` -- Boustany's thesis, Ch.2: the cost of nonsmooth AD;
- :mod:`.innaprop` -- Boustany's thesis, Ch.4: the INNAprop family's convergence and precision studies (the
  optimizers themselves are :mod:`nsverify.optim`).

Every package with report claims has a ``repro`` module: its claims declared once (``CLAIMS``, a table of
:class:`nsverify.claims.ClaimSpec`) and functions that run its experiments at a budget the caller chooses and
return the results with their judged claims. The report sections (:mod:`nsverify.sections`) only choose budgets
and render. The claim record, decision rules, statistics and provenance: :mod:`nsverify.claims`; the papers'
worked examples through the oracle: :mod:`.known_answers`; the stored GPU runs judged: :mod:`.gpu_claims`.
"""
