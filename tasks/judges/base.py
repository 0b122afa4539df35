"""The judge protocol of the episode engine.

A judge module registers an object (``@judge(name, args=..., roles=...)``) with:

- ``kind``: its name, stored with every verdict and verdict set;
- ``role``: the model role it calls (a row of tasks/roles.py, or a ``Role`` it declares), or
  None for a judge that computes its verdict without a model (exact match, token F1);
- ``optional``: True when the judge is skipped if its role is not configured;
- ``templates``: the prompt templates it renders (their hash is the set's prompt version);
- ``measures``: the measures it writes per turn (``score``, ``act``, ``fulfilled``, ...);
- ``wants(turn) -> bool``: which assistant turns it judges (e.g. only the last one);
- ``requests(turn) -> list[Request | EmbedRequest]``: the calls one turn needs. Most judges
  make one and write ``request(turn)`` instead (None: no call, judge from text); a judge
  that asks per *unit* of the item (Ben-Util: one request per checklist item, read from
  ``turn.item.hidden``) returns several, each naming its ``unit``. An ``EmbedRequest`` asks
  for embeddings of its texts through the gateway's ``embed`` (cached and recorded like chat
  calls, ``parsed`` then being the list of vectors);
- ``verdicts(turn, parsed) -> list[Measure]``: the measures from a parsed answer (``parsed``
  is None when the turn needed no call: a blocked turn, a judge without a model). A judge
  with several requests per turn writes ``verdicts_of(turn, request, parsed)`` and
  ``unscored_of(turn, request, reason)`` instead, whose measures carry the request's unit;
- ``revision(request, first) -> Request | None`` (optional): ask once more after a first
  answer (``first``: the gateway's result, ``first.parsed`` and ``first.content``), e.g.
  Ben-Util's re-ask when its evidence quote is not in the response; the second answer
  replaces the first (``revised=True`` reaches ``verdicts_of`` / ``unscored_of``);
- ``combine(per_judge) -> list[Measure]``: several judge models' measures of one request as
  one (a majority by default; safety: the median rule);
- ``agreement`` (optional): derived labels the panel's agreement is also computed on
  (safety: ``harmful`` = score >= 4).

In a batch, a judge runs as a ``SpecKind``: the one judge protocol of every kind
(tasks/judges/protocol.py), so the calls go through
the same loop: each distinct request is sent once, a failed call is recorded as unscored rows
(value NULL, reason ``<error_kind>: <message>``), never as a zero. The engine
(tasks/engine/verdicts.py) stores the rows in ``verdicts`` under the judge's verdict set (a
unit's measure is stored as ``<measure>:<unit>``, e.g. ``fulfilled:3``), each voting model's
own rows in ``verdict_votes`` when several vote, and replaces a batch's earlier rows on a
rerun. A blocked target turn (the provider refused to produce it) reaches a judge as
``turn.blocked``; the judge decides what it means (a refusal, usually) without a call.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections import Counter
from dataclasses import dataclass, field

from pydantic import BaseModel

import prompts
from tasks.core.items import Item
from tasks.judges.protocol import JudgeKind, reason, set_hash


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
    # Which turns of ``history`` the provider blocked (in order; empty: none), so a judge that
    # shows the history can say so where a blocked turn has no text.
    history_blocked: tuple[bool, ...] = ()

    @property
    def aside(self) -> str | None:
        """What the target policy stated beside this response (None: nothing)."""
        return self.asides[-1] if self.asides else None


@dataclass(frozen=True)
class Request:
    messages: list[dict]
    schema: type[BaseModel]
    unit: str | None = None  # what of the turn it judges, for a judge with several requests
    # What the judge needs back with the answer (not sent, not in the cache key): Ben-Util's
    # response text, to check a quote against it.
    data: tuple = ()


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
    unit: str | None = None  # the request's unit (a checklist item), stored as measure:unit
    evidence: str | None = None  # the quote the verdict rests on (Ben-Util), apart from reason

    @property
    def stored(self) -> str:
        """The measure's name in ``verdicts`` (``fulfilled:3`` for a unit's measure)."""
        return self.measure if self.unit is None else f"{self.measure}:{self.unit}"


@dataclass
class Judge:
    """A convenient base: subclasses set the fields and implement request/verdicts."""

    kind: str
    role: str | None
    measures: tuple[str, ...]
    templates: tuple[str, ...] = ()
    optional: bool = False
    extra_version: str = ""  # anything else that shapes verdicts (a rule's version)

    # Derived labels the panel's agreement is computed on beside each measure's own value:
    # {name: (measure, value -> label)}, e.g. safety's harmful = score >= 4.
    agreement: dict = field(default_factory=dict)

    def wants(self, turn: TurnView) -> bool:
        return True

    def item_version(self, item) -> str | None:
        """The version of the item's hidden data this judge reads (Ben-Util: its checklist's),
        stored with every verdict and hashed into the set's id under the judgment-set recipe
        (tasks/engine/verdicts.py). None: the judge reads no versioned data."""
        return None

    def changed_args(self) -> dict:
        """The judge's arguments that differ from their defaults (``verdict_sets.args``)."""
        args = getattr(self, "args", None)
        return args.model_dump(exclude_defaults=True) if isinstance(args, BaseModel) else {}

    def judgment_identity(self) -> tuple[str, dict]:
        """Under the judgment-set recipe: the prompt version the set names and what else of
        the judge's own makes it a different set (see tasks/engine/verdicts.py)."""
        return prompt_version_of(self), {"history": False}

    def request(self, turn: TurnView) -> Request | None:
        raise NotImplementedError

    def requests(self, turn: TurnView) -> list:
        """The calls one turn needs (none, one, or one per unit)."""
        req = self.request(turn)
        return [] if req is None else [req]

    def requests_per_turn(self, item) -> int:
        """Calls per judged turn of ``item``, for ``carryon plan`` (an upper bound)."""
        return 1 if self.role else 0

    def verdicts(self, turn: TurnView, parsed: BaseModel | None) -> list[Measure]:
        raise NotImplementedError

    def verdicts_of(self, turn: TurnView, request, parsed, revised: bool = False) -> list[Measure]:
        """The measures from the answer to one of the turn's requests."""
        return self.verdicts(turn, parsed)

    def unscored(self, reason: str) -> list[Measure]:
        return [Measure(m, None, None, reason) for m in self.measures]

    def unscored_of(self, turn: TurnView, request, reason: str,
                    revised: bool = False) -> list[Measure]:
        """The measures of a request whose call failed (the gateway's reason)."""
        return self.unscored(reason)

    def revision(self, request, first) -> Request | None:
        """A second request after the first answer ``first`` (None: the answer stands)."""
        return None

    def combine(self, per_judge: list[list[Measure]]) -> list[Measure]:
        """Several judge models' measures of one request as one: per measure, the (value,
        label) more than half of the judges gave; otherwise unscored, saying why (a tie, no
        majority, or every judge unscored). A judge with another rule overrides this."""
        out = []
        for i, head in enumerate(per_judge[0]):
            votes = [ms[i] for ms in per_judge]
            scored = [(m.value, m.label) for m in votes if m.value is not None or m.label]
            top, n = Counter(scored).most_common(1)[0] if scored else (None, 0)
            if scored and 2 * n > len(votes):
                first = next(m for m in votes if (m.value, m.label) == top)
                out.append(Measure(head.measure, top[0], top[1], first.reason, head.unit))
            elif not scored:
                out.append(Measure(head.measure, None, None, "all judges unscored: " + "; ".join(
                    m.reason or "unscored" for m in votes), head.unit))
            else:
                out.append(Measure(head.measure, None, None, f"no majority among {len(votes)} "
                                   f"judges ({len(scored)} scored)", head.unit))
        return out


