"""Render a report dict to one self-contained HTML page (inline CSS, embedded PNG plots, inline SVG trend plots,
no scripts).

Layout, most important first (docs/report.md, "What the report shows"): the summary (``id="summary"``): one status
line (``id="status-line"``: the GREEN/RED badge of regressions and failed sections, the claim verdicts changed since
the baseline, and the neutral count of claims not reproduced), the lists of claim verdict changes, other
regressions and convention changes; the overview plots (``id="plots"``: claims forest plot, conventions heatmap,
rule changes across torch releases, zone volumes per precision, :mod:`nsverify.report.plots`); every claim in one
table grouped by paper (``id="claims-table"``, :mod:`nsverify.report.claims_table`) and the paper errata
(``id="errata"``); then the machine/environment header and one ``<section id="sec-NAME">`` per report section with
its changes, tables, figures, and -- collapsed in ``<details>`` -- its raw metrics, long tables and trend plots.
The complete data is ``report.json`` beside the page (linked at the top). A merged report (several machines)
shows a metrics table with one column per machine. No value is shown as ``None`` or as raw JSON
(:func:`nsverify.report.claims_table.plain`).
"""
from __future__ import annotations

from nsverify.report import plots
from nsverify.report.claims_table import COLUMNS as CLAIM_COLUMNS
from nsverify.report.claims_table import (
    DASH,
    claims_html,
    errata_html,
    esc,
    is_erratum,
    metric_label,
    plain,
    summary_line,
)
from nsverify.report.compare import claim_entries, format_metric

CSS = """
*{box-sizing:border-box}
body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1200px;color:#222;padding:0 1em;font-size:16px;
overflow-wrap:anywhere}
h1{margin-bottom:.2em} h2{border-bottom:1px solid #ccc;padding-bottom:.2em;margin-top:2em}
.scroll{overflow-x:auto;max-width:100%}
table{border-collapse:collapse;margin:.8em 0;font-size:.85em} td,th{border:1px solid #ccc;padding:3px 7px;
vertical-align:top}
th{background:#f3f3f3} .ok{color:#17692b} .failed,.red{color:#b00020} .green{color:#17692b}
.badge{display:inline-block;padding:.3em .8em;border-radius:4px;color:#fff;font-weight:bold}
.badge.green{background:#17692b;color:#fff} .badge.red{background:#b00020;color:#fff}
.badge.claims{background:#fff;color:#1d3557;border:2px solid #1d3557}
pre{background:#f7f7f7;padding:.6em;overflow:auto;font-size:.8em} img{max-width:100%}
.meta td{border:none;padding:1px 8px} nav a{margin-right:1em;display:inline-block}
.cross{background:#fff3cd;padding:.4em}
tr.regression td{background:#fde7ea} td.differs{background:#fff3cd}
tr.differs td{background:#fff3cd} tr.outside td{background:#fde7ea;font-weight:bold}
.trends{display:flex;flex-wrap:wrap;gap:.8em} .trend{font-size:.75em;width:280px}
#summary ul{margin:.3em 0 .8em} #summary li{margin:.25em 0} .field{color:#444;font-size:.9em;margin-left:.6em}
.detail{color:#444;font-size:.9em}
details{margin:.6em 0} summary{cursor:pointer;color:#245}
#status-line{margin:.4em 0 .8em} .status-row{margin:.35em 0;font-size:1.05em}
.status-label{display:inline-block;min-width:6.5em;font-weight:bold} .status-note{color:#444;font-size:.9em}
#plots{display:grid;grid-template-columns:1fr 1fr;gap:.6em;align-items:start;margin:.6em 0}
#plots figure{margin:0;overflow-x:auto;min-width:0} #plots figure.wide{grid-column:1 / -1}
#plots img,#plots svg{width:100%;height:auto;border:1px solid #eee;display:block}
figcaption{font-size:.8em;color:#444}
table.claims{width:100%;min-width:760px} table.claims td{overflow-wrap:anywhere}
table.claims th:nth-child(1){width:12%} table.claims th:nth-child(2){width:30%} table.claims th:nth-child(3){width:16%}
table.claims th:nth-child(4){width:7%} table.claims th:nth-child(5){width:6%} table.claims th:nth-child(6){width:10%}
tr.paper-head th{text-align:left;background:#e8eef4} .counts{font-weight:normal}
tr.v-refuted td.verdict{font-weight:bold;background:#f6e6e8} tr.v-undecided td.verdict{color:#555}
tr.changed td.verdict{outline:2px solid #245}
@media (max-width:900px){#plots{grid-template-columns:1fr} body{margin:1em auto}}
""" + (  # a plot is never drawn narrower than its own width (its labels stay >= 11 px): its box scrolls instead
    f"#plots img{{min-width:{plots.PLOT_WIDTH_PX}px}} #plots figure.wide svg{{min-width:{plots.FOREST_WIDTH_PX}px}}")
