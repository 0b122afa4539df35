"""The content-hash response cache (diskcache, one SQLite-backed folder).

Each entry is ``{"content", "prompt_tokens", "completion_tokens", "cost_usd", "role", "model"}``
tagged with the role, so ``carryon cache`` can count and drop by role or model. Only valid,
non-empty answers are ever stored as answers (the gateway decides). A corrupt entry reads as
a miss.

Beside the answers, under keys of their own (``failed:<key>``), the cache remembers the
deterministic failures of deterministic calls (tasks/gateway/client.py): the same request
to the same model at temperature 0 gives the same junk again, so a rerun need not pay for
it. A remembered failure is never an answer: ``get`` never returns it, and it carries only
the failure's kind and message.

Values are stored as JSON text, never as pickles (``JsonOnlyDisk``): a cache folder can be
shared, copied or downloaded, and unpickling a value runs whatever code it names. Reading a
pickled entry raises instead of unpickling it. A folder written by an earlier version (its
answers pickled) is refused when opened, with the one-time conversion to run:
``carryon cache convert`` (``convert_legacy``), which the user runs on a folder they trust.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import sqlite3
from collections import Counter
from pathlib import Path

import diskcache

log = logging.getLogger("carryon.cache")


class CacheError(Exception):
    pass


# A token that changes whenever entries are deleted (and with a new folder): a stage skipped
# because its inputs are unchanged (tasks/engine/stage_memo.py) relies on its answers still being
# here, so its fingerprint holds this token.
GENERATION_FILE = "carryon-generation"
# The key prefix of remembered failures.
FAILED = "failed:"


# A file beside the generation token saying the folder holds JSON values only (written when a
# new or converted folder is opened): its absence makes the open look for pickled rows.
FORMAT_FILE = "carryon-format"
FORMAT = "json-1"
CONVERT_HINT = "carryon cache convert"


class PickledEntry(CacheError):
    """A value stored as a pickle: refused, never unpickled."""


class JsonOnlyDisk(diskcache.Disk):
    """diskcache's Disk with values as JSON text and keys as plain strings (stored exactly as
    the default Disk stores a str key, so keys of a converted folder are unchanged)."""

    def put(self, key):
        if type(key) is not str:
            raise TypeError(f"cache keys are strings, not {type(key).__name__}")
        return super().put(key)

    def get(self, key, raw):
        if not raw:
            raise PickledEntry("a pickled key")
        return super().get(key, raw)

    def store(self, value, read, key=diskcache.core.UNKNOWN):
        if read:
            raise TypeError("the response cache stores JSON values, not files")
        return super().store(json.dumps(value, ensure_ascii=False), False, key=key)

    def fetch(self, mode, filename, value, read):
        if mode == diskcache.core.MODE_PICKLE:
            raise PickledEntry("a pickled value")
        data = super().fetch(mode, filename, value, False)
        return json.loads(data.decode("utf-8") if isinstance(data, bytes) else data)


def _pickled_rows(directory: Path, limit: int | None = None) -> list[tuple]:
    """(key, raw) of the rows whose key or value is pickled, read with sqlite directly:
    nothing is unpickled to find them."""
    db = Path(directory) / "cache.db"
    if not db.exists():
        return []
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return con.execute("SELECT key, raw FROM Cache WHERE mode = ? OR raw = 0"
                           + (f" LIMIT {int(limit)}" if limit else ""),
                           (diskcache.core.MODE_PICKLE,)).fetchall()
    except sqlite3.OperationalError:  # no Cache table yet: an empty folder
        return []
    finally:
        con.close()


def _has_pickles(directory: Path) -> bool:
    return bool(_pickled_rows(directory, limit=1))


def _mark_json(directory: Path) -> None:
    path = Path(directory) / FORMAT_FILE
    if not path.exists():
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(FORMAT, encoding="utf-8")
        os.replace(tmp, path)


def convert_legacy(directory: Path) -> int:
    """Rewrite every pickled entry of a folder the user trusts as JSON (tags kept); returns
    how many entries were rewritten. Entries that are not plain JSON data are dropped and
    counted in the log. Idempotent: a converted folder has nothing left to rewrite."""
    directory = Path(directory)
    legacy = diskcache.Cache(str(directory), eviction_policy="none", size_limit=2**62,
                             tag_index=True)  # the default, pickling Disk: the user vouches
    safe = diskcache.Cache(str(directory), disk=JsonOnlyDisk, eviction_policy="none",
                           size_limit=2**62, tag_index=True)
    n = dropped = 0
    try:
        for key, raw in _pickled_rows(directory):
            try:
                if not raw:  # a pickled key: never one of ours (ours are strings)
                    raise TypeError("a key that is not a string")
                value, tag = legacy.get(key, default=None, tag=True, retry=True)
                json.dumps(value)
            except Exception:  # noqa: BLE001  (not plain data, or unreadable: dropped)
                # By its row: a pickled key cannot be named without unpickling it.
                legacy._sql("DELETE FROM Cache WHERE key = ? AND raw = ?", (key, raw))
                dropped += 1
                continue
            safe.set(key, value, tag=tag, retry=True)
            n += 1
    finally:
        legacy.close()
        safe.close()
    if dropped:  # answers are gone: no stage may be skipped on the strength of them
        log.warning("%s: %d entries were not JSON data and were dropped", directory, dropped)
        _new_generation(directory / GENERATION_FILE)
    if not _has_pickles(directory):
        _mark_json(directory)
    return n


def generation(directory: Path) -> str:
    """The cache folder's generation token, created with a new folder (read without opening
    the cache: a run whose stages are all skipped never opens it)."""
    path = Path(directory) / GENERATION_FILE
    try:
        return path.read_text(encoding="utf-8").strip() or _new_generation(path)
    except FileNotFoundError:
        return _new_generation(path)


def _new_generation(path: Path) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    token = secrets.token_hex(8)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(token, encoding="utf-8")
    os.replace(tmp, path)  # whole or not at all
    return token


class ResponseCache:
    def __init__(self, directory: Path):
        self.directory = Path(directory)
        try:
            directory.mkdir(parents=True, exist_ok=True)
            if not (directory / FORMAT_FILE).exists():
                if _has_pickles(directory):
                    raise CacheError(
                        f"{directory}: this response cache was written by an earlier version "
                        f"(its answers are pickles, which are never read); if you trust this "
                        f"folder, convert it once with `{CONVERT_HINT}` (with the same --config)")
            # eviction_policy none: a benchmark cache must never drop answers on its own.
            # SQLite's memory bounded, whatever the cache's size: no memory map of cache.db
            # (diskcache maps up to 64 MB of it, and every mapped page read stays in the
            # process's resident memory, growing with the answers a run has written: ~40 MB
            # more at four targets than at one) and a page cache of 2,048 pages (8 MB; 32 MB
            # by default). Reads then go through the OS's page cache: a cached rerun's
            # lookups measured no slower (perf/README.md).
            self._c = diskcache.Cache(str(directory), disk=JsonOnlyDisk, eviction_policy="none",
                                      size_limit=2**62, tag_index=True, sqlite_mmap_size=0,
                                      sqlite_cache_size=2**11)
            _mark_json(directory)
        except CacheError:
            raise
        except (OSError, diskcache.core.Timeout) as e:
            raise CacheError(f"{directory}: cannot open the response cache: {e}") from None
        except Exception as e:  # sqlite3 errors from a damaged cache.db
            raise CacheError(f"{directory}: cannot open the response cache ({type(e).__name__}: {e}); "
                             "move the folder away or run `carryon cache clear`") from None

    def get(self, key: str) -> dict | None:
        try:
            value = self._c.get(key, default=None, retry=True)
        except Exception as e:  # a pickle (refused), a truncated file: a miss, not a crash
            log.warning("cache entry %s unreadable (%s); treating it as a miss", key[:12], e)
            return None
        if value is not None and not (isinstance(value, dict) and isinstance(value.get("content"), str)):
            log.warning("cache entry %s malformed; treating it as a miss", key[:12])
            return None
        return value

    def set(self, key: str, value: dict, role: str) -> None:
        self._c.set(key, value, tag=role, retry=True)

    # ----- remembered failures --------------------------------------------------------------
    def get_failure(self, key: str) -> dict | None:
        """The remembered failure of ``key`` ({"error_kind", "error", ...}), or None."""
        try:
            value = self._c.get(FAILED + key, default=None, retry=True)
        except Exception:  # unreadable: not remembered, the call is sent
            return None
        ok = isinstance(value, dict) and isinstance(value.get("error_kind"), str)
        return value if ok else None

    def remember_failure(self, key: str, value: dict, role: str) -> None:
        self._c.set(FAILED + key, value, tag=FAILED + role, retry=True)

    def forget_failure(self, key: str) -> None:
        self._c.delete(FAILED + key, retry=True)

    def entries(self):
        """(key, value) of every readable answer (remembered failures are not answers)."""
        for key in self._c.iterkeys():
            if isinstance(key, str) and key.startswith(FAILED):
                continue
            value = self.get(key)
            if value is not None:
                yield key, value

    def stats(self) -> dict:
        by = Counter()
        for _, v in self.entries():
            by[(v.get("role"), v.get("model"))] += 1
        return {"entries": sum(by.values()), "volume_bytes": self._c.volume(), "by_role_model": by}

    def delete_where(self, role: str | None = None, model: str | None = None,
                     keep: set[str] | None = None) -> int:
        """Delete entries matching role/model (both optional); ``keep`` spares those keys."""
        doomed = [k for k, v in self.entries()
                  if (role is None or v.get("role") == role)
                  and (model is None or v.get("model") == model)
                  and (keep is None or k not in keep)]
        for k in doomed:
            self._c.delete(k, retry=True)
        if doomed:  # answers are gone: no stage may be skipped on the strength of them
            _new_generation(self.directory / GENERATION_FILE)
        return len(doomed)

    def close(self) -> None:
        self._c.close()
