"""Every warehouse table, as SQLModel classes (one module per stage)."""

from warehouse.schema.checklists import (
    Checklist, ChecklistItem, ChecklistQuery, DecomposedItem, EnsembleAnswer, GuardVerdict,
    Intent, MergedItem, Query,
)
from warehouse.schema.engine import (
    BenchCondition, BenchItem, Episode, EpisodeTurn, MoveCheck, Verdict, VerdictSet, VerdictVote,
)
from warehouse.schema.judging import JudgeAgreement, JudgeCalibration
from warehouse.schema.platform import LLMBatch, LLMCall, Run, StageMemo
from warehouse.schema.report import Table2CI
from warehouse.schema.validation import (
    ValidationAnnotation, ValidationAssignment, ValidationSample, ValidationUnit,
)

__all__ = [
    "BenchCondition", "BenchItem", "Episode", "EpisodeTurn", "Verdict", "VerdictSet", "VerdictVote",
    "Checklist", "ChecklistItem", "ChecklistQuery", "DecomposedItem",
    "EnsembleAnswer", "GuardVerdict", "Intent", "JudgeAgreement", "JudgeCalibration",
    "LLMBatch", "LLMCall",
    "MergedItem", "MoveCheck", "Query", "Run", "StageMemo", "Table2CI",
    "ValidationAnnotation", "ValidationAssignment", "ValidationSample", "ValidationUnit",
]
