"""Damaged caches and unusable homes: a miss with a log line, or a clear error."""

from __future__ import annotations

import asyncio
import errno
import logging
import sqlite3

import pytest

from tasks.config import ConfigError
from tasks.gateway import Gateway
from tasks.gateway.cache import CacheError, ResponseCache
from tasks.engine.run import check_home
from tests.support.gateway import msgs, spec_for


def test_corrupted_entry_is_a_logged_miss(tmp_path, llm_server, caplog):
    g = Gateway(tmp_path / "cache", "r")
    s = spec_for(llm_server)
    first = asyncio.run(g.chat(s, "t", msgs("x")))
    g.close()
    # Overwrite the stored value with bytes that do not unpickle.
    db = sqlite3.connect(tmp_path / "cache" / "cache.db")
    db.execute("UPDATE Cache SET value = ?, mode = 4", (b"\x80\x04garbage",))
    db.commit()
    db.close()
    g = Gateway(tmp_path / "cache", "r")
    with caplog.at_level(logging.WARNING, logger="carryon.cache"):
        again = asyncio.run(g.chat(s, "t", msgs("x")))
    assert again.ok and not again.cached and again.content == first.content
    assert llm_server.counts["total"] == 2
    assert any("unreadable" in r.message for r in caplog.records)
    # The fresh answer replaced the damaged entry.
    assert asyncio.run(g.chat(s, "t", msgs("x"))).cached
    g.close()


def test_wrong_shape_entry_is_a_miss(tmp_path):
    c = ResponseCache(tmp_path / "c")
    c._c.set("k", {"not": "an answer"})
    assert c.get("k") is None


def test_damaged_cache_database_is_a_clear_error(tmp_path):
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "cache.db").write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(CacheError, match="cannot open the response cache"):
        ResponseCache(tmp_path / "c")


def test_home_that_cannot_be_created(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    # A regular file where a folder must be (root-proof: root ignores permissions, not this).
    with pytest.raises(ConfigError, match=r"file/home: the home folder is not usable: .*/file is a file, "
                                          r"not a folder"):
        check_home(blocker / "home")
    assert blocker.read_text() == "x"


def test_full_disk_is_a_clear_error(tmp_path, monkeypatch):
    from pathlib import Path

    def full(self, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Path, "write_bytes", full)
    with pytest.raises(ConfigError, match="No space left on device"):
        check_home(tmp_path / "home")
