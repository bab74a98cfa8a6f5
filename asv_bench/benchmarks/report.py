"""Speed of the nightly job's own machinery: validating, comparing and rendering reports of many metrics."""
from __future__ import annotations

from .common import synthetic_report


class Reports:
    params = [[100, 10_000]]
    param_names = ["n_metrics"]

    def setup(self, n):
        self.old, self.new = synthetic_report(n), synthetic_report(n, 0.1)

    def time_validate(self, n):
        from nsverify.report.schema import validate_report

        validate_report(self.new)

    def time_compare(self, n):
        from nsverify.report.compare import compare_reports

        compare_reports(self.old, self.new)

    def time_render_html(self, n):
        from nsverify.report.html import render_report

        render_report(self.new)
