"""The user-policy protocol: after each target turn, the next user turn or a stop.

A user policy is a ``UserPolicy`` (below) registered with ``@user_policy(name, ...)``
(tasks/core/registry.py); a spec's conditions name it. It has:

- ``name``: the module's name (stored on every episode);
- ``roles``: the model roles it calls (rows of tasks/roles.py); pre-flight requires them;
- ``async next(env, state) -> UserTurn | Stop``: what the user does after the target's last
  turn, from the item (its hidden intent or slots), the condition, the transcript so far and,
  where the policy reads it, the target's last act;
- ``calls(condition) -> dict[role, int]``: an upper bound on its calls per episode (the plan);
- ``plans(item, condition, seed, scripts) -> list[tuple[str, ...]]``: the scripts an item is
  played with under the condition (one episode each; e.g. the scripted user's move
  sequences); by default one episode with the empty script;
- ``prefix(item, condition, plan) -> list[dict]``: stored turns it replays after the opening
  (none by default);
- ``check_item(item, condition)``: what it needs of an item (``ItemError`` naming the field),
  checked by ``carryon plan`` and pre-flight before anything is played;
- ``check_condition(condition)`` and ``group(condition)``: what it needs of a condition (its
  ``script:``, for the scripted user), checked when the spec loads, and the part the
  condition plays;
- ``continues_after_block``: whether the user answers a turn the provider blocked.

The engine calls ``next`` only after a target turn and only while the condition's turn cap
allows another exchange; the turn cap itself is the engine's stop rule (``turn_cap``). A
policy stops with a reason: ``answered`` (the target answered rather than asked),
``user_stop`` (the simulated user has nothing to add) or ``single_turn`` (one exchange only).
Calls go through ``env.gateway``; a sampled simulator passes ``env.sample_key(...)``, which
derives from the transcript so far, so episodes that share a prefix share its samples.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass

from abc import ABC, abstractmethod

from tasks.core.spec import ConditionSpec
from tasks.core.items import Item

# The move checker's role (tasks/users/move_checker.py): the scripted user calls it, and the
# play loop resolves it to a model (the check itself is the user's).
CHECKER_ROLE = "move_checker"

ANSWERED = "answered"
USER_STOP = "user_stop"
SINGLE_TURN = "single_turn"
TURN_CAP = "turn_cap"
ERROR = "error"


@dataclass
class EpisodeState:
    item: Item
    condition: ConditionSpec
    target: str
    transcript: list[dict]  # {"role": "user" | "assistant", "content": str}, both sides so far
    model_turns: int  # target turns so far
    plan: tuple[str, ...] = ()  # the episode's script (the scripted user's moves), if any


@dataclass(frozen=True)
class UserTurn:
    content: str | None
    call_hash: str | None
    error: str | None = None  # "<error_kind>: <message>" when the simulator call failed
    error_kind: str | None = None
    # The act the policy read of the target's last turn (stored on that turn), if any.
    act: str | None = None
    act_call_hash: str | None = None
    # The move checker's verdicts on this turn's candidates (move_checks rows without their
    # conversation and position), one per attempt, the kept one last.
    checks: tuple = ()


@dataclass(frozen=True)
class Stop:
    reason: str
    act: str | None = None
    act_call_hash: str | None = None


class UserPolicy(ABC):
    """What every user policy is (the module docstring says what each part does)."""

    name: str = ""
    roles: tuple[str, ...] = ()
    continues_after_block: bool = False
    # The template its simulated user is asked with, for the plan's token estimate (None: it
    # renders none, or one per move).
    template: str | None = None

    @abstractmethod
    async def next(self, env, state: "EpisodeState") -> "UserTurn | Stop":
        """The user's turn after the target's last one, or a stop with its reason."""

    @abstractmethod
    def calls(self, condition: ConditionSpec) -> dict[str, int]:
        """An upper bound on its calls per episode, by role (``carryon plan``)."""

    def plans(self, item: Item, condition: ConditionSpec, seed: int,
              scripts=None) -> list[tuple[str, ...]]:
        return [()]

    def prefix(self, item: Item, condition: ConditionSpec, plan: tuple[str, ...]) -> list[dict]:
        return []

    def check_item(self, item: Item, condition: ConditionSpec) -> None:
        return None

    def check_condition(self, condition: ConditionSpec) -> None:
        """What it needs of a condition (ValueError naming the field; the spec loader adds the
        file and the condition). A policy that plays no script refuses one."""
        if condition.script is not None:
            raise ValueError(f"script: the user policy {self.name or type(self).__name__} "
                             "plays no script")

    def group(self, condition: ConditionSpec) -> str | None:
        """The part the condition's episodes play among the spec's (stored as
        ``bench_conditions.script_group``: the scripted user's script group); None here."""
        return None


@dataclass(frozen=True)
class MoveCheck:
    """Check every scripted user turn with ``checker`` and sample a failing one again, up to
    ``max_resamples`` times (tasks/users/move_checker.py)."""

    checker: object  # the move checker's resolved model
    max_resamples: int = 2
    # A completed episode with a user turn that still failed gets the status
    # move_check_failed (the metric views leave it out).
    exclude_failing: bool = False


@dataclass
class PolicyEnv:
    """What a policy may use: the gateway, the resolved models of its roles, the run's
    sample-key scheme (tasks/core/keys.py; None: by transcript) and its move check."""

    gateway: object
    config: object
    keys: object | None = None
    move_check: MoveCheck | None = None

    def spec(self, role: str):
        return self.config.role_spec(role)

    def target_key(self, seat, state) -> str | None:
        """The sample key of the target's next answer in ``state``."""
        if self.keys is not None:
            return self.keys.target(seat, state)
        return self.sample_key(seat.model, "target", state.transcript)

    def user_key(self, spec, state, move: str = "") -> str | None:
        """The sample key of the user turn the policy writes next in ``state``."""
        if self.keys is not None:
            return self.keys.user(state)
        return self.sample_key(spec, "user", state.transcript, move)

    @staticmethod
    def sample_key(spec, kind: str, transcript: list[dict], extra: str = "") -> str | None:
        """At temperature 0 the request decides the answer (no key); a sampled call's key
        derives from the transcript so far, so a rerun replays the same sample."""
        if not spec.temperature:
            return None
        doc = json.dumps([kind, extra, transcript], ensure_ascii=False, sort_keys=True)
        return f"{kind}:" + hashlib.sha256(doc.encode()).hexdigest()[:16]


_LABEL = re.compile(r"^\s*(\[?\s*(you \(the user\)|user|you)\s*\]?\s*:?)\s*\n?", re.I)


# A marker line of a fenced block (prompts.fenced: "<<<BEGIN LABEL T0123...>>>") that a
# simulator copied from its prompt, exactly or nearly: a bracket more or less, the token cut
# short or ended with an ellipsis, or no token. At the start of a line, followed by the end of
# the line or by the turn's own text. The label is capitals, spaces, underscores and
# parentheses ("USER TURN (you)"); a near copy must still end in a token or a ">" so that
# ordinary text starting with "<<END" is not taken for one.
_MARKER_LINE = re.compile(r"^[ \t]*<<<(?:BEGIN|END) [^\n]*>>>[ \t]*$\n?", re.M)  # exact
_MARKER = re.compile(
    r"^[ \t]*<{2,4}[ \t]*(?:BEGIN|END)[ \t]+[A-Z][A-Za-z0-9_ ()-]*?"
    r"(?:[ \t]+T[0-9A-F]{2,}(?:…|\.{2,3})?[ \t]*>{0,4}|[ \t]*>{1,4})[ \t]*(?:\n|$)?", re.M)


def drop_fence_lines(text: str) -> str:
    """``text`` without the fence marker lines (exact or near copies) a simulator echoed."""
    return _MARKER.sub("", _MARKER_LINE.sub("", text)).strip()


def clean_user_turn(text: str) -> str:
    """Drop a speaker label, wrapping quotes or fence marker lines a simulator sometimes
    copies despite the rules; nothing else is changed."""
    t = drop_fence_lines(text)
    m = _LABEL.match(t)
    if m and m.group(1).strip().endswith((":", "]")):
        t = t[m.end():].strip()
    # Wrapping quotes only when they wrap the whole message (no quote of that kind inside).
    pairs = {'"': '"', "'": "'", "“": "”"}
    if len(t) >= 2 and pairs.get(t[0]) == t[-1] and t[0] not in t[1:-1] and t[-1] not in t[1:-1]:
        t = t[1:-1].strip()
    return t
