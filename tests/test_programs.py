"""Programs in the conventions matrix (issue 37): the hand-derived Clarke sets, the exact judging, the findings.

Every piece of every program is re-derived here from one-sided float64 central differences of the program's
VALUES (no AD) at a point inside the piece's open set, every program is probed along random directions for a
piece the table misses, and the programs the exact oracle can read are cross-checked against
``nsverify.check_gradient`` (each piece a member, a point beyond a piece not)."""
from __future__ import annotations

import json
import random
import subprocess
import sys
from fractions import Fraction

import pytest
import torch

import nsverify
from nsverify import registry
from nsverify.conventions import programs as P
from nsverify.errors import BadArgumentError

pytestmark = pytest.mark.filterwarnings("ignore:index_reduce\\(\\) is in beta")

T = 2.0 ** -12  # how far into a piece's open set
H = 2.0 ** -30  # the central-difference step (far smaller than T: the stencil stays in the piece)
TOL = 2e-3  # pieces differ by >= 1/4 in some coordinate; smooth pieces move O(T) ~ 2.4e-4 over T


def _x64(p, shift=None):
    x = torch.tensor([float(v) for v in p.inputs], dtype=torch.float64)
    return x if shift is None else x + shift


def _fd_gradient(p, y, h=H):
    """Central differences of the program's values at ``y`` (float64; no AD)."""
    out = []
    with torch.no_grad():
        for j in range(y.numel()):
            e = torch.zeros_like(y)
            e[j] = h
            out.append((p.fn(y + e).item() - p.fn(y - e).item()) / (2 * h))
    return out


def _close(a, b):
    return max(abs(float(u) - float(v)) for u, v in zip(a, b)) <= TOL


def test_at_least_twenty_programs_with_unique_names_and_pieces():
    assert len(P.PROGRAMS) >= 20
    assert len({p.name for p in P.PROGRAMS}) == len(P.PROGRAMS)
    for p in P.PROGRAMS:
        assert len(p.pieces) >= 2, p.name  # a kink or tie: at least two pieces
        assert len({q.gradient for q in p.pieces}) == len(p.pieces), p.name
        for q in p.pieces:
            assert len(q.gradient) == len(q.direction) == p.n, (p.name, q.label)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_points_and_pieces_are_exact_in_every_dtype(dtype):
    """The tie is exact in every dtype (the input is representable: exact_tensor raises otherwise) and so is every
    piece's gradient, so the judge needs no rounding."""
    for p in P.PROGRAMS:
        registry.exact_tensor(p.inputs, dtype)
        for q in p.pieces:
            assert [registry.round_to_dtype(g, dtype) for g in q.gradient] == list(q.gradient), (p.name, q.label)


@pytest.mark.parametrize("p", P.PROGRAMS, ids=lambda p: p.name)
def test_each_piece_is_the_one_sided_gradient_in_its_direction(p):
    for q in p.pieces:
        d = torch.tensor([float(v) for v in q.direction], dtype=torch.float64)
        fd = _fd_gradient(p, _x64(p, T * d))
        assert _close(fd, q.gradient), (p.name, q.label, fd, [str(g) for g in q.gradient])


@pytest.mark.parametrize("p", P.PROGRAMS, ids=lambda p: p.name)
def test_no_piece_is_missing(p):
    """Along random directions the one-sided gradient is always one of the table's pieces."""
    rng = random.Random(37)
    straddling = 0
    for _ in range(24):
        d = torch.tensor([rng.gauss(0, 1) for _ in range(p.n)], dtype=torch.float64)
        y = _x64(p, T * d / d.norm())
        fd = _fd_gradient(p, y)
        if not _close(fd, _fd_gradient(p, y, 4 * H)):  # the stencil straddles a kink: no one-sided gradient
            straddling += 1
            continue
        assert any(_close(fd, q.gradient) for q in p.pieces), (p.name, d.tolist(), fd)
    assert straddling <= 2, p.name


ORACLE_READS = [p for p in P.PROGRAMS if p.name in {
    "matmul_amax", "matmul_max_dim", "bmm_amin", "conv1d_relu_maxpool1d", "conv2d_relu_maxpool2d",
    "attention_softmax_amax", "attention_softmax_max_dim", "residual_relu", "margin_ranking_scores", "sort_scores",
    "topk_scores", "median_scores", "maximum_branches", "hardtanh_layer", "leaky_relu_layer", "abs_sum",
    "square_amax", "square_amin", "square_max_all", "square_amax_dim"}]


