"""Equivalent formulations as one object: one table of functions written several ways, each group with its exact
Clarke set at its kinks or ties, measured across the dtypes and modes of the conventions matrix.

``relu(x)``, ``clamp_min(x, 0)``, ``maximum(x, 0)``, ``where(x > 0, x, 0)``, ``x * (x > 0)`` and ``(x + abs(x)) /
2`` are one function; so are ``hardtanh``/``relu6`` and ``clamp`` with the same bounds, ``maximum(a, b)`` and its
relu form ``a + relu(b - a)``, ``abs(x)`` and ``x * sign(x)``, ``amax(x, dim)`` and ``max(x, dim).values``. At a kink
or tie their derivatives differ. Each :class:`Group` of :data:`TABLE` names its points (exact inputs, the cell's
inputs being every entry of the input tensor: a constant such as the 0 of ``maximum(x, 0)`` is not an input), the
exact object of the registry that describes the function there (an elementwise entry's kink, or a tie case built
from selection windows: :func:`Point.exact`), and its formulations as source text (the one text both the
measurement and the reproduction scripts use). Each formulation that is literally a registry cell names it
(``cell``): the recorded releases then give its history.

:func:`measure` evaluates every formulation at every point in the given dtypes and modes (the matrix's own
evaluation: :mod:`nsverify.conventions.matrix`), judging each derivative against the documented rule's promise
(:mod:`nsverify.conventions.promised`); :func:`disagreements` lists the pairs of formulations that return different
derivatives, with the columns where they do."""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from fractions import Fraction
from types import SimpleNamespace
from typing import Callable, Sequence

from nsverify import registry
from nsverify.conventions.promised import Promise, elementwise_promise, follows_value, tie_promise
from nsverify.errors import NsverifyError
from nsverify.registry.windows import Window

F = Fraction
#: the modes and dtypes a formulation is measured in (the matrix's modes; compile takes a minute per dtype on CPU)
MODES = ("eager", "func", "jvp", "compile")
DTYPES = ("float32", "float64", "bfloat16")


@dataclass(frozen=True)
class Formulation:
    """One way to write the group's function: ``code`` is an expression in ``x`` (the input tensor) over
    ``torch`` and ``F`` (torch.nn.functional); ``cell`` the registry cell it literally is, as ``(op, {point label:
    case label})`` (None: not a registry cell, no recorded history)."""

    name: str
    code: str
    cell: tuple[str, dict] | None = None
    #: why PyTorch's derivative of this formulation is known to leave the Clarke set at the group's points ("":
    #: it is not); the property suite expects a failure there and reports it
    outside: str = ""

    @functools.cached_property
    def fn(self) -> Callable:
        import torch
        import torch.nn.functional as tF

        code = compile(f"lambda x: {self.code}", f"<formulation {self.name}>", "eval")
        return eval(code, {"torch": torch, "F": tF})  # noqa: S307 (the table's own text)


@dataclass(frozen=True)
class Point:
    """One point of a group: exact input ``values`` of ``shape``, a ``cotangent`` (None: sum of the output),
    and how the registry describes the function there: ``kink`` = (elementwise entry name, scalar bound
    arguments or None, kink index), or ``windows`` (selection windows over the flattened input)."""

    label: str
    values: tuple
    shape: tuple
    cotangent: tuple | None = None
    kink: tuple | None = None
    windows: tuple = ()

    def exact(self):
        """The registry object of the function here: ``(Elementwise, kink index)`` or a TieCase."""
        if self.kink is not None:
            name, args, i = self.kink
            entry = registry.get(name)
            return (entry if args is None else entry.instance(args)), i
        return registry.selection_case(self.label, self.values, self.shape, self.windows, "first",
                                       cotangent=self.cotangent)

    def clarke_vertices(self) -> tuple:
        """The exact Bouligand gradients whose hull is the Clarke set (one entry per input)."""
        ex = self.exact()
        if isinstance(ex, tuple):
            entry, i = ex
            left, right = entry.one_sided(entry.breakpoints[i])
            return tuple(sorted({(left,), (right,)}))
        return tuple(ex.pieces)

    def promise(self, name: str) -> Promise:
        ex = self.exact()
        if isinstance(ex, tuple):
            p = elementwise_promise(*ex)
            return Promise(name, self.label, p.shape, p.value, p.inputs, p.reason)
        return tie_promise(name, ex)


