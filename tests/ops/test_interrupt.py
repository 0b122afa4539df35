"""Ctrl-C and SIGTERM end a run in seconds, cleanly (issue #32, item 1; tasks/ops/interrupt.py).

End to end: ``carryon run`` in a subprocess that leads its own process group, against the
loopback server (in this process, slowed per request, each arrival timed). SIGINT goes to
the whole group, as a terminal sends it, once mid-simulation and once mid-judging. Checked:
exit 130 within 10 s, no request arrives after the grace period, the run's row marked
``interrupted`` is the last thing written (a shim in the child logs every warehouse write),
no traceback, and a rerun completes with the same row counts as one uninterrupted run.

Units: the gateway sends nothing once a stop is asked for, and ``run`` cancels the flow once
the requests in flight are answered (or the grace ends).
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

from tasks.ops import interrupt
from tests.support.interrupt import (  # noqa: F401 (fresh_interrupt: a fixture)
    GRACE_S, TimedServer, _config, _env, fresh_interrupt,
)  # timed_server: conftest.py
from warehouse import Warehouse

ROOT = Path(__file__).resolve().parents[2]

# The child: every warehouse write is logged (tables, and the runs row's status) before the
# CLI runs as ``carryon run`` would.
SHIM = """
import json, sys
from warehouse import store
log = open(sys.argv[1], "a", buffering=1)
real = store.Warehouse.write_many
def write_many(self, batches):
    n = real(self, batches)
    names = [store._table_name(b[0]) for b in batches]
    status = [r.get("status") for name, b in zip(names, batches) if name == "runs" for r in b[1]]
    log.write(json.dumps({"tables": names, "runs_status": status}) + "\\n")
    return n
