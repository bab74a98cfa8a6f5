"""The one renderer of a report section's claims: the claims table (one row per claim,
:meth:`nsverify.claims.record.Claim.to_json` dicts), the summary line above it, and the section dict built
around them (:func:`render_section`), with the metric helpers the sections share.

Sections choose budgets, call the paper's ``repro`` functions and hand the claims, tables, figures and metrics
to :func:`render_section`; the page renders the claims table like any other. Rows are ordered not reproduced,
undecided, reproduced (then in the section's order).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from nsverify.claims.record import VERDICTS, summary_counts
from nsverify.claims.stats import clopper_pearson

COLUMNS = ["verdict", "source", "claim", "paper value", "measured [interval]", "n (needed)", "power", "rule",
           "why"]
_ORDER = {False: 0, None: 1, True: 2}


def summary_line(claims: list[dict]) -> str:
    """``"reproduced A / not reproduced B / undecided C"`` over the claim dicts."""
    c = summary_counts(claims)
    return " / ".join(f"{k} {c[k]}" for k in VERDICTS.values())


def _num(x) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:.3g}"
    return str(x)


def _measured(c: dict) -> str:
    text = c.get("measured") or ""
    if c.get("lo") is not None and c.get("hi") is not None and c.get("value") is not None:
        interval = c.get("interval") or "interval"
        text += f" [{_num(c['lo'])}, {_num(c['hi'])}; {interval}]"
    return text


def claim_row(c: dict) -> list:
    src = c.get("source") or {}
    source = f"{src.get('paper', '')}, {src.get('where', '')}".strip(", ") or "-"
    statement = c.get("claim", "")
    if c.get("by") == "ours":
        statement = "[ours] " + statement
    th = c.get("threshold")
    if th:
        note = f": {th['note']}" if th.get("note") else ""
        statement += f" (threshold {_num(th.get('value'))}, {th.get('origin')}{note})"
    n = c.get("n")
    need = c.get("n_required")
    n_text = "-" if n is None else (f"{n} ({need})" if need is not None else str(n))
    power = c.get("power")
    return [VERDICTS.get(c.get("held"), "undecided"), source, statement, c.get("paper_value") or "-", _measured(c),
            n_text, "-" if power is None else f"{power:.2f}", c.get("rule", "-"), c.get("reason", "")]


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

    def judged(self, result: dict) -> dict:
        """Collect the claims of a repro function's ``result`` (its ``"claims"``) and return the result."""
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
