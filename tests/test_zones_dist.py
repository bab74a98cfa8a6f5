"""The volume estimator under torchrun: 2 CPU ranks (gloo) give the same counts and D values as 1 rank."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ARGS = ["zones", "volume", "--model", "lenet5", "--width", "0.5", "--draws", "3", "--batches", "2",
        "--batch-size", "16", "--dtypes", "bfloat16,float32", "--tau", "bfloat16=1e-2", "--tau", "float32=1e-8"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(nproc: int, out: Path, extra=()) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc),
           "--master_addr", "127.0.0.1", "--master_port", str(_free_port()), "-m", "nsverify", *ARGS,
           "--json", str(out), *extra]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return json.loads(out.read_text())


@pytest.mark.distributed
def test_two_ranks_match_one_rank(tmp_path):
    one = _run(1, tmp_path / "one.json")
    two = _run(2, tmp_path / "two.json", ["--resume", str(tmp_path / "part.json")])
    assert one["world_size"] == 1 and two["world_size"] == 2
    for d in ("bfloat16", "float32"):
        assert two["dtypes"][d]["pair_share"] == one["dtypes"][d]["pair_share"]
        assert two["dtypes"][d]["draw_share"] == one["dtypes"][d]["draw_share"]
        assert two["dtypes"][d]["D"] == one["dtypes"][d]["D"]
    # each rank kept its own partial file; rank 0 computed draws 0 and 2, rank 1 draw 1
    r0 = json.loads((tmp_path / "part.json.rank0").read_text())["draws"]
    r1 = json.loads((tmp_path / "part.json.rank1").read_text())["draws"]
    assert sorted(r0) == ["0", "2"] and sorted(r1) == ["1"]
