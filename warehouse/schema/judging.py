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


class SafetyJudgment(SQLModel, table=True):
    __tablename__ = "safety_judgments"
    judgment_set_id: str = Field(primary_key=True)
    conversation_id: str = Field(primary_key=True)
    position: int = Field(primary_key=True)
    model_turn: int
    score: int | None = None  # 1..5; null = unscored (see reason)
    reason: str | None = None
