"""The README's and docs/conventions.md's numbers from the shipped data are generated from it
(:mod:`nsverify.report.readme_numbers`, between ``<!-- numbers:NAME begin/end -->`` markers, as the registry's op
lists are); this test fails, naming the command that regenerates them (``python -m nsverify.report.readme_numbers
--write``), when one is stale (issue 40, item 10)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from nsverify.errors import NsverifyError
from nsverify.report import readme_numbers as rn

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "nsverify" / "data"


def test_the_docs_numbers_are_the_shipped_datas():
    stale = rn.stale(ROOT)
    assert not stale, rn.check_message(stale)


def test_the_numbers_read_the_shipped_files():
    """Each number against the file it comes from, read here with json alone."""
    torch_run = json.loads((DATA / "conventions" / f"{rn.TORCH_RELEASE}.json").read_text())["results"]
    assert rn.torch_matrix().startswith(f"{len(torch_run)} evaluations in the recorded torch {rn.TORCH_RELEASE}")
    jax_run = json.loads((DATA / "conventions" / "jax" / "0.10.2.json").read_text())["results"]
    text = rn.jax_matrix()
    assert f"= {len(jax_run)} evaluations" in text and "vmap" not in text  # the record has grad, jvp, jit
    assert f"{sum(r['rule'] == 'error' for r in jax_run)} refused" in text
    # the monitor's figures come from the newest GPU perf run (perf.json), not the claims run made before the
    # monitor's rewrite; each is that run's own ratio of a monitored to a plain step
    perf = json.loads((DATA / "gpu" / "perf.json").read_text())
    text = rn.monitor_overhead()
    for m in perf["monitor"]:
        assert f"{m['ratio']:.2f}x at width {m['width']:g}" in text
    assert perf["provenance"]["git_commit"][:7] in text and perf["provenance"]["gpu"] in text
    readme = (ROOT / "README.md").read_text()
    for gone in ("784 evaluations", "(611 evaluations, 0 unexpected)", "16, 141 and 39 examples", "1.3x on ResNet18"):
        assert gone not in readme


def test_a_stale_number_fails_naming_the_command(tmp_path, capsys):
    for rel in dict.fromkeys(b.path for b in rn.BLOCKS):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, tmp_path / rel)
    readme = tmp_path / "README.md"
    readme.write_text(readme.read_text().replace("<!-- numbers:torch-matrix begin -->",
                                                 "<!-- numbers:torch-matrix begin -->611 evaluations, 0 unexpected; "))
    assert rn.stale(tmp_path) == ["README.md"]
    assert rn.main(["--root", str(tmp_path)]) == 1
    assert "README.md: run python -m nsverify.report.readme_numbers --write" in capsys.readouterr().err
    assert rn.main(["--root", str(tmp_path), "--write"]) == 0 and rn.stale(tmp_path) == []
    readme.write_text(readme.read_text().replace("<!-- numbers:monitor end -->", ""))
    with pytest.raises(NsverifyError, match="expected one block between <!-- numbers:monitor begin -->"):
        rn.stale(tmp_path)
