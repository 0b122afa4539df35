"""SharedLimits: one model budget for every process, held by the Prefect server (GCLs)."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from tasks.gateway.shared_limits import (
    TOKEN_TTL_S, SharedLimits, SharedLimitsUnavailable, rate_sizing)
from tests.support.llm_server import Faults, LLMServer
from tests.support.shard_worker import run_shards


def _api_url() -> str:
    from prefect.settings import PREFECT_API_URL

    return PREFECT_API_URL.value()


async def _read_limit(name: str):
    from prefect.client.orchestration import get_client

    async with get_client() as client:
        return await client.read_global_concurrency_limit_by_name(name)


def test_limit_names_are_deterministic_and_valid():
    import re

    from prefect.types.names import WITHOUT_BANNED_CHARACTERS

    a = SharedLimits.limit_names("openai/gpt-4o", "https://api.openai.com/v1")
    assert a == SharedLimits.limit_names("openai/gpt-4o", "https://api.openai.com/v1")
    assert a != SharedLimits.limit_names("openai/gpt-4o", "http://127.0.0.1:1/v1")
    assert a[0] != a[1]
    assert all(re.match(WITHOUT_BANNED_CHARACTERS, n) for n in a)


@pytest.mark.slow  # the Prefect test server (prefect_harness): its global concurrency limits
def test_two_processes_share_one_budget(prefect_harness):
    model, server = "openai/shared-1", "http://127.0.0.1:1/v1"

    async def main():
        a = SharedLimits(model, server, 8, None, idle_release_s=0.2)
        b = SharedLimits(model, server, 8, None, idle_release_s=0.2)
        now = peak = done = 0

        async def call(lim):
            nonlocal now, peak, done
            await lim.acquire()
            now += 1
            peak = max(peak, now)
            assert lim._inflight <= lim._capacity  # never beyond the blocks it holds
            try:
                await asyncio.sleep(0.01)
            finally:
                now -= 1
                lim.release()
            done += 1

        await asyncio.wait_for(asyncio.gather(*[call(a if i % 2 else b) for i in range(200)]), 60)
        held = (await _read_limit(a.conc_name)).active_slots
        await a.close()
        await b.close()
        return peak, done, held, a.stats, b.stats

    peak, done, held, sa, sb = asyncio.run(main())
    assert done == 200
    assert 1 <= peak <= 8
    assert 0 < held <= 8  # blocks were held on the server while the calls ran
    assert sa["blocks_acquired"] + sb["blocks_acquired"] >= 8
    assert sa["blocks_released"] == sa["blocks_acquired"]
    assert sb["blocks_released"] == sb["blocks_acquired"]
    gcl = asyncio.run(_read_limit(SharedLimits.limit_names(model, server)[0]))
    assert gcl.limit == 8 and gcl.active_slots == 0


@pytest.mark.slow  # the Prefect test server (prefect_harness): its global concurrency limits
def test_idle_blocks_go_back_and_existing_limits_are_updated(prefect_harness, caplog):
    model, server = "openai/shared-2", "http://127.0.0.1:2/v1"

    async def main():
        first = SharedLimits(model, server, 4, None, block=2, idle_release_s=0.1)
        await first.acquire()
        first.release()
        await first.close()
        # Another process with a different config: the limit follows it, with a warning.
        lim = SharedLimits(model, server, 6, None, block=2, idle_release_s=0.1)
        await asyncio.gather(*[lim.acquire() for _ in range(6)])
        assert (await _read_limit(lim.conc_name)).active_slots == 6
        for _ in range(6):
            lim.release()
        await asyncio.sleep(0.6)  # several idle periods: every block goes back
        after = (await _read_limit(lim.conc_name))
        await lim.close()
        return after, lim.stats

    after, stats = asyncio.run(main())
    assert after.limit == 6 and after.active_slots == 0
    assert stats["blocks_acquired"] == 3 and stats["blocks_released"] == 3
    assert any("openai/shared-2" in r.getMessage() for r in caplog.records)


def test_rate_sizing_keeps_every_minute_within_rpm():
    for rpm in (1, 7, 59, 60, 61, 600, 3500, 10_000, 90_000):
        cap, decay = rate_sizing(rpm)
        assert cap >= 1 and cap <= max(1, rpm / 60 + 1)
        # Starts in a 60 s window use tokens granted within 60 s + the token TTL: at most the
        # bucket's capacity plus what decays meanwhile.
        assert cap + decay * (60 + TOKEN_TTL_S) <= rpm + 1e-9
        # ... and not much less (the budget is used): within one bucket of rpm.
        assert cap + decay * 60 >= rpm - cap - rpm * TOKEN_TTL_S / 60 - 1e-9
    # A bucket of capacity rpm would allow rpm at once and rpm more in the next minute.
    assert rate_sizing(600)[0] == 10


@pytest.mark.slow  # the Prefect test server (prefect_harness): its global concurrency limits
def test_rate_limit_live(prefect_harness):
    rpm = 600
    cap, decay = rate_sizing(rpm)

    async def main():
        lim = SharedLimits("openai/rate-live", "http://127.0.0.1:3/v1", 50, rpm)
        assert lim.rate_block > 1  # blocks of tokens (occupy > 1) work on this Prefect
        starts = []

        async def call():
            await lim.acquire()
            starts.append(time.monotonic())
            lim.release()

        t0 = time.monotonic()
        tasks = [asyncio.create_task(call()) for _ in range(200)]
        await asyncio.sleep(3.0)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await lim.close()
        gcl = await _read_limit(lim.rate_name)
        return [s - t0 for s in starts], gcl

    starts, gcl = asyncio.run(main())
    assert gcl.limit == cap and gcl.slot_decay_per_second == pytest.approx(decay)
    # The bucket's bound over 3 s (the first grants include a full bucket), and a floor so
    # the test does not pass by starting nothing.
    assert 5 <= len(starts) <= cap + decay * (3.0 + TOKEN_TTL_S) + 1
    for sec in (1, 2):  # after the first second, about decay starts per second
        n = sum(sec <= s < sec + 1 for s in starts)
        assert n <= decay + cap + 1


def test_dead_prefect_api_raises_with_the_url():
    from prefect.settings import PREFECT_API_URL, temporary_settings

    url = "http://127.0.0.1:9/api"
    with temporary_settings({PREFECT_API_URL: url}):
        lim = SharedLimits("openai/dead", "http://127.0.0.1:4/v1", 4, None)
        with pytest.raises(SharedLimitsUnavailable) as e:
            asyncio.run(lim.acquire())
    msg = str(e.value)
    assert url in msg and "openai/dead" in msg and "\n" not in msg


def _server_figures(server: LLMServer) -> dict:
    return {"total": server.counts["total"], "rejected": server.counts["fault_429_limit"],
            "max_inflight": server.max_inflight}


# 0.5 s answers: on a loaded 2-core machine a shard's gateway manages only ~20 calls/s, so at
# 50 ms a shard holds ~1 request in flight (Little's law) and two shards never reach the
# server's limit, with or without shared limits. At 0.5 s each shard can keep its 8 in flight.
LATENCY_S, CALLS = 0.5, 40


@pytest.mark.slow  # the Prefect test server (prefect_harness) and shard subprocesses
def test_two_shards_shared_vs_local(prefect_harness):
    server = LLMServer(latency_s=LATENCY_S, record=False,
                       faults=Faults(max_inflight=8, retry_after_s=0.05)).start()
    try:
        runs = run_shards(server.api_base, modes=("shared", "local"), shards=2, calls=CALLS,
                          max_concurrency=8, reset=server.reset,
                          counts=lambda: _server_figures(server),
                          env={"PREFECT_API_URL": _api_url()})
    finally:
        server.stop()
    figures = {}
    for mode, run in runs.items():
        figures[mode] = {**run["server"], "ok": sum(s["ok"] for s in run["shards"]),
                         "failed": sum(s["failed"] for s in run["shards"]),
                         "wall_s": run["wall_s"]}
    print(figures)
    shared, local = figures["shared"], figures["local"]
    assert shared["ok"] == 2 * CALLS and shared["failed"] == 0
    assert shared["max_inflight"] <= 8
    for figures_of_mode in (shared, local):  # no request reached the server outside the runs
        assert figures_of_mode["total"] == figures_of_mode["ok"] + figures_of_mode["rejected"]
    assert shared["rejected"] / shared["total"] <= 0.05
    # Local: two shards of 8 against a server that answers 8. While both are busy, 8 calls
    # are not being answered at any moment, each retrying every ~50 ms (retry-after) while an
    # accepted one takes 500 ms: several 429s per accepted request (a share well above 50 %)
    # unless the shards barely overlap. 20 % leaves room for start-up skew and a busy CPU.
    assert local["rejected"] / local["total"] > 0.20
    assert local["ok"] + local["failed"] == 2 * CALLS  # a call out of retries is data


def test_llm_server_concurrency_limit():
    import aiohttp

    server = LLMServer(latency_s=0.3, faults=Faults(max_inflight=2, retry_after_s=0.07)).start()
    try:
        async def main():
            async with aiohttp.ClientSession() as http:
                async def one(i):
                    async with http.post(f"{server.api_base}/chat/completions", json={
                            "model": "m", "messages": [{"role": "user", "content": f"q{i}"}]}) as r:
                        return r.status, r.headers.get("retry-after"), await r.json()

                return await asyncio.gather(*[one(i) for i in range(5)])

        answers = asyncio.run(main())
    finally:
        server.stop()
    rejected = [a for a in answers if a[0] == 429]
    assert sum(a[0] == 200 for a in answers) == 2 and len(rejected) == 3
    assert all(a[1] == "0.07" and a[2]["error"]["message"] == "over the concurrency limit"
               for a in rejected)
    assert server.counts["fault_429_limit"] == 3 and server.counts["total"] == 5
    assert server.max_inflight == 2 and server.inflight == 0


def test_auto_shares_limits_only_with_a_long_lived_prefect_server(monkeypatch):
    from tasks.ops import ephemeral
    from tasks.gateway.shared_limits import shared_limits_enabled

    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    assert not shared_limits_enabled("auto")
    assert shared_limits_enabled("on") and not shared_limits_enabled("off")
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:4200/api")  # a user's server
    assert shared_limits_enabled("auto", shards=2)
    assert not shared_limits_enabled("auto", shards=1)  # not sharded: only when asked
    monkeypatch.setattr(ephemeral, "_OURS", {"http://127.0.0.1:4200/api"})  # our temporary one
    assert not shared_limits_enabled("auto", shards=2)


@pytest.mark.slow  # one of the fast suite's slowest (kept under 5 min on 2 cores)
def test_gateway_falls_back_to_its_own_limits_when_prefect_is_down(tmp_path, caplog):
    # shared_limits on, but the Prefect API is dead: every call still answers, within this
    # process's own limit, and the gateway says once why the budget is not shared.
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from tasks.config import GatewayConfig
    from tasks.gateway import Gateway
    from tests.support.shard_worker import _spec

    server = LLMServer(latency_s=0.02).start()
    try:
        spec = _spec(server.api_base, 4, 2)

        async def go():
            gw = Gateway(tmp_path / "cache", "run", GatewayConfig(shared_limits="on"))
            try:
                return await asyncio.gather(*[
                    gw.chat(spec, "bench", [{"role": "user", "content": f"q {i}"}])
                    for i in range(12)])
            finally:
                await gw.release_limits()
                gw.close()

        with temporary_settings({PREFECT_API_URL: "http://127.0.0.1:9/api"}), \
                caplog.at_level(logging.WARNING, logger="carryon.gateway"):
            results = asyncio.run(go())
    finally:
        server.stop()
    assert all(r.ok for r in results)
    assert server.max_inflight <= 4
    said = [m for m in caplog.messages if "applies its own limits only" in m]
    assert len(said) == 1 and "127.0.0.1:9" in said[0]
