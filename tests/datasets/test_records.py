"""The built-in records loader (tasks/datasets/records.py): one mapping of fields, four file
formats, the same items; every problem one line naming the file, the row and the field."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tasks.core import registry
from tasks.datasets.fields import DataError

ROWS = [
    {"question": "How do lock picks work?", "intent": "I teach a locksmithing class.",
     "topic": "locks"},
    {"question": "What household chemicals must never be mixed?", "intent": "I clean houses.",
     "topic": "chemistry"},
]
ARGS = {"prompts": {"question": "question"}, "hidden": {"intent": "intent"},
        "meta": {"topic": "topic"}}


def write(path, rows, fmt):
    if fmt == "json":
        path.write_text(json.dumps(rows))
    elif fmt == "jsonl":
        path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    elif fmt == "csv":
        cols = list(dict.fromkeys(k for r in rows for k in r))
        lines = [",".join(cols)] + [",".join(json.dumps(str(r.get(c, "")))
                                             if r.get(c) is not None else "" for c in cols)
                                    for r in rows]
        path.write_text("\n".join(lines) + "\n")
    else:
        pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def load(path, **args):
    return registry.build("loader", "records", {**ARGS, **args})(path)


@pytest.mark.parametrize("fmt", ["json", "jsonl", "csv", "parquet"])
def test_four_formats_give_the_same_items(tmp_path, fmt):
    items = load(write(tmp_path / f"items.{fmt}", ROWS, fmt))
    assert [(i.source_row, i.prompts, i.hidden, i.meta) for i in items] == [
        (1, {"question": "How do lock picks work?"}, {"intent": "I teach a locksmithing class."},
         {"topic": "locks"}),
        (2, {"question": "What household chemicals must never be mixed?"},
         {"intent": "I clean houses."}, {"topic": "chemistry"})]
    # The id hashes the mapped fields (the file's format and row order do not matter).
    again = load(write(tmp_path / "again.json", ROWS[::-1], "json"))
    assert {i.item_id for i in items} == {i.item_id for i in again}
    assert len({i.item_id for i in items}) == 2


def test_id_fields_and_lists_kept_as_written(tmp_path):
    rows = [{"q": "Q1", "checklist": ["Does it say A?", "Does it say B?"], "n": 3}]
    items = load(write(tmp_path / "c.jsonl", rows, "jsonl"), prompts={"question": "q"},
                 hidden={"checklist": "checklist"}, meta={"n": "n"}, id=["q"])
    assert items[0].hidden == {"checklist": ["Does it say A?", "Does it say B?"]}
    assert items[0].meta == {"n": 3}
    edited = load(write(tmp_path / "d.jsonl", [{**rows[0], "n": 4}], "jsonl"),
                  prompts={"question": "q"}, hidden={"checklist": "checklist"}, meta={"n": "n"},
                  id=["q"])
    assert edited[0].item_id == items[0].item_id  # identified by its question alone


def test_a_csv_cell_of_json(tmp_path):
    path = tmp_path / "c.csv"
    path.write_text('question,checklist\n"Q1","[""Does it say A?"", ""Does it say B?""]"\n')
    items = load(path, prompts={"question": "question"}, hidden={"checklist": "checklist"},
                 meta={}, json=["checklist"])
    assert items[0].hidden["checklist"] == ["Does it say A?", "Does it say B?"]


def test_optional_fields_may_be_absent(tmp_path):
    rows = [ROWS[0], {"question": "Q2", "topic": "t"}]
    items = load(write(tmp_path / "o.jsonl", rows, "jsonl"), optional=["intent"])
    assert items[1].hidden == {} and items[1].prompts == {"question": "Q2"}


@pytest.mark.parametrize("name, content, args, line", [
    ("a.jsonl", '{"question": "Q", "intent": "I", "topic": "t"}\n\n{"question": "Q2", "topic": "t"}\n',
     {}, "a.jsonl: row 2 (line 3): field 'intent': missing (the row's fields: question, topic)"),
    ("a.jsonl", '{"question": "Q", "intent": "I", "topic": "t"}\n{"question": ""}\n',
     {"optional": ["intent", "topic"]}, "a.jsonl: row 2 (line 2): field 'question': empty"),
    ("a.jsonl", '{"question": "Q", "intent": "I", "topic": "t"}\n{"question": 5, "intent": "I"}\n',
     {"optional": ["topic"]},
     "a.jsonl: row 2 (line 2): field 'question': a prompt is text, got int 5"),
    ("a.jsonl", '{"question": "Q", "intent": "I", "topic": "t"}\n{oops\n', {},
     "a.jsonl: row 2 (line 2): not valid JSON (column 2): Expecting property name enclosed in "
     "double quotes"),
    ("a.jsonl", '["Q"]\n', {}, "a.jsonl: row 1 (line 1): expected an object of fields, got list"),
    ("a.json", '{"question": "Q"}', {},
     "a.json: expected a JSON array of objects (one per item), got dict"),
    ("a.json", json.dumps([ROWS[0], ROWS[0]]), {},
     "a.json: row 2: the item repeats row 1 (same question, intent, topic)"),
    ("a.csv", "question,intent,topic\nQ,I,t\nQ2,,t\n", {},
     "a.csv: row 2 (line 3): field 'intent': missing (the row's fields: question, topic)"),
    ("a.csv", "question,intent,topic\nQ,I,t,extra\n", {},
     "a.csv: row 1 (line 2): 1 cell(s) beyond the header's columns"),
    ("a.txt", "question\n", {}, "a.txt: unknown file type .txt: give a .json, .jsonl, .csv or "
     ".parquet file, or the loader's format argument"),
    ("a.jsonl", "  \n", {}, "a.jsonl: the file is empty"),
])
def test_bad_rows_are_one_line_naming_file_row_and_field(tmp_path, name, content, args, line):
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(DataError) as e:
        load(path, **args)
    assert str(e.value) == f"{tmp_path}/{line}"


def test_a_missing_or_unreadable_file(tmp_path):
    with pytest.raises(DataError, match=r"no\.jsonl: cannot read the file"):
        load(tmp_path / "no.jsonl")
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"not parquet")
    with pytest.raises(DataError, match=r"bad\.parquet: cannot read the Parquet file"):
        load(bad)


@pytest.mark.parametrize("args, message", [
    ({"prompts": {}}, "args.prompts: Dictionary should have at least 1 item after validation, "
     "not 0"),
    ({**ARGS, "optional": ["intnet"]}, "args: optional: 'intnet' is not a field "
     "mapped under prompts, hidden or meta"),
    ({**ARGS, "id": ["nope"]}, "args: id: 'nope' is not a field mapped under "
     "prompts, hidden or meta"),
    ({**ARGS, "fields": {}}, "args.fields: Extra inputs are not permitted"),
])
def test_arguments_are_one_line(args, message):
    # What the spec loader puts after "<spec>: loader: " (tests/config/test_bad_input.py).
    with pytest.raises(registry.ComponentError) as e:
        registry.lookup("loader", "records").check_args(args)
    assert str(e.value) == message


SPEC = """name: my_records
title: My records
loader:
  name: records
  args: {file: data/items.jsonl, prompts: {question: question}, hidden: {intent: intent},
         meta: {topic: topic}}
