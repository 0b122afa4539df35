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
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from tasks.core.items import ItemError
from tasks.core.judges import Judge, JudgeError, Measure, Request, TurnView
from tasks.core.registry import judge, settings
from tasks.model_entry import _Strict
from tasks.core.votes import majority_vote
from tasks.judges import benutil_response
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


def shared_prefix(prompt: str) -> int:
    """How much of a per-item prompt the response's other items' prompts share: everything up
    to the end of the response's fenced block (the item comes after it: judges/benutil.j2)."""
    end = prompt.rindex("<<<END RESPONSE ")
    return prompt.index(">>>", end) + 3


def reask_failed(why: str) -> str:
    return f"{EVIDENCE_NOT_IN_RESPONSE}: the re-ask failed ({why})"


# ----- Ben-Util on the engine ---------------------------------------------------------------
@settings("judging", first_release=True, later=("benutil_quote_choices", "benutil_mode"))
class BenUtilJudging(_Strict):
    """Its keys of the config's ``judging:`` section (the arguments ``quote_choices`` and
    ``mode``)."""

    # Ben-Util's quote may only be one of the response's passages (a JSON-schema enum sent
    # with the request; the prompt is unchanged): for small local models that cannot copy
    # text. Needs structured json_object (llama.cpp) or json_schema. A new judgment set.
    benutil_quote_choices: bool = False
    # per_item (the paper's, one Ben-Util call per response and checklist item) or
    # per_response (one call per response judges its whole checklist: about a tenth of the
    # calls; measure its agreement with `carryon calibrate` first, docs/fidelity.md). A new
    # judgment set.
    benutil_mode: Literal["per_item", "per_response"] = "per_item"


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
    # per_item: the paper's method, one call per (response, item); per_response: one call per
    # response judges its whole checklist (tasks/judges/benutil_response.py). Also set by the
    # config's judging.benutil_mode. Another mode is another verdict set.
    mode: Literal["per_item", "per_response"] = Field(
        "per_item", json_schema_extra={"config": "benutil_mode"})


@dataclass(frozen=True)
class Asked:
    """What a per-response request needs back with its answer (``Request.data``): the query,
    the response and the items asked (``(id, question)``, checklist order); a re-ask also holds
    every item of the checklist and the verdicts that stand from the first answer
    (``(id, value, evidence)``) with the first call's hash."""

    query: str
    response: str
    items: tuple[tuple[str, str], ...]
    checklist: tuple[tuple[str, str], ...] = ()
    standing: tuple[tuple[str, float, str], ...] = ()
    first_hash: str | None = None


