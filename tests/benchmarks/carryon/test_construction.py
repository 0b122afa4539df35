"""Checklist construction as the report shows it (sizes, categories, dropped queries, answers
not used; the paper's Figure 15), on hand-computed data, and the one-population rule: only
queries with a checklist are simulated, the others are skipped with the step and reason."""

from __future__ import annotations

import asyncio
import datetime as dt
import json

from types import SimpleNamespace

import pytest

from tasks.bench import load_spec
from tasks.benchmarks.carryon.report import construction
from warehouse import Warehouse

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)


def _checklist(qid: str, cats: list[str], version: str, created=T0, capped_from=None) -> list[tuple]:
    items = [{"query_id": qid, "checklist_version": version, "item_id": i, "question": f"Q{i}?",
              "category": c, "source_answers": '["a"]'} for i, c in enumerate(cats, start=1)]
    return [("checklist_items", items),
            ("checklists", [{"query_id": qid, "checklist_version": version, "n_items": len(cats),
                             "created": created, "run_id": "r"}])]


@pytest.fixture
def wh(tmp_path):
    w = Warehouse(tmp_path / "w.duckdb").init()
    P, R, L = "Practical Advice", "Resource", "Legal Framework"
    batches = []
    # q1: 8 items (5 P, 3 R); an older version of q1 with 2 items must not count.
    batches += _checklist("q1", [P] * 5 + [R] * 3, "v1new", created=T0 + dt.timedelta(hours=1))
    batches += _checklist("q1", [P, P], "v1old")
    # q2: 23 items after the cap (the merger wrote 30); 20 L, 3 "Safety Consideration" (an old
    # warehouse's retired category).
    batches += _checklist("q2", [L] * 20 + ["Safety Consideration"] * 3, "v2")
    # q3: 2 items
    batches += _checklist("q3", [R, R], "v3")
    cq = [
        {"query_id": "q1", "n_answers": 3, "n_harmless": 3, "kept": True, "checklist_version": "v1new"},
        {"query_id": "q2", "n_answers": 3, "n_harmless": 3, "kept": True, "checklist_version": "v2",
         "capped_from": 30},
        {"query_id": "q3", "n_answers": 3, "n_harmless": 3, "kept": True, "checklist_version": "v3"},
        {"query_id": "q4", "n_answers": 3, "n_harmless": 1, "kept": False, "step": "guard",
         "reason": "1 harmless answer(s) < min_harmless 3"},
        {"query_id": "q5", "n_answers": 0, "n_harmless": 0, "kept": False, "step": "intent",
         "reason": "no benign intent: api_error: x"},
        {"query_id": "q6", "n_answers": 3, "n_harmless": 3, "kept": False, "step": "merge",
         "reason": "merge failed: truncated: the answer reached max_tokens (256)"}]
    keys = ("query_id", "n_answers", "n_harmless", "kept", "step", "reason", "checklist_version", "capped_from")
    batches.append(("checklist_queries", [{k: r.get(k) for k in keys} for r in cq]))
    batches.append(("queries", [{"query_id": f"q{i}", "source": "sample", "category": f"cat{i}",
                                 "query": f"query {i}"} for i in range(1, 7)]))
    batches.append(("ensemble_answers", [
        {"query_id": "q4", "answer_id": "a", "model": "m", "answer": "cut", "error": "truncated: x"},
        {"query_id": "q4", "answer_id": "b", "model": "m", "answer": None, "error": "api_error: y"}]))
    gv = [("q4", "c", False, "harmful response"), ("q4", "d", False, "refusal"),
          ("q4", "e", False, "refusal"), ("q4", "f", True, None),
          ("q1", "a", False, "guard verdict unparseable: no line"), ("q1", "b", True, None)]
    batches.append(("guard_verdicts", [{"query_id": q, "answer_id": a, "model": "g", "mode": "chat",
                                        "kept": k, "reason": r} for q, a, k, r in gv]))
    w.write_many(batches)
    return w