@pytest.mark.parametrize("p", ORACLE_READS, ids=lambda p: p.name)
def test_the_exact_oracle_agrees_with_the_hand_derived_clarke_set(p):
    x = _x64(p)

    def verdict(vec):
        ad = torch.tensor([float(v) for v in vec], dtype=torch.float64)
        return nsverify.check_gradient(p.fn, x, ad=ad, time_limit=60, progress=False).status

    for q in p.pieces:
        assert verdict(q.gradient) == "member", (p.name, q.label)
    first, last = p.pieces[0].gradient, p.pieces[-1].gradient
    beyond = [3 * b - 2 * a for a, b in zip(first, last)]  # on the ray from the first piece past the last
    assert not p.clarke(beyond)
    assert verdict(beyond) == "not_member", p.name


def test_judge_is_exact():
    p = P.get("matmul_amax")
    assert P.judge_gradient(p, [1, 1, 0, 0]) == ("row0", "yes")
    assert P.judge_gradient(p, [Fraction(1, 2)] * 4) == ("hull", "yes")
    assert P.judge_gradient(p, [1, 1, 1, 1]) == ("outside", "no")
    # one ulp of float32 off the even split is outside: no tolerance
    off = Fraction(1, 2) + Fraction(1, 2 ** 24)
    assert P.judge_gradient(p, [off, Fraction(1, 2), Fraction(1, 2), Fraction(1, 2)]) == ("outside", "no")


# PyTorch's documented first-order rules, applied by hand to the programs: amax/amin split a tie evenly, max(dim)
# and max_pool return one index (the first), relu'(0) = 0, clamp passes the gradient at its bound (min <= x <= max),
# hardtanh does not (strict), leaky_relu'(0) = the slope, sign(0) = 0 in abs, the scatter/index amax split evenly.
EAGER_BY_HAND = {
    "matmul_amax": [Fraction(1, 2)] * 4,  # (1/2)(row0 + row1)
    "matmul_max_dim": [1, 1, 1, -1],  # first index: row0
    "bmm_amin": [Fraction(1, 2), Fraction(-1, 2), Fraction(1, 2), Fraction(-1, 2)],
    "conv1d_relu_maxpool1d": [0, 0, 1, -1],  # relu'(0) = 0 whichever index the pool returns
    "attention_softmax_amax": [0] * 6,  # (p0 + p1)/2 = 0
    "residual_relu": [0, 0],
    "norm_clamp": [Fraction(1, 2)] * 4,  # clamp(min=2) passes at 2
    "hardtanh_layer": [0, 0],
    "leaky_relu_layer": [Fraction(1, 4), Fraction(-1, 4)],
    "abs_sum": [0, 0, 0, 0],
    "scatter_amax": [1, 1, 0, 2],
    "maximum_branches": [2, Fraction(1, 2)],  # (a + b)/2
    "square_amax": [1 + Fraction(1, 64), 1 + Fraction(1, 64), 0],  # (2a e0 + 2a e1)/2, eager's tie is exact
    "square_scatter_amax": [1 + Fraction(1, 64), 1 + Fraction(1, 64), 1],
}


@pytest.mark.parametrize("mode", ["eager", "func", "deterministic"])
def test_reverse_modes_measure_what_the_rules_predict(mode):
    cells = P.run_programs(list(EAGER_BY_HAND), ["float32"], ["cpu"], [mode])
    for c in cells:
        assert c.error is None, (c.program, c.error)
        assert [Fraction(v) for v in c.gradient] == [Fraction(v) for v in EAGER_BY_HAND[c.program]], c.program
        assert c.in_clarke == "yes"


def test_jvp_assembles_the_forward_mode_gradient_and_records_refusals():
    cells = {c.program: c for c in P.run_programs(["residual_relu", "index_reduce_amax", "topk_scores"],
                                                  ["float32"], ["cpu"], ["jvp"])}
    assert cells["residual_relu"].gradient == [0.0, 0.0]
    assert cells["index_reduce_amax"].piece == "error" and "forward AD" in cells["index_reduce_amax"].error
    assert cells["topk_scores"].in_clarke == "yes"


def test_bad_arguments_name_the_fix():
    with pytest.raises(BadArgumentError, match="choose from"):
        P.run_programs(["no_such_program"])
    with pytest.raises(BadArgumentError, match="choose from"):
        P.run_programs(None, modes=["eager", "warp"])
    with pytest.raises(BadArgumentError, match="empty"):
        P.run_programs(None, dtypes=[])


