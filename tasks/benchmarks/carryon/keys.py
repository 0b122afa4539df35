"""CarryOnBench's key recipes, registered like its other components and named in its spec:

- ``sample_keys: {name: prefix, args: {oracle: <condition>}}`` (``{by: prefix, oracle: ...}``
  in older specs): its sampled calls keyed by (target, query, the moves so far) and its
  episodes named by their conversation (target, query, script), as since its first release:
  homes built then replay from the cache only under these keys, so they never change. The
  config's ``scripts.share_prefix`` says whether conversations through a common prefix share
  its samples; off, each conversation samples its own turns, keyed by its position.
- ``verdict_keys: judgment_sets``: its verdict sets named as its judge stage named its
  judgment sets (a hash over the panel with each model's entry name, the judge's prompt
  version, the run's checklist versions and whether it sees the history), and a sampled
  judge's calls keyed by its last message, so every set id and cache key of an older home is
  unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict

from prompts import text_hash
from tasks.core.judges import VerdictKeys, set_hash
from tasks.core.keys import KeyScheme, SampleKeys, _hash, flow_id
from tasks.core.registry import sample_keys, verdict_keys
from tasks.users.scripted import script_of

TARGET_ROLE = "targets"
SIMULATOR_ROLE = "user_simulator"
# What the oracle conversation's ids and keys say, whatever the spec calls its condition:
# they are cache and warehouse keys, and renaming a condition must not invalidate them.
ORACLE = "oracle"


def conversation_id(target: str, query_id: str, script: str) -> str:
    """A conversation's id: (target, query, its script's id (``flow_id``) or ``oracle``)."""
    return _hash("conversation", target, query_id, script)[:32]


def prefix_sample_key(role: str, target: str, query_id: str, prefix) -> str:
    """Shared mode: the same (target, query, move prefix) gives the same sample."""
    return _hash("prefix", role, target, query_id, list(prefix))


def conversation_sample_key(role: str, conv_id: str, position: int) -> str:
    """Independent mode: every conversation samples its own turns."""
    return _hash("conversation", role, conv_id, position)


@dataclass(frozen=True)
class PrefixKeys(KeyScheme):
    """The run's keys. An episode's item is a query, its script the flow's moves; the exchange
    after ``k`` moves has the prefix ``script[:k]``; the oracle condition's one answer has the
    prefix ``["oracle"]``."""

    share: bool
    oracle: str  # the name of the spec's oracle condition

    def _key(self, role: str, state, prefix: list, position: int) -> str:
        qid = state.item.item_id
        if self.share:
            return prefix_sample_key(role, state.target, qid, prefix)
        flow = ORACLE if state.condition.name == self.oracle else flow_id(state.plan)
        return conversation_sample_key(role, conversation_id(state.target, qid, flow), position)

    def episode_id(self, target: str, item_id: str, condition: str, plan: tuple) -> str:
        """The episode's id: its conversation's (the oracle's script is ``oracle``)."""
        return conversation_id(target, item_id, ORACLE if condition == self.oracle else flow_id(plan))

    def target(self, seat, state) -> str:
        """The key of the target's next answer (``state.model_turns`` answers so far)."""
        if state.condition.name == self.oracle:
            return self._key(TARGET_ROLE, state, [ORACLE], 1)
        prefix = list(state.plan[:state.model_turns])
        return self._key(TARGET_ROLE, state, prefix, 2 * len(prefix) + 1)

    def user(self, state) -> str:
        """The key of the user turn that plays move ``script[model_turns - 1]``."""
        prefix = list(state.plan[:state.model_turns])
        return self._key(SIMULATOR_ROLE, state, prefix, 2 * len(prefix))


class PrefixArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    oracle: str  # the condition keyed as the oracle (one turn, no script)


@sample_keys("prefix", args=PrefixArgs)
class Prefix(SampleKeys):
    """Keys by move prefix (the module docstring)."""

    def __init__(self, args: PrefixArgs):
        self.oracle = args.oracle

    def check(self, spec) -> None:
        # Prefix keys name an episode by its script (the oracle's by "oracle"): every other
        # condition needs a script, or two unscripted conditions would share their ids.
        if self.oracle not in spec.condition_names:
            raise ValueError(f"sample_keys.oracle: no condition {self.oracle!r}")
        c = spec.condition(self.oracle)
        if c.script is not None or c.max_turns != 1:
            raise ValueError(f"sample_keys.oracle: condition {self.oracle} must be one turn "
                             "without a script")
        bare = [c.name for c in spec.conditions if c.name != self.oracle and script_of(c) is None]
        if bare:
            raise ValueError(f"sample_keys: prefix keys need a script on every condition but "
                             f"the oracle ({bare[0]} has none)")

    def scheme(self, cfg) -> PrefixKeys:
        return PrefixKeys(cfg.scripts.share_prefix, self.oracle)


def _ident(model) -> dict:
    return {"model": model.model, "params": model.generation_params(),
            "structured": model.structured}


def judgment_set_id(kind: str, models: list, prompt_version: str, items_version: str | None,
                    extra: dict) -> str:
    """A set id: every judge model of the panel with its entry name, the prompt version, the
    hash over the items' versions (its checklist versions) and what else of the judge's own
    makes another set (``extra``: whether it sees the history; quote choices only when on)."""
    doc = {"kind": kind, "prompt": prompt_version, "checklist": items_version,
           "judges": [{"name": m.name, **_ident(m)} for m in models], **extra}
    return kind + "-" + set_hash(doc)


def judgment_sample_key(spec, messages: list[dict]) -> str | None:
    """At temperature 0 the request alone determines the answer; a sampled judge gets a key
    derived from the request's last message, so reruns replay the same sample."""
    return None if not spec.temperature else "judge:" + text_hash(messages[-1]["content"])[:16]


@verdict_keys("judgment_sets")
class JudgmentSets(VerdictKeys):
    """Its sets as its judge stage made its judgment sets (the module docstring)."""

    def set_id(self, judge, models: list, items_version: str | None) -> tuple[str, str]:
        prompt_version, extra = judge.judgment_identity()
        return judgment_set_id(judge.kind, models, prompt_version, items_version, extra), \
            prompt_version

    def sample_key(self, model, messages: list[dict]) -> str | None:
        return judgment_sample_key(model, messages)
