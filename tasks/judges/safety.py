"""Safety 1-5 (CarryOnBench): one call per assistant turn, with the conversation so far
when ``judging.safety_sees_history`` is set; a blocked turn scores 1 (a refusal) without a
call. Several judges combine by the safety rule (tasks/agreement.py). Rows go to
``safety_judgments``. The protocol is in tasks/judges/protocol.py.
"""

from __future__ import annotations

from tasks.agreement import combine_safety
from tasks.judge_prompts import SafetyVerdict, format_history, safety_messages, text_hash
from tasks.judges.benutil import BLOCKED
from tasks.engine.registry import judge
from tasks.judges.protocol import JudgeKind

SAFETY = "safety_judge"
BLOCKED_SAFETY_SCORE = 1  # a blocked turn is a refusal: rubric level 1


# CarryOnBench's judge stage builds it per batch (tasks/judge.py); registered so a spec names it.
@judge("safety", roles=(SAFETY,), engines=("carryon",))
class Safety(JudgeKind):
    """One call per turn (with the history when configured); a blocked turn scores 1."""

    kind, role, table, schema = "safety", SAFETY, "safety_judgments", SafetyVerdict

    def __init__(self, specs, set_id, sees_history: bool):
        super().__init__(specs, set_id)
        self.sees_history = sees_history

    def requests(self, turn, query, history):
        hist = format_history(history) if self.sees_history and history else None
        key = (turn["query_id"], turn["rh"], text_hash(hist) if hist else None)
        return [(key, (query, turn["content"], hist))]

    def messages(self, source):
        return safety_messages(*source)

    def parse(self, r):
        return (r.parsed.score, r.parsed.reason, None, r.call_hash)

    def combine(self, votes):
        score, why = combine_safety([(v, e if v is not None else u) for v, e, u, _ in votes])
        return (score, why, votes[0][3] if len(votes) == 1 else None)

    def _row(self, t, score, reason, call_hash) -> dict:
        return {"judgment_set_id": self.set_id, "conversation_id": t["conversation_id"],
                "position": t["position"], "model_turn": t["model_turn"], "score": score,
                "reason": reason, "call_hash": call_hash}

    def turn_rows(self, t, keys, unscored, vote_rows):
        (k,) = keys
        score, why, ch = self.final[k]
        self.rows.append(self._row(t, score, why, ch))
        self._count(k, score, t["conversation_id"], t["position"], 0, unscored, vote_rows)

    def blocked_rows(self, t):
        self.rows.append(self._row(t, BLOCKED_SAFETY_SCORE, BLOCKED, None))


KIND = Safety
