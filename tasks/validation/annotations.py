"""Import the annotators' exported JSON files into ``validation_annotations``.

Every file is validated before anything is written; an error names the file, the annotator
and the field (``labels[3].value``). Re-importing an annotator's file with the same labels
changes nothing (idempotent). A file whose labels differ from those the annotator already
has for the sample (a later export, or a file that claims another annotator's id) is refused
unless ``replace``: then it replaces them, and the summary says how many it replaced."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

from tasks.input_files import InputFileError, read_input_bytes
from tasks.validation import ValidationError
from tasks.validation.page import FORMAT, page_data
from warehouse.schema import ValidationAnnotation


def _expected(wh, sample_id: str, annotator: str) -> dict[tuple, str]:
    """(unit_id, conversation_id, position, item_id) -> unit_id, every question of the page."""
    data = page_data(wh, sample_id, annotator)
    out = {}
    for u in data["units"]:
        for c in u["conversations"]:
            if data["asks"] == "user_turns":
                keys = [(t["position"], 0) for t in c["turns"] if t["role"] == "user"]
            elif data["asks"] == "checklist":
                keys = [(-1, it["item_id"]) for it in c["items"]]
            else:
                keys = [(u["position"], 0)]
            for pos, item in keys:
                out[(u["unit_id"], c["conversation_id"], pos, item)] = u["unit_id"]
    return out


def parse_file(wh, path: Path) -> tuple[str, str, list[dict], int]:
    """(sample_id, annotator, rows, questions on the page) of one exported file."""
    name = str(path)
    try:
        obj = json.loads(read_input_bytes(path, "annotation export").decode("utf-8"))
    except FileNotFoundError:
        raise ValidationError(f"{name}: no such file") from None
    except InputFileError as e:
        raise ValidationError(str(e)) from None
    except (OSError, UnicodeDecodeError) as e:
        raise ValidationError(f"{name}: cannot read: {e}") from None
    except json.JSONDecodeError as e:
        raise ValidationError(f"{name}: not JSON (line {e.lineno}: {e.msg})") from None
    except RecursionError:
        raise ValidationError(f"{name}: nested too deeply for a page's export") from None
    if not isinstance(obj, dict):
        raise ValidationError(f"{name}: expected a JSON object (the page's export)")
    annotator = obj.get("annotator")
    who = f"annotator {annotator!r}" if isinstance(annotator, str) else "annotator ?"

    def fail(field, msg):
        raise ValidationError(f"{name}: {who}: {field}: {msg}")

    if obj.get("format") != FORMAT:
        fail("format", f"{obj.get('format')!r} is not {FORMAT!r}")
    if not isinstance(annotator, str) or not annotator:
        fail("annotator", "missing")
    sample_id = obj.get("sample_id")
    s = wh.query("SELECT kind FROM validation_samples WHERE sample_id = ?", [sample_id]) \
        if isinstance(sample_id, str) else []
    if not s:
        fail("sample_id", f"{sample_id!r} is not a sample in this warehouse")
    kind = s[0]["kind"]
    if obj.get("kind") != kind:
        fail("kind", f"{obj.get('kind')!r} but sample {sample_id} is {kind}")
    if not wh.query("SELECT 1 FROM validation_assignments WHERE sample_id = ? AND annotator = ? LIMIT 1",
                    [sample_id, annotator]):
        fail("annotator", f"not an annotator of sample {sample_id}")
    labels = obj.get("labels")
    if not isinstance(labels, list):
        fail("labels", "expected a list")
    expected = _expected(wh, sample_id, annotator)
    from tasks.validation.report import kind_of

    allowed = {v for v, _ in kind_of(kind).scale}
    rows, seen = [], set()
    for i, lab in enumerate(labels):
        f = f"labels[{i}]"
        if not isinstance(lab, dict):
            fail(f, "expected an object")
        for k in ("unit_id", "conversation_id"):
            if not isinstance(lab.get(k), str):
                fail(f"{f}.{k}", "missing or not a string")
        for k in ("position", "item_id", "value"):
            if type(lab.get(k)) is not int:
                fail(f"{f}.{k}", f"{lab.get(k)!r} is not an integer")
        key = (lab["unit_id"], lab["conversation_id"], lab["position"], lab["item_id"])
        if key not in expected:
            fail(f, f"unit {lab['unit_id']!r} conversation {lab['conversation_id']!r} position "
                    f"{lab['position']} item {lab['item_id']} is not a question of this annotator's page")
        if key in seen:
            fail(f, "labels the same question twice")
        seen.add(key)
        if lab["value"] not in allowed:
            fail(f"{f}.value", f"{lab['value']} is not one of {sorted(allowed)}")
        rows.append({"sample_id": sample_id, "annotator": annotator, "unit_id": key[0],
                     "conversation_id": key[1], "position": key[2], "item_id": key[3],
                     "value": lab["value"], "source_file": name})
    return sample_id, annotator, rows, len(expected)


_LABEL_KEY = ("unit_id", "conversation_id", "position", "item_id", "value")


def _labels(rows) -> set[tuple]:
    return {tuple(r[k] for k in _LABEL_KEY) for r in rows}


def import_files(wh, paths: list, replace: bool = False) -> list[dict]:
    """Validate every file first, then write all in one transaction. Returns one summary
    dict per file {file, sample_id, annotator, labels, questions, replaced}."""
    if not paths:
        raise ValidationError("no files given")
    parsed, who = [], {}
    for p in paths:
        sample_id, annotator, rows, n_q = parse_file(wh, Path(p))
        if (sample_id, annotator) in who:
            raise ValidationError(f"{p}: annotator {annotator!r}: annotator: also in {who[(sample_id, annotator)]} "
                                  "(one file per annotator)")
        who[(sample_id, annotator)] = str(p)
        parsed.append((str(p), sample_id, annotator, rows, n_q))
    replaced = {}
    for f, sample_id, annotator, rows, _ in parsed:
        old = wh.query(f"SELECT {', '.join(_LABEL_KEY)} FROM validation_annotations "
                       "WHERE sample_id = ? AND annotator = ?", [sample_id, annotator])
        if old and _labels(old) != _labels(rows):
            if not replace:
                raise ValidationError(
                    f"{f}: annotator {annotator!r}: already has {len(old)} other labels for "
                    f"sample {sample_id} (a later export, or a file claiming this annotator's "
                    "id); nothing imported: pass --replace to replace them")
            replaced[(sample_id, annotator)] = len(old)
    now = dt.datetime.now(dt.timezone.utc)
    batches = []
    for _, sample_id, annotator, rows, _ in parsed:
        for r in rows:
            r["imported"] = now
        batches.append((ValidationAnnotation, rows, ("sample_id = ? AND annotator = ?", [sample_id, annotator])))
    wh.write_many(batches)
    return [{"file": f, "sample_id": s, "annotator": a, "labels": len(rows), "questions": n,
             "replaced": replaced.get((s, a), 0)} for f, s, a, rows, n in parsed]