#: tables with more rows than this are collapsed in <details> (the report.json link has every row)
COLLAPSE_ROWS = 25
MAX_TRENDS = 24
ENV_ROWS = ("hostname", "cpu", "cpu_count", "gpu", "torch", "cuda", "cudnn", "tf32_matmul", "tf32_cudnn",
            "deterministic_algorithms", "num_threads", "cpu_capability", "aten_cpu_capability", "python", "platform",
            "machine_id")
#: the settings that only mean something with a CUDA GPU (torch reports TF32 flags on a CPU-only box too)
GPU_ROWS = ("cuda", "cudnn", "tf32_matmul", "tf32_cudnn")


def _cell(value) -> str:
    """A table cell's text: an en dash for ``None``, 6 significant digits, dicts and lists in words."""
    return esc(plain(value, 6))


def metric_text(m: dict | None) -> str:
    """A metric's value for a reader: an en dash when not measured, conventions, verdicts and any non-number in
    words, the rest as :func:`format_metric`."""
    if m is None or m["value"] is None:
        return DASH
    if m["kind"] in ("convention", "verdict") or not isinstance(m["value"], (int, float)):
        return plain(m["value"], 6) + (f" {m['unit']}" if m.get("unit") else "")
    return format_metric(m)


def scroll(table_html: str) -> str:
    """A wide table in a box that scrolls sideways by itself (the page never does)."""
    return f'<div class="scroll">{table_html}</div>'


def render_table(tab: dict, row_classes: list[str] | None = None, table_id: str = "") -> str:
    head = "".join(f"<th>{esc(c)}</th>" for c in tab.get("columns", []))
    rows = []
    for i, row in enumerate(tab.get("rows", [])):
        cls = f' class="{esc(row_classes[i])}"' if row_classes and row_classes[i] else ""
        rows.append(f"<tr{cls}>" + "".join(f"<td>{_cell(v)}</td>" for v in row) + "</tr>")
    title = f"<h3>{esc(tab.get('title', ''))}</h3>" if tab.get("title") else ""
    tid = f' id="{esc(table_id)}"' if table_id else ""
    return f"{title}" + scroll(f"<table{tid}><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>")


def render_trend(series: dict) -> str:
    """One metric's history as an inline SVG: the value line and its interval (share CI / seed spread)."""
    pts = series["points"]
    lo = min(p[2] for p in pts)
    hi = max(p[3] for p in pts)
    if hi - lo < 1e-12:
        lo, hi = lo - 0.5 * (abs(lo) or 1), hi + 0.5 * (abs(hi) or 1)
    w, h, pad = 260, 70, 6
    n = len(pts)
    xs = [pad + (w - 2 * pad) * (i / (n - 1) if n > 1 else 0.5) for i in range(n)]
    y = lambda v: h - pad - (h - 2 * pad) * (v - lo) / (hi - lo)
    band = "".join(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{y(p[2]):.1f}" y2="{y(p[3]):.1f}" stroke="#9ab" '
                   f'stroke-width="3"/>' for x, p in zip(xs, pts))
    line = " ".join(f"{x:.1f},{y(p[1]):.1f}" for x, p in zip(xs, pts))
    dots = "".join(f'<circle cx="{x:.1f}" cy="{y(p[1]):.1f}" r="2.5" fill="#245"><title>{esc(p[0])}: '
                   f'{p[1]:.6g}</title></circle>' for x, p in zip(xs, pts))
    return (f'<div class="trend"><svg width="{w}" height="{h}" role="img" aria-label="trend of '
            f'{esc(metric_label(series["key"]))}"><rect width="{w}" height="{h}" fill="#fafafa" stroke="#ddd"/>{band}'
            f'<polyline points="{line}" fill="none" stroke="#245" stroke-width="1.5"/>{dots}</svg><br>'
            f'<span title="key in report.json: {esc(series["key"])}">{esc(metric_label(series["key"]))}</span> '
            f'({esc(series["kind"])}, {n} run(s), last {pts[-1][1]:.4g}; '
            f'range {lo:.4g}..{hi:.4g})</div>')