def test_load_and_stats_hand_computed(wh, tmp_path):
    extra = construction.load(wh)
    json.dumps(extra)  # plain data: the report may store it as is
    assert [(r["query_id"], r["n_items"], r["capped_from"]) for r in extra["per_query"]] == \
        [("q1", 8, None), ("q2", 23, 30), ("q3", 2, None)]
    # dropped queries in step order, with the query's category
    assert [(r["query_id"], r["category"], r["step"]) for r in extra["dropped"]] == \
        [("q5", "cat5", "intent"), ("q4", "cat4", "guard"), ("q6", "cat6", "merge")]
    assert construction.dropped_queries(wh) == extra["dropped"]

    st = {s.key: s for s in construction.stats(extra)}
    sizes = st["checklist_sizes"].table.iloc[0].to_dict()
    # 8, 23, 2: min 2, mean 11, median 8, max 23; 2 of 3 within 7..23; one capped
    assert sizes == {"checklists": 3, "min": 2, "mean": 11.0, "median": 8.0, "max": 23,
                     "in_7_23_pct": 66.7, "capped": 1}
    hist = st["checklist_size_histogram"].table
    assert hist.to_dict("records") == [
        {"items": "1-6", "queries": 1}, {"items": "7-10", "queries": 1}, {"items": "11-14", "queries": 0},
        {"items": "15-18", "queries": 0}, {"items": "19-23", "queries": 1}, {"items": "24+", "queries": 0}]
    assert st["checklist_sizes"].extra["histogram"] == hist.to_dict("records")

    cats = st["checklist_categories"].table.set_index("category")
    # 33 items in all: P 5, R 3 + 2 = 5, L 20, Safety 3 (retired: counted under its name)
    assert cats.loc["Practical Advice"].to_dict() == {
        "items": 5, "share_of_items_pct": round(500 / 33, 1), "mean_per_checklist": round(5 / 3, 2),
        "checklists_with": 1}
    assert cats.loc["Resource", "items"] == 5 and cats.loc["Resource", "checklists_with"] == 2
    assert cats.loc["Legal Framework", "mean_per_checklist"] == round(20 / 3, 2)
    assert cats.loc["Safety Consideration (retired)", "items"] == 3
    assert cats.loc["Case Study", "items"] == 0  # every current category is listed
    assert "Retired categories (Safety Consideration)" in st["checklist_categories"].note

    d = st["dropped_queries"]
    assert list(d.table["step"]) == ["intent", "guard", "merge"]
    assert "intent 1, guard 1, merge 1" in d.note

    ans = st["ensemble_answers_dropped"].table.set_index("reason")["answers"].to_dict()
    assert ans == {"failed call": 1, "harmful response": 1, "no verdict": 1, "refusal": 2, "truncated": 1}
    assert st["ensemble_answers_dropped"].note.startswith("2 answers were kept")

    out = construction.figure(extra, tmp_path / "fig15.png")
    assert out.exists() and out.stat().st_size > 5000


def test_empty_warehouse_has_notes_and_no_figure(tmp_path):
    w = Warehouse(tmp_path / "e.duckdb").init()
    extra = construction.load(w)
    st = construction.stats(extra)
    assert {s.key for s in st} == {"checklist_sizes", "checklist_size_histogram", "checklist_categories",
                                   "dropped_queries", "ensemble_answers_dropped"}
    assert all(s.table is None and s.note for s in st)
    # No figure is drawn on empty data: a sentence saying why instead (tasks/benchmarks/carryon/report/not_drawn.py).
    from tasks.benchmarks.carryon.report.not_drawn import NotDrawn

    with pytest.raises(NotDrawn, match="no query has a checklist"):
        construction.figure(extra, tmp_path / "f.png")
    assert not (tmp_path / "f.png").exists()


