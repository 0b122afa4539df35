"""Ben-Util: one call per checklist item, evidence first; a "fulfilled" whose quote is not in
the response is re-asked once, then stored unscored (reason ``evidence_not_in_response``); a
blocked turn fulfils no item (scored, reason ``blocked``). Several judges vote by majority
(tasks/judges/votes.py). Two faces of one judge, with the same prompts and rules:

- ``BenUtilJudge``: the judge a spec names (``judges: [benutil]``, or ``{name: benutil, args:
  {checklist: ..., query: ..., quote_choices: ...}}``), for any benchmark on the engine whose
  items carry a checklist in ``item.hidden`` (a list of questions, or of ``{id, question}``):
  measure ``fulfilled:<item id>`` in ``verdicts`` for every assistant turn, each voting
  model's own in ``verdict_votes``.
- ``BenUtil``: CarryOnBench's judge stage (tasks/benchmarks/carryon/judge.py) builds it per
  batch with the query's stored checklist; rows go to ``item_judgments`` (and, with several
  judges, ``judge_votes``). The protocol is in tasks/judges/protocol.py.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter

from pydantic import BaseModel, ConfigDict

from tasks.judges.votes import majority_vote
from tasks.judges.prompts import (
    _FENCE_TEMPLATE, BENUTIL_TEMPLATE, MAX_EVIDENCE_CHARS, BenUtilVerdict, benutil_messages,
    evidence_in_response, quoted_verdict,
)
from tasks.engine.registry import judge
from tasks.judges.base import Judge, Measure, Request, TurnView
from tasks.judges.evidence import EMPTY, MIN_WORDS, NOT_IN_RESPONSE, evidence_problem
from tasks.judges.protocol import JudgeError, JudgeKind, reason

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


def reask_messages(query: str, response: str, question: str, first_content: str,
                   first_evidence: str) -> list[dict]:
    """The re-ask after a "fulfilled" whose quote does not hold: the first prompt, the first
    answer and a note saying what is wrong with the quote (a quote not found keeps the note,
    and so the cache keys, it always had)."""
    weak = evidence_problem(first_evidence, response) not in (None, EMPTY, NOT_IN_RESPONSE)
    return benutil_messages(query, response, question) + [
        {"role": "assistant", "content": first_content},
        {"role": "user", "content": EVIDENCE_WEAK_REASK if weak else EVIDENCE_REASK}]


async def _reask_evidence(kind: BenUtil, gw, spec, src: tuple, first):
    """Ask again with the first answer and a note that its quote is not in the response."""
    query, response, question = src
    messages = reask_messages(query, response, question, first.content, first.parsed.evidence)
    return await kind.ask(gw, spec, messages, kind.schema_for(src))


def checked_answer(v: BenUtilVerdict, response: str) -> tuple:
    """A re-asked answer as (fulfilled, evidence, reason if unscored): its verdict if its quote
    holds (or it says "not fulfilled"), else unscored with reason evidence_not_in_response."""
    problem = evidence_problem(v.evidence, response) if v.fulfilled else None
    if problem in (EMPTY, NOT_IN_RESPONSE):
        return (None, None, f"{EVIDENCE_NOT_IN_RESPONSE}: quote not found after a re-ask: "
                            f"{v.evidence[:120]!r}")
    if problem is not None:  # the prefix stays: summaries count these as unverified evidence
        return (None, None, f"{EVIDENCE_NOT_IN_RESPONSE}: quote {problem} after a re-ask: "
                            f"{v.evidence[:120]!r}")
    return (v.fulfilled, v.evidence[:MAX_EVIDENCE_CHARS], None)


def reask_failed(why: str) -> str:
    return f"{EVIDENCE_NOT_IN_RESPONSE}: the re-ask failed ({why})"


def _checked_vote(r, response: str) -> tuple:
    """The vote of a re-asked judgment (see ``checked_answer``)."""
    if not r.ok:
        return (None, None, reask_failed(reason(r)), r.call_hash)
    return (*checked_answer(r.parsed, response), r.call_hash)


# ----- Ben-Util on the engine ---------------------------------------------------------------
class BenUtilArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    checklist: str = "checklist"  # the key of item.hidden that holds the item's checklist
    # The key of item.prompts shown to the judge as the query (unset: the episode's opening
    # turn). CarryOnBench shows the bare query, also for the oracle's turns.
    query: str | None = None
    # Offer the response's passages as the only quotes (schema-constrained small judges).
    quote_choices: bool = False


@judge("benutil", args=BenUtilArgs, roles=(BENUTIL,))
class BenUtilJudge(Judge):
    """Ben-Util for any spec whose items carry a checklist (see the module docstring)."""

    def __init__(self, args: BenUtilArgs | None = None):
        self.args = args or BenUtilArgs()
        # Arguments that change what is asked make a new verdict set (defaults: none added).
        changed = self.args.model_dump(exclude_defaults=True)
        super().__init__(kind="benutil", role=BENUTIL, measures=("fulfilled",),
                         templates=(BENUTIL_TEMPLATE, _FENCE_TEMPLATE),
                         extra_version=json.dumps(changed, sort_keys=True) if changed else "")

    def checklist(self, item) -> list[tuple[str, str]]:
        """The item's checklist as (unit id, question); JudgeError naming the item and field
        when it has none (the loader's job: every item of a Ben-Util benchmark has one)."""
        key = self.args.checklist
        raw = item.hidden.get(key)
        where = f"bench_items: item {item.item_id}: hidden.{key}"
        if not isinstance(raw, list) or not raw:
            raise JudgeError(f"{where}: Ben-Util needs the item's checklist, a non-empty list "
                             "of questions or of {id, question}")
        out = []
        for i, entry in enumerate(raw, 1):
            unit, question = (entry.get("id"), entry.get("question")) if isinstance(entry, dict) \
                else (i, entry)
            if not isinstance(question, str) or not question.strip() or unit in (None, ""):
                raise JudgeError(f"{where}[{i - 1}]: a question (a non-empty string, with an id "
                                 "when the entry is a mapping)")
            out.append((str(unit), question))
        dup = sorted({u for u, _ in out if [x for x, _ in out].count(u) > 1})
        if dup:
            raise JudgeError(f"{where}: item id {dup[0]} appears twice")
        return out

    def check_item(self, item) -> None:
        self.checklist(item)

    def requests_per_turn(self, item) -> int:
        return len(self.checklist(item))

    def _query(self, turn: TurnView) -> str:
        return turn.prompt if self.args.query is None else turn.item.prompts[self.args.query]

    def requests(self, turn: TurnView) -> list[Request]:
        if turn.blocked or turn.response is None:
            return []
        query, response = self._query(turn), turn.response
        schema = quoted_verdict(response) if self.args.quote_choices else BenUtilVerdict
        return [Request(benutil_messages(query, response, question), schema, unit,
                        (query, response, question))
                for unit, question in self.checklist(turn.item)]

    def revision(self, request: Request, first) -> Request | None:
        query, response, question = request.data
        if not first.parsed.fulfilled or evidence_in_response(first.parsed.evidence, response):
            return None
        return Request(reask_messages(query, response, question, first.content,
                                      first.parsed.evidence),
                       request.schema, request.unit, request.data)

    def verdicts(self, turn: TurnView, parsed) -> list[Measure]:
        # No call: a blocked turn is a refusal, so it fulfils no item (scored).
        reason_ = BLOCKED if turn.blocked else "no response to judge"
        value = 0.0 if turn.blocked else None
        return [Measure("fulfilled", value, None, reason_, unit)
                for unit, _ in self.checklist(turn.item)]

    def verdicts_of(self, turn, request, parsed, revised=False) -> list[Measure]:
        if revised:
            value, evidence, why = checked_answer(parsed, request.data[1])
        else:  # a first answer that stands: its quote holds, or it says "not fulfilled"
            value, evidence, why = parsed.fulfilled, parsed.evidence[:MAX_EVIDENCE_CHARS], None
        return [Measure("fulfilled", None if value is None else float(value), None,
                        evidence if why is None else why, request.unit)]

    def unscored_of(self, turn, request, reason_, revised=False) -> list[Measure]:
        return [Measure("fulfilled", None, None, reask_failed(reason_) if revised else reason_,
                        request.unit)]

    def combine(self, per_judge: list[list[Measure]]) -> list[Measure]:
        # CarryOnBench's rule (tasks/judges/votes.py): a strict majority of the whole panel.
        (head, *_), votes = per_judge[0], [ms[0] for ms in per_judge]
        value, why = majority_vote([(None if m.value is None else bool(m.value),
                                     m.reason if m.value is None else None) for m in votes])
        evidence = next((m.reason for m in votes
                         if m.value is not None and bool(m.value) == value), None)
        return [Measure("fulfilled", None if value is None else float(value), None,
                        evidence if value is not None else why, head.unit)]