def collapsed(summary: str, body: str, element_id: str = "") -> str:
    """``body`` inside a closed ``<details>`` whose visible line is ``summary``."""
    eid = f' id="{esc(element_id)}"' if element_id else ""
    return f"<details{eid}><summary>{esc(summary)}</summary>{body}</details>"


def _table_maybe_collapsed(tab: dict) -> str:
    n = len(tab.get("rows", []))
    if n <= COLLAPSE_ROWS:
        return render_table(tab, tab.get("row_classes"))
    return collapsed(f"{tab.get('title') or 'Table'} ({n} rows)", render_table({**tab, "title": ""},
                                                                              tab.get("row_classes")))


def _body_parts(sec: dict) -> list[str]:
    parts = []
    if sec.get("status") == "failed":
        parts.append("<p class=failed>This section raised an exception:</p>"
                     f"<pre>{esc(sec.get('traceback'))}</pre>")
    if sec.get("summary"):
        parts.append(f"<p>{esc(sec['summary'])}</p>")
    claims = [c for c in sec.get("claims") or [] if isinstance(c, dict)]
    if claims and not any(tab.get("columns") == CLAIM_COLUMNS for tab in sec.get("tables", [])):
        parts.append(f"<h3>Claims: {esc(summary_line(claims))}</h3>"
                     + scroll(claims_html([("", "", c) for c in claims], table_id="")))
    for tab in sec.get("tables", []):
        parts.append(_table_maybe_collapsed(tab))
    for fig in sec.get("figures", []):
        parts.append(f"<figure><img alt=\"{esc(fig.get('title', ''))}\" src=\"data:image/png;base64,"
                     f"{esc(fig['png'])}\"><figcaption>{esc(fig.get('title', ''))}</figcaption></figure>")
    return parts


def _changes_table(name: str, report: dict) -> str:
    cmp = report.get("comparison") or {}
    regs = [(i, r) for i, r in enumerate(report.get("regressions", [])) if r.get("section") == name]
    other = [c for c in cmp.get("changes", []) if c.get("section") == name]
    if not regs and not other:
        return ""
    rows = [[metric_label(r.get("key")), r.get("kind"), r.get("old"), r.get("new"),
             "REGRESSION: " + str(r.get("rule"))] for _, r in regs]
    rows += [[metric_label(c.get("key")), c.get("kind"), c.get("old"), c.get("new"), c.get("rule")] for c in other]
    classes = ["regression"] * len(regs) + [""] * len(other)
    columns = ["metric", "kind", "baseline", "now", "rule"]
    tab = render_table({"title": "", "columns": columns, "rows": rows}, classes, table_id=f"changes-{name}")
    title = f"Changes since the baseline: {len(regs)} regression(s), {len(other)} other difference(s)"
    if len(rows) <= COLLAPSE_ROWS or regs:
        return f"<h3>{esc(title)}</h3>{tab}"
    return collapsed(title, tab)


def _metrics_table(sec: dict) -> str:
    metrics = (sec.get("data") or {}).get("metrics") or []
    if not metrics:
        return ""
    rows = "".join(f'<tr><td title="key in report.json: {esc(m["key"])}">{esc(metric_label(m["key"]))}</td>'
                   f'<td>{esc(m["kind"])}</td><td>{esc(metric_text(m))}</td></tr>' for m in metrics)
    tab = scroll(f"<table><thead><tr><th>metric</th><th>kind</th><th>value</th></tr></thead><tbody>{rows}"
                 "</tbody></table>")
    return collapsed(f"Comparable metrics ({len(metrics)}; their keys and every value in report.json)", tab)


def _trends(name: str, report: dict) -> str:
    series = [s for s in (report.get("trends") or {}).get(name, []) if s.get("points")]
    if not series:
        return ""
    shown = "".join(render_trend(s) for s in series[:MAX_TRENDS])
    extra = len(series) - MAX_TRENDS
    more = f"<p>{extra} more metric(s) not plotted.</p>" if extra > 0 else ""
    return collapsed(f"Trends over stored runs on this machine ({len(series)} metrics)",
                     f'<div class="trends">{shown}</div>{more}')


