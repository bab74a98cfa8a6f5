"""The singular-point cells of the conventions matrix (nsverify/conventions/singular.py).

The table's hand-derived facts are checked against independent float64 computations: one-sided difference quotients
of each program at its point (bounded and equal to the support function of the Clarke set derived here, by hand,
for the locally Lipschitz rows; growing without bound for the others), the forward value (NaN where the class is
"undefined"), mpmath for the overflowing derivative. PyTorch's recorded values are checked by measuring them.
"""
from __future__ import annotations

import importlib.util
import json
import math
import re
from fractions import Fraction
from pathlib import Path

import pytest
import torch

from nsverify import registry
from nsverify.conventions import singular as sg
from nsverify.conventions.baselines import Run, cell_key, compare_with_baseline
from nsverify.conventions.matrix import SCHEMA, Result
from nsverify.errors import NsverifyError

ROOT = Path(__file__).resolve().parents[1]
ROWS = {(s.op, s.case): s for s in sg.TABLE}


def f64(row, x) -> float:
    return float(row.fn(torch.tensor(x, dtype=torch.float64).reshape(row.shape)).sum())


def quotient(row, v, h) -> float:
    """One-sided difference quotient (f(x + h v) - f(x)) / h in float64."""
    x = [float(a) for a in row.values]
    return (f64(row, [a + h * b for a, b in zip(x, v)]) - f64(row, x)) / h


def units(n):
    out = []
    for i in range(n):
        for s in (1.0, -1.0):
            v = [0.0] * n
            v[i] = s
            out.append(v)
    return out


def _norm(v):
    return math.sqrt(sum(a * a for a in v))


def _centred(v):
    m = sum(v) / len(v)
    return _norm([a - m for a in v]) / math.sqrt(len(v) - 1)


#: the support function of each locally Lipschitz row's Clarke set, derived by hand (for a convex function it is
#: the one-sided directional derivative f'(x; v)): unit ball -> |v|; [-1, 1] -> |v|; std's centred ball
#: {sum g = 0, (n-1)|g|^2 <= 1} -> |Pv|/sqrt(n-1); a single point p -> <p, v>
SUPPORT = {
    ("sqrt(x**2)", "x=0"): _norm,
    ("sqrt((x**2).sum())", "x=0 (3 entries)"): _norm,
    ("linalg.vector_norm", "x=0 (3 entries)"): _norm,
    ("torch.norm", "x=0 (3 entries)"): _norm,
    ("dist(x, c)", "x=c=(1,-2,3)"): _norm,
    ("cdist(x, c)", "x=c=(1,-2,3)"): _norm,
    ("std", "constant x=(1,1,1)"): _centred,
    ("var", "constant x=(1,1,1)"): lambda v: 0.0,
    ("abs(x)**1.5", "x=0"): lambda v: 0.0,
    ("where(x > 0, sqrt(x), 0)", "x=-1"): lambda v: 0.0,
    ("where(x > 1, log(x), 0)", "x=0"): lambda v: 0.0,
    ("where(x > 0, x**1.5, 0)", "x=-1"): lambda v: 0.0,
    ("where(x > 1, 1/x, 0)", "x=0"): lambda v: 0.0,
    ("F.normalize", "x=0 (3 entries)"): lambda v: sum(v) / 1e-12,  # the function is x/eps below |x| = eps
}


def test_every_locally_lipschitz_row_has_a_hand_derived_support_function():
    lip = {k for k, s in ROWS.items() if s.kind == "lipschitz"}
    assert lip == set(SUPPORT), lip ^ set(SUPPORT)


@pytest.mark.parametrize("key", sorted(SUPPORT), ids=lambda k: f"{k[0]}@{k[1]}")
def test_lipschitz_rows_one_sided_quotients_are_the_support_function(key):
    row = ROWS[key]
    h = 2.0 ** -50 if row.op in ("F.normalize", "abs(x)**1.5") else 2.0 ** -30  # |h|^0.5 -> 0 slowly
    for v in units(len(row.values)):
        q = quotient(row, v, h)
        want = SUPPORT[key](v)
        assert math.isfinite(q) and math.isclose(q, want, rel_tol=1e-6, abs_tol=1e-6), (v, q, want)


