"""The one renderer of a report section's claims: the claims table (one row per claim,
:meth:`nsverify.claims.record.Claim.to_json` dicts), the summary line above it, and the section dict built
around them (:func:`render_section`), with the metric helpers the sections share.

Sections choose budgets, call the paper's ``repro`` functions and hand the claims, tables, figures and metrics
to :func:`render_section`; the page renders the claims table like any other. Rows are ordered not reproduced,
undecided, reproduced (then in the section's order).

The page's first screen shows every claim of the report in one HTML table grouped by paper
(:func:`claims_html`), the paper errata in their own list (:func:`errata_html`); :func:`plain` is the one
formatter of a value as text a reader sees (never ``None``, never raw JSON, never ``\\u`` escapes).
"""
from __future__ import annotations

import html
import math
from dataclasses import dataclass, field

from nsverify.claims.record import VERDICTS, summary_counts
from nsverify.claims.stats import clopper_pearson
from nsverify.report.compare import claim_key

COLUMNS = ["verdict", "source", "claim", "paper value", "measured [interval]", "n (needed)", "power", "rule",
           "why"]
_ORDER = {False: 0, None: 1, True: 2}


def summary_line(claims: list[dict]) -> str:
    """``"reproduced A / not reproduced B / undecided C"`` over the claim dicts."""
    c = summary_counts(claims)
    return " / ".join(f"{k} {c[k]}" for k in VERDICTS.values())


#: what a reader sees for a missing value
DASH = "\u2013"


def esc(x) -> str:
    """``x`` as escaped HTML text (``None`` is empty)."""
    return html.escape("" if x is None else str(x), quote=True)


def plain(value, digits: int = 4) -> str:
    """A value as text for a reader: ``None`` -> an en dash, floats to ``digits`` significant digits, a dict as
    ``key: value, ...``, a list as ``a, b`` (in brackets when nested), strings as they are (proper Unicode)."""
    if value is None:
        return DASH
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    if isinstance(value, dict):
        return ", ".join(f"{k}: {_inner(v, digits)}" for k, v in value.items()) or DASH
    if isinstance(value, (list, tuple)):
        return ", ".join(_inner(v, digits) for v in value) or DASH
    return str(value)


#: the abbreviations of a metric key's parts, spelled out for a reader (:func:`metric_label`)
_KEY_WORDS = (("table", "Table "), ("fig", "Fig. "), ("sec", "Sec. "), ("thm", "Theorem "), ("example", "Example "),
              ("alg", "Algorithm "))


def _key_part(part: str) -> str:
    import re

    if part in ("nNone", "None", ""):
        return ""
    for short, word in _KEY_WORDS:
        m = re.fullmatch(short + r"(\d[\d.]*)", part)
        if m:
            return word + m.group(1)
    m = re.fullmatch(r"cR(\d+)", part)
    if m:
        return f"c_relu = {m.group(1)}"
    m = re.fullmatch(r"n(\d+)", part)
    if m:
        return f"n = {m.group(1)}"
    return part.replace("_", " ").replace("=", " = ")


def metric_label(key: str) -> str:
    """A metric's comparison key (``table2.1|mul|cR1|nNone``, kept in report.json) as a reader's label: its parts
    spelled out (``Table 2.1``, ``c_relu = 1``), unset parts dropped, joined by `` · ``."""
    parts = [_key_part(p) for p in str(key).split("|")]
    return " \u00b7 ".join(p for p in parts if p) or str(key)


def _inner(value, digits: int) -> str:
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_inner(v, digits) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + plain(value, digits) + "}"
    return plain(value, digits)


def _num(x) -> str:
    return plain(x, 3)


def _measured(c: dict) -> str:
    text = c.get("measured") or ""
    if c.get("lo") is not None and c.get("hi") is not None and c.get("value") is not None:
        interval = c.get("interval") or "interval"
        text += f" [{_num(c['lo'])}, {_num(c['hi'])}; {interval}]"
    return text


def claim_row(c: dict) -> list:
    src = c.get("source") or {}
    source = f"{src.get('paper', '')}, {src.get('where', '')}".strip(", ") or DASH
    statement = c.get("claim", "")
    if c.get("by") == "ours":
        statement = "[ours] " + statement
    th = c.get("threshold")
    if th:
        note = f": {th['note']}" if th.get("note") else ""
        statement += f" (threshold {_num(th.get('value'))}, {th.get('origin')}{note})"
    n = c.get("n")
    need = c.get("n_required")
    unit = f" {c['unit']}s" if c.get("unit") else ""
    n_text = DASH if n is None else (f"{n}{unit} ({need})" if need is not None else f"{n}{unit}")
    power = c.get("power")
    return [VERDICTS.get(c.get("held"), "undecided"), source, statement, c.get("paper_value") or DASH,
            _measured(c), n_text, DASH if power is None else f"{power:.2f}", c.get("rule") or DASH,
            c.get("reason") or ""]