def _section_header(name: str, sec: dict) -> str:
    status = sec.get("status", "ok")
    secs = sec.get("seconds")
    timing = f", {secs:.1f}s" if isinstance(secs, (int, float)) else ""
    return (f'<section id="sec-{esc(name)}" class="section"><h2>{esc(sec.get("title", name))} '
            f'<small class="{esc(status)}">[{esc(status)}{timing}]</small></h2>')


def render_section(name: str, sec: dict, report: dict | None = None) -> str:
    report = report or {}
    parts = [_section_header(name, sec), _changes_table(name, report), *_body_parts(sec), _metrics_table(sec),
             _trends(name, report), "</section>"]
    return "\n".join(p for p in parts if p)


def render_merged_section(name: str, sec: dict, report: dict) -> str:
    labels = list(sec["machines"])
    metrics = {label: {m["key"]: m for m in (s.get("data") or {}).get("metrics", [])}
               for label, s in sec["machines"].items()}
    keys = list(dict.fromkeys(k for label in labels for k in metrics[label]))
    parts = [_section_header(name, sec), _changes_table(name, report)]
    if keys:
        head = "".join(f"<th>{esc(c)}</th>" for c in ["key", "kind", *labels])
        rows, differing = [], []
        for k in keys:
            ms = [metrics[label].get(k) for label in labels]
            kind = next(m["kind"] for m in ms if m)
            vals = [metric_text(m) for m in ms]
            differs = len({v for v, m in zip(vals, ms) if m}) > 1 and kind != "info"
            cls = ' class="differs" title="differs across machines (not a regression)"' if differs else ""
            rows.append(f'<tr><td title="key in report.json: {esc(k)}">{esc(metric_label(k))}</td><td>{esc(kind)}</td>'

                        + "".join(f"<td{cls}>{esc(v)}</td>" for v in vals) + "</tr>")
            if differs:
                differing.append(rows[-1])
        table = scroll(f'<table class="per-machine"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody>'
                       '</table>')
        if len(rows) <= COLLAPSE_ROWS:
            parts.append(f"<h3>Metrics by machine</h3>{table}")
        else:
            if differing:
                parts.append(f'<h3>Metrics that differ across machines ({len(differing)})</h3>' + scroll(
                    f'<table class="per-machine-differs"><thead><tr>{head}</tr></thead>'
                    f'<tbody>{"".join(differing)}</tbody></table>'))
            parts.append(collapsed(f"Metrics by machine ({len(rows)}, raw)", table))
    for label, s in sec["machines"].items():
        status = s.get("status", "ok")
        parts.append(f'<details open><summary>{esc(label)} <span class="{esc(status)}">[{esc(status)}]</span>'
                     f'</summary>{"".join(_body_parts(s))}</details>')
    parts.append("</section>")
    return "\n".join(parts)


def _env_value(machine: dict, key: str) -> str:
    """One machine setting as text: the CUDA-only settings read "no GPU" on a CPU-only machine (torch reports its
    TF32 flags there too), a setting not recorded reads "not recorded"."""
    if key in GPU_ROWS and not machine.get("gpu"):
        return "no GPU"
    if key == "gpu" and not machine.get("gpu"):
        return "none (CPU only)"
    value = machine.get(key)
    if key == "machine_id" and isinstance(value, str):
        return " \u00b7 ".join(value.split("|"))
    return "not recorded" if value is None or value == "" else plain(value, 6)


def _machine_header(report: dict) -> str:
    if report.get("kind") == "merged":
        machines = report["machine"].get("machines", {})
        head = "".join(f"<th>{esc(label)}</th>" for label in machines)
        rows = "".join(f"<tr><td>{esc(k.replace('_', ' '))}</td>"
                       + "".join(f"<td>{esc(_env_value(m, k))}</td>" for m in machines.values())
                       + "</tr>" for k in ENV_ROWS if any(k in m for m in machines.values()))
        return '<h2 id="machine">Machines</h2>' + scroll(f'<table class="meta-merged"><thead><tr><th></th>{head}'
                                                          f'</tr></thead><tbody>{rows}</tbody></table>')
    machine = report.get("machine", {})
    keys = list(ENV_ROWS) + [k for k in machine if k not in ENV_ROWS]
    shown = [k for k in keys if k in machine and not (k in GPU_ROWS and not machine.get("gpu"))]
    meta = "".join(f"<tr><td>{esc(k.replace('_', ' '))}</td><td>{esc(_env_value(machine, k))}</td></tr>"
                   for k in shown)
    if not machine.get("gpu"):
        meta += "<tr><td>gpu settings</td><td>none: no CUDA GPU (CUDA, cuDNN and TF32 do not apply)</td></tr>"
    return '<h2 id="machine">Machine and environment</h2>' + scroll(f"<table class=meta>{meta}</table>")


