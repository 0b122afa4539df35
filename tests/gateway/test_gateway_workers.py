"""Gateway worker processes (tasks/gateway/workers.py): requests sent from other processes are
answered, cached, limited, deduplicated and recorded exactly as requests sent from the run's
own process; a worker that dies loses no call; a fully cached rerun starts no worker.

tests/conftest.py sets CARRYON_GATEWAY_WORKERS=0 for the suite; these tests remove it so the
config's ``gateway.workers`` applies.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
from pathlib import Path

import pytest
import yaml

from tasks.config import GatewayConfig, ModelSpec
from tasks.gateway import Gateway
from tasks.gateway import workers
from tasks.gateway.workers import worker_count
from tests.support.factories import base_config
from tests.support.factories import rounded
from tests.support.llm_server import Faults, LLMServer
from tests.support.gateway import Verdict
from tests.support.gateway import spec_for as base_spec

# Worker processes forked per test (several seconds each on 2 cores): --all only.
pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def _workers_from_config(monkeypatch):
    monkeypatch.delenv("CARRYON_GATEWAY_WORKERS", raising=False)


def spec_for(server, **over) -> ModelSpec:
    # test_gateway's model entry, with room for the retries and concurrency tested here
    return base_spec(server, **{"max_concurrency": 16, "timeout_s": 10.0, "max_retries": 8, **over})


def gateway(path: Path, workers: int) -> Gateway:
    g = Gateway(path, "run-test", GatewayConfig(workers=workers))
    g.cfg.backoff_base_s, g.cfg.backoff_max_s = 0.01, 0.2
    return g


async def _mixed_calls(g: Gateway, spec: ModelSpec, n: int = 30):
    """Free text, structured and text-completion calls, all at once."""
    calls = []
    for i in range(n):
        calls.append(g.chat(spec, "target", [{"role": "user", "content": f"question {i}"}]))
        calls.append(g.chat(spec, "benutil_judge", [{"role": "user", "content": f"judge {i}"}],
                            schema=Verdict))
        calls.append(g.text(spec, "wildguard", f"Human user:\nprompt {i}\n\nAI assistant:\nok"))
    return await asyncio.gather(*calls)


def _answers(results):
    return [(r.ok, r.content, r.parsed.model_dump() if r.parsed else None, r.prompt_tokens,
             r.completion_tokens, r.error_kind) for r in results]


def _provenance(g: Gateway):
    keep = ("call_hash", "role", "model", "cache_hit", "prompt_tokens", "completion_tokens", "error")
    return sorted(tuple(row[k] for k in keep) for row in g.drain_records())


def test_worker_count_setting_and_override(monkeypatch):
    assert worker_count(3) == 3
    assert worker_count("auto") == len(os.sched_getaffinity(0))
    monkeypatch.setenv("CARRYON_GATEWAY_WORKERS", "0")
    assert worker_count("auto") == 0
    monkeypatch.setenv("CARRYON_GATEWAY_WORKERS", "many")
    with pytest.raises(ValueError, match="CARRYON_GATEWAY_WORKERS"):
        worker_count(2)


def test_workers_answer_exactly_as_the_run_process(tmp_path):
    server = LLMServer().start()
    try:
        spec = spec_for(server)

        async def go(workers: int):
            g = gateway(tmp_path / f"cache{workers}", workers)
            try:
                pool = await g.start_workers()
                server.reset()
                results = await _mixed_calls(g, spec)
                return results, _provenance(g), pool, dict(server.counts)
            finally:
                g.close()

        here, rows_here, _, _ = asyncio.run(go(0))
        there, rows_there, pool, counts = asyncio.run(go(2))
        assert _answers(there) == _answers(here)
        assert all(r.ok for r in there)
        assert rows_there == rows_here
        # Every request went through the two workers, none from this process.
        assert pool is not None and len(pool.workers) == 2
        assert pool.sent == counts["total"] == 90
    finally:
        server.stop()


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"  # a zombie has exited (its parent has not reaped it yet)


def _wait_gone(pids, timeout: float = 10.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.05)
    return [p for p in pids if _alive(p)]


def _parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def test_one_process_imports_litellm_and_forks_every_worker(tmp_path):
    """The workers are forked from one process after its import (not N imports at once), die
    with it, and a pool adopts workers prestarted before its event loop existed."""
    server = LLMServer().start()
    try:
        spec = spec_for(server)
        workers.prestart(2)
        forker = workers._prestarted
        assert forker is not None and forker.proc.poll() is None

        async def go():
            g = gateway(tmp_path / "cache", 2)
            try:
                pool = await g.start_workers()
                results = await _mixed_calls(g, spec, 5)
                return pool, results, pool.pids()
            finally:
                g.close()

        pool, results, pids = asyncio.run(go())
        assert pool.forker is forker and workers._prestarted is None  # adopted, not a new one
        assert all(r.ok for r in results) and pool.sent == server.counts["total"] == 15
        assert len(set(pids)) == 2
        # (Closing the pool stopped the forker; each worker had it as parent.)
        assert forker.proc.returncode is not None
        assert _wait_gone(pids) == []
    finally:
        workers.stop_prestarted()
        server.stop()


def test_prestarted_workers_no_pool_adopts_are_stopped():
    workers.prestart(2)
    forker = workers._prestarted
    workers.prestart(2)  # already started: not a second set
    assert workers._prestarted is forker
    # Wait until the forker has imported litellm and forked both workers.
    deadline = time.monotonic() + 120
    children: list[int] = []
    while time.monotonic() < deadline and len(children) < 2:
        children = [int(p) for p in Path(f"/proc/{forker.proc.pid}/task/{forker.proc.pid}/children")
                    .read_text().split()]
        time.sleep(0.1)
    assert len(children) == 2 and all(_parent_of(c) == forker.proc.pid for c in children)
    workers.stop_prestarted()
    assert workers._prestarted is None and forker.proc.returncode is not None
    assert _wait_gone(children) == []  # the workers died with the forker


def test_a_pool_of_another_size_does_not_adopt_prestarted_workers(tmp_path):
    server = LLMServer().start()
    try:
        workers.prestart(3)
        forker = workers._prestarted

        async def go():
            g = gateway(tmp_path / "cache", 1)
            try:
                pool = await g.start_workers()
                result = await g.chat(spec_for(server), "target", [{"role": "user", "content": "q"}])
                return pool, result
            finally:
                g.close()

        pool, result = asyncio.run(go())
        assert result.ok and pool.forker is not forker and len(pool.workers) == 1
        assert forker.proc.returncode is not None  # the unusable set was stopped
    finally:
        workers.stop_prestarted()
        server.stop()


def test_failures_retries_and_limits_hold_across_workers(tmp_path):
    # 429s and 500s are retried (from whichever worker), malformed structured answers re-asked,
    # and max_concurrency is one limit over both workers.
    server = LLMServer(latency_s=0.03, faults=Faults(error429=0.15, error500=0.1, malformed=0.2,
                                                     retry_after_s=0.01, seed=7)).start()
    try:
        spec = spec_for(server, max_concurrency=5)

        async def go():
            g = gateway(tmp_path / "cache", 2)
            g.cfg.max_parse_retries = 6  # three malformed answers in a row are not rare at 20 %
            try:
                await g.start_workers()
                server.reset()
                results = await _mixed_calls(g, spec, 20)
                return results, g.stats
            finally:
                g.close()

        results, stats = asyncio.run(go())
        assert all(r.ok for r in results), [r.error for r in results if not r.ok][:3]
        assert server.counts["fault_429"] > 0 and server.counts["fault_500"] > 0
        assert max(r.attempts for r in results) > 1
        assert sum(s.retries for s in stats.values()) > 0
        assert server.max_inflight <= 5
    finally:
        server.stop()


def test_identical_requests_are_one_request_across_workers(tmp_path):
    server = LLMServer(latency_s=0.1).start()
    try:
        spec = spec_for(server)

        async def go():
            g = gateway(tmp_path / "cache", 2)
            try:
                await g.start_workers()
                server.reset()
                return await asyncio.gather(*[
                    g.chat(spec, "target", [{"role": "user", "content": "same"}]) for _ in range(20)])
            finally:
                g.close()

        results = asyncio.run(go())
        assert len({r.content for r in results}) == 1 and all(r.ok for r in results)
        assert server.counts["total"] == 1
    finally:
        server.stop()


def test_a_worker_that_dies_loses_no_call(tmp_path, caplog):
    server = LLMServer(latency_s=0.3).start()
    try:
        spec = spec_for(server, max_concurrency=40)

        async def go():
            g = gateway(tmp_path / "cache", 2)
            try:
                pool = await g.start_workers()
                calls = asyncio.gather(*[
                    g.chat(spec, "target", [{"role": "user", "content": f"q {i}"}]) for i in range(40)])
                await asyncio.sleep(0.15)  # requests are in flight in both workers
                victim = pool.workers[0]
                in_flight = len(victim.pending)
                assert in_flight, "the test needs requests in flight in the killed worker"
                os.kill(victim.pid, signal.SIGKILL)
                return await calls, in_flight
            finally:
                g.close()

        with caplog.at_level(logging.WARNING, logger="carryon.gateway"):
            results, in_flight = asyncio.run(go())
        assert all(r.ok for r in results), [r.error for r in results if not r.ok][:3]
        assert len({r.content for r in results}) == 40
        # Exactly the killed worker's requests were sent a second time, and it said so.
        assert sum(r.attempts == 2 for r in results) == in_flight
        assert sum(r.attempts for r in results) == 40 + in_flight
        assert any("gateway worker 0 stopped" in m for m in caplog.messages)
    finally:
        server.stop()


def test_a_fully_cached_rerun_starts_no_worker(tmp_path):
    server = LLMServer().start()
    try:
        spec = spec_for(server)

        async def go():
            g = gateway(tmp_path / "cache", 2)
            try:
                results = await _mixed_calls(g, spec, 5)
                return results, len(g._pools)
            finally:
                g.close()

        first, pools_first = asyncio.run(go())
        server.reset()
        again, pools_again = asyncio.run(go())
        assert pools_first == 1 and pools_again == 0
        assert server.counts["total"] == 0
        assert [r.content for r in again] == [r.content for r in first]
    finally:
        server.stop()


@pytest.mark.e2e
def test_a_pipeline_run_with_workers_matches_one_without(prefect_harness, llm_server, tmp_path):
    from flows.carryon import carryon
    from warehouse import Warehouse

    def run(name: str, workers: int):
        home = tmp_path / name
        cfg = base_config(llm_server.api_base, home)
        cfg.setdefault("gateway", {})["workers"] = workers
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(cfg))
        asyncio.run(carryon(config=str(path)))
        wh = Warehouse(home / "warehouse.duckdb")
        return {t: wh.query(f"SELECT * FROM {v} ORDER BY ALL")
                for t, v in (("summary", "model_summary"), ("scores", "conversation_scores"))}, \
            wh.query("SELECT role, count(*), sum(cache_hit::int) FROM llm_calls GROUP BY role ORDER BY role")

    views_here, calls_here = run("here", 0)
    views_there, calls_there = run("there", 2)
    assert rounded(views_there) == rounded(views_here)
    assert calls_there == calls_here
