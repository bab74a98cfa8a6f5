"""The report.json schema (``nsverify.report/1``): validation and safe loading.

A report is plain JSON: it is parsed with :func:`json.loads` and checked field by field; nothing in it is ever
imported, unpickled or evaluated. A corrupted file, a foreign JSON document, or a report of an unknown schema
version raises :class:`~nsverify.errors.ReportFormatError` naming the file, the offending field and the fix.
The schema is documented in ``docs/report.md``.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

from nsverify.errors import ReportFormatError

SCHEMA = "nsverify.report/1"
#: the report.json files nsverify reads are at most this large (a quick report is well under 1 MB)
MAX_BYTES = 256 * 1024 * 1024
METRIC_KINDS = ("convention", "verdict", "counterexample", "share", "convergence", "bench_ratio", "info")
RUN_KINDS = ("run", "merged")
SECTION_STATUSES = ("ok", "failed")


def _fail(where: str, problem: str, source: str = "") -> ReportFormatError:
    src = f"{source}: " if source else ""
    return ReportFormatError(f"{src}invalid report at {where}: {problem}")


def _number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def validate_metrics(metrics, where: str = "metrics", source: str = "") -> None:
    """Check a section's ``data["metrics"]`` list (see the brief / docs/report.md for the kinds)."""
    if not isinstance(metrics, list):
        raise _fail(where, f"must be a list of metric dicts, got {type(metrics).__name__}", source)
    seen: set[str] = set()
    for i, m in enumerate(metrics):
        w = f"{where}[{i}]"
        if not isinstance(m, dict):
            raise _fail(w, f"must be a dict with key/kind/value, got {type(m).__name__}", source)
        key, kind = m.get("key"), m.get("kind")
        if not isinstance(key, str) or not key:
            raise _fail(w, "'key' must be a non-empty string", source)
        w = f"{where}[{key!r}]"
        if key in seen:
            raise _fail(w, "duplicate metric key; keys must be unique within a section", source)
        seen.add(key)
        if kind not in METRIC_KINDS:
            raise _fail(w, f"'kind' is {kind!r}, expected one of {', '.join(METRIC_KINDS)}", source)
        if "value" not in m:
            raise _fail(w, "'value' is missing", source)
        v = m["value"]
        if kind == "counterexample" and not (isinstance(v, int) and not isinstance(v, bool) and v >= 0):
            raise _fail(w, f"a counterexample count must be an integer >= 0, got {v!r}", source)
        if kind == "share":
            lo, hi = m.get("lo"), m.get("hi")
            if not (_number(v) and _number(lo) and _number(hi)):
                raise _fail(w, "a share needs numeric 'value', 'lo' and 'hi' (its confidence interval)",
                            source)
            if not (0.0 <= lo <= v <= hi <= 1.0):
                raise _fail(w, f"a share needs 0 <= lo <= value <= hi <= 1, got lo={lo}, value={v}, hi={hi}",
                            source)
        if kind == "convergence":
            s = m.get("spread")
            if not _number(v) or not _number(s) or not (s >= 0):
                raise _fail(w, "a convergence metric needs a numeric 'value' and a 'spread' >= 0 "
                               "(its spread over seeds)", source)
        if kind == "bench_ratio" and not (_number(v) and v > 0 and math.isfinite(v)):
            raise _fail(w, f"a bench_ratio must be a finite number > 0, got {v!r}", source)
        if "samples" in m:
            smp = m["samples"]
            if kind != "bench_ratio":
                raise _fail(w, f"'samples' is recorded for bench_ratio metrics only, not {kind}", source)
            if not (isinstance(smp, list) and smp and all(_number(x) and x > 0 and math.isfinite(x) for x in smp)):
                raise _fail(w, "'samples' must be a non-empty list of finite numbers > 0 (one ratio per timed "
                               "round)", source)
            keys = m.get("sample_keys")
            if keys is not None and not (isinstance(keys, list) and len(keys) == len(smp)
                                         and isinstance(m.get("paired_by"), str)):
                raise _fail(w, "'sample_keys' must list one key per sample, with 'paired_by' naming the pairing "
                               "(e.g. the training step)", source)
        if "unit" in m and not isinstance(m["unit"], str):
            raise _fail(w, "'unit' must be a string", source)


def _validate_section(name: str, sec, source: str, where: str) -> None:
    if not isinstance(sec, dict):
        raise _fail(where, f"a section must be a dict, got {type(sec).__name__}", source)
    status = sec.get("status", "ok")
    if status not in SECTION_STATUSES:
        raise _fail(where, f"status {status!r} is not one of {SECTION_STATUSES}", source)
    for field_, typ in (("title", str), ("summary", str), ("tables", list), ("figures", list),
                        ("claims", list), ("data", dict), ("traceback", str)):
        if field_ in sec and not isinstance(sec[field_], typ):
            raise _fail(f"{where}.{field_}", f"must be a {typ.__name__}", source)
    for i, tab in enumerate(sec.get("tables", [])):
        if not isinstance(tab, dict) or not isinstance(tab.get("columns", []), list) \
                or not isinstance(tab.get("rows", []), list):
            raise _fail(f"{where}.tables[{i}]", "a table is {title, columns: list, rows: list}", source)
    for i, fig in enumerate(sec.get("figures", [])):
        if not isinstance(fig, dict) or not isinstance(fig.get("png"), str):
            raise _fail(f"{where}.figures[{i}]", "a figure is {title, png: base64 string}", source)
    ids = set()
    for i, c in enumerate(sec.get("claims", [])):
        if not isinstance(c, dict) or not isinstance(c.get("claim"), str):
            raise _fail(f"{where}.claims[{i}]", "a claim is a claim record {id?, claim: str, held, ...}", source)
        cid = c.get("id")
        if cid is not None and (not isinstance(cid, str) or cid in ids):
            raise _fail(f"{where}.claims[{i}].id", f"{cid!r}: a claim id is a string, unique in its section", source)
        ids.add(cid)
    data = sec.get("data", {})
    if "metrics" in data:
        validate_metrics(data["metrics"], f"{where}.data.metrics", source)