# Its verdicts show in the report's built-in section (tasks/report/sections/benutil.py).
@judge("benutil", args=BenUtilArgs, roles=(BENUTIL,), section="benutil")
class BenUtilJudge(Judge):
    """Ben-Util for any spec whose items carry a checklist (see the module docstring)."""

    def __init__(self, args: BenUtilArgs | None = None):
        self.args = args or BenUtilArgs()
        # Arguments that change what is asked make a new verdict set (defaults: none added).
        changed = self.args.model_dump(exclude_defaults=True)
        template = benutil_response.RESPONSE_TEMPLATE if self.per_response else BENUTIL_TEMPLATE
        super().__init__(kind="benutil", role=BENUTIL, measures=("fulfilled",),
                         templates=(template, _FENCE_TEMPLATE),
                         extra_version=json.dumps(changed, sort_keys=True) if changed else "")

    @property
    def per_response(self) -> bool:
        return self.args.mode == benutil_response.PER_RESPONSE

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
        # The per-response mode names its own prompt version and its mode (only when set).
        extra = {"quote_choices": True} if self.args.quote_choices else {}
        if self.per_response:
            return benutil_response.response_prompt_version(), {"history": False, **extra,
                                                            "mode": benutil_response.PER_RESPONSE}
        return prompt_version(), {"history": False, **extra}

    def requests_per_turn(self, item) -> int:
        return 1 if self.per_response else len(self.checklist(item))

    def _query(self, turn: TurnView) -> str:
        return turn.prompt if self.args.query is None else turn.item.prompts[self.args.query]

    def requests(self, turn: TurnView) -> list[Request]:
        if turn.blocked or turn.response is None:
            return []
        query, response = self._query(turn), turn.response
        if self.per_response:
            items = self.checklist(turn.item)
            return [Request(benutil_response.response_messages(query, response, items),
                            benutil_response.schema_for(items, response, self.args.quote_choices),
                            None, (Asked(query, response, tuple(items)),))]
        schema = quoted_verdict(response) if self.args.quote_choices else BenUtilVerdict
        out = []
        for unit, question in self.checklist(turn.item):
            messages = benutil_messages(query, response, question)
            out.append(Request(messages, schema, unit, (query, response, question),
                               cache_prefix=shared_prefix(messages[0]["content"])))
        return out

    def revision(self, request: Request, first) -> Request | None:
        if self.per_response:
            return self._response_revision(request, first)
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
        if self.per_response:
            return self._response_verdicts(request.data[0], parsed)
        if revised:
            value, evidence, why = checked_answer(parsed, request.data[1])
        else:  # a first answer that stands: its quote holds, or it says "not fulfilled"
            value, evidence, why = parsed.fulfilled, parsed.evidence[:MAX_EVIDENCE_CHARS], None
        return [Measure("fulfilled", None if value is None else float(value), None, why,
                        request.unit, evidence)]

    def unscored_of(self, turn, request, reason_, revised=False) -> list[Measure]:
        if self.per_response:
            asked: Asked = request.data[0]
            # A failed re-ask leaves the verdicts that stood; a failed first call, every item.
            return self._merged(asked, {u: Measure("fulfilled", None, None,
                                                   reask_failed(reason_) if revised else reason_, u)
                                        for u, _ in asked.items})
        return [Measure("fulfilled", None, None, reask_failed(reason_) if revised else reason_,
                        request.unit)]

    # ----- the per-response mode (tasks/judges/benutil_response.py) ---------------------------
    def _response_revision(self, request: Request, first) -> Request | None:
        asked: Asked = request.data[0]
        ids = benutil_response.failing(first.parsed, asked.response)
        if not ids:
            return None
        by_id, items = first.parsed.by_id(), dict(asked.items)
        standing = tuple((u, float(by_id[u].fulfilled), by_id[u].evidence[:MAX_EVIDENCE_CHARS])
                         for u, _ in asked.items if u not in ids)
        again = [(u, items[u]) for u in ids]
        note = benutil_response.reask_note(ids, first.parsed, asked.response)
        return Request(request.messages + [{"role": "assistant", "content": first.content},
                                           {"role": "user", "content": note}],
                       benutil_response.schema_for(again, asked.response, self.args.quote_choices),
                       None, (Asked(asked.query, asked.response, tuple(again), asked.items,
                                    standing, first.call_hash),))

    def _response_verdicts(self, asked: Asked, parsed) -> list[Measure]:
        """A per-response answer as one measure per item: a first answer's verdicts stand (the
        re-ask came for those whose quote failed); a re-ask's answers go through the rule of a
        re-asked per-item answer (``checked_answer``) and join the verdicts that stood."""
        by_id = parsed.by_id()
        if not asked.checklist:  # the first answer: every item, as the judge gave it
            return [Measure("fulfilled", float(by_id[u].fulfilled), None, None, u,
                            by_id[u].evidence[:MAX_EVIDENCE_CHARS]) for u, _ in asked.items]
        out = {}
        for u, _ in asked.items:
            value, evidence, why = checked_answer(benutil_response.as_item_verdict(by_id[u]),
                                                  asked.response)
            out[u] = Measure("fulfilled", None if value is None else float(value), None, why,
                             u, evidence)
        return self._merged(asked, out)

    def _merged(self, asked: Asked, asked_now: dict[str, Measure]) -> list[Measure]:
        """The checklist's measures in its order: those just asked, and (after a re-ask) the
        first answer's that stood, under the first call's hash."""
        standing = {u: Measure("fulfilled", v, None, None, u, ev, call_hash=asked.first_hash)
                    for u, v, ev in asked.standing}
        order = asked.checklist or asked.items
        return [asked_now[u] if u in asked_now else standing[u] for u, _ in order]

    def combine(self, per_judge: list[list[Measure]]) -> list[Measure]:
        # CarryOnBench's rule (tasks/core/votes.py): a strict majority of the whole panel, per
        # item (a per-response answer holds every item of the checklist, in its order).
        out = []
        for i, head in enumerate(per_judge[0]):
            votes = [ms[i] for ms in per_judge]
            assert all(m.unit == head.unit for m in votes), "judges' items out of order"
            value, why = majority_vote([(None if m.value is None else bool(m.value),
                                         m.reason if m.value is None else None) for m in votes])
            evidence = next((m.evidence for m in votes
                             if m.value is not None and bool(m.value) == value), None)
            out.append(Measure("fulfilled", None if value is None else float(value), None, why,
                               head.unit, evidence))
        return out
