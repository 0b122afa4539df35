"""Gateway worker processes: litellm's client work spread over several processes.

One litellm process is CPU-bound near 300 calls/s whatever the provider (litellm spends a few
milliseconds of CPU on every call), so a run that needs more sends its requests through worker
processes (``gateway.workers``; default one per core). Only the request itself moves: the run's
process keeps the cache, the in-flight table (an identical request is never in flight twice),
the per-model limits, the retries and the judging of answers, so one set of limits covers
every worker and provenance stays one row per call. A worker runs ``transport.send`` and
sends back its outcome as plain data (``Reply`` or ``Failure``).

The workers of a pool come from one process (worker.py) that imports litellm once and forks
them: N workers cost one import (about 7 s of CPU on a 2-core machine) instead of N at once.
That process starts on the run's first cache miss (a fully cached rerun starts none), or
earlier when ``prestart`` asked for it: ``carryon run`` does, so the import overlaps the
Prefect server's start and the run's own imports instead of holding up the first stage.
Requests wait until a worker is up (the run's process never imports litellm for them). A
worker that dies fails its requests in flight as transient failures (the retry loop sends them
again, to another worker; from the run's process once every worker is gone). Workers exit when
their socket closes, so they never outlive the run's process.

Wire format: a 4-byte big-endian length, then a pickle. Run's process -> worker:
``(request_id, kwargs, messages, prompt)``; worker -> run's process: ``("ready", pid)`` once,
then ``(request_id, Reply | Failure)``.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import pickle
import socket
import struct
import subprocess
import sys

from tasks.gateway.transport import Failure, Reply, send

log = logging.getLogger("carryon.gateway")

_HEAD = struct.Struct(">I")
WORKERS_ENV = "CARRYON_GATEWAY_WORKERS"
# A worker that has not imported litellm by then is stopped (requests wait for workers).
START_TIMEOUT_S = 120.0


def frame(obj) -> bytes:
    body = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    return _HEAD.pack(len(body)) + body


async def read_frame(reader: asyncio.StreamReader):
    """The next object, or None at end of stream."""
    try:
        head = await reader.readexactly(_HEAD.size)
        return pickle.loads(await reader.readexactly(_HEAD.unpack(head)[0]))
    except (asyncio.IncompleteReadError, ConnectionError):
        return None


def worker_count(setting: int | str) -> int:
    """How many worker processes: the environment's CARRYON_GATEWAY_WORKERS wins over the
    config's ``gateway.workers``; ``auto`` is one per core this process may use."""
    value = os.environ.get(WORKERS_ENV, setting)
    if str(value).strip().lower() == "auto":
        try:
            return len(os.sched_getaffinity(0))
        except AttributeError:  # not Linux
            return os.cpu_count() or 1
    try:
        n = int(value)
    except (TypeError, ValueError):
        raise ValueError(f"{WORKERS_ENV}={value!r}: expected a number of workers or 'auto'") from None
    if n < 0:
        raise ValueError(f"gateway workers must be 0 or more, got {n}")
    return n


class _Forker:
    """The process that imports litellm and forks a pool's workers (worker.py), with this
    process's ends of their sockets. Spawning it needs no event loop, so it can start before
    the run's loop exists (``prestart``)."""

    def __init__(self, n: int):
        self.n = n
        self.parent = os.getpid()
        self.socks: list[socket.socket] = []
        theirs: list[socket.socket] = []
        for _ in range(n):
            mine, other = socket.socketpair()
            self.socks.append(mine)
            theirs.append(other)
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tasks.gateway.worker", str(self.parent),
                 *(str(t.fileno()) for t in theirs)],
                pass_fds=tuple(t.fileno() for t in theirs), stdin=subprocess.DEVNULL,
                # Not the terminal's Ctrl-C: requests in flight finish while the run stops
                # (tasks/ops/interrupt.py); they still die with the run's process.
                start_new_session=True)
        except BaseException:
            for sock in self.socks:
                sock.close()
            raise
        finally:
            for t in theirs:
                t.close()

    def discard(self) -> None:
        """Stop it and close its sockets (no pool has adopted them)."""
        self.stop()
        for sock in self.socks:
            sock.close()

    def usable(self, n: int) -> bool:
        return self.n == n and self.proc.poll() is None

    def stop(self) -> None:
        """End the forker; its workers die with it (on Linux at once, by the parent-death
        signal; elsewhere when their sockets close). The sockets stay open: a pool closes them
        on its loop."""
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


_prestarted: _Forker | None = None


def prestart(n: int) -> None:
    """Start the workers of this process's next pool of ``n`` now, before any event loop: the
    first ``WorkerPool(n)`` to start adopts them. For ``carryon run``, whose temporary Prefect
    server and imports take seconds that the workers' own import can overlap. A no-op for 0."""
    global _prestarted
    if n > 0 and _prestarted is None:
        _prestarted = _Forker(n)


def stop_prestarted() -> None:
    """Stop workers that ``prestart`` started and no pool adopted (every stage was skipped)."""
    global _prestarted
    forker, _prestarted = _prestarted, None
    if forker is not None:
        forker.discard()


