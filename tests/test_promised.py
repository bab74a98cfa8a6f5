"""The promised column: PyTorch's documented rule at every conventions cell, computed exactly.

Expected values are derived by hand (the minimum-norm element of an interval or of a small hull) or by an
independent computation (every face of a hull solved exactly, brute force; midpoint convexity of the op itself
in float64 at dyadic points), never read from the implementation."""
from __future__ import annotations

import itertools
import json
import random
import subprocess
import sys
from fractions import Fraction as F
from pathlib import Path

import pytest
import torch

from nsverify import registry
from nsverify.cli import main
from nsverify.conventions import baselines as bl
from nsverify.conventions import findings as fd
from nsverify.conventions.matrix import Result, run_matrix
from nsverify.conventions.promised import annotate, follows, follows_value, promise
from nsverify.rational import dot, hull_weights, nearest_point, nearest_point_kkt, null_space, project_affine

ROOT = Path(__file__).resolve().parents[1]


# ----------------------------------------------------------------------------------------------------------
# the QP: nearest point of a hull, exact
# ----------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("verts,point,want", [
    ([[0], [1]], None, [0]),                                   # relu's [0, 1]
    ([[-1], [1]], None, [0]),                                  # abs's [-1, 1]
    ([[F(1, 100)], [1]], None, [F(1, 100)]),                   # leaky_relu: the left endpoint
    ([[1, 0], [0, 1]], None, [F(1, 2), F(1, 2)]),              # the segment [e1, e2]
    ([[1, 0, 0], [0, 1, 0], [0, 0, 1]], None, [F(1, 3)] * 3),  # the simplex
    ([[1, 2], [3, -1]], None, [F(21, 13), F(14, 13)]),         # p = (1,2) + s (2,-3), s = 4/13
    ([[0, 0], [1, 0], [0, 1]], [1, 1], [F(1, 2), F(1, 2)]),    # the nearest point to (1, 1)
])
def test_nearest_point_by_hand(verts, point, want):
    p, w = nearest_point(verts, point)
    assert p == want
    assert sum(w) == 1 and all(x >= 0 for x in w)
    assert [sum(wi * F(v[k]) for wi, v in zip(w, verts)) for k in range(len(want))] == want


def _brute_force_min_norm(verts):
    """Independent: every subset of vertices, its affine-hull projection of 0, kept when inside the subset's hull;
    the smallest norm wins."""
    best = None
    n = len(verts[0])
    for k in range(1, min(len(verts), n + 1) + 1):
        for sub in itertools.combinations(verts, k):
            v0 = sub[0]
            D = [[F(a) - F(b) for a, b in zip(v, v0)] for v in sub[1:]]
            N = null_space(D, n) if D else [[F(int(i == j)) for j in range(n)] for i in range(n)]
            p = project_affine(N, [dot(r, v0) for r in N], [F(0)] * n)
            if p is None or hull_weights(p, sub) is None:
                continue
            if best is None or dot(p, p) < dot(best, best):
                best = p
    return best


def test_nearest_point_matches_brute_force_on_random_hulls():
    rng = random.Random(7)
    for _ in range(25):
        n, m = rng.randint(1, 3), rng.randint(1, 5)
        verts = [[F(rng.randint(-4, 4), rng.choice([1, 2, 4])) for _ in range(n)] for _ in range(m)]
        p, _ = nearest_point(verts)
        assert p == _brute_force_min_norm(verts), verts


def test_kkt_rejects_a_point_that_is_not_nearest():
    verts = [[1, 0], [0, 1]]
    assert nearest_point_kkt([F(1, 2), F(1, 2)], verts)
    assert not nearest_point_kkt([F(1), F(0)], verts)


