"""The judge protocol of the episode engine.

A judge module exposes ``JUDGE``, an object with:

- ``kind``: its name (the module's), stored with every verdict and verdict set;
- ``role``: the model role it calls (a row of tasks/roles.py), or None for a judge that
  computes its verdict without a model (exact match, token F1);
- ``optional``: True when the judge is skipped if its role is not configured;
- ``templates``: the prompt templates it renders (their hash is the set's prompt version);
- ``measures``: the measures it writes per turn (``score``, ``act``, ``token_f1``, ...);
- ``wants(turn) -> bool``: which assistant turns it judges (e.g. only the last one);
- ``request(turn) -> Request | EmbedRequest | None``: the call to make (None: no call, judge
  from text; an ``EmbedRequest``: embeddings of its texts through the gateway's ``embed``,
  cached and recorded like chat calls, ``parsed`` then being the list of vectors);
- ``verdicts(turn, parsed) -> list[Measure]``: the measures from a parsed answer (``parsed``
  is None when ``request`` returned None).

In a batch, a judge runs as a ``SpecKind``: the one judge protocol of every kind
(tasks/judges/protocol.py, shared with CarryOnBench's Ben-Util and safety), so the calls go
through the same loop: each distinct request is sent once, a failed call is recorded as
unscored rows (value NULL, reason ``<error_kind>: <message>``) for every measure. The
engine (tasks/engine/verdicts.py) stores the rows in ``verdicts`` under the judge's verdict
set and replaces a batch's earlier rows on a rerun. A blocked target turn
(the provider refused to produce it) reaches a judge as ``turn.blocked``; the judge decides
what it means (a refusal, usually) without a call.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import dataclass

from pydantic import BaseModel

from tasks.engine.items import Item
from tasks.judges.protocol import JudgeKind


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
    # What the target policy stated beside each of the episode's assistant turns up to and
    # including this one (episode_turns.aside, JSON text or None), in order.
    asides: tuple[str | None, ...] = ()

    @property
    def aside(self) -> str | None:
        """What the target policy stated beside this response (None: nothing)."""
        return self.asides[-1] if self.asides else None


@dataclass(frozen=True)
class Request:
    messages: list[dict]
    schema: type[BaseModel]


@dataclass(frozen=True)
class EmbedRequest:
    """A judge's embedding request: one vector per text (non-empty strings), in order."""

    texts: tuple[str, ...]


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

    def combine(self, per_judge: list[list[Measure]]) -> list[Measure]:
        """Several judge models' measures of one turn as one: per measure, the (value, label)
        more than half of the judges gave; otherwise unscored, saying why (a tie, no
        majority, or every judge unscored). A judge with another rule overrides this."""
        out = []
        for i, name in enumerate(self.measures):
            votes = [ms[i] for ms in per_judge]
            scored = [(m.value, m.label) for m in votes if m.value is not None or m.label]
            top, n = Counter(scored).most_common(1)[0] if scored else (None, 0)
            if scored and 2 * n > len(votes):
                first = next(m for m in votes if (m.value, m.label) == top)
                out.append(Measure(name, top[0], top[1], first.reason))
            elif not scored:
                out.append(Measure(name, None, None, "all judges unscored: " + "; ".join(
                    m.reason or "unscored" for m in votes)))
            else:
                out.append(Measure(name, None, None, f"no majority among {len(votes)} judges "
                                   f"({len(scored)} scored)"))
        return out


def verdict_sample_key(model, messages: list[dict]) -> str | None:
    """A sampled judge's key from its request (a user policy that reads acts uses it too, so
    the verdicts stage finds its calls in the cache)."""
    if not model.temperature:
        return None
    return "verdict:" + hashlib.sha256(json.dumps(messages, sort_keys=True).encode()).hexdigest()[:16]


class SpecKind(JudgeKind):
    """A spec's judge in one batch: its models (none for a judge that needs no call; several
    vote), at most one request per turn, its measures as rows of ``verdicts``."""

    table = "verdicts"

    def __init__(self, judge: Judge, models: list, set_id: str):
        super().__init__(list(models), set_id)
        self.judge, self.kind, self.role = judge, judge.kind, judge.role
        self.unscored: Counter = Counter()

    def requests(self, turn: TurnView) -> list[tuple]:
        req = self.judge.request(turn)
        if req is None:
            return []  # judged from the text (or a blocked turn): no call
        if isinstance(req, EmbedRequest):
            return [(("embed", json.dumps(list(req.texts), ensure_ascii=False)), req)]
        key = (json.dumps(req.messages, sort_keys=True, ensure_ascii=False), req.schema.__name__)
        return [(key, req)]

    def calls(self, gw) -> list:
        # Embedding requests go through the gateway's embed (same cache, limits and
        # provenance); chat requests as every kind's.
        if not any(isinstance(s, EmbedRequest) for s in self.sources.values()):
            return super().calls(gw)
        from tasks.gateway.embed import embed

        return [embed(gw, spec, self.role, list(src.texts)) if isinstance(src, EmbedRequest)
                else self.ask(gw, spec, src.messages, src.schema)
                for spec in self.specs for src in self.sources.values()]

    def messages(self, source: Request) -> list[dict]:
        return source.messages

    def schema_for(self, source: Request) -> type:
        return source.schema

    def sample_key(self, spec, messages):
        return verdict_sample_key(spec, messages)

    def parse(self, r) -> tuple:
        # An embedding call's answer is its vectors.
        return (r.vectors if r.vectors is not None else r.parsed, None, None, r.call_hash)

    def combine(self, votes: list[tuple]) -> tuple:
        # Votes are combined per measure in turn_rows (a vote's measures need its turn).
        return votes[0]

    def _measures(self, t: TurnView, vote: tuple) -> list[Measure]:
        parsed, _, why, _ = vote
        return self.judge.unscored(why) if why is not None else self.judge.verdicts(t, parsed)

    def turn_rows(self, t: TurnView, keys: list[tuple]) -> None:
        call_hash = None
        if not keys:
            measures = self.judge.verdicts(t, None)
        elif len(self.specs) == 1:
            vote = self.final[keys[0]]
            measures, call_hash = self._measures(t, vote), vote[3]
        else:  # several judge models: their measures combined (the judge's rule)
            measures = self.judge.combine([self._measures(t, v) for v in self.votes[keys[0]]])
        for m in measures:
            assert isinstance(m, Measure)
            self.unscored[self.kind] += m.value is None and m.label is None
            self.rows.append({"judgment_set_id": self.set_id, "episode_id": t.episode_id,
                              "position": t.position, "measure": m.measure, "kind": self.kind,
                              "model_turn": t.model_turn, "value": m.value, "label": m.label,
                              "reason": m.reason, "call_hash": call_hash})
