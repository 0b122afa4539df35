"""What every dataset loader does with a user's file: read it through the input-file check
(tasks/input_files.py: no FIFO, device or folder, a size limit), parse it as JSON, and read
its text fields, each problem one ``DataError`` line naming the file, the row and the field.

The loaders were written one at a time and word their errors differently ("cannot read:
...", "cannot read the file (...)"; "a non-empty string is required", "field 'x': empty").
Tests and users' scripts match those lines, so each loader keeps its wording in a ``Style``
and the checks themselves live here, once.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from tasks.config_error import ConfigError
from tasks.input_files import InputFileError, read_input_bytes


class DataError(ConfigError):
    """A problem in a dataset file or the dataset selection; the message names the file, the
    row and the field. (A ConfigError, so every command that reports config problems as a
    one-line error reports these the same way.)"""


def read_dataset(path) -> bytes:
    """A dataset file's bytes, checked first (tasks/input_files.py): a FIFO, a device, a
    folder or a file past the size limit is one DataError line; a missing file raises
    FileNotFoundError for the loader's own message."""
    try:
        return read_input_bytes(path, "dataset")
    except InputFileError as e:
        raise DataError(str(e)) from None


@dataclass(frozen=True)
class Style:
    """A loader's wording of its errors (``str.format`` templates) and its one leniency.

    File templates get ``path``, ``error`` (the exception as text), ``strerror`` (an OSError's
    reason alone) and ``reason`` (a decoding error's); ``not_json`` gets ``where`` (the path,
    or the path and row of a JSON line), ``line``, ``column`` and ``msg``. Field templates get
    ``where`` (the file, row and field), ``type`` and ``value`` (its repr, cut at 60)."""

    cannot_read: str = "{path}: cannot read the file ({error})"
    not_utf8: str | None = None  # None: a decoding error reads as cannot_read
    no_file: str | None = None  # None: a missing file reads as cannot_read
    not_json: str = "{where}: not JSON (line {line}: {msg})"
    missing: str = "{where}: a non-empty string is required"  # a required field is None
    not_text: str = "{where}: a non-empty string is required"  # not a string
    blank: str = "{where}: a non-empty string is required"  # nothing but whitespace
    # An optional field left blank ("", "  ") reads as absent (None) rather than an error.
    optional_blank: bool = False


PLAIN = Style()


def _fail(template: str, **values) -> DataError:
    return DataError(template.format(**values))


def read_text(path, *, encoding: str = "utf-8", style: Style = PLAIN) -> str:
    """The text of a checked dataset file (``utf-8-sig`` also takes a leading BOM). A file
    with nothing but whitespace in it is refused as empty (one line naming it), since no
    published dataset ships an empty file and a loader would otherwise read "0 items"."""
    try:
        data = read_dataset(path)
    except FileNotFoundError as e:
        raise _fail(style.no_file or style.cannot_read, path=path, error=e,
                    strerror=e.strerror or e) from None
    except OSError as e:
        raise _fail(style.cannot_read, path=path, error=e, strerror=e.strerror or e) from None
    try:
        out = data.decode(encoding)
    except UnicodeDecodeError as e:
        raise _fail(style.not_utf8 or style.cannot_read, path=path, error=e, strerror=e,
                    reason=e.reason) from None
    if not out.strip():
        raise DataError(f"{path}: the file is empty")
    return out


def loads(text: str, where, not_json: str):
    """Parsed JSON text; ``not_json`` words a syntax error at ``where``."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise _fail(not_json, where=where, line=e.lineno, column=e.colno, msg=e.msg) from None
    except RecursionError:  # json's C parser recurses per nesting level
        raise DataError(f"{where}: JSON nested too deeply to be a dataset file") from None


def read_json(path, *, encoding: str = "utf-8", style: Style = PLAIN):
    """A checked dataset file parsed as one JSON document."""
    return loads(read_text(path, encoding=encoding, style=style), path, style.not_json)


def json_lines(text: str) -> list[str]:
    """The lines of a JSON-lines text. Split on newlines only: str.splitlines also breaks at
    U+2028/U+2029/U+0085, which JSON allows unescaped inside strings, and would cut a valid
    line in two (and a lone "\\r" is no line end either)."""
    return [line.removesuffix("\r") for line in text.split("\n")]


def text(value, where: str, *, required: bool = True, collapse: bool = False,
         style: Style = PLAIN) -> str | None:
    """A text field's value, stripped (``collapse``: every run of whitespace one space).

    None is absent: None when not required, ``style.missing`` otherwise. Anything but a
    string is ``style.not_text``; a blank string is ``style.blank``, or absent for an
    optional field under ``style.optional_blank``."""
    if value is None:
        if required:
            raise _fail(style.missing, where=where, type="NoneType", value="None")
        return None
    if not isinstance(value, str):
        raise _fail(style.not_text, where=where, type=type(value).__name__,
                    value=f"{value!r:.60}")
    out = " ".join(value.split()) if collapse else value.strip()
    if not out:
        if not required and style.optional_blank:
            return None
        raise _fail(style.blank, where=where, type="str", value=f"{value!r:.60}")
    return out


def texts(value, where: str, *, collapse: bool = False, style: Style = PLAIN) -> list[str]:
    """A non-empty list of required text fields (each named ``where[i]``)."""
    if not isinstance(value, list) or not value:
        raise DataError(f"{where}: a non-empty list of strings is required")
    return [text(v, f"{where}[{i}]", collapse=collapse, style=style) for i, v in enumerate(value)]
