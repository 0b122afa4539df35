"""How a batch of judgments is made (the verdicts loop's calls): each of the spec's judges
runs as a ``BatchJudge`` (one object per judge and batch: it holds the batch's state) and
every batch runs through ``run_calls``. What a judge itself is (``Judge``, ``TurnView``,
``Request``, ``Measure``) is the ground floor's: tasks/core/judges.py.

- ``requests(turn)``: the distinct requests one assistant turn needs, as (key, source) pairs
  (the judge's requests: one per checklist item for Ben-Util, one for safety, none for a
  judge that needs no call); the loop keeps the first source of a key, so a request is sent
  once per batch and judge model;
- the first answers become votes (``vote``: a failed call is unscored, with the gateway's
  reason, never a zero); ``revise`` asks again where the judge wants a second answer
  (Ben-Util's evidence re-ask), and the second answer replaces the first;
- ``turn_rows``: a turn's measures as rows of ``verdicts`` (and, when several models vote,
  each model's own as rows of ``verdict_votes``, combined by the judge's rule).

``run_calls`` issues every judge's calls, judge by judge and model-major, as one gather, then
each judge's revisions, then settles votes into verdicts. The stage loop
(tasks/engine/verdicts.py) only reads its turns and writes the rows the judges produced.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter

from tasks.core.judges import EmbedRequest, Judge, Measure, Request, TurnView, verdict_sample_key
from tasks.gateway.transport import needs_cache_mark
from tasks.model_entry import ModelSpec


def reason(r) -> str:
    """The stored reason of a failed call."""
    return f"{r.error_kind}: {r.error}"


async def run_calls(gw, kinds: list["BatchJudge"]) -> None:
    """Every kind's first calls in one gather (kind by kind, judge-major), then each kind's
    extra calls, then its verdicts. The kinds' ``sources`` are filled in before."""
    results = await asyncio.gather(*(c for kind in kinds for c in kind.calls(gw)))
    off = 0
    for kind in kinds:
        kind.results, off = list(results[off:off + kind.n_calls]), off + kind.n_calls
    for kind in kinds:
        kind.settle(await kind.revise(gw, kind.first_answers()))


async def _then(done: asyncio.Event, call):
    try:
        return await call
    finally:
        done.set()


async def _after(done: asyncio.Event, call):
    await done.wait()
    return await call


def keep_first(wh, table: str, rows: list[dict]) -> list[dict]:
    """Set rows as they should be written: a set already stored keeps its first ``created``
    and ``run_id`` (the views pick each kind's most recently created set, so a plain rerun
    must not reorder sets). ``table``: the stage's table of sets (``verdict_sets``, or a
    benchmark's own with the same key and columns)."""
    ids = [r["judgment_set_id"] for r in rows]
    old = {r["judgment_set_id"]: r for r in wh.query(
        f"SELECT judgment_set_id, created, run_id FROM {table} "
        "WHERE list_contains(?, judgment_set_id)", [ids])}
    return [{**r, "created": old[r["judgment_set_id"]]["created"],
             "run_id": old[r["judgment_set_id"]]["run_id"]} if r["judgment_set_id"] in old else r
            for r in rows]


