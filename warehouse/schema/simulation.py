"""Tables of CarryOnBench's simulate stage: its conversations and their turns (the move
checker's verdicts are the play loop's, warehouse/schema/engine.py ``move_checks``)."""

from __future__ import annotations

from sqlmodel import Field, SQLModel


class Conversation(SQLModel, table=True):
    __tablename__ = "conversations"
    conversation_id: str = Field(primary_key=True)  # hash of (target, query_id, flow_id)
    target: str  # the target entry's name
    query_id: str
    flow_id: str  # the move sequence joined by '>' ; 'oracle' for the oracle condition
    condition: str  # BC | NC | oracle
    length: int  # turns of both sides (2 for oracle)
    n_moves: int
    # completed | target_error | simulator_error | context_exceeded | move_check_failed (a
    # user turn still failed the move checker after its resamples and move_check.exclude_failing
    # is on; the metric views keep only completed conversations)
    status: str
    error: str | None = None  # "<error_kind>: <message>" of the call that ended it
    error_call_hash: str | None = None  # that call's hash (its provenance is in llm_calls)
    n_turns: int | None = None  # turns stored (both sides); == length only when completed
    # The run that wrote the slice; a later run that reproduced it exactly leaves it as it is.
    run_id: str | None = None
    # The move checker: True = a user turn still failed after its resamples; False = every
    # checked turn passed; NULL = no move checker configured (or nothing to check).
    move_check_failed: bool | None = None
    n_blocked: int | None = None  # target turns the provider blocked (stored as refusals)


class Turn(SQLModel, table=True):
    __tablename__ = "turns"
    conversation_id: str = Field(primary_key=True)
    position: int = Field(primary_key=True)  # 0-based over both sides
    role: str  # user | assistant
    # The exchange number, 1-based: user turn k and the model's answer to it share k.
    model_turn: int
    # The user move of this exchange ('query' for turn 1, 'oracle' for the oracle prompt);
    # on assistant rows, the move being answered.
    move: str
    content: str | None = None
    call_hash: str | None = None  # null for turn 1's user query (verbatim, no call)
    # Assistant turns: True when the provider refused to produce the answer (finish reason
    # content_filter or an error it marks as a safety block). content then holds the fixed
    # marker tasks.benchmarks.carryon.simulate.BLOCKED_CONTENT, call_hash the failed call, and the judges score
    # the turn as a refusal without a call. NULL on user turns and on rows of older versions.
    blocked: bool | None = None
