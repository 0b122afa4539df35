"""Progress that moves within a stage (tasks/engine/progress.py): each line carries the model calls the
stage has resolved so far, so a stage whose one batch holds every unit does not print
"0/16 conversations" for minutes; lines stay rate-limited."""

from __future__ import annotations

import asyncio
import re
from types import SimpleNamespace

import pytest

from tasks.engine import progress as pr
from tasks.engine.progress import Progress, gateway_calls, set_activity, set_calls


@pytest.fixture(autouse=True)
def _no_registered_counters():
    set_calls(None)
    set_activity(None)
    yield
    set_calls(None)
    set_activity(None)


def _lines(capsys) -> list[str]:
    return [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("[")]


def test_heartbeat_lines_count_calls_while_no_unit_is_done(capsys):
    counter = {"done": 10, "inflight": 3}  # 10 calls resolved before the stage began
    set_calls(lambda: (counter["done"], counter["inflight"]))

    async def stage():
        p = Progress("judge", 16, unit="conversations", heartbeat_s=0.05)
        for _ in range(4):
            counter["done"] += 5
            await asyncio.sleep(0.06)
        counter["inflight"] = 0
        p.advance(16)

    asyncio.run(stage())
    lines = _lines(capsys)
    assert lines[0].startswith("[judge] 0/16 conversations (0%")  # the start line: no calls yet
    beats = [int(m.group(1)) for ln in lines[1:-1]
             if (m := re.search(r"0/16 conversations, (\d+) model calls done \(\+3 in flight\)", ln))]
    assert len(beats) >= 3 and beats == sorted(beats) and beats[-1] > beats[0]
    assert max(beats) <= 20  # counted from the stage's start, not the run's
    assert lines[-1].startswith("[judge] 16/16 conversations, 20 model calls done (100%")


def test_lines_are_rate_limited(capsys):
    set_calls(lambda: (0, 0))

    async def stage():
        p = Progress("simulate", 1000, unit="conversations", every_s=60, heartbeat_s=60)
        for _ in range(1000):
            p.advance()

    asyncio.run(stage())
    lines = _lines(capsys)
    assert len(lines) == 2  # the start line and the last, not one per conversation
    assert lines[-1].startswith("[simulate] 1000/1000 conversations, 0 model calls done (100%")


def test_a_counter_registered_inside_the_stage_starts_from_zero(capsys):
    set_calls(lambda: (500, 0))  # an earlier run's gateway, still registered

    async def stage():
        p = Progress("checklists", 2, unit="queries", heartbeat_s=10)
        set_calls(lambda: (7, 1))  # this run's gateway, opened by the stage's first call
        p.advance(2)

    asyncio.run(stage())
    assert _lines(capsys)[-1].startswith("[checklists] 2/2 queries, 7 model calls done (+1 in flight)")


def test_a_failing_or_missing_counter_leaves_the_line_as_it_was(capsys):
    def broken():
        raise RuntimeError("boom")

    set_calls(broken)
    asyncio.run(_advance_all(Progress("judge", 1, unit="conversations")))
    set_calls(None)
    asyncio.run(_advance_all(Progress("judge", 1, unit="conversations")))
    ends = _lines(capsys)
    assert ends[1].startswith("[judge] 1/1 conversations (100%")
    assert ends[3].startswith("[judge] 1/1 conversations (100%")


async def _advance_all(p: Progress):
    p.advance(p.total)


def test_gateway_calls_counts_each_call_once():
    stats = {"targets": SimpleNamespace(requests=7, retries=2, hits=4, remembered=1, failures=1),
             "judge": SimpleNamespace(requests=3, retries=0, hits=0, remembered=0, failures=0)}
    gw = SimpleNamespace(stats=stats, _inflight={"a": 1, "b": 2})
    # targets: 5 sent once each (7 attempts, 2 retries) + 4 hits + 1 remembered; judge: 3
    assert gateway_calls(gw) == (13, 2)
    assert gateway_calls(SimpleNamespace()) == (0, 0)


def test_a_real_gateway_moves_the_count(tmp_path, llm_server, capsys):
    from dataclasses import replace

    from tasks.gateway import Gateway
    from tests.support.gateway import spec_for

    gw = Gateway(tmp_path / "cache", "run-progress")
    set_calls(lambda: gateway_calls(gw))
    spec = replace(spec_for(llm_server), max_concurrency=2)

    async def stage():
        p = Progress("simulate", 1, unit="conversations", heartbeat_s=3600)
        await asyncio.gather(*(gw.text(spec, "targets", f"prompt {i}") for i in range(5)))
        await gw.text(spec, "targets", "prompt 0")  # a cache hit counts as done too
        line = p.calls_line()
        p.advance()
        return line

    try:
        assert asyncio.run(stage()) == "6 model calls done"
    finally:
        gw.close()
    assert pr._read_calls() == (6, 0)
