"""Ctrl-C and SIGTERM during ``carryon run``: stop in seconds, cleanly.

A terminal's Ctrl-C goes to the whole process group. The run's children (the temporary
Prefect server, the gateway's worker processes) are started in sessions of their own, so
only the run's process hears it; they still die with it (tasks/ops/parent_death.py).

``run(make_coro)`` runs the flow's event loop in a thread of its own while the main thread
owns the signals (Python runs signal handlers only in the main thread, and Prefect installs
its own SIGTERM bridge only there, so the flow's engine never sees the signal). The first
SIGINT or SIGTERM:

1. stops new model calls at once: the gateway awaits ``checkpoint()`` before every request
   (and every retry), which never returns once a stop is requested;
2. lets the requests already sent finish (their answers are cached, so a rerun does not pay
   for them again) for at most ``grace_s`` seconds (``sending()`` counts them), then cancels
   the flow's task: every stage batch still open is dropped whole (a batch writes its rows
   at its end, in one transaction), so only whole batches are ever stored;
3. the flow marks the run ``interrupted`` (flows/carryon.py), the loop ends, ``run`` raises
   ``Interrupted`` and the command prints one line and exits 130.

A second signal exits at once (``os._exit(130)``): the children go with the process, and
the runs row left ``running`` is marked ``interrupted`` by the next run (tasks/engine/run.py).

``stop(why, code)`` is the same stop asked for by the run itself (the gateway, when the next
request or batch would pass ``budget_usd``: tasks/gateway/budget.py): ``why()`` is the line the
runs row and the terminal get, ``code`` the exit status. Where no ``run`` drives the loop (a
flow called directly, a deployment's worker), ``checkpoint()`` lets the requests in flight
finish (up to the grace) and raises ``Interrupted`` in the caller instead of waiting for a
cancel that nobody would send; ``end_of_run()`` then forgets the stop, so the process's next
run starts clean.

Standard library only; the gateway imports this module.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import threading
import time
from typing import Awaitable, Callable

GRACE_ENV = "CARRYON_INTERRUPT_GRACE_S"
GRACE_S = 5.0  # what requests already sent get to finish; nothing new is sent meanwhile
EXIT_CODE = 130  # 128 + SIGINT, as shells report a Ctrl-C


class Interrupted(Exception):
    """The run stopped on a signal or on its own ``stop`` (raised by ``run`` in the main
    thread, or by ``checkpoint`` where no ``run`` drives the loop); ``code``: the exit status."""

    def __init__(self, message: str, code: int = EXIT_CODE):
        super().__init__(message)
        self.code = code


class _State:
    def __init__(self):
        self.signal: str | None = None  # the first signal's name, once one came
        self.loop: asyncio.AbstractEventLoop | None = None
        self.task: asyncio.Task | None = None  # the flow's task, cancelled after the grace
        self.sending = 0  # requests sent and not yet answered
        self.grace_s = GRACE_S
        self.began: float | None = None
        self.stopping = False  # _begin ran
        self.why = None  # stop(): the reason line, computed when asked (the final figures)
        self.code = EXIT_CODE


_state = _State()


def requested() -> bool:
    """True once a stop was asked for (the first signal)."""
    return _state.signal is not None


def reason() -> str:
    """One line for the runs row and the terminal."""
    if _state.why is not None:
        return _state.why()
    return (f"interrupted by {_state.signal or 'a signal'}: no new model calls were sent; "
            "batches not finished were dropped whole (the answers they got are cached); "
            "run the same command again to finish")


def raise_if_requested() -> None:
    """Between stages: do not start another once a stop is asked for."""
    if requested():
        raise Interrupted(reason(), _state.code)


async def checkpoint() -> None:
    """Before a model request: returns at once, unless a stop was asked for; then it waits
    until the flow's task is cancelled (so no request is sent after the signal). Where no
    ``run`` drives the loop, nobody would cancel it after a ``stop``: it waits for the requests
    in flight (up to the grace) and raises ``Interrupted``."""
    if not requested():
        return
    if _state.loop is None and _state.why is not None:  # a stop() nobody drives
        deadline = time.monotonic() + _state.grace_s
        while _state.sending > 0 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        raise Interrupted(reason(), _state.code)
    await asyncio.get_running_loop().create_future()  # never set: only cancel ends it


@contextlib.contextmanager
def sending():
    """Around one request on the wire: the grace period waits while any is open."""
    _state.sending += 1
    try:
        yield
    finally:
        _state.sending -= 1


def in_flight() -> int:
    return _state.sending


def _mute_logs() -> None:
    """After the stop: Prefect's engine logs every cancelled task and flow as a crash, with
    tracebacks. The one line the command prints says what happened instead. Once per stop."""
    if _muted:
        return

    class _Drop(logging.Filter):
        def filter(self, record) -> bool:
            return False

    drop = _Drop()
    loggers = [logging.getLogger()] + [logging.getLogger(n) for n in
                                        list(logging.root.manager.loggerDict)]
    for lg in loggers:
        for h in getattr(lg, "handlers", []) or []:
            h.addFilter(drop)
            _muted.append((h, drop))


# The (handler, filter) pairs the stop added: reset() takes them off again, so a process that
# runs again (a test session, a notebook) logs as before.
_muted: list = []


async def _stop_after_grace() -> None:
    deadline = time.monotonic() + _state.grace_s
    while _state.sending > 0 and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    task = _state.task
    if task is not None and not task.done():
        task.cancel()


def _begin() -> None:
    """On the flow's loop: the first signal's work (once, whichever side saw it first)."""
    if _state.stopping:
        return
    _state.stopping = True
    _mute_logs()
    _state.loop.create_task(_stop_after_grace())


def request(signame: str = "SIGINT") -> None:
    """Ask the running flow to stop (what the first signal does); safe from any thread.
    Tests call it directly."""
    if _state.signal is not None:
        return
    _state.signal = signame
    _begin_soon()


def stop(why: Callable[[], str], code: int) -> None:
    """The run stops itself, as on a signal: ``why()`` is its line, ``code`` its exit status
    (the first stop wins)."""
    if _state.signal is not None:
        return
    _state.signal, _state.why, _state.code = "stop", why, code
    _begin_soon()


def end_of_run() -> None:
    """A run ended: forget a ``stop`` no ``run`` drives (``run`` itself reports and ends the
    process's stop; a signal's stop is never forgotten here)."""
    if _state.signal == "stop" and _state.loop is None:
        reset()


def _begin_soon() -> None:
    _state.began = time.monotonic()
    loop = _state.loop
    if loop is not None and not loop.is_closed():
        # At once, not on the loop: a report computing on the loop's thread stops at its next
        # checkpoint (tasks/report/folder.py), and Prefect would log that as a crash first.
        _mute_logs()
        loop.call_soon_threadsafe(_begin)


def _handler(signum, frame) -> None:
    name = signal.Signals(signum).name
    if _state.signal is not None:
        print(f"{name} again: stopping now", file=sys.stderr, flush=True)
        os._exit(EXIT_CODE)
    print(f"{name}: stopping: no new model calls; the {_state.sending} in flight get up to "
          f"{_state.grace_s:g} s (again to quit at once)", file=sys.stderr, flush=True)
    request(name)


def grace_from_env(default: float = GRACE_S) -> float:
    value = os.environ.get(GRACE_ENV)
    if not value:
        return default
    try:
        return max(0.0, float(value))
    except ValueError:  # a typo here must not cost the run: say so and use the default
        print(f"{GRACE_ENV}={value!r} is not a number of seconds; using {default:g}",
              file=sys.stderr, flush=True)
        return default


@contextlib.contextmanager
def handlers():
    """SIGINT and SIGTERM go to this module while the block runs (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {s: signal.signal(s, _handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def run(make_coro: Callable[[], Awaitable], grace_s: float | None = None):
    """Run ``make_coro()`` on an event loop in a thread of its own, with this module's signal
    handling (see the module docstring); its result, or its exception re-raised here.
    Raises ``Interrupted`` when a signal stopped it."""
    reset()  # a stop belongs to one run: an earlier run's in this process is forgotten
    _state.grace_s = grace_from_env() if grace_s is None else grace_s
    out: dict = {}

    async def main():
        _state.loop = asyncio.get_running_loop()
        _state.task = asyncio.current_task()
        if requested():  # a signal came while the loop started
            _begin()
        return await make_coro()

    def body():
        try:
            out["result"] = asyncio.run(main())
        except BaseException as e:  # noqa: BLE001 (handed to the main thread)
            out["error"] = e
        finally:
            _state.loop = None

    with handlers():
        thread = threading.Thread(target=body, name="carryon-flow", daemon=True)
        thread.start()
        while thread.is_alive():
            thread.join(0.2)  # short waits: the main thread must run the signal handlers
    if requested():
        raise Interrupted(reason(), _state.code)
    if "error" in out:
        raise out["error"]
    return out.get("result")


def reset() -> None:
    """Forget a stop (tests, and a process that runs more than once), its muted logs too."""
    global _state
    _state = _State()
    while _muted:
        handler, drop = _muted.pop()
        handler.removeFilter(drop)
