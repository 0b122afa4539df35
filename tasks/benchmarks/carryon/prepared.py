"""The items CarryOnBench's episodes and verdicts stages read, as its checklists stage leaves
them (``Checklists.prepared``, stages.py): only queries with a current checklist, each with

- ``prompts["oracle"]``: the oracle prompt (the query with its benign intent stated);
- ``hidden[<intent key>]``: the benign intent the benign-clarification moves tell;
- ``hidden["checklist"]``: the query's current checklist (latest ``created``), as
  ``{id, question}`` entries, and ``hidden["checklist_version"]`` its version: what the
  Ben-Util judge asks and the version it stores with each verdict.

Read when each stage runs, so a checklist rebuilt after the conversations were played is
the one the next judging reads (a new judgment set; the old rows stay).
"""

from __future__ import annotations

from dataclasses import replace

from tasks.benchmarks.carryon.simulate_plan import select_checklisted

CHECKLIST, CHECKLIST_VERSION = "checklist", "checklist_version"


def current_checklists(wh, query_ids: list[str]) -> dict[str, str]:
    """query_id -> its current checklist version (latest ``created``)."""
    rows = wh.query(
        "SELECT query_id, checklist_version FROM checklists WHERE list_contains(?, query_id) "
        "QUALIFY row_number() OVER (PARTITION BY query_id "
        "ORDER BY created DESC, checklist_version DESC) = 1", [list(query_ids)])
    return {r["query_id"]: r["checklist_version"] for r in rows}


def checklist_items(wh, versions: dict[str, str]) -> dict[str, list[dict]]:
    """query_id -> the items of its checklist version, as ``{id, question}`` in item order."""
    if not versions:
        return {}
    keys = [f"{q}\x1f{v}" for q, v in versions.items()]
    rows = wh.query(
        "SELECT query_id, item_id, question FROM checklist_items "
        "WHERE list_contains(?, query_id || chr(31) || checklist_version) "
        "ORDER BY query_id, item_id", [keys])
    out: dict[str, list[dict]] = {}
    for r in rows:
        out.setdefault(r["query_id"], []).append({"id": r["item_id"], "question": r["question"]})
    return out


def prepared_items(ctx, items) -> tuple[list, dict[str, str]]:
    """The items with a current checklist, prepared as the module docstring says, and the
    others with the step and reason that left them without one."""
    wh = ctx.warehouse
    # The key the scripted conditions tell the benign intent by (CarryOnBench's: intent).
    intent = next((c.script.intent for c in ctx.config.spec.conditions if c.script), "intent")
    ready, skipped, _ = select_checklisted(wh, items, key=lambda i: i.item_id)
    by_id = {r["query_id"]: r for r in ready}
    versions = current_checklists(wh, sorted(by_id))
    questions = checklist_items(wh, versions)
    out = []
    for i in items:
        if i.item_id not in by_id:
            continue
        r = by_id[i.item_id]
        out.append(replace(
            i, prompts={**i.prompts, "oracle": r["oracle_prompt"]},
            hidden={**i.hidden, intent: r["intent"], CHECKLIST: questions.get(i.item_id, []),
                    CHECKLIST_VERSION: versions.get(i.item_id)}))
    return out, skipped
