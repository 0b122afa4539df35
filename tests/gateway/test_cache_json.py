"""The response cache stores JSON, never pickles: a pickled entry is refused, never unpickled;
a folder written by an earlier version is refused on open with the conversion to run, and
``carryon cache convert`` rewrites it so its answers are read again (0 requests)."""

from __future__ import annotations

import os
import pickle

import diskcache
import pytest
from typer.testing import CliRunner

from flows.cli import app
from tasks.gateway.cache import (
    FORMAT_FILE, CacheError, JsonOnlyDisk, PickledEntry, ResponseCache, convert_legacy,
)

ANSWER = {"content": "hello", "prompt_tokens": 3, "completion_tokens": 1, "cost_usd": 0.0,
          "role": "targets", "model": "m"}


class Boom:
    """Unpickling this runs code: the cache must never do it."""

    def __reduce__(self):
        return (os.system, ("touch " + os.environ["CARRYON_PWNED"],))


def _legacy(directory, entries):
    """A folder as the earlier version wrote it: diskcache's default (pickling) Disk."""
    c = diskcache.Cache(str(directory), eviction_policy="none", size_limit=2**62, tag_index=True)
    for key, value, tag in entries:
        c.set(key, value, tag=tag)
    c.close()


def test_values_are_stored_as_json_text(tmp_path):
    c = ResponseCache(tmp_path / "cache")
    c.set("k", ANSWER, "targets")
    c.remember_failure("k2", {"error_kind": "junk", "error": "x"}, "judge")
    assert c.get("k") == ANSWER and c.get_failure("k2")["error_kind"] == "junk"
    modes = c._c._sql("SELECT mode, raw FROM Cache").fetchall()
    assert modes and all(m != diskcache.core.MODE_PICKLE and raw for m, raw in modes)
    assert (tmp_path / "cache" / FORMAT_FILE).exists()


def test_a_pickle_slipped_into_a_converted_folder_is_not_unpickled(tmp_path, monkeypatch):
    flag = tmp_path / "pwned"
    monkeypatch.setenv("CARRYON_PWNED", str(flag))
    c = ResponseCache(tmp_path / "cache")
    c.set("good", ANSWER, "targets")
    c.close()
    _legacy(tmp_path / "cache", [("evil", Boom(), "targets")])  # written behind our back
    c = ResponseCache(tmp_path / "cache")  # marked JSON already: opens
    assert c.get("evil") is None and c.get("good") == ANSWER
    assert list(dict(c.entries())) == ["good"]
    assert not flag.exists()
    with pytest.raises(PickledEntry):
        diskcache.Cache(str(tmp_path / "cache"), disk=JsonOnlyDisk).get("evil")


def test_an_old_folder_is_refused_with_the_conversion_to_run(tmp_path, monkeypatch):
    flag = tmp_path / "pwned"
    monkeypatch.setenv("CARRYON_PWNED", str(flag))
    _legacy(tmp_path / "cache", [("k", ANSWER, "targets")])
    with pytest.raises(CacheError, match="carryon cache convert"):
        ResponseCache(tmp_path / "cache")
    assert not flag.exists()


def test_convert_keeps_answers_and_tags_and_drops_what_is_not_data(tmp_path, monkeypatch):
    flag = tmp_path / "pwned"
    monkeypatch.setenv("CARRYON_PWNED", str(flag))
    d = tmp_path / "cache"
    _legacy(d, [("k", ANSWER, "targets"), ("failed:j", {"error_kind": "junk", "error": "e"},
                                           "failed:judge"),
                (("tuple", "key"), ANSWER, "targets"), ("odd", {1, 2}, "targets")])
    # The user vouches for the folder: converting unpickles (a trusted folder has no Boom).
    assert convert_legacy(d) == 2
    c = ResponseCache(d)
    assert c.get("k") == ANSWER and c.get_failure("j")["error"] == "e"
    assert c.get("odd") is None and dict(c.stats()["by_role_model"]) == {("targets", "m"): 1}
    tags = dict(c._c._sql("SELECT key, tag FROM Cache").fetchall())
    assert tags == {"k": "targets", "failed:j": "failed:judge"}
    c.close()
    assert convert_legacy(d) == 0  # idempotent


def test_cli_convert(tmp_path, monkeypatch):
    d = tmp_path / "home" / "cache"
    _legacy(d, [("k", ANSWER, "targets")])
    monkeypatch.setenv("CARRYON_CACHE_DIR", str(d))
    runner = CliRunner()
    r = runner.invoke(app, ["cache", "stats"])
    assert r.exit_code == 2 and "carryon cache convert" in r.output
    r = runner.invoke(app, ["cache", "convert"])
    assert r.exit_code == 0 and "1 entries converted" in r.output, r.output
    r = runner.invoke(app, ["cache", "stats"])
    assert r.exit_code == 0 and "total entries: 1" in r.output
    r = runner.invoke(app, ["cache", "convert"])
    assert "nothing to convert" in r.output
