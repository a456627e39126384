"""The comparison as HTML for people: the summary table and findings (shared by the report and the panel),
and the self-contained report.

    import tcbench as tc
    html = tc.report.comparison_html(cmp, profile="ml.g5.2xlarge")
    tc.report.summary_table_html(cmp.summary())   # the same table the panel shows
"""

from __future__ import annotations

from ._report import comparison_html, diagnostics_html, findings_html, summary_table_html

__all__ = ["summary_table_html", "findings_html", "diagnostics_html", "comparison_html"]
