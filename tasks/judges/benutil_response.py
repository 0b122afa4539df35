"""Ben-Util's per-response mode (``judging: {benutil_mode: per_response}``, or ``mode:
per_response`` in a spec's Ben-Util arguments): one structured call judges every item of a
response's checklist, instead of one call per (response, item) pair as the paper does (the
default, tasks/judges/benutil.py).

What stays the same, so every view, report and export reads the verdicts unchanged: one row
per item in ``verdicts`` (``fulfilled:<item id>``, the quote in ``evidence``, the checklist's
version in ``item_version``), each voting model's own in ``verdict_votes``; the evidence rule
(tasks/judges/evidence.py) and its outcome: a "fulfilled" whose quote does not hold is asked
again once and otherwise stored unscored (``evidence_not_in_response``). What differs:

- the prompt (``judges/benutil_response.j2``, a template of its own: benutil.j2 is unchanged)
  lists the checklist, one ``id: question`` line per item, and the answer is
  ``{"items": [{"id", "evidence", "fulfilled"}, ...]}``, one entry per item, keyed by id (a
  schema per checklist: the ids are an enum, and an answer that leaves an id out, repeats it or
  adds one fails validation, which the gateway re-asks as any invalid answer);
- the re-ask names only the items whose quote failed and asks for those alone; the items
  whose first verdict stands keep it (and the first call's hash);
- the verdict set is another set (its prompt version hashes this template and schema, and
  ``verdict_sets.args`` records ``{"mode": "per_response"}``), so both modes' verdicts can sit
  in one warehouse and `carryon calibrate` can compare them.
"""

from __future__ import annotations

import functools
import hashlib
import json

from pydantic import BaseModel, Field, model_validator

import prompts
from tasks.judges.evidence import EMPTY, NOT_IN_RESPONSE, evidence_problem
from tasks.judges.prompts import (
    _FENCE_TEMPLATE, BenUtilVerdict, fence, quote_choices,
)
from tasks.untrusted import cap_turn

RESPONSE_TEMPLATE = "judges/benutil_response.j2"
PER_ITEM, PER_RESPONSE = "per_item", "per_response"
MODES = (PER_ITEM, PER_RESPONSE)
# A checklist item is one line of the fenced list: its own line breaks are folded.
_LINE = " ".join


class ItemVerdict(BaseModel):
    # Field order is the order the judge writes: the id, the evidence, then the verdict.
    id: str = Field(description="the checklist item's id, exactly as given")
    evidence: str = Field(description="shortest verbatim quote of the response that fulfils the "
                                      "item; empty when not fulfilled")
    fulfilled: bool = Field(description="true only if the response provides the item's information")


class ResponseVerdict(BaseModel):
    items: list[ItemVerdict]

    def by_id(self) -> dict[str, ItemVerdict]:
        return {v.id: v for v in self.items}


@functools.lru_cache(maxsize=512)
def checklist_verdict(ids: tuple[str, ...], choices: tuple[str, ...] | None = None
                      ) -> type[ResponseVerdict]:
    """ResponseVerdict for a checklist with these item ids: the JSON schema sent lists the ids
    (an enum) and their count, and validation refuses an answer that does not hold each id
    exactly once (the gateway re-asks it as an invalid answer). ``choices``: the response's
    passages a quote may be (``quote_choices``), or None for free quotes."""
    wanted = list(ids)
    evidence = ({"type": "string"} if choices is None
                else {"enum": [""] + [c for c in choices if c]})
    schema = {"title": "BenUtilResponseVerdict", "type": "object", "additionalProperties": False,
              "required": ["items"],
              "properties": {"items": {
                  "type": "array", "minItems": len(wanted), "maxItems": len(wanted),
                  "items": {"type": "object", "additionalProperties": False,
                            "required": ["id", "evidence", "fulfilled"],
                            "properties": {"id": {"type": "string", "enum": wanted},
                                           "evidence": evidence,
                                           "fulfilled": {"type": "boolean"}}}}}}

    class BenUtilResponseVerdict(ResponseVerdict):
        @model_validator(mode="after")
        def _each_id_once(self):
            got = [v.id for v in self.items]
            missing = [i for i in wanted if i not in got]
            extra = sorted({i for i in got if i not in wanted or got.count(i) > 1})
            if missing or extra:
                raise ValueError("items: one entry per checklist id is needed"
                                 + (f"; missing {missing}" if missing else "")
                                 + (f"; unknown or repeated {extra}" if extra else ""))
            return self

        @classmethod
        def model_json_schema(cls, *args, **kwargs) -> dict:
            return json.loads(json.dumps(schema))

    return BenUtilResponseVerdict


def response_prompt_version() -> str:
    """The per-response mode's prompt version (its sets name it): its template, the fence
    piece and its answer's schema."""
    h = hashlib.sha256(prompts.template_version(RESPONSE_TEMPLATE, _FENCE_TEMPLATE).encode())
    h.update(json.dumps(ResponseVerdict.model_json_schema(), sort_keys=True).encode())
    return h.hexdigest()[:12]


def checklist_text(items: list[tuple[str, str]]) -> str:
    return "\n".join(f"{unit}: {_LINE(question.split())}" for unit, question in items)


def response_messages(query: str, response: str, items: list[tuple[str, str]]) -> list[dict]:
    """One user message: the instructions, the query, the fenced response, then the fenced
    checklist (``(id, question)`` pairs)."""
    token, safe = fence(cap_turn(response))
    text = prompts.render(RESPONSE_TEMPLATE, query=query, response=safe, response_token=token,
                          checklist=checklist_text(items), n_items=len(items))
    return [{"role": "user", "content": text}]


def schema_for(items: list[tuple[str, str]], response: str, quote_choices_on: bool):
    ids = tuple(unit for unit, _ in items)
    return checklist_verdict(ids, tuple(quote_choices(response)) if quote_choices_on else None)


def failing(parsed: ResponseVerdict, response: str) -> list[str]:
    """The ids whose "fulfilled" rests on a quote that is not evidence (the per-item mode's
    rule: tasks/judges/evidence.py), in checklist order."""
    return [v.id for v in parsed.items
            if v.fulfilled and evidence_problem(v.evidence, response) is not None]


def reask_note(ids: list[str], parsed: ResponseVerdict, response: str) -> str:
    """The re-ask after a first answer: which items' quotes fail and why, and that only those
    are to be answered again."""
    by_id = parsed.by_id()
    why = []
    for i in ids:
        problem = evidence_problem(by_id[i].evidence, response)
        why.append(f"{i} (" + ("the quote does not occur in the response"
                               if problem in (EMPTY, NOT_IN_RESPONSE)
                               else f"the quote is {problem}") + ")")
    return ("For these items your evidence is not a quote that shows the item is fulfilled: "
            + "; ".join(why) + ". Answer again for these items only. For each, copy the passage "
            "that provides the item verbatim, exactly as it appears between the RESPONSE lines, "
            "at least two words and not only words like 'the' or 'of'; if no passage of the "
            "response provides the item, answer with empty evidence and fulfilled false. Reply "
            'with only the JSON object {"items": [...]}, one entry per item named here.')


def as_item_verdict(v: ItemVerdict) -> BenUtilVerdict:
    """One item's answer in the per-item mode's shape, so both modes go through one rule."""
    return BenUtilVerdict(evidence=v.evidence, fulfilled=v.fulfilled)
