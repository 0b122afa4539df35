"""Gateway worker processes (see workers.py): ``python -m tasks.gateway.worker PARENT_PID FD...``.

One process starts for all the workers of a pool: it imports litellm once (several seconds of
CPU), then forks one worker per socket FD and stays behind only to reap them. Each worker
says it is ready, then sends every request it reads from its socket through
``transport.send`` and writes the outcome back, many at once on one event loop. A worker
applies no limits of its own (the run's process does) and stops at end of stream: when the
run's process closes its socket or dies.

Forking after the import is what makes N workers cost one import instead of N competing for
the same cores, and lets them share the imported modules' memory. It is safe here: the
import leaves one thread and no event loop, and each worker builds its own loop and
connections after the fork. On Linux every process of the family dies with its parent (the
forker with the run's process, each worker with the forker), even on SIGKILL.
"""

from __future__ import annotations

import asyncio
import gc
import os
import socket
import sys

from tasks.gateway.transport import Failure, _litellm, error_text, send
from tasks.gateway.workers import frame, read_frame
from tasks.ops.parent_death import die_with_parent


async def serve(sock: socket.socket) -> None:
    reader, writer = await asyncio.open_connection(sock=sock)
    writer.write(frame(("ready", os.getpid())))
    running: set[asyncio.Task] = set()

    async def one(rid, kwargs, messages, prompt):
        try:
            outcome = await send(kwargs, messages, prompt)
        except Exception as e:  # send turns provider errors into Failures; this is a bug
            outcome = Failure("api", f"gateway worker: {error_text(e)}")
        try:
            writer.write(frame((rid, outcome)))
            await writer.drain()
        except ConnectionError:  # the run's process is gone; the read loop ends too
            pass

    while True:
        msg = await read_frame(reader)
        if msg is None:
            break
        task = asyncio.get_running_loop().create_task(one(*msg))
        running.add(task)
        task.add_done_callback(running.discard)


def _work(fd: int) -> None:
    try:
        asyncio.run(serve(socket.socket(fileno=fd)))
    except (KeyboardInterrupt, BrokenPipeError, ConnectionError):
        pass


def _fork_worker(fd: int, fds: list[int]) -> int:
    """Fork one worker serving ``fd``; returns its pid (in the forker)."""
    forker = os.getpid()
    pid = os.fork()
    if pid:
        return pid
    code = 0
    try:
        for other in fds:
            if other != fd:
                os.close(other)
        die_with_parent(forker)  # the signal set before the fork does not survive it
        _work(fd)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    except BaseException:
        code = 1
    finally:
        os._exit(code)  # never return into the forker's code (or run its exit handlers)


def main() -> None:
    parent, fds = int(sys.argv[1]), [int(a) for a in sys.argv[2:]]
    # Killed with the run's process, even by SIGKILL: no orphan keeps importing litellm or
    # holding a request after it.
    die_with_parent(parent)
    _litellm()  # the slow import, once for every worker
    # The imported modules' objects never become garbage: leave them out of every collection,
    # so the workers' collections neither cost CPU on them nor copy their shared pages.
    gc.collect()
    gc.freeze()
    children = {_fork_worker(fd, fds) for fd in fds}
    for fd in fds:
        os.close(fd)
    while children:  # reap the workers; leave when the last one is gone
        try:
            pid, _ = os.wait()
        except ChildProcessError:
            break
        except KeyboardInterrupt:
            continue
        children.discard(pid)


if __name__ == "__main__":
    main()