def _cell(mode, grad, piece, dtype="float32", inside="yes", program="multi_margin_logits"):
    return P.Cell(program, dtype, "cpu", mode, grad, piece, inside)


def test_findings_name_the_stage_that_disagrees():
    rows = [_cell("eager", [0.0, 0.0], "inactive"), _cell("aot_eager", [0.0, -0.25], "active"),
            _cell("inductor", [0.0, -0.25], "active")]
    (f,) = P.program_findings(rows, first_release="2.13.0")
    assert f["kind"] == "modes_disagree"
    assert f["cause"] == "AOTAutograd's decomposition (aot_eager already differs from eager) in float32/aot_eager"
    assert f["sample"]["op"] == "multi_margin_logits" and f["sample"]["input"] == ["1", "1"]
    assert f["sample"]["expected_gradient"]["clarke_hull_of"]["active"] == ["0", "-1/4"]
    assert f["first_release"] == "2.13.0" and "def p_multi_margin_logits" in f["repro_script"]
    rows = [_cell("eager", [0.0, 0.0], "inactive"), _cell("aot_eager", [0.0, 0.0], "inactive"),
            _cell("inductor", [1.0, 0.0], "outside", inside="no")]
    (f,) = P.program_findings(rows)
    assert f["kind"] == "outside_clarke" and f["cause"].startswith("Inductor's codegen")
    agreeing = [_cell(m, [0.0, 0.0], "inactive") for m in ("eager", "aot_eager", "inductor")]
    assert P.program_findings(agreeing + [P.Cell("multi_margin_logits", "float32", "cpu", "jvp", [], "error",
                                                 "n/a", error="no forward AD")]) == []
    assert "AOTAutograd" in P.finding_line(P.program_findings(rows[:1] + [
        _cell("aot_eager", [0.0, -0.25], "active")])[0])


def test_the_reproduction_script_runs_standalone(tmp_path):
    p = P.get("matmul_max_dim")
    path = P.write_script(p, "float32", "cpu", ["eager", "jvp"], tmp_path)
    out = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "eager          ['1', '1', '1', '-1']  piece: row0" in out.stdout


def test_baseline_without_programs_says_not_in_the_baseline():
    cells = [_cell("eager", [0.0, 0.0], "inactive")]
    assert P.compare_with_baseline(cells, {"results": []}) == ["not in the baseline"]
    stored = {"programs": [dict(P.Cell("multi_margin_logits", "float32", "cpu", "eager", [0.0, -0.25], "active",
                                       "yes").__dict__)]}
    assert P.compare_with_baseline(cells, stored) == ["changed: active -> inactive"]
    assert P.compare_with_baseline([_cell("eager", [0.0, -0.25], "active")], stored) == ["same"]


def test_one_compiled_program_in_a_child_process():
    """Inductor on one program, in a child (the isolation path): a judged cell, in the Clarke set."""
    (c,) = P.run_programs(["matmul_amax"], ["float32"], ["cpu"], ["inductor"], timeout=600)
    assert c.error is None and c.in_clarke == "yes", c


