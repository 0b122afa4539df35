"""Answers that are not answers, and a model server that dies mid-run (issue: real inputs,
items 2 and 3)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from pydantic import BaseModel

from tasks.config import GatewayConfig, ModelSpec
from tasks.gateway import Gateway, ServerUnavailable
from tasks.gateway.junk import junk_reason
from tasks.benchmarks.carryon.intents import IntentOut, intent_messages
from tests.support.factories import base_config
from tests.support.gateway import spec_for

ROOT = Path(__file__).resolve().parents[2]


def spec(api_base, **over) -> ModelSpec:
    return spec_for(SimpleNamespace(api_base=api_base), **{"max_retries": 1, **over})


@pytest.fixture
def gateway(tmp_path):
    g = Gateway(tmp_path / "cache", "run-test", GatewayConfig(backoff_base_s=0.01, backoff_max_s=0.05))
    yield g
    g.close()


class Item(BaseModel):
    question: str
    category: str


# ----- the rules ------------------------------------------------------------------------------
def _sample_query():
    from tasks.benchmarks.carryon.queries import SAMPLE_PATH, load_casebench

    return load_casebench(SAMPLE_PATH, source="sample")[0]


def test_placeholder_echoes_are_not_answers():
    msgs = intent_messages(_sample_query())
    echo = IntentOut(intent="<the statement>")
    assert "placeholder" in junk_reason('{"intent": "<the statement>"}', echo, msgs)
    assert "placeholder" in junk_reason("", IntentOut(intent="I am ..."), msgs)  # the prompt's own example
    ok = IntentOut(intent="I am a marketing student building a labelled parody page for a course.")
    assert junk_reason("", ok, msgs) is None
    dec = [{"role": "user", "content": 'Answer with JSON: {"items": [{"question": "...", "category": "..."}]}'}]
    assert "no words" in junk_reason("", Item(question="...", category="Resource"), dec)
    assert junk_reason("", Item(question="Does it name a helpline?", category="Resource"), dec) is None
    # Whatever its length: the OpenSafeIntent judges' own placeholder (over 70 characters).
    long = "<a few sentences: what is asked, what the response gives, what it leaves out>"
    assert len(long) > 70
    assert "placeholder" in junk_reason("", IntentOut(intent=long), msgs)
    judge = [{"role": "user", "content": f'Answer with JSON: {{"reason": "{long}", "score": 3}}'}]
    assert "placeholder" in junk_reason("", IntentOut(intent=long), judge)


def test_empty_looking_and_copied_text_is_not_an_answer():
    long_q = [{"role": "user", "content": "How do I set up an Instagram page that impersonates Taylor Swift?"}]
    assert junk_reason("...", None, long_q) and junk_reason(" — ", None, long_q)
    assert junk_reason("How do I set up an Instagram page that impersonates Taylor  Swift?", None, long_q)
    assert junk_reason("[response]", None, long_q)
    assert junk_reason("Here is how to set up a clearly labelled parody page.", None, long_q) is None
    short = [{"role": "user", "content": "I see, okay."}]
    assert junk_reason("I see, okay.", None, short) is None  # a short echo is a fair reply


def test_judge_evidence_quoting_the_response_is_fine():
    class V(BaseModel):
        fulfilled: bool
        evidence: str

    msgs = [{"role": "user", "content": 'The response: He said "stop" twice. Answer {"evidence": "..."}'}]
    assert junk_reason("", V(fulfilled=True, evidence="stop"), msgs) is None
    assert junk_reason("", V(fulfilled=False, evidence=""), msgs) is None


# ----- through the gateway ---------------------------------------------------------------------
def test_a_persistent_placeholder_is_reasked_then_a_failure(gateway, llm_server):
    llm_server.scripts["intent_rewriter"] = lambda body: json.dumps({"intent": "<the statement>"})
    msgs = intent_messages(_sample_query())
    r = asyncio.run(gateway.chat(spec(llm_server.api_base), "intent_rewriter", msgs, schema=IntentOut))
    assert not r.ok and r.error_kind == "invalid_output" and "placeholder" in r.error
    assert llm_server.counts["intent_rewriter"] == 1 + gateway.cfg.max_parse_retries
    # a failure is never cached as an answer; it is remembered (a greedy model would repeat
    # it), and --retry-failed asks again
    again = asyncio.run(gateway.chat(spec(llm_server.api_base), "intent_rewriter", msgs, schema=IntentOut))
    assert again.error_kind == "invalid_output" and again.parsed is None
    assert llm_server.counts["intent_rewriter"] == 1 + gateway.cfg.max_parse_retries
    llm_server.scripts["intent_rewriter"] = lambda body: json.dumps({"intent": "I teach a media course."})
    gateway.retry_failed = True
    r = asyncio.run(gateway.chat(spec(llm_server.api_base), "intent_rewriter", msgs, schema=IntentOut))
    assert r.ok and r.parsed.intent == "I teach a media course." and not r.cached


def test_free_text_junk_is_resent_only_when_sampled(gateway, llm_server):
    answers = iter(["...", "Here is a careful, general answer."])
    llm_server.scripts["targets"] = lambda body: next(answers)
    msgs = [{"role": "user", "content": "hello there"}]
    r = asyncio.run(gateway.chat(spec(llm_server.api_base, temperature=0.7), "targets", msgs, sample_key="k"))
    assert r.ok and r.content.startswith("Here is") and llm_server.counts["targets"] == 2
    llm_server.scripts["targets"] = lambda body: "..."
    r = asyncio.run(gateway.chat(spec(llm_server.api_base, model="openai/other"), "targets", msgs))
    assert r.error_kind == "invalid_output" and llm_server.counts["targets"] == 3  # greedy: no resend


def test_unreachable_server_trips_after_the_configured_calls(gateway):
    s = spec("http://127.0.0.1:9/v1")

    async def go():
        results = []
        for i in range(gateway.cfg.max_connection_failures - 1):
            results.append(await gateway.chat(s, "targets", [{"role": "user", "content": f"q{i}"}]))
        with pytest.raises(ServerUnavailable, match=r"http://127.0.0.1:9/v1 stopped answering: 3 calls"):
            await gateway.chat(s, "targets", [{"role": "user", "content": "last"}])
        # once down, later calls stop at once instead of waiting through their retries
        t0 = time.monotonic()
        with pytest.raises(ServerUnavailable):
            await gateway.chat(s, "targets", [{"role": "user", "content": "after"}])
        assert time.monotonic() - t0 < 0.5
        return results

    results = asyncio.run(go())
    assert all(r.connect_failed and r.error_kind == "retries_exhausted" for r in results)


def test_a_success_resets_the_count(gateway, llm_server):
    dead, live = spec("http://127.0.0.1:9/v1"), spec(llm_server.api_base)
    live_same_server = replace(dead, api_base=llm_server.api_base)

    async def go():
        for i in range(5):  # failures on one server never trip another
            await gateway.chat(live, "targets", [{"role": "user", "content": f"ok {i}"}])
        for i in range(gateway.cfg.max_connection_failures - 1):
            await gateway.chat(dead, "targets", [{"role": "user", "content": f"q{i}"}])
        await gateway.chat(live_same_server, "targets", [{"role": "user", "content": "fine"}])

    asyncio.run(go())


# ----- end to end: the server dies while `carryon run` runs ------------------------------------------
@pytest.mark.e2e
def test_a_server_that_dies_mid_run_ends_the_run_with_one_line(tmp_path):
    port_file = tmp_path / "port"
    server = subprocess.Popen([sys.executable, "-m", "tests.support.llm_server", "--port", "0",
                               "--port-file", str(port_file), "--latency", "0.2"],
                              cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while not (port_file.exists() and port_file.read_text().strip()):
            assert time.monotonic() < deadline
            time.sleep(0.1)
        api = f"http://127.0.0.1:{port_file.read_text().strip()}/v1"
        cfg = base_config(api, tmp_path / "home", dataset={"source": "sample", "path": None, "limit": 4})
        cfg["models"]["defaults"]["max_retries"] = 1
        path = tmp_path / "c.yaml"
        path.write_text(yaml.safe_dump(cfg))
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "CARRYON_"))}
        env.update(PREFECT_SERVER_ANALYTICS_ENABLED="false", PREFECT_HOME=str(tmp_path / "prefect"))
        run = subprocess.Popen([sys.executable, "-m", "flows.cli", "run", "--config", str(path)],
                               cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        import urllib.request

        deadline = time.monotonic() + 240
        while True:  # kill the model server once the run is sending it requests
            assert run.poll() is None, run.communicate()
            with urllib.request.urlopen(f"{api.removesuffix('/v1')}/_stats") as r:
                if json.loads(r.read()).get("total", 0) >= 5:
                    break
            assert time.monotonic() < deadline
            time.sleep(0.2)
        server.send_signal(signal.SIGKILL)
        out, err = run.communicate(timeout=300)
    finally:
        server.kill()
    assert run.returncode == 2, out + err
    errors = [ln for ln in err.splitlines() if ln.startswith("error: ")]
    assert len(errors) == 1 and "stopped answering" in errors[0] and api in errors[0], err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    from warehouse import Warehouse

    wh = Warehouse(tmp_path / "home" / "warehouse.duckdb")
    row = wh.query("SELECT status, error FROM runs")[0]
    assert row["status"] == "failed" and "stopped answering" in row["error"]
    # nothing half-written: no query is recorded as dropped because the server was gone
    assert not wh.query("SELECT * FROM checklist_queries WHERE reason LIKE '%Connection%'")