def claims_table(claims: list[dict], title: str = "Claims") -> dict:
    """A report table (``{"title", "columns", "rows"}``) with one row per claim, the summary line in the title."""
    ordered = sorted(enumerate(claims), key=lambda ic: (_ORDER.get(ic[1].get("held"), 1), ic[0]))
    return {"title": f"{title}: {summary_line(claims)}", "columns": list(COLUMNS),
            "rows": [claim_row(c) for _, c in ordered]}


def render_section(claims: list[dict], summary: str, tables=(), figures=(), metrics=(), data: dict | None = None,
                   claims_title: str | None = None) -> dict:
    """A section's result dict: with ``claims_title``, the claims table first (:func:`claims_table`) and the
    summary led by ``"Claims: <summary line>. "``; then ``tables`` and ``figures``; ``data`` with the
    comparable ``metrics`` under ``data["metrics"]`` (docs/report.md)."""
    out = {"summary": f"Claims: {summary_line(claims)}. {summary}" if claims_title is not None else summary,
           "tables": ([claims_table(claims, claims_title)] if claims_title is not None else []) + list(tables)}
    if figures:
        out["figures"] = list(figures)
    out["claims"] = claims
    out["data"] = {"metrics": list(metrics), **(data or {})}
    return out


@dataclass
class Parts:
    """What a section collects while it runs its experiments, in order: claims, tables, figures and metrics;
    :meth:`render` hands them to :func:`render_section`."""

    claims: list = field(default_factory=list)
    tables: list = field(default_factory=list)
    figures: list = field(default_factory=list)
    metrics: list = field(default_factory=list)

    def collect_claims(self, result: dict) -> dict:
        """Add the claims of ``result`` (what a paper's ``repro`` function returns: its ``"claims"``, already judged
        by :meth:`nsverify.claims.record.ClaimSpec.judge`) to this section's claims and return ``result``; it
        judges nothing."""
        self.claims += result["claims"]
        return result

    def render(self, summary: str, data: dict | None = None, claims_title: str | None = None) -> dict:
        return render_section(self.claims, summary, self.tables, self.figures, self.metrics, data, claims_title)


def share_metric(key: str, k: int, n: int) -> dict:
    """A ``share`` metric: k of n with its Clopper-Pearson 95% interval."""
    lo, hi = clopper_pearson(k, n)
    return {"key": key, "kind": "share", "value": k / n if n else 0.0, "lo": lo, "hi": hi}


def finite_metrics(metrics) -> list[dict]:
    """The metrics whose value is recorded (not None, not NaN)."""
    return [m for m in metrics
            if m["value"] is not None and not (isinstance(m["value"], float) and math.isnan(m["value"]))]


# ------------------------------------------------------------------------------------ the page's claims table
#: the columns of the page's claims table (grouped by paper, one row per claim)
HTML_COLUMNS = ["where", "claim", "measured [interval]", "n / needed", "power", "verdict", "why"]
_VERDICT_CLASS = {True: "v-held", False: "v-refuted", None: "v-undecided"}


def is_erratum(c: dict) -> bool:
    """A claim that exhibits a paper erratum, listed apart from the claims: its ``erratum`` is the erratum's text
    (what is misprinted and where: :attr:`nsverify.claims.record.Claim.erratum`), null when it exhibits none."""
    e = c.get("erratum")
    return isinstance(e, str) and bool(e.strip())


def paper_of(c: dict) -> str:
    src = c.get("source") if isinstance(c.get("source"), dict) else {}
    return src.get("paper") or ("nsverify (ours)" if c.get("by") == "ours" else "(no source)")


def _where(c: dict) -> str:
    src = c.get("source") if isinstance(c.get("source"), dict) else {}
    return src.get("where") or ""


def _one_line(text) -> str:
    return " ".join(plain(text).split()) if text not in (None, "") else ""


def measured_text(c: dict) -> str:
    """The measured value with its interval (``0.19 [0.10, 0.30]``), else the measurement in words."""
    if isinstance(c.get("value"), (int, float)) and not isinstance(c.get("value"), bool):
        text = _num(c["value"])
        if c.get("lo") is not None and c.get("hi") is not None:
            text += f" [{_num(c['lo'])}, {_num(c['hi'])}]"
        return text
    return _one_line(c.get("measured"))