# ----------------------------------------------------------------------------------------------------------
# elementwise kinks: by hand from the pieces
# ----------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("op,case,shape,value", [
    ("relu", "x=0", "convex", (0,)),                   # [0, 1] -> 0
    ("leaky_relu", "x=0", "convex", (F(1, 100),)),     # [1/100, 1] -> 1/100
    ("prelu", "x=0", "convex", (F(1, 4),)),
    ("relu6", "x=0", "convex", (0,)),
    ("relu6", "x=6", "concave", (0,)),                 # slopes 1 then 0: concave, [0, 1] -> 0
    ("hardtanh", "x=-1", "convex", (0,)),
    ("hardtanh", "x=1", "concave", (0,)),
    ("hardsigmoid", "x=-3", "convex", (0,)),           # [0, 1/6] -> 0
    ("hardsigmoid", "x=3", "concave", (0,)),
    ("abs", "x=0", "convex", (0,)),                    # [-1, 1] -> 0
    ("clamp", "x=0", "convex", (0,)),
    ("clamp", "x=1", "concave", (0,)),
    ("elu", "x=0", "differentiable", (1,)),            # alpha = 1: both sides 1
])
def test_elementwise_promises_by_hand(op, case, shape, value):
    p = promise(op, case)
    assert (p.shape, p.value) == (shape, tuple(F(v) for v in value))
    assert p.inputs.startswith("x")


@pytest.mark.parametrize("op,case,shape", [
    # hardswish at -3: slopes 0 then -1/2 (concave), but the right piece x/2 + x^2/6 is convex: neither
    ("hardswish", "x=-3", "neither"),
    # at 3: slopes 3/2 then 1 (concave), the left piece convex: neither
    ("hardswish", "x=3", "neither"),
    # selu: an exponential piece, whose convexity is not decided exactly
    ("selu", "x=0", "undecided"),
])
def test_elementwise_not_covered(op, case, shape):
    p = promise(op, case)
    assert p.shape == shape and p.value is None and p.text() == "not covered" and p.reason


# ----------------------------------------------------------------------------------------------------------
# tie cases: by hand, in the space of the case's inputs
# ----------------------------------------------------------------------------------------------------------
H = F(1, 2)


@pytest.mark.parametrize("op,case,value", [
    # maximum: inputs x = (1, 0, 2), y = (1, 3, 2), cotangent (1, 2, 3); ties in columns 0 and 2, each split
    # evenly (the min-norm point of the segment [c e_x, c e_y]); column 1 takes y
    ("maximum", "x == y", (H, 0, F(3, 2), H, 2, F(3, 2))),
    ("minimum", "x == y", (H, 0, F(3, 2), H, 2, F(3, 2))),
    ("amax", "3 ties", (F(1, 3), F(1, 3), 0, F(1, 3))),      # the centroid of e0, e1, e3
    ("amax", "all tied", (F(1, 4),) * 4),
    ("max_dim", "ties in rows", (H, H, 0, 1, 0, 1)),         # rows [1,1,0] and [2,0,2], cotangent (1, 2)
    ("max_pool1d", "Despres (t, 4t) at t=0", (H, H)),
    # sort, ascending, cotangent (1,2,3,4), x = (1,0,1,1): entry 1 is the minimum (weight 1); the three tied 1s
    # take the weights 2, 3, 4 in some order: the permutohedron's centre (3, 3, 3)
    ("sort", "3 tied", (3, 1, 3, 3)),
    # clamp(x, min, max), rows x = (0,1,2), min = (0,0,0), max = (1,1,3), cotangent (1,2,3): column 0 ties x with
    # min (locally max(x, min): convex, split 1/2, 1/2), column 1 ties x with max (min(x, max): concave, weight 2
    # split 1, 1), column 2 is inside (3 to x)
    ("clamp_tensor", "x == min, x == max", (H, 1, 3, H, 0, 0, 0, 1, 0)),
    # x = 2 < min = max = 3: the output is min(min, max) locally: concave, the split 1/2, 1/2
    ("clamp_tensor", "min == max > x", (0, H, H)),
])
def test_tie_promises_by_hand(op, case, value):
    p = promise(op, case)
    assert p.value == tuple(F(v) for v in value)
    assert "entries of the input tensor" in p.inputs


@pytest.mark.parametrize("op,case", [("median", "3 tied at the median"), ("median", "all tied"),
                                     ("median_dim", "3 tied"), ("topk", "3 tied, k=2"),
                                     ("kthvalue", "3 tied at k=2")])
def test_middle_ranks_are_not_covered(op, case):
    p = promise(op, case)
    assert p.shape == "neither" and p.value is None


