"""Every number a pipeline run leaves in its warehouse (``snapshot``: the views, the turns and
the count of item judgments), to compare two runs. Used by test_pipeline and test_stage_memo."""

from __future__ import annotations

NUMBERS = [
    "SELECT * FROM model_summary ORDER BY target",
    "SELECT * FROM conversation_scores ORDER BY conversation_id",
    "SELECT * FROM turn_scores ORDER BY conversation_id, turn_index",
    "SELECT conversation_id, position, role, move, content FROM turns ORDER BY 1, 2",
    "SELECT count(*) AS n FROM item_judgments",
]


def snapshot(wh):
    return [wh.query(q) for q in NUMBERS]
