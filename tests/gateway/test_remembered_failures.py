"""Deterministic junk is remembered, transient failures are not: a rerun does not pay again
for a temperature-0 call that failed with an invalid or empty answer, ``--retry-failed``
sends exactly those again, and a server error, a 429 or a timeout is always retried."""

from __future__ import annotations

import asyncio
import json

import yaml
from aiohttp import web

from flows.carryon import carryon
from tasks.gateway import Gateway
from tests.support.gateway import Verdict, msgs, spec_for
from tests.support.toy import _config, _script


def _gateway(tmp_path, run_id: str, retry_failed: bool = False) -> Gateway:
    g = Gateway(tmp_path / "cache", run_id)
    g.cfg.backoff_base_s, g.cfg.backoff_max_s = 0.01, 0.1
    g.retry_failed = retry_failed
    return g


def _call(g, spec, text, schema=None):
    try:
        return asyncio.run(g.chat(spec, "judge", msgs(text), schema=schema))
    finally:
        g.close()


def test_deterministic_junk_is_remembered_and_retry_failed_sends_it_again(tmp_path, llm_server):
    llm_server.scripts["judge"] = lambda body: '{"fulfilled": "perhaps"'  # never valid
    spec = spec_for(llm_server)
    first = _call(_gateway(tmp_path, "r1"), spec, "x", Verdict)
    sent = llm_server.counts["total"]
    assert first.error_kind == "invalid_output" and sent == first.attempts >= 1

    again = _call(_gateway(tmp_path, "r2"), spec, "x", Verdict)
    assert llm_server.counts["total"] == sent  # not sent again
    assert not again.ok and again.parsed is None and again.error_kind == "invalid_output"
    assert "remembered from an earlier run" in again.error

    retried = _call(_gateway(tmp_path, "r3", retry_failed=True), spec, "x", Verdict)
    assert llm_server.counts["total"] == 2 * sent  # exactly that call, with its re-asks
    assert retried.error_kind == "invalid_output"

    # Once the model answers validly, the answer replaces the remembered failure.
    llm_server.scripts["judge"] = lambda body: '{"fulfilled": true, "evidence": "x"}'
    ok = _call(_gateway(tmp_path, "r4", retry_failed=True), spec, "x", Verdict)
    assert ok.ok and _call(_gateway(tmp_path, "r5"), spec, "x", Verdict).cached


def test_transient_and_sampled_failures_are_always_sent_again(tmp_path, llm_server):
    llm_server.scripts["judge"] = lambda body: web.json_response({"error": {"message": "down"}},
                                                                 status=503)
    spec = spec_for(llm_server, max_retries=1)
    assert _call(_gateway(tmp_path, "r1"), spec, "x").error_kind == "retries_exhausted"
    assert llm_server.counts["total"] == 2
    assert _call(_gateway(tmp_path, "r2"), spec, "x").error_kind == "retries_exhausted"
    assert llm_server.counts["total"] == 4  # a server error is retried on every run

    llm_server.scripts["judge"] = lambda body: ""
    hot = spec_for(llm_server, temperature=1.0)
    assert _call(_gateway(tmp_path, "r3"), hot, "y").error_kind == "empty_output"
    before = llm_server.counts["total"]
    assert _call(_gateway(tmp_path, "r4"), hot, "y").error_kind == "empty_output"
    assert llm_server.counts["total"] > before  # a sampled call may answer next time


def test_a_rerun_of_a_run_with_junk_sends_nothing(prefect_harness, llm_server, tmp_path):
    # The toy benchmark; its grader answers junk for the wrong answer "5" (1 of 6 episodes).
    _script(llm_server)
    grade = llm_server.scripts["toy_grader"]
    llm_server.scripts["toy_grader"] = lambda body: (
        "not json at all" if "\n5\nEND" in body["messages"][0]["content"] else grade(body))
    path = _config(tmp_path, llm_server.api_base)
    cfg = yaml.safe_load(path.read_text())
    cfg["gateway"]["max_parse_retries"] = 1
    path.write_text(yaml.safe_dump(cfg))

    first = asyncio.run(carryon(config=str(path)))
    assert first["failures"] == {"toy_grader": 1}
    junk_calls = 2  # the call and its one re-ask
    sent = llm_server.counts["total"]

    second = asyncio.run(carryon(config=str(path)))
    assert llm_server.counts["total"] == sent and second["requests"] == 0
    assert second["remembered_failures"] == {"toy_grader": 1} and not second["failures"]
    # Its stages had no failure of their own: the next rerun skips them.
    third = asyncio.run(carryon(config=str(path)))
    assert all("unchanged_since" in third["stages"][s] for s in ("episodes", "verdicts"))

    retried = asyncio.run(carryon(config=str(path), retry_failed=True))
    assert llm_server.counts["total"] - sent == junk_calls  # exactly the failed one
    assert retried["failures"] == {"toy_grader": 1}
    assert json.dumps(retried["stages"]["verdicts"]).count("unchanged_since") == 0
