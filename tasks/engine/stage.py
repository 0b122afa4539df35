"""The one skeleton of a stage's batches, shared by every stage subflow (flows/): each batch is
one Prefect task call (a batch of items or conversations, never one LLM call), at most
``in_flight`` of them at once while the gateway bounds the calls inside them; as each batch
ends, its provenance rows leave memory (``ctx.flush_calls``) and the stage's progress moves.
"""

from __future__ import annotations

import asyncio
from typing import Awaitable, Callable


def whole_batches(units: list, size: int, group: Callable[[object], object]) -> list[list]:
    """Units in batches of whole groups (``group(unit)``: an item, a query), each of at least
    ``size`` units except the last, so the units of one group (sharing their first calls)
    are never split across batches."""
    out, cur, last = [], [], object()
    for u in units:
        g = group(u)
        if g != last and len(cur) >= size:
            out.append(cur)
            cur = []
        cur.append(u)
        last = g
    if cur:
        out.append(cur)
    return out


async def run_batches(ctx, progress, batches: list, call: Callable[[object], Awaitable],
                      count: Callable[[object, object], int] = lambda batch, _: len(batch),
                      in_flight: int | None = None) -> list:
    """``await call(batch)`` for every batch; the results in batch order. ``count(batch,
    result)`` is how far the progress moves when a batch ends (default: the batch's length)."""
    gate = asyncio.Semaphore(in_flight or max(len(batches), 1))

    async def one(batch):
        async with gate:
            out = await call(batch)
            ctx.flush_calls()
            progress.advance(count(batch, out))
            return out

    try:
        return await asyncio.gather(*(one(b) for b in batches))
    finally:
        progress.close()
