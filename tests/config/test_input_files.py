"""Files that are not regular files, or far too large, are refused in one line naming the
path before anything reads them: no hang on a FIFO, no memory filled from /dev/zero."""

from __future__ import annotations

import json
import os

import pytest

from tasks.config import ConfigError, load_config
from tasks.benchmarks.carryon.queries import DataError, load_casebench, load_sorrybench
from tasks.benchmarks.clarify import loader as pacific
from tasks.input_files import InputFileError, check_input_file


@pytest.fixture
def fifo(tmp_path):
    path = tmp_path / "pipe"
    os.mkfifo(path)
    return path


def test_a_config_that_is_not_a_regular_file(tmp_path, fifo):
    for path, kind in ((fifo, "a FIFO"), ("/dev/zero", "a device"), (tmp_path, "a folder")):
        with pytest.raises(ConfigError) as e:
            load_config(path)
        line = str(e.value)
        assert line.startswith(f"{path}: is {kind}") and "not a regular file" in line
        assert line.endswith("give the path of a config file") and "\n" not in line
    big = tmp_path / "big.yaml"
    big.write_text("# " + "x" * 1_000_001)
    with pytest.raises(ConfigError, match=r"big.yaml: 1000003 bytes is larger than a config may be"):
        load_config(big)


@pytest.mark.parametrize("loader", [load_casebench, load_sorrybench, pacific.load])
def test_dataset_paths_that_are_not_regular_files(loader, fifo):
    for path in (fifo, "/dev/zero"):
        with pytest.raises(DataError) as e:
            loader(path)
        assert str(e.value).startswith(f"{path}: is a ") and "\n" not in str(e.value)


def test_the_size_limit_is_configurable(tmp_path, monkeypatch):
    path = tmp_path / "data.json"
    path.write_text(json.dumps([{"x": "y" * 1_500_000}]))
    monkeypatch.setenv("CARRYON_MAX_INPUT_MB", "1")
    with pytest.raises(DataError, match=r"data.json: 1500\d+ bytes is larger than a dataset may "
                                        r"be \(1000000 bytes; CARRYON_MAX_INPUT_MB sets the limit\)"):
        load_casebench(path)
    monkeypatch.setenv("CARRYON_MAX_INPUT_MB", "lots")
    with pytest.raises(InputFileError, match="a whole number of megabytes"):
        check_input_file(path, "dataset")
    monkeypatch.setenv("CARRYON_MAX_INPUT_MB", "2")
    assert check_input_file(path, "dataset") == path


def test_annotation_imports_refuse_fifos_and_deep_nesting(tmp_path, fifo):
    from tasks.validation import ValidationError
    from tasks.validation.annotations import parse_file

    with pytest.raises(ValidationError, match="is a FIFO"):
        parse_file(None, fifo)
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ValidationError, match="deep.json: nested too deeply"):
        parse_file(None, deep)
