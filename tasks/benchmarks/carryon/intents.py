"""Benign intents: the intent_rewriter role turns a query's safe context into a first-person
statement of purpose, and the oracle prompt states that intent upfront with the query.

Queries without a context (SORRY-Bench) are handled, not refused: the rewriter is asked for
the most plausible legitimate purpose from the query alone, and the row records
``basis = "query_only"`` (``"context"`` otherwise) so analyses can separate the two. The
paper derives every intent from CASE-Bench's human-validated safe contexts; query-only intents
are a convenience for exploring SORRY-Bench, not a reproduction.

``ensure_intents`` is the intents stage's work (tasks/benchmarks/carryon/subflows.py): it writes
the queries and their intents in one transaction and returns what it wrote.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from pydantic import BaseModel, Field, field_validator

from prompts import render


class IntentOut(BaseModel):
    """The rewriter's answer."""

    intent: str = Field(min_length=1)

    @field_validator("intent")
    @classmethod
    def _not_blank(cls, v: str) -> str:
        v = " ".join(v.split())
        if not v:
            raise ValueError("the intent is blank")
        return v


@dataclass(frozen=True)
class IntentRow:
    query_id: str
    intent: str | None  # None when the rewriter failed (see error)
    oracle_prompt: str | None
    model: str
    call_hash: str | None
    error: str | None
    basis: str  # context | query_only

    def as_row(self) -> dict:
        return dict(self.__dict__)


def oracle_prompt(query: str, intent: str) -> str:
    """The oracle condition's single user message: the benign intent, then the query."""
    return render("carryon/oracle.j2", query=query, intent=intent)


def _text(value) -> str:
    """A context value as prompt text. Objects of named facts (CASE-Bench writes some values
    that way) become ``key: value.`` sentences, nested objects likewise, lists item by item."""
    if value is None:
        return ""
    if isinstance(value, dict):
        return " ".join(f"{k.replace('_', ' ')}: {_text(v).rstrip('.')}." for k, v in value.items()
                        if _text(v).strip())
    if isinstance(value, list):
        return "; ".join(_text(v) for v in value if _text(v).strip())
    if isinstance(value, bool):
        return "yes" if value else "no"
    return " ".join(str(value).split())


# (label in the prompt, the context fields it shows, joined by "; "), in prompt order.
_SITUATION = [
    ("Who the user is", [("recipient", "type"), ("recipient", "background")]),
    ("Kind of interaction", [("sender", "nature_of_the_interaction")]),
    ("Platform", [("sender", "platform_type")]),
    ("Purpose the assistant serves", [("transmission_principle", "sender_purpose")]),
    ("Confidentiality", [("transmission_principle", "confidentiality")]),
    ("Urgency", [("transmission_principle", "urgency")]),
]


def situation_lines(context: dict) -> list[tuple[str, str]]:
    """(label, text) for every situation line whose fields are present: every context field
    is optional, and a line with nothing to say is left out rather than shown empty."""
    out = []
    for label, fields in _SITUATION:
        parts = []
        for part, key in fields:
            sub = context.get(part) or {}
            text = _text(sub.get(key)) if isinstance(sub, dict) else ""
            if text:
                parts.append(text)
        if parts:
            out.append((label, "; ".join(parts)))
    return out


def intent_messages(q) -> list[dict]:
    ctx = q.context
    text = render("carryon/intent.j2", query=q.query, situation=situation_lines(ctx) if ctx else [])
    return [{"role": "user", "content": text}]


async def rewrite_intent(gateway, spec, q) -> IntentRow:
    basis = "context" if q.context else "query_only"
    # The sample key matters only when the rewriter samples (temperature > 0): one query, one
    # intent, replayed on every rerun.
    r = await gateway.chat(spec, "intent_rewriter", intent_messages(q), schema=IntentOut,
                           sample_key=f"intent:{q.query_id}")
    if not r.ok:
        return IntentRow(q.query_id, None, None, spec.model, r.call_hash,
                         f"{r.error_kind}: {r.error}", basis)
    intent = r.parsed.intent
    return IntentRow(q.query_id, intent, oracle_prompt(q.query, intent), spec.model,
                     r.call_hash, None, basis)


async def ensure_intents(ctx, queries) -> dict[str, IntentRow]:
    """The benign intent of each query (its ``intent`` None where the rewriter failed, with
    the ``error``). Writes ``queries`` and ``intents`` in one transaction; reruns are cache
    hits."""
    if not queries:
        return {}
    spec = ctx.config.role_spec("intent_rewriter")
    rows = await asyncio.gather(*(rewrite_intent(ctx.gateway, spec, q) for q in queries))
    ctx.warehouse.write_many([
        ("queries", [q.to_row() for q in queries]),
        ("intents", [r.as_row() for r in rows]),
    ])
    return {r.query_id: r for r in rows}
