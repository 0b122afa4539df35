"""Stage 4: metric views -> analyses, figures and the report (report.md, report.html).

Public API: ``write_report(cfg, run_id)`` (the CLI and the report flow), ``summary_rows(wh)``,
``ReportError``, ``FailureRules`` (the configurable failure-mode rules).

The names load on first use: the report's modules import pandas, scipy and matplotlib
(about 2 s), which a run pays only when its report stage runs."""

from tasks.report.errors import ReportError

__all__ = ["FailureRules", "ReportError", "build", "summary_rows", "write_report"]


def __getattr__(name: str):
    if name == "FailureRules":
        from tasks.report.failure_modes import FailureRules

        return FailureRules
    if name in ("build", "summary_rows", "write_report"):
        from tasks.report import writer

        return getattr(writer, name)
    raise AttributeError(f"module 'tasks.report' has no attribute {name!r}")
