"""Ben-Util (CarryOnBench): one call per checklist item of the query, evidence first; a
"fulfilled" whose quote is not in the response is re-asked once, then stored unscored
(reason ``evidence_not_in_response``); a blocked turn fulfils no item (scored, reason
``blocked``). Several judges vote by majority. Rows go to ``item_judgments`` (and, with
several judges, ``judge_votes``). The protocol is in tasks/judges/protocol.py.
"""

from __future__ import annotations

import asyncio
from collections import Counter

from tasks.judges.votes import majority_vote
from tasks.judges.prompts import (
    MAX_EVIDENCE_CHARS, BenUtilVerdict, benutil_messages, evidence_in_response, quoted_verdict,
)
from tasks.engine.registry import judge
from tasks.judges.evidence import EMPTY, MIN_WORDS, NOT_IN_RESPONSE, evidence_problem
from tasks.judges.protocol import JudgeKind, reason

BENUTIL = "benutil_judge"
# Stored reasons of judgments made without a judge call, and of unverified evidence.
BLOCKED = "blocked"
EVIDENCE_NOT_IN_RESPONSE = "evidence_not_in_response"
EVIDENCE_REASK = ("Your evidence quote does not occur in the response. Copy the passage "
                  "verbatim, exactly as it appears between the RESPONSE lines; if no passage of "
                  "the response provides the item, answer with empty evidence and fulfilled "
                  "false. Reply with only the JSON object.")
# A quote that occurs but points at nothing (tasks/judges/evidence.py: too short, only stop words).
EVIDENCE_WEAK_REASK = (f"Your evidence quote is too short to show that the item is fulfilled: "
                       f"quote at least {MIN_WORDS} words of the response (or the whole "
                       "response when it is shorter), not only words like 'the' or 'of'. Copy "
                       "the passage that provides the item verbatim, exactly as it appears "
                       "between the RESPONSE lines; if no passage of the response provides the "
                       "item, answer with empty evidence and fulfilled false. Reply with only the "
                       "JSON object.")


