"""What a kind of human validation is (tasks/validation/__init__.py says how they are used)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Literal

from tasks.validation.episodes import conversation


class ValidationKind(ABC):
    """What one kind of validation samples, shows and measures."""

    name: str = ""
    # What an annotator labels on the page: each user turn of a conversation, each checklist
    # question of a conversation, or one marked assistant turn (the page's script reads it).
    asks: Literal["user_turns", "checklist", "target_turn"] = "target_turn"
    scale: list = []  # [value, label] pairs the page offers, in order
    instructions: str = ""
    # Annotators from a pool, each unit labelled by ``n_annotators`` of them (a study of many
    # units); otherwise every annotator labels every unit.
    pooled: bool = False
    judge: str | None = None  # the judge kind whose verdicts the people are compared with

    def check_annotators(self, n: int) -> None:
        """What the kind needs of the annotators per unit (ValidationError naming the option)."""
        return None

    @abstractmethod
    def draw(self, wh, spec, rng, options: dict) -> tuple[list[dict], list[str]]:
        """(units, notes): the sample's units (``unit_id``, ``conversation_id``, ``stratum``,
        and as the kind needs ``conversation_id_b``, ``position``, ``judge_score``,
        ``length``) and what the notes say of its size."""

    def empty(self, wh, spec) -> str:
        """Why the warehouse has nothing to sample, in the terms of what the run has."""
        return "no completed episodes of this benchmark yet: run it first"

    def conversations(self, wh, spec, unit: dict) -> list[dict]:
        """What the page shows of a unit: its conversations (``conversation_id``, ``query``,
        ``turns``, ``items``)."""
        ids = [unit["conversation_id"]] + ([unit["conversation_id_b"]]
                                           if unit.get("conversation_id_b") else [])
        upto = unit["position"] if self.asks == "target_turn" else None
        return [conversation(wh, spec, cid, upto, self.asks == "checklist") for cid in ids]

    @abstractmethod
    def results(self, wh, sample_id: str) -> dict:
        """The sample's agreement numbers (agreement.py) from its imported labels."""

    @abstractmethod
    def markdown(self, results: dict) -> list[str]:
        """The report's lines of those numbers."""