store.Warehouse.write_many = write_many
sys.argv = ["carryon", *sys.argv[2:]]
from flows.cli import main
main()
"""


def _start(config: Path, tmp_path: Path, name: str) -> tuple[subprocess.Popen, Path, Path]:
    out, writes = tmp_path / f"{name}.out", tmp_path / f"{name}.writes"
    proc = subprocess.Popen([sys.executable, "-c", SHIM, str(writes), "run", "--config", str(config)],
                            cwd=ROOT, env=_env(tmp_path), stdout=open(out, "wb"),
                            stderr=subprocess.STDOUT, start_new_session=True)
    return proc, out, writes


def _kill_group(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


def _interrupt_when(server: TimedServer, proc, out: Path, role: str, tmp_path: Path) -> float:
    """Wait until a request of ``role`` arrived, then SIGINT the process group; the time sent."""
    deadline = time.monotonic() + 300
    while not any(r == role for _, r in server.arrivals):
        assert proc.poll() is None, f"carryon ended before any {role} call:\n{out.read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"no {role} call:\n{out.read_text()[-3000:]}"
        time.sleep(0.05)
    time.sleep(0.3)  # a few calls are surely in flight
    sent = time.monotonic()
    os.killpg(proc.pid, signal.SIGINT)  # the group: what a terminal's Ctrl-C does
    return sent


def _check_stopped(server: TimedServer, proc, out: Path, writes: Path, sent: float) -> dict:
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        pytest.fail(f"still running 10 s after SIGINT:\n{out.read_text()[-3000:]}")
    took = time.monotonic() - sent
    text = out.read_text()
    assert proc.returncode == 130, text[-3000:]
    assert "Traceback" not in text, text[-5000:]
    after = [(t - sent, r) for t, r in server.arrivals if t > sent + GRACE_S + 0.5]
    assert after == [], f"requests after the grace period: {after}"
    log = [json.loads(line) for line in writes.read_text().splitlines()]
    assert log and log[-1]["tables"] == ["runs"] and log[-1]["runs_status"] == ["interrupted"], log[-3:]
    tail = text.strip().splitlines()[-1]
    assert tail.startswith("run stopped: interrupted by SIGINT"), text[-2000:]
    return {"seconds": took, "lines": len(text.splitlines())}


COUNTED = ("checklists", "conversations", "turns", "item_judgments", "safety_judgments",
           "judgment_sets")


def _counts(home: Path) -> dict:
    wh = Warehouse(home / "warehouse.duckdb")
    return {t: wh.query(f"SELECT count(*) AS n FROM {t}")[0]["n"] for t in COUNTED}


@pytest.mark.e2e
def test_sigint_to_the_group_mid_simulation_and_mid_judging(timed_server, tmp_path):
    timed_server.latency_s = 0.4
    interrupted = _config(tmp_path, timed_server.api_base, "home")

    # 1. mid-simulation
    proc, out, writes = _start(interrupted, tmp_path, "sim")
    try:
        sent = _interrupt_when(timed_server, proc, out, "user_simulator", tmp_path)
        sim = _check_stopped(timed_server, proc, out, writes, sent)
    finally:
        _kill_group(proc)
    wh = Warehouse(tmp_path / "home" / "warehouse.duckdb")
    rows = wh.query("SELECT status, error FROM runs ORDER BY started")
    assert [r["status"] for r in rows] == ["interrupted"], rows
    assert wh.query("SELECT count(*) AS n FROM item_judgments")[0]["n"] == 0

    # 2. mid-judging (checklists and simulation come back from the cache and the memos)
    proc, out, writes = _start(interrupted, tmp_path, "judge")
    try:
        sent = _interrupt_when(timed_server, proc, out, "benutil_judge", tmp_path)
        judge = _check_stopped(timed_server, proc, out, writes, sent)
    finally:
        _kill_group(proc)
    assert [r["status"] for r in wh.query("SELECT status FROM runs ORDER BY started")] == [
        "interrupted", "interrupted"]
    stored = wh.query("SELECT count(*) AS n FROM item_judgments")[0]["n"]
    assert stored == 0, "the judging batch open at the signal was written"

    # 3. the rerun completes; its counts are those of one uninterrupted run elsewhere
    timed_server.latency_s = 0.0
    for name, config in (("resume", interrupted), ("once", _config(tmp_path, timed_server.api_base, "once"))):
        proc, out, _ = _start(config, tmp_path, name)
        try:
            proc.wait(600)
        finally:
            _kill_group(proc)
        assert proc.returncode == 0, out.read_text()[-3000:]
    resumed, once = _counts(tmp_path / "home"), _counts(tmp_path / "once")
    assert resumed == once and once["item_judgments"] > 0, (resumed, once)
    print(f"\nstopped in {sim['seconds']:.1f} s mid-simulation ({sim['lines']} lines of output), "
          f"{judge['seconds']:.1f} s mid-judging ({judge['lines']} lines)")


# ----------------------------------------------------------------------------- units

@pytest.fixture(autouse=True)
def _fresh(fresh_interrupt):
    yield


def test_checkpoint_passes_until_a_stop_then_waits_for_cancel():
    async def go():
        await interrupt.checkpoint()  # no stop: returns at once
        interrupt.request("SIGTERM")
        waiter = asyncio.ensure_future(interrupt.checkpoint())
        await asyncio.sleep(0.1)
        assert not waiter.done()
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter

    asyncio.run(go())
    assert interrupt.requested() and "SIGTERM" in interrupt.reason()
    with pytest.raises(interrupt.Interrupted):
        interrupt.raise_if_requested()


def test_run_cancels_once_in_flight_calls_are_answered():
    """The flow is cancelled as soon as the last request in flight is answered (not after
    the whole grace), and ``run`` raises Interrupted; work not yet begun never starts."""
    seen = {"answered": 0, "started_after": 0}

    async def call(delay):
        await interrupt.checkpoint()
        with interrupt.sending():
            await asyncio.sleep(delay)
        seen["answered"] += 1

    async def flow():
        first = [asyncio.ensure_future(call(0.3)) for _ in range(3)]
        await asyncio.sleep(0.05)
        interrupt.request("SIGINT")  # what the signal handler does
        await asyncio.sleep(0.01)
        later = asyncio.ensure_future(call(0.0))
        await asyncio.gather(*first, later)
        seen["started_after"] += 1  # never: the flow is cancelled while `later` waits

    t0 = time.monotonic()
    with pytest.raises(interrupt.Interrupted):
        interrupt.run(flow, grace_s=5.0)
    took = time.monotonic() - t0
    assert seen == {"answered": 3, "started_after": 0}
    assert took < 2.0, took


def test_run_cancels_after_the_grace_when_a_call_hangs():
    async def flow():
        interrupt.request("SIGINT")
        with interrupt.sending():
            await asyncio.sleep(30)

    t0 = time.monotonic()
    with pytest.raises(interrupt.Interrupted):
        interrupt.run(flow, grace_s=0.5)
    assert time.monotonic() - t0 < 3.0


def test_run_returns_the_result_and_reraises_errors():
    async def ok():
        return 7

    async def bad():
        raise ValueError("boom")

    assert interrupt.run(ok) == 7
    with pytest.raises(ValueError, match="boom"):
        interrupt.run(bad)


def test_gateway_sends_nothing_after_a_stop(llm_server, tmp_path):
    """A call made after the stop waits (it is cancelled with the flow) and never reaches
    the server; a cached answer is not affected before the stop."""
    from tasks.gateway import Gateway
    from tests.support.gateway import spec_for

    spec = spec_for(llm_server, max_retries=0)

    async def go():
        gw = Gateway(tmp_path / "cache", "run-1")
        try:
            r = await gw.chat(spec, "targets", [{"role": "user", "content": "hi"}])
            assert r.ok
            interrupt.request("SIGINT")
            pending = asyncio.ensure_future(gw.chat(spec, "targets", [{"role": "user", "content": "new"}]))
            await asyncio.sleep(0.3)
            assert not pending.done()
            pending.cancel()
            with pytest.raises(asyncio.CancelledError):
                await pending
        finally:
            gw.close()

    asyncio.run(go())
    assert llm_server.counts["total"] == 1


def test_signal_handler_first_requests_second_exits(tmp_path):
    """Real signals to a child running ``interrupt.run``: a SIGTERM stops the flow (exit 130
    through Interrupted), one line on stderr; a stuck flow's second SIGINT exits at once."""
    code = """
import asyncio, sys
from tasks.ops import interrupt
async def flow():
    print("ready", flush=True)
    with interrupt.sending():
        await asyncio.sleep(float(sys.argv[1]))
try:
    interrupt.run(flow, grace_s=float(sys.argv[2]))
except interrupt.Interrupted as e:
    print("stopped:", e, flush=True)
    sys.exit(130)
"""
    for stuck, signals, sig in ((False, 1, signal.SIGTERM), (True, 2, signal.SIGINT)):
        args = ["60", "0.2"] if not stuck else ["60", "60"]
        p = subprocess.Popen([sys.executable, "-c", code, *args], cwd=ROOT, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, start_new_session=True)
        try:
            assert p.stdout.readline().strip() == "ready"
            t0 = time.monotonic()
            for _ in range(signals):
                os.killpg(p.pid, sig)
                time.sleep(0.3)
            out, err = p.communicate(timeout=10)
            assert p.returncode == 130 and time.monotonic() - t0 < 5
            assert "Traceback" not in err, err
            if stuck:
                assert err.strip().splitlines()[-1] == "SIGINT again: stopping now", err
            else:
                assert "stopped: interrupted by SIGTERM" in out
                assert len(err.strip().splitlines()) == 1 and err.startswith("SIGTERM: stopping"), err
        finally:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()