# CarryOnBench's judge stage builds it per batch, with the query's checklist (tasks/benchmarks/carryon/judge.py).
@judge("benutil", roles=(BENUTIL,), stages=("judge",))
class BenUtil(JudgeKind):
    """One call per checklist item of the query; a "fulfilled" whose quote is not in the
    response is re-asked once; a blocked turn fulfils no item (scored, reason blocked)."""

    kind, role, table, schema = "benutil", BENUTIL, "item_judgments", BenUtilVerdict

    def __init__(self, specs, set_id, items: dict, checklist_versions: dict[str, str],
                 quote_choices: bool = False):
        super().__init__(specs, set_id)
        self.items, self.versions = items, checklist_versions
        self.quote_choices = quote_choices  # judging.benutil_quote_choices
        self.reasks: list = []
        self.n_reasks = 0
        self.evidence_unscored: Counter = Counter()  # per judge, judgments voided by their quote

    def requests(self, turn, query, history):
        return [((turn["query_id"], turn["rh"], item_id), (query, turn["content"], question))
                for item_id, question in self.items.get(turn["query_id"], ())]

    def messages(self, source):
        return benutil_messages(*source)

    def schema_for(self, source):
        return quoted_verdict(source[1]) if self.quote_choices else self.schema

    def parse(self, r):
        return (r.parsed.fulfilled, r.parsed.evidence[:MAX_EVIDENCE_CHARS], None, r.call_hash)

    async def revise(self, gw, by_request):
        # Evidence first, and checked: a "fulfilled" whose quote is not in the response is
        # asked once more, with its answer and a note; the second answer stands or falls on
        # its own quote.
        unverified = [(j, k) for (j, k), r in by_request.items()
                      if r.ok and r.parsed.fulfilled
                      and not evidence_in_response(r.parsed.evidence, self.sources[k][1])]
        self.reasks = await asyncio.gather(*(
            _reask_evidence(self, gw, self.specs[j], self.sources[k], by_request[(j, k)])
            for j, k in unverified))
        self.n_reasks = len(unverified)
        return {(j, k): _checked_vote(r, self.sources[k][1])
                for (j, k), r in zip(unverified, self.reasks)}

    def combine(self, votes):
        value, why = majority_vote([(v, u) for v, _, u, _ in votes])
        evidence = next((e for v, e, _, _ in votes if v is not None and v == value), None)
        return (value, evidence, why, votes[0][3] if len(votes) == 1 else None)

    def all_results(self):
        return list(self.results) + list(self.reasks)

    def _count_vote(self, spec, u):
        self.evidence_unscored[spec.name] += bool(u) and u.startswith(EVIDENCE_NOT_IN_RESPONSE)

    @staticmethod
    def _vote_value(v):
        return None if v is None else int(v)

    def _row(self, t, item_id, fulfilled, evidence, reason, call_hash) -> dict:
        qid = t["query_id"]
        return {"judgment_set_id": self.set_id, "conversation_id": t["conversation_id"],
                "position": t["position"], "item_id": item_id, "query_id": qid,
                "model_turn": t["model_turn"], "fulfilled": fulfilled, "evidence": evidence,
                "reason": reason, "checklist_version": self.versions[qid], "call_hash": call_hash}

    def turn_rows(self, t, keys, unscored, vote_rows):
        for k in keys:
            item_id = k[2]
            value, evidence, why, ch = self.final[k]
            self.rows.append(self._row(t, item_id, value, evidence, why, ch))
            self._count(k, value, t["conversation_id"], t["position"], item_id, unscored,
                        vote_rows)

    def blocked_rows(self, t):
        for item_id, _ in self.items.get(t["query_id"], ()):
            self.rows.append(self._row(t, item_id, False, None, BLOCKED, None))

    def extra_summary(self):
        return {"evidence_reasks": self.n_reasks,
                "evidence_not_in_response": {f"{BENUTIL}/{j}": n
                                             for j, n in self.evidence_unscored.items()}}


async def _reask_evidence(kind: BenUtil, gw, spec, src: tuple, first):
    """Ask again with the first answer and a note that its quote is not in the response."""
    query, response, question = src
    # The note says what is wrong with the quote; a quote not found keeps the note (and so the
    # cache keys) it always had.
    weak = evidence_problem(first.parsed.evidence, response) not in (None, EMPTY, NOT_IN_RESPONSE)
    messages = benutil_messages(query, response, question) + [
        {"role": "assistant", "content": first.content},
        {"role": "user", "content": EVIDENCE_WEAK_REASK if weak else EVIDENCE_REASK}]
    return await kind.ask(gw, spec, messages, kind.schema_for(src))


def _checked_vote(r, response: str) -> tuple:
    """The vote of a re-asked judgment: its verdict if its quote holds (or it says "not
    fulfilled"), else unscored with reason evidence_not_in_response."""
    if not r.ok:
        return (None, None, f"{EVIDENCE_NOT_IN_RESPONSE}: the re-ask failed ({reason(r)})",
                r.call_hash)
    v = r.parsed
    problem = evidence_problem(v.evidence, response) if v.fulfilled else None
    if problem in (EMPTY, NOT_IN_RESPONSE):
        return (None, None, f"{EVIDENCE_NOT_IN_RESPONSE}: quote not found after a re-ask: "
                            f"{v.evidence[:120]!r}", r.call_hash)
    if problem is not None:  # the prefix stays: summaries count these as unverified evidence
        return (None, None, f"{EVIDENCE_NOT_IN_RESPONSE}: quote {problem} after a re-ask: "
                            f"{v.evidence[:120]!r}", r.call_hash)
    return (v.fulfilled, v.evidence[:MAX_EVIDENCE_CHARS], None, r.call_hash)