def report_claims(report: dict) -> list[tuple[str, str, dict]]:
    """Every claim of the report as ``(section, machine label or "", claim)`` (a merged report has one set of
    claims per machine)."""
    out = []
    for name, sec in report.get("sections", {}).items():
        per = sec.get("machines") if report.get("kind") == "merged" else {"": sec}
        for label, s in (per or {}).items():
            out += [(name, label, c) for c in s.get("claims") or [] if isinstance(c, dict)]
    return out


#: the summary lists show this many items; the rest are collapsed under them
SUMMARY_ITEMS = 10


def _short_list(list_id: str, items: list[str]) -> str:
    """A ``<ul id=list_id>`` of the first :data:`SUMMARY_ITEMS` items, the rest collapsed below it."""
    head = f'<ul id="{esc(list_id)}">' + "".join(items[:SUMMARY_ITEMS]) + "</ul>"
    rest = items[SUMMARY_ITEMS:]
    return head + (collapsed(f"{len(rest)} more", "<ul>" + "".join(rest) + "</ul>") if rest else "")


def _change_item(entry: dict, cls: str) -> str:
    """One change since the baseline: its section (a link) and its message, the metric named by its label (the key
    in a tooltip: :func:`nsverify.report.claims_table.metric_label`)."""
    name = esc(entry.get("section"))
    message, key = str(entry.get("message") or ""), entry.get("key")
    if isinstance(key, str) and key and message.startswith(key):
        message = metric_label(key) + message[len(key):]
    title = f' title="key in report.json: {esc(key)}"' if key else ""
    return f'<li class="{cls}"{title}><a href="#sec-{name}">{name}</a>: {esc(message)}</li>'


def convention_changes(report: dict) -> list[dict]:
    """The comparison's entries (regressions and other differences) about convention metrics."""
    cmp = report.get("comparison") or {}
    return [e for e in list(report.get("regressions", [])) + list(cmp.get("changes", []))
            if e.get("kind") == "convention"]


def _count(n: int, what: str) -> str:
    return f"{n} {what}" + ("" if n == 1 else "s")


def claims_state(claims: list[dict]) -> dict:
    """The claims' state over claim dicts: ``{"reproduced", "not reproduced", "errata", "undecided"}`` counts (a
    claim exhibiting a paper erratum counts as an erratum only)."""
    out = {"reproduced": 0, "not reproduced": 0, "errata": 0, "undecided": 0}
    for c in claims:
        if is_erratum(c):
            out["errata"] += 1
        else:
            out[{True: "reproduced", False: "not reproduced"}.get(c.get("held"), "undecided")] += 1
    return out


def claims_state_text(claims: list[dict]) -> str:
    """``"32 reproduced, 8 not reproduced, 3 errata, 37 undecided"`` (:func:`claims_state`)."""
    state = claims_state(claims)
    return ", ".join(f"{n} {'erratum' if k == 'errata' and n == 1 else k}" for k, n in state.items())


def run_health(report: dict) -> tuple[str, str]:
    """The run's health: ``("green", "no regressions")`` or ``("red", "1 regression, 2 failed sections")``
    (regressions and failed sections only; the claims' state is separate, :func:`claims_state`)."""
    failed = [n for n, s in report.get("sections", {}).items() if s.get("status") == "failed"]
    n_reg = len(report.get("regressions", []))
    if not failed and not n_reg:
        return "green", "no regressions"
    words = [_count(n_reg, "regression")] if n_reg else []
    return "red", ", ".join(words + ([_count(len(failed), "failed section")] if failed else []))


