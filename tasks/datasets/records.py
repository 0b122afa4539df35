"""The built-in records loader: a benchmark's items from a JSON, JSON-lines, CSV or Parquet
file whose fields the spec maps to the item's prompts, hidden data and metadata, so a
benchmark needs no Python of its own to read its data.

    loader:
      name: records
      args:
        file: items.jsonl            # beside the spec: the benchmark's own data (source: sample)
        prompts: {question: question}  # item prompt <- field
        hidden: {intent: intent}       # item.hidden key <- field (what only the user and judges see)
        meta: {topic: topic}           # item.meta key <- field (what the report groups by)
        optional: [intent]             # fields a row may leave out or empty
        id: [question]                 # the fields that identify an item (unset: every mapped one)

A config may read another file of the same shape instead: ``dataset: {source: <a source the
spec lists>, path: ...}``. The format is the file's suffix (``.json``: an array of objects;
``.jsonl``: one object a line; ``.csv``: a header row; ``.parquet``), or ``format:``.

Prompts are non-empty text. Hidden and meta values are kept as the file has them (text,
numbers, lists such as a checklist of questions); a CSV cell is text, and a field listed in
``json:`` is parsed as JSON (a checklist written into a CSV cell). Every problem is one
``DataError`` line naming the file, the row (1-based, counting items, not a header; a JSON
line or CSV record also says its line) and the field, before anything is written.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from tasks.core.items import Item, item_id
from tasks.core.registry import loader
from tasks.datasets.fields import DataError, json_lines, loads, read_json, read_text

FORMATS = ("json", "jsonl", "csv", "parquet")
_SUFFIXES = {".json": "json", ".jsonl": "jsonl", ".ndjson": "jsonl", ".csv": "csv",
             ".parquet": "parquet"}


class RecordsArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # The data file beside the spec: what `dataset.source: sample` reads (unset: a config
    # must give dataset.path).
    file: str | None = None
    format: Literal["json", "jsonl", "csv", "parquet"] | None = None
    prompts: dict[str, str] = Field(min_length=1)
    hidden: dict[str, str] = Field(default_factory=dict)
    meta: dict[str, str] = Field(default_factory=dict)
    optional: list[str] = Field(default_factory=list)
    id: list[str] | None = None
    json_fields: list[str] = Field(default_factory=list, alias="json")

    @model_validator(mode="after")
    def _fields_known(self):
        mapped = set(self.fields())
        for key in ("optional", "id", "json_fields"):
            for f in getattr(self, key) or []:
                if f not in mapped:
                    raise ValueError(f"{'json' if key == 'json_fields' else key}: {f!r} is not "
                                     "a field mapped under prompts, hidden or meta")
        if self.id is not None and not self.id:
            raise ValueError("id: name at least one field (or leave id unset)")
        return self

    def fields(self) -> list[str]:
        """Every field the file must offer, in mapping order."""
        return list(dict.fromkeys([*self.prompts.values(), *self.hidden.values(),
                                   *self.meta.values()]))


def _format(path: Path, given: str | None) -> str:
    if given:
        return given
    fmt = _SUFFIXES.get(path.suffix.lower())
    if fmt is None:
        raise DataError(f"{path}: unknown file type {path.suffix or '(none)'}: give a .json, "
                        ".jsonl, .csv or .parquet file, or the loader's format argument")
    return fmt


def read_rows(path: Path, fmt: str) -> list[tuple[str, dict]]:
    """The file's rows as (where, object): ``where`` is ``<file>: row N`` (1-based, items
    only), with the line for JSON lines and CSV."""
    if fmt == "json":
        doc = read_json(path, encoding="utf-8-sig")
        if not isinstance(doc, list):
            raise DataError(f"{path}: expected a JSON array of objects (one per item), got "
                            f"{type(doc).__name__}")
        rows = [(f"{path}: row {i}", r) for i, r in enumerate(doc, 1)]
    elif fmt == "jsonl":
        rows, n = [], 0
        for line_no, line in enumerate(json_lines(read_text(path, encoding="utf-8-sig")), 1):
            if not line.strip():
                continue
            n += 1
            where = f"{path}: row {n} (line {line_no})"
            rows.append((where, loads(line, where, "{where}: not valid JSON (column {column}): "
                                                    "{msg}")))
    elif fmt == "csv":
        rows = _csv_rows(path)
    else:
        rows = _parquet_rows(path)
    for where, r in rows:
        if not isinstance(r, dict):
            raise DataError(f"{where}: expected an object of fields, got {type(r).__name__}")
    if not rows:
        raise DataError(f"{path}: no rows in the file")
    return rows


def _csv_rows(path: Path) -> list[tuple[str, dict]]:
    reader = csv.DictReader(io.StringIO(read_text(path, encoding="utf-8-sig"), newline=""))
    rows = []
    try:
        for n, r in enumerate(reader, 1):
            if None in r:  # more cells than the header names
                raise DataError(f"{path}: row {n} (line {reader.line_num}): {len(r[None])} "
                                "cell(s) beyond the header's columns")
            # An empty cell is an absent field (CSV cannot tell them apart).
            rows.append((f"{path}: row {n} (line {reader.line_num})",
                         {k: v for k, v in r.items() if v not in (None, "")}))
    except csv.Error as e:
        raise DataError(f"{path}: line {reader.line_num}: not valid CSV: {e}") from None
    return rows


def _parquet_rows(path: Path) -> list[tuple[str, dict]]:
    import pyarrow.parquet as pq  # only for a Parquet file

    if not path.is_file():
        raise DataError(f"{path}: cannot read the file (no such file)")
    try:
        table = pq.read_table(path)
    except Exception as e:  # noqa: BLE001 - any unreadable Parquet file is one line
        raise DataError(f"{path}: cannot read the Parquet file "
                        f"({' '.join(str(e).split())[:200]})") from None
    return [(f"{path}: row {i}", r) for i, r in enumerate(table.to_pylist(), 1)]


def _value(row: dict, field: str, where: str, args: RecordsArgs, prompt: bool):
    """A field's value (None: absent and optional)."""
    value = row.get(field)
    if isinstance(value, str) and field in args.json_fields:
        try:
            value = json.loads(value)
        except json.JSONDecodeError as e:
            raise DataError(f"{where}: field {field!r}: not valid JSON ({e.msg}, column "
                            f"{e.colno})") from None
    blank = value is None or (isinstance(value, str) and not value.strip()) or value == []
    if blank:
        if field in args.optional:
            return None
        raise DataError(f"{where}: field {field!r}: " + ("missing" if field not in row
                                                          else "empty"))
    if prompt and not isinstance(value, str):
        raise DataError(f"{where}: field {field!r}: a prompt is text, got "
                        f"{type(value).__name__} {value!r:.60}")
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise DataError(f"{where}: field {field!r}: contains an invalid character (a lone "
                            "UTF-16 surrogate)") from None
        return value.strip() if prompt else value
    return value


