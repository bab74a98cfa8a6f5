"""Findings a maintainer can use: every cell that breaks the documented rule's promise
(:mod:`nsverify.conventions.promised`) and every pair of equivalent formulations that disagree
(:mod:`nsverify.conventions.formulations`), each with a minimal reproduction script, the exact expected value, the
first release it appeared in, and a sample in the shape of an OpInfo ``SampleInput`` (op, input, args, kwargs,
expected gradient).

The promise across releases (:func:`promise_history`) is computed from the recorded runs of every release
(``nsverify/data/conventions``, JAX's in ``jax/``) and, when given, the run just measured: the promise is a
property of the registry's exact case, so a recorded run needs no re-measurement. ``nsverify conventions
--export-findings DIR`` writes them (:func:`export_findings`): one ``<id>.json`` and one ``<id>.py`` per finding,
and ``index.json`` listing them."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Sequence

from nsverify import registry
from nsverify.conventions import baselines as bl
from nsverify.conventions.promised import annotate, promise
from nsverify.conventions.scripts import _MODE_CODE, _qualified, cell_script, safe_name

INDEX_SCHEMA = "nsverify.findings/1"
#: the statuses that keep a promise
KEPT = ("yes", "rounding")


# ----------------------------------------------------------------------------------------------------------
# the promise across releases
# ----------------------------------------------------------------------------------------------------------
def _runs(framework: str, data_dir: Path | None, current: Sequence | None, installed: str | None) -> list:
    data_dir = bl.DATA_DIRS[framework] if data_dir is None else Path(data_dir)
    runs = []
    for rel in bl.recorded_releases(data_dir):
        rs = list(bl.load_cached(rel, data_dir).results.values())
        annotate(rs, framework)
        runs.append((rel, rs))
    if current is not None:
        installed = installed or bl.installed_release()
        annotate(current, framework)
        runs = [(r, rs) for r, rs in runs if r != installed] + [(installed, list(current))]
        runs.sort(key=lambda r: bl.release_key(r[0]))
    return runs


def promise_history(framework: str = "torch", data_dir: Path | None = None, current: Sequence | None = None,
                    installed: str | None = None) -> list[dict]:
    """Per (op, case) that breaks its promise in some release: the releases it breaks in, the first one (the
    oldest recorded release when it breaks from the start: ``first_is_oldest``), the release from which it follows
    the promise again (``follows_from``, None when it still breaks), and a representative breaking cell of the
    newest breaking release (float32 eager first). ``current``: the results of a run just measured (the installed
    release), merged in; only its (op, case) pairs are then reported."""
    runs = _runs(framework, data_dir, current, installed)
    releases = [rel for rel, _ in runs]
    wanted = None if current is None else {(r.op, r.case) for r in current}  # a run of some ops: those ops
    status: dict = {}
    for rel, rs in runs:
        for r in rs:
            if wanted is not None and (r.op, r.case) not in wanted:
                continue
            status.setdefault((r.op, r.case), {}).setdefault(rel, []).append(r)
    out = []
    for (op, case), per in status.items():
        broke = [rel for rel in releases if any(r.follows == "no" for r in per.get(rel, ()))]
        if not broke:
            continue
        after = [rel for rel in releases if bl.release_key(rel) > bl.release_key(broke[-1])
                 and per.get(rel) and all(r.follows in KEPT + ("n/a",) for r in per[rel])]
        cells = [r for r in per[broke[-1]] if r.follows == "no"]
        rep = min(cells, key=lambda r: (r.dtype != "float32", r.mode not in ("eager", "grad"), r.mode))
        p = promise(op, case, framework)
        out.append({"framework": framework, "op": op, "case": case, "promised": p.to_json(), "releases": releases,
                    "breaks": broke, "first_release": broke[0], "first_is_oldest": broke[0] == releases[0],
                    "follows_from": after[0] if after else None, "now": "follows" if after else "breaks",
                    "cells": len(cells), "columns": sorted({f"{r.dtype}/{r.mode}" for r in cells}),
                    "dtype": rep.dtype, "mode": rep.mode, "device": rep.device, "derivative": rep.derivative})
    # the changes first (a case that moved to the rule, with its release), then the cases that still break it
    return sorted(out, key=lambda h: (h["now"] == "breaks", h["op"], h["case"]))


def history_text(h: dict) -> str:
    """One line: "clamp at x=0: promised 0; breaks from 2.4.1 (the oldest recorded release), follows from
    2.14.0"."""
    first = h["first_release"] + (" (the oldest recorded release)" if h["first_is_oldest"] else "")
    tail = f", follows it from {h['follows_from']}" if h["follows_from"] else ", still breaks it"
    return (f"{h['framework']} {h['op']} at {h['case']}: promised {h['promised']['text']}, got "
            f"{','.join(f'{v:.4g}' for v in h['derivative'])} ({h['dtype']}, {h['mode']}); breaks it from "
            f"{first}{tail}")


