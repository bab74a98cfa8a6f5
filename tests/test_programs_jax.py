"""JAX's jax.grad and jax.jit of the compiled-programs table (issue 37): the twins are the torch programs' functions,
JAX's cells are judged against the same hand-derived Clarke sets, and a JAX finding carries a script that runs.

The JAX tests skip where jax is not installed (the optional extra nsverify[jax]; CI's JAX step installs it);
the one about the missing install runs everywhere."""
from __future__ import annotations

import json
import random
import subprocess
import sys
from fractions import Fraction

import pytest
import torch

from nsverify.conventions import programs as P
from nsverify.conventions import programs_jax as PJ
from nsverify.conventions.jax_matrix import JaxMissingError
from nsverify.errors import BadArgumentError

pytestmark = pytest.mark.filterwarnings("ignore:index_reduce\\(\\) is in beta")

T = 2.0 ** -12  # into a piece's open set, as tests/test_programs.py
#: the twins and the torch programs are both float64 here: a handful of ops, values below 100, so they agree to
#: a few ulps (1e-12 relative is ~4500 ulps of headroom, and far below any piece's change over T)
REL = 1e-12


@pytest.fixture(scope="module")
def jax():
    jax = pytest.importorskip("jax")
    return jax


def _values(p, xs, jax):
    """(torch's values, the twin's values) of program ``p`` at the float64 points ``xs``."""
    import numpy as np

    with PJ.x64(True):
        twin = [float(p.jax(jax.numpy.asarray(np.array(x, dtype=np.float64)))) for x in xs]
    with torch.no_grad():
        ref = [p.fn(torch.tensor(x, dtype=torch.float64)).item() for x in xs]
    return ref, twin


def test_every_program_has_a_jax_twin():
    """All 30 programs have a twin; where JAX has no op of the torch program's, the note says what stands in."""
    assert len(P.PROGRAMS) >= 30
    for p in P.PROGRAMS:
        assert callable(p.jax), p.name
    notes = {p.name: p.jax_note for p in P.PROGRAMS if p.jax_note}
    assert set(notes) == {"matmul_max_dim", "attention_softmax_max_dim", "multi_margin_logits",
                          "margin_ranking_scores", "index_reduce_amax", "normalize_clamp", "square_index_reduce_amax"}
    assert all("JAX has no" in n for n in notes.values())


@pytest.mark.parametrize("p", P.PROGRAMS, ids=lambda p: p.name)
def test_the_twin_is_the_same_function(p, jax):
    """The twin's value equals the torch program's (float64, an independent forward: no gradient) at the point, a
    step into every piece's open set, and at random points near and farther from it."""
    x0 = [float(v) for v in p.inputs]
    xs = [x0] + [[v + T * float(d) for v, d in zip(x0, q.direction)] for q in p.pieces]
    rng = random.Random(37)
    xs += [[v + s * rng.gauss(0, 1) for v in x0] for s in (1e-3, 1e-3, 0.25, 0.25)]
    ref, twin = _values(p, xs, jax)
    for x, a, b in zip(xs, ref, twin):
        assert abs(a - b) <= REL * max(1.0, abs(a)), (p.name, x, a, b)


# JAX's rules read from its source (jax 0.10), applied by hand: reduce_max/jnp.max and jnp.maximum split a tie
# evenly; jax.nn.relu'(0) = 0; jax.nn.leaky_relu is where(x >= 0, x, a x) (slope 1 at 0); jax.nn.hard_tanh is
# identity on -1 <= x <= 1 (slope 1 at 1); abs's jvp is select(x >= 0, g, -g) (+1 at 0); sort and top_k are stable
# (the lower index first among equal scores).
JAX_BY_HAND = {
    "matmul_amax": [Fraction(1, 2)] * 4,  # (row0 + row1) / 2
    "maximum_branches": [2, Fraction(1, 2)],  # ((1,1) + (3,0)) / 2
    "residual_relu": [0, 0],
    "leaky_relu_layer": [1, -1],
    "hardtanh_layer": [Fraction(1, 2), 1],
    "abs_sum": [1, 1, 1, 1],
    "multi_margin_logits": [0, Fraction(-1, 8)],  # jnp.maximum(0, v) at v = 0: half of the active piece (0, -1/4)
    # s = (2,1,1): ascending s1, s2, s0 weighted 1,2,3: grad = A^T (3,1,2) = (5,4,3)
    "sort_scores": [5, 4, 3],
    # top_k(2) = (s0, s1) weighted 1,2: grad = A^T (1,2,0) = (1,3,2)
    "topk_scores": [1, 3, 2],
}


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_jax_cells_are_what_jaxs_rules_predict_and_judged_exactly(dtype, jax):
    cells = P.run_programs(list(JAX_BY_HAND), [dtype], ["cpu"], P.JAX_MODES)
    assert len(cells) == 2 * len(JAX_BY_HAND)
    for c in cells:
        want = [Fraction(v) for v in JAX_BY_HAND[c.program]]
        assert [Fraction(v) for v in c.gradient] == want, (c.program, c.mode, c.gradient)
        p = P.get(c.program)
        assert c.in_clarke == "yes" and c.piece == P.judge_gradient(p, want)[0]
        assert c.extra["framework"] == "jax" and c.extra["jax"] == jax.__version__
    piece = {c.program: c.piece for c in cells}
    assert piece["matmul_amax"] == "hull" and piece["sort_scores"] == "s1<s2" and piece["abs_sum"] == "plus"


