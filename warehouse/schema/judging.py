"""The judging tables every judge shares: the pairwise agreement of a panel's judges, and
the agreement of two settings of one judge (``carryon calibrate``).

The verdicts themselves are the engine's tables (engine.py: verdict_sets, verdicts,
verdict_votes); CarryOnBench reads its own as views of the names it has always had
(judgment_sets, item_judgments, safety_judgments, judge_votes: its folder's views.sql)."""

from __future__ import annotations

import datetime as dt

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


class JudgeCalibration(SQLModel, table=True):
    """One measure of a calibration (``carryon calibrate``, tasks/engine/calibrate.py): two
    settings of one judge on the same sample of responses, their agreement and where they
    differ. The report prints the latest one of the set it reads (its prompt version and
    judges) beside its numbers."""

    __tablename__ = "judge_calibrations"
    calibration_id: str = Field(primary_key=True)
    # The measure (Ben-Util: fulfilled, its items pooled; safety: score) or a derived label
    # (safety: harmful).
    measure: str = Field(primary_key=True)
    benchmark: str
    kind: str  # the judge's kind (benutil, safety, ...)
    created: dt.datetime
    # Each setting as JSON (judge, models, arguments, prompt version, the set id its verdicts
    # would form), and the parts the report matches a set by.
    setting_a: str
    setting_b: str
    prompt_version_a: str
    prompt_version_b: str
    judges_a: str  # JSON list of the setting's models, as verdict_sets.judges
    judges_b: str
    mode_a: str | None = None  # Ben-Util's mode (per_item, per_response); null for others
    mode_b: str | None = None
    seed: int
    n_boot: int
    level: float
    sample_responses: int  # the judged responses of the sample
    sample_episodes: int
    sample_items: int  # the items (CarryOnBench: queries) the bootstrap resamples
    n: int  # units both settings scored
    n_clusters: int
    n_unscored_a: int  # units only the other setting scored (or neither)
    n_unscored_b: int
    share: float | None = None  # agreement over the n units
    disagree: float | None = None
    kappa: float | None = None  # Cohen's kappa; null where undefined (one label only)
    kappa_lo: float | None = None  # its percentile interval, clustered by item
    kappa_hi: float | None = None
    details: str  # JSON: disagreement by position, length, condition, target; Table 2 shifts
