"""Tables of the episode engine: items, episodes, their turns, the move checker's verdicts on
user turns, and judges' verdicts. Every benchmark's episodes are here (CarryOnBench's read
as ``conversations`` and ``turns``, views beside its spec)."""

from __future__ import annotations

import datetime as dt

from sqlalchemy import Double
from sqlmodel import Field, SQLModel


class BenchItem(SQLModel, table=True):
    """One item of a benchmark as its loader read it."""

    __tablename__ = "bench_items"
    benchmark: str = Field(primary_key=True)
    item_id: str = Field(primary_key=True)  # stable: a hash of the item's identity in its file
    source_row: int  # 0-based position in the source file
    prompts: str  # JSON {prompt name: text}: the openings a condition may use
    hidden: str  # JSON: what only the simulated user and the judges see (intent, slots, answers)
    meta: str  # JSON: grouping fields for the report (domain, task type, ambiguity, ...)
    run_id: str | None = None


class Episode(SQLModel, table=True):
    """One item under one condition against one target."""

    __tablename__ = "episodes"
    # hash of (benchmark, target, item_id, condition[, script])
    episode_id: str = Field(primary_key=True)
    benchmark: str
    item_id: str
    condition: str
    target: str  # the target entry's name
    user_policy: str
    script: str | None = None  # the scripted user's moves joined by '>' (NULL: no script)
    # completed | target_error | simulator_error | context_exceeded (the metric views keep
    # only completed episodes)
    status: str
    # Why the episode ended: turn_cap | answered | user_stop | single_turn | error
    termination: str
    n_turns: int  # turns stored (both sides)
    error: str | None = None  # "<error_kind>: <message>" of the call that ended it
    error_call_hash: str | None = None
    run_id: str | None = None


class EpisodeTurn(SQLModel, table=True):
    __tablename__ = "episode_turns"
    episode_id: str = Field(primary_key=True)
    position: int = Field(primary_key=True)  # 0-based over both sides
    role: str  # user | assistant
    model_turn: int  # 1-based exchange number: user turn k and the answer to it share k
    content: str | None = None
    call_hash: str | None = None  # null for the opening user turn (verbatim, no call)
    blocked: bool | None = None  # assistant turns the provider refused to produce
    # Assistant turns the user policy read: the response act it saw (direct_answer,
    # clarifying_question, refusal, hedge; NULL when not read or the act call failed).
    act: str | None = None
    act_call_hash: str | None = None
    # Assistant turns of a target policy that states something beside its response (JSON,
    # e.g. a perceive-then-respond target's {"perceived_intent": ...}); never shown to the
    # user policy. NULL for every other target.
    aside: str | None = None


class VerdictSet(SQLModel, table=True):
    """A judge kind with one judge model and one prompt version: reruns with the same judge
    replace its rows; another judge or template makes a new set (views pick the latest)."""

    __tablename__ = "verdict_sets"
    judgment_set_id: str = Field(primary_key=True)
    benchmark: str
    kind: str  # the judge module's name (helpfulness, harmfulness, act, reference, ...)
    judge: str | None = None  # the judge's model string; NULL for a judge without a model
    prompt_version: str
    created: dt.datetime
    run_id: str
    # Added with Ben-Util's and safety's sets on the engine (NULL in sets written before):
    judges: str | None = None  # JSON list of the judge model strings, in vote order
    # A hash over the versions of the items' hidden data the judge read (Ben-Util: each
    # item's checklist version); NULL for a judge that reads none.
    item_version: str | None = None
    args: str | None = None  # JSON of the judge's arguments that differ from their defaults


class Verdict(SQLModel, table=True):
    """One measure of one judge on one assistant turn. value NULL = unscored (see reason),
    never a silent zero."""

    __tablename__ = "verdicts"
    judgment_set_id: str = Field(primary_key=True)
    episode_id: str = Field(primary_key=True)
    position: int = Field(primary_key=True)  # the assistant turn's position
    # e.g. score, act, exact_match, token_f1; a judge that asks per unit of the item writes
    # <measure>:<unit> (Ben-Util: fulfilled:<checklist item id>)
    measure: str = Field(primary_key=True)
    kind: str
    model_turn: int
    # The number (a score, 0/1, an F1), in DOUBLE: a 4-byte REAL would store 2/3 as 0.6666667.
    value: float | None = Field(default=None, sa_type=Double)
    label: str | None = None  # a category (an act), where the measure has one
    reason: str | None = None  # the judge's reasoning, or why it is unscored
    call_hash: str | None = None
    # The quote a judge gave for its verdict (Ben-Util's evidence), apart from its reasoning.
    evidence: str | None = None
    # The version of the item's hidden data this verdict read (Ben-Util: the checklist's).
    item_version: str | None = None


class VerdictVote(SQLModel, table=True):
    """One judge model's own measure when several vote in a set (the combined verdict is in
    ``verdicts``; these rows feed the panel's agreement, ``judge_agreement``)."""

    __tablename__ = "verdict_votes"
    judgment_set_id: str = Field(primary_key=True)
    episode_id: str = Field(primary_key=True)
    position: int = Field(primary_key=True)
    measure: str = Field(primary_key=True)
    judge: str = Field(primary_key=True)  # the judge entry's name
    kind: str
    model_turn: int
    value: float | None = Field(default=None, sa_type=Double)
    label: str | None = None
    reason: str | None = None
    call_hash: str | None = None
    evidence: str | None = None  # as in verdicts
    item_version: str | None = None


class BenchCondition(SQLModel, table=True):
    """A benchmark's conditions as its spec names them, so the views read the names from the
    spec: every run writes its spec's rows (replacing that benchmark's), and opening a
    warehouse seeds the built-in specs' rows where a benchmark has none."""

    __tablename__ = "bench_conditions"
    benchmark: str = Field(primary_key=True)
    condition: str = Field(primary_key=True)
    position: int  # order in the spec
    prompt: str | None = None  # the item's prompt that opens it (query, oracle, benign, ...)
    user_policy: str
    script_group: str | None = None  # BC / NC for a scripted user
    max_turns: int


class MoveCheck(SQLModel, table=True):
    """One verdict of the move checker on one candidate user turn, written by the play loop
    for any benchmark whose user policy checks its turns. Attempt 0 is the first sample;
    attempts 1.. are resamples (new sample keys) after a failing verdict. The candidate that
    went into the conversation has ``kept`` = True (the last attempt)."""

    __tablename__ = "move_checks"
    # The id of the episode the turn belongs to, as the stage that played it stores it (the
    # column's name is the one users have queried since the table's first release).
    conversation_id: str = Field(primary_key=True)
    position: int = Field(primary_key=True)  # the user turn's position in turns
    attempt: int = Field(primary_key=True)
    move: str
    content: str | None = None  # the candidate user turn
    sim_call_hash: str | None = None  # the simulator call that wrote it
    realises_move: bool | None = None
    reveals_purpose: bool | None = None
    passed: bool | None = None  # null = the checker call failed (see error): unchecked
    kept: bool = False
    reasoning: str | None = None
    error: str | None = None
    call_hash: str | None = None  # the checker call
