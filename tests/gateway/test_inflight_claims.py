"""One process per call in flight (issue #32, item 7; tasks/gateway/claims.py).

Two processes share one cache folder and send the same calls at the same moment: the
loopback server receives each call once, and the process that waited reads the other's
answer from the cache. A process killed while it holds claims blocks nobody: the other
sends the calls itself.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tasks.gateway.claims import FOLDER, Claims
from tests.support.interrupt import TimedServer, timed_server  # noqa: F401  (a fixture)

ROOT = Path(__file__).resolve().parents[2]

# A child: N distinct deterministic calls at once, after litellm is imported and ``go`` exists.
CHILD = """
import asyncio, json, sys, time
from pathlib import Path
from tasks.gateway import Gateway
from tasks.gateway.transport import _litellm
from tests.support.factories import model_spec
cache, api_base, go, n, out = sys.argv[1], sys.argv[2], Path(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
_litellm()
spec = model_spec("m", api_base, model="openai/test-model", max_concurrency=64, timeout_s=30.0,
                  where="models.test")
print("ready", flush=True)
while not go.exists():
    time.sleep(0.01)
async def main():
    gw = Gateway(Path(cache), "run-" + out[-6:])
    try:
        rs = await asyncio.gather(*(gw.chat(spec, "targets", [{"role": "user", "content": f"q{i}"}])
                                    for i in range(n)))
        return {"ok": sum(r.ok for r in rs), "hits": sum(r.cached for r in rs),
                "contents": sorted(r.content for r in rs), "waited": gw.claims.waited}
    finally:
        gw.close()
Path(out).write_text(json.dumps(asyncio.run(main())))
"""


def _child(tmp_path: Path, api_base: str, go: Path, n: int, name: str) -> tuple[subprocess.Popen, Path]:
    out = tmp_path / f"{name}.json"
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path / "cache"), api_base, str(go),
                             str(n), str(out)], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "CARRYON_GATEWAY_WORKERS": "0"})
    return proc, out


def _ready(proc: subprocess.Popen) -> None:
    line = proc.stdout.readline().strip()
    assert line == "ready", line


@pytest.mark.slow
def test_two_processes_on_one_cache_send_each_call_once(llm_server, tmp_path):
    llm_server.latency_s = 0.8  # every call is surely in flight in both processes at once
    go, n = tmp_path / "go", 12
    procs = [_child(tmp_path, llm_server.api_base, go, n, name) for name in ("one", "two")]
    try:
        for proc, _ in procs:
            _ready(proc)
        go.touch()
        for proc, _ in procs:
            assert proc.wait(120) == 0
    finally:
        for proc, _ in procs:
            if proc.poll() is None:
                proc.kill()
    one, two = (json.loads(out.read_text()) for _, out in procs)
    assert llm_server.counts["total"] == n, llm_server.counts  # 2n before the claims
    assert one["ok"] == two["ok"] == n and one["contents"] == two["contents"]
    assert one["hits"] + two["hits"] == n and one["waited"] + two["waited"] == n
    assert list((tmp_path / "cache" / FOLDER).iterdir()) == []  # every claim was released


@pytest.mark.slow
def test_a_killed_holder_blocks_nobody(timed_server, tmp_path):
    llm_server = timed_server
    llm_server.latency_s = 5.0  # the holder's calls stay in flight until it is killed
    n = 3
    go, go_other = tmp_path / "go", tmp_path / "go-other"
    holder, _ = _child(tmp_path, llm_server.api_base, go, n, "holder")
    other, out = _child(tmp_path, llm_server.api_base, go_other, n, "other")
    try:
        _ready(holder)
        _ready(other)
        go.touch()
        deadline = time.monotonic() + 30
        while llm_server.counts["total"] < n:  # the holder's calls are in flight (claimed)
            assert time.monotonic() < deadline
            time.sleep(0.02)
        go_other.touch()
        time.sleep(0.5)  # the other now waits on the holder's claims
        assert llm_server.counts["total"] == n and holder.poll() is None
        llm_server.latency_s = 0.5  # for the other's own calls
        holder.send_signal(signal.SIGKILL)
        holder.wait(10)
        killed = time.monotonic()
        assert other.wait(60) == 0
    finally:
        for p in (holder, other):
            if p.poll() is None:
                p.kill()
    got = json.loads(out.read_text())
    assert got["ok"] == n and got["hits"] == 0 and got["waited"] == n
    assert llm_server.counts["total"] == 2 * n  # the killed holder's, then the other's own
    # The other sent as soon as the holder died, not when its calls would have ended (5 s).
    sent = [t - killed for t, _ in llm_server.arrivals[n:]]
    assert len(sent) == n and max(sent) < 2.5, sent


def test_claims_in_one_process_wait_for_each_other_and_clean_up(tmp_path):
    claims = Claims(tmp_path)
    order = []

    async def one(name, hold_s):
        async with claims.hold("k" * 64) as waited:
            order.append((name, waited))
            await asyncio.sleep(hold_s)

    async def go():
        first = asyncio.ensure_future(one("first", 0.2))
        await asyncio.sleep(0.02)
        await asyncio.gather(first, one("second", 0))

    asyncio.run(go())
    assert order == [("first", False), ("second", True)]
    assert list((tmp_path / FOLDER).iterdir()) == []


def test_no_claims_where_the_folder_cannot_be_written(tmp_path):
    (tmp_path / FOLDER).write_text("a file where the folder should be")
    claims = Claims(tmp_path)

    async def go():
        async with claims.hold("k" * 64) as waited:
            return waited

    assert asyncio.run(go()) is False and claims.enabled is False
