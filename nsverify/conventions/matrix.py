"""The conventions matrix: what PyTorch's AD returns at every kink and tie of the registry.

For each registry primitive, each kink (elementwise) or tie case (selection), each dtype, device and mode
(eager reverse, ``torch.func.grad``, forward mode ``torch.func.jvp``, ``torch.compile``) it records PyTorch's
derivative and classifies it in the one rule vocabulary (:mod:`nsverify.registry.rules`): ``rule`` names it
among the matrix's candidate rules (at a kink ``left``, ``right`` and ``even`` -- the rule ``mix=1/2`` -- or
``left=right`` where the two sides agree; at a tie ``first``, ``last``, ``even``; ``other`` when none matches:
these are the report's metric values), ``observed`` is the :class:`~nsverify.registry.rules.Rule` it equals
(the registry's own rule when it matches, e.g. ``inside``, ``returned``), ``in_clarke`` whether it lies in the
Clarke set (exact rational test), and ``as_expected`` whether it is the rule the registry records (its exact
value, or the value rounded to the dtype; a recorded violation of kind "no" counts as expected).
``nsverify conventions`` prints the table; ``--json`` writes the schema documented in docs/conventions.md, with
the run's provenance (:func:`provenance`).

Compilation is slow on CPU, so every primitive and case of one dtype/device is compiled as ONE function
(one graph, one compile per dtype and device); ``compile_dtypes`` limits which dtypes are compiled.
"""
from __future__ import annotations

import platform
import sys
import textwrap
import time
from dataclasses import asdict, dataclass, field
from fractions import Fraction
from typing import Callable, Sequence

import torch

from nsverify import registry
from nsverify.conventions.judge import KINK_CANDIDATES, directional_matches, judge
from nsverify.devices import FLOAT_DTYPES, dtype_name, parse_device, parse_dtype
from nsverify.errors import BadArgumentError, NsverifyError
from nsverify.rational import in_hull
from nsverify.registry import Rule

MODES = ("eager", "func", "jvp", "compile")
#: the modes of each framework's matrix (JAX's: :mod:`nsverify.conventions.jax_matrix`)
FRAMEWORK_MODES = {"torch": MODES, "jax": ("grad", "jvp", "jit", "vmap")}
SCHEMA = "nsverify.conventions/1"


@dataclass
class Case:
    """One point to evaluate: an elementwise kink or a selection tie case."""

    op: str
    label: str
    kind: str
    values: tuple  # exact input values (Fractions)
    shape: tuple
    cotangent: tuple | None
    rule: Rule  # the rule the registry records (PyTorch's)
    rules: dict  # candidate name -> exact vector (or 1-tuple for elementwise): what ``Result.rule`` names
    clarke: Callable  # exact vector -> True/False
    fn: Callable  # tensor -> tensor (the primitive on this case's input)
    directional: Callable | None = None  # tangent (exact) -> exact one-sided directional derivative
    mode_rules: dict = field(default_factory=dict)  # per-mode exceptions to ``rule``
    #: (rule, input tensor) -> the exact vector the rule gives here, or None when it does not determine one
    rule_vector: Callable | None = None
    violation: Callable | None = None  # dtype name -> the recorded Violation, or None
    #: PyTorch's own gaps (the entry's ``unsupported``): a mode or dtype name -> the error PyTorch raises there
    unsupported: dict = field(default_factory=dict)

    def rule_for(self, mode: str) -> Rule:
        return self.mode_rules.get(mode, self.rule)

    def supported(self, dtype_name: str, mode: str) -> bool:
        """Does PyTorch evaluate this case in ``dtype_name`` and ``mode`` (the entry records no gap there)?"""
        return dtype_name not in self.unsupported and mode not in self.unsupported


@dataclass
class Result:
    op: str
    case: str
    dtype: str
    device: str
    mode: str
    derivative: list  # PyTorch's derivative (floats; exact values of the dtype)
    rule: str  # its name among the candidate rules (the report's metric value), "other" or "error"
    in_clarke: str  # "yes", "rounding" (only after rounding the exact rule), "no"
    expected: str  # the rule the registry records for this mode (canonical Rule text)
    as_expected: bool
    #: jvp mode: per tested tangent, whether the jvp equals the exact one-sided directional derivative
    directional: dict | None = None
    error: str | None = None
    extra: dict = field(default_factory=dict)
    #: the Rule (canonical text) PyTorch's derivative equals: the registry's rule when it matches, else the
    #: candidate rule named by ``rule``; None when no rule describes it
    observed: str | None = None
    #: what the documented rule promises at this case (:mod:`nsverify.conventions.promised`: the gradient, or at a
    #: locally convex/concave kink or tie the minimum-norm Clarke element, exact, as text; "not covered") and
    #: whether the derivative follows it ("yes", "rounding", "no", "not covered", "n/a")
    promised: str | None = None
    follows: str | None = None


