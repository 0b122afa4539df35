"""The LLM gateway against the loopback server: cache, limits, retries, structured output,
provenance and secrets."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import replace
from typing import Literal

import pytest
from aiohttp import web
from pydantic import BaseModel

from tasks.gateway import Gateway
from tasks.gateway.client import merge_call_rows
from tasks.gateway.keys import cache_key, normalise_api_base
from tasks.gateway.limits import RateLimiter
from tests.support.factories import model_spec
from tests.support.gateway import ENTRY, Verdict, msgs, spec_for  # the gateway fixture: conftest.py
from tests.support.llm_server import answer


def run(coro):
    return asyncio.run(coro)


# ----- cache key ------------------------------------------------------------------------------

def _key(**over):
    args = dict(model="openai/m", api_base="http://Host:80/v1/", messages=msgs("hi"), prompt=None,
                params={"temperature": 0.0, "max_tokens": 10}, schema=None, structured=None,
                sample_key=None)
    args.update(over)
    return cache_key(**args)


def test_cache_key_covers_what_determines_the_output():
    k = _key()
    assert k == _key(api_base="http://host/v1")  # normalised: case, default port, slash
    assert k != _key(model="openai/other")
    assert k != _key(api_base="http://host:81/v1")
    assert k != _key(messages=msgs("hi!"))
    assert k != _key(params={"temperature": 0.0, "max_tokens": 11})
    assert k != _key(params={"temperature": 0.0, "max_tokens": 10, "seed": 1})
    assert k != _key(schema={"type": "object"}, structured="json_schema")
    # The sample key counts only for sampled calls.
    assert k == _key(sample_key="conv-1")
    hot = {"temperature": 0.7, "max_tokens": 10}
    assert _key(params=hot, sample_key="a") != _key(params=hot, sample_key="b")
    assert normalise_api_base("HTTPS://X.org:443/v1/") == "https://x.org/v1"


def test_cache_key_excludes_keys_timeouts_retries_and_concurrency(llm_server):
    s = spec_for(llm_server)
    variants = [replace(s, api_key_env="OTHER"), replace(s, timeout_s=99), replace(s, max_retries=0),
                replace(s, max_concurrency=1), replace(s, rpm=5, name="renamed", where="elsewhere")]
    for v in variants:
        assert v.generation_params() == s.generation_params()


# ----- cache behaviour ------------------------------------------------------------------------

def test_second_call_is_served_from_cache(gateway, llm_server):
    s = spec_for(llm_server)
    a = run(gateway.chat(s, "judge", msgs("q"), schema=Verdict))
    assert a.ok and not a.cached and isinstance(a.parsed, Verdict)
    b = run(gateway.chat(s, "judge", msgs("q"), schema=Verdict))
    assert b.cached and b.content == a.content and b.call_hash == a.call_hash
    assert llm_server.counts["total"] == 1


def test_identical_concurrent_calls_share_one_request(gateway, llm_server):
    llm_server.latency_s = 0.05
    s = spec_for(llm_server)

    async def many():
        return await asyncio.gather(*[gateway.chat(s, "t", msgs("same")) for _ in range(10)])

    results = run(many())
    assert len({r.content for r in results}) == 1
    assert llm_server.counts["total"] == 1


def test_errors_are_not_cached_and_are_reported(gateway, llm_server):
    llm_server.scripts["t"] = lambda body: web.json_response(
        {"error": {"message": "bad request", "type": "invalid_request_error"}}, status=400)
    s = spec_for(llm_server)
    r = run(gateway.chat(s, "t", msgs("x")))
    assert not r.ok and r.error_kind == "api_error" and r.content is None
    del llm_server.scripts["t"]
    r2 = run(gateway.chat(s, "t", msgs("x")))
    assert r2.ok and not r2.cached  # the failure was not cached
    assert llm_server.counts["total"] == 2


def test_empty_output_is_a_failure_not_cached(gateway, llm_server):
    llm_server.scripts["t"] = lambda body: ""
    s = spec_for(llm_server)
    r = run(gateway.chat(s, "t", msgs("x")))
    assert r.error_kind == "empty_output"
    # Never an answer: the same deterministic request reads back as the same failure
    # (remembered, tests/gateway/test_remembered_failures.py), never as content.
    again = run(gateway.chat(s, "t", msgs("x")))
    assert not again.ok and again.content is None and again.error_kind == "empty_output"
    assert gateway.cache.get(r.call_hash) is None


def test_malformed_structured_output_is_reasked_then_recorded(gateway, llm_server):
    llm_server.scripts["judge"] = lambda body: '{"fulfilled": "perhaps"'
    s = spec_for(llm_server)
    r = run(gateway.chat(s, "judge", msgs("x"), schema=Verdict))
    assert not r.ok and r.error_kind == "invalid_output" and r.parsed is None
    assert r.attempts == 1 + gateway.cfg.max_parse_retries
    # The re-ask carries the invalid answer and the reason.
    last = llm_server.requests[-1]["body"]["messages"]
    assert last[-2]["role"] == "assistant" and "not valid" in last[-1]["content"]
    # Never cached as an answer: remembered as the failure it is (a greedy model repeats it),
    # and requested afresh when failures are retried (carryon run --retry-failed).
    assert run(gateway.chat(s, "judge", msgs("x"), schema=Verdict)).error_kind == "invalid_output"
    llm_server.scripts["judge"] = lambda body: json.dumps({"fulfilled": True, "evidence": "e"})
    gateway.retry_failed = True
    ok = run(gateway.chat(s, "judge", msgs("x"), schema=Verdict))
    assert ok.ok and not ok.cached and ok.parsed.fulfilled is True


def test_reask_recovers_and_caches_under_the_original_key(gateway, llm_server):
    answers = iter(['not json', json.dumps({"fulfilled": False, "evidence": "quote"})])
    llm_server.scripts["judge"] = lambda body: next(answers)
    s = spec_for(llm_server)
    r = run(gateway.chat(s, "judge", msgs("x"), schema=Verdict))
    assert r.ok and r.attempts == 2 and r.parsed.fulfilled is False
    again = run(gateway.chat(s, "judge", msgs("x"), schema=Verdict))
    assert again.cached and again.parsed.evidence == "quote"


# ----- retries --------------------------------------------------------------------------------

def test_retries_on_500_and_429_with_retry_after(gateway, llm_server):
    calls = {"n": 0}

    def flaky(body):
        calls["n"] += 1
        if calls["n"] == 1:
            return web.json_response({"error": {"message": "boom"}}, status=500)
        if calls["n"] == 2:
            return web.json_response({"error": {"message": "slow down"}}, status=429,
                                     headers={"retry-after": "0.3"})
        return "fine"

    llm_server.scripts["t"] = flaky
    t0 = time.perf_counter()
    r = run(gateway.chat(spec_for(llm_server), "t", msgs("x")))
    assert r.ok and r.content == "fine" and r.attempts == 3
    assert time.perf_counter() - t0 >= 0.3  # honoured retry-after
    assert gateway.stats["t"].retries == 2


def test_retries_exhausted_is_recorded(gateway, llm_server):
    llm_server.scripts["t"] = lambda body: web.json_response({"error": {"message": "down"}}, status=503)
    r = run(gateway.chat(spec_for(llm_server, max_retries=2), "t", msgs("x")))
    assert not r.ok and r.error_kind == "retries_exhausted" and r.attempts == 3


def test_timeouts_are_retried(gateway, llm_server):
    llm_server.faults.timeout, llm_server.faults.timeout_sleep_s = 1.0, 2.0
    r = run(gateway.chat(spec_for(llm_server, timeout_s=0.3, max_retries=1), "t", msgs("x")))
    assert r.error_kind == "retries_exhausted" and r.attempts == 2
    llm_server.faults.timeout = 0.0
    assert run(gateway.chat(spec_for(llm_server, timeout_s=0.3), "t", msgs("x"))).ok


def test_unreachable_server_is_a_recorded_failure(gateway):
    s = model_spec("m", "http://127.0.0.1:9/v1", max_tokens=8, max_concurrency=1, timeout_s=2,
                   max_retries=1, where="x")
    r = run(gateway.chat(s, "t", msgs("x")))
    assert not r.ok and r.error_kind == "retries_exhausted"


def test_context_window_exceeded_is_its_own_kind(gateway, llm_server):
    llm_server.scripts["t"] = lambda body: web.json_response({"error": {
        "message": "This model's maximum context length is 8 tokens", "type": "invalid_request_error",
        "code": "context_length_exceeded"}}, status=400)
    r = run(gateway.chat(spec_for(llm_server), "t", msgs("x")))
    assert r.error_kind == "context_exceeded"


# ----- limits ---------------------------------------------------------------------------------

def test_max_concurrency_is_enforced(gateway, llm_server):
    llm_server.latency_s = 0.05
    s = spec_for(llm_server, max_concurrency=3)

    async def many():
        await asyncio.gather(*[gateway.chat(s, "t", msgs(f"q{i}")) for i in range(12)])

    run(many())
    assert llm_server.max_inflight == 3


def test_rate_limiter_spaces_request_starts():
    async def go():
        rl = RateLimiter(rpm=2, window_s=0.3)
        t0 = time.perf_counter()
        for _ in range(5):
            await rl.acquire()
        return time.perf_counter() - t0

    # starts at 0, 0 | 0.3, 0.3 | 0.6 -> at least two full windows
    assert run(go()) >= 0.6


# ----- structured output modes and headers ----------------------------------------------------

def test_structured_modes(gateway, llm_server):
    for mode in ("json_schema", "json_object", "prompt"):
        r = run(gateway.chat(spec_for(llm_server, structured=mode), "judge", msgs(f"m {mode}"), schema=Verdict))
        assert r.ok and isinstance(r.parsed, Verdict), mode
    bodies = [q["body"] for q in llm_server.requests]
    assert bodies[0]["response_format"]["type"] == "json_schema"
    assert bodies[0]["response_format"]["json_schema"]["schema"]["properties"]["fulfilled"]["type"] == "boolean"
    assert bodies[1]["response_format"] == {"type": "json_object", "schema": Verdict.model_json_schema()}
    assert "response_format" not in bodies[2]
    assert "JSON schema" in bodies[2]["messages"][-1]["content"]


class Reasoned(BaseModel):
    reason: str
    act: Literal["answer", "ask"]
    note: str | None = None


def test_max_string_chars_caps_every_free_text_string_sent_and_keys_only_when_set(gateway, llm_server):
    # A server that decodes to the schema must close a capped string: a small model looping
    # inside its "reason" still gives valid JSON. Listed values (enum) are left alone.
    llm_server.scripts["judge"] = lambda body: answer(json.dumps({"reason": "r", "act": "ask"}))
    plain = spec_for(llm_server, structured="json_object")
    capped = replace(plain, max_string_chars=200)
    for spec in (plain, capped):
        assert run(gateway.chat(spec, "judge", msgs("x"), schema=Reasoned)).ok
    sent = [q["body"]["response_format"]["schema"] for q in llm_server.requests]
    assert sent[0] == Reasoned.model_json_schema()  # unset: the schema as it always was
    props = sent[1]["properties"]
    assert props["reason"]["maxLength"] == 200
    assert [m.get("maxLength") for m in props["note"]["anyOf"]] == [200, None]
    assert "maxLength" not in props["act"]
    # The cap changes the request, so the key; unset, the key is the one it always was.
    assert Gateway.chat_key(plain, msgs("x"), Reasoned) != Gateway.chat_key(capped, msgs("x"), Reasoned)
    assert Gateway.chat_key(plain, msgs("x"), Reasoned) == cache_key(
        model=plain.model, api_base=plain.api_base, messages=msgs("x"), prompt=None,
        params=plain.generation_params(), schema=Reasoned.model_json_schema(),
        structured="json_object", sample_key=None)
    # In the prompt too, for providers with no structured output.
    prompted = replace(capped, structured="prompt")
    assert run(gateway.chat(prompted, "judge", msgs("y"), schema=Reasoned)).ok
    assert '"maxLength": 200' in llm_server.requests[-1]["body"]["messages"][-1]["content"]


def test_role_header_and_text_completion(gateway, llm_server):
    r = run(gateway.text(spec_for(llm_server), "wildguard", "Human user: x\nAnswers: [/INST]"))
    assert r.ok and "Harmful request: no" in r.content
    assert llm_server.requests[0]["headers"]["x-carryon-role"] == "wildguard"
    assert llm_server.requests[0]["body"]["prompt"]


def test_provenance_records(gateway, llm_server, tmp_path):
    s = spec_for(llm_server)
    run(gateway.chat(s, "t", msgs("a")))
    run(gateway.chat(s, "t", msgs("a")))
    recs = gateway.drain_records()
    # One row per call hash per run: the later hit does not replace the real request's row.
    assert [r["cache_hit"] for r in recs] == [False]
    assert recs[0]["attempts"] == 1 and recs[0]["prompt_tokens"] > 0 and recs[0]["role"] == "t"
    assert recs[0]["run_id"] == "run-test" and recs[0]["error"] is None
    assert gateway.drain_records() == []
    # After a drain the gateway holds nothing of the hash (memory is one drain's rows): the
    # hit gives a row again, and the rule the run's writer applies keeps the real request's.
    run(gateway.chat(s, "t", msgs("a")))
    (hit,) = gateway.drain_records()
    assert hit["cache_hit"] and merge_call_rows(recs[0], hit) is None
    other_run = Gateway(tmp_path / "cache", "run-2")  # the same cache, a later run
    run(other_run.chat(s, "t", msgs("a")))
    assert [(r["run_id"], r["cache_hit"], r["attempts"]) for r in other_run.drain_records()] == [("run-2", True, 0)]
    other_run.close()


def test_api_key_is_sent_but_never_stored(gateway, llm_server, tmp_path, monkeypatch):
    secret = "sk-test-SECRET-0123456789abcdef"
    monkeypatch.setenv("CARRYON_API_KEY", secret)
    llm_server.scripts["t"] = lambda body: web.json_response(
        {"error": {"message": f"invalid key {secret}"}}, status=401)
    s = spec_for(llm_server)
    bad = run(gateway.chat(s, "t", msgs("fail")))
    assert secret not in (bad.error or "")
    del llm_server.scripts["t"]
    assert run(gateway.chat(s, "t", msgs("ok"))).ok
    assert llm_server.requests[-1]["headers"]["Authorization"] == f"Bearer {secret}"
    gateway.close()
    blob = b"".join(p.read_bytes() for p in (tmp_path / "cache").rglob("*") if p.is_file())
    assert secret.encode() not in blob
    assert secret not in json.dumps(gateway.drain_records())


# ----- reasoning models and provider blocks ---------------------------------------------------

# The key of this request before the reasoning controls existed (computed at that version):
# an entry without them must keep every cache key, or every cached answer would be re-bought.
_OLD_KEY = "6aa4a44eba98a76f06115187303dc4642706a618b3531d44c7c5edf2b1593141"


def _spec_key(spec):
    return cache_key(model=spec.model, api_base=spec.api_base, messages=msgs("hi"), prompt=None,
                     params=spec.generation_params(), schema={"type": "object"},
                     structured=spec.structured, sample_key=None)


def test_reasoning_controls_enter_the_cache_key_only_when_set():
    from tasks.benchmarks.carryon.keys import judgment_set_id

    base = model_spec("m", "http://127.0.0.1:1/v1", **ENTRY)
    assert _spec_key(base) == _OLD_KEY
    assert "reasoning_effort" not in base.generation_params() and "thinking" not in base.generation_params()
    assert judgment_set_id("benutil", [base], "pv", "cv", {"history": False}) == (
        "benutil-c7eeaca1d8f257e3")  # as before
    low, high = replace(base, reasoning_effort="low"), replace(base, reasoning_effort="high")
    budget = replace(base, thinking_budget=512)
    keys = {_spec_key(s) for s in (base, low, high, budget, replace(base, thinking_budget=1024))}
    assert len(keys) == 5
    assert budget.generation_params()["thinking"] == {"type": "enabled", "budget_tokens": 512}


def test_reasoning_controls_from_config(tmp_path):
    import yaml

    from tasks.config import ConfigError, load_config
    from tests.support.factories import base_config

    cfg = base_config("http://127.0.0.1:1/v1", tmp_path)
    cfg["models"]["safety_judge"] = {"model": "openai/j", "reasoning_effort": "minimal",
                                     "thinking_budget": 256, "max_tokens": 2048}
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    spec = load_config(path).role_spec("safety_judge")
    assert spec.reasoning_effort == "minimal" and spec.thinking_budget == 256
    assert load_config(path).role_spec("benutil_judge").reasoning_effort is None
    cfg["models"]["safety_judge"]["reasoning_effort"] = "extreme"
    path.write_text(yaml.safe_dump(cfg))
    with pytest.raises(ConfigError, match="reasoning_effort"):
        load_config(path)


def test_reasoning_params_are_sent_and_tokens_recorded(gateway, llm_server):
    llm_server.scripts["judge"] = lambda body: answer(json.dumps({"fulfilled": True, "evidence": "e"}),
                                                      reasoning_tokens=40)
    s = spec_for(llm_server, reasoning_effort="low", thinking_budget=100, max_tokens=400)
    r = run(gateway.chat(s, "judge", msgs("x"), schema=Verdict))
    assert r.ok and r.reasoning_tokens == 40
    body = llm_server.requests[-1]["body"]
    assert body["reasoning_effort"] == "low"
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 100}
    rec = gateway.drain_records()
    assert rec[0]["reasoning_tokens"] == 40
    hit = run(gateway.chat(s, "judge", msgs("x"), schema=Verdict))
    assert hit.cached and hit.reasoning_tokens == 40


def test_answer_lost_to_reasoning_is_its_own_kind(gateway, llm_server):
    from tests.support.llm_server import answer

    for i, a in enumerate((answer("", "length", 300), answer(None, "stop", 12), answer("", "length"))):
        llm_server.scripts["t"] = lambda body, a=a: a
        r = run(gateway.chat(spec_for(llm_server, thinking_budget=300), "t", msgs(f"x{i}")))
        assert not r.ok and r.error_kind == "reasoning_exhausted", (i, r.error)
        assert r.attempts == 1  # not retried: the same budget would be spent the same way
    recs = {r["call_hash"]: r for r in gateway.drain_records()}
    assert sorted(r["reasoning_tokens"] for r in recs.values()) == [0, 12, 300]
    assert all(r["error"].startswith("reasoning_exhausted:") for r in recs.values())
    # Empty without reasoning and a normal finish stays empty_output.
    llm_server.scripts["t"] = lambda body: answer("", "stop")
    assert run(gateway.chat(spec_for(llm_server), "t", msgs("y"))).error_kind == "empty_output"


def test_provider_blocks_are_content_blocked_not_retried(gateway, llm_server, tmp_path):
    from tests.support.llm_server import answer, content_policy_error

    s = spec_for(llm_server)
    for i, script in enumerate((lambda body: answer(None, "content_filter"),
                                lambda body: answer("Here is how to", "content_filter"),
                                lambda body: content_policy_error(),
                                # Azure-style code that litellm leaves as a plain bad request
                                lambda body: web.json_response({"error": {
                                    "message": "The response was filtered", "code": "content_filter",
                                    "type": "invalid_request_error"}}, status=400))):
        llm_server.scripts["targets"] = script
        llm_server.reset()
        r = run(gateway.chat(s, "targets", msgs(f"b{i}")))
        assert not r.ok and r.error_kind == "content_blocked", (i, r.error_kind, r.error)
        assert r.content is None and llm_server.counts["total"] == 1  # asked once
        # Not cached: a later run asks again.
        again = run(gateway.chat(s, "targets", msgs(f"b{i}")))
        assert not again.cached and llm_server.counts["total"] == 2
    recs = gateway.drain_records()
    assert all(r["error"].startswith("content_blocked:") for r in recs)