def status_line(report: dict) -> str:
    """The first screen's two status rows (``id="status-line"``), never to be confused: the run's health (a
    green or red badge, ``id="summary-status"``: regressions and failed sections, with the claim verdicts changed
    since the baseline), and the claims' state (a neutral badge, ``id="claims-status"``: reproduced, not
    reproduced, errata, undecided) (docs/report.md, "The status line")."""
    color, health = run_health(report)
    claims = [c for _, _, c in report_claims(report)]
    cmp = report.get("comparison")
    changed = len(claim_entries(cmp)) if cmp else None
    compared = bool(cmp) and cmp.get("baseline", {}) is not None  # the first run's comparison has baseline None
    since = (_count(changed, "claim verdict") + " changed since the baseline") if compared \
        else "no baseline (the first run of this machine and mode): nothing compared"
    rows = [f'<p class="status-row"><span class="status-label">Run health</span> '
            f'<span class="badge {color}" id="summary-status">{esc(health)}</span> '
            f'<span class="status-note">{esc(since)}</span></p>']
    if claims:
        rows.append('<p class="status-row"><span class="status-label">Claims</span> '
                    f'<span class="badge claims" id="claims-status">{esc(claims_state_text(claims))}</span> '
                    '<span class="status-note">the papers\' claims as measured (a state of the papers, not of '
                    'this run)</span></p>')
    rows.append('<p class="status-row status-note">Full data: <a href="report.json">report.json</a></p>')
    return f'<div id="status-line">{"".join(rows)}</div>'


def _changes_lists(report: dict) -> list[str]:
    """Under the status line: the comparison label, environment changes, failed sections, the claim verdict
    changes, the other regressions and the convention changes."""
    out = []
    cmp = report.get("comparison")
    regressions = report.get("regressions", [])
    if cmp:
        cls = "" if cmp.get("same_machine", True) else ' class="cross"'
        out.append(f"<p id=\"comparison-label\"{cls}>{esc(cmp.get('label'))}</p>")
        if cmp.get("environment_changes"):
            out.append("<p>Environment changes since the baseline: <b>" + esc("; ".join(
                cmp["environment_changes"])) + "</b></p>")
    failed = [n for n, s in report.get("sections", {}).items() if s.get("status") == "failed"]
    if failed:
        out.append("<p>Failed sections: " + ", ".join(
            f'<a href="#sec-{esc(n)}">{esc(n)}</a>' for n in failed) + "</p>")
    changes = claim_entries(cmp or {})
    if changes:
        n_reg = sum(1 for e in changes if "verdict" not in e)
        out.append(f'<h3 id="claim-changes-title">Claim verdicts changed since the baseline ({len(changes)}, '
                   f'{n_reg} of them regressions)</h3>'
                   + _short_list("claim-changes", [_change_item(e, "regression" if "verdict" not in e else "change")
                                                   for e in changes]))
    others = [r for r in regressions if r.get("kind") not in ("convention", "claim")]
    if others:
        out.append(f'<h3 id="regressions-title">Regressions ({len(others)})</h3>'
                   + _short_list("regressions", [_change_item(r, "regression") for r in others]))
    conv = convention_changes(report)
    if conv:
        n_reg = sum(1 for e in conv if "verdict" not in e)
        out.append(f'<h3 id="convention-changes-title">Convention changes since the baseline ({len(conv)}, '
                   f'{n_reg} of them regressions)</h3>'
                   + _short_list("convention-changes", [_change_item(e, "regression" if "verdict" not in e else
                                                                     "change") for e in conv]))
    return out


def _first_section(report: dict, name: str) -> dict:
    """Section ``name`` of the report (of a merged report: its first machine's), ``{}`` when absent."""
    sec = report.get("sections", {}).get(name) or {}
    if report.get("kind") == "merged":
        return next(iter((sec.get("machines") or {}).values()), {})
    return sec


