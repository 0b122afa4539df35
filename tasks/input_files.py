"""Files a user hands the project (configs, datasets, annotation exports) are checked before
anything reads them: a regular file only (a FIFO would hang the read, ``/dev/zero`` would
fill memory, a folder would fail deep inside a loader), and no larger than a limit, so a
wrong path is one line naming the file instead of a hang, an out-of-memory kill or a
traceback.

The limits are generous; ``CARRYON_MAX_INPUT_MB`` raises the one for datasets and
annotation files (default 2048 MB). A config file is at most 1 MB.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

CONFIG_MAX_BYTES = 1_000_000
DEFAULT_MAX_MB = 2048


class InputFileError(ValueError):
    """A path that is not a readable regular file within its size limit (one line)."""


def max_input_bytes() -> int:
    raw = os.environ.get("CARRYON_MAX_INPUT_MB", "")
    try:
        mb = int(raw) if raw.strip() else DEFAULT_MAX_MB
    except ValueError:
        raise InputFileError(f"CARRYON_MAX_INPUT_MB={raw!r}: a whole number of megabytes") from None
    if mb <= 0:
        raise InputFileError(f"CARRYON_MAX_INPUT_MB={raw!r}: must be positive")
    return mb * 1_000_000


def _kind(mode: int) -> str | None:
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def check_input_file(path, what: str, max_bytes: int | None = None) -> Path:
    """``path`` if it is a regular file within the limit; InputFileError otherwise.
    A missing file raises FileNotFoundError, so callers keep their own message for it."""
    path = Path(path)
    st = path.stat()  # follows links: a link to a device is a device
    kind = _kind(st.st_mode)
    if kind:
        raise InputFileError(f"{path}: is {kind}, not a regular file; give the path of a "
                             f"{what} file")
    limit = max_input_bytes() if max_bytes is None else max_bytes
    if st.st_size > limit:
        raise InputFileError(f"{path}: {st.st_size} bytes is larger than a {what} may be "
                             f"({limit} bytes; CARRYON_MAX_INPUT_MB sets the limit)")
    return path


def read_input_bytes(path, what: str, max_bytes: int | None = None) -> bytes:
    """The bytes of a checked input file, never more than its limit (a file that grows while
    it is read is refused, not read without end)."""
    path = check_input_file(path, what, max_bytes)
    limit = max_input_bytes() if max_bytes is None else max_bytes
    with open(path, "rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise InputFileError(f"{path}: grew past {limit} bytes while it was read")
    return data
