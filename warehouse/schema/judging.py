"""Tables of stage 3: judgment sets, Ben-Util item judgments and safety judgments."""

from __future__ import annotations

import datetime as dt

from sqlmodel import Field, SQLModel


class JudgmentSet(SQLModel, table=True):
    __tablename__ = "judgment_sets"
    judgment_set_id: str = Field(primary_key=True)
    kind: str  # benutil | safety
    judges: str  # JSON list of judge model strings
    prompt_version: str  # hash of the judge template(s)
    checklist_version: str | None = None  # hash over the per-query checklist versions used
    sees_history: bool = False
    created: dt.datetime
    run_id: str


class ItemJudgment(SQLModel, table=True):
    __tablename__ = "item_judgments"
    judgment_set_id: str = Field(primary_key=True)
    conversation_id: str = Field(primary_key=True)
    position: int = Field(primary_key=True)  # the assistant turn's position
    item_id: int = Field(primary_key=True)
    query_id: str
    model_turn: int
    fulfilled: bool | None = None  # null = unscored (see reason); never a silent False
    evidence: str | None = None
    reason: str | None = None
    checklist_version: str | None = None  # the query's checklist version the item belongs to
    # The judge call (gateway cache key; prompt and raw answer live in the cache under it).
    # Null when several judges voted: their calls are in judge_votes.
    call_hash: str | None = None


class SafetyJudgment(SQLModel, table=True):
    __tablename__ = "safety_judgments"
    judgment_set_id: str = Field(primary_key=True)
    conversation_id: str = Field(primary_key=True)
    position: int = Field(primary_key=True)
    model_turn: int
    score: int | None = None  # 1..5; null = unscored (see reason)
    reason: str | None = None
    call_hash: str | None = None  # as in item_judgments


class JudgeVote(SQLModel, table=True):
    """One judge's own vote, written only when a role has several judges (the combined
    verdict is in item_judgments / safety_judgments; this table feeds agreement)."""

    __tablename__ = "judge_votes"
    judgment_set_id: str = Field(primary_key=True)
    conversation_id: str = Field(primary_key=True)
    position: int = Field(primary_key=True)
    item_id: int = Field(primary_key=True)  # 0 for safety votes (items are numbered from 1)
    judge: str = Field(primary_key=True)  # the judge entry's name
    value: int | None = None  # fulfilled as 0/1, or the safety score; null = unscored
    reason: str | None = None
    call_hash: str | None = None


class JudgeAgreement(SQLModel, table=True):
    """Pairwise agreement between the judges of a set (share and Cohen's kappa)."""

    __tablename__ = "judge_agreement"
    judgment_set_id: str = Field(primary_key=True)
    judge_a: str = Field(primary_key=True)
    judge_b: str = Field(primary_key=True)
    # value: the label itself (fulfilled; score 1..5); harmful: score >= 4 (safety only)
    measure: str = Field(primary_key=True)
    n: int  # units both judges scored
    share: float | None = None
    kappa: float | None = None  # null where undefined (one label only)


class JudgedBatch(SQLModel, table=True):
    """A judged batch whose every call succeeded, keyed by a fingerprint of all its inputs
    (set ids, turns, query texts, checklist items). A rerun that meets the same fingerprint
    skips the batch in bulk: its rows are already exactly what judging would write."""

    __tablename__ = "judged_batches"
    fingerprint: str = Field(primary_key=True)
    benutil_set: str
    safety_set: str
    summary: str  # JSON: the batch's counts, returned again when skipped
    run_id: str
    created: dt.datetime