@dataclass(frozen=True)
class Group:
    name: str
    function: str
    inputs: str
    points: tuple[Point, ...]
    formulations: tuple[Formulation, ...]
    note: str = ""

    def point(self, label: str) -> Point:
        for p in self.points:
            if p.label == label:
                return p
        raise NsverifyError(f"formulation group {self.name!r} has no point {label!r}: its points are "
                            f"{[p.label for p in self.points]}.")


def _x(b) -> Point:
    return Point(f"x={b}", (F(b),), (1,))


def _kinks(entry: str, args, bounds) -> tuple[Point, ...]:
    return tuple(Point(f"x={b}", (F(b),), (1,), kink=(entry, args, i)) for i, b in enumerate(bounds))


_PAIR = tuple(Window((j, 3 + j), 0, "max") for j in range(3))
_ROWS = tuple(Window(tuple(3 * i + j for j in range(3)), 0, "max") for i in range(2))

#: the table: every group of equivalent formulations
TABLE: tuple[Group, ...] = (
    Group("relu", "max(x, 0)", "x", _kinks("relu", None, (0,)), (
        Formulation("relu", "torch.relu(x)", ("relu", {"x=0": "x=0"})),
        Formulation("clamp(min=0)", "torch.clamp(x, min=0)"),
        Formulation("clamp_min(x, 0)", "torch.clamp_min(x, 0)"),
        Formulation("maximum(x, 0)", "torch.maximum(x, torch.zeros_like(x))"),
        Formulation("where(x > 0, x, 0)", "torch.where(x > 0, x, torch.zeros_like(x))"),
        Formulation("x * (x > 0)", "x * (x > 0)"),
        Formulation("(x + abs(x)) / 2", "(x + torch.abs(x)) / 2"),
        Formulation("threshold(x, 0, 0)", "F.threshold(x, 0.0, 0.0)"),
    )),
    Group("clamp(0, 1)", "min(max(x, 0), 1)", "x", _kinks("clamp", None, (0, 1)), (
        Formulation("clamp(x, 0, 1)", "torch.clamp(x, 0, 1)", ("clamp", {"x=0": "x=0", "x=1": "x=1"})),
        Formulation("hardtanh(x, 0, 1)", "F.hardtanh(x, 0.0, 1.0)"),
        Formulation("clamp_max(clamp_min(x, 0), 1)", "torch.clamp_max(torch.clamp_min(x, 0), 1)"),
        Formulation("minimum(maximum(x, 0), 1)",
                    "torch.minimum(torch.maximum(x, torch.zeros_like(x)), torch.ones_like(x))"),
        Formulation("relu(x) - relu(x - 1)", "torch.relu(x) - torch.relu(x - 1)"),
    )),
    Group("relu6", "min(max(x, 0), 6)", "x", _kinks("relu6", None, (0, 6)), (
        Formulation("relu6", "F.relu6(x)", ("relu6", {"x=0": "x=0", "x=6": "x=6"})),
        Formulation("hardtanh(x, 0, 6)", "F.hardtanh(x, 0.0, 6.0)"),
        Formulation("clamp(x, 0, 6)", "torch.clamp(x, 0, 6)"),
    )),
    Group("hardtanh", "min(max(x, -1), 1)", "x", _kinks("hardtanh", None, (-1, 1)), (
        Formulation("hardtanh", "F.hardtanh(x)", ("hardtanh", {"x=-1": "x=-1", "x=1": "x=1"})),
        Formulation("clamp(x, -1, 1)", "torch.clamp(x, -1, 1)"),
    )),
    Group("maximum(a, b)", "max(a, b), columnwise", "a and b (rows 0 and 1 of x)", (
        Point("x == y", (F(1), F(0), F(2), F(1), F(3), F(2)), (2, 3), (F(1), F(2), F(3)), windows=_PAIR),), (
        Formulation("maximum(a, b)", "torch.maximum(x[0], x[1])", ("maximum", {"x == y": "x == y"})),
        Formulation("fmax(a, b)", "torch.fmax(x[0], x[1])"),
        Formulation("a + relu(b - a)", "x[0] + torch.relu(x[1] - x[0])"),
        Formulation("(a + b + abs(a - b)) / 2", "(x[0] + x[1] + torch.abs(x[0] - x[1])) / 2"),
        Formulation("where(a > b, a, b)", "torch.where(x[0] > x[1], x[0], x[1])"),
        Formulation("amax(stack, 0)", "torch.amax(x, dim=0)"),
        Formulation("max(stack, 0).values", "torch.max(x, dim=0).values"),
    ), note="ties at columns 0 and 2 (cotangent 1, 2, 3)"),
    Group("abs", "|x|", "x", _kinks("abs", None, (0,)), (
        Formulation("abs", "torch.abs(x)", ("abs", {"x=0": "x=0"})),
        Formulation("x * sign(x)", "x * torch.sign(x)"),
        Formulation("maximum(x, -x)", "torch.maximum(x, -x)"),
        Formulation("relu(x) + relu(-x)", "torch.relu(x) + torch.relu(-x)"),
        Formulation("sqrt(x * x)", "torch.sqrt(x * x)",
                    outside="d sqrt(u)/du is infinite at u = 0, and the chain rule gives inf * 0 = NaN: outside the "
                            "Clarke set [-1, 1] of |x| (the documented rule promises 0)"),
    ), note="abs'(0) against sign(0) = 0: x * sign(x) differentiates to sign(x) + x * 0"),
    Group("amax(x, dim)", "max over each row", "x (2 rows of 3)", (
        Point("ties in rows", (F(1), F(1), F(0), F(2), F(0), F(2)), (2, 3), (F(1), F(2)), windows=_ROWS),), (
        Formulation("max(x, dim).values", "torch.max(x, dim=1).values", ("max_dim", {"ties in rows": "ties in rows"})),
        Formulation("amax(x, dim)", "torch.amax(x, dim=1)"),
        Formulation("topk(x, 1).values", "torch.topk(x, 1, dim=1).values[:, 0]"),
        Formulation("sort(x).values[:, -1]", "torch.sort(x, dim=1).values[:, -1]"),
    ), note="row 0 ties entries 0 and 1, row 1 entries 3 and 5 (cotangent 1, 2)"),
)


