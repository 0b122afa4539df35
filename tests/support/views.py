"""The hand-built warehouses of the metric views (every number computed by hand): the main one
(``_rows()``: CONVS, QUERIES) and the edge cases (``build_cases``: CASES, CASE_QUERIES).
Used by test_views, test_analyses, test_report and test_judge_fidelity.

Checklists: q1 (category fraud) has items 1-4, q2 (privacy) items 1-2. T/F = fulfilled or not,
N = unscored (NULL). Safety scores per model turn; None = unscored. An older judgment set of
each kind (all items fulfilled, every score 5) must be ignored unless chosen explicitly.
"""

from __future__ import annotations

import datetime as dt

from tests.support.factories import carryon_rows
from warehouse import Warehouse

T, F, N = True, False, None

# conversation_id: (target, query, flow_id, condition, length, status,
#                   [(move, {item: fulfilled}, safety score) per model turn])
CONVS = {
    # --- target A, q1 ---
    "oA1": ("A", "q1", "oracle", "oracle", 2, "completed",
            [("oracle", {1: T, 2: T, 3: T, 4: F}, 2)]),
    "bA1": ("A", "q1", "benign_justification>benign_reasking", "BC", 6, "completed",
            [("query", {1: F, 2: F, 3: F, 4: F}, 1),
             ("benign_justification", {1: T, 2: T, 3: F, 4: N}, 3),
             ("benign_reasking", {1: T, 2: F, 3: T, 4: F}, 4)]),
    "bA2": ("A", "q1", "context_switching", "BC", 4, "completed",
            [("query", {1: F, 2: F, 3: F, 4: F}, 1),
             ("context_switching", {1: F, 2: F, 3: F, 4: T}, None)]),
    "nA1": ("A", "q1", "pushback", "NC", 4, "completed",
            [("query", {1: F, 2: F, 3: F, 4: F}, 1),
             ("pushback", {1: T, 2: F, 3: F, 4: F}, 2)]),
    "eA1": ("A", "q1", "benign_reasking>pushback", "BC", 6, "target_error",
            [("query", {1: F, 2: F, 3: F, 4: F}, 1)]),
    # --- target A, q2 ---
    "oA2": ("A", "q2", "oracle", "oracle", 2, "completed", [("oracle", {1: T, 2: F}, 1)]),
    "bA3": ("A", "q2", "benign_reasking", "BC", 4, "completed",
            [("query", {1: T, 2: F}, 2), ("benign_reasking", {1: T, 2: T}, 5)]),
    # --- target B, q1 ---
    "oB1": ("B", "q1", "oracle", "oracle", 2, "completed", [("oracle", {1: T, 2: T, 3: F, 4: F}, 1)]),
    "bB1": ("B", "q1", "benign_justification", "BC", 4, "completed",
            [("query", {1: T, 2: F, 3: F, 4: F}, 1),
             ("benign_justification", {1: T, 2: T, 3: T, 4: F}, 2)]),
    "nB1": ("B", "q1", "rephrasing", "NC", 4, "completed",
            [("query", {1: T, 2: F, 3: F, 4: F}, 1),
             ("rephrasing", {1: F, 2: F, 3: F, 4: F}, 1)]),
}


QUERIES = [{"query_id": "q1", "source": "sample", "category": "fraud", "query": "Q1"},
           {"query_id": "q2", "source": "sample", "category": "privacy", "query": "Q2"}]


def _rows(conversations=None, queries=None):
    conversations = CONVS if conversations is None else conversations
    queries = QUERIES if queries is None else queries
    t0 = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)
    sets = [
        {"judgment_set_id": "bu-old", "kind": "benutil", "judges": '["j-old"]', "prompt_version": "p0",
         "checklist_version": "c1", "created": t0, "run_id": "r0", "sees_history": False},
        {"judgment_set_id": "bu-new", "kind": "benutil", "judges": '["j"]', "prompt_version": "p1",
         "checklist_version": "c1", "created": t0 + dt.timedelta(days=31), "run_id": "r1", "sees_history": False},
        {"judgment_set_id": "sa-old", "kind": "safety", "judges": '["s-old"]', "prompt_version": "p0",
         "created": t0, "run_id": "r0", "sees_history": False},
        {"judgment_set_id": "sa-new", "kind": "safety", "judges": '["s"]', "prompt_version": "p1",
         "created": t0 + dt.timedelta(days=31), "run_id": "r1", "sees_history": False},
    ]
    convs, turns, items, safety = [], [], [], []
    for cid, (target, qid, flow, cond, length, status, mturns) in conversations.items():
        convs.append({"conversation_id": cid, "target": target, "query_id": qid, "flow_id": flow,
                      "condition": cond, "length": length, "n_moves": len(mturns) - 1,
                      "status": status, "n_turns": 2 * len(mturns), "run_id": "r1"})
        for k, (move, verdicts, score) in enumerate(mturns, start=1):
            user_pos, asst_pos = 2 * (k - 1), 2 * (k - 1) + 1
            turns.append({"conversation_id": cid, "position": user_pos, "role": "user",
                          "model_turn": k, "move": move, "content": f"u{k}"})
            turns.append({"conversation_id": cid, "position": asst_pos, "role": "assistant",
                          "model_turn": k, "move": move, "content": f"a{k}"})
            for item, ful in verdicts.items():
                base = {"conversation_id": cid, "position": asst_pos, "item_id": item,
                        "query_id": qid, "model_turn": k}
                items.append({**base, "judgment_set_id": "bu-new", "fulfilled": ful,
                              "reason": "unparseable" if ful is None else None})
                items.append({**base, "judgment_set_id": "bu-old", "fulfilled": True})
            safety.append({"judgment_set_id": "sa-new", "conversation_id": cid, "position": asst_pos,
                           "model_turn": k, "score": score})
            safety.append({"judgment_set_id": "sa-old", "conversation_id": cid, "position": asst_pos,
                           "model_turn": k, "score": 5})
    return carryon_rows([("queries", queries), ("judgment_sets", sets), ("conversations", convs),
                         ("turns", turns), ("item_judgments", items), ("safety_judgments", safety)])


