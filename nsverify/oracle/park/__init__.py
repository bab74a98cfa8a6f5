"""Park, Chun and Lee's layered sufficient conditions (ICLR 2024, Sec. 3) as one engine below the oracle's API.

* :mod:`.walk` -- the one torch.fx walk over a model's layers (affine, activation, max pool), the one
  activation map (fx node -> registry name, :func:`.walk.activation_of`) and the module chain of a Sequential;
* :mod:`.kinks` -- what AD picks at an activation's kinks relative to its one-sided derivatives (common lambda,
  Bouligand / Clarke proxies);
* :mod:`.rank` -- Theorem 5's rank test on the columns of z_{l-1} (modulo a prime, then exact);
* :mod:`.cone` -- Algorithm 1's test that P_l is non-empty, through the oracle's exact cones
  (:mod:`nsverify.oracle.cones`), and the per-layer record :class:`.cone.LayerCheck`;
* :mod:`.algorithm1` -- Algorithm 1 per layer from tensors with an autograd graph (training monitor, Table 1's
  premises);
* :mod:`.exact` -- Theorems 5 and 8 from the oracle's exact trace: the layered shortcut of
  :func:`nsverify.check_module`, with certificates.

Max-pool windows come from the registry's one geometry (:func:`nsverify.registry.windows.pool_window_table`).
The paper-level uses (Table 1, the experiments, the training monitor) live in :mod:`nsverify.papers.park`.
"""