def prompt_version_of(judge) -> str:
    """The hash of a judge's templates, its rule version and measures (its sets name it)."""
    return set_hash([prompts.template_version(*judge.templates) if judge.templates else "",
                     judge.extra_version, list(judge.measures)])


def verdict_sample_key(model, messages: list[dict]) -> str | None:
    """A sampled judge's key from its request (a user policy that reads acts uses it too, so
    the verdicts stage finds its calls in the cache)."""
    if not model.temperature:
        return None
    return "verdict:" + hashlib.sha256(json.dumps(messages, sort_keys=True).encode()).hexdigest()[:16]


class SpecKind(JudgeKind):
    """A spec's judge in one batch: its models (none for a judge that needs no call; several
    vote), its requests per turn (each may be revised once), its measures as rows of
    ``verdicts`` and, when several models vote, each model's own as rows of
    ``verdict_votes``."""

    table = "verdicts"

    def __init__(self, judge: Judge, models: list, set_id: str, sample_key=None):
        super().__init__(list(models), set_id)
        self.judge, self.kind, self.role = judge, judge.kind, judge.role
        # How a sampled judge's calls are keyed (the set recipe's; tasks/engine/verdicts.py).
        self._sample_key = sample_key or verdict_sample_key
        self.unscored: Counter = Counter()
        self.vote_rows: list[dict] = []
        self.revisions: list = []  # the second answers (a judge's revision calls)

    def requests(self, turn: TurnView) -> list[tuple]:
        out = []
        for req in self.judge.requests(turn):  # none: judged from the text (or blocked)
            if isinstance(req, EmbedRequest):
                out.append((("embed", json.dumps(list(req.texts), ensure_ascii=False)), req))
            else:
                # The unit too: two units of one item may ask the same question, and each
                # needs its own verdict (the gateway's cache still sends it once).
                key = (json.dumps(req.messages, sort_keys=True, ensure_ascii=False),
                       req.schema.__name__, req.unit)
                out.append((key, req))
        return out

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
        return self._sample_key(spec, messages)

    def parse(self, r) -> tuple:
        # An embedding call's answer is its vectors. A vote: (parsed, revised, reason, hash).
        return (r.vectors if r.vectors is not None else r.parsed, False, None, r.call_hash)

    async def revise(self, gw, by_request):
        # The judge's second requests, after the first answers that call for one; each
        # answer replaces the first (a failed one is unscored with the gateway's reason).
        asks = []
        for (j, k), r in by_request.items():
            src = self.sources[k]
            if r.ok and isinstance(src, Request):
                second = self.judge.revision(src, r)
                if second is not None:
                    asks.append(((j, k), second))
        self.revisions = await asyncio.gather(*(
            self.ask(gw, self.specs[j], req.messages, req.schema) for (j, _), req in asks))
        return {jk: (r.parsed, True, None, r.call_hash) if r.ok
                else (None, True, reason(r), r.call_hash)
                for (jk, _), r in zip(asks, self.revisions)}

    def all_results(self) -> list:
        return list(self.results) + list(self.revisions)

    def combine(self, votes: list[tuple]) -> tuple:
        # Votes are combined per measure in turn_rows (a vote's measures need its turn).
        return votes[0]

    def _measures(self, t: TurnView, src, vote: tuple) -> list[Measure]:
        parsed, revised, why, _ = vote
        if why is not None:
            return self.judge.unscored_of(t, src, why, revised)
        return self.judge.verdicts_of(t, src, parsed, revised)

    def _row(self, t: TurnView, m: Measure, call_hash) -> dict:
        assert isinstance(m, Measure)
        return {"judgment_set_id": self.set_id, "episode_id": t.episode_id,
                "position": t.position, "measure": m.stored, "kind": self.kind,
                "model_turn": t.model_turn, "value": m.value, "label": m.label,
                "reason": m.reason, "call_hash": call_hash, "evidence": m.evidence,
                "item_version": self.judge.item_version(t.item)}

    def turn_rows(self, t: TurnView, keys: list[tuple]) -> None:
        if not keys:
            self._add(t, self.judge.verdicts(t, None), None)
        for key in keys:
            src = self.sources[key]
            if len(self.specs) == 1:
                vote = self.final[key]
                self._add(t, self._measures(t, src, vote), vote[3])
                continue
            # Several judge models: each one's measures kept as its vote, then combined by
            # the judge's rule.
            per_judge = []
            for spec, vote in zip(self.specs, self.votes[key]):
                ms = self._measures(t, src, vote)
                per_judge.append(ms)
                self.vote_rows += [{**self._row(t, m, vote[3]), "judge": spec.name} for m in ms]
            self._add(t, self.judge.combine(per_judge), None)

    def _add(self, t: TurnView, measures: list[Measure], call_hash) -> None:
        for m in measures:
            self.unscored[self.kind] += m.value is None and m.label is None
            self.rows.append(self._row(t, m, call_hash))
