"""One process per call in flight: a claim on a cache key across processes sharing a cache.

Within one process the gateway's in-flight table sends an identical request once. Two runs
on one home (or two shards sharing a cache folder) are two processes: without more, each
sends every call the other has in flight, and pays for it twice. Before sending a miss the
gateway claims its key here: an exclusive ``flock`` on ``<cache>/.inflight/<key>.lock``.
A process that finds the key claimed waits until the claim is released, then reads the
cache: the answer the other process stored is a hit; if there is none (the other's call
failed, or it was not an answer), it claims the key and sends the request itself.

The kernel releases a claim when its process dies (even by SIGKILL), so a dead run never
blocks another. A claim's file is removed by its owner before the lock is released; a
process that locks a file which is no longer the one at the path (removed meanwhile) lets
go and tries again, so two processes never both hold a key. Where ``fcntl`` is missing
(not Unix) or the folder cannot be written, nothing is claimed and requests are sent as
before.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from pathlib import Path

try:
    import fcntl
except ImportError:  # not Unix
    fcntl = None

log = logging.getLogger("carryon.gateway")

FOLDER = ".inflight"
_BUSY, _GONE = "busy", "gone"


class Claims:
    """Claims on cache keys in one cache folder."""

    def __init__(self, cache_dir: Path):
        self.folder = Path(cache_dir) / FOLDER
        self.enabled = fcntl is not None
        self.waited = 0  # claims found held by another process (their answers read after)

    def _path(self, key: str) -> Path:
        return self.folder / f"{key}.lock"

    def _try(self, path: Path):
        """The locked file descriptor, or _BUSY (another holds it), or _GONE (the file was
        replaced while we locked it: try again)."""
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return _BUSY
        try:
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if not same:
            os.close(fd)
            return _GONE
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())  # for people: who is sending it
        return fd

    def _release(self, path: Path, fd: int) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)  # before unlocking: a waiter then sees the file is gone
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)

    async def _acquire(self, path: Path) -> tuple[int, bool]:
        waited, delay = False, 0.01
        while True:
            got = self._try(path)
            if got == _GONE:
                continue
            if got != _BUSY:
                return got, waited
            waited = True
            await asyncio.sleep(delay)
            delay = min(delay * 1.5, 0.2)

    @contextlib.asynccontextmanager
    async def hold(self, key: str):
        """Hold the claim on ``key`` for the block; yields True when another process held it
        first (its answer may be in the cache now: read it before sending)."""
        fd = None
        if self.enabled:
            path = self._path(key)
            try:
                self.folder.mkdir(parents=True, exist_ok=True)
                fd, waited = await self._acquire(path)
            except OSError as e:  # a read-only or odd cache folder: no claims, as before
                log.warning("no in-flight claims in %s (%s); concurrent runs may send a call "
                            "twice", self.folder, e)
                self.enabled = False
        if fd is None:
            yield False
            return
        self.waited += waited
        try:
            yield waited
        finally:
            self._release(path, fd)
