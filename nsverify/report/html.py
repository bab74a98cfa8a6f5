"""Render a report dict to one self-contained HTML page (inline CSS, images as data URIs, no scripts)."""
from __future__ import annotations

import html
import json

CSS = """
body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1200px;color:#222;padding:0 1em}
h1{margin-bottom:.2em} h2{border-bottom:1px solid #ccc;padding-bottom:.2em;margin-top:2em}
table{border-collapse:collapse;margin:.8em 0;font-size:.85em} td,th{border:1px solid #ccc;padding:3px 7px}
th{background:#f3f3f3} .ok{color:#17692b} .failed,.red{color:#b00020} .green{color:#17692b}
.badge{display:inline-block;padding:.3em .8em;border-radius:4px;color:#fff;font-weight:bold}
.badge.green{background:#17692b;color:#fff} .badge.red{background:#b00020;color:#fff}
pre{background:#f7f7f7;padding:.6em;overflow:auto;font-size:.8em} img{max-width:100%}
.meta td{border:none;padding:1px 8px} nav a{margin-right:1em}
"""


def _cell(value) -> str:
    if isinstance(value, float):
        return html.escape(f"{value:.6g}")
    if isinstance(value, (dict, list)):
        return html.escape(json.dumps(value))
    return html.escape("" if value is None else str(value))


def render_table(tab: dict) -> str:
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in tab.get("columns", []))
    rows = "".join("<tr>" + "".join(f"<td>{_cell(v)}</td>" for v in row) + "</tr>" for row in tab.get("rows", []))
    title = f"<h3>{html.escape(tab.get('title', ''))}</h3>" if tab.get("title") else ""
    return f"{title}<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"


def render_section(name: str, sec: dict) -> str:
    parts = [f'<section id="sec-{html.escape(name)}" class="section">',
             f"<h2>{html.escape(sec.get('title', name))} "
             f"<small class=\"{html.escape(sec.get('status', 'ok'))}\">[{html.escape(sec.get('status', 'ok'))}"
             f", {sec.get('seconds', 0):.1f}s]</small></h2>"]
    if sec.get("status") == "failed":
        parts.append(f"<p class=failed>This section raised an exception:</p><pre>"
                     f"{html.escape(sec.get('traceback', ''))}</pre>")
    if sec.get("summary"):
        parts.append(f"<p>{html.escape(sec['summary'])}</p>")
    claims = sec.get("claims") or []
    if claims:
        parts.append(render_table({"title": "Paper claims", "columns": ["claim", "measured", "held"],
                                   "rows": [[c.get("claim"), c.get("measured"), c.get("held")] for c in claims]}))
    for tab in sec.get("tables", []):
        parts.append(render_table(tab))
    for fig in sec.get("figures", []):
        parts.append(f"<figure><img alt=\"{html.escape(fig.get('title', ''))}\" "
                     f"src=\"data:image/png;base64,{fig['png']}\"><figcaption>"
                     f"{html.escape(fig.get('title', ''))}</figcaption></figure>")
    parts.append("</section>")
    return "\n".join(parts)


def render_report(report: dict) -> str:
    sections = report.get("sections", {})
    failed = [n for n, s in sections.items() if s.get("status") == "failed"]
    regressions = report.get("regressions", [])
    red = bool(failed or regressions)
    badge = f'<span class="badge {"red" if red else "green"}" id="summary-status">{"RED" if red else "GREEN"}</span>'
    summary = [f'<div id="summary"><h2>Summary {badge}</h2>']
    if failed:
        summary.append("<p>Failed sections: " + ", ".join(
            f'<a href="#sec-{html.escape(n)}">{html.escape(n)}</a>' for n in failed) + "</p>")
    if regressions:
        summary.append("<ul>" + "".join(
            f'<li><a href="#sec-{html.escape(r.get("section", ""))}">{html.escape(r.get("section", ""))}</a>: '
            f'{html.escape(r.get("message", ""))}</li>' for r in regressions) + "</ul>")
    elif not failed:
        summary.append("<p>No failed section and no regression.</p>")
    if report.get("comparison"):
        summary.append(f"<p>{html.escape(report['comparison'].get('label', ''))}</p>")
    summary.append("</div>")
    machine = report.get("machine", {})
    meta = "".join(f"<tr><td>{html.escape(k)}</td><td>{_cell(v)}</td></tr>" for k, v in machine.items())
    nav = "<nav>" + "".join(f'<a href="#sec-{html.escape(n)}">{html.escape(s.get("title", n))}</a>'
                            for n, s in sections.items()) + "</nav>"
    body = "\n".join(render_section(n, s) for n, s in sections.items())
    return (f"<!DOCTYPE html><html lang=en><head><meta charset=utf-8><title>nsverify report "
            f"{html.escape(report.get('created', ''))}</title><style>{CSS}</style></head><body>"
            f"<h1>nsverify nightly report</h1><p>{html.escape(report.get('created', ''))}"
            f"{' (quick)' if report.get('quick') else ''}</p>"
            f"{''.join(summary)}<h2>Machine</h2><table class=meta>{meta}</table>{nav}{body}</body></html>")
