"""The report's error class, apart from the report's modules: the CLI catches it on every run,
and importing it must not import pandas, scipy and matplotlib."""


class ReportError(Exception):
    """A problem the user must fix before a report can be written (the message says which)."""
