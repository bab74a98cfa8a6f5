"""The conventions matrix reproduces the registry's recorded rules on this CPU build; bad input gives clear errors."""
import json
from dataclasses import replace
from fractions import Fraction

import pytest
import torch

from nsverify import conventions as cv
from nsverify import registry
from nsverify.cli import main
from nsverify.errors import DeviceUnavailableError, NsverifyError, UnknownOpError, UnsupportedDtypeError
from nsverify.registry import parse_rule

ALL_DTYPES = ["float16", "bfloat16", "float32", "float64"]


@pytest.fixture(scope="module")
def eager_all_dtypes():
    return cv.run_matrix(None, ALL_DTYPES, ["cpu"], ["eager"])


def _rule(results, op, case=None, **kw):
    rs = [r for r in results if r.op == op and (case is None or r.case == case)
          and all(getattr(r, k) == v for k, v in kw.items())]
    assert rs, (op, case, kw)
    return {r.rule for r in rs}


def test_measured_rules_eager_every_dtype(eager_all_dtypes):
    res = eager_all_dtypes
    assert _rule(res, "relu") == {"left"}
    for op in ["relu6", "hardtanh", "hardsigmoid", "hardswish"]:
        lo, hi = registry.get(op).breakpoints
        assert _rule(res, op, f"x={lo}") == {"left"} and _rule(res, op, f"x={hi}") == {"right"}, op
    assert _rule(res, "leaky_relu") == {"left"}
    assert _rule(res, "abs") == {"even"}
    assert _rule(res, "clamp", "x=0") == {"right"} and _rule(res, "clamp", "x=1") == {"left"}  # "inside"
    assert _rule(res, "maximum") == {"even"} and _rule(res, "minimum") == {"even"}
    for op in ["amax", "amin", "max", "min"]:
        assert _rule(res, op) == {"even"}, op
    assert _rule(res, "max_dim") == {"first"} and _rule(res, "min_dim") == {"first"}
    for op in ["max_pool1d", "max_pool2d", "adaptive_max_pool2d"]:
        assert _rule(res, op) == {"first"}, op
    # the derivative values themselves: relu6/hardtanh/hardsigmoid give 0 at both kinks, hardswish 0 and 1,
    # clamp 1 and 1 (differs from hardtanh)
    vals = {(r.op, r.case): r.derivative for r in res if r.dtype == "float32"}
    assert vals[("hardswish", "x=-3")] == [0.0] and vals[("hardswish", "x=3")] == [1.0]
    assert vals[("clamp", "x=0")] == [1.0] and vals[("hardtanh", "x=-1")] == [0.0]
    assert vals[("amax", "3 ties")][0] == pytest.approx(1 / 3)
    bad = [(r.op, r.case, r.dtype, r.rule) for r in res if not r.as_expected]
    assert not bad


def test_func_and_jvp_modes(eager_all_dtypes):
    res = cv.run_matrix(None, ["float32", "bfloat16"], ["cpu"], ["func", "jvp"])
    assert all(r.error is None for r in res)
    assert all(r.as_expected for r in res), [(r.op, r.case, r.mode, r.rule) for r in res if not r.as_expected]
    eager = {(r.op, r.case, r.dtype): r.rule for r in eager_all_dtypes}
    for r in res:
        if r.mode == "func":
            assert r.rule == eager[(r.op, r.case, r.dtype)]
    # forward mode at a kink is linear: it cannot equal both one-sided directional derivatives
    relu = [r for r in res if r.op == "relu" and r.mode == "jvp"][0]
    assert relu.directional == {"+": False, "-": True}
    elu = [r for r in res if r.op == "elu" and r.mode == "jvp"][0]
    assert elu.directional == {"+": True, "-": True}  # no kink: both sides agree


def test_clarke_membership_and_findings(eager_all_dtypes):
    res = [r for r in eager_all_dtypes if r.dtype == "float32"]
    status = {(r.op, r.case): r.in_clarke for r in res}
    assert status[("relu", "x=0")] == "yes"
    assert status[("amax", "3 ties")] == "rounding"  # 1/3 is rounded; the exact even split is in the set
    assert status[("max_pool2d", "k=3 s=1 overlapping")] == "yes"
    # clamp with tensor bounds at min == max > x: PyTorch returns 0 for every input,
    # outside conv{e_min, e_max}
    assert status[("clamp_tensor", "min == max > x")] == "no"
    # topk at ties: a Bouligand piece that is neither the first- nor the last-index rule
    assert status[("topk", "3 tied, k=2")] == "yes" and _rule(res, "topk") == {"other"}