def _n_text(c: dict) -> str:
    n, need = c.get("n"), c.get("n_required")
    if n is None:
        return DASH
    unit = f" {c['unit']}s" if c.get("unit") else ""  # the independent unit n and n_required count
    return f"{n} / {need}{unit}" if need is not None else f"{n}{unit}"


def _cell(text: str, cls: str = "") -> str:
    klass = f' class="{cls}"' if cls else ""
    return f"<td{klass}>{esc(text)}</td>"


def claim_html_row(name: str, label: str, c: dict, change: dict | None = None) -> str:
    """One row of the page's claims table: where (with a link to the section), the one-line statement, measured
    [interval], n / n_required, power, verdict (and its change since the baseline), the one-line reason."""
    held = c.get("held")
    where = esc(_where(c)) + (f' <a href="#sec-{esc(name)}">{esc(name)}</a>' if name else "") \
        + (f" [{esc(label)}]" if label else "")
    statement = _one_line(c.get("claim") or (c.get("source") or {}).get("statement"))
    if c.get("by") == "ours":
        statement = "[ours] " + statement
    th = c.get("threshold") if isinstance(c.get("threshold"), dict) else None
    shown = measured_text(c)
    measured = _one_line(c.get("measured"))
    details = [measured] if measured and measured != shown else []
    if c.get("interval"):
        details.append(f"({_one_line(c['interval'])})")
    if th:
        details.append(f"threshold {_num(th.get('value'))} ({th.get('origin') or DASH}"
                       + (f": {_one_line(th['note'])})" if th.get("note") else ")"))
    verdict = VERDICTS.get(held, "undecided")
    if change:
        verdict += f" (was {change.get('old')})"
    power = c.get("power")
    cls = _VERDICT_CLASS.get(held, "v-undecided") + (" changed" if change else "")
    detail = f'<div class="detail">{esc("; ".join(details))}</div>' if details else ""
    return (f'<tr class="{cls}"><td>{where}</td>' + _cell(statement)
            + f"<td>{esc(shown)}{detail}</td>" + _cell(_n_text(c))
            + _cell(DASH if power is None else f"{power:.2f}") + _cell(verdict, cls="verdict")
            + _cell(_one_line(c.get("reason"))) + "</tr>")


def claims_html(entries: list[tuple[str, str, dict]], changes: dict | None = None,
                table_id: str = "claims-table") -> str:
    """The page's claims table: ``entries`` (section, machine label, claim) grouped by paper (a header row per
    paper with its counts), in each group not reproduced first, then undecided, then reproduced. ``changes``
    maps a claim's ``(section, key)`` to its verdict change since the baseline (marked in the row)."""
    changes = changes or {}
    groups: dict[str, list] = {}
    for e in entries:
        groups.setdefault(paper_of(e[2]), []).append(e)
    order = sorted(groups, key=lambda p: (p.startswith("nsverify"), p))
    head = "".join(f"<th>{esc(c)}</th>" for c in HTML_COLUMNS)
    body = []
    for paper in order:
        es = sorted(groups[paper], key=lambda e: _ORDER.get(e[2].get("held"), 1))
        counts = summary_line([e[2] for e in es]).replace(" / ", ", ")
        body.append(f'<tbody class="paper"><tr class="paper-head"><th colspan="{len(HTML_COLUMNS)}">'
                    f'{esc(paper)} <span class="counts">({len(es)}: {esc(counts)})</span></th></tr>'
                    + "".join(claim_html_row(n, label, c, changes.get((n, claim_key(c)))) for n, label, c in es)
                    + "</tbody>")
    return f'<table id="{esc(table_id)}" class="claims"><thead><tr>{head}</tr></thead>{"".join(body)}</table>'


def errata_html(entries: list[tuple[str, str, dict]]) -> str:
    """The paper errata: one item per claim exhibiting one (paper, place, the erratum, the claim it breaks and
    what we measured)."""
    items = []
    for name, label, c in entries:
        statement = _one_line(c.get("claim") or (c.get("source") or {}).get("statement"))
        detail = "; ".join(t for t in (f"claim: {statement}" if statement else "", _one_line(c.get("measured")),
                                       _one_line(c.get("reason"))) if t)
        items.append(f'<li><b>{esc(paper_of(c))}, {esc(_where(c))}</b>: {esc(_one_line(c.get("erratum")))}'
                     + (f' <span class="field">{esc(detail)}</span>' if detail else "")
                     + f' (<a href="#sec-{esc(name)}">{esc(name)}</a>{" [" + esc(label) + "]" if label else ""})'
                     "</li>")
    return f'<ul id="errata">{"".join(items)}</ul>'
