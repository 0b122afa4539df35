"""tasks/datasets/fields.py: the shared reading of a dataset file and its text fields. The
loaders' own wordings are pinned by their tests; these pin the shared rules."""

from __future__ import annotations

import json

import pytest

from tasks.benchmarks.clarify import loader as pacific
from tasks.datasets.fields import (DataError, Style, json_lines, loads, read_json, read_text,
                                   text, texts)
from tasks.benchmarks.eyt.personas import _nemotron_rows


def test_text_reads_absent_blank_and_wrong_types_by_the_style():
    assert text("  a \n b ", "w") == "a \n b"
    assert text("  a \n b ", "w", collapse=True) == "a b"
    assert text(None, "w", required=False) is None
    for bad in (None, "", "  ", 3, ["a"]):
        with pytest.raises(DataError, match=r"^w: a non-empty string is required$"):
            text(bad, "w")
    with pytest.raises(DataError, match="non-empty"):  # optional: null yes, blank no
        text(" ", "w", required=False)
    lenient = Style(missing="{where}: gone", not_text="{where}: got {type} {value}",
                    blank="{where}: empty", optional_blank=True)
    assert text(" ", "w", required=False, style=lenient) is None
    with pytest.raises(DataError, match=r"^w: got int 3$"):
        text(3, "w", style=lenient)
    with pytest.raises(DataError, match=r"^w: gone$"):
        text(None, "w", style=lenient)
    with pytest.raises(DataError, match=r"^w: empty$"):
        text(" ", "w", style=lenient)


def test_texts_names_the_element():
    assert texts([" a  b", "c"], "w", collapse=True) == ["a b", "c"]
    with pytest.raises(DataError, match=r"^w\[1\]: a non-empty string is required$"):
        texts(["a", ""], "w")
    for bad in ([], None, "a"):
        with pytest.raises(DataError, match="a non-empty list of strings"):
            texts(bad, "w")


def test_files_are_one_line_errors_in_the_style(tmp_path):
    words = Style(cannot_read="{path}: cannot ({strerror})", not_utf8="{path}: bytes {reason}",
                  not_json="{where}: bad at {line}:{column}", no_file="{path}: absent")
    with pytest.raises(DataError, match="nope.json: absent$"):
        read_json(tmp_path / "nope.json", style=words)
    with pytest.raises(DataError, match="is a folder"):  # the input-file check (read_dataset)
        read_json(tmp_path, style=words)
    (tmp_path / "latin.json").write_bytes(b'["caf\xe9"]')
    with pytest.raises(DataError, match="latin.json: bytes invalid continuation byte$"):
        read_json(tmp_path / "latin.json", style=words)
    with pytest.raises(DataError, match="latin.json: cannot read the file"):  # the default
        read_json(tmp_path / "latin.json")
    (tmp_path / "bad.json").write_text("[1,,]")
    with pytest.raises(DataError, match="bad.json: bad at 1:4$"):
        read_json(tmp_path / "bad.json", style=words)
    (tmp_path / "bom.json").write_bytes(b"\xef\xbb\xbf[1]")
    assert read_json(tmp_path / "bom.json", encoding="utf-8-sig") == [1]
    assert read_text(tmp_path / "bom.json", encoding="utf-8-sig") == "[1]"


def test_deep_json_is_one_line_in_every_loader(tmp_path):
    with pytest.raises(DataError, match="w: JSON nested too deeply"):
        loads("[" * 100_000 + "]" * 100_000, "w", "{where}: bad")
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(DataError, match="deep.json: JSON nested too deeply"):
        pacific.load(deep)


def test_json_lines_split_on_newlines_only(tmp_path):
    assert json_lines('{"a": 1}\r\n{"b": "x\u2028y"}\n') == ['{"a": 1}', '{"b": "x\u2028y"}', ""]
    p = tmp_path / "people.jsonl"
    row = {"uuid": "u1", "persona": "reads\u2028maps"}
    p.write_text(json.dumps(row, ensure_ascii=False) + "\n", encoding="utf-8")
    assert _nemotron_rows(p) == [row]
