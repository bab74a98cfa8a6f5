"""The claims table of a report section: one row per claim (:meth:`nsverify.papers.claims.Claim.to_json` dicts)
and the summary line above it.

Sections call :func:`claims_table` and :func:`summary_line`; the page renders the table like any other.
Rows are ordered not reproduced, undecided, reproduced (then in the section's order).
"""
from __future__ import annotations

from nsverify.papers.claims import VERDICTS, summary_counts

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
