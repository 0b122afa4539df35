"""Ben-Util's agreement with people (B.3.1): ``pairs`` (25) pairs of completed episodes that
start from the same item and differ in length, script (or condition) and target, at most one
pair per item while items last; every annotator marks every checklist question of both
conversations present or absent, compared with Ben-Util's verdict (a question fulfilled by
any turn of the conversation)."""

from __future__ import annotations

from collections import defaultdict

from tasks.core.registry import validation_kind
from tasks.validation import ValidationKind
from tasks.validation import agreement as ag
from tasks.validation.episodes import completed_episodes
from tasks.validation.report import labels_of, pct


def draw_pairs(convs: list[dict], rng, pairs: int = 25) -> tuple[list[dict], list[str]]:
    by_item: dict[str, list[dict]] = defaultdict(list)
    for c in convs:
        by_item[c["item_id"]].append(c)
    cands: dict[str, list[tuple]] = {}
    for q, cs in sorted(by_item.items()):
        ps = [(a, b) for i, a in enumerate(cs) for b in cs[i + 1:]
              if a["length"] != b["length"] and a["flow"] != b["flow"] and a["target"] != b["target"]]
        if ps:
            cands[q] = ps
    items = sorted(cands)
    rng.shuffle(items)
    out, used = [], set()
    while len(out) < pairs and any(cands[q] for q in items):
        for q in items:  # one pair per item per round
            if len(out) >= pairs or not cands[q]:
                continue
            a, b = cands[q].pop(rng.randrange(len(cands[q])))
            if (a["conversation_id"], b["conversation_id"]) in used:
                continue
            used.add((a["conversation_id"], b["conversation_id"]))
            if rng.random() < 0.5:
                a, b = b, a
            out.append({"unit_id": f"{a['conversation_id']}|{b['conversation_id']}",
                        "conversation_id": a["conversation_id"], "conversation_id_b": b["conversation_id"],
                        "stratum": q})
    notes = [f"{len(out)} pairs from {len({u['stratum'] for u in out})} items"
             + ("" if len(out) >= pairs else f" (scaled down: the run has only {len(out)} eligible pairs; "
                                              f"full scale is {pairs})")]
    return out, notes


def why_no_pairs(convs: list[dict]) -> str:
    """Why no pair could be drawn, in the terms of what the run has."""
    if not convs:
        return "no completed episodes of this benchmark yet: run it first"
    lengths = sorted({c["length"] for c in convs})
    targets = sorted({c["target"] for c in convs})
    if len(lengths) < 2:
        return (f"a pair compares two conversations of different lengths, and every "
                f"conversation of this run has {lengths[0]} turns: run two lengths or more")
    if len(targets) < 2:
        return (f"a pair compares two targets' conversations, and this run has one target "
                f"({targets[0]}): run two targets or more")
    return "no item has two conversations that differ in length, script and target"


@validation_kind("benutil")
class BenUtil(ValidationKind):
    name, asks, judge = "benutil", "checklist", "benutil"
    scale = [[1, "present"], [0, "absent"]]
    instructions = ("For each conversation, mark every checklist item present (the assistant's "
                    "answers cover it somewhere) or absent.")

    def draw(self, wh, spec, rng, options):
        return draw_pairs(completed_episodes(wh, spec.name), rng, options.get("pairs", 25))

    def empty(self, wh, spec) -> str:
        return why_no_pairs(completed_episodes(wh, spec.name))

    def results(self, wh, sample_id: str) -> dict:
        labels: dict[tuple, dict] = {}
        for r in labels_of(wh, sample_id):
            labels.setdefault((r["unit_id"], r["conversation_id"], r["item_id"]), {})[r["annotator"]] = r["value"]
        # The judge's: a question is fulfilled in a conversation when any turn fulfilled it
        # (each judge kind's latest set per item, B1).
        judge_rows = wh.query("""
            SELECT v.episode_id AS conversation_id,
                   CAST(split_part(v.measure, ':', 2) AS INTEGER) AS item_id,
                   CAST(bool_or(v.value > 0) AS INTEGER) AS v
            FROM benutil_verdicts v
            WHERE v.kind = 'benutil' AND v.episode_id IN (
                SELECT conversation_id FROM validation_units WHERE sample_id = ?
                UNION SELECT conversation_id_b FROM validation_units WHERE sample_id = ?)
            GROUP BY ALL""", [sample_id, sample_id])
        jv = {(r["conversation_id"], r["item_id"]): r["v"] for r in judge_rows}
        judge = {k: jv.get((k[1], k[2])) for k in labels}
        return {"n_items": len(labels), "between_annotators": ag.between_annotators(labels),
                "with_judge": ag.with_judge(labels, judge)}

    def markdown(self, r: dict) -> list[str]:
        b = r["between_annotators"]
        return ([f"- checklist items labelled: {r['n_items']}",
                 f"- agreement between annotators: {pct(b['pooled'])} of {b['n']} item pairs"]
                + [f"- {a} with the judge: {pct(v['share'])} of {v['n']} items"
                   for a, v in r["with_judge"].items()])
