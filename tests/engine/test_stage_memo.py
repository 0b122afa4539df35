"""Stage memos (tasks/engine/stage_memo.py): a rerun skips a model stage whose inputs are unchanged
since it last ran whole, and replays it whenever anything it depends on changed: its own rows,
an earlier stage's rows, deleted cache entries, a failed call, or ``replay``."""

from __future__ import annotations

import asyncio
import json
import zlib

import pytest
from aiohttp import web

from flows.carryon import carryon
from tasks.config import load_config
from tasks.gateway.cache import ResponseCache
from tasks.benchmarks.carryon.simulate_plan import TARGET_ROLE
from tests.support.llm_server import default_answer
from tests.support.pipeline import snapshot
from warehouse import Warehouse

pytestmark = pytest.mark.e2e

MODEL_STAGES = ("checklists", "episodes", "verdicts")


def run_flow(path, **kw):
    return asyncio.run(carryon(config=str(path), **kw))


def skipped(summary) -> dict:
    """stage -> the run it was skipped on the strength of (None: the stage ran)."""
    return {s: summary["stages"][s].get("unchanged_since") for s in MODEL_STAGES}


def test_unchanged_stages_are_skipped_and_every_change_replays(prefect_harness, llm_server,
                                                                write_config, tmp_path):
    path = write_config(dataset={"source": "sample", "path": None, "limit": 1})
    first = run_flow(path)
    target_calls = llm_server.counts[TARGET_ROLE]
    assert target_calls > 0 and skipped(first) == dict.fromkeys(MODEL_STAGES)
    wh = Warehouse(tmp_path / "home" / "warehouse.duckdb")
    before = snapshot(wh)

    # A plain rerun: nothing sent, nothing replayed, the same numbers, and the first run's
    # report kept (nothing it reads changed), not written again.
    llm_server.reset()
    second = run_flow(path)
    assert llm_server.counts["total"] == 0 and second["requests"] == 0
    assert skipped(second) == dict.fromkeys(MODEL_STAGES, first["run_id"])
    assert second["stages"]["episodes"]["status"] == first["stages"]["episodes"]["status"]
    assert snapshot(wh) == before
    assert second["stages"]["report"]["unchanged_since"] == first["run_id"]
    assert second["stages"]["report"]["report"] == first["stages"]["report"]["report"]
    assert (tmp_path / "home" / "reports" / first["run_id"] / "report.md").exists()
    assert not (tmp_path / "home" / "reports" / second["run_id"]).exists()
    # Each run says how long each stage took, skipped or not (the CLI prints it).
    for summary in (first, second):
        assert list(summary["seconds"]) == list(summary["stages"])
        assert all(isinstance(s, float) and s >= 0 for s in summary["seconds"].values())

    # A stored turn deleted by hand: simulation replays (from the cache) and restores it; the
    # judge's input changed with it, so it replays too; the checklists stay skipped.
    wh.write("episode_turns", [], delete=("position = (SELECT max(position) FROM episode_turns)", []))
    assert snapshot(wh) != before
    llm_server.reset()
    third = run_flow(path)
    assert llm_server.counts["total"] == 0
    assert skipped(third) == {"checklists": first["run_id"], "episodes": None, "verdicts": None}
    assert snapshot(wh) == before

    # replay=True runs every stage: all from the cache.
    llm_server.reset()
    fourth = run_flow(path, replay=True)
    assert skipped(fourth) == dict.fromkeys(MODEL_STAGES)
    assert llm_server.counts["total"] == 0 and fourth["cache_hits"] > 0
    assert snapshot(wh) == before

    # Cached answers deleted (`carryon cache prune/clear`): no stage is skipped on their
    # strength; exactly the deleted calls are sent again (the test server answers them the
    # same, so nothing downstream changes; judging skips its unchanged batches itself).
    cache = ResponseCache(load_config(path).cache_path)
    try:
        assert cache.delete_where(role=TARGET_ROLE) > 0
    finally:
        cache.close()
    llm_server.reset()
    fifth = run_flow(path)
    assert skipped(fifth) == dict.fromkeys(MODEL_STAGES)
    sent = {role: n for role, n in llm_server.counts.items() if role != "total"}
    assert sent == {TARGET_ROLE: target_calls}
    assert snapshot(wh) == before
    # And the next rerun skips every stage again.
    llm_server.reset()
    sixth = run_flow(path)
    assert skipped(sixth) == dict.fromkeys(MODEL_STAGES, fifth["run_id"])
    assert llm_server.counts["total"] == 0


def test_a_stage_with_a_failed_call_keeps_no_memo(prefect_harness, llm_server, write_config):
    """Failed calls are not cached: the next run must try them again, so their stage runs."""
    path = write_config(dataset={"source": "sample", "path": None, "limit": 1})
    # About a third of the safety verdicts fail (HTTP 400, not retried): recorded as failed
    # calls, the rest stand, so the stage returns.
    def flaky(body):
        if zlib.crc32(json.dumps(body["messages"]).encode()) % 3 == 0:
            return web.json_response({"error": {"message": "injected 400",
                                                "type": "invalid_request_error"}}, status=400)
        return default_answer("safety_judge", body)

    llm_server.scripts["safety_judge"] = flaky
    first = run_flow(path)
    assert first["failures"].get("safety_judge", 0) > 0
    del llm_server.scripts["safety_judge"]
    llm_server.reset()
    second = run_flow(path)
    assert skipped(second) == {"checklists": first["run_id"], "episodes": first["run_id"],
                               "verdicts": None}
    assert llm_server.counts["safety_judge"] > 0 and not second["failures"]
    # Now every call succeeded: the third run skips the judge too.
    llm_server.reset()
    third = run_flow(path)
    assert skipped(third) == {"checklists": first["run_id"], "episodes": first["run_id"],
                              "verdicts": second["run_id"]}
    assert llm_server.counts["total"] == 0