def groups(names: Sequence[str] | None = None) -> list[Group]:
    """The table's groups named ``names`` (default: all); an unknown name raises with the known ones."""
    if names is None:
        return list(TABLE)
    known = {g.name: g for g in TABLE}
    bad = [n for n in names if n not in known]
    if bad:
        raise NsverifyError(f"unknown formulation group(s) {bad}: choose from {sorted(known)}.")
    return [known[n] for n in names]


# ----------------------------------------------------------------------------------------------------------
# measuring
# ----------------------------------------------------------------------------------------------------------
@dataclass
class FormResult:
    """One formulation at one point in one dtype and mode: its derivative (floats, exact values of the dtype),
    whether it follows the group's promise (:func:`nsverify.conventions.promised.follows_value`), or the error."""

    group: str
    point: str
    formulation: str
    dtype: str
    mode: str
    derivative: list
    follows: str
    error: str | None = None
    extra: dict = field(default_factory=dict)


def _case(point: Point, form: Formulation):
    """The matrix's view of one formulation at one point (what its evaluation helpers read)."""
    return SimpleNamespace(values=point.values, shape=point.shape, cotangent=point.cotangent, fn=form.fn)


def measure(names: Sequence[str] | None = None, dtypes: Sequence[str] = DTYPES,
            modes: Sequence[str] = ("eager", "func", "jvp"), device: str = "cpu",
            compile_backend: str = "inductor") -> list[FormResult]:
    """Every formulation of the groups ``names`` at every point, in ``dtypes`` and ``modes`` (compile: every
    formulation of a dtype in one compiled function, as the matrix does)."""
    import math

    from nsverify.conventions import matrix as mx
    from nsverify.devices import dtype_name, parse_device, parse_dtype

    bad = [m for m in modes if m not in MODES]
    if bad:
        raise NsverifyError(f"unknown mode(s) {bad} for the formulations: choose from {', '.join(MODES)}.")
    dts = [parse_dtype(d) for d in dtypes]
    dev = parse_device(device)
    cells = [(g, p, f) for g in groups(names) for p in g.points for f in g.formulations]
    promises = {(g.name, p.label): p.promise(g.name) for g, p, _ in cells}
    out = []
    for dt in dts:
        for mode in modes:
            compiled = None
            if mode == "compile":
                # a formulation Inductor cannot compile records why; the others are compiled without it
                compiled = mx._compiled_grads_split([_case(p, f) for _, p, f in cells], dt, dev, compile_backend)
            for k, (g, p, f) in enumerate(cells):
                c = _case(p, f)
                try:
                    if compiled is not None and isinstance(compiled[k], Exception):
                        raise compiled[k]
                    x = registry.exact_tensor(p.values, dt, dev).reshape(p.shape)
                    fs = mx._scalar_fn(c, dt, dev)
                    grad = {"eager": mx._eager, "func": mx._func, "jvp": mx._jvp_rows}.get(mode)
                    vec = [float(v) for v in (compiled[k] if mode == "compile" else grad(c, x, fs))
                           .detach().double().cpu().flatten().tolist()]
                except NsverifyError:
                    raise
                except Exception as exc:  # PyTorch refused this mode for this formulation: record it
                    out.append(FormResult(g.name, p.label, f.name, dtype_name(dt), mode, [], "n/a",
                                          mx.error_text(exc)))
                    continue
                prom = promises[(g.name, p.label)]
                finite = all(math.isfinite(v) for v in vec)
                fol = follows_value(prom.value, vec, dtype_name(dt)) if finite else (
                    "no" if prom.covered else "not covered")
                out.append(FormResult(g.name, p.label, f.name, dtype_name(dt), mode, vec, fol))
    return out