# ----------------------------------------------------------------------------------------------------------
# building the cases from the registry
# ----------------------------------------------------------------------------------------------------------
def _op_fn(entry, framework: str, extra: dict):
    """The entry's op as a function of one array: its torch function (with its kwargs and the case's extra), or
    its JAX expression (:func:`nsverify.registry.jax_function`)."""
    if framework == "jax":
        return registry.jax_function(entry.jax, **extra)
    kw = dict(entry.kwargs) if entry.kind == "elementwise" else dict(extra)
    return lambda t: entry.torch_fn(t, **kw)


def elementwise_cases(entry: registry.Elementwise, framework: str = "torch") -> list[Case]:
    out = []
    for i, b in enumerate(entry.breakpoints):
        left, right = entry.one_sided(b)
        rules = {name: (entry.kink_derivative(i, r),) for name, r in KINK_CANDIDATES.items()}
        if left == right:
            rules = {"left=right": (left,)}
        lo, hi = min(left, right), max(left, right)

        def directional(v, left=left, right=right):
            return right * v[0] if v[0] >= 0 else left * v[0]  # f'(b; v) for a scalar tangent v

        out.append(Case(entry.name, entry.kink_label(i), "elementwise", (b,), (1,), None, entry.torch_rules[i],
                        rules, (lambda vec, lo=lo, hi=hi: lo <= vec[0] <= hi),
                        _op_fn(entry, framework, {}), directional,
                        mode_rules={m: rs[i] for m, rs in entry.mode_rules.items()} if framework == "torch" else {},
                        rule_vector=lambda r, x, e=entry, i=i: (e.kink_derivative(i, r),),
                        violation=lambda dt, e=entry, i=i: e.violation(i, dt),
                        unsupported=dict(entry.unsupported) if framework == "torch" else {}))
    return out


def selection_cases(entry: registry.Selection, framework: str = "torch") -> list[Case]:
    out = []
    for c in entry.cases:
        fn = _op_fn(entry, framework, dict(c.extra))

        def rule_vector(rule, x, c=c, e=entry):
            returned = e.indices_fn(x) if rule.name == "returned" else None
            return c.rule_vector(rule, returned)

        out.append(Case(entry.name, c.label, "selection", c.values, c.shape, c.cotangent, c.torch_rule,
                        dict(c.rules), (lambda vec, c=c: in_hull(vec, c.pieces)), fn, c.directional,
                        dict(c.mode_rules), rule_vector, c.violation,
                        unsupported=dict(entry.unsupported) if framework == "torch" else {}))
    return out


def build_cases(ops: Sequence[str] | None = None, framework: str = "torch") -> list[Case]:
    """The cases of ``ops`` (default: every registry op) with the op of ``framework`` ("torch", "jax"); an op
    without a JAX counterpart has no JAX cases (:func:`nsverify.conventions.jax_matrix.missing` lists it)."""
    measured = {e.name for e in (registry.select(jax=True) if framework == "jax" else registry.select())}
    wanted = [registry.get(n) for n in ops] if ops else registry.select()  # an unknown op raises UnknownOpError
    cases = []
    for entry in (e for e in wanted if e.name in measured):
        cases += (elementwise_cases if entry.kind == "elementwise" else selection_cases)(entry, framework)
    return cases


# ----------------------------------------------------------------------------------------------------------
# evaluating one case
# ----------------------------------------------------------------------------------------------------------
def _scalar_fn(case: Case, dtype, device):
    cot = None if case.cotangent is None else registry.exact_tensor(case.cotangent, dtype, device)

    def f(t):
        y = case.fn(t)
        return (y * cot).sum() if cot is not None else y.sum()
    return f


def _eager(case, x, f):
    x = x.clone().requires_grad_(True)
    (g,) = torch.autograd.grad(f(x), x)
    return g