def test_results_are_classified_as_rules_of_the_one_vocabulary(eager_all_dtypes):
    res = {(r.op, r.case): r for r in eager_all_dtypes if r.dtype == "float32"}
    # the metric value names the candidate; observed and expected are canonical Rule texts
    assert (res[("abs", "x=0")].rule, res[("abs", "x=0")].observed, res[("abs", "x=0")].expected) == (
        "even", "mix=1/2", "mix=1/2")
    for case in ("x=0", "x=1"):  # clamp's derivative 1 at both bounds is the middle piece's: rule inside
        assert (res[("clamp", case)].observed, res[("clamp", case)].expected) == ("inside", "inside")
    assert res[("clamp", "x=0")].rule == "right" and res[("clamp", "x=1")].rule == "left"
    # topk: the gradient goes to the indices PyTorch returned, which are neither first nor last
    topk = res[("topk", "3 tied, k=2")]
    assert (topk.rule, topk.observed, topk.expected, topk.as_expected) == ("other", "returned", "returned", True)
    assert res[("elu", "x=0")].rule == "left=right" and res[("elu", "x=0")].observed == "left"
    # clamp with tensor bounds at min == max > x: no rule describes PyTorch's 0; the registry records it
    bad = res[("clamp_tensor", "min == max > x")]
    assert (bad.rule, bad.observed, bad.in_clarke, bad.as_expected) == ("other", None, "no", True)
    for r in eager_all_dtypes:  # every rule named is a Rule of the vocabulary
        assert parse_rule(r.expected) and (r.observed is None or parse_rule(r.observed))


def test_as_expected_compares_with_the_registry_rule_and_can_fail():
    (relu,) = cv.build_cases(["relu"])
    ok = cv.evaluate_case(relu, torch.float32, "cpu", "eager")
    assert ok.as_expected and ok.expected == "left"
    wrong = cv.evaluate_case(replace(relu, rule=parse_rule("right")), torch.float32, "cpu", "eager")
    assert (wrong.rule, wrong.observed, wrong.expected, wrong.as_expected) == ("left", "left", "right", False)
    same_value = cv.evaluate_case(replace(relu, rule=parse_rule("value=0")), torch.float32, "cpu", "eager")
    assert same_value.as_expected and same_value.observed == "value=0"  # compared by value, not by name
    clamp = [c for c in cv.build_cases(["clamp_tensor"]) if c.label == "min == max > x"][0]
    assert cv.evaluate_case(clamp, torch.float32, "cpu", "eager").as_expected
    unrecorded = replace(clamp, violation=lambda dt: None)  # without its recorded violation it is unexpected
    assert not cv.evaluate_case(unrecorded, torch.float32, "cpu", "eager").as_expected


def test_differences_are_flagged():
    res = cv.run_matrix(["clamp_tensor", "relu"], ["float32"], ["cpu"], ["eager", "jvp"])
    diffs = cv.differences(res)
    assert [(d["op"], d["case"]) for d in diffs] == [("clamp_tensor", "min == max > x")]
    assert diffs[0]["rules"] == {"float32|cpu|eager": "other", "float32|cpu|jvp": "last"}
    assert "*" in cv.format_table(res)


def test_even_split_is_not_a_gradient_of_the_zero_function():
    """amax([w,0]) - amax([w,0,0]) is identically 0, yet even splitting gives 1/2 - 1/3."""
    w = torch.zeros((), dtype=torch.float64, requires_grad=True)
    z = torch.zeros(2, dtype=torch.float64)
    f = torch.amax(torch.stack([w, z[0]])) - torch.amax(torch.stack([w, z[0], z[1]]))
    (g,) = torch.autograd.grad(f, w)
    half, third = Fraction(0.5), Fraction(torch.tensor(1 / 3, dtype=torch.float64).item())
    assert Fraction(g.item()) == Fraction(float(half - third))  # 1/2 - fl(1/3): nonzero, ~1/6
    assert g.item() != 0


def test_compile_mode_matches_eager_fast_backend():
    """The compile path (one graph for every case) on the cheap aot_eager backend (inductor: slow test)."""
    ops = ["relu", "hardswish", "amax", "max_dim", "max_pool2d", "sort"]
    res = cv.run_matrix(ops, ["float32"], ["cpu"], ["eager", "compile"], compile_backend="aot_eager")
    assert all(r.error is None for r in res)
    assert not cv.differences(res)
    assert all(r.as_expected for r in res)


@pytest.mark.slow
def test_compile_mode_inductor_matches_eager_all_ops():
    res = cv.run_matrix(None, ["float32"], ["cpu"], ["eager", "compile"])
    assert all(r.error is None for r in res)
    # compile differs from eager exactly where the registry records a compile rule of its own (issue 36:
    # multi_margin_loss and multilabel_margin_loss, whose inductor decomposition takes the right piece at the
    # margin), and every cell is the registry's rule
    recorded = {e.name for e in registry.select("elementwise")
                if e.mode_rules.get("compile", e.torch_rules) != e.torch_rules}
    assert recorded == {"multi_margin_loss", "multilabel_margin_loss"}
    assert {d["op"] for d in cv.differences(res)} == recorded, cv.differences(res)
    assert all(r.as_expected for r in res), [(r.op, r.case, r.mode, r.rule) for r in res if not r.as_expected]


