"""Batch mode without the stages knowing: calls of ``batch: true`` models are gathered while a
stage issues them and sent as provider batches (tasks/gateway/batch.py).

A stage awaits ``Gateway.chat`` as always. For a model entry with ``batch: true`` the call
joins a waiting list instead; once no new call has joined for ``settle_s`` (every coroutine
that could issue a call has issued it and waits), the whole list goes to
``BatchClient.run`` and each caller gets its answer. So the judge stage's calls (no path
dependency) become one batch per judge batch, and the simulation stage sends one batch per
turn depth: the turn-k calls of every conversation wait together, and turn k+1 can only be
asked once their answers are back. Calls that arrive while a batch is out form the next one.

The settle time is short next to a provider batch (minutes to hours); a fully cached rerun
pays it once per turn depth. Two bounds keep a steady trickle of calls from holding a batch
back: the list leaves as soon as it holds ``batch_size`` calls of one model, or ``MAX_WAIT_S``
after its first call joined.
"""

from __future__ import annotations

import asyncio
from collections import Counter

from tasks.gateway.batch import BatchCall, BatchClient

SETTLE_S = 0.25
MAX_WAIT_S = 5.0


class BatchCollector:
    def __init__(self, gateway, warehouse, settle_s: float = SETTLE_S,
                 max_wait_s: float = MAX_WAIT_S):
        self.client = BatchClient(gateway, warehouse)
        self.settle_s, self.max_wait_s = settle_s, max_wait_s
        self._waiting: list[tuple[BatchCall, asyncio.Future]] = []
        self._per_model: Counter = Counter()
        self._first = 0.0  # loop time the first waiting call joined
        self._timer: asyncio.TimerHandle | None = None
        self._sends: set[asyncio.Task] = set()

    async def chat(self, spec, role, messages, schema=None, sample_key=None):
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        if not self._waiting:
            self._first = loop.time()
        self._waiting.append((BatchCall(spec, role, messages, schema, sample_key), fut))
        self._per_model[spec.model] += 1
        if self._timer is not None:
            self._timer.cancel()
        if self._per_model[spec.model] >= spec.batch_size:
            self._send()  # a full batch: no reason to wait
        else:
            delay = min(self.settle_s, max(0.0, self._first + self.max_wait_s - loop.time()))
            self._timer = loop.call_later(delay, self._send)
        return await fut

    def _send(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = None
        self._per_model.clear()
        waiting, self._waiting = self._waiting, []
        if waiting:
            task = asyncio.ensure_future(self._run(waiting))
            self._sends.add(task)  # held: a task nobody references may be collected
            task.add_done_callback(self._sends.discard)

    async def _run(self, waiting: list) -> None:
        try:
            results = await self.client.run([c for c, _ in waiting])
        except Exception as e:  # a bug or a dead warehouse: every caller sees it, none hangs
            for _, fut in waiting:
                if not fut.done():
                    fut.set_exception(e)
            return
        for (_, fut), r in zip(waiting, results):
            if not fut.done():
                fut.set_result(r)


def collector_for(gateway) -> BatchCollector:
    """The gateway's collector for the running event loop (its futures belong to one loop,
    like the gateway's limits)."""
    loop = asyncio.get_running_loop()
    if loop not in gateway._batchers:
        gateway._batchers[loop] = BatchCollector(gateway, gateway.batch_store)
    return gateway._batchers[loop]


def progress_line(b: dict) -> str:
    """The heartbeat's batch part (tasks/gateway/batch.py keeps the counts)."""
    return (f"batches: {b['submitted']} submitted, {b['resumed']} resumed, {b['done']} done, "
            f"{b['pending']} pending ({b['waiting']} calls waiting)")
