"""Target policies: who sits in the target's seat of an episode.

A target policy is registered with ``@target_policy(name, ...)`` (tasks/core/registry.py)
and named in a spec's ``targets:`` (default ``[llm]``). It has:

- ``takes_model``: True when it speaks through a configured target model (``models.targets``):
  the engine gives it one seat per target model. False for a deterministic policy (a
  reference planner): one seat of its own, named after the policy, and no model.
- ``async respond(env, seat, state) -> reply``: the target's next turn after ``state`` (the
  item, the condition, the transcript so far). A reply has ``ok``, ``content``,
  ``error_kind``, ``error`` and ``call_hash`` (a gateway result is one; ``Reply`` for a
  policy that computes its answer). ``error_kind == "content_blocked"`` is a turn the provider
  refused to produce. A reply may carry ``aside`` (JSON text the policy states beside its
  response): the engine stores it on the turn for the judges and keeps it out of the
  transcript, so the user policy never sees it.
- ``calls(condition) -> dict[role, int]``: calls per target turn beyond the target model's
  own one, for ``carryon plan`` (none by default).

A target policy is a ``TargetPolicy`` (below).

Seat names are what ``episodes.target`` stores: a target model's own name under ``llm`` (so
homes built before target policies keep their episode ids), ``<target>+<policy>`` for a
policy that wraps a model, the policy's name for a deterministic one.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass


@dataclass(frozen=True)
class Reply:
    """A target turn a policy computed itself (no call)."""

    content: str | None
    ok: bool = True
    error_kind: str | None = None
    error: str | None = None
    call_hash: str | None = None
    # What the policy states beside its response (JSON text; e.g. a perceive-then-respond
    # target's perceived intent): stored on the turn (episode_turns.aside) for the judges,
    # never put in the transcript the user policy reads.
    aside: str | None = None


class TargetPolicy(ABC):
    """What every target policy is (the module docstring says what each part does)."""

    name: str = ""
    takes_model: bool = True

    @abstractmethod
    async def respond(self, env, seat: "Seat", state):
        """The target's next turn: a gateway result or a ``Reply``."""

    def calls(self, condition) -> dict[str, int]:
        return {}


@dataclass(frozen=True)
class Seat:
    """One target of a run: its stored name, its policy and its model (None: deterministic)."""

    name: str
    policy_name: str
    policy: TargetPolicy
    model: object | None = None


def seats(spec, target_models: list) -> list[Seat]:
    """The run's seats: each target policy of the spec, once per target model when it takes
    one, once on its own otherwise."""
    out = []
    for name, policy in spec.target_policies():
        if policy.takes_model:
            for m in target_models:
                seat = m.name if name == "llm" else f"{m.name}+{name}"
                out.append(Seat(seat, name, policy, m))
        else:
            out.append(Seat(name, name, policy, None))
    names = [s.name for s in out]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ValueError(f"targets: two seats are named {dup[0]!r} (a target model named like "
                         "a deterministic target policy?)")
    return out
