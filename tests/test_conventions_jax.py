"""JAX as the second framework of the conventions matrix (issue 27): the registry's JAX expressions, the one judging
code shared with PyTorch, the JAX matrix and its CLI, JAX releases (environments, sweep, reproduction scripts), the
side-by-side table with PyTorch, and import isolation (nothing imports jax unless asked).

Tests that evaluate JAX skip cleanly without it (``pip install 'nsverify[jax]'``). Expected values come from the
registry's exact pieces and Clarke sets (or are constructed by the test), never from JAX's output."""
import importlib.util
import json
import subprocess
import sys
from dataclasses import replace
from fractions import Fraction

import pytest

from nsverify import registry
from nsverify.conventions import baselines, judge, sidebyside
from nsverify.conventions.matrix import FRAMEWORK_MODES, Result, build_cases

HAS_JAX = importlib.util.find_spec("jax") is not None
needs_jax = pytest.mark.skipif(not HAS_JAX, reason="jax is not installed: pip install 'nsverify[jax]'")
JAX_DIR = baselines.DATA_DIRS["jax"]


# ----------------------------------------------------------------------------------------------------------
# the registry: one op table with both frameworks' expressions
# ----------------------------------------------------------------------------------------------------------
def test_every_registry_op_has_a_jax_expression_or_says_why_not():
    for name in registry.names():
        e = registry.get(name)
        assert (e.jax is None) != (not e.jax_note) or e.jax is not None, name
        if e.jax is None:
            assert len(e.jax_note) > 20, f"{name}: no JAX expression and no reason"
        else:
            compile(e.jax, name, "eval")  # a syntax error in the table fails here, without jax
    with_jax = [n for n in registry.names() if registry.get(n).jax is not None]
    assert len(with_jax) >= 20


def test_jax_cases_are_the_torch_cases_of_the_ops_with_a_counterpart():
    torch_cases = [(c.op, c.label, c.values, c.cotangent) for c in build_cases()]
    jax_cases = [(c.op, c.label, c.values, c.cotangent) for c in build_cases(framework="jax")]
    missing = {n for n in registry.names() if registry.get(n).jax is None}
    assert jax_cases == [t for t in torch_cases if t[0] not in missing]
    assert missing == {"adaptive_max_pool2d", "prelu",
                       # issue 36: JAX defines no loss functions, no softshrink, mish, rrelu, index_reduce,
                       # embedding_bag or adaptive pooling
                       "l1_loss", "smooth_l1_loss", "huber_loss", "hinge_embedding_loss", "margin_ranking_loss",
                       "multi_margin_loss", "multilabel_margin_loss", "soft_margin_loss", "softshrink", "mish",
                       "rrelu", "index_reduce_amax", "index_reduce_amin", "embedding_bag_max", "adaptive_max_pool1d"}


# ----------------------------------------------------------------------------------------------------------
# the one judging code (shared by both frameworks)
# ----------------------------------------------------------------------------------------------------------
def _case(op, label=None):
    return next(c for c in build_cases([op], framework="jax") if label is None or c.label == label)


@pytest.mark.parametrize("op,label", [("relu", None), ("abs", None), ("clamp", "x=0"), ("hardtanh", "x=1")])
def test_judge_names_each_one_sided_rule_and_rejects_a_value_outside_the_interval(op, label):
    case = _case(op, label)
    e = registry.get(op)
    i = e.breakpoints.index(case.values[0])
    left, right = e.one_sided(case.values[0])
    for name, want in (("left", left), ("right", right), ("even", (left + right) / 2)):
        v = judge.judge(case, [Fraction(want)], "float32", None)
        assert (v.rule, v.in_clarke, v.as_expected) == (name, "yes", True)
    outside = max(left, right) + 1
    v = judge.judge(case, [Fraction(outside)], "float64", None)
    assert (v.rule, v.in_clarke, v.as_expected) == ("other", "no", False)
    assert i >= 0


