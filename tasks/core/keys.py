"""Sample keys: which sampled calls of the play loop are the same sample.

At temperature 0 the request alone decides the answer and a key changes nothing
(tasks/gateway/keys.py leaves it out of the cache key). For a sampled call the key decides
which episodes share an answer, and a rerun replays each one from the cache. Two ways:

- by transcript (the engine's default, ``None`` on ``PolicyEnv.keys``): the key derives from
  the transcript so far (``PolicyEnv.sample_key``), so episodes of one target that share a
  prefix share its samples;
- by a recipe the spec names (``sample_keys: {name: ..., args: {...}}``), a ``SampleKeys``
  registered with ``@sample_keys(name)`` beside the benchmark that keys so (CarryOnBench's
  ``prefix``: by target, item and the moves so far, as its homes have been keyed since its
  first release: tasks/benchmarks/carryon/keys.py). Its ``KeyScheme`` names the episodes too,
  and episodes of one batch make each distinct call once (``SharedCalls``), so a prefix is
  played once and a failure in it ends every episode through it alike.

A user turn that fails the move check is sampled again under ``resample_key`` (derived from
the turn's own key, so it stays a function of the prefix).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from abc import ABC, abstractmethod


def flow_id(moves) -> str:
    """A script's id (its moves joined): part of episode ids and of a recipe's sample keys."""
    return ">".join(moves)


def resample_key(sample_key: str | None, attempt: int) -> str | None:
    """The sample key of the ``attempt``-th resample of a user turn (attempt 0 = the key)."""
    return sample_key if attempt == 0 or sample_key is None else _hash("resample", sample_key, attempt)


def check_key(sample_key: str | None) -> str:
    """The move checker's key for the user turn sampled under ``sample_key``."""
    return _hash("check", sample_key)


def _hash(*parts) -> str:
    return hashlib.sha256(json.dumps(parts, ensure_ascii=False).encode()).hexdigest()


class KeyScheme(ABC):
    """A run's sample keys (``PolicyEnv.keys``): the id of each episode and the key of each
    sampled call of play. Its episodes through a common prefix make each distinct call once
    in a batch (``SharedCalls``)."""

    @abstractmethod
    def episode_id(self, target: str, item_id: str, condition: str, plan: tuple) -> str:
        """The episode's id."""

    @abstractmethod
    def target(self, seat, state) -> str | None:
        """The key of the target's next answer in ``state``."""

    @abstractmethod
    def user(self, state) -> str | None:
        """The key of the user turn the policy writes next in ``state``."""


class SampleKeys(ABC):
    """A spec's sample-key recipe (``sample_keys: {name: ..., args: {...}}``), registered with
    ``@sample_keys(name, args=...)``: what it needs of the spec, and the run's scheme."""

    def check(self, spec) -> None:
        """What the recipe needs of the spec (ValueError naming the field)."""
        return None

    @abstractmethod
    def scheme(self, cfg) -> KeyScheme:
        """The run's keys under the config."""


def keys_of(spec, cfg) -> KeyScheme | None:
    """The run's key scheme: the spec's recipe's; None (by transcript) when it names none."""
    if spec.sample_keys is None:
        return None
    return spec.component("sample_keys", spec.sample_keys).scheme(cfg)


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