def test_cli_json_and_table(tmp_path, capsys):
    out = tmp_path / "conv.json"
    assert main(["conventions", "--ops", "relu,amax", "--dtype", "float32,bfloat16", "--modes", "eager,func",
                 "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["schema"] == "nsverify.conventions/1"
    assert {r["op"] for r in data["results"]} == {"relu", "amax"}
    assert set(data["results"][0]) >= {"op", "case", "dtype", "device", "mode", "derivative", "rule",
                                       "in_clarke", "expected", "as_expected", "observed"}
    text = capsys.readouterr().out
    assert "relu" in text and "Evaluated 4 columns: cpu; bf16, f32; eager, func." in " ".join(text.split())


@pytest.mark.parametrize("argv,msg", [
    (["--ops", "relu7"], "unknown op 'relu7'"),
    (["--dtype", "int64"], "not a floating dtype"),
    (["--modes", "eager,backwards"], "unknown mode"),
])
def test_cli_bad_input(argv, msg, capsys):
    assert main(["conventions"] + argv) == 2
    assert msg in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU error")
def test_cuda_without_gpu_is_a_clear_error(capsys):
    with pytest.raises(DeviceUnavailableError, match="no CUDA GPU"):
        cv.run_matrix(["relu"], ["float32"], ["cuda"])
    assert main(["conventions", "--device", "cuda"]) == 2
    assert "--device cpu" in capsys.readouterr().err


def test_api_bad_input():
    with pytest.raises(UnknownOpError):
        cv.run_matrix(["nope"])
    with pytest.raises(UnsupportedDtypeError):
        cv.run_matrix(["relu"], [torch.int32])
    with pytest.raises(NsverifyError):
        cv.run_matrix(["relu"], modes=["sideways"])


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_differs_from_cpu_only_inside_the_clarke_set():
    # CUDA and CPU legitimately break some ties differently (first run on an H200, torch 2.11: sort and
    # median_dim choose another tied index on CUDA): a difference between devices is a finding, not a failure,
    # as long as both devices' derivatives are valid. Where the stored GPU file was measured with this torch
    # release, the cases that differ must be the ones it recorded (a new difference is a change to report).
    res = cv.run_matrix(None, ALL_DTYPES, ["cpu", "cuda"], ["eager"])
    diffs = cv.differences(res)
    cells = {(r.op, r.case, r.dtype, r.device): r for r in res}
    for d in diffs:
        for key in d["rules"]:
            dtype, device, _ = key.split("|")
            r = cells[(d["op"], d["case"], dtype, device)]
            # outside the Clarke set only where the op table records that violation (an xfail in its entry)
            assert r.in_clarke != "no" or r.as_expected, f"{d['op']} {d['case']} {key}: {r.derivative}"
    from nsverify.sections.conventions import GPU_DATA

    stored = json.loads(GPU_DATA.read_text()) if GPU_DATA.exists() else None
    if stored is not None and stored.get("torch") == torch.__version__:
        # cases added to the op table after the stored run (sort_unstable's 17-entry tie: CPU returns the last
        # tied entry, CUDA another, both inside the Clarke set) are new findings, checked above
        evaluated = {(r["op"], r["case"]) for r in stored["results"]}
        recorded = {(d["op"], d["case"]) for d in stored["differences"]}
        assert {(d["op"], d["case"]) for d in diffs} & evaluated <= recorded, diffs


def _small_matrix(monkeypatch):
    from nsverify.conventions import matrix

    real_run, real_build = matrix.run_matrix, matrix.build_cases
    few = ["relu", "amax", "clamp_tensor"]
    monkeypatch.setattr(matrix, "build_cases", lambda ops=None: real_build(ops or few))
    fast = lambda *a, **k: real_run(*a, **{**k, "compile_backend": "aot_eager"})  # noqa: E731
    monkeypatch.setattr(cv, "run_matrix", fast)


def test_report_section_quick_with_gpu_data(monkeypatch, tmp_path):
    from nsverify.report import RunContext
    from nsverify.sections import conventions as sec

    _small_matrix(monkeypatch)
    monkeypatch.setattr(sec, "DTYPES", ("float16", "float32"))
    fake = cv.run_matrix(["relu"], ["float32"], ["cpu"], ["eager"])
    data = cv.to_json(fake, {"device_name": "FakeGPU"})
    for r in data["results"]:
        r["device"], r["rule"] = "cuda", "right"  # pretend the GPU differs
    # a real GPU file also holds that machine's CPU rows: they must not duplicate the local CPU keys
    data["results"] += cv.to_json(fake, {"device_name": "FakeGPU"})["results"]
    path = tmp_path / "conventions.json"
    path.write_text(json.dumps(data))
    monkeypatch.setattr(sec, "GPU_DATA", path)
    out = sec.conventions_section(RunContext(quick=True, section="conventions"))
    json.dumps(out)
    keys = [m["key"] for m in out["data"]["metrics"]]
    assert "relu|x=0|float32|cpu|eager" in keys and "relu|x=0|float16|cpu|jvp" in keys
    assert "relu|x=0|float32|cpu|compile" in keys and "relu|x=0|float16|cpu|compile" not in keys
    assert "relu|x=0|float32|cuda|eager" in keys
    assert len(keys) == len(set(keys))
    from nsverify.report.schema import validate_metrics

    validate_metrics(out["data"]["metrics"], "conventions")
    assert all(m["kind"] in ("convention", "counterexample", "info") for m in out["data"]["metrics"])
    assert out["claims"][0]["held"] and out["claims"][1]["held"]
    assert "CUDA" in out["claims"][-1]["claim"] and out["claims"][-1]["held"] is False
    assert "clamp_tensor (min == max > x)" in out["summary"]
    # without GPU data the section says so
    monkeypatch.setattr(sec, "GPU_DATA", tmp_path / "missing.json")
    monkeypatch.setattr(sec, "DTYPES", ("float32",))
    assert "No GPU data" in sec.conventions_section(RunContext(quick=True, section="conventions"))["summary"]


def test_gpu_script_smoke(tmp_path):
    import runpy
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "scripts" / "gpu" / "conventions.py"
    mod = runpy.run_path(str(script))
    assert mod["main"](["--out", str(tmp_path), "--smoke", "--compile-budget", "60"]) == 0
    data = json.loads((tmp_path / "conventions.json").read_text())
    assert data["schema"] == cv.SCHEMA and data["meta"]["smoke"] and not data["unexpected"]
    assert {r["mode"] for r in data["results"]} == {"eager", "func", "jvp", "compile"}


def test_the_terminal_table_fits_120_columns_and_speaks_one_vocabulary():
    """The table fits a 120-column terminal, and its 'observed' column names rules as its 'expected' column does
    (the registry's vocabulary: ``inside``, ``mix=1/2``), naming the columns where the rules differ (issue 40)."""
    res = cv.run_matrix(["clamp", "clamp_tensor", "abs", "relu"], ["float32", "float64"], ["cpu"], ["eager", "jvp"])
    text = cv.format_table(res)
    assert max(len(line) for line in text.splitlines()) <= cv.matrix.TABLE_WIDTH == 120
    rows = {tuple(line.split()[:2]): line for line in text.splitlines() if line.startswith(("clamp ", "abs "))}
    assert rows[("clamp", "x=0")].split()[2:4] == ["inside", "inside"]
    assert rows[("abs", "x=0")].split()[2:4] == ["mix=1/2", "mix=1/2"]
    tensor = text[text.index("min == max > x *"):]
    assert "other in eager; last in jvp" in " ".join(tensor.split())
    assert "Evaluated 4 columns: cpu; f32, f64; eager, jvp." in " ".join(text.split())


def test_one_case_that_does_not_compile_leaves_the_others_compiled(monkeypatch):
    """A batch whose compile fails is split until the failing case stands alone: it records its error, every
    other case is compiled and judged (on a GPU machine one op without an Inductor derivative once turned all
    356 compiled cells into errors)."""
    from nsverify.conventions import matrix

    real = matrix._compiled_grads
    calls = []

    def fails_with_abs(cases, *args):
        calls.append(len(cases))
        if any(c.op == "abs" for c in cases):
            raise RuntimeError("derivative for aten::abs is not implemented")
        return real(cases, *args)

    monkeypatch.setattr(matrix, "_compiled_grads", fails_with_abs)
    cases = matrix.build_cases(["relu", "abs", "amax", "clamp_tensor"])
    results, msg = matrix.evaluate_batch(cases, "float32", "cpu", "compile", backend="aot_eager")
    bad = [r for r in results if r.rule == "error"]
    assert {r.op for r in bad} == {"abs"} and all("aten::abs" in r.error for r in bad)
    assert all(r.rule != "error" and r.in_clarke != "n/a" for r in results if r.op != "abs")
    assert f"{len(bad)} failed to compile" in msg
    n_abs = sum(c.op == "abs" for c in cases)
    assert len(calls) <= 1 + 2 * n_abs * (len(cases).bit_length() + 1)
