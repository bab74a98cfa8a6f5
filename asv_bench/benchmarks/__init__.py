"""nsverify asv benchmarks: one module per area; axes, device sync and workloads in :mod:`benchmarks.common`.

In asv's ``existing`` environment nothing is installed: when ``nsverify`` is not importable, the working tree
this benchmark directory belongs to is put on ``sys.path`` (or set ``ASV_PYTHONPATH`` to choose another).
"""
import importlib.util
import os
import sys

if importlib.util.find_spec("nsverify") is None:  # pragma: no cover - depends on how asv was started
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