def _func(case, x, f):
    return torch.func.grad(f)(x)


def _jvp_rows(case, x, f):
    """The forward-mode derivative as a vector: jvp along each unit tangent."""
    flat = x.flatten()
    vals = []
    for i in range(flat.numel()):
        e = torch.zeros_like(flat)
        e[i] = 1
        _, t = torch.func.jvp(f, (x,), (e.reshape(x.shape),))
        vals.append(t)
    return torch.stack(vals).reshape(x.shape)


def _exact(t: torch.Tensor) -> list[Fraction]:
    return [Fraction(v) for v in t.detach().double().cpu().flatten().tolist()]


def _directional(case: Case, x, f, dtype) -> dict:
    """Does the jvp equal the exact one-sided directional derivative f'(x; v)? (:func:`directional_matches`)"""
    def jvp(v):
        tv = torch.tensor([float(a) for a in v], dtype=x.dtype, device=x.device).reshape(x.shape)
        return Fraction(torch.func.jvp(f, (x,), (tv,))[1].item())

    return directional_matches(case, x.numel(), jvp, dtype)


def error_text(exc: BaseException) -> str:
    """One line naming an exception and its cause (a compile failure's cause is on its second line)."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    text = f"{type(exc).__name__}: {' '.join(lines[:2])}"
    return text[:300]


def evaluate_case(case: Case, dtype, device, mode: str, compiled_grad=None) -> Result:
    dt, dev = dtype_name(dtype), str(device)
    expected = case.rule_for(mode)
    try:
        x = registry.exact_tensor(case.values, dtype, device).reshape(case.shape)
        f = _scalar_fn(case, dtype, device)
        if mode == "eager":
            g = _eager(case, x, f)
        elif mode == "func":
            g = _func(case, x, f)
        elif mode == "jvp":
            g = _jvp_rows(case, x, f)
        elif mode == "compile":
            g = compiled_grad
        else:
            raise NsverifyError(f"unknown mode {mode!r}: choose from {', '.join(MODES)}.")
        vec = _exact(g)
        v = judge(case, vec, dt, expected, x, case.violation(dt) if case.violation else None)
        res = Result(case.op, case.label, dt, dev, mode, [float(a) for a in vec], v.rule, v.in_clarke,
                     str(expected), v.as_expected, observed=v.observed)
        if mode == "jvp":
            res.directional = _directional(case, x, f, dtype)
        return res
    except NsverifyError:
        raise
    except Exception as exc:  # a mode that PyTorch does not support for this op: record, do not abort
        return Result(case.op, case.label, dt, dev, mode, [], "error", "n/a", str(expected), False,
                      error=error_text(exc))


def _compiled_grads(cases: list[Case], dtype, device, backend: str):
    """Gradients of every case through ONE compiled function (one compile per dtype/device)."""
    from nsverify.conventions.inductor import capability_cache_dir

    xs = [registry.exact_tensor(c.values, dtype, device).reshape(c.shape) for c in cases]
    fs = [_scalar_fn(c, dtype, device) for c in cases]

    def total(*inputs):
        return sum(f(t) for f, t in zip(fs, inputs))

    capability_cache_dir()  # one Inductor cache per CPU capability: its cache does not key on it
    torch._dynamo.reset()
    compiled = torch.compile(total, backend=backend, fullgraph=False)
    leaves = [x.clone().requires_grad_(True) for x in xs]
    return list(torch.autograd.grad(compiled(*leaves), leaves, allow_unused=True))


def evaluate_batch(cases: Sequence[Case], dtype, device, mode: str, backend: str = "inductor") -> tuple[list, str]:
    """The results of ``cases`` in ``mode`` on one dtype and device, in this process, and a progress message (the
    compile time in mode compile, where every case is compiled as one function)."""
    dt, dev = parse_dtype(dtype), parse_device(device)
    cases = [c for c in cases if c.supported(dtype_name(dt), mode)]  # PyTorch's recorded gaps are left out
    if mode != "compile":
        return [evaluate_case(c, dt, dev, mode) for c in cases], ""
    t0 = time.monotonic()
    grads = _compiled_grads_split(list(cases), dt, dev, backend)
    results = [Result(c.op, c.label, dtype_name(dt), str(dev), mode, [], "error", "n/a", str(c.rule_for(mode)),
                      False, error=error_text(g)) if isinstance(g, Exception) else evaluate_case(c, dt, dev, mode, g)
               for c, g in zip(cases, grads)]
    failed = sum(isinstance(g, Exception) for g in grads)
    return results, (f"compiled {len(cases)} cases ({dtype_name(dt)}, {dev}) in {time.monotonic() - t0:.1f}s"
                     + (f"; {failed} failed to compile" if failed else ""))


def _compiled_grads_split(cases: list[Case], dtype, device, backend: str) -> list:
    """:func:`_compiled_grads`, and where the compile of the whole batch fails, of each half again (one case that
    Inductor cannot compile, such as an op without a derivative formula, costs about 2 log2(n) compiles, not the
    whole batch): per case its gradients, or the exception of the single-case compile that failed."""
    try:
        return _compiled_grads(cases, dtype, device, backend)
    except Exception as exc:  # noqa: BLE001 - recorded per case below
        if len(cases) == 1:
            return [exc]
    half = len(cases) // 2
    return (_compiled_grads_split(cases[:half], dtype, device, backend)
            + _compiled_grads_split(cases[half:], dtype, device, backend))


def crashed_result(case: Case, dtype, device, mode: str, why: str, repro_dir=None) -> Result:
    """The ``"crashed"`` cell of a case whose evaluation killed its process (``why``: the signal, or the time
    limit), with a standalone reproduction script written to ``repro_dir`` (its path in ``extra["repro"]``)."""
    from nsverify.conventions.scripts import write_crash_repro

    dt = dtype_name(parse_dtype(dtype))
    res = Result(case.op, case.label, dt, str(device), mode, [], "crashed", "n/a", str(case.rule_for(mode)), False,
                 error=why)
    res.extra["repro"] = str(write_crash_repro(res, repro_dir))
    return res


def matrix_plan(ops: Sequence[str] | None, dtypes: Sequence, devices: Sequence, modes: Sequence[str],
                compile_dtypes: Sequence | None) -> tuple[list, list, list, list[str], list]:
    """The checked inputs of one matrix run: ``(cases, dtypes, devices, modes, compile dtypes)``, every option
    validated before any work (an empty list, an unknown mode, dtype or device raises with the fix)."""
    modes = list(modes)
    for name, given in (("ops", ops), ("dtypes", dtypes), ("devices", devices), ("modes", modes)):
        if given is not None and not list(given):
            raise BadArgumentError(f"{name} is empty, so nothing would be evaluated: name at least one"
                                   f"{' (or pass None for every registry op)' if name == 'ops' else ''}.")
    bad = [m for m in modes if m not in MODES]
    if bad:
        raise NsverifyError(f"unknown mode(s) {bad}: choose from {', '.join(MODES)}.")
    dts = [parse_dtype(d) for d in dtypes]
    devs = [parse_device(d) for d in devices]
    cases = build_cases(ops)
    cdts = dts if compile_dtypes is None else [parse_dtype(d) for d in compile_dtypes]
    return cases, dts, devs, modes, cdts


def run_matrix(ops: Sequence[str] | None = None, dtypes: Sequence = ("float32",),
               devices: Sequence = ("cpu",), modes: Sequence[str] = ("eager", "func", "jvp"),
               compile_dtypes: Sequence | None = None, compile_backend: str = "inductor",
               progress: Callable | None = None) -> list[Result]:
    """Evaluate the matrix in this process.  ``compile_dtypes``: the dtypes that get the compile mode (default:
    all). :func:`nsverify.conventions.isolation.run_matrix_isolated` evaluates the same cells in child processes
    (a crash inside torch becomes a crashed cell), with the same results otherwise."""
    cases, dts, devs, modes, cdts = matrix_plan(ops, dtypes, devices, modes, compile_dtypes)
    results: list[Result] = []
    steps = len(devs) * len(dts)
    step = 0
    for dev in devs:
        for dt in dts:
            step += 1
            for mode in modes:
                if mode == "compile" and dt not in cdts:
                    continue
                rs, msg = evaluate_batch(cases, dt, dev, mode, compile_backend)
                results += rs
                if progress and msg:
                    progress(msg, step, steps)
            if progress:
                progress(f"{dtype_name(dt)} on {dev}: {len(cases)} cases x {len(modes)} modes", step, steps)
    from nsverify.conventions.promised import annotate

    annotate(results)
    return results


def crashed(results: Sequence[Result]) -> list[Result]:
    """The cells whose evaluation crashed its (child) process."""
    return [r for r in results if r.rule == "crashed"]


def batch_crashes(results: Sequence[Result]) -> list[str]:
    """The crashes of isolated batches that no single cell reproduces (each cell was measured in a part of its
    batch that ran), one message each."""
    return list(dict.fromkeys(r.extra["batch_crash"] for r in results if r.extra.get("batch_crash")))


def differences(results: Sequence[Result]) -> list[dict]:
    """Cases whose rule is not the same across every dtype, device and mode evaluated (crashed cells, which
    measured nothing, are left out: :func:`crashed` lists them)."""
    by_case: dict = {}
    for r in results:
        if r.rule == "crashed":
            continue
        by_case.setdefault((r.op, r.case), []).append(r)
    out = []
    for (op, case), rs in by_case.items():
        rules = {(r.dtype, r.device, r.mode): r.rule for r in rs}
        if len(set(rules.values())) > 1:
            out.append({"op": op, "case": case,
                        "rules": {"|".join(k): v for k, v in sorted(rules.items())}})
    return out


def provenance(devices: Sequence = ("cpu",), command: Sequence[str] | None = None) -> dict:
    """Where a matrix was measured: torch version (and its CUDA build), device names, UTC date, the command,
    Python and platform."""
    import datetime

    names = []
    for d in devices:
        dev = torch.device(d)
        names.append(torch.cuda.get_device_name(dev) if dev.type == "cuda" else platform.processor() or "cpu")
    return {"torch": torch.__version__, "torch_cuda": torch.version.cuda, "devices": [str(d) for d in devices],
            "device_names": names,
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "command": " ".join(command if command is not None else sys.argv),
            "python": platform.python_version(), "platform": platform.platform()}


def to_json(results: Sequence[Result], meta: dict | None = None) -> dict:
    return {"schema": SCHEMA, "torch": torch.__version__, "meta": meta or {},
            "results": [asdict(r) for r in results], "differences": differences(results),
            "unexpected": [asdict(r) for r in results if not r.as_expected and r.rule != "crashed"],
            "crashed": [asdict(r) for r in crashed(results)], "batch_crashes": batch_crashes(results)}


def result_from_json(row: dict) -> Result:
    """A :class:`Result` from one row of the JSON schema (unknown keys are ignored)."""
    return Result(**{k: v for k, v in row.items() if k in Result.__dataclass_fields__})


def metrics(results: Sequence[Result]) -> list[dict]:
    return [{"key": f"{r.op}|{r.case}|{r.dtype}|{r.device}|{r.mode}", "kind": "convention", "value": r.rule}
            for r in results]


def _fmt_vec(v: list, width: int = 28) -> str:
    s = ",".join(f"{x:.4g}" for x in v)
    return s if len(s) <= width else s[:width - 3] + "..."


_MODE_ORDER = [m for ms in FRAMEWORK_MODES.values() for m in ms]


#: the terminal table's width: it fits a 120-column terminal (a long case or observed text wraps within its
#: column, a long derivative is cut with "..."; ``--json`` has every value)
TABLE_WIDTH = 120
#: the widest each column of the table gets (op, case, expected, observed, derivative, Clarke)
_COLUMN_MAX = (19, 22, 9, 30, 22, 8)


def _short_dtype(dtype: str) -> str:
    return dtype.replace("float", "f")


def _describe_columns(cols: set, every: list) -> str:
    """The columns ``cols`` (``(device, dtype, mode)``) among ``every`` in few words: ``"jvp"`` (every column of
    that mode), ``"f16, bf16"`` (of those dtypes), ``"cuda"``, else each column as ``f16/jvp``."""
    if cols == set(every):
        return "all"
    for pos, name in ((2, str), (1, _short_dtype), (0, str)):
        values = sorted({k[pos] for k in cols}, key=lambda v: [k[pos] for k in every].index(v))
        if cols == {k for k in every if k[pos] in values}:
            return ", ".join(name(v) for v in values)
    devices = len({k[0] for k in every}) > 1
    return ", ".join(("/".join([d] if devices else []) + ("/" if devices else "") + f"{_short_dtype(t)}/{m}")
                     for d, t, m in every if (d, t, m) in cols)


def _column_order(keys) -> list:
    """``(device, dtype, mode)`` columns in the table's order: device, dtype (narrow first), mode."""
    return sorted(keys, key=lambda k: (k[0], list(FLOAT_DTYPES).index(k[1]) if k[1] in FLOAT_DTYPES else 9,
                                       _MODE_ORDER.index(k[2]) if k[2] in _MODE_ORDER else 99))


