"""Sample keys: which sampled calls of the play loop are the same sample.

At temperature 0 the request alone decides the answer and a key changes nothing
(tasks/gateway/keys.py leaves it out of the cache key). For a sampled call the key decides
which episodes share an answer, and a rerun replays each one from the cache. Two schemes:

- by transcript (the engine's default, ``None`` on ``PolicyEnv.keys``): the key derives from
  the transcript so far (``PolicyEnv.sample_key``), so episodes of one target that share a
  prefix share its samples;
- by move prefix (``PrefixKeys``, CarryOnBench's): the key derives from (target, item, the
  moves so far), as CarryOnBench has keyed its simulation since its first release. Homes built
  then replay from the cache only under these keys, so they are cache keys and never change.
  With ``share`` off each conversation samples its own turns, keyed by its position.

A user turn that fails the move check is sampled again under ``resample_key`` (derived from
the turn's own key, so it stays a function of the prefix).

A spec chooses the scheme (``sample_keys: {by: prefix, oracle: <condition>}``; unset: by
transcript), and with it how its episodes are named: under prefix keys an episode's id is
its conversation's (``conversation_id``: target, item, script), and episodes of one batch make
each distinct call once (``SharedCalls``), so a prefix is played once and a failure in it
ends every episode through it alike.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from dataclasses import dataclass

TARGET_ROLE = "targets"
SIMULATOR_ROLE = "user_simulator"
# What the oracle conversation's ids and keys say, whatever the spec calls its condition:
# they are cache and warehouse keys, and renaming a condition must not invalidate them.
ORACLE = "oracle"


def _hash(*parts) -> str:
    return hashlib.sha256(json.dumps(parts, ensure_ascii=False).encode()).hexdigest()


def flow_id(moves) -> str:
    """A script's id (its moves joined): part of conversation ids and prefix sample keys."""
    return ">".join(moves)


def conversation_id(target: str, query_id: str, script: str) -> str:
    """A CarryOnBench conversation's id: (target, query, its script's id (``flow_id``) or ``oracle``)."""
    return _hash("conversation", target, query_id, script)[:32]


def prefix_sample_key(role: str, target: str, query_id: str, prefix) -> str:
    """Shared mode: the same (target, query, move prefix) gives the same sample."""
    return _hash("prefix", role, target, query_id, list(prefix))


def conversation_sample_key(role: str, conv_id: str, position: int) -> str:
    """Independent mode: every conversation samples its own turns."""
    return _hash("conversation", role, conv_id, position)


def resample_key(sample_key: str | None, attempt: int) -> str | None:
    """The sample key of the ``attempt``-th resample of a user turn (attempt 0 = the key)."""
    return sample_key if attempt == 0 or sample_key is None else _hash("resample", sample_key, attempt)


def check_key(sample_key: str | None) -> str:
    """The move checker's key for the user turn sampled under ``sample_key``."""
    return _hash("check", sample_key)


@dataclass(frozen=True)
class PrefixKeys:
    """CarryOnBench's keys. An episode's item is a query, its script the flow's moves; the
    exchange after ``k`` moves has the prefix ``script[:k]``; the oracle condition's one
    answer has the prefix ``["oracle"]``."""

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


def keys_of(spec, cfg) -> PrefixKeys | None:
    """The run's key scheme: the spec's ``sample_keys`` with the config's
    ``scripts.share_prefix``; None (by transcript) when the spec sets none."""
    keys = spec.sample_keys
    return None if keys is None else PrefixKeys(cfg.scripts.share_prefix, keys.oracle)


class SharedCalls:
    """The gateway, but each distinct chat call is made once while this object lives (one
    batch of episodes): episodes through a common prefix await the same answer, or the same
    failure, as a prefix tree would give them."""

    def __init__(self, gateway):
        self._gw, self._calls = gateway, {}

    async def chat(self, spec, role, messages, *, schema=None, sample_key=None, live=False,
                   cache_prefix=None):
        key = (role, self._gw.chat_key(spec, messages, schema, sample_key), live)
        task = self._calls.get(key)
        if task is None:
            # (cache_prefix: how the request travels, not what it asks; not in the key)
            more = {"cache_prefix": cache_prefix} if cache_prefix is not None else {}
            task = self._calls[key] = asyncio.ensure_future(self._gw.chat(
                spec, role, messages, schema=schema, sample_key=sample_key, live=live, **more))
        return await task

    def __getattr__(self, name):
        return getattr(self._gw, name)
