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
"""

from __future__ import annotations

import logging
import os
import secrets
from collections import Counter
from pathlib import Path

import diskcache

log = logging.getLogger("carryon.cache")


class CacheError(Exception):
    pass


# A token that changes whenever entries are deleted (and with a new folder): a stage skipped
# because its inputs are unchanged (tasks/stage_memo.py) relies on its answers still being
# here, so its fingerprint holds this token.
GENERATION_FILE = "carryon-generation"
# The key prefix of remembered failures.
FAILED = "failed:"


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
            # eviction_policy none: a benchmark cache must never drop answers on its own.
            self._c = diskcache.Cache(str(directory), eviction_policy="none", size_limit=2**62,
                                      tag_index=True)
        except (OSError, diskcache.core.Timeout) as e:
            raise CacheError(f"{directory}: cannot open the response cache: {e}") from None
        except Exception as e:  # sqlite3 errors from a damaged cache.db
            raise CacheError(f"{directory}: cannot open the response cache ({type(e).__name__}: {e}); "
                             "move the folder away or run `carryon cache clear`") from None

    def get(self, key: str) -> dict | None:
        try:
            value = self._c.get(key, default=None, retry=True)
        except Exception as e:  # unreadable pickle, truncated file: a miss, not a crash
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
