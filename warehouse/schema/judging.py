"""The judging table every judge panel shares: the pairwise agreement of its judges.

The verdicts themselves are the engine's tables (engine.py: verdict_sets, verdicts,
verdict_votes); CarryOnBench reads its own as views of the names it has always had
(judgment_sets, item_judgments, safety_judgments, judge_votes: its folder's views.sql)."""

from __future__ import annotations

from sqlmodel import Field, SQLModel


class JudgeAgreement(SQLModel, table=True):
    """Pairwise agreement between the judges of a set (share and Cohen's kappa)."""

    __tablename__ = "judge_agreement"
    judgment_set_id: str = Field(primary_key=True)
    judge_a: str = Field(primary_key=True)
    judge_b: str = Field(primary_key=True)
    # The measure (Ben-Util: fulfilled, over its items pooled; safety: score) or a label
    # derived from it (safety: harmful = score >= 4). Sets written before the verdicts stage
    # judged CarryOnBench name the measure itself value.
    measure: str = Field(primary_key=True)
    n: int  # units both judges scored
    share: float | None = None
    kappa: float | None = None  # null where undefined (one label only)