def test_cli_programs_json(tmp_path):
    from nsverify.conventions.cli import main_conventions

    out = tmp_path / "new" / "p.json"  # a missing directory is made
    assert main_conventions(["--programs", "--program", "residual_relu,abs_sum", "--program-modes", "eager,func",
                             "--dtype", "float32", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["schema"] == P.SCHEMA and len(data["programs"]) == 4
    assert main_conventions(["--programs", "--program", "nope"]) == 2


@pytest.mark.slow
def test_full_sweep_every_program_every_mode():
    """The nightly's sweep: every program, every mode and dtype on CPU; every cell judged or refused with a
    reason, crashes isolated."""
    cells = P.run_programs(None, P.DEFAULT_DTYPES, ["cpu"], P.MODES)
    assert len(cells) == len(P.PROGRAMS) * len(P.DEFAULT_DTYPES) * len(P.MODES)
    for c in cells:
        assert c.in_clarke in ("yes", "no") or c.error, c
    for f in P.program_findings(cells):
        assert f["repro_script"] and f["first_release"]


def test_the_release_sweep_dates_a_program_change_and_bisects_for_it(tmp_path):
    """Synthetic releases: the op matrix never changes; multi_margin_logits' aot_eager gradient and abs's double
    backward change at 2.10.0; runs before 2.8.0 hold no programs (recorded before issue 37), which is no change."""
    from nsverify import conventions as cv
    from nsverify.conventions import releases
    from nsverify.conventions.baselines import release_key
    from nsverify.conventions.releases import Sweep

    base = cv.run_matrix(["relu"], ["float32"], ["cpu"], ["eager"])

    def measure(rel):
        data = cv.to_json(base, {"provenance": {"date": "2026-01-01T00:00:00Z"}}) | {"torch": f"{rel}+cpu"}
        if release_key(rel) >= release_key("2.8.0"):
            new = release_key(rel) >= release_key("2.10.0")
            data["programs"] = [dict(P.Cell("multi_margin_logits", "float32", "cpu", "aot_eager",
                                            [0.0, -0.25] if new else [0.0, 0.0], "active" if new else "inactive",
                                            "yes").__dict__)]
            data["grad2"] = [{"case": "abs", "dtype": "float64", "mode": "double_backward",
                              "hessian": [[2.0]] if new else [[0.0]], "bouligand": "right" if new else None,
                              "in_hull": "yes", "error": None}]
        return data

    available = ["2.7.1", "2.8.0", "2.9.0", "2.9.1", "2.10.0", "2.11.0"]
    sweep = Sweep(tmp_path, measure=measure)
    sweep.sweep(["2.7.1", "2.8.0", "2.11.0"])
    sweep.bisect(available)
    assert set(sweep.measured()) == {"2.7.1", "2.8.0", "2.9.1", "2.10.0", "2.11.0"}  # bisected to 2.10.0
    rows = sweep.timeline(available)
    dated = [(r["release"], c["since"], c["before"], c["after"], c["exact"]) for r in rows
             for c in r.get("program_changes", [])]
    assert dated == [("2.10.0", "2.10.0", "inactive", "active", True), ("2.10.0", "2.10.0", "none", "right", True)]
    assert "program multi_margin_logits (float32, aot_eager): inactive -> active since 2.10.0" in \
        releases.format_timeline(rows)


def test_the_report_first_screen_lists_program_findings():
    from nsverify.report.html import render_summary

    rows = [_cell("eager", [0.0, 0.0], "inactive"), _cell("aot_eager", [0.0, -0.25], "active")]
    findings = P.program_findings(rows, first_release="2.13.0")
    report = {"sections": {"programs": {"status": "ok", "data": {"program_findings": findings}}}}
    html = render_summary(report)
    assert 'id="program-findings"' in html and "multi_margin_logits" in html and "AOTAutograd" in html
    assert html.index("program-findings") < html.index('id="plots"') if 'id="plots"' in html else True
    assert 'id="program-findings"' not in render_summary({"sections": {}})


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_cells_are_judged_like_cpu_cells():
    cells = P.run_programs(["matmul_amax", "conv2d_relu_maxpool2d", "scatter_amax"], ["float32", "float16"],
                           ["cuda"], ["eager", "inductor"])
    for c in cells:
        assert c.device.startswith("cuda") and (c.error or c.in_clarke in ("yes", "no")), c


@pytest.mark.slow
def test_the_report_section_runs_quick(tmp_path):
    from nsverify.report import RunContext
    from nsverify.sections import load_sections

    sec = {s.name: s for s in load_sections()}["programs"]
    out = sec.fn(RunContext(quick=True, section="programs", scratch=tmp_path))
    json.dumps(out)
    assert isinstance(out["data"]["program_findings"], list)
    assert {m["key"] for m in out["data"]["metrics"]} >= {"program_findings", "program_cells_outside_clarke"}


def my_hinge(x):
    """A program of the user's own, at the top level of an importable module (a child process imports it)."""
    return torch.relu(1 - x[0] * x[1])


MY_HINGE = P.Program("my_hinge", my_hinge, (1, 1), (P.Piece("off", (1, 1), (0, 0)),
                                                     P.Piece("on", (-1, -1), (-1, -1))), "1 - x0 x1 = 0 at (1,1)")


def test_a_users_own_program_runs_in_every_mode_isolated_or_not():
    cells = P.run_programs([MY_HINGE], ["float32"], ["cpu"], ["eager", "aot_eager"])
    assert [(c.mode, c.piece, c.in_clarke) for c in cells] == [("eager", "off", "yes"), ("aot_eager", "off", "yes")]
    assert "in_process" not in cells[1].extra  # imported by the child
    local = P.Program("my_lambda", lambda x: (x[0] - x[1]).abs(), (1, 1),
                      (P.Piece("plus", (1, 0), (1, -1)), P.Piece("minus", (-1, 0), (-1, 1))), "|x0 - x1| at 0")
    (c,) = P.run_programs([local], ["float32"], ["cpu"], ["aot_eager"])
    assert c.piece == "hull" and c.gradient == [0.0, 0.0] and "in_process" in c.extra  # sign(0) = 0
    with pytest.raises(BadArgumentError, match="one per input"):
        P.Program("bad", my_hinge, (1, 1), (P.Piece("a", (1,), (0, 0)),), "")
    with pytest.raises(BadArgumentError, match="taken"):
        P.run_programs([P.Program("matmul_amax", my_hinge, (1, 1), MY_HINGE.pieces, "")], ["float32"])


def test_a_nan_gradient_is_outside_the_clarke_set_and_a_finding():
    """The shape of the 16-bit Inductor NaN (docs/conventions.md): a compiled function returning NaN is judged
    ``nonfinite``, outside the Clarke set, and the finding names Inductor's codegen when aot_eager agrees."""
    p = P.get("square_amax")
    nan = P.evaluate(p, "float16", "cpu", "inductor", compiled=lambda x: (x * x).amax() * float("nan"))
    assert (nan.piece, nan.in_clarke) == ("nonfinite", "no") and nan.gradient == ["nan"] * 3
    eager = P.evaluate(p, "float16", "cpu", "eager")
    aot = P.Cell(p.name, "float16", "cpu", "aot_eager", eager.gradient, eager.piece, eager.in_clarke)
    (f,) = P.program_findings([eager, aot, nan])
    assert f["kind"] == "outside_clarke"
    assert f["cause"] == "Inductor's codegen (aot_eager agrees with eager) in float16/inductor"
    assert json.loads(json.dumps(f))["cells"][-1]["gradient"] == ["nan"] * 3


def test_a_release_environment_that_cannot_run_the_programs_keeps_its_matrix(tmp_path):
    """run_in_env's failure is a recorded reason, never an exception that would lose the release's op matrix."""
    with open(tmp_path / "log.txt", "w", encoding="utf-8") as log:
        got = P.run_in_env(tmp_path / "no-env" / "bin" / "python", tmp_path, tmp_path / "p.json", log, timeout=60)
    assert set(got) == {"programs_error"} and "running the programs" in got["programs_error"]
    cmd = P.in_env_command("PY", "OUT")
    assert cmd[:4] == ["PY", "-m", "nsverify.conventions.programs", "--run"] and cmd[-2:] == ["--json", "OUT"]


def test_the_release_entry_point_writes_programs_and_grad2(tmp_path):
    out = tmp_path / "r.json"
    res = subprocess.run([sys.executable, "-m", "nsverify.conventions.programs", "--run", "--modes", "eager",
                          "--dtype", "float32", "--json", str(out)], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    data = json.loads(out.read_text())
    assert len(data["programs"]) == len(P.PROGRAMS) and data["grad2"] and data["grad2_agreement"]


def test_the_stored_cuda_run_is_summarised_with_its_provenance(tmp_path):
    """The programs section's CUDA line counts the stored run's cells itself (outside, non-finite, refused) and
    names the run; a stored file without provenance is refused, not shown."""
    import json

    from nsverify.claims.provenance import ProvenanceError
    from nsverify.sections.programs import cuda_cells

    cells = [{"program": "p", "dtype": "float16", "device": "cuda", "mode": m, "gradient": g, "piece": piece,
              "in_clarke": inside, "error": None, "extra": {}}
             for m, g, piece, inside in (("eager", [0.5], "hull", "yes"), ("inductor", ["nan"], "nonfinite", "no"),
                                         ("jvp", [], "error", "n/a"), ("func", [2.0], "none", "no"))]
    prov = {"device": "NVIDIA H200", "torch": "2.11.0+cu130", "date": "2026-11-28T18:24:05Z", "command": "x",
            "commit": "758b65e5cc96"}
    path = tmp_path / "programs.json"
    path.write_text(json.dumps({"provenance": prov, "programs": cells, "findings": []}))
    got = cuda_cells(path)
    assert (got["cells"], got["outside"], got["nonfinite"], got["refused"]) == (4, 2, 1, 1)
    assert "NVIDIA H200" in got["line"] and "2026-11-28" in got["line"] and "758b65e" in got["line"]
    path.write_text(json.dumps({"programs": cells, "findings": []}))
    with pytest.raises(ProvenanceError):
        cuda_cells(path)
    assert cuda_cells(tmp_path / "absent.json") is None