def rules_text(rules: dict) -> str:
    """A :func:`differences` entry's ``rules`` (``"dtype|device|mode" -> rule``) in words: each rule with the
    columns that follow it (``left in eager, func; right in jvp``)."""
    cols = {tuple(k.split("|")): v for k, v in rules.items()}
    cols = {(dev, dt, mode): v for (dt, dev, mode), v in cols.items()}
    every = _column_order(cols)
    by_rule: dict = {}
    for k in every:
        by_rule.setdefault(cols[k], set()).add(k)
    return "; ".join(f"{rule} in {_describe_columns(ks, every)}" for rule, ks in by_rule.items())


def _observed_text(cells: dict, every: list) -> str:
    """What PyTorch's derivative follows over the columns, in the registry's rule vocabulary (the expected
    column's): one rule when every column agrees, else each rule with the columns that follow it."""
    by_rule: dict = {}
    for k in every:
        if k in cells:
            by_rule.setdefault(_cell_text(cells[k]), set()).add(k)
    if len(by_rule) == 1:
        return next(iter(by_rule))
    return "; ".join(f"{rule} in {_describe_columns(ks, every)}" for rule, ks in by_rule.items())


def format_table(results: Sequence[Result]) -> str:
    """The terminal table (at most :data:`TABLE_WIDTH` columns): one row per (op, case) with the rule the
    registry records, the rule PyTorch's derivative follows over every evaluated dtype/device/mode (both in the
    registry's rule vocabulary; the columns that differ named), the derivative and whether it is in the Clarke
    set."""
    every = _column_order({(r.device, r.dtype, r.mode) for r in results})
    rows: dict = {}
    for r in results:
        rows.setdefault((r.op, r.case), {})[(r.device, r.dtype, r.mode)] = r
    head = ["op", "case", "expected", "observed", "derivative (1st col.)", "Clarke"]
    lines = [head]
    for (op, case), cells in rows.items():
        first = next(iter(cells.values()))
        flag = "" if len({c.rule for c in cells.values() if c.rule != "crashed"}) <= 1 else " *"
        lines.append([op, case + flag, first.expected, _observed_text(cells, every),
                      _fmt_vec(first.derivative, _COLUMN_MAX[4]), first.in_clarke])
    widths = [min(max(len(str(row[i])) for row in lines), most) for i, most in enumerate(_COLUMN_MAX)]
    out = []
    for row in lines:
        wrapped = [textwrap.wrap(str(c), w, break_on_hyphens=False) or [""] for c, w in zip(row, widths)]
        for i in range(max(map(len, wrapped))):
            out.append("  ".join((w[i] if i < len(w) else "").ljust(n) for w, n in zip(wrapped, widths)).rstrip())
    columns = f"{len(every)} columns: " + ", ".join(
        sorted({d for d, _, _ in every})) + "; " + ", ".join(dict.fromkeys(_short_dtype(t) for _, t, _ in every)) \
        + "; " + ", ".join(dict.fromkeys(m for _, _, m in every))
    return "\n".join(out) + "\n\n" + textwrap.fill(
        f"Evaluated {columns}. 'expected' is the rule the registry records, 'observed' the rule PyTorch's "
        "derivative follows, in the same vocabulary (docs/conventions.md); '!' = not the rule the registry records "
        "(nor a violation it records); '*' = rules differ across columns; 'other' = none of the named rules; "
        "'CRASHED' = the evaluation killed its process (a reproduction script is written for it).", TABLE_WIDTH)


def _cell_text(r: Result) -> str:
    """A cell's rule in the registry's vocabulary (``observed``: the rule text ``expected`` uses), ``other`` when
    it matches no rule, ``CRASHED``; ``!`` when not as expected."""
    if r.rule == "crashed":
        return "CRASHED"
    return (r.observed or r.rule) + ("" if r.as_expected else "!")
