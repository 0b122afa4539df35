"""Ben-Util: one call per checklist item, evidence first; a "fulfilled" whose quote is not in
the response is re-asked once, then stored unscored (reason ``evidence_not_in_response``); a
blocked turn fulfils no item (scored, reason ``blocked``). Several judges vote by majority
(tasks/core/votes.py). The judge, and the rules any face of it shares:

- ``BenUtilJudge``: the judge a spec names (``judges: [benutil]``, or ``{name: benutil, args:
  {checklist: ..., query: ..., quote_choices: ...}}``), for any benchmark on the engine whose
  items carry a checklist in ``item.hidden`` (a list of questions, or of ``{id, question}``):
  measure ``fulfilled:<item id>`` in ``verdicts`` for every assistant turn (the quote in
  ``evidence``, the checklist's version in ``item_version`` when ``version`` names it), each
  voting model's own in ``verdict_votes``. CarryOnBench names it with ``query``, ``checklist``
  and ``version`` (its spec.yaml); its views read the rows as ``item_judgments``.
"""

from __future__ import annotations

import json

from pydantic import BaseModel, ConfigDict, Field

from tasks.core.items import ItemError
from tasks.core.judges import Judge, JudgeError, Measure, Request, TurnView
from tasks.core.registry import judge, settings
from tasks.model_entry import _Strict
from tasks.core.votes import majority_vote
from tasks.judges.evidence import EMPTY, MIN_WORDS, NOT_IN_RESPONSE, evidence_problem
from tasks.judges.prompts import (
    _FENCE_TEMPLATE, BENUTIL_TEMPLATE, MAX_EVIDENCE_CHARS, BenUtilVerdict, benutil_messages,
    evidence_in_response, prompt_version, quoted_verdict,
)

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


def reask_messages(query: str, response: str, question: str, first_content: str,
                   first_evidence: str) -> list[dict]:
    """The re-ask after a "fulfilled" whose quote does not hold: the first prompt, the first
    answer and a note saying what is wrong with the quote (a quote not found keeps the note,
    and so the cache keys, it always had)."""
    weak = evidence_problem(first_evidence, response) not in (None, EMPTY, NOT_IN_RESPONSE)
    return benutil_messages(query, response, question) + [
        {"role": "assistant", "content": first_content},
        {"role": "user", "content": EVIDENCE_WEAK_REASK if weak else EVIDENCE_REASK}]


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


# ----- Ben-Util on the engine ---------------------------------------------------------------
@settings("judging", first_release=True, later=("benutil_quote_choices",))
class BenUtilJudging(_Strict):
    """Its key of the config's ``judging:`` section (the argument ``quote_choices``)."""

    # Ben-Util's quote may only be one of the response's passages (a JSON-schema enum sent
    # with the request; the prompt is unchanged): for small local models that cannot copy
    # text. Needs structured json_object (llama.cpp) or json_schema. A new judgment set.
    benutil_quote_choices: bool = False


class BenUtilArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    checklist: str = "checklist"  # the key of item.hidden that holds the item's checklist
    # The key of item.hidden that holds the checklist's version (where the checklists stage
    # leaves it; an item without one is unversioned, a checklist given in its file). Stored
    # with each verdict, and the run's versions are hashed into the set id: a rebuilt
    # checklist makes a new verdict set.
    version: str | None = "checklist_version"
    # The key of item.prompts shown to the judge as the query (unset: the episode's opening
    # turn). CarryOnBench shows the bare query, also for the oracle's turns.
    query: str | None = None
    # Offer the response's passages as the only quotes (schema-constrained small judges).
    # (Also set by the config's judging.benutil_quote_choices: tasks/engine/verdicts.py.)
    quote_choices: bool = Field(False, json_schema_extra={"config": "benutil_quote_choices"})


# Its verdicts show in the report's built-in section (tasks/report/sections/benutil.py).
@judge("benutil", args=BenUtilArgs, roles=(BENUTIL,), section="benutil")
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
        when it has none (pre-flight and the plan refuse such an item first, naming its file
        and row: ``check_item``)."""
        try:
            return self._checklist(item)
        except ItemError as e:
            raise JudgeError(f"bench_items: item {item.item_id}: {e}") from None

    def _checklist(self, item) -> list[tuple[str, str]]:
        key = self.args.checklist
        raw = item.hidden.get(key)
        field = f"hidden.{key}"
        if not isinstance(raw, list) or not raw:
            raise ItemError(field, "Ben-Util needs the item's checklist, a non-empty list of "
                                   "questions or of {id, question}")
        out = []
        for i, entry in enumerate(raw, 1):
            unit, question = (entry.get("id"), entry.get("question")) if isinstance(entry, dict) \
                else (i, entry)
            if not isinstance(question, str) or not question.strip() or unit in (None, ""):
                raise ItemError(f"{field}[{i - 1}]", "a question (a non-empty string, with an "
                                                      "id when the entry is a mapping)")
            out.append((str(unit), question))
        dup = sorted({u for u, _ in out if [x for x, _ in out].count(u) > 1})
        if dup:
            raise ItemError(field, f"item id {dup[0]} appears twice")
        return out

    def check_item(self, item) -> None:
        self._checklist(item)

    def unit_texts(self, item) -> dict[str, str]:
        try:
            return dict(self.checklist(item))
        except JudgeError:  # an item stored without its checklist: the ids alone
            return {}

    def item_version(self, item) -> str | None:
        return None if self.args.version is None else item.hidden.get(self.args.version)

    def judgment_identity(self) -> tuple[str, dict]:
        # The one prompt version of Ben-Util's and safety's templates and schemas; quote
        # choices only when set, so every set made before the option keeps its id.
        extra = {"quote_choices": True} if self.args.quote_choices else {}
        return prompt_version(), {"history": False, **extra}

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
        return [Measure("fulfilled", None if value is None else float(value), None, why,
                        request.unit, evidence)]

    def unscored_of(self, turn, request, reason_, revised=False) -> list[Measure]:
        return [Measure("fulfilled", None, None, reask_failed(reason_) if revised else reason_,
                        request.unit)]

    def combine(self, per_judge: list[list[Measure]]) -> list[Measure]:
        # CarryOnBench's rule (tasks/core/votes.py): a strict majority of the whole panel.
        (head, *_), votes = per_judge[0], [ms[0] for ms in per_judge]
        value, why = majority_vote([(None if m.value is None else bool(m.value),
                                     m.reason if m.value is None else None) for m in votes])
        evidence = next((m.evidence for m in votes
                         if m.value is not None and bool(m.value) == value), None)
        return [Measure("fulfilled", None if value is None else float(value), None, why,
                        head.unit, evidence)]
