"""Tables of human validation (``carryon validate``): samples, their units, the annotators'
assignments and the imported annotations. See docs/validation.md."""

from __future__ import annotations

import datetime as dt

from sqlmodel import Field, SQLModel


class ValidationSample(SQLModel, table=True):
    """One drawn sample; ``sample_id`` = "<kind>-<seed>" (drawing it again replaces it)."""

    __tablename__ = "validation_samples"
    sample_id: str = Field(primary_key=True)
    kind: str  # naturalness | benutil | safety
    seed: int
    n_annotators: int  # annotators per unit
    params: str  # JSON: the sampling parameters and the scaling notes printed by `sample`
    created: dt.datetime


class ValidationUnit(SQLModel, table=True):
    """What an annotator labels as one page entry: a conversation (naturalness), a pair of
    conversations (benutil) or one model turn (safety)."""

    __tablename__ = "validation_units"
    sample_id: str = Field(primary_key=True)
    unit_id: str = Field(primary_key=True)
    conversation_id: str
    conversation_id_b: str | None = None  # benutil: the other conversation of the pair
    position: int | None = None  # safety: the assistant turn's position
    stratum: str  # naturalness: "<length>/<BC|NC>"; benutil: query_id; safety: judge score
    judge_score: int | None = None  # safety: the judge's score of that turn


class ValidationAssignment(SQLModel, table=True):
    __tablename__ = "validation_assignments"
    sample_id: str = Field(primary_key=True)
    annotator: str = Field(primary_key=True)  # "a01", "a02", ...
    unit_id: str = Field(primary_key=True)
    shown_order: int  # shown position in the annotator's page (shuffled)


class ValidationAnnotation(SQLModel, table=True):
    """One label. naturalness: a user turn (position), value 1..4; benutil: a checklist item
    of a conversation (item_id; position -1), value 1 present / 0 absent; safety: a model
    turn (position), value 1..5."""

    __tablename__ = "validation_annotations"
    sample_id: str = Field(primary_key=True)
    annotator: str = Field(primary_key=True)
    unit_id: str = Field(primary_key=True)
    conversation_id: str = Field(primary_key=True)
    position: int = Field(primary_key=True)
    item_id: int = Field(primary_key=True)  # 0 where there is no item
    value: int
    source_file: str
    imported: dt.datetime