def test_a_stop_the_run_asks_for_itself_ends_with_its_line_and_code():
    """``stop(why, code)`` (the budget's): under ``run``, the flow is cancelled as on a signal,
    and ``run`` raises Interrupted with the line ``why()`` gives at the end and the code."""
    figures = {"spent": 1.0}

    async def flow():
        interrupt.stop(lambda: f"budget: spent {figures['spent']}", 3)
        figures["spent"] = 2.0  # what finished after the stop counts in the line
        await interrupt.checkpoint()

    with pytest.raises(interrupt.Interrupted) as e:
        interrupt.run(flow, grace_s=1.0)
    assert (str(e.value), e.value.code) == ("budget: spent 2.0", 3)


def test_without_run_a_stop_raises_once_in_flight_calls_are_answered():
    """No ``run`` drives the loop (a flow called directly, a deployment's worker): the waiting
    call raises Interrupted after the requests in flight are answered; ``end_of_run`` forgets
    the stop so the process's next run starts clean."""
    seen = []

    async def sending(delay):
        with interrupt.sending():
            await asyncio.sleep(delay)
        seen.append("answered")

    async def go():
        busy = asyncio.ensure_future(sending(0.3))
        await asyncio.sleep(0.05)
        interrupt.stop(lambda: "budget: stop", 3)
        with pytest.raises(interrupt.Interrupted) as e:
            await interrupt.checkpoint()
        seen.append("raised")
        await busy
        return e.value.code

    assert asyncio.run(go()) == 3
    assert seen == ["answered", "raised"]
    interrupt.end_of_run()
    assert not interrupt.requested()
    interrupt.request("SIGINT")  # a signal's stop is never forgotten by end_of_run
    interrupt.end_of_run()
    assert interrupt.requested()
