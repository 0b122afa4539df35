"""A report folder written whole or not at all: files go into a temporary folder beside it,
which replaces the old folder only when everything was written."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from pathlib import Path


@contextlib.contextmanager
def atomic_folder(final: Path):
    """Yield a temporary folder; on success it becomes ``final`` (replacing it), on any
    error it is removed and ``final`` is left as it was."""
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}-", dir=final.parent))
    try:
        yield tmp
        if final.exists():
            shutil.rmtree(final)
        tmp.rename(final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
