"""The shared warehouse tables every benchmark uses, as SQLModel classes (one module per
concern): the engine's (items, episodes, verdicts), the platform's (runs, calls, batches, stage
memos), a judge panel's agreement and human validation. A stage or a benchmark brings its own
tables beside it (the checklists stage's, CarryOnBench's: tasks/core/registry.py ``tables``)."""

from warehouse.schema.engine import (
    BenchCondition, BenchItem, Episode, EpisodeTurn, MoveCheck, Verdict, VerdictSet, VerdictVote,
)
from warehouse.schema.judging import JudgeAgreement, JudgeCalibration
from warehouse.schema.platform import LLMBatch, LLMCall, Run, StageMemo
from warehouse.schema.validation import (
    ValidationAnnotation, ValidationAssignment, ValidationSample, ValidationUnit,
)

__all__ = [
    "BenchCondition", "BenchItem", "Episode", "EpisodeTurn", "Verdict", "VerdictSet", "VerdictVote",
    "JudgeAgreement", "JudgeCalibration", "LLMBatch", "LLMCall", "MoveCheck", "Run", "StageMemo",
    "ValidationAnnotation", "ValidationAssignment", "ValidationSample", "ValidationUnit",
]