def validate_report(report, source: str = "") -> dict:
    """Raise :class:`ReportFormatError` unless ``report`` is a well-formed ``nsverify.report/1`` dict."""
    if not isinstance(report, dict):
        raise ReportFormatError(f"{source or 'report'}: not an nsverify report (top level is "
                                f"{type(report).__name__}, expected an object with \"schema\": \"{SCHEMA}\")")
    schema = report.get("schema")
    if schema is None:
        raise ReportFormatError(f"{source or 'report'}: not an nsverify report (no \"schema\" field). Point "
                                f"nsverify at a report.json written by `nsverify nightly`.")
    if schema != SCHEMA:
        if isinstance(schema, str) and schema.startswith("nsverify.report/"):
            raise ReportFormatError(f"{source or 'report'}: report schema {schema!r} is not the one this "
                                    f"nsverify reads ({SCHEMA!r}); use the nsverify version that wrote it.")
        raise ReportFormatError(f"{source or 'report'}: foreign document (schema {schema!r}); expected an "
                                f"nsverify report with schema {SCHEMA!r}.")
    kind = report.get("kind", "run")
    if kind not in RUN_KINDS:
        raise _fail("kind", f"{kind!r} is not one of {RUN_KINDS}", source)
    for field_, typ in (("created", str), ("machine", dict), ("sections", dict), ("regressions", list)):
        if not isinstance(report.get(field_), typ):
            raise _fail(field_, f"missing or not a {typ.__name__}", source)
    if kind == "run" and not isinstance(report["machine"].get("machine_id"), str):
        raise _fail("machine.machine_id", "missing; runs are compared by machine_id", source)
    for name, sec in report["sections"].items():
        if kind == "merged":
            per = sec.get("machines") if isinstance(sec, dict) else None
            if not isinstance(per, dict):
                raise _fail(f"sections.{name}.machines", "a merged section maps machine label -> section",
                            source)
            for label, s in per.items():
                _validate_section(name, s, source, f"sections.{name}.machines[{label!r}]")
        else:
            _validate_section(name, sec, source, f"sections.{name}")
    for i, r in enumerate(report["regressions"]):
        if not isinstance(r, dict) or not isinstance(r.get("section"), str) or not isinstance(
                r.get("message"), str):
            raise _fail(f"regressions[{i}]", "a regression is {section, rule, message, ...}", source)
    return report


def resolve_report_path(path: Path | str) -> Path:
    """``DIR/report.json`` for a run dir, ``DIR/latest/report.json`` for a reports root, else ``path``."""
    p = Path(path)
    if p.is_dir():
        if (p / "report.json").is_file():
            return p / "report.json"
        if (p / "latest" / "report.json").is_file():
            return p / "latest" / "report.json"
        raise ReportFormatError(f"{str(p)!r} holds no report.json (nor latest/report.json): pass a run "
                                f"directory written by `nsverify nightly`, or its report.json.")
    return p


def load_report(path: Path | str) -> dict:
    """Read and validate a report.json (or a run directory / reports root holding one)."""
    p = resolve_report_path(path)
    src = str(p)
    try:
        size = p.stat().st_size
    except OSError as exc:
        raise ReportFormatError(f"cannot read report {src!r}: {exc.strerror or exc}. Pass an existing "
                                f"run directory or report.json.") from exc
    if size > MAX_BYTES:
        raise ReportFormatError(f"{src}: {size} bytes is larger than any nsverify report "
                                f"({MAX_BYTES} bytes max); refusing to read it.")
    not_a_run = ReportFormatError(f"{src} is not a report run (not JSON): pass a run directory written by "
                                  "`nsverify nightly` (e.g. reports/latest), its report.json, or a reports root.")
    try:
        text = p.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        if p.name != "report.json":  # another file (README.md, a PNG): not a run, nothing to delete
            raise not_a_run from exc
        raise ReportFormatError(f"{src}: corrupted report (not UTF-8 text: {exc}). Delete this run "
                                f"directory or pass another baseline.") from exc
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        if p.name != "report.json":
            raise not_a_run from exc
        raise ReportFormatError(f"{src}: corrupted report (invalid JSON at line {exc.lineno}, column "
                                f"{exc.colno}: {exc.msg}). Delete this run directory or pass another "
                                f"baseline.") from exc
    return validate_report(data, src)