def _midpoint_violations(fn, x0, cot, trials=300, seed=3):
    """Independent of the promise code: f at x0 + a, x0 + b and their midpoint, in float64 at dyadic points
    (exact), counting violations of midpoint convexity and of midpoint concavity."""
    rng = random.Random(seed)
    x0 = torch.tensor([float(v) for v in x0], dtype=torch.float64)
    c = None if cot is None else torch.tensor([float(v) for v in cot], dtype=torch.float64)

    def f(t):
        y = fn(t)
        return float((y * c).sum() if c is not None else y.sum())
    vex = cave = 0
    for _ in range(trials):
        a = torch.tensor([rng.randint(-4, 4) / 64 for _ in range(len(x0))], dtype=torch.float64)
        b = torch.tensor([rng.randint(-4, 4) / 64 for _ in range(len(x0))], dtype=torch.float64)
        lhs, rhs = f(x0 + (a + b) / 2), (f(x0 + a) + f(x0 + b)) / 2
        vex += lhs > rhs
        cave += lhs < rhs
    return vex, cave


@pytest.mark.parametrize("op,case", [("sort", "3 tied"), ("topk", "3 tied, k=2"), ("median", "all tied"),
                                     ("amax", "all tied"), ("amin", "all tied"),
                                     ("clamp_tensor", "min == max > x")])
def test_convexity_decision_agrees_with_midpoint_test(op, case):
    entry = registry.get(op)
    c = next(c for c in entry.cases if c.label == case)
    fn = lambda t: entry.torch_fn(t.reshape(c.shape))  # noqa: E731
    vex, cave = _midpoint_violations(fn, c.values, c.cotangent)
    shape = promise(op, case).shape
    assert {"convex": vex == 0 and cave > 0, "concave": cave == 0 and vex > 0,
            "neither": vex > 0 and cave > 0}[shape], (shape, vex, cave)


# ----------------------------------------------------------------------------------------------------------
# follows, per cell and across the recorded releases
# ----------------------------------------------------------------------------------------------------------
def test_follows_value_exact_rounding_and_not():
    third = (F(1, 3), F(1, 3), F(0), F(1, 3))
    f32 = float(torch.tensor(1 / 3, dtype=torch.float32))
    assert follows_value(third, [f32, f32, 0.0, f32], "float32") == "rounding"
    assert follows_value((F(1, 2),), [0.5], "float32") == "yes"
    assert follows_value((F(0),), [0.5], "float32") == "no"
    assert follows_value(None, [0.5], "float32") == "not covered"


def _recorded(op, case, release, mode="eager", dtype="float32", framework="torch"):
    run = bl.load_cached(release, bl.DATA_DIRS[framework])
    return run.results[(op, case, dtype, "cpu", mode)]


@pytest.mark.parametrize("release", ["2.4.1", "2.13.0", "2.14.0", "2.14.1"])
def test_relu_follows_and_maximum_with_both_inputs_follows(release):
    assert follows(_recorded("relu", "x=0", release)) == "yes"             # relu'(0) = 0
    assert follows(_recorded("maximum", "x == y", release)) == "yes"       # 1/2 each: the min-norm of [e_x, e_y]


def test_clamp_breaks_before_2_14_and_follows_from_2_14():
    assert follows(_recorded("clamp", "x=0", "2.13.0")) == "no"    # 1 against the min-norm 0
    assert follows(_recorded("clamp", "x=0", "2.14.0")) == "yes"
    hist = {(h["op"], h["case"]): h for h in fd.promise_history()}
    for case in ("x=0", "x=1"):
        h = hist[("clamp", case)]
        assert (h["first_release"], h["first_is_oldest"], h["follows_from"], h["now"]) == (
            "2.4.1", True, "2.14.0", "follows")
    assert ("relu", "x=0") not in hist and ("maximum", "x == y") not in hist
    h = hist[("clamp_tensor", "min == max > x")]  # 0 before 2.14, e_max from 2.14: neither is (0, 1/2, 1/2)
    assert h["now"] == "breaks" and h["follows_from"] is None


def test_jax_relu_against_its_own_documented_convention_and_abs_breaks():
    p = promise("relu", "x=0", "jax")
    assert p.source == "JAX's documented convention" and p.value == (0,)
    assert promise("abs", "x=0", "jax").source.startswith("PyTorch's documented rule (JAX documents")
    hist = {(h["op"], h["case"]): h for h in fd.promise_history("jax")}
    assert ("relu", "x=0") not in hist
    assert hist[("abs", "x=0")]["derivative"] == [1.0]   # jax.grad(jnp.abs)(0.) = 1 against the min-norm 0


