"""The report's first-screen list of program findings (issue 37): the disagreements between modes and the
gradients outside the Clarke set that the "programs" section found (``data["program_findings"]``, written by
:func:`nsverify.conventions.programs.program_findings`), one line each, linked to the section."""
from __future__ import annotations

from nsverify.report.claims_table import esc


def program_findings_html(report: dict) -> str:
    """``<h3 id="program-findings-title">`` and the list, or "" when the report has no such findings."""
    sec = (report.get("sections") or {}).get("programs") or {}
    if report.get("kind") == "merged":
        sec = next(iter((sec.get("machines") or {}).values()), {})
    findings = ((sec.get("data") or {}).get("program_findings")) or []
    if not findings:
        return ""
    items = []
    for f in findings:
        groups = "; ".join(f"{c.get('piece')} in {', '.join(c.get('in', [])[:3])}" for c in f.get("cells", []))
        cause = f" ({f['cause']})" if f.get("cause") else ""
        items.append(f'<li class="change"><a href="#sec-programs">{esc(f.get("program"))}</a>: '
                     f'{esc(f.get("kind"))} on {esc(f.get("device"))}, {esc(f.get("framework", "torch"))} '
                     f'{esc(f.get("first_release"))}: '
                     f'{esc(groups)}{esc(cause)}</li>')
    return (f'<h3 id="program-findings-title">Program findings ({len(findings)}): modes that disagree at a tie on a '
            f'computed operand</h3><ul id="program-findings">' + "".join(items) + "</ul>")
