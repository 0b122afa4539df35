"""Stage 4: metric views -> analyses, figures and the report (report.md, report.html).

Public API: ``write_report(cfg, run_id)`` (the CLI and the report flow), ``summary_rows(wh)``,
``ReportError``, ``FailureRules`` (the configurable failure-mode rules)."""

from tasks.report.failure_modes import FailureRules
from tasks.report.data import ReportError
from tasks.report.writer import build, summary_rows, write_report

__all__ = ["FailureRules", "ReportError", "build", "summary_rows", "write_report"]
