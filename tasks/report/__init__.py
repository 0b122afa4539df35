"""The one report assembler of every benchmark (``assemble.write``) and what it is made of:
the sections' page (episodes.py, episode_page.py, page_base.py, md_common.py, sections/).
A benchmark's own report code (its sections, or a layout section that writes the whole
report) lives beside its spec; nothing here imports it.

``ReportError`` is importable without pandas, scipy or matplotlib: the CLI catches it on
every run."""

from tasks.report.errors import ReportError

__all__ = ["ReportError"]