@pytest.mark.parametrize("key", [k for k, s in ROWS.items() if s.kind == "not_lipschitz"],
                         ids=lambda k: f"{k[0]}@{k[1]}")
def test_not_lipschitz_rows_have_an_unbounded_one_sided_quotient(key):
    row = ROWS[key]
    growing = []
    for v in units(len(row.values)):
        qs = [abs(quotient(row, v, 2.0 ** -e)) for e in (10, 20, 40)]
        if all(math.isfinite(q) for q in qs) and qs[0] < qs[1] < qs[2] and qs[2] > 20:
            growing.append(v)
    assert growing, f"{row.op} at {row.case}: no direction with a growing difference quotient"


@pytest.mark.parametrize("key", [k for k, s in ROWS.items() if s.kind == "undefined"],
                         ids=lambda k: f"{k[0]}@{k[1]}")
def test_undefined_rows_have_an_undefined_value(key):
    row = ROWS[key]
    assert math.isnan(f64(row, [float(a) for a in row.values]))


def test_the_overflow_row_has_a_finite_derivative_above_every_float():
    mpmath = pytest.importorskip("mpmath")
    d = 1000 * mpmath.e ** 1000  # d/dx exp(1000 x) at 1
    assert mpmath.isfinite(d) and d > torch.finfo(torch.float64).max
    row = ROWS[("exp(1000 x)", "x=1")]
    assert row.kind == "overflow" and not row.clarke((Fraction(torch.finfo(torch.float64).max),))


def test_the_clarke_predicates_match_the_hand_derived_sets():
    """The maximiser of <g, v> over each hand-derived set is in the table's set; pushed out by 2^-10, it is not."""
    for key, support in SUPPORT.items():
        row = ROWS[key]
        if row.clarke is None or row.op == "var" or support([1.0] + [0.0] * (len(row.values) - 1)) == 0:
            continue
        n = len(row.values)
        if support is _centred:  # the maximiser of g_1 over {sum g = 0, 2|g|^2 <= 1} (n = 3): (2, -1, -1)/sqrt(12)
            g = [Fraction(2), Fraction(-1), Fraction(-1)]
            scale_sq = Fraction(1, 12)
        else:  # the maximiser of g_1 over the unit ball / [-1, 1]: e_1
            g = [Fraction(1)] + [Fraction(0)] * (n - 1)
            scale_sq = Fraction(1)
        # scale g exactly onto the boundary when the scale is rational, else test the squared norm bound directly
        if scale_sq == 1:
            assert row.clarke(tuple(g)) and not row.clarke(tuple(a * (1 + Fraction(1, 1024)) for a in g))
        else:
            inside = tuple(a * Fraction(288, 1000) for a in g)  # 0.288 < 1/sqrt(12) = 0.2887
            outside = tuple(a * Fraction(289, 1000) for a in g)
            assert row.clarke(inside) and not row.clarke(outside)
        assert row.clarke((Fraction(0),) * n)  # 0 is the minimum-norm element


def test_rule_values_are_clarke_elements_of_minimum_norm():
    for row in sg.TABLE:
        if row.kind != "lipschitz":
            continue
        want = row.rule_value("float64")
        if row.clarke is not None:
            assert row.clarke(want), row.op
        if row.op == "F.normalize":
            assert all(float(a) == pytest.approx(1e12, rel=1e-9) for a in want)
        else:
            assert all(a == 0 for a in want), row.op  # 0 is in every one of these sets


def test_kinds_are_the_diagnosis_kinds():
    from nsverify.oracle.diagnosis import KINDS

    assert sg.KINDS == KINDS
    assert {s.kind for s in sg.TABLE} == set(KINDS)


