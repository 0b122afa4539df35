"""The items CarryOnBench's later stages read, as its intents stage leaves them
(``Intents.prepared``, stages.py): only queries with a benign intent, each with

- ``prompts["oracle"]``: the oracle prompt (the query with its benign intent stated), which
  the oracle condition opens with and the checklists stage builds the checklist for;
- ``hidden[<intent key>]``: the benign intent the benign-clarification moves tell.

The shared checklists stage then adds each query's current checklist (tasks/stages/checklists/).
Read when each stage runs, so an intent rewritten after the conversations were played is the
one the next stage reads.
"""

from __future__ import annotations

from dataclasses import replace

from tasks.core.stages import Pending
from tasks.users.scripted import script_of

ORACLE = "oracle"  # the item prompt the oracle prompt is stored under (the spec's oracle opens with it)
NO_INTENT_YET = Pending("no benign intent yet: run the intents stage")


def intent_key(spec) -> str:
    """The key the scripted conditions tell the benign intent by (CarryOnBench's: intent)."""
    return next((s.intent for c in spec.conditions if (s := script_of(c))), "intent")


def prepared_items(ctx, items) -> tuple[list, dict[str, str]]:
    """The items with a benign intent, prepared as the module docstring says, and the others
    with why they have none."""
    ids = [i.item_id for i in items]
    rows = {r["query_id"]: r for r in ctx.warehouse.query(
        "SELECT query_id, intent, oracle_prompt, error FROM intents "
        "WHERE list_contains(?, query_id)", [ids])} if ids else {}
    key = intent_key(ctx.config.spec)
    out, left = [], {}
    for i in items:
        r = rows.get(i.item_id)
        if r is None or r["intent"] is None:
            left[i.item_id] = (f"no benign intent: {r['error']}" if r is not None
                               else NO_INTENT_YET)
            continue
        out.append(replace(i, prompts={**i.prompts, ORACLE: r["oracle_prompt"]},
                           hidden={**i.hidden, key: r["intent"]}))
    return out, left


def foreseen_items(cfg, items) -> list:
    """For the plan and pre-flight: each query with an intent and an oracle prompt to come
    (the oracle prompt restates the query with its intent: about twice its length)."""
    key = intent_key(cfg.spec)
    return [replace(i, prompts={**i.prompts, ORACLE: i.prompts["query"] * 2},
                    hidden={**i.hidden, key: i.hidden.get(key) or "(the benign intent)"})
            for i in items]