def _adopt_prestarted(n: int) -> _Forker | None:
    global _prestarted
    forker = _prestarted
    if forker is None or os.getpid() != forker.parent:  # a forked copy of this process
        return None
    _prestarted = None
    if forker.usable(n):
        return forker
    forker.discard()
    return None


class _Worker:
    def __init__(self, index: int, sock: socket.socket):
        self.index = index
        self.sock = sock
        self.pid: int | None = None  # said by the worker when it is ready
        self.writer: asyncio.StreamWriter | None = None
        self.up = False
        self.gone = False  # stopped (or never started): it will not come up
        self.pending: dict[int, asyncio.Future] = {}


class WorkerPool:
    """The worker processes of one gateway on one event loop."""

    def __init__(self, n: int):
        self.n = n
        self.workers: list[_Worker] = []
        self.forker: _Forker | None = None
        self._ids = itertools.count()
        self._readers: list[asyncio.Task] = []
        self.sent = 0  # requests sent through workers
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closing = False

    @property
    def ready(self) -> bool:
        return any(w.up for w in self.workers)

    def start(self) -> None:
        """Start the workers (or adopt the prestarted ones); returns at once (they say when
        they are ready)."""
        self._loop = asyncio.get_running_loop()
        self._state = asyncio.Event()  # set when a worker comes up or goes away
        self.forker = _adopt_prestarted(self.n) or _Forker(self.n)
        for i, sock in enumerate(self.forker.socks):
            w = _Worker(i, sock)
            self.workers.append(w)
            self._readers.append(self._loop.create_task(self._serve(w)))

    async def wait_ready(self, timeout_s: float = 120.0) -> bool:
        """Wait until every worker is up (or gone); True when at least one is up."""
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout_s
        while loop.time() < end and any(not w.up and not w.gone for w in self.workers):
            await asyncio.sleep(0.05)
        return self.ready

    def pids(self) -> list[int]:
        return [w.pid for w in self.workers if w.up]

    async def send(self, kwargs: dict, messages, prompt) -> Reply | Failure:
        live = [w for w in self.workers if w.up]
        while not live and any(not w.gone for w in self.workers):
            # Wait for a worker rather than send from here: that would import litellm in this
            # process too, a third import competing for the cores with the workers' own.
            self._state.clear()
            await self._state.wait()
            live = [w for w in self.workers if w.up]
        if not live:  # every worker is gone: this process sends
            return await send(kwargs, messages, prompt)
        w = min(live, key=lambda w: len(w.pending))  # the least busy worker
        rid = next(self._ids)
        fut = asyncio.get_running_loop().create_future()
        w.pending[rid] = fut
        try:
            w.writer.write(frame((rid, kwargs, messages, prompt)))
            self.sent += 1
            return await fut
        finally:
            w.pending.pop(rid, None)

    async def _serve(self, w: _Worker) -> None:
        """Read one worker's answers until it goes away."""
        reason = "it closed its connection"
        try:
            reader, w.writer = await asyncio.open_connection(sock=w.sock)
            try:
                hello = await asyncio.wait_for(read_frame(reader), START_TIMEOUT_S)
            except asyncio.TimeoutError:
                hello = None
                if not self.ready:  # the import hangs: stop it (its workers go with it)
                    self.forker.proc.kill()
            if not (isinstance(hello, tuple) and hello[:1] == ("ready",)):
                reason = (f"it did not start within {START_TIMEOUT_S:.0f} s (the process "
                          f"that starts the workers: exit code {self.forker.proc.poll()})")
                return
            w.pid, w.up = hello[1], True
            self._state.set()
            while True:
                msg = await read_frame(reader)
                if msg is None:
                    return
                rid, outcome = msg
                fut = w.pending.pop(rid, None)
                if fut is not None and not fut.done():
                    fut.set_result(outcome)
        except Exception as e:  # a broken worker must not take the run down
            reason = f"{type(e).__name__}: {e}"
        finally:
            w.up, w.gone = False, True
            self._state.set()
            failure = Failure("transient", f"WorkerGone: gateway worker {w.index} stopped ({reason})")
            for fut in w.pending.values():
                if not fut.done():
                    fut.set_result(failure)
            w.pending.clear()
            if not self._closing:
                log.warning("gateway worker %d stopped (%s); its requests are sent again",
                            w.index, reason)

    def close(self) -> None:
        """Stop the workers (safe from any thread, and after the loop has closed)."""
        self._closing = True
        self._on_loop(*(t.cancel for t in self._readers))
        for w in self.workers:
            w.up = False
        if self.forker is not None:
            self.forker.stop()  # its workers die with it
        for w in self.workers:
            self._close_socket(w)

    def _close_socket(self, w: _Worker) -> None:
        # Through its transport, on its loop: closing the bare socket would leave the file
        # descriptor registered with the loop, and the next connection that reuses the number
        # would fail ("File descriptor N is used by transport").
        if w.writer is None or not self._on_loop(w.writer.close):
            w.sock.close()

    def _on_loop(self, *calls) -> bool:
        """Run ``calls`` on the pool's loop (now when this is that loop's thread, else soon);
        False when that loop has closed (there is nothing left to tidy on it)."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return False
        try:
            here = asyncio.get_running_loop() is loop
        except RuntimeError:
            here = False
        for call in calls:
            call() if here else loop.call_soon_threadsafe(call)
        return True
