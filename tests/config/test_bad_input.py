"""No traceback on any input: config and dataset bytes of every kind end in exit code 2 and
one line naming the file and the field (issue: real inputs, item 5)."""

from __future__ import annotations

import json

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from flows.cli import app
from tests.fixtures.published_shapes import published_shape_rows

SETTINGS = settings(max_examples=120, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])
VALID = {"home": "HOME", "dataset": {"source": "sample", "limit": 2}}


def _invoke(*args) -> tuple[int, str]:
    res = CliRunner().invoke(app, list(args))
    return res.exit_code, res.output


def _assert_one_line_error(code: int, out: str, *expect: str) -> None:
    assert code == 2, out
    lines = [ln for ln in out.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), out
    assert "Traceback" not in out
    for text in expect:
        assert text in lines[0], lines[0]


def _config(tmp_path, raw: bytes | str) -> str:
    p = tmp_path / "c.yaml"
    p.write_bytes(raw.encode() if isinstance(raw, str) else raw)
    return str(p)


# ----- named cases --------------------------------------------------------------------------
@pytest.mark.parametrize("raw,expect", [
    ("home: é\n".encode("latin-1"), ["not UTF-8 text"]),
    ("home: x\n".encode("utf-16"), ["not UTF-8 text"]),
    ("a: " + "[" * 5000 + "]" * 5000 + "\n", ["nested too deeply"]),
    ("seed: " + "9" * 400 + "\n", ["seed", "less than or equal to 9223372036854775807"]),
    ("seed: -1\n", ["seed"]),
    ("dataset: {limit: true}\n", ["dataset.limit", "valid integer", "got True"]),
    ("models: {defaults: {timeout_s: .inf}}\n", ["models.defaults.timeout_s", "finite"]),
    ("models: {defaults: {timeout_s: 0}}\n", ["models.defaults.timeout_s", "greater than 0"]),
    ("flows: {lengths: []}\n", ["flows.lengths", "at least 1"]),
    ("flows: {lengths: [4, true]}\n", ["flows.lengths.1"]),
    ("dataset: {exclude_categories: [child crimes]}\n", ["exclude_categories", "child crimes"]),
])
def test_bad_config_is_one_line(tmp_path, raw, expect):
    path = _config(tmp_path, raw)
    _assert_one_line_error(*_invoke("data", "--config", path), path, *expect)


def test_a_utf8_bom_is_fine(tmp_path):
    path = _config(tmp_path, b"\xef\xbb\xbf" + yaml.safe_dump(VALID).replace("HOME", str(tmp_path)).encode())
    code, out = _invoke("data", "--config", path)
    assert code == 0, out


def test_deep_dataset_json_is_one_line(tmp_path):
    data = tmp_path / "deep.json"
    data.write_text("[" * 100_000 + "]" * 100_000)
    path = _config(tmp_path, yaml.safe_dump({"home": str(tmp_path / "h"),
                                             "dataset": {"source": "casebench", "path": str(data)}}))
    _assert_one_line_error(*_invoke("data", "--config", path), str(data), "nested too deeply")


@pytest.mark.parametrize("where", ["file", "under_file", "proc"])
@pytest.mark.parametrize("field", ["home", "cache_dir"])
def test_unusable_home_or_cache_fails_before_prefect_starts(tmp_path, where, field, monkeypatch):
    f = tmp_path / "a-file"
    f.write_text("x")
    target = {"file": f, "under_file": f / "sub", "proc": "/proc/carryon-home"}[where]
    cfg = {"home": str(tmp_path / "home"), "dataset": {"source": "sample", "limit": 1}, field: str(target)}
    path = _config(tmp_path, yaml.safe_dump(cfg))
    # If the run got as far as starting Prefect's temporary server, the test would notice:
    import tasks.ops.ephemeral as eph

    monkeypatch.setattr(eph, "start_temporary_server",
                        lambda *a, **k: pytest.fail("Prefect started before the home check"))
    code, out = _invoke("run", "--config", path, "--stages", "report")
    _assert_one_line_error(code, out, field, str(target))


# ----- fuzz: config bytes and dataset bytes ------------------------------------------------------
def _mutations(base: bytes):
    return st.one_of(
        st.binary(max_size=300),
        st.builds(lambda i, b: base[:i] + b + base[i + 1:],
                  st.integers(0, max(0, len(base) - 1)), st.binary(min_size=0, max_size=3)),
        st.builds(lambda i: base[:i], st.integers(0, len(base))),
        st.builds(lambda n, c: c.encode() * n + base, st.integers(1, 3000), st.sampled_from(["[", "{", "- ", "a: "])),
        st.builds(lambda enc: base.decode().encode(enc), st.sampled_from(["utf-16", "utf-32", "latin-1", "cp1252"])),
    )


_CONFIG = yaml.safe_dump({"home": "HOME", "seed": 3, "dataset": {"source": "sample", "limit": 2},
                          "flows": {"lengths": [4, 6], "bc_per_length": 2, "nc_per_length": 1},
                          "models": {"defaults": {"temperature": 0.0, "timeout_s": 5}}}).encode()


@SETTINGS
@given(raw=_mutations(_CONFIG))
@pytest.mark.slow  # one of the fast suite's slowest (kept under 5 min on 2 cores)
def test_fuzz_config_bytes_exit_0_or_one_line_2(tmp_path, raw):
    raw = raw.replace(b"HOME", str(tmp_path / "home").encode())
    code, out = _invoke("data", "--config", _config(tmp_path, raw))
    if code != 0:
        _assert_one_line_error(code, out)


_DATASET = json.dumps(published_shape_rows()[:6]).encode()


@SETTINGS
@given(raw=_mutations(_DATASET))
@pytest.mark.slow  # one of the fast suite's slowest (kept under 5 min on 2 cores)
def test_fuzz_dataset_bytes_exit_0_or_one_line_2(tmp_path, raw):
    data = tmp_path / "cb.json"
    data.write_bytes(raw)
    path = _config(tmp_path, yaml.safe_dump({"home": str(tmp_path / "home"),
                                             "dataset": {"source": "casebench", "path": str(data)}}))
    code, out = _invoke("data", "--config", path)
    if code != 0:
        _assert_one_line_error(code, out, str(data))