# ----- one population ----------------------------------------------------------------------------
def test_only_queries_with_an_intent_and_a_checklist_enter_simulation(wh):
    # The intents stage leaves out the queries without a benign intent; the checklists stage
    # those without a current checklist, each with the step and reason that left it out.
    from tasks.benchmarks.carryon.prepared import NO_INTENT_YET
    from tasks.core.items import Item, prepare_items
    from tasks.stages.checklists import NOT_BUILT_YET

    wh.write("intents", [{"query_id": q, "intent": f"intent {q}", "oracle_prompt": f"oracle {q}",
                          "model": "m", "basis": "context"} for q in ("q1", "q2", "q3", "q4", "q9")]
             + [{"query_id": "q5", "intent": None, "oracle_prompt": None, "model": "m",
                 "basis": "context", "error": "api_error: x"}])
    items = [Item(q, i, {"query": f"query {q}"}) for i, q in enumerate(("q1", "q2", "q3", "q4", "q5", "q6", "q9"))]
    ctx = SimpleNamespace(warehouse=wh, config=SimpleNamespace(spec=load_spec("carryon")))
    ready, left = prepare_items(ctx, items)
    assert [i.item_id for i in ready] == ["q1", "q2", "q3"]
    assert ready[0].prompts == {"query": "query q1", "oracle": "oracle q1"}
    assert ready[0].hidden["intent"] == "intent q1"
    assert [q["question"] for q in ready[0].hidden["checklist"]] == [f"Q{i}?" for i in range(1, 9)]
    assert ready[0].hidden["checklist_version"] == "v1new"  # the latest created
    assert left == {
        "q4": "no checklist: guard: 1 harmless answer(s) < min_harmless 3",
        "q5": "no benign intent: api_error: x",
        "q6": NO_INTENT_YET,
        "q9": NOT_BUILT_YET}


@pytest.mark.e2e
def test_episodes_play_only_checklisted_queries(prefect_harness, write_config, llm_server):
    from flows.episodes import episodes_flow
    from tasks.benchmarks.carryon.intents import ensure_intents
    from tasks.benchmarks.carryon.queries import run_queries
    from tasks.core.items import prepare_items, run_items
    from tasks.engine.run import finish_run, open_run
    from tasks.benchmarks.carryon.prepared import NO_INTENT_YET
    from tasks.stages.checklists.build import build_batch
    from tasks.stages.checklists.roles import resolve_roles

    path = write_config(dataset={"source": "sample", "path": None, "limit": 3},
                        flows={"lengths": [4], "bc_per_length": 1, "nc_per_length": 0})
    ctx = open_run(str(path), "intents,checklists", limit=2)
    try:
        queries = run_queries(ctx)
        first = queries[0].query
        asyncio.run(ensure_intents(ctx, run_queries(ctx)))

        def guard(body):  # every answer to the first query is a refusal
            refusal = first in body["messages"][0]["content"]
            return json.dumps({"harmful_request": False, "response_refusal": refusal,
                               "harmful_response": False})
        llm_server.scripts["wildguard"] = guard
        items, _ = prepare_items(ctx, run_items(ctx), until="checklists")
        work = ctx.config.spec.stage("checklists").work(ctx.config.spec, items)
        asyncio.run(build_batch(ctx, work, resolve_roles(ctx.config)))
    finally:
        finish_run(ctx, "succeeded")

    ctx = open_run(str(path), "episodes")
    try:
        summary = asyncio.run(episodes_flow(ctx.run_id))
    finally:
        finish_run(ctx, "succeeded")
    _, q2, _ = [q.query_id for q in run_queries(ctx)]
    # The checklists stage prepares the items: the one with a checklist is played; the
    # others are counted by the step and reason that left them without one.
    assert summary["items"] == 1
    # (the third query was not in the first two stages' --limit 2: it has no intent yet)
    (guard, n), = [(r, n) for r, n in summary["items_not_prepared"].items() if r != NO_INTENT_YET]
    assert n == 1 and guard.startswith("no checklist: guard: 0 harmless answer(s) < min_harmless 3")
    assert "3 refusal" in guard
    assert summary["items_not_prepared"][NO_INTENT_YET] == 1
    assert {r["query_id"] for r in ctx.warehouse.query("SELECT DISTINCT query_id FROM conversations")} == {q2}
