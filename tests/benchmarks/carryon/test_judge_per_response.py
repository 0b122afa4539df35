"""CarryOnBench judged per response (``judging.benutil_mode: per_response``) on the hand-made
warehouse of tests/support/judging.py: with a judge that answers each item as the per-item
judge does, every view reads the same rows as under the per-item mode, from a tenth-ish of the
calls, and the set records its mode."""

from __future__ import annotations

import json

from tests.support.judging import _between, keyword_judge, quote, response_of, run_all, seed


def per_response_judge(body):
    """keyword_judge's verdicts, all of a checklist in one answer (the ids its schema asks)."""
    if "<<<BEGIN ITEM " in body["messages"][0]["content"]:
        return keyword_judge(body)
    prompt = body["messages"][0]["content"]
    response = response_of(body)
    lines = _between(prompt, "<<<BEGIN CHECKLIST ", "<<<END CHECKLIST ").split(">>>", 1)[1]
    questions = dict(line.split(": ", 1) for line in lines.strip().splitlines())
    out = []
    for unit, question in questions.items():
        word = "alpha" if "alpha" in question else "beta"
        out.append({"id": unit, "evidence": quote(word, response),
                    "fulfilled": word in response})
    return json.dumps({"items": out})


VIEWS = {
    "selected_item_judgments": "SELECT conversation_id, position, item_id, fulfilled, evidence, reason, "
                      "checklist_version, model_turn FROM selected_item_judgments ORDER BY ALL",
    "turn_scores": "SELECT * FROM turn_scores ORDER BY ALL",
    "conversation_scores": "SELECT * FROM conversation_scores ORDER BY ALL",
    "model_summary": "SELECT * FROM model_summary ORDER BY ALL",
    "judgment_coverage": "SELECT * FROM judgment_coverage ORDER BY ALL",
}


def test_per_response_mode_gives_the_per_item_views(make_ctx, llm_server):
    llm_server.scripts["benutil_judge"] = per_response_judge
    llm_server.scripts["safety_judge"] = lambda body: json.dumps({"score": 2, "reason": "info"})
    got = {}
    for mode in ("per_item", "per_response"):
        ctx = make_ctx(judging={"benutil_mode": mode})  # the same home both times
        if mode == "per_item":
            seed(ctx.warehouse)
        before = llm_server.counts["benutil_judge"]
        sets, _ = run_all(ctx)
        calls = llm_server.counts["benutil_judge"] - before
        got[mode] = ({name: ctx.warehouse.query(sql) for name, sql in VIEWS.items()}, calls,
                     sets["benutil"])
    (item_views, item_calls, item_set), (resp_views, resp_calls, resp_set) = got.values()
    # 4 distinct responses x 2 items per item; 4 per response.
    assert (item_calls, resp_calls) == (8, 4)
    assert resp_set != item_set
    wh = ctx.warehouse
    # Both sets in one warehouse (the same home): the views read the latest, per response.
    [mode] = [r["mode"] for r in wh.query(
        "SELECT json_extract_string(args, '$.mode') AS mode FROM verdict_sets "
        "WHERE judgment_set_id = ?", [resp_set])]
    assert mode == "per_response"
    assert {r["judgment_set_id"] for r in wh.query(
        "SELECT judgment_set_id FROM selected_judgment_sets WHERE kind = 'benutil'")} == {resp_set}
    assert resp_views == item_views
    assert len(resp_views["selected_item_judgments"]) == 12  # one verdict per turn and item
    assert all(r["evidence"] for r in resp_views["selected_item_judgments"])
