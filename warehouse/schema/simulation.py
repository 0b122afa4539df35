"""Tables of stage 2: simulated conversations and their turns."""

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
    # completed | target_error | simulator_error | context_exceeded
    status: str
    error: str | None = None  # "<error_kind>: <message>" of the call that ended it
    error_call_hash: str | None = None  # that call's hash (its provenance is in llm_calls)
    n_turns: int | None = None  # turns stored (both sides); == length only when completed
    run_id: str | None = None


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
