"""A report folder written whole or not at all: files go into a temporary folder beside it,
which replaces the old folder only when everything was written.

A report takes seconds (statistics, figures, pages) and runs on the flow's own thread, where
a Ctrl-C cannot cancel it: it calls ``checkpoint()`` between its pieces (each analysis,
each section's data, each figure, and before the folder replaces the old one), which raises
``Interrupted`` once a stop was asked for (tasks/ops/interrupt.py). The temporary folder is
then removed and the old report left as it was; outside a run it never raises."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from pathlib import Path

from tasks.ops import interrupt


def checkpoint() -> None:
    """Between two pieces of a report: ``Interrupted`` once a stop was asked for."""
    interrupt.raise_if_requested()


@contextlib.contextmanager
def atomic_folder(final: Path):
    """Yield a temporary folder; on success it becomes ``final`` (replacing it), on any
    error it is removed and ``final`` is left as it was."""
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}-", dir=final.parent))
    try:
        yield tmp
        checkpoint()  # a stop asked for while it was written: the old folder stays
        if final.exists():
            shutil.rmtree(final)
        tmp.rename(final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