def render_plots(report: dict) -> str:
    """The overview plots (``id="plots"``), those the report has data for, in a two-column grid."""
    claims = [c for _, _, c in report_claims(report) if not is_erratum(c)]
    figures = [("plot-forest", "Claims: measured value and interval against the threshold; green reproduced, "
                "red not reproduced, grey undecided", lambda: plots.forest_svg(claims)),
               ("plot-conventions", "Conventions matrix: rule per op and case, dtype and mode",
                lambda: plots.conventions_png(_first_section(report, "conventions"))),
               ("plot-releases", "Rule changes across torch releases",
                lambda: plots.releases_png(_first_section(report, "releases"))),
               ("plot-zones", "Zone volumes per precision", lambda: plots.zones_png(_first_section(report, "zones")))]
    out = []
    for fid, title, draw in figures:
        try:
            png = draw()
        except (KeyError, TypeError, ValueError, IndexError) as exc:  # a malformed stored report: say so, go on
            out.append(f'<figure id="{fid}" class="plot"><figcaption>{esc(title)}: not drawn ({esc(type(exc).__name__)}'
                       f": {esc(exc)})</figcaption></figure>")
            continue
        if png:
            svg = png.startswith("<svg")
            body = png if svg else (f'<img alt="{esc(title)}" width="{plots.PLOT_WIDTH_PX}" '
                                    f'data-font-px="{plots.FONT_PX:.2f}" src="data:image/png;base64,{png}">')
            cls = "plot wide" if fid == "plot-forest" else "plot"
            out.append(f'<figure id="{fid}" class="{cls}">{body}<figcaption>{esc(title)}</figcaption></figure>')
    return f'<div id="plots">{"".join(out)}</div>' if out else ""


def render_claims(report: dict) -> str:
    """Every claim in one table grouped by paper (verdict changes since the baseline marked), then the errata."""
    entries = report_claims(report)
    claims = [e for e in entries if not is_erratum(e[2])]
    errata = [e for e in entries if is_erratum(e[2])]
    changes = {(e.get("section"), e.get("key")): e for e in claim_entries(report.get("comparison") or {})}
    out = []
    if claims:
        out.append(f'<h2 id="claims">Claims ({len(claims)}: {esc(summary_line([c for _, _, c in claims]))})</h2>'
                   + scroll(claims_html(claims, changes)))
    if errata:
        out.append(f'<h2 id="errata-title">Paper errata ({len(errata)})</h2>' + errata_html(errata))
    return "".join(out)


def findings_list(report: dict) -> str:
    """The first screen's findings (``id="findings"``): each case that breaks PyTorch's documented rule and each
    pair of equivalent formulations that disagree, with its first release (the "promised" section's
    ``data.findings``; its scripts in ``data.repro``); empty when the report has none."""
    found = (_first_section(report, "promised").get("data") or {}).get("findings") or []
    if not found:
        return ""
    def item(f):
        return (f'<li class="finding {esc(f.get("kind"))}" title="script: data.repro[{esc(f.get("id"))}] of the '
                f'promised section"><a href="#sec-promised">{esc(f.get("kind"))}</a>: {esc(f.get("title"))} (first '
                f'release {esc(f.get("first_release"))})</li>')
    kinds = {k: [item(f) for f in found if f.get("kind") == k] for k in ("promise", "formulations")}
    return (f'<h3 id="findings-title">Findings: {len(kinds["promise"])} promise breaks, '
            f'{len(kinds["formulations"])} disagreeing formulation pairs</h3>'
            + "".join(_short_list(f"findings-{k}", v) for k, v in kinds.items() if v))


def render_summary(report: dict) -> str:
    """The first screen: the status line, what changed, the findings (the conventions' and the programs'), the
    overview plots, the claims table and the errata."""
    from nsverify.report.program_findings import program_findings_html  # issue 37: the programs' findings

    return ('<div id="summary">' + status_line(report) + "".join(_changes_lists(report)) + findings_list(report)
            + program_findings_html(report) + render_plots(report) + render_claims(report) + "</div>")


def render_report(report: dict) -> str:
    sections = report.get("sections", {})
    merged = report.get("kind") == "merged"
    nav = "<nav>" + "".join(f'<a href="#sec-{esc(n)}">{esc(s.get("title", n))}</a>'
                            for n, s in sections.items()) + "</nav>"
    render = render_merged_section if merged else render_section
    body = "\n".join(render(n, s, report) for n, s in sections.items())
    title = "nsverify merged report (several machines)" if merged else "nsverify nightly report"
    return (f"<!DOCTYPE html><html lang=en><head><meta charset=utf-8><title>{title} "
            f"{esc(report.get('created', ''))}</title><style>{CSS}</style></head><body>"
            f"<h1>{title}</h1><p>{esc(report.get('created', ''))}"
            f"{' (quick)' if report.get('quick') else ''}</p>"
            f"{render_summary(report)}{_machine_header(report)}{nav}{body}</body></html>")
