"""The cache key through the gateway, against the loopback server: two calls that differ only
in a field the key excludes share one request (the second is a cache hit); two that differ in
a field the key includes are two requests (the second is a miss). Counting the server's
requests checks the whole path (spec -> key -> cache), not just ``cache_key``."""

from __future__ import annotations

import asyncio

import pytest
from pydantic import BaseModel

from tasks.gateway import Gateway
from tests.support.gateway import Verdict, msgs, spec_for


class OtherVerdict(BaseModel):  # a different response schema
    fulfilled: bool
    quote: str


@pytest.fixture
def gw(tmp_path):
    g = Gateway(tmp_path / "cache", "run-key")
    yield g
    g.close()


def _call(gw, spec, *, role="t", text="q", schema=None, sample_key=None):
    return asyncio.run(gw.chat(spec, role, msgs(text), schema=schema, sample_key=sample_key))


def _pair(gw, server, a: dict, b: dict):
    """Call with a's then b's settings; return (first, second, requests the second made)."""
    first = _call(gw, a.pop("spec"), **a)
    assert first.ok and not first.cached, first.error
    before = server.counts["total"]
    second = _call(gw, b.pop("spec"), **b)
    assert second.ok, second.error
    return first, second, server.counts["total"] - before


# ----- excluded: the second call is a cache hit ------------------------------------------------
EXCLUDED = {
    "api_key_env": ({"api_key_env": "KEY_A"}, {"api_key_env": "KEY_B"}, {}),
    "timeout_s": ({"timeout_s": 5.0}, {"timeout_s": 61.0}, {}),
    "max_retries": ({"max_retries": 3}, {"max_retries": 0}, {}),
    "max_concurrency": ({"max_concurrency": 8}, {"max_concurrency": 1}, {}),
    "rpm": ({"rpm": None}, {"rpm": 600}, {}),
    "name_and_where": ({"name": "a", "where": "models.a"}, {"name": "b", "where": "models.b"}, {}),
    "role": ({}, {}, {"role": "other_role"}),
}


@pytest.mark.parametrize("field", sorted(EXCLUDED))
def test_excluded_field_is_a_cache_hit(field, gw, llm_server, monkeypatch):
    monkeypatch.setenv("KEY_A", "sk-aaaaaaaaaaaa")
    monkeypatch.setenv("KEY_B", "sk-bbbbbbbbbbbb")
    over_a, over_b, call_b = EXCLUDED[field]
    first, second, sent = _pair(gw, llm_server, {"spec": spec_for(llm_server, **over_a)},
                                {"spec": spec_for(llm_server, **over_b), **call_b})
    assert sent == 0 and second.cached and second.call_hash == first.call_hash
    assert second.content == first.content


def test_carryon_api_key_value_is_not_in_the_key(gw, llm_server, monkeypatch):
    s = spec_for(llm_server)
    monkeypatch.setenv("CARRYON_API_KEY", "sk-first-111111111")
    first = _call(gw, s)
    assert first.ok and llm_server.requests[-1]["headers"]["Authorization"] == "Bearer sk-first-111111111"
    monkeypatch.setenv("CARRYON_API_KEY", "sk-second-22222222")
    second = _call(gw, s)
    assert second.cached and second.call_hash == first.call_hash
    assert llm_server.counts["total"] == 1


def test_api_base_trailing_slash_and_host_case_are_the_same_key(gw, llm_server):
    base = llm_server.api_base  # http://127.0.0.1:PORT/v1
    first, second, sent = _pair(gw, llm_server, {"spec": spec_for(llm_server, api_base=base)},
                                {"spec": spec_for(llm_server, api_base=base + "/")})
    assert sent == 0 and second.cached and second.call_hash == first.call_hash
    upper = base.replace("http://", "HTTP://")
    third = _call(gw, spec_for(llm_server, api_base=upper))
    assert third.cached and third.call_hash == first.call_hash


def test_sample_key_is_ignored_at_temperature_zero(gw, llm_server):
    s = spec_for(llm_server, temperature=0.0)
    first, second, sent = _pair(gw, llm_server, {"spec": s, "sample_key": "conv-1"},
                                {"spec": s, "sample_key": "conv-2"})
    assert sent == 0 and second.cached


def test_same_sample_key_when_sampled_is_a_hit(gw, llm_server):
    s = spec_for(llm_server, temperature=0.7)
    _, second, sent = _pair(gw, llm_server, {"spec": s, "sample_key": "p1"}, {"spec": s, "sample_key": "p1"})
    assert sent == 0 and second.cached


# ----- included: the second call is a miss -------------------------------------------------------
def _included(server):
    base = server.api_base
    hot = {"temperature": 0.7}
    return {
        "model": ({}, {"model": "openai/test-other"}, {}, {}),
        "api_base_host": ({"api_base": base}, {"api_base": base.replace("127.0.0.1", "localhost")}, {}, {}),
        "messages": ({}, {}, {}, {"text": "q, reworded"}),
        "temperature": ({"temperature": 0.0}, {"temperature": 0.5}, {}, {}),
        "top_p": ({"top_p": 0.9}, {"top_p": 0.8}, {}, {}),
        "max_tokens": ({"max_tokens": 64}, {"max_tokens": 65}, {}, {}),
        "seed": ({"seed": 1}, {"seed": 2}, {}, {}),
        "stop": ({"stop": None}, {"stop": ("END",)}, {}, {}),
        "schema": ({}, {}, {"schema": Verdict}, {"schema": OtherVerdict}),
        "structured_mode": ({"structured": "json_schema"}, {"structured": "json_object"},
                            {"schema": Verdict}, {"schema": Verdict}),
        "sample_key_when_sampled": (hot, hot, {"sample_key": "p1"}, {"sample_key": "p2"}),
    }


INCLUDED = sorted(_included(type("S", (), {"api_base": "http://127.0.0.1:1/v1"})()))


@pytest.mark.parametrize("field", INCLUDED)
def test_included_field_is_a_miss(field, gw, llm_server):
    over_a, over_b, call_a, call_b = _included(llm_server)[field]
    first, second, sent = _pair(gw, llm_server, {"spec": spec_for(llm_server, **over_a), **call_a},
                                {"spec": spec_for(llm_server, **over_b), **call_b})
    assert sent == 1 and not second.cached and second.call_hash != first.call_hash
    # And each variant is then cached under its own key: repeating both sends nothing.
    again_a = _call(gw, spec_for(llm_server, **over_a), **call_a)
    again_b = _call(gw, spec_for(llm_server, **over_b), **call_b)
    assert again_a.cached and again_b.cached and llm_server.counts["total"] == 2
    assert again_a.call_hash == first.call_hash and again_b.call_hash == second.call_hash


def test_schema_less_and_schema_calls_differ(gw, llm_server):
    s = spec_for(llm_server)
    _, second, sent = _pair(gw, llm_server, {"spec": s}, {"spec": s, "schema": Verdict})
    assert sent == 1 and not second.cached


def test_every_included_field_is_tested():
    # A new generation parameter must get its own miss test here.
    s = spec_for(type("S", (), {"api_base": "http://x/v1"})())
    assert set(s.generation_params()) <= set(INCLUDED)
