"""The judge protocol of the episode engine (the ground floor: judges implement it, the
verdicts loop calls it).

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
  answer (``first``: the gateway's result, ``first.parsed``, ``first.content`` and
  ``first.call_hash``), e.g. Ben-Util's re-ask when its evidence quote is not in the response;
  the second answer replaces the first: ``verdicts_of`` / ``unscored_of`` then get the
  revision's request (its ``data`` may carry what stands from the first answer) and
  ``revised=True``;
- ``combine(per_judge) -> list[Measure]``: several judge models' measures of one request as
  one (a majority by default; safety: the median rule);
- ``agreement`` (optional): derived labels the panel's agreement is also computed on
  (safety: ``harmful`` = score >= 4).

In a batch, a judge runs as a ``BatchJudge`` (tasks/engine/judge_calls.py, the verdicts
loop's calls), so every judge's calls go through the same loop: each distinct request is
sent once, a failed call is recorded as unscored rows (value NULL, reason
``<error_kind>: <message>``), never as a zero. The engine (tasks/engine/verdicts.py) stores
the rows in ``verdicts`` under the judge's verdict set (a unit's measure is stored as
``<measure>:<unit>``, e.g. ``fulfilled:3``), each voting model's own rows in
``verdict_votes`` when several vote, and replaces a batch's earlier rows on a rerun. A blocked target turn (the provider refused to produce it) reaches a judge as
``turn.blocked``; the judge decides what it means (a refusal, usually) without a call.
"""

from __future__ import annotations

import hashlib
import json
from abc import ABC, abstractmethod
from collections import Counter
from dataclasses import dataclass, field

from pydantic import BaseModel

import prompts
from tasks.core.items import Item


class JudgeError(Exception):
    """Stored input a judge cannot use (names the table, row and field): a run stops on it
    with that one line, before the stage writes anything."""


def set_hash(doc) -> str:
    """The 16 hex digits of a judgment (or verdict) set id: sha256 of the sorted-key JSON. Set
    ids are stored and read by the views, so this recipe never changes."""
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]


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
    # The leading characters of the first message that the turn's other requests share (Ben-Util
    # per item: the instructions, the query and the response), marked for a provider that
    # caches only marked prefixes; how the request travels, never in the cache key.
    cache_prefix: int | None = None


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
    # The call the verdict was read from, where it is not the answer's own: after a re-ask
    # that asked for some units only, the units that stood keep their first call's hash.
    call_hash: str | None = None

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

    # A judge that takes arguments holds them here (its registration's ``args`` model).
    args = None

    def wants(self, turn: TurnView) -> bool:
        return True

    def check_item(self, item) -> None:
        """What the judge needs of an item (``ItemError`` naming the field; Ben-Util: its
        checklist), checked by ``carryon plan`` and pre-flight before anything is played."""
        return None

    def item_version(self, item) -> str | None:
        """The version of the item's hidden data this judge reads (Ben-Util: its checklist's),
        stored with every verdict and hashed into the set's id under the judgment-set recipe
        (tasks/engine/verdicts.py). None: the judge reads no versioned data."""
        return None

    def changed_args(self) -> dict:
        """The judge's arguments that differ from their defaults (``verdict_sets.args``)."""
        return self.args.model_dump(exclude_defaults=True) if isinstance(self.args, BaseModel) else {}

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

    def unit_texts(self, item) -> dict[str, str]:
        """What each unit of the item's requests asks, by unit id (Ben-Util: its checklist's
        questions), for the report's browser; {} for a judge without units."""
        return {}

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


class VerdictKeys(ABC):
    """How the verdicts stage names a judge's set and keys a sampled judge's calls. The
    engine's own recipe (tasks/engine/verdicts.py) unless the spec names another
    (``verdict_keys: <name>``, registered with ``@verdict_keys(name)`` beside the benchmark
    whose older homes need it: CarryOnBench's ``judgment_sets``). Set ids and sample keys are
    stored and cached, so a recipe never changes once homes hold its ids."""

    @abstractmethod
    def set_id(self, judge: "Judge", models: list, items_version: str | None) -> tuple[str, str]:
        """(set id, prompt version) of the judge with its models, over the run's items (the
        hash of their versions; None when it reads none)."""

    @abstractmethod
    def sample_key(self, model, messages: list[dict]) -> str | None:
        """A sampled judge's key for a request (None at temperature 0)."""


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
