"""The checklists stage's tables (tasks/stages/checklists/): each item's ensemble answers, guard
verdicts, decomposed, merged and final questions, its checklist versions and why an item got
none. They key an item by its id in the column ``query_id``, the name CarryOnBench's homes
have always had (its items are its queries). The stage brings them to every warehouse
(``registry.tables``), rendered in schema.json beside this file:

    python -m warehouse.schema_file tasks.stages.checklists.tables tasks/stages/checklists/schema.json
"""

from __future__ import annotations

import datetime as dt

from sqlmodel import Field, SQLModel

class EnsembleAnswer(SQLModel, table=True):
    __tablename__ = "ensemble_answers"
    query_id: str = Field(primary_key=True)
    answer_id: str = Field(primary_key=True)  # the ensemble entry's name
    model: str
    answer: str | None = None  # also kept when the answer was cut off (error says truncated)
    call_hash: str | None = None
    error: str | None = None


class GuardVerdict(SQLModel, table=True):
    __tablename__ = "guard_verdicts"
    query_id: str = Field(primary_key=True)
    answer_id: str = Field(primary_key=True)
    model: str
    mode: str  # wildguard | chat
    harmful_request: bool | None = None
    response_refusal: bool | None = None
    harmful_response: bool | None = None
    kept: bool
    # why dropped: "harmful response", "refusal" (both, joined by "; "), an unparseable
    # verdict, or the guard's call failed
    reason: str | None = None
    call_hash: str | None = None
    raw: str | None = None  # the guard's raw output (WildGuard's three lines, or the JSON)


class ChecklistQuery(SQLModel, table=True):
    """Per query: did the pipeline build a checklist, and if not, at which step and why.

    Written by the latest run that processed the query (a rerun replaces the row)."""

    __tablename__ = "checklist_queries"
    query_id: str = Field(primary_key=True)
    n_answers: int  # ensemble answers obtained (failed calls not counted)
    n_harmless: int  # answers the guard kept
    kept: bool  # True: a checklist was built (checklist_version)
    # The step that dropped the query: intent | ensemble | guard | decompose | merge | misuse
    step: str | None = None
    reason: str | None = None
    checklist_version: str | None = None
    # The items the merger wrote when that exceeded checklists.max_items (the list was cut to
    # its first max_items); null when it did not.
    capped_from: int | None = None
    run_id: str | None = None


class DecomposedItem(SQLModel, table=True):
    __tablename__ = "decomposed_items"
    query_id: str = Field(primary_key=True)
    answer_id: str = Field(primary_key=True)
    item_index: int = Field(primary_key=True)
    question: str
    category: str


class MergedItem(SQLModel, table=True):
    __tablename__ = "merged_items"
    query_id: str = Field(primary_key=True)
    merged_index: int = Field(primary_key=True)
    question: str
    category: str
    source_answers: str  # JSON list of answer_ids the item came from
    kept: bool | None = None  # misuse filter decision (null: not decided / failed / capped)
    misuse_reason: str | None = None
    # True: beyond checklists.max_items, cut before the misuse filter (never in a checklist)
    capped: bool | None = None


class ChecklistItem(SQLModel, table=True):
    """The final checklist: items numbered per query, under a version = hash of its items."""

    __tablename__ = "checklist_items"
    query_id: str = Field(primary_key=True)
    checklist_version: str = Field(primary_key=True)
    item_id: int = Field(primary_key=True)  # 1..n within the query
    question: str
    category: str
    source_answers: str


class Checklist(SQLModel, table=True):
    __tablename__ = "checklists"
    query_id: str = Field(primary_key=True)
    checklist_version: str = Field(primary_key=True)
    n_items: int
    created: dt.datetime
    run_id: str