class BatchJudge:
    """A spec's judge in one batch: its models (none for a judge that needs no call; several
    vote), its requests per turn (each may be revised once), its measures as rows of
    ``verdicts`` and, when several models vote, each model's own as rows of
    ``verdict_votes``; the batch's state (distinct requests, results, votes, verdicts, rows)
    filled in by ``run_calls``."""

    def __init__(self, judge: Judge, models: list, set_id: str, sample_key=None):
        self.specs, self.set_id = list(models), set_id
        self.judge, self.kind, self.role = judge, judge.kind, judge.role
        # How a sampled judge's calls are keyed (the set recipe's; tasks/engine/verdicts.py).
        self._sample_key = sample_key or verdict_sample_key
        self.sources: dict[tuple, object] = {}  # request key -> the request
        self.results: list = []  # first answers, model-major over the request keys
        self.votes: dict[tuple, list] = {}  # request key -> one vote per judge model
        self.final: dict[tuple, tuple] = {}  # request key -> combined verdict
        self.rows: list[dict] = []
        self.unscored: Counter = Counter()
        self.vote_rows: list[dict] = []
        self.revisions: list = []  # the second answers (a judge's revision calls)

    # ----- requests and votes --------------------------------------------------------------
    def add(self, pairs: list[tuple]) -> list[tuple]:
        """Record a turn's (key, source) pairs; returns the turn's keys."""
        for key, source in pairs:
            self.sources.setdefault(key, source)
        return [key for key, _ in pairs]

    async def ask(self, gw, spec: ModelSpec, messages: list[dict], schema: type):
        return await gw.chat(spec, self.role, messages, schema=schema,
                             sample_key=self._sample_key(spec, messages))

    @property
    def n_calls(self) -> int:
        return len(self.sources) * len(self.specs)

    def vote(self, r) -> tuple:
        """A result as a vote (parsed, revised, reason, call hash): an embedding call's answer
        is its vectors; a failed call is unscored, with the gateway's reason."""
        if not r.ok:
            return (None, None, reason(r), r.call_hash)
        return (r.vectors if r.vectors is not None else r.parsed, False, None, r.call_hash)

    def first_answers(self) -> dict[tuple, object]:
        """(judge model index, request key) -> its first answer, model-major."""
        keys, n = list(self.sources), len(self.sources)
        return {(j, k): r for j in range(len(self.specs))
                for k, r in zip(keys, self.results[j * n:(j + 1) * n])}

    def settle(self, revised: dict[tuple, tuple]) -> None:
        """Votes per request (a revised vote replaces the first answer's); a single model's
        vote is the verdict (several models' are combined per measure in ``turn_rows``)."""
        self.votes = {k: [] for k in self.sources}
        for (j, k), r in self.first_answers().items():
            self.votes[k].append(revised[(j, k)] if (j, k) in revised else self.vote(r))
        self.final = {k: v[0] for k, v in self.votes.items()}

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
        """One call per judge model and distinct request, model-major (the order they are
        issued): embedding requests through the gateway's embed (same cache, limits and
        provenance), chat requests as chat calls, with their shared prefix marked where the
        provider caches only marked prefixes (then one request per prefix goes first)."""
        out = []
        for spec in self.specs:
            marked = needs_cache_mark(spec.model) and not spec.batch
            first_of: dict[str, asyncio.Event] = {}
            for src in self.sources.values():
                if isinstance(src, EmbedRequest):
                    from tasks.gateway.embed import embed

                    out.append(embed(gw, spec, self.role, list(src.texts)))
                elif marked and src.cache_prefix:
                    out.append(self._marked(gw, spec, src, first_of))
                else:
                    out.append(self.ask(gw, spec, src.messages, src.schema))
        return out

    def _marked(self, gw, spec, src: Request, first_of: dict):
        """A request whose shared prefix is marked for the provider's prompt cache. The cache
        holds a prefix only once a request that wrote it has been answered, and each write costs
        more than a plain prompt (Anthropic: 1.25 times), so the first request of each prefix
        goes alone and the others wait for it: one write, then reads."""
        head = src.messages[0]["content"][:src.cache_prefix]
        call = gw.chat(spec, self.role, src.messages, schema=src.schema,
                       sample_key=self._sample_key(spec, src.messages),
                       cache_prefix=src.cache_prefix)
        if head in first_of:
            return _after(first_of[head], call)
        first_of[head] = asyncio.Event()
        return _then(first_of[head], call)

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
        # The vote's second field is the revision's request (a first answer's is not one): the
        # judge reads the second answer against the request that asked it.
        return {jk: (r.parsed, req, None, r.call_hash) if r.ok
                else (None, req, reason(r), r.call_hash)
                for (jk, req), r in zip(asks, self.revisions)}

    def all_results(self) -> list:
        return list(self.results) + list(self.revisions)

    def _measures(self, t: TurnView, src, vote: tuple) -> list[Measure]:
        parsed, revision, why, _ = vote
        revised = isinstance(revision, Request)  # a first answer's is False (None if failed)
        if revised:
            src = revision
        if why is not None:
            return self.judge.unscored_of(t, src, why, revised)
        return self.judge.verdicts_of(t, src, parsed, revised)

    def _row(self, t: TurnView, m: Measure, call_hash) -> dict:
        assert isinstance(m, Measure)
        return {"judgment_set_id": self.set_id, "episode_id": t.episode_id,
                "position": t.position, "measure": m.stored, "kind": self.kind,
                "model_turn": t.model_turn, "value": m.value, "label": m.label,
                "reason": m.reason, "call_hash": m.call_hash or call_hash, "evidence": m.evidence,
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