def test_run_matrix_fills_the_column():
    rs = run_matrix(["relu", "clamp"], ["float32"], ["cpu"], ["eager"])
    got = {(r.op, r.case): (r.promised, r.follows) for r in rs}
    assert got == {("relu", "x=0"): ("0", "yes"), ("clamp", "x=0"): ("0", "no"), ("clamp", "x=1"): ("0", "no")}


def test_error_cells_are_not_judged():
    r = Result("relu", "x=0", "float32", "cpu", "compile", [], "error", "n/a", "left", False, error="boom")
    annotate([r])
    assert r.follows == "n/a" and r.promised == "0"


def test_unknown_case_raises_with_the_known_ones():
    with pytest.raises(KeyError, match="its kinks are"):
        promise("relu", "x=1")


# ----------------------------------------------------------------------------------------------------------
# the findings export
# ----------------------------------------------------------------------------------------------------------
def test_export_findings_cli(tmp_path, capsys):
    out = tmp_path / "findings"
    assert main(["conventions", "--ops", "relu,clamp", "--dtype", "float32", "--modes", "eager", "--in-process",
                 "--baseline", "none", "--export-findings", str(out)]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "breaks: clamp at x=0: promised 0, got 1" in text
    index = json.loads((out / "index.json").read_text())
    assert index["schema"] == "nsverify.findings/1"
    by_id = {f["id"]: f for f in index["findings"]}
    clamp = json.loads((out / by_id["promise_torch_clamp_x_0"]["json"]).read_text())
    assert clamp["first_release"] == "2.4.1" and clamp["detail"]["follows_from"] == "2.14.0"
    assert clamp["sample"]["op"] == "torch.clamp" and clamp["sample"]["kwargs"] == {"min": 0.0, "max": 1.0}
    assert clamp["sample"]["expected_grad"] == ["0"]
    assert not any("relu_x_0" in i and i.startswith("promise") for i in by_id)  # relu follows
    pair = json.loads((out / by_id["formulations_relu_x_0_relu_vs_maximum_x__0_"]["json"]).read_text())
    assert pair["got"] == [[0.0], [0.5]] and pair["expected"] == ["0"]
    proc = subprocess.run([sys.executable, str(out / by_id["formulations_relu_x_0_relu_vs_maximum_x__0_"]["script"])],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "relu [0.0]" in proc.stdout and "maximum(x, 0) [0.5]" in proc.stdout
    proc = subprocess.run([sys.executable, str(out / by_id["promise_torch_clamp_x_0"]["script"])],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "derivative: [1.0]" in proc.stdout


def test_export_findings_rejects_a_file(tmp_path, capsys):
    f = tmp_path / "file"
    f.write_text("x")
    assert main(["conventions", "--ops", "relu", "--export-findings", str(f)]) == 2
    assert "--export-findings" in capsys.readouterr().err


# ----------------------------------------------------------------------------------------------------------
# the report: the section and the first screen
# ----------------------------------------------------------------------------------------------------------
def test_promised_section_and_first_screen(tmp_path):
    from nsverify.report.nightly import run_nightly
    from nsverify.sections import load_sections

    secs = [s for s in load_sections() if s.name == "promised"]
    run = run_nightly(tmp_path, quick=True, sections=secs, stream=open("/dev/null", "w"))
    report = json.loads((run / "report.json").read_text())
    sec = report["sections"]["promised"]
    assert sec["status"] == "ok", sec.get("error")
    found = {f["id"]: f for f in sec["data"]["findings"]}
    assert found["promise_torch_clamp_x_0"]["first_release"] == "2.4.1"
    assert "follows it from 2.14.0" in found["promise_torch_clamp_x_0"]["title"]
    assert "formulations_relu_x_0_relu_vs_maximum_x__0_" in found
    assert set(sec["data"]["repro"]) == set(found)
    held = {c["id"]: c["held"] for c in sec["claims"]}
    assert held == {"promised/relu-follows": True, "promised/clamp-follows-from-2.14": True,
                    "promised/maximum-x-0-breaks": True}, sec["claims"]
    metrics = {m["key"]: m["value"] for m in sec["data"]["metrics"]}
    assert metrics["promised|torch|clamp|x=0"] == "follows" and metrics["promised|jax|abs|x=0"] == "breaks"
    html = (run / "index.html").read_text()
    summary = html[html.index('<div id="summary">'):html.index('<div id="plots">') if '<div id="plots">' in html
                   else len(html)]
    assert 'id="findings-title"' in summary and "clamp at x=0: promised 0, got 1" in summary
    first = summary[summary.index('id="findings-formulations"'):]
    first = first[:first.index("</ul>")]  # the first items, before any collapsed rest
    assert "relu at x=0: relu gives [0.0], maximum(x, 0) gives [0.5]" in first


def test_jax_cli_prints_the_promise_and_exports(tmp_path, capsys, monkeypatch):
    """The JAX path of the command without jax installed: the recorded JAX 0.10.2 cells stand in for a run."""
    from nsverify.conventions import jax_matrix as jm

    run = bl.load_cached("0.10.2", bl.DATA_DIRS["jax"])
    cells = [r for r in run.results.values() if r.op in ("abs", "relu") and r.dtype == "float32"]
    monkeypatch.setattr(jm, "require_jax", lambda: None)
    monkeypatch.setattr(jm, "versions", lambda: {"jax": "0.10.2", "jaxlib": "0.10.2"})
    monkeypatch.setattr(jm, "run_matrix", lambda ops, dtypes, modes, progress=None: list(cells))
    out = tmp_path / "f"
    assert main(["conventions", "--framework", "jax", "--ops", "abs,relu", "--dtype", "float32", "--baseline",
                 "none", "--export-findings", str(out)]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "breaks: abs at x=0: promised 0, got 1" in text and "breaks: relu" not in text
    index = json.loads((out / "index.json").read_text())
    assert [f["id"] for f in index["findings"]] == ["promise_jax_abs_x_0"]
    assert index["findings"][0]["first_release"] == "0.4.26"
    assert "jax.grad" in (out / "promise_jax_abs_x_0.py").read_text()


def test_releases_command_tables_the_promise(tmp_path, capsys, monkeypatch):
    """``nsverify releases`` over two measured releases (the shipped 2.13.0 and 2.14.0 runs stand in for a sweep:
    nothing is installed): its table names clamp's promise break, its first measured release and 2.14.0."""
    import shutil

    from nsverify.conventions import envs, releases

    for rel in ("2.13.0", "2.14.0"):
        shutil.copyfile(bl.DATA_DIR / f"{rel}.json", tmp_path / f"{rel}.json")
    monkeypatch.setattr(releases, "available_releases", lambda *a, **k: ["2.13.0", "2.14.0"])
    monkeypatch.setattr(envs.Installer, "detect", classmethod(lambda cls, *a, **k: None))
    assert main(["releases", "2.13..2.14", "--out", str(tmp_path)]) == 0
    table = (tmp_path / "table.md").read_text()
    assert "| clamp | x=0 | 0 | 1 (float32, eager) | 2.13.0 (first measured) | 2.14.0 |" in table
    assert "| relu |" not in table


@pytest.mark.parametrize("cot,pieces,shape", [([1, -1], [(1, -1), (-1, 1)], "convex"),
                                              ([-1, 1], [(-1, 1), (1, -1)], "concave"),
                                              ([1, 1], [(1, 1)], "convex")])
def test_mixed_windows_are_decided_by_enumeration(cot, pieces, shape):
    """max(x0, x1) - min(x0, x1) = |x0 - x1| (convex), its negative (concave), and max + min = x0 + x1 (one piece)
    at x0 == x1: windows of both directions in one block, decided by the ordering cones from the Bouligand set
    derived by hand."""
    from nsverify.conventions.promised import _block_shape
    from nsverify.registry import Window, selection_case

    case = selection_case("x0 == x1", [1, 1], (2,), [Window((0, 1), 0, "max"), Window((0, 1), 0, "min")], "first",
                          cotangent=cot)
    assert _block_shape(case, [0, 1], [0, 1], sorted(tuple(F(v) for v in p) for p in pieces)) == shape


def test_mixed_windows_with_a_wrong_recorded_set_are_undecided():
    """The registry enumerates the pieces of a block with windows of both directions with one tie-break key, so
    for max(x0, x1) - min(x0, x1) it records {(0, 0)} where the Bouligand set is {(1, -1), (-1, 1)}: the promise
    checks the recorded set against the ordering cones and decides nothing."""
    from nsverify.conventions.promised import tie_promise
    from nsverify.registry import Window, selection_case

    case = selection_case("x0 == x1", [1, 1], (2,), [Window((0, 1), 0, "max"), Window((0, 1), 0, "min")], "first",
                          cotangent=[1, -1])
    p = tie_promise("max-min", case)
    assert p.shape == "undecided" and p.value is None and "both directions" in p.reason


def test_jax_relu6_follows_its_documented_convention():
    for case in ("x=0", "x=6"):
        p = promise("relu6", case, "jax")
        assert p.source == "JAX's documented convention" and p.value == (0,)
        assert follows(_recorded("relu6", case, "0.10.2", mode="grad", framework="jax"), "jax") == "yes"


def test_a_new_entry_gets_its_promise_without_code_of_its_own():
    """A scoped registration (a new activation, hand-derived: slopes 1/4 then 2, both affine: convex, the Clarke
    interval [1/4, 2], minimum-norm element 1/4)."""
    from nsverify.registry import Elementwise, lin, registered

    entry = Elementwise("test_bent_line", (), None, (F(0),), (lin(F(1, 4)), lin(2)), ("right",))
    with registered(entry):
        p = promise("test_bent_line", "x=0")
        assert (p.shape, p.value) == ("convex", (F(1, 4),))


def test_promise_claims_fail_and_stay_undecided_as_they_should():
    from nsverify.conventions.claims import promise_claims

    hist = fd.promise_history()
    fake_relu = dict(next(h for h in hist if h["op"] == "clamp"), op="relu", case="x=0")
    out = {c["id"]: c["held"] for c in promise_claims(hist + [fake_relu], ["2.13.0", "2.14.0"], [1.0])}
    assert out == {"promised/relu-follows": False, "promised/clamp-follows-from-2.14": True,
                   "promised/maximum-x-0-breaks": False}
    out = {c["id"]: c["held"] for c in promise_claims(hist, ["2.13.0"], None)}
    assert out["promised/clamp-follows-from-2.14"] is None and out["promised/maximum-x-0-breaks"] is None


def test_hulls_up_to_exact_hull_need_no_float_solver(monkeypatch):
    """Up to EXACT_HULL vertices Wolfe's algorithm runs in exact arithmetic, so the conventions matrix runs where
    cvxpy is not installed (a GPU machine's own environment); a larger hull still asks the float QP for its face."""
    from nsverify import rational

    def no_solver(*_a, **_k):
        raise ModuleNotFoundError("No module named 'cvxpy'")

    monkeypatch.setattr(rational, "hull_qp_float", no_solver)
    assert nearest_point([[-1], [1]])[0] == [0]
    assert nearest_point([[1, 0, 0], [0, 1, 0], [0, 0, 1]])[0] == [F(1, 3)] * 3
    assert nearest_point([[1, 2], [3, -1], [5, 5], [2, 7]])[0] == [F(21, 13), F(14, 13)]
    # a 17-way tie (sort_unstable's): the unit vectors, nearest point their centroid
    eye = [[int(i == j) for j in range(17)] for i in range(17)]
    assert nearest_point(eye)[0] == [F(1, 17)] * 17
    big = [[1, 0], [-1, 0]] + [[i, 5 + i] for i in range(rational.EXACT_HULL - 1)]  # nearest: 0, not a vertex
    with pytest.raises(ModuleNotFoundError):
        nearest_point(big)


@pytest.mark.parametrize("exact_hull", [2048, 0])
def test_both_routes_match_brute_force(monkeypatch, exact_hull):
    """Wolfe's exact algorithm and the float QP's face (forced with EXACT_HULL = 0) against the brute force."""
    from nsverify import rational

    monkeypatch.setattr(rational, "EXACT_HULL", exact_hull)
    rng = random.Random(11)
    for _ in range(40):
        n, m = rng.randint(1, 4), rng.randint(2, 7)
        verts = [[F(rng.randint(-4, 4), rng.choice([1, 2, 4])) for _ in range(n)] for _ in range(m)]
        point = [F(rng.randint(-2, 2)) for _ in range(n)] if rng.random() < 0.5 else None
        shifted = verts if point is None else [[a - b for a, b in zip(v, point)] for v in verts]
        got = nearest_point(verts, point)
        want = _brute_force_min_norm(shifted)
        assert got is not None and [a - b for a, b in zip(got[0], point or [0] * n)] == want, (verts, point)