def test_the_float32_sweep_every_twin_both_modes(jax):
    """Every program in jax_grad and jax_jit, float32: every cell judged (none refused), and the measured result
    docs/conventions.md states: none outside the Clarke set, jax_grad and jax_jit equal, no finding."""
    cells = PJ.run(None, ["float32"])
    assert len(cells) == 2 * len(P.PROGRAMS)
    assert all(c.error is None and c.in_clarke == "yes" for c in cells), [c for c in cells if c.in_clarke != "yes"]
    by = {(c.program, c.mode): c.gradient for c in cells}
    assert all(by[(p.name, "jax_grad")] == by[(p.name, "jax_jit")] for p in P.PROGRAMS)
    assert P.program_findings(cells) == []
    assert PJ.summary(cells).endswith("0 outside the Clarke set, 0 refused or without a twin, 0 of 30 "
                                      "jax_grad/jax_jit pairs disagree")


def test_x64_is_switched_per_cell_and_restored(jax):
    before = jax.config.read("jax_enable_x64")
    (c,) = PJ.evaluate_batch([P.get("abs_sum")], "float64", "jax_jit")
    assert c.gradient == [1.0, 1.0, 1.0, 1.0] and c.dtype == "float64"
    assert jax.config.read("jax_enable_x64") == before
    with PJ.x64(True):
        (c,) = PJ.evaluate_batch([P.get("abs_sum")], "float32", "jax_grad")
        assert jax.config.read("jax_enable_x64") is True
    assert jax.config.read("jax_enable_x64") == before and c.gradient == [1.0, 1.0, 1.0, 1.0]


def test_a_jax_finding_has_the_jax_version_and_a_script_that_runs(tmp_path, jax):
    """A jit cell that differs from jax_grad (here a recorded row: JAX agrees on this program) is a finding in
    program_findings' shape, caused by XLA's compilation; its script reruns the twin in JAX."""
    (grad,) = PJ.evaluate_batch([P.get("matmul_amax")], "float32", "jax_grad")
    jit = P.Cell("matmul_amax", "float32", "cpu", "jax_jit", [1.0, 1.0, 0.0, 0.0], "row0", "yes",
                 extra={"framework": "jax", "jax": jax.__version__})
    torch_eager = P.Cell("matmul_amax", "float32", "cpu", "eager", [0.5] * 4, "hull", "yes")
    (f,) = P.program_findings([torch_eager, grad, jit], script_dir=tmp_path)
    assert f["kind"] == "modes_disagree" and f["framework"] == "jax" and f["first_release"] == jax.__version__
    assert f["cause"] == "XLA's compilation (jax.jit of jax.grad differs from eager jax.grad) in float32/jax_jit"
    assert f["sample"]["expected_gradient"]["clarke_hull_of"]["row1"] == ["0", "0", "1", "1"]
    assert {tuple(g["in"]) for g in f["cells"]} == {("float32/jax_grad",), ("float32/jax_jit",)}
    assert f"jax {jax.__version__}" in P.finding_line(f)
    out = subprocess.run([sys.executable, f["repro"]], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f"jax {jax.__version__}, float32")
    assert "jax_jit    ['1/2', '1/2', '1/2', '1/2']  piece: none (hull or outside)" in out.stdout
    # a gradient outside the Clarke set is a finding even when both modes agree on it
    bad = [P.Cell("residual_relu", "float16", "cpu", m, [1.0, 0.0], "outside", "no", extra={"jax": "0.0"})
           for m in P.JAX_MODES]
    (f,) = P.program_findings(bad)
    assert f["kind"] == "outside_clarke" and f["cause"] is None and "def j_residual_relu" in f["repro_script"]


def test_jax_and_torch_differing_is_no_finding():
    """Each framework's rule at a tie is its own convention: torch's eager (row0) and JAX's even split are both in
    the Clarke set, and neither framework's modes disagree."""
    rows = [P.Cell("matmul_max_dim", "float32", "cpu", "eager", [1.0, 1.0, 1.0, -1.0], "row0", "yes"),
            P.Cell("matmul_max_dim", "float32", "cpu", "func", [1.0, 1.0, 1.0, -1.0], "row0", "yes")]
    rows += [P.Cell("matmul_max_dim", "float32", "cpu", m, [0.5, 0.5, 1.5, -0.5], "hull", "yes",
                    extra={"jax": "0.10.2"}) for m in P.JAX_MODES]
    assert P.program_findings(rows) == []