def items_of(rows: list[tuple[str, dict]], args: RecordsArgs) -> list[Item]:
    out, first = [], {}
    for n, (where, row) in enumerate(rows, 1):
        missing = [f for f in args.fields() if f not in row and f not in args.optional]
        if missing:
            have = ", ".join(sorted(row)) or "none"
            raise DataError(f"{where}: field {missing[0]!r}: missing (the row's fields: {have})")
        values = {f: _value(row, f, where, args, f in args.prompts.values())
                  for f in args.fields()}
        prompts = {k: values[f] for k, f in args.prompts.items() if values[f] is not None}
        hidden = {k: values[f] for k, f in args.hidden.items() if values[f] is not None}
        meta = {k: values[f] for k, f in args.meta.items() if values[f] is not None}
        ident = json.dumps([[f, values[f]] for f in (args.id or args.fields())],
                           sort_keys=True, ensure_ascii=False, default=str)
        iid = item_id("records", ident)
        if iid in first:
            raise DataError(f"{where}: the item repeats row {first[iid]} (same "
                            f"{', '.join(args.id or args.fields())})")
        first[iid] = n
        out.append(Item(iid, n, prompts, hidden, meta))
    return out


def sample_of(load: "Records", folder: Path | None) -> Path | None:
    """The spec's own data file (``file``, beside the spec): its ``sample`` source."""
    if load.args.file is None:
        return None
    path = Path(load.args.file).expanduser()
    return path if path.is_absolute() or folder is None else folder / path


@loader("records", args=RecordsArgs, sample=sample_of)
class Records:
    """``load(path)``: the file's rows as items, as the module docstring says."""

    def __init__(self, args: RecordsArgs):
        self.args = args

    def __call__(self, path) -> list[Item]:
        path = Path(path)
        return items_of(read_rows(path, _format(path, self.args.format)), self.args)