def test_no_program_name_is_a_registry_op():
    """Singular cells share the matrix's cell keys (op, case, ...): a registry op's name would collide."""
    ops = {e.name for e in registry.select()}
    assert not ops & {s.op for s in sg.TABLE}
    assert len(ROWS) == len(sg.TABLE)  # (op, case) is unique


# ----------------------------------------------------------------------------------------------------------
# PyTorch, measured
# ----------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def measured():
    return sg.run_singular(("bfloat16", "float32", "float64"), ("eager", "func", "jvp"))


def test_pytorch_returns_the_recorded_classes(measured):
    off = [(r.op, r.case, r.dtype, r.mode, r.derivative, r.rule, r.expected, r.error) for r in measured
           if not r.as_expected]
    assert not off, off
    assert len(measured) == len(sg.TABLE) * 9


def test_pytorchs_nan_at_locally_lipschitz_points_is_what_the_issue_reports(measured):
    """sqrt of a sum of squares at 0 and the where NaN branch: NaN in reverse mode, against the documented rule;
    forward mode returns the rule's 0 on the where family."""
    def cell(op, case, mode):
        return next(r for r in measured if (r.op, r.case, r.dtype, r.mode) == (op, case, "float64", mode))

    r = cell("sqrt((x**2).sum())", "x=0 (3 entries)", "eager")
    assert all(math.isnan(v) for v in r.derivative) and r.in_clarke == "no" and not r.extra["follows_rule"]
    r = cell("where(x > 0, sqrt(x), 0)", "x=-1", "eager")
    assert math.isnan(r.derivative[0]) and r.extra["culprit"] == "sqrt"
    r = cell("where(x > 0, sqrt(x), 0)", "x=-1", "jvp")
    assert r.derivative == [0.0] and r.in_clarke == "yes" and r.extra["follows_rule"]
    assert {x.rule for x in sg.lipschitz_nonfinite(measured)} == {"nan"}


def test_finite_values_at_lipschitz_points_are_judged_against_the_clarke_set(measured):
    for r in measured:
        if r.extra.get("kind") == "lipschitz" and r.derivative and all(map(math.isfinite, r.derivative)):
            assert r.in_clarke in ("yes", "rounding"), (r.op, r.dtype, r.mode, r.derivative)
        if r.extra.get("kind") in ("not_lipschitz", "undefined"):
            assert r.in_clarke == "n/a"


def test_normalize_at_zero_is_one_over_eps_in_each_dtype(measured):
    for dt in ("bfloat16", "float32", "float64"):
        r = next(r for r in measured if (r.op, r.dtype, r.mode) == ("F.normalize", dt, "eager"))
        eps = torch.tensor(1e-12, dtype=getattr(torch, dt)).double().item()
        want = torch.tensor(1 / eps, dtype=torch.float64).to(getattr(torch, dt)).double().item()
        assert r.derivative == [want] * 3 and r.rule == "rule", (dt, r.derivative, want)


def test_normalize_in_float16_is_undefined_at_zero():
    """float16 holds 1e-12 as 0: normalize's clamp does nothing, the value at 0 is 0/0."""
    assert torch.tensor(1e-12, dtype=torch.float16).item() == 0
    row = ROWS[("F.normalize", "x=0 (3 entries)")]
    assert row.kind_for("float16") == "undefined" and row.kind_for("float32") == "lipschitz"
    x = torch.zeros(3, dtype=torch.float16)
    assert torch.isnan(torch.nn.functional.normalize(x, dim=0)).all()  # the value itself
    rs = sg.run_singular(("float16",), ("eager",), ops=["F.normalize"])
    assert [(r.rule, r.in_clarke, r.as_expected, r.extra["kind"]) for r in rs] == [("nan", "n/a", True, "undefined")]


