"""The batch collector (tasks/gateway/batching.py): calls that join together leave together,
a full batch leaves at once, and a steady trickle cannot hold a batch back."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from tasks.gateway.batching import BatchCollector


@dataclass
class _Spec:
    model: str = "openai/m"
    batch_size: int = 1000


class _Client:
    """Records each batch it is asked to run; answers every call with its messages."""

    def __init__(self):
        self.runs: list[list[str]] = []

    async def run(self, calls):
        self.runs.append([c.messages for c in calls])
        return [c.messages for c in calls]


def _collector(**kw) -> tuple[BatchCollector, _Client]:
    c = BatchCollector(gateway=None, warehouse=None, **kw)
    c.client = _Client()
    return c, c.client


def test_calls_issued_together_are_one_batch_and_answers_go_back_in_order():
    col, client = _collector(settle_s=0.05)

    async def main():
        return await asyncio.gather(*(col.chat(_Spec(), "r", f"m{i}") for i in range(7)))

    assert asyncio.run(main()) == [f"m{i}" for i in range(7)]
    assert client.runs == [[f"m{i}" for i in range(7)]]


def test_a_full_batch_leaves_at_once():
    col, client = _collector(settle_s=10.0)  # only batch_size can send these in time
    spec = _Spec(batch_size=2)

    async def main():
        return await asyncio.wait_for(asyncio.gather(*(col.chat(spec, "r", i) for i in range(4))), 2)

    assert asyncio.run(main()) == [0, 1, 2, 3]
    assert client.runs == [[0, 1], [2, 3]]


def test_a_trickle_of_calls_is_sent_after_max_wait():
    # A call every 0.05 s would reset a 0.2 s settle timer for ever; max_wait sends at 0.3 s.
    col, client = _collector(settle_s=0.2, max_wait_s=0.3)

    async def main():
        futs = []
        for i in range(12):  # 0.6 s of calls
            futs.append(asyncio.ensure_future(col.chat(_Spec(), "r", i)))
            await asyncio.sleep(0.05)
        return await asyncio.gather(*futs)

    assert asyncio.run(main()) == list(range(12))
    # The first batch left while calls were still arriving (not held back by them).
    assert len(client.runs) >= 2 and 0 < len(client.runs[0]) < 12
    assert sum(len(r) for r in client.runs) == 12