def disagreements(results: Sequence[FormResult]) -> list[dict]:
    """The pairs of formulations of one group and point whose derivatives differ in some column (dtype, mode):
    ``{"group", "point", "a", "b", "columns", "value_a", "value_b"}`` with the values of the first such column
    (float32 eager first). Errors are left out."""
    by: dict = {}
    for r in results:
        if r.error is None:
            by.setdefault((r.group, r.point, r.dtype, r.mode), {})[r.formulation] = r
    pairs: dict = {}
    for (g, p, dt, mode), forms in by.items():
        names = list(forms)
        for i, a in enumerate(names):
            for b in names[i + 1:]:
                if forms[a].derivative != forms[b].derivative:
                    pairs.setdefault((g, p, a, b), []).append((dt, mode, forms[a], forms[b]))
    out = []
    for (g, p, a, b), cols in pairs.items():
        rep = min(cols, key=lambda c: (c[0] != "float32", c[1] != "eager"))
        out.append({"group": g, "point": p, "a": a, "b": b, "columns": [f"{dt}/{m}" for dt, m, _, _ in cols],
                    "dtype": rep[0], "mode": rep[1], "value_a": rep[2].derivative, "value_b": rep[3].derivative,
                    "follows_a": rep[2].follows, "follows_b": rep[3].follows})
    return out


def formulation(group: str, name: str) -> Formulation:
    g = groups([group])[0]
    for f in g.formulations:
        if f.name == name:
            return f
    raise NsverifyError(f"group {group!r} has no formulation {name!r}: its formulations are "
                        f"{[f.name for f in g.formulations]}.")


def format_formulations(results: Sequence[FormResult], width: int = 120) -> str:
    """A text table: per group and point, each formulation's derivative (float32 eager, else the first column),
    whether it follows the promise in every column, and the pairs that disagree."""
    import textwrap

    lines = []
    by: dict = {}
    for r in results:
        by.setdefault((r.group, r.point), {}).setdefault(r.formulation, []).append(r)
    for (g, p), forms in by.items():
        grp = groups([g])[0]
        prom = grp.point(p).promise(g)
        lines.append(f"{g} at {p}: promised {prom.text()} ({prom.shape})")
        for name, rs in forms.items():
            rep = min(rs, key=lambda r: (r.dtype != "float32", r.mode != "eager", r.error is not None))
            val = "error" if rep.error else ",".join(f"{v:.4g}" for v in rep.derivative)
            fol = sorted({r.follows for r in rs})
            lines.append(f"  {name:34s} {val:24s} follows: {'/'.join(fol)}")
    dis = disagreements(results)
    lines.append(f"{len(dis)} disagreeing pairs")
    for d in dis:
        lines.append(textwrap.fill(f"{d['group']} at {d['point']}: {d['a']} {d['value_a']} vs {d['b']} "
                                   f"{d['value_b']} ({len(d['columns'])} columns)", width, initial_indent="  ",
                                   subsequent_indent="    "))
    return "\n".join(lines)