def format_promise_history(hist: Sequence[dict]) -> str:
    """The release table's promise block (markdown): each case that breaks the documented rule in some measured
    release, its promise, its first release and the release from which it follows the rule."""
    lines = ["| op | case | promised (exact) | got | breaks from | follows from |", "|---|---|---|---|---|---|"]
    for h in hist:
        first = h["first_release"] + (" (first measured)" if h["first_is_oldest"] else "")
        lines.append(f"| {h['op']} | {h['case']} | {h['promised']['text']} | "
                     f"{','.join(f'{v:.4g}' for v in h['derivative'])} ({h['dtype']}, {h['mode']}) | {first} | "
                     f"{h['follows_from'] or 'still breaks'} |")
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------------------
# findings
# ----------------------------------------------------------------------------------------------------------
@dataclass
class Finding:
    """One finding: ``kind`` "promise" (a cell that breaks the documented rule) or "formulations" (two
    formulations that disagree); ``expected`` the exact expected gradient (text of Fractions), ``got`` what
    PyTorch (or JAX) returned; ``sample`` the OpInfo-style sample; ``script`` its standalone reproduction."""

    id: str
    kind: str
    title: str
    first_release: str
    expected: list | None
    got: list
    sample: dict
    script: str
    detail: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return {k: v for k, v in asdict(self).items() if k != "script"}


def _sample(op: str, case: str, dtype: str, expected) -> dict:
    """The OpInfo-style sample of a registry case: the op's qualified name, the input (values and shape; rows of
    a packed pair or triple become the input and its args), the kwargs, the cotangent, the expected gradient."""
    entry = registry.get(op)
    if entry.kind == "elementwise":
        i = next(k for k in range(len(entry.breakpoints)) if entry.kink_label(k) == case)
        values, shape, cot, kwargs, packing = [entry.breakpoints[i]], [1], None, dict(entry.kwargs), "single"
    else:
        c = next(c for c in entry.cases if c.label == case)
        values, shape, cot, packing = list(c.values), list(c.shape), c.cotangent, entry.packing
        kwargs = {**entry.kwargs, **{k: v for k, v in c.extra.items() if k != "geom"}}
    vals = [float(v) for v in values]
    rows = {"pair": 2, "triple": 3}.get(packing, 1)
    n = len(vals) // rows
    tensors = [vals[k * n:(k + 1) * n] for k in range(rows)]
    sub = [shape[1:]] * rows if rows > 1 else [shape]
    return {"op": _op_text(entry), "registry_op": op, "case": case,
            "input": {"values": tensors[0], "shape": sub[0], "dtype": dtype},
            "args": [{"values": t, "shape": s, "dtype": dtype} for t, s in zip(tensors[1:], sub[1:])],
            "kwargs": {k: v for k, v in kwargs.items() if isinstance(v, (int, float, str, bool, type(None)))},
            "cotangent": None if cot is None else [float(v) for v in cot],
            "expected_grad": expected, "grad_layout": "flat, in the order input, then each arg"}


def _op_text(entry) -> str:
    """The op of a sample: its qualified torch name, else the registry's lambda as source text."""
    from nsverify.conventions.scripts import _lambda_source

    q = _qualified(entry.torch_fn)
    if q:
        return q
    try:
        return _lambda_source(entry.torch_fn)
    except (ValueError, OSError, TypeError):
        return f"nsverify registry op {entry.name!r}"


def promise_findings(history: Sequence[dict]) -> list[Finding]:
    """One finding per (op, case) of :func:`promise_history`."""
    out = []
    for h in history:
        fw, op, case, dtype, mode = h["framework"], h["op"], h["case"], h["dtype"], h["mode"]
        expected = h["promised"]["value"]
        head = (f"# {fw} {op} at {case} ({dtype}, {mode} mode) breaks the documented rule for non-differentiable "
                f"functions\n# (autograd notes, 'Gradients for non-differentiable functions': {h['promised']['shape']}"
                f" here, so the minimum-norm element of the Clarke set)\n"
                f"# inputs: {h['promised']['inputs']}\n# expected (exact): {h['promised']['text']}\n"
                f"# got: {h['derivative']}\n# first release: {h['first_release']}"
                f"{' (the oldest recorded)' if h['first_is_oldest'] else ''}; "
                f"{'follows it from ' + h['follows_from'] if h['follows_from'] else 'still breaks it'}")
        try:
            script = cell_script(op, case, dtype, mode, head, fw)
        except (ValueError, OSError, TypeError, StopIteration, KeyError) as exc:
            script = f"{head}\n# no standalone script for this cell: {exc}\n"
        fid = safe_name(f"promise_{fw}_{op}_{case}")[:-3]
        out.append(Finding(fid, "promise", history_text(h), h["first_release"], expected, list(h["derivative"]),
                           _sample(op, case, dtype, expected), script,
                           {k: h[k] for k in ("framework", "breaks", "follows_from", "now", "columns", "cells",
                                              "promised", "first_is_oldest")}))
    return out


