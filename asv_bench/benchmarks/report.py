"""Speed of the nightly job's own machinery: validating, comparing and rendering reports of many metrics."""
from __future__ import annotations

from nsverify.report.compare import compare_reports
from nsverify.report.html import render_report
from nsverify.report.schema import validate_report


def _report(n: int, shift: float = 0.0) -> dict:
    metrics = []
    for i in range(n):
        kind = ("convention", "share", "convergence", "bench_ratio")[i % 4]
        m = {"key": f"m{i}", "kind": kind, "value": 0.5 + shift}
        if kind == "share":
            m.update(lo=0.4 + shift, hi=0.6 + shift)
        elif kind == "convergence":
            m["spread"] = 0.01
        metrics.append(m)
    return {"schema": "nsverify.report/1", "kind": "run", "created": f"2026-01-0{1 + int(shift * 10)}",
            "quick": True, "machine": {"machine_id": "bench"}, "regressions": [],
            "sections": {"s": {"title": "S", "status": "ok", "data": {"metrics": metrics}}}}


class Reports:
    params = [[100, 10_000]]
    param_names = ["n_metrics"]

    def setup(self, n):
        self.old, self.new = _report(n), _report(n, 0.1)

    def time_validate(self, n):
        validate_report(self.new)

    def time_compare(self, n):
        compare_reports(self.old, self.new)

    def time_render_html(self, n):
        render_report(self.new)
