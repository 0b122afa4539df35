"""The loopback fakes refuse what the providers refuse (tests/support/llm_batch.py,
llm_providers.py; docs/batch.md names the source of each rule), live and inside a batch, and
bill nothing they refused: a fake that accepts anything would pass the lines the old wires
sent."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.support.llm_batch import openai_refusal
from tests.support.llm_providers import anthropic_refusal, gemini_refusal

MSG = [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize("body, refused", [
    ({"model": "gpt-5.2", "max_tokens": 5}, "max_tokens"),
    ({"model": "o3", "max_tokens": 5}, "max_tokens"),
    ({"model": "gpt-5.2", "max_completion_tokens": 5, "reasoning_effort": "none",
      "temperature": 0.0}, None),
    ({"model": "gpt-5.2", "max_completion_tokens": 5, "reasoning_effort": "high",
      "temperature": 0.0}, "temperature"),
    ({"model": "gpt-5-mini", "max_completion_tokens": 5, "reasoning_effort": "none"},
     "reasoning_effort"),
    ({"model": "gpt-5-mini", "max_completion_tokens": 5, "temperature": 1.0}, None),
    ({"model": "gpt-4o", "max_tokens": 5, "temperature": 0.0}, None),
])
def test_openai_refusals(body, refused):
    got = openai_refusal({**body, "messages": MSG})
    assert (got and got["error"]["param"]) == refused


@pytest.mark.parametrize("params, betas, refused", [
    ({"max_tokens": 5, "output_format": {"type": "json_schema", "schema": {}}}, set(), "output_format"),
    ({"max_tokens": 5, "output_format": {"type": "json_schema", "schema": {}}},
     {"structured-outputs-2025-11-13"}, None),
    ({"max_tokens": 5, "max_completion_tokens": 5}, set(), "max_completion_tokens"),
    ({}, set(), "max_tokens"),
    ({"max_tokens": 2048, "temperature": 0.0, "thinking": {"type": "enabled", "budget_tokens": 1024}},
     set(), "temperature"),
    ({"max_tokens": 1024, "thinking": {"type": "enabled", "budget_tokens": 1024}}, set(),
     "budget_tokens"),
])
def test_anthropic_refusals(params, betas, refused):
    got = anthropic_refusal({"model": "claude-sonnet-4-5", "messages": MSG, **params}, betas)
    assert (refused in got) if refused else got is None


@pytest.mark.parametrize("model, gen, refused", [
    ("gemini-2.5-flash", {"maxOutputTokens": 5, "thinkingConfig": {"thinkingBudget": 0}}, None),
    ("gemini-2.5-flash", {"max_tokens": 5}, "Unknown name"),
    ("gemini-2.5-flash", {"thinkingConfig": {"thinkingLevel": "low"}}, "not supported"),
    ("gemini-3-flash-preview", {"thinkingConfig": {"thinkingLevel": "low"}}, None),
    ("gemini-3-flash-preview", {"thinkingConfig": {"thinkingLevel": "low", "thinkingBudget": 9}},
     "Only one"),
])
def test_gemini_refusals(model, gen, refused):
    got = gemini_refusal(model, {"contents": [], "generationConfig": gen})
    assert (refused in got) if refused else got is None


def test_openai_batch_refuses_duplicate_ids_and_fails_mixed_files_and_refused_lines(llm_server):
    base = llm_server.api_base

    def upload(lines):
        data = "".join(json.dumps(x) + "\n" for x in lines).encode()
        r = httpx.post(f"{base}/files", files={"file": ("b.jsonl", data)}, data={"purpose": "batch"})
        return r.json()["id"]

    def line(cid, **body):
        return {"custom_id": cid, "method": "POST", "url": "/v1/chat/completions",
                "body": {"messages": MSG, **body}}

    def create(fid):
        return httpx.post(f"{base}/batches", json={"input_file_id": fid, "completion_window": "24h",
                                                   "endpoint": "/v1/chat/completions"})

    dup = create(upload([line("a", model="gpt-4o"), line("a", model="gpt-4o")]))
    assert dup.status_code == 400 and "custom_id" in dup.json()["error"]["message"]
    mixed = create(upload([line("a", model="gpt-4o"), line("b", model="gpt-4o-mini")])).json()
    polled = httpx.get(f"{base}/batches/{mixed['id']}").json()
    assert polled["status"] == "failed" and polled["errors"]["data"][0]["code"] == "mismatched_model"
    ok = create(upload([line("a", model="gpt-5.2", max_tokens=5),
                        line("b", model="gpt-5.2", max_completion_tokens=5)])).json()
    for _ in range(3):
        done = httpx.get(f"{base}/batches/{ok['id']}").json()
    assert done["status"] == "completed" and done["request_counts"] == \
        {"total": 2, "completed": 1, "failed": 1}
    err = httpx.get(f"{base}/files/{done['error_file_id']}/content").text
    assert json.loads(err)["response"]["status_code"] == 400
    assert [e["mode"] for e in llm_server.ledger] == ["batch"]  # the refused line billed nothing
    live = httpx.post(f"{base}/chat/completions", json={"model": "gpt-5.2", "messages": MSG,
                                                        "max_tokens": 5})
    assert live.status_code == 400 and live.json()["error"]["code"] == "unsupported_parameter"


def test_anthropic_batch_refuses_bad_ids_and_errors_a_request_without_its_beta(llm_server):
    url = f"{llm_server.anthropic_base}/v1/messages/batches"
    params = {"model": "claude-sonnet-4-5", "max_tokens": 5, "messages": MSG,
              "output_format": {"type": "json_schema", "schema": {"type": "object"}}}
    for ids in (["a", "a"], ["a b", "c"], ["x" * 65]):
        r = httpx.post(url, json={"requests": [{"custom_id": i, "params": params} for i in ids]})
        assert r.status_code == 400, ids
    made = httpx.post(url, json={"requests": [{"custom_id": "a", "params": params}]}).json()
    for _ in range(3):
        b = httpx.get(f"{url}/{made['id']}").json()
    assert b["request_counts"]["errored"] == 1
    (res,) = [json.loads(x) for x in httpx.get(b["results_url"]).text.splitlines() if x]
    assert res["result"]["error"]["error"]["type"] == "invalid_request_error"
    assert llm_server.ledger == []
    with_beta = httpx.post(url, json={"requests": [{"custom_id": "a", "params": params}]},
                           headers={"anthropic-beta": "structured-outputs-2025-11-13"}).json()
    for _ in range(3):
        b = httpx.get(f"{url}/{with_beta['id']}").json()
    assert b["request_counts"]["succeeded"] == 1 and len(llm_server.ledger) == 1


def test_gemini_batch_refuses_an_unknown_field_in_any_request(llm_server):
    url = f"{llm_server.gemini_base}/models/gemini-2.5-flash:batchGenerateContent"

    def create(gen):
        req = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}], "generationConfig": gen}
        return httpx.post(url, json={"batch": {"displayName": "carryon r cob1", "inputConfig": {
            "requests": {"requests": [{"request": req, "metadata": {"key": "a"}}]}}}})

    bad = create({"max_tokens": 5})
    assert bad.status_code == 400 and bad.json()["error"]["status"] == "INVALID_ARGUMENT"
    assert create({"maxOutputTokens": 5}).status_code == 200