def _formulation_script(d: dict, point, codes: dict, installed: str) -> str:
    vals = ", ".join(str(float(v)) for v in point.values)
    cot = ("c = None" if point.cotangent is None else
           f"c = torch.tensor([{', '.join(str(float(v)) for v in point.cotangent)}], dtype=torch.{d['dtype']})")
    lines = [f"# {d['group']} at {d['point']}: two formulations of one function disagree ({d['dtype']}, {d['mode']} "
             f"mode)", f"# {d['a']}: {d['value_a']}", f"# {d['b']}: {d['value_b']}",
             f"# expected (the documented rule, exact): {d['expected_text']}",
             f"# measured with torch {installed} (nsverify's formulation table)", "import torch",
             "import torch.nn.functional as F", "",
             f"x = torch.tensor([{vals}], dtype=torch.{d['dtype']}).reshape({tuple(point.shape)!r})", cot, ""]
    for name, code in codes.items():
        lines += ["", f"def op(x):  # {name}", f"    return {code}", "", "",
                  "def f(t):", "    y = op(t)", "    return (y * c).sum() if c is not None else y.sum()", "", "",
                  _MODE_CODE[d["mode"]], f"print({name!r}, g.flatten().tolist())"]
    return "\n".join(lines) + "\n"


def formulation_findings(form_results: Sequence, installed: str | None = None) -> list[Finding]:
    """One finding per disagreeing pair of :func:`nsverify.conventions.formulations.disagreements`. Its first
    release is the installed one unless both formulations are registry cells whose recorded releases show it
    earlier (``detail.history``: each recorded cell's values per release)."""
    from nsverify.conventions import formulations as fm

    installed = installed or bl.installed_release()
    out = []
    for d in fm.disagreements(form_results):
        grp = fm.groups([d["group"]])[0]
        point = grp.point(d["point"])
        prom = point.promise(d["group"])
        fa, fb = fm.formulation(d["group"], d["a"]), fm.formulation(d["group"], d["b"])
        d = dict(d, expected_text=prom.text() if prom.covered else
                 f"not covered by the rule ({prom.reason}); Clarke set conv{list(point.clarke_vertices())}")
        history = {f.name: _cell_history(f.cell[0], f.cell[1][d["point"]], d["dtype"], d["mode"])
                   for f in (fa, fb) if f.cell}
        first = installed
        if len(history) == 2:
            ra, rb = history[fa.name], history[fb.name]
            differ = [rel for rel in ra if rel in rb and ra[rel] != rb[rel]]
            first = differ[0] if differ else installed
        expected = None if prom.value is None else [str(v) for v in prom.value]
        sample = {"op": fa.code, "other_op": fb.code, "group": d["group"], "point": d["point"],
                  "input": {"values": [float(v) for v in point.values], "shape": list(point.shape),
                            "dtype": d["dtype"]}, "args": [], "kwargs": {},
                  "cotangent": None if point.cotangent is None else [float(v) for v in point.cotangent],
                  "expected_grad": expected, "clarke_vertices": [[str(v) for v in vert]
                                                                 for vert in point.clarke_vertices()]}
        fid = safe_name(f"formulations_{d['group']}_{d['point']}_{d['a']}_vs_{d['b']}")[:-3]
        title = (f"{d['group']} at {d['point']}: {d['a']} gives {d['value_a']}, {d['b']} gives {d['value_b']} "
                 f"({d['dtype']}, {d['mode']}; {len(d['columns'])} columns); promised {prom.text()}")
        script = _formulation_script(d, point, {fa.name: fa.code, fb.name: fb.code}, installed)
        out.append(Finding(fid, "formulations", title, first, expected, [d["value_a"], d["value_b"]], sample,
                           script, {"columns": d["columns"], "follows": [d["follows_a"], d["follows_b"]],
                                    "history": {k: v for k, v in history.items()},
                                    "first_release_note": "both formulations recorded" if len(history) == 2 else
                                    "the installed release: the formulations are not all recorded in earlier "
                                    "releases"}))
    return out


def _cell_history(op: str, case: str, dtype: str, mode: str) -> dict:
    """The recorded value of one registry cell per torch release (CPU): ``{release: derivative or "error"}``."""
    out = {}
    for rel in bl.recorded_releases():
        r = bl.load_cached(rel).results.get((op, case, dtype, "cpu", mode))
        if r is not None:
            out[rel] = "error" if r.error else list(r.derivative)
    return out


def export_findings(out: Path, findings: Sequence[Finding], command: str = "") -> Path:
    """Write every finding (``<id>.json``, ``<id>.py``) and ``index.json`` to directory ``out``; the index path."""
    import datetime

    from nsverify.files import atomic_write_text

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    index = []
    for f in findings:
        atomic_write_text(out / f"{f.id}.py", f.script)
        atomic_write_text(out / f"{f.id}.json", json.dumps(f.to_json(), indent=1))
        index.append({"id": f.id, "kind": f.kind, "title": f.title, "first_release": f.first_release,
                      "json": f"{f.id}.json", "script": f"{f.id}.py"})
    data = {"schema": INDEX_SCHEMA, "command": command, "findings": index,
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "counts": {k: sum(f["kind"] == k for f in index) for k in ("promise", "formulations")}}
    atomic_write_text(out / "index.json", json.dumps(data, indent=1))
    return out / "index.json"