def test_value_classes():
    row = ROWS[("sqrt((x**2).sum())", "x=0 (3 entries)")]
    assert sg.value_class(row, [float("nan"), 0.0, 0.0], "float64") == "nan"
    assert sg.value_class(row, [float("inf"), 0.0, float("-inf")], "float64") == "±inf"
    assert sg.value_class(row, [0.0, 0.0, 0.0], "float64") == "rule"
    assert sg.value_class(row, [0.5, 0.5, 0.5], "float64") == "clarke"  # |g|^2 = 3/4 <= 1
    assert sg.value_class(row, [1.0, 1.0, 0.0], "float64") == "finite"  # |g|^2 = 2 > 1
    sq = ROWS[("sqrt", "x=0")]
    assert sg.follows_rule(sq, [float("inf")], "float32") and not sg.follows_rule(sq, [float("nan")], "float32")


def test_compile_batches_every_row_in_one_function():
    """Compile mode goes through the matrix's one-compile-per-dtype path (eager backend: no Inductor build)."""
    rows = ["sqrt", "where(x > 0, sqrt(x), 0)", "linalg.vector_norm"]
    rs = sg.run_singular(("float64",), ("compile",), ops=rows, compile_backend="eager")
    assert {r.op for r in rs} == set(rows) and all(r.as_expected for r in rs), [(r.op, r.rule, r.error) for r in rs]


def test_unknown_names_and_modes_are_errors_naming_the_choices():
    with pytest.raises(NsverifyError, match="choose from"):
        sg.select(["nope"])
    with pytest.raises(NsverifyError, match="choose from"):
        sg.run_singular(modes=["grad"])


# ----------------------------------------------------------------------------------------------------------
# the matrix machinery: cells compared across releases, dated, NaN equal to NaN
# ----------------------------------------------------------------------------------------------------------
def _run(results, release):
    data = json.loads(json.dumps({"schema": SCHEMA, "torch": release, "meta": {"release": release},
                                  "results": [vars(r) for r in results]}))  # through JSON, NaN included
    return Run.from_json(data)


def test_a_change_of_a_singular_cell_is_dated_and_nan_equals_nan(measured, tmp_path):
    f64_eager = [r for r in measured if r.dtype == "float64" and r.mode == "eager"]
    old = _run(f64_eager, "2.12.0")
    chs, missing = compare_with_baseline(f64_eager, old, "2.13.0", tmp_path)
    assert chs == [] and missing == []  # identical runs, NaN cells included: no change
    before = [Result(**{**vars(r), "derivative": [0.0] * len(r.derivative), "rule": "rule"})
              if r.op == "sqrt((x**2).sum())" else r for r in f64_eager]
    chs, _ = compare_with_baseline(f64_eager, _run(before, "2.12.0"), "2.13.0", tmp_path)
    assert [c.key for c in chs] == [cell_key(next(r for r in f64_eager if r.op == "sqrt((x**2).sum())"))]
    assert "since 2.13.0" in chs[0].text() and "-> (nan,nan,nan)" in chs[0].text()


def test_claims(measured):
    claims = sg.singular_claims(measured)
    assert [c["held"] for c in claims] == [True, True]
    flipped = [Result(**{**vars(r), "as_expected": False}) if i == 0 else r for i, r in enumerate(measured)]
    assert sg.singular_claims(flipped)[0]["held"] is False


def test_the_conventions_command_adds_the_cells(tmp_path, capsys):
    from nsverify.conventions.cli import main_conventions

    out = tmp_path / "c.json"
    rc = main_conventions(["--singular", "--ops", "relu", "--dtype", "float64", "--modes", "eager", "--in-process",
                           "--baseline", "none", "--json", str(out)])
    assert rc == 0
    text = capsys.readouterr().out
    assert "Singular-point cells:" in text and "where(x > 0, sqrt(x), 0)" in text
    data = json.loads(out.read_text())
    singular = [r for r in data["results"] if r.get("extra", {}).get("singular")]
    assert len(singular) == len(sg.TABLE)
    assert {r["op"] for r in data["results"]} - {s.op for s in sg.TABLE} == {"relu"}


