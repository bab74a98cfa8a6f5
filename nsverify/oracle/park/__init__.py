"""Park, Chun and Lee's layered sufficient conditions (ICLR 2024, Sec. 3) as one engine below the oracle's API.

* :mod:`.walk` -- the engine's one torch.fx trace (:func:`.walk.trace`) and its readings: the layer-level nodes
  (affine, activation, max pool; :func:`.walk.walk`) and the module chain of a Sequential (:func:`.walk.chain`),
  and the one activation map (fx node -> registry name, :func:`.walk.activation_of`);
* :mod:`.kinks` -- what AD picks at an activation's kinks relative to its one-sided derivatives (common lambda,
  Bouligand / Clarke proxies), and the layer activations' kinks, sides and AD derivatives, read from the registry
  entry (the engine selects activations by the capability ``park_layer``, never by name);
* :mod:`.layers` -- the exact readers' shared layer model: the one :class:`~.layers.Layer` record, the one
  :class:`~.layers.Capture` of exact values, the rows of P_l (:func:`~.layers.pi_rows`), the module-class tables
  and :class:`~.layers.Declined`;
* :mod:`.graph` -- the exact decision's one module reading (:func:`.graph.module_layers`): a ``Sequential``'s
  chain or a traced ``forward`` (residual adds, BatchNorm in eval mode);
* :mod:`.optrace` -- Theorem 8 with the layers read from the autograd graph of the exact trace (the second route);
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
