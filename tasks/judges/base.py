"""The judge protocol of the episode engine.

A judge module exposes ``JUDGE``, an object with:

- ``kind``: its name (the module's), stored with every verdict and verdict set;
- ``role``: the model role it calls (a row of tasks/roles.py), or None for a judge that
  computes its verdict without a model (exact match, token F1);
- ``optional``: True when the judge is skipped if its role is not configured;
- ``templates``: the prompt templates it renders (their hash is the set's prompt version);
- ``measures``: the measures it writes per turn (``score``, ``act``, ``token_f1``, ...);
- ``wants(turn) -> bool``: which assistant turns it judges (e.g. only the last one);
- ``request(turn) -> Request | None``: the call to make (None: no call, judge from text);
- ``verdicts(turn, parsed) -> list[Measure]``: the measures from a parsed answer (``parsed``
  is None when ``request`` returned None).

The engine (tasks/engine/verdicts.py) does the rest, once for every judge: it sends each
distinct request once, records a failed call as unscored rows (value NULL, reason
``<error_kind>: <message>``) for every measure, stores rows in ``verdicts`` under the
judge's verdict set, and replaces a batch's earlier rows on a rerun. A blocked target turn
(the provider refused to produce it) reaches a judge as ``turn.blocked``; the judge decides
what it means (a refusal, usually) without a call.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel

from tasks.engine.items import Item


@dataclass(frozen=True)
class TurnView:
    """What a judge sees of one assistant turn."""

    item: Item
    condition: str
    episode_id: str
    position: int
    model_turn: int
    prompt: str  # the episode's opening user turn
    response: str | None  # None when the turn failed (judges are not asked about it)
    history: tuple[dict, ...]  # the turns before this response ({"role", "content"})
    is_last: bool  # the episode's last assistant turn
    blocked: bool = False
    act: str | None = None  # the act the user policy read (if it read one)


@dataclass(frozen=True)
class Request:
    messages: list[dict]
    schema: type[BaseModel]


@dataclass(frozen=True)
class Measure:
    measure: str
    value: float | None
    label: str | None = None
    reason: str | None = None


@dataclass
class Judge:
    """A convenient base: subclasses set the fields and implement request/verdicts."""

    kind: str
    role: str | None
    measures: tuple[str, ...]
    templates: tuple[str, ...] = ()
    optional: bool = False
    extra_version: str = ""  # anything else that shapes verdicts (a rule's version)

    def wants(self, turn: TurnView) -> bool:
        return True

    def request(self, turn: TurnView) -> Request | None:
        raise NotImplementedError

    def verdicts(self, turn: TurnView, parsed: BaseModel | None) -> list[Measure]:
        raise NotImplementedError

    def unscored(self, reason: str) -> list[Measure]:
        return [Measure(m, None, None, reason) for m in self.measures]