def test_the_cli_prints_the_jax_cells(tmp_path, capsys, jax):
    from nsverify.conventions.cli import main_conventions

    out = tmp_path / "p.json"
    assert main_conventions(["--programs", "--framework", "jax", "--program", "matmul_amax,abs_sum", "--dtype",
                             "float32,bfloat16", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "matmul_amax                cpu   hull" in text
    assert "JAX " + jax.__version__ + ": 8 cells, 0 outside the Clarke set" in text
    data = json.loads(out.read_text())
    assert data["jax"] == jax.__version__ and {r["mode"] for r in data["programs"]} == set(P.JAX_MODES)
    assert main_conventions(["--programs", "--framework", "jax", "--program-modes", "eager,jax_jit"]) == 2
    assert "--framework jax runs the JAX program modes" in capsys.readouterr().err


def test_bad_jax_arguments_name_the_fix(jax, monkeypatch):
    import nsverify.devices

    monkeypatch.setattr(nsverify.devices, "cuda_available", lambda: True)  # a GPU machine: JAX's cells stay on CPU
    with pytest.raises(BadArgumentError, match="CPU only"):
        P.run_programs(["abs_sum"], ["float32"], ["cuda"], ["jax_grad"])
    with pytest.raises(BadArgumentError, match="choose from"):
        PJ.evaluate(P.get("abs_sum"), "float8", "jax_grad")


def test_without_jax_the_jax_modes_name_the_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "jax", None)  # an import of jax raises ImportError, installed or not
    with pytest.raises(JaxMissingError, match=r"pip install 'nsverify\[jax\]'"):
        P.run_programs(["abs_sum"], ["float32"], ["cpu"], ["jax_grad"])
    assert PJ.available() is False


def test_the_report_first_screen_names_the_framework_of_a_finding():
    from nsverify.report.program_findings import program_findings_html

    finding = {"program": "matmul_amax", "kind": "modes_disagree", "device": "cpu", "framework": "jax",
               "first_release": "0.10.2", "cells": [{"piece": "row0", "in": ["float32/jax_jit"]}],
               "cause": "XLA's compilation (jax.jit of jax.grad differs from eager jax.grad) in float32/jax_jit"}
    html = program_findings_html({"sections": {"programs": {"data": {"program_findings": [finding]}}}})
    assert "on cpu, jax 0.10.2: row0 in float32/jax_jit (XLA&#x27;s compilation" in html
    del finding["framework"]  # a torch finding (recorded before JAX's cells) reads as before
    assert "on cpu, torch 0.10.2:" in program_findings_html({"sections": {"programs": {"data": {
        "program_findings": [finding]}}}})


@pytest.mark.parametrize("installed", [True, False])
def test_the_report_section_adds_the_jax_cells_when_jax_is_installed(installed, tmp_path, monkeypatch):
    """The nightly's programs section (cut to three programs and the torch mode eager here, for time): with jax,
    the JAX cells of every program in each dtype and both modes, and their line in the summary; without, a line
    saying so."""
    from nsverify.report import RunContext
    from nsverify.sections import load_sections

    if installed:
        jax = pytest.importorskip("jax")
    else:
        monkeypatch.setitem(sys.modules, "jax", None)
    monkeypatch.setattr(P, "DEFAULT_MODES", ("eager",))
    monkeypatch.setattr(P, "PROGRAMS", tuple(P.get(n) for n in ("matmul_amax", "square_amax", "sort_scores")))
    sec = {s.name: s for s in load_sections()}["programs"]
    out = sec.fn(RunContext(quick=True, section="programs", scratch=tmp_path))
    rows = out["tables"][0]["rows"]
    jax_rows = [r for r in rows if r[2] in P.JAX_MODES]
    if installed:
        assert len(jax_rows) == len(P.PROGRAMS) * 2 * 2  # quick: float32, float16
        assert f"JAX {jax.__version__}: {len(jax_rows)} cells, 0 outside the Clarke set" in out["summary"]
    else:
        assert jax_rows == [] and "JAX is not installed here" in out["summary"]


def my_hinge(x):
    return torch.relu(1 - x[0] * x[1])


def my_hinge_jax(x):
    import jax

    return jax.nn.relu(1 - x[0] * x[1])


def my_broken_jax(x):
    raise TypeError("this twin calls something JAX refuses")


def _mine(name, jax_fn, note=None):
    return P.Program(name, my_hinge, (1, 1), (P.Piece("off", (1, 1), (0, 0)), P.Piece("on", (-1, -1), (-1, -1))),
                     "1 - x0 x1 = 0 at (1,1)", jax=jax_fn, jax_note=note)


def test_a_users_own_program_with_or_without_a_twin(jax):
    """A Program record of the user's own carries its twin; without one the JAX cells say so (never measured), and
    a twin JAX refuses is an error cell, the run going on."""
    cells = P.run_programs([_mine("mine_jax", my_hinge_jax), _mine("mine_none", None, "no twin written yet"),
                            _mine("mine_broken", my_broken_jax)], ["float32"], ["cpu"], ["jax_jit"])
    c = {c.program: c for c in cells}
    assert c["mine_jax"].gradient == [0.0, 0.0] and c["mine_jax"].piece == "off"  # jax.nn.relu'(0) = 0
    assert c["mine_none"].piece == "not_run" and c["mine_none"].error == "no JAX twin: no twin written yet"
    assert c["mine_broken"].piece == "error" and "JAX refuses" in c["mine_broken"].error
    assert P.program_findings(cells) == []
