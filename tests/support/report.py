"""CarryOnBench's report on made-up data: a synthetic warehouse of the shape the pipeline
writes (``build_synthetic``; EVIL is its one hostile response) and a table read back out of
report.md (``md_table_by_header``). Used by the report, validation and hostile-text tests."""

from __future__ import annotations

import datetime as dt
import json
import random

from tests.support.factories import as_episodes
from warehouse import Warehouse

MOVES_BC = ["benign_justification", "benign_reasking", "context_switching"]
MOVES_NC = ["pushback", "rephrasing"]
EVIL = "</script><script>window.__pwned=1</script><img src=x onerror=alert(1)> & \u2028"


def build_synthetic(home, *, n_targets: int = 3, n_queries: int = 8, seed: int = 0,
                    model_prefix: str = "openai/test-", unscored_every: int = 37) -> tuple[Warehouse, str]:
    """A warehouse with runs, queries, checklists, conversations (BC/NC/oracle, one target
    error), turns and judgments; verdicts are random with a per-target skill, every
    ``unscored_every``-th judgment is unscored, and one response is hostile HTML."""
    rng = random.Random(seed)
    wh = Warehouse(home / "warehouse.duckdb").init()
    now = dt.datetime(2025, 1, 1, tzinfo=dt.timezone.utc)
    run_id = "20250101-000000-abcdef-0001"
    targets = [f"target-{chr(97 + i)}" for i in range(n_targets)]
    config = {"models": {"targets": [{"name": t, "model": model_prefix + t} for t in targets],
                         "user_simulator": {"model": model_prefix + "sim"},
                         "benutil_judge": {"model": model_prefix + "judge"},
                         "safety_judge": {"model": model_prefix + "judge"}}}
    rows: dict[str, list] = {k: [] for k in ("runs", "queries", "checklists", "checklist_items",
                                             "judgment_sets", "conversations", "turns",
                                             "item_judgments", "safety_judgments")}
    rows["runs"].append({"run_id": run_id, "config_hash": "h", "config_json": json.dumps(config),
                         "seed": 0, "stages": "report", "started": now, "status": "running"})
    rows["judgment_sets"] += [
        {"judgment_set_id": "benutil-1", "kind": "benutil", "judges": json.dumps([model_prefix + "judge"]),
         "prompt_version": "pv1", "checklist_version": "clv1", "sees_history": False, "created": now,
         "run_id": run_id},
        {"judgment_set_id": "safety-1", "kind": "safety", "judges": json.dumps([model_prefix + "judge"]),
         "prompt_version": "pv1", "checklist_version": None, "sees_history": False, "created": now,
         "run_id": run_id}]
    counter = 0
    for qi in range(n_queries):
        qid = f"{qi:08x}"
        n_items = rng.randint(5, 8)
        rows["queries"].append({"query_id": qid, "source": "sample", "category": f"cat-{qi % 3}",
                                "query": f"How do I do risky thing {qi}?"})
        rows["checklists"].append({"query_id": qid, "checklist_version": "v1", "n_items": n_items,
                                   "created": now, "run_id": run_id})
        rows["checklist_items"] += [{"query_id": qid, "checklist_version": "v1", "item_id": i,
                                     "question": f"Does it explain point {i} of query {qi}?",
                                     "category": "Practical Advice", "source_answers": "[]"}
                                    for i in range(1, n_items + 1)]
        for ti, target in enumerate(targets):
            skill = 0.15 + 0.2 * ti
            flows = [("oracle", "oracle", [])]
            for n in (1, 2, 3):
                flows.append((f"BC{n}a", "BC", [rng.choice(MOVES_BC)] + [rng.choice(MOVES_BC + MOVES_NC)
                                                                           for _ in range(n - 1)]))
                flows.append((f"BC{n}b", "BC", [rng.choice(MOVES_NC + MOVES_BC) for _ in range(n - 1)]
                              + [rng.choice(MOVES_BC)]))
                flows.append((f"NC{n}", "NC", [rng.choice(MOVES_NC) for _ in range(n)]))
            turn1 = [rng.random() < skill / 2 for _ in range(n_items)]  # shared prefix
            for tag, cond, moves in flows:
                cid = f"{target}-{qid}-{tag}"
                seq = ["oracle"] if cond == "oracle" else ["query"] + moves
                status = "target_error" if (qi == 0 and ti == 0 and tag == "BC3a") else "completed"
                if status != "completed":
                    seq = seq[:2]
                rows["conversations"].append({
                    "conversation_id": cid, "target": target, "query_id": qid,
                    "flow_id": "oracle" if cond == "oracle" else ">".join(moves), "condition": cond,
                    "length": 2 * (len(moves) + 1), "n_moves": len(moves), "status": status,
                    "error": "api_error: boom" if status != "completed" else None,
                    "n_turns": 2 * len(seq), "run_id": run_id})
                for k, move in enumerate(seq, start=1):
                    text = EVIL if (qi == 0 and ti == 0 and cond == "BC" and k == 2) else f"answer {k} of {cid}"
                    rows["turns"] += [
                        {"conversation_id": cid, "position": 2 * k - 2, "role": "user", "model_turn": k,
                         "move": move, "content": f"user says {move}"},
                        {"conversation_id": cid, "position": 2 * k - 1, "role": "assistant", "model_turn": k,
                         "move": move, "content": text}]
                    p = skill * (1.6 if cond == "oracle" else 0.6 + 0.3 * k + (0.3 if move in MOVES_BC else 0))
                    for i in range(1, n_items + 1):
                        counter += 1
                        ful = turn1[i - 1] if (k == 1 and cond != "oracle") else rng.random() < min(p, 0.95)
                        rows["item_judgments"].append({
                            "judgment_set_id": "benutil-1", "conversation_id": cid, "position": 2 * k - 1,
                            "item_id": i, "query_id": qid, "model_turn": k,
                            "fulfilled": None if counter % unscored_every == 0 else ful})
                    score = min(5, 1 + int(rng.random() * (2 + ti + (k > 1))))
                    rows["safety_judgments"].append({
                        "judgment_set_id": "safety-1", "conversation_id": cid, "position": 2 * k - 1,
                        "model_turn": k, "score": None if counter % 11 == 0 else score})
    wh.write_many(list(as_episodes(rows).items()))
    return wh, run_id


# ----- numbers parsed out of report.md ------------------------------------------------------------
def md_table_by_header(md: str, section: str) -> list[dict]:
    """The first Markdown table after the heading ``section``, as dicts keyed by header."""
    lines = md.split("\n")
    start = next(i for i, line in enumerate(lines) if line.strip() == section)
    rows = []
    for line in lines[start + 1:]:
        if line.startswith("#"):
            break
        if line.startswith("|"):
            rows.append([c.strip() for c in line.strip().strip("|").split("|")])
        elif rows:
            break
    head, sep, body = rows[0], rows[1], rows[2:]
    assert all(set(s) <= {"-", ":"} for s in sep), sep
    return [dict(zip(head, r, strict=True)) for r in body]
