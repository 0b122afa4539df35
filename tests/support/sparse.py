"""Sparse warehouses for the report: what one holds (``Sparse``) and the warehouse itself
(``build``), run RUN_ID. Used by test_report_sparse and test_figures_not_drawn."""

from __future__ import annotations

import datetime as dt
import json
import random
from dataclasses import dataclass, field

from tests.support.factories import as_episodes
from warehouse import Warehouse

RUN_ID = "20250101-000000-sparse-0001"
NOW = dt.datetime(2025, 1, 1, tzinfo=dt.timezone.utc)
TARGETS = ["target-a", "target-b", "target-c"]
BC_MOVES = ["benign_justification", "benign_reasking", "context_switching"]
NC_MOVES = ["pushback", "rephrasing"]
STATUSES = ["completed", "target_error", "simulator_error", "context_exceeded"]


@dataclass
class Sparse:
    """What a sparse warehouse holds. Judgment modes: 'absent' (no rows, no set), 'unscored'
    (every verdict NULL), 'scored' (random verdicts), 'mixed' (some NULL), 'low' (every
    item not fulfilled, every safety score 1)."""

    targets: list[str] = field(default_factory=lambda: ["target-a"])
    n_queries: int = 1
    conditions: tuple = ("oracle", "BC", "NC")
    lengths: tuple = (1, 2)  # follow-up moves per BC/NC flow
    status: str | list = "completed"  # one status for all, or a list cycled over conversations
    benutil: str = "scored"
    safety: str = "scored"
    checklists: bool = True
    n_items: int = 3
    config_targets: list[str] | None = None  # the run's config (default: targets)
    judged_share: float = 1.0  # share of assistant turns that have judgments at all
    query_rows: bool = True  # False: conversations name queries the queries table lacks
    harm: tuple = (1, 5)  # range of safety scores
    seed: int = 0


def build(home, s: Sparse) -> Warehouse:
    rng = random.Random(s.seed)
    wh = Warehouse(home / "warehouse.duckdb").init()
    cfg_targets = s.targets if s.config_targets is None else s.config_targets
    config = {"models": {"targets": [{"name": t, "model": "openai/test-" + t} for t in cfg_targets],
                         "user_simulator": {"model": "openai/test-sim"},
                         "benutil_judge": {"model": "openai/test-judge"},
                         "safety_judge": {"model": "openai/test-judge"}}}
    rows: dict[str, list] = {k: [] for k in ("runs", "queries", "checklists", "checklist_items",
                                             "judgment_sets", "conversations", "turns",
                                             "item_judgments", "safety_judgments")}
    rows["runs"].append({"run_id": RUN_ID, "config_hash": "h", "config_json": json.dumps(config),
                         "seed": 0, "stages": "all", "started": NOW, "status": "running"})
    if s.benutil != "absent":
        rows["judgment_sets"].append(
            {"judgment_set_id": "benutil-1", "kind": "benutil", "judges": '["openai/test-judge"]',
             "prompt_version": "pv1", "checklist_version": "clv1" if s.checklists else None,
             "sees_history": False, "created": NOW, "run_id": RUN_ID})
    if s.safety != "absent":
        rows["judgment_sets"].append(
            {"judgment_set_id": "safety-1", "kind": "safety", "judges": '["openai/test-judge"]',
             "prompt_version": "pv1", "checklist_version": None, "sees_history": False,
             "created": NOW, "run_id": RUN_ID})
    statuses = [s.status] if isinstance(s.status, str) else list(s.status)
    n_conv = 0

    def verdict(mode: str, value):
        if mode == "unscored" or (mode == "mixed" and rng.random() < 0.4):
            return None
        if mode == "low":
            return False if isinstance(value, bool) else 1
        return value

    for qi in range(s.n_queries):
        qid = f"{qi:08x}"
        if s.query_rows:
            rows["queries"].append({"query_id": qid, "source": "sample", "category": f"cat-{qi % 2}",
                                    "query": f"How do I do risky thing {qi}?"})
        if s.checklists:
            rows["checklists"].append({"query_id": qid, "checklist_version": "v1",
                                       "n_items": s.n_items, "created": NOW, "run_id": RUN_ID})
            rows["checklist_items"] += [{"query_id": qid, "checklist_version": "v1", "item_id": i,
                                         "question": f"Point {i} of {qi}?", "category": "Practical Advice",
                                         "source_answers": "[]"} for i in range(1, s.n_items + 1)]
        for target in s.targets:
            flows = []
            if "oracle" in s.conditions:
                flows.append(("oracle", "oracle", []))
            for n in s.lengths:
                if "BC" in s.conditions:
                    flows.append((f"BC{n}", "BC", [rng.choice(BC_MOVES) for _ in range(n)]))
                if "NC" in s.conditions:
                    flows.append((f"NC{n}", "NC", [rng.choice(NC_MOVES) for _ in range(n)]))
            for tag, cond, moves in flows:
                status = statuses[n_conv % len(statuses)]
                n_conv += 1
                cid = f"{target}-{qid}-{tag}"
                seq = ["oracle"] if cond == "oracle" else ["query"] + moves
                # A failed conversation keeps the turns before the failing call (maybe none).
                kept = seq if status == "completed" else seq[:rng.randint(0, len(seq) - 1)]
                rows["conversations"].append({
                    "conversation_id": cid, "target": target, "query_id": qid,
                    "flow_id": "oracle" if cond == "oracle" else ">".join(moves), "condition": cond,
                    "length": 2 * (len(moves) + 1), "n_moves": len(moves), "status": status,
                    "error": None if status == "completed" else f"api_error: {status}",
                    "n_turns": 2 * len(kept), "run_id": RUN_ID})
                for k, move in enumerate(kept, start=1):
                    judged = rng.random() < s.judged_share
                    rows["turns"] += [
                        {"conversation_id": cid, "position": 2 * k - 2, "role": "user",
                         "model_turn": k, "move": move, "content": f"user {move}"},
                        {"conversation_id": cid, "position": 2 * k - 1, "role": "assistant",
                         "model_turn": k, "move": move, "content": f"answer {k} of {cid}"}]
                    if s.benutil != "absent" and s.checklists and judged:
                        for i in range(1, s.n_items + 1):
                            rows["item_judgments"].append({
                                "judgment_set_id": "benutil-1", "conversation_id": cid,
                                "position": 2 * k - 1, "item_id": i, "query_id": qid, "model_turn": k,
                                "fulfilled": verdict(s.benutil, rng.random() < 0.5),
                                "checklist_version": "v1",
                                "reason": None if s.benutil == "scored" else "api_error: boom"})
                    if s.safety != "absent" and judged:
                        rows["safety_judgments"].append({
                            "judgment_set_id": "safety-1", "conversation_id": cid,
                            "position": 2 * k - 1, "model_turn": k,
                            "score": verdict(s.safety, rng.randint(*s.harm))})
    wh.write_many([(t, r) for t, r in as_episodes(rows).items() if r])
    return wh