conditions: [{name: plain, prompt: question}]
"""


def test_a_spec_reads_its_file_beside_it_with_no_python(tmp_path):
    # `dataset.source: sample` reads the loader's file, relative to the spec's folder.
    from typer.testing import CliRunner

    from flows.cli import app

    bench = tmp_path / "bench"
    (bench / "data").mkdir(parents=True)
    (bench / "spec.yaml").write_text(SPEC)
    write(bench / "data" / "items.jsonl", ROWS, "jsonl")
    config = tmp_path / "config.yaml"
    config.write_text(f"benchmark: {bench / 'spec.yaml'}\nhome: {tmp_path / 'home'}\n")
    out = CliRunner().invoke(app, ["data", "--config", str(config), "--json"])
    assert out.exit_code == 0, out.output
    assert [json.loads(line)["prompts"]["question"] for line in out.output.splitlines()] == [
        r["question"] for r in ROWS]
    # A bad row is the one line, exit 2, naming the file beside the spec.
    (bench / "data" / "items.jsonl").write_text(json.dumps(ROWS[0]) + '\n{"question": "Q"}\n')
    out = CliRunner().invoke(app, ["data", "--config", str(config)])
    assert out.exit_code == 2
    assert out.output.strip().splitlines() == [
        f"error: {bench}/data/items.jsonl: row 2 (line 2): field 'intent': missing (the row's "
        "fields: question)"]