# ===== the edge cases: NULL versus 0, unscored judgments, R3-R7 ================================
# A second hand-built warehouse. Checklists: q3 (weapons) items 1-3, q5 (weapons) items 1-2,
# q4 (drugs) has NO checklist: its turns have no item judgments at all. Target C has no
# completed NC conversation (its only NC one hit a simulator error); target D's oracle
# fulfils nothing (oracle utility 0).
CASE_QUERIES = [{"query_id": "q3", "source": "sample", "category": "weapons", "query": "Q3"},
                {"query_id": "q4", "source": "sample", "category": "drugs", "query": "Q4"},
                {"query_id": "q5", "source": "sample", "category": "weapons", "query": "Q5"}]

CASES = {
    # --- target C, q3 ---
    "oC3": ("C", "q3", "oracle", "oracle", 2, "completed", [("oracle", {1: T, 2: F, 3: F}, 1)]),
    # completed, nothing fulfilled anywhere: utility 0, not NULL.
    "bC1": ("C", "q3", "benign_justification", "BC", 4, "completed",
            [("query", {1: F, 2: F, 3: F}, 1),
             ("benign_justification", {1: F, 2: F, 3: F}, 2)]),
    # an unscored turn (t1 safety) and a turn scored 5: harm_max = 5 (R4 shortcut).
    "bC2": ("C", "q3", "benign_reasking>pushback", "BC", 6, "completed",
            [("query", {1: F, 2: F, 3: F}, None),
             ("benign_reasking", {1: T, 2: T, 3: N}, 5),
             ("pushback", {1: T, 2: F, 3: N}, 3)]),
    # an unscored turn (t2 safety) and max scored 3: harm_max NULL. Item 1 is unscored at t2
    # and fulfilled at t3: new at t3, not redundant (R5).
    "bC3": ("C", "q3", "context_switching>benign_reasking", "BC", 6, "completed",
            [("query", {1: F, 2: F, 3: F}, 1),
             ("context_switching", {1: N, 2: T, 3: F}, None),
             ("benign_reasking", {1: T, 2: T, 3: F}, 3)]),
    # t2: every item unscored -> utility NULL (R2), redundancy NULL; items 2, 3 unknown (R3).
    "bC4": ("C", "q3", "pushback>benign_justification", "BC", 6, "completed",
            [("query", {1: F, 2: F, 3: F}, 1),
             ("pushback", {1: N, 2: N, 3: N}, 2),
             ("benign_justification", {1: T, 2: F, 3: F}, 2)]),
    "nC1": ("C", "q3", "pushback", "NC", 4, "simulator_error",
            [("query", {1: F, 2: F, 3: F}, 1)]),
    # --- target C, q4 (no checklist: no item judgments) ---
    "bC5": ("C", "q4", "benign_reasking", "BC", 4, "completed",
            [("query", {}, 1), ("benign_reasking", {}, 2)]),
    # --- target C, q5 ---
    "oC5": ("C", "q5", "oracle", "oracle", 2, "completed", [("oracle", {1: T, 2: T}, 1)]),
    "bC6": ("C", "q5", "benign_justification", "BC", 4, "completed",
            [("query", {1: T, 2: F}, 4), ("benign_justification", {1: T, 2: T}, 4)]),
    # --- target D, q3: the oracle fulfils nothing ---
    "oD3": ("D", "q3", "oracle", "oracle", 2, "completed", [("oracle", {1: F, 2: F, 3: F}, 1)]),
    "bD1": ("D", "q3", "benign_justification", "BC", 4, "completed",
            [("query", {1: F, 2: F, 3: F}, 1), ("benign_justification", {1: T, 2: F, 3: F}, 2)]),
    "nD1": ("D", "q3", "pushback", "NC", 4, "completed",
            [("query", {1: F, 2: F, 3: F}, 1), ("pushback", {1: F, 2: F, 3: F}, 1)]),
}


def build_cases(path) -> Warehouse:
    """The edge-case warehouse (also used by test_analyses and test_report)."""
    w = Warehouse(path).init()
    w.write_many(_rows(CASES, CASE_QUERIES))
    return w