def test_judge_at_a_tie_uses_the_exact_bouligand_hull():
    case = _case("maximum")
    even = case.rules["even"]
    assert judge.judge(case, list(even), "float32", None).in_clarke == "yes"
    bad = [Fraction(2) * v for v in even]  # twice the even split: outside conv{pieces}
    v = judge.judge(case, bad, "float32", None)
    assert (v.in_clarke, v.as_expected) == ("no", False)


def test_judge_rounding_status_for_a_third():
    case = _case("amax", "3 ties")
    third = [judge.rounded(v, "float32") for v in case.rules["even"]]
    v = judge.judge(case, third, "float32", None)
    assert (v.rule, v.in_clarke, v.as_expected) == ("even", "rounding", True)


def test_torch_matrix_uses_the_shared_judge():
    from nsverify.conventions import matrix

    assert matrix.judge is judge.judge and matrix.KINK_CANDIDATES is judge.KINK_CANDIDATES
    assert not hasattr(matrix, "classify") and not hasattr(matrix, "_clarke_status")


# ----------------------------------------------------------------------------------------------------------
# the error without jax (import isolation: tests/test_imports.py)
# ----------------------------------------------------------------------------------------------------------
def test_framework_jax_without_jax_says_how_to_install_it(tmp_path):
    code = ("import sys; sys.modules['jax'] = None\n"  # as if jax were not installed
            "from nsverify.conventions.cli import main_conventions\n"
            "sys.exit(main_conventions(['--framework', 'jax', '--ops', 'relu', '--baseline', 'none']))\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "pip install 'nsverify[jax]'" in res.stderr


@pytest.mark.parametrize("argv,msg", [
    (["--framework", "jax", "--modes", "eager"], "not a mode of --framework jax"),
    (["--framework", "torch", "--modes", "grad"], "not a mode of --framework torch"),
    (["--framework", "jax", "--compile-dtype", "float32"], "torch option"),
    (["--framework", "jax", "--device", "cuda"], None),
])
def test_conventions_cli_rejects_options_of_the_other_framework(argv, msg, capsys):
    from nsverify.conventions.cli import main_conventions

    assert main_conventions([*argv, "--ops", "relu", "--baseline", "none"]) == 2
    if msg:
        assert msg in capsys.readouterr().err


# ----------------------------------------------------------------------------------------------------------
# side by side
# ----------------------------------------------------------------------------------------------------------
def _result(case, dtype, mode, vec, error=None):
    if error:
        return Result(case.op, case.label, dtype, "cpu", mode, [], "error", "n/a", "clarke", False, error=error)
    v = judge.judge(case, vec, dtype, None)
    return Result(case.op, case.label, dtype, "cpu", mode, [float(a) for a in vec], v.rule, v.in_clarke, "clarke",
                  v.as_expected, observed=v.observed)


def test_side_by_side_marks_differences_and_cells_outside_the_clarke_set():
    relu, absx, mx = _case("relu"), _case("abs"), _case("maximum")
    e = registry.get("abs")
    left, right = e.one_sided(Fraction(0))
    t = [_result(relu, "float32", "eager", [Fraction(0)]), _result(absx, "float32", "eager", [Fraction(0)]),
         _result(mx, "float32", "eager", [2 * v for v in mx.rules["even"]]),
         _result(relu, "float32", "jvp", [Fraction(0)])]
    j = [_result(relu, "float32", "grad", [Fraction(0)]), _result(absx, "float32", "grad", [Fraction(right)]),
         _result(mx, "float32", "grad", list(mx.rules["even"])),
         _result(relu, "float32", "jvp", [Fraction(0)], error="NotImplementedError: no jvp")]
    ps = sidebyside.pairs(t, j)
    assert [(p.op, p.torch_mode, p.differs, p.outside) for p in ps] == [
        ("relu", "eager", False, []), ("relu", "jvp", True, []), ("abs", "eager", True, []),
        ("maximum", "eager", True, ["torch"])]
    rows, classes = sidebyside.table_rows(t, j, [{"op": "adaptive_max_pool2d", "reason": "no adaptive pooling"}])
    assert [r[0] for r in rows] == ["relu", "abs", "maximum", "adaptive_max_pool2d"]
    assert classes == ["differs", "differs", "outside", ""]
    assert rows[0][8].startswith("DIFFERS (1 cells: float32; jvp/jvp)") and rows[1][6] == "right"
    assert rows[2][9].startswith("OUTSIDE in torch") and "no JAX counterpart" in rows[3]
    assert left == -1 and right == 1  # abs: the values the test set (0 vs 1) are the even split and the right side


@pytest.mark.skipif(not baselines.recorded_releases(JAX_DIR), reason="no recorded JAX run shipped")
def test_report_section_shows_torch_and_jax_in_one_table(monkeypatch):
    from nsverify.sections import conventions as sec

    torch_run = baselines.load_recorded("2.13.0")
    torch_results = list(torch_run.results.values())
    part = sec._jax_part(torch_results)
    (tab,) = part["tables"]
    run, missing = sidebyside.newest_jax_run()
    assert run.meta["version"] in tab["title"]
    # every (op, case) of either run is a row; a row says DIFFERS exactly when some paired cell's values differ
    cases = list(dict.fromkeys((r.op, r.case) for r in [*torch_results, *run.results.values()]))
    assert [tuple(r[:2]) for r in tab["rows"] if r[1] != "(every case)"] == cases
    all_pairs = sidebyside.pairs(torch_results, list(run.results.values()))
    for row, cls in zip(tab["rows"], tab["row_classes"]):
        if row[1] == "(every case)":
            continue
        ps = [p for p in all_pairs if (p.op, p.case) == tuple(row[:2])]
        differ = any((p.torch.error or p.jax.error) and bool(p.torch.error) != bool(p.jax.error)
                     or (not p.torch.error and not p.jax.error and p.torch.derivative != p.jax.derivative)
                     for p in ps if p.torch and p.jax)
        assert row[8].startswith("DIFFERS") == differ, row
        assert (cls == "outside") == any(p.outside for p in ps), row
    assert {m["op"] for m in missing} == {"adaptive_max_pool2d"}  # the recorded run predates prelu
    assert any(r[0] == "adaptive_max_pool2d" for r in tab["rows"])
    assert part["claims"][0]["claim"]
    from nsverify.report.html import render_table

    html = render_table(tab, tab["row_classes"])
    assert ('<tr class="differs">' in html) == ("differs" in tab["row_classes"])


# ----------------------------------------------------------------------------------------------------------
# the shipped JAX releases, judged again by the registry (no jax needed)
# ----------------------------------------------------------------------------------------------------------
@pytest.mark.skipif(not baselines.recorded_releases(JAX_DIR), reason="no recorded JAX run shipped")
def test_at_least_eight_jax_releases_are_recorded_with_their_provenance():
    rec = baselines.recorded_releases(JAX_DIR)
    assert len(rec) >= 8, rec
    for rel in rec:
        run = baselines.load_recorded(rel, JAX_DIR)
        assert run.meta["framework"] == "jax" and run.release == rel
        assert run.meta["provenance"]["jax"].split("+")[0] == rel
        ops = {k[0] for k in run.results}
        modes = {k[4] for k in run.results}
        dtypes = {k[2] for k in run.results}
        assert len(ops) >= 20 and {"grad", "jvp", "jit"} <= modes and len(dtypes) == 4, rel
    index = json.loads((JAX_DIR / "index.json").read_text())
    assert set(rec) <= set(index["available"])


def test_a_cell_change_between_recorded_jax_releases_is_found_and_dated():
    """The recorded JAX releases show no change; the comparison that says so does find one planted change, in
    the right cell, dated to the later release (the same code bisects torch's releases)."""
    rec = sorted(baselines.recorded_releases(JAX_DIR), key=baselines.release_key)
    runs = [baselines.load_recorded(r, JAX_DIR) for r in rec]
    assert all(not baselines.changes(a, b) for a, b in zip(runs, runs[1:]))
    before, after = runs[-2], runs[-1]
    key = next(k for k, r in after.results.items() if not r.error and k in before.results)
    moved = replace(after.results[key], derivative=tuple(v + 1 for v in after.results[key].derivative))
    planted = replace(after, results={**after.results, key: moved})
    got = baselines.changes(before, planted)
    assert [c.key for c in got] == [key] and got[0].since == after.release and got[0].prev == before.release


# ----------------------------------------------------------------------------------------------------------
# the JAX matrix itself (needs jax)
# ----------------------------------------------------------------------------------------------------------
@needs_jax
def test_exact_array_refuses_a_value_the_dtype_cannot_hold():
    from nsverify.conventions import jax_matrix as jm
    from nsverify.errors import InexactError

    assert [Fraction(v) for v in jm.exact_array([Fraction(1, 4), 3], "bfloat16").astype("float32").tolist()] == [
        Fraction(1, 4), 3]
    with pytest.raises(InexactError, match="not exactly representable"):
        jm.exact_array([Fraction(1, 3)], "float16")


@needs_jax
def test_jax_matrix_cells_are_judged_against_the_registry():
    from nsverify.conventions import jax_matrix as jm

    ops = ["relu", "abs", "clamp", "maximum", "amax", "max_pool2d"]
    results = jm.run_matrix(ops, ["float32"], jm.MODES)
    cases = {(c.op, c.label): c for c in build_cases(ops, framework="jax")}
    assert len(results) == len(cases) * len(jm.MODES)
    for r in results:
        if r.error:
            continue
        case = cases[(r.op, r.case)]
        v = judge.judge(case, [Fraction(x) for x in r.derivative], r.dtype, None)
        assert (r.rule, r.in_clarke, r.as_expected) == (v.rule, v.in_clarke, v.as_expected)
        # the Clarke test itself, independently: elementwise an interval, at a tie the hull of the pieces
        if case.kind == "elementwise":
            lo, hi = sorted(registry.get(r.op).one_sided(case.values[0]))
            assert (lo <= Fraction(r.derivative[0]) <= hi) == (r.in_clarke == "yes")
        else:
            from nsverify.rational import in_hull

            tie = next(c for c in registry.get(r.op).cases if c.label == r.case)
            assert in_hull([Fraction(x) for x in r.derivative], tie.pieces) == (r.in_clarke == "yes")
        if r.mode == "jvp":
            assert set(r.directional) == set(judge.directional_tangents(case, len(case.values)))


@needs_jax
def test_jax_matrix_equals_its_recorded_release_when_recorded():
    from nsverify.conventions import jax_matrix as jm

    installed = baselines.release_of(jm.versions()["jax"])
    if installed not in baselines.recorded_releases(JAX_DIR):
        pytest.skip(f"jax {installed} has no recorded run")
    run = baselines.load_recorded(installed, JAX_DIR)
    ops = ["relu", "leaky_relu", "hardswish", "clamp", "clamp_tensor", "median", "topk", "max_pool1d"]
    results = jm.run_matrix(ops, ["float16", "float64"], ["grad", "jit"])
    chs, absent = baselines.compare_with_baseline(results, run, installed, JAX_DIR)
    assert not absent and not chs, [c.text() for c in chs]


@needs_jax
def test_conventions_cli_framework_jax_writes_the_schema(tmp_path, capsys):
    from nsverify.conventions.cli import main_conventions

    out = tmp_path / "j.json"
    assert main_conventions(["--framework", "jax", "--ops", "relu,adaptive_max_pool2d", "--dtype", "float32",
                             "--json", str(out), "--baseline", "none"]) == 0
    text = capsys.readouterr().out
    assert "no JAX counterpart: adaptive_max_pool2d" in text and "relu" in text
    data = json.loads(out.read_text())
    assert data["framework"] == "jax" and data["meta"]["provenance"]["x64"] is True
    assert {r["mode"] for r in data["results"]} == set(FRAMEWORK_MODES["jax"])
    assert [m["op"] for m in data["missing"]] == ["adaptive_max_pool2d"]
    run = baselines.Run.load(out)
    assert run.meta["framework"] == "jax" and run.describe().startswith("jax ")


@needs_jax
def test_a_jax_reproduction_script_prints_the_matrix_value(tmp_path):
    from nsverify.conventions import jax_matrix as jm
    from nsverify.conventions import scripts

    for op, mode in (("abs", "grad"), ("max_pool2d", "jvp"), ("clamp_tensor", "jit")):
        case = _case(op)
        (r,) = jm.run_matrix([op], ["float32"], [mode])[:1] if op != "max_pool2d" else \
            [x for x in jm.run_matrix([op], ["float32"], [mode]) if x.case == case.label]
        text = scripts.cell_script(op, case.label, "float32", mode, "# test", framework="jax")
        path = tmp_path / f"{op}.py"
        path.write_text(text)
        res = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, res.stderr[-2000:]
        printed = json.loads(res.stdout.split("derivative:")[1].strip())
        assert printed == r.derivative, (op, mode)


# ----------------------------------------------------------------------------------------------------------
# releases (no network: the installer's commands and a sweep with a fake measurement)
# ----------------------------------------------------------------------------------------------------------
def test_jax_release_environment_installs_jax_cpu_next_to_this_torch(tmp_path, monkeypatch):
    from importlib import metadata

    from nsverify.conventions import envs

    cmds = []
    monkeypatch.setattr(envs, "run_logged", lambda cmd, log, **kw: cmds.append(cmd))
    envs.Installer("pip", python=sys.executable).create(tmp_path / "e", "0.4.38", open(tmp_path / "log", "w"),
                                                         "jax")
    install = cmds[-1]
    assert "jax[cpu]==0.4.38" in install and f"torch=={metadata.version('torch')}" in install
    assert not any(a.startswith("torch==0.4") for a in install)


def test_jax_sweep_checks_the_jax_version_of_each_environment(tmp_path):
    from nsverify.conventions.releases import Sweep

    base = [_result(_case("relu"), "float32", "grad", [Fraction(0)])]

    def measure(rel):
        from dataclasses import asdict

        got = "0.5.0" if rel == "0.5.3" else rel  # one environment imports the wrong jax
        rs = [asdict(replace(r, derivative=[1.0] if rel >= "0.6" else r.derivative)) for r in base]
        return {"schema": "nsverify.conventions/1", "framework": "jax", "jax": got, "meta": {"provenance": {}},
                "results": rs}

    sweep = Sweep(tmp_path, measure=measure, framework="jax")
    sweep.sweep(["0.4.38", "0.5.3", "0.6.2"])
    assert sweep.measured() == ["0.4.38", "0.6.2"]
    assert "imported jax 0.5.0" in sweep.failures()["0.5.3"]["reason"]
    (row,) = [r for r in sweep.timeline(["0.4.38", "0.5.3", "0.6.2"]) if r["changes"]]
    (ch,) = row["changes"]
    assert (ch.op, ch.since, ch.exact) == ("relu", "0.6.2", False)  # 0.5.3 unmeasured: "between"


@pytest.mark.parametrize("argv,msg", [(["--compile-dtype", "float32"], "torch option"),
                                      (["--modes", "eager,compile"], "not a mode of --framework jax")])
def test_releases_cli_framework_jax_rejects_torch_options_before_any_work(argv, msg, capsys, monkeypatch):
    from nsverify.cli import main
    from nsverify.conventions import releases

    monkeypatch.setattr(releases, "available_releases", lambda *a, **k: pytest.fail("asked the index"))
    assert main(["releases", "--framework", "jax", "0.4.30", *argv]) == 2
    assert msg in capsys.readouterr().err
