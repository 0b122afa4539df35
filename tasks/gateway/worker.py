"""A gateway worker process (see workers.py): ``python -m tasks.gateway.worker FD PARENT_PID``.

It imports litellm, says it is ready, then sends every request it reads from socket FD through
``transport.send`` and writes the outcome back, many at once on one event loop. It applies no
limits of its own (the run's process does) and stops at end of stream: when the run's process
closes the socket or dies (on Linux it is killed with its parent at once).
"""

from __future__ import annotations

import asyncio
import os
import socket
import sys

from tasks.gateway.transport import Failure, _litellm, error_text, send
from tasks.gateway.workers import frame, read_frame
from tasks.parent_death import die_with_parent


async def serve(sock: socket.socket) -> None:
    reader, writer = await asyncio.open_connection(sock=sock)
    _litellm()  # the slow import, before saying ready
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


def main() -> None:
    fd = int(sys.argv[1])
    if len(sys.argv) > 2:
        # Killed with the run's process, even by SIGKILL: no orphan keeps importing litellm
        # or holding a request after it.
        die_with_parent(int(sys.argv[2]))
    try:
        asyncio.run(serve(socket.socket(fileno=fd)))
    except (KeyboardInterrupt, BrokenPipeError, ConnectionError):
        pass


if __name__ == "__main__":
    main()