# ----------------------------------------------------------------------------------------------------------
# docs/nan.md holds exactly the table
# ----------------------------------------------------------------------------------------------------------
def test_docs_nan_holds_the_generated_table():
    text = (ROOT / "docs" / "nan.md").read_text(encoding="utf-8")
    m = re.search(r"<!-- nan:table begin -->\n(.*?)\n<!-- nan:table end -->", text, re.S)
    assert m, "docs/nan.md lacks its <!-- nan:table begin/end --> block"
    assert m.group(1) == sg.doc_table(), ("docs/nan.md's table is stale: regenerate it from "
                                          "nsverify.conventions.singular.doc_table()")
    assert "docs/nan.md" in (ROOT / "README.md").read_text(encoding="utf-8")


# ----------------------------------------------------------------------------------------------------------
# JAX (the optional extra)
# ----------------------------------------------------------------------------------------------------------
def test_jax_cells_or_the_install_hint():
    if importlib.util.find_spec("jax") is None:
        from nsverify.conventions.jax_matrix import JaxMissingError

        with pytest.raises(JaxMissingError, match="nsverify\\[jax\\]"):
            sg.run_singular_jax(("float64",), ("grad",))
        return
    rs = sg.run_singular_jax(("bfloat16", "float32", "float64"), ("grad", "jvp", "jit"))
    assert {(r.op, r.case) for r in rs} == {(s.op, s.case) for s in sg.TABLE if s.jax is not None}
    if sg.JAX_RECORDED == __import__("jax").__version__:  # the recorded classes hold on the recorded release
        assert all(r.as_expected for r in rs), [(r.op, r.dtype, r.mode, r.rule, r.expected) for r in rs
                                                if not r.as_expected]
    for r in rs:
        if r.extra.get("kind") == "lipschitz" and r.derivative and all(map(math.isfinite, r.derivative)):
            assert r.in_clarke in ("yes", "rounding"), (r.op, r.mode, r.derivative)


# ----------------------------------------------------------------------------------------------------------
# the nightly's NaN section
# ----------------------------------------------------------------------------------------------------------
def test_the_nan_section_runs_and_reports_the_bugs():
    from nsverify.report import RunContext
    from nsverify.report.schema import validate_metrics
    from nsverify.sections import load_sections

    sec = {s.name: s for s in load_sections()}["nan-inf"]
    out = sec.fn(RunContext(quick=True, section="nan-inf"))
    json.dumps(out)
    validate_metrics(out["data"]["metrics"])
    keys = {m["key"]: m for m in out["data"]["metrics"]}
    assert keys["singular_unexpected"]["value"] == 0
    assert keys["where(x > 0, sqrt(x), 0)|x=-1|float64|cpu|eager"]["value"] == "nan"
    assert keys["linalg.vector_norm|x=0 (3 entries)|float64|cpu|eager"]["value"] == "rule"
    assert [c["held"] for c in out["claims"]] == [True, True]
    bugs = next(t for t in out["tables"] if t["title"].startswith("NaN/inf where"))
    assert {(r[0], r[1]) for r in bugs["rows"]} == {
        (s.op, s.case) for s in sg.TABLE if s.kind == "lipschitz" and s.torch == "nan"}


def test_a_release_change_of_a_singular_cell_gets_a_standalone_script(measured, tmp_path):
    """The release sweep writes one script per change: for a singular cell, the table's program at its point."""
    import subprocess
    import sys

    from nsverify.conventions.releases import change_script

    now = [r for r in measured if r.dtype == "float64" and r.mode == "eager" and r.op.startswith("where(x > 0, sqrt")
           and r.case == "x=-1"]
    before = [Result(**{**vars(r), "derivative": [0.0], "rule": "rule"}) for r in now]
    (ch,) = compare_with_baseline(now, _run(before, "2.12.0"), "2.13.0", tmp_path)[0]
    script = change_script(ch)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().endswith("derivative: [nan]")
