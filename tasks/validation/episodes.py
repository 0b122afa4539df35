"""What validation reads of any benchmark's run: its completed episodes (the conversations a
sample is drawn from), an episode's turns as the page shows them, and the checklist questions
Ben-Util judged on it (the latest verdict set of its item: warehouse/views_engine.sql B1)."""

from __future__ import annotations

from tasks.core.items import Item
from tasks.validation.errors import ValidationError

EPISODES = """
SELECT episode_id AS conversation_id, target, item_id, coalesce(script, condition) AS flow,
       condition, n_turns AS length
FROM episodes WHERE benchmark = ? AND status = 'completed'
ORDER BY episode_id"""


def completed_episodes(wh, benchmark: str) -> list[dict]:
    return wh.query(EPISODES, [benchmark])


def turns(wh, episode_id: str, upto: int | None = None) -> list[dict]:
    rows = wh.query("SELECT position, role, model_turn, content FROM episode_turns "
                    "WHERE episode_id = ? ORDER BY position", [episode_id])
    return [r for r in rows if upto is None or r["position"] <= upto]


def checklist(wh, spec, episode_id: str) -> list[dict]:
    """The checklist questions Ben-Util judged on the episode ({item_id, question}), in order;
    their text from its item as the episodes stage stored it (the judge's ``unit_texts``)."""
    rows = wh.query(
        "SELECT DISTINCT split_part(v.measure, ':', 2) AS unit, e.item_id FROM verdicts v "
        "JOIN episodes e USING (episode_id) JOIN item_verdict_sets s "
        "ON s.judgment_set_id = v.judgment_set_id AND s.benchmark = e.benchmark "
        "AND s.item_id = e.item_id WHERE v.episode_id = ? AND s.kind = 'benutil' "
        "AND v.measure LIKE 'fulfilled:%'", [episode_id])
    if not rows:
        return []
    stored = wh.query("SELECT * FROM bench_items WHERE benchmark = ? AND item_id = ?",
                      [spec.name, rows[0]["item_id"]])
    judges = [j for _, j in spec.judge_objects() if j.kind == "benutil"]
    texts = judges[0].unit_texts(Item.from_row(stored[0])) if stored and judges else {}
    out = []
    for r in rows:
        if not r["unit"].isdigit():  # annotations key a question by a number
            raise ValidationError(f"episode {episode_id}: checklist item {r['unit']!r} is not a "
                                  "number; validation labels questions by number")
        out.append({"item_id": int(r["unit"]), "question": texts.get(r["unit"])})
    return sorted(out, key=lambda i: i["item_id"])


def conversation(wh, spec, episode_id: str, upto: int | None, with_checklist: bool) -> dict:
    ts = turns(wh, episode_id, upto)
    return {"conversation_id": episode_id, "query": ts[0]["content"] if ts else None,
            "turns": ts, "items": checklist(wh, spec, episode_id) if with_checklist else []}
