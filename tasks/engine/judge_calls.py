"""How a batch of judgments is made (the verdicts loop's calls): every judge kind is a
``JudgeKind`` and every batch runs through ``run_calls``. What a judge itself is (``Judge``,
``TurnView``, ``Request``, ``Measure``) is the ground floor's: tasks/core/judges.py.

A kind (one object per batch: it holds the batch's state) says only what is its own:

- ``requests(turn, ...)``: the distinct requests one assistant turn needs, as (key, source)
  pairs; the loop keeps the first source of a key, so a request is sent once per batch and
  judge (a Ben-Util turn needs one per checklist item, a safety turn one, an act turn one,
  a reference turn none);
- ``messages(source)`` and ``schema_for(source)``: the prompt of a request and its schema;
- ``parse(result)``: a successful call's answer as a vote ``(value, text, None, call_hash)``;
  a failed call is the same vote for every kind, unscored: ``(None, None, reason, call_hash)``;
- ``revise(gw, first_answers)``: extra calls after the first answers (Ben-Util's evidence
  re-ask), as votes that replace the first ones;
- ``combine(votes)``: one verdict per request from its judges' votes (majority for Ben-Util,
  the safety rule for safety, the single vote for a kind with one judge model);
- the row hooks (``turn_rows`` and, for a judgment made without a call, ``blocked_rows``):
  the rows a turn writes. A spec's judges run as ``SpecKind`` (below),
  writing ``verdicts``; a stage with tables of its own would give its kinds its own row
  hooks.

``run_calls`` (not a kind) issues every kind's calls, kind by kind and judge-major, as one
gather, then each kind's revisions, then settles votes into verdicts. A stage loop
(tasks/engine/verdicts.py) only reads its turns and writes the rows the kinds produced.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter

from prompts import text_hash
from tasks.core.judges import EmbedRequest, Judge, Measure, Request, TurnView, verdict_sample_key
from tasks.model_entry import ModelSpec


def reason(r) -> str:
    """The stored reason of a failed call."""
    return f"{r.error_kind}: {r.error}"


class JudgeKind:
    """What every kind shares: its judges, its set, its table, and the batch's state
    (distinct requests, results, votes, verdicts, rows) filled in by ``run_calls``."""

    kind: str  # the set's kind and the summary's "<kind>_calls"
    role: str
    table: str  # the table of its combined rows (and the summary's count of them)
    schema: type | None = None

    def __init__(self, specs: list[ModelSpec], set_id: str):
        self.specs, self.set_id = specs, set_id
        self.sources: dict[tuple, object] = {}  # request key -> what its prompt is made of
        self.results: list = []  # first answers, judge-major over the request keys
        self.votes: dict[tuple, list] = {}  # request key -> one vote per judge
        self.final: dict[tuple, tuple] = {}  # request key -> combined verdict
        self.rows: list[dict] = []

    # ----- requests and votes --------------------------------------------------------------
    def add(self, pairs: list[tuple]) -> list[tuple]:
        """Record a turn's (key, source) pairs; returns the turn's keys."""
        for key, source in pairs:
            self.sources.setdefault(key, source)
        return [key for key, _ in pairs]

    def messages(self, source) -> list[dict]:
        raise NotImplementedError

    def schema_for(self, source) -> type:
        return self.schema

    def sample_key(self, spec: ModelSpec, messages: list[dict]) -> str | None:
        return verdict_sample_key(spec, messages)

    async def ask(self, gw, spec: ModelSpec, messages: list[dict], schema: type):
        return await gw.chat(spec, self.role, messages, schema=schema,
                             sample_key=self.sample_key(spec, messages))

    def calls(self, gw) -> list:
        """One call per judge and distinct request, judge-major (the order they are issued)."""
        reqs = {k: (self.messages(src), self.schema_for(src)) for k, src in self.sources.items()}
        return [self.ask(gw, spec, msgs, schema)
                for spec in self.specs for msgs, schema in reqs.values()]

    @property
    def n_calls(self) -> int:
        return len(self.sources) * len(self.specs)

    def parse(self, r) -> tuple:
        raise NotImplementedError

    def vote(self, r) -> tuple:
        """A result as a vote; a failed call is unscored, with the gateway's reason."""
        return self.parse(r) if r.ok else (None, None, reason(r), r.call_hash)

    async def revise(self, gw, by_request: dict[tuple, object]) -> dict[tuple, tuple]:
        """Votes that replace first answers, keyed (judge index, request key). None here."""
        return {}

    def first_answers(self) -> dict[tuple, object]:
        """(judge index, request key) -> its first answer, judge-major."""
        keys, n = list(self.sources), len(self.sources)
        return {(j, k): r for j in range(len(self.specs))
                for k, r in zip(keys, self.results[j * n:(j + 1) * n])}

    def settle(self, revised: dict[tuple, tuple]) -> None:
        """Votes per request (a revised vote replaces the first answer's), then verdicts."""
        self.votes = {k: [] for k in self.sources}
        for (j, k), r in self.first_answers().items():
            self.votes[k].append(revised[(j, k)] if (j, k) in revised else self.vote(r))
        self.final = {k: self.combine(v) for k, v in self.votes.items()}

    def combine(self, votes: list[tuple]) -> tuple:
        raise NotImplementedError

    def all_results(self) -> list:
        return list(self.results)

    def extra_summary(self) -> dict:
        return {}


async def run_calls(gw, kinds: list[JudgeKind]) -> None:
    """Every kind's first calls in one gather (kind by kind, judge-major), then each kind's
    extra calls, then its verdicts. The kinds' ``sources`` are filled in before."""
    results = await asyncio.gather(*(c for kind in kinds for c in kind.calls(gw)))
    off = 0
    for kind in kinds:
        kind.results, off = list(results[off:off + kind.n_calls]), off + kind.n_calls
    for kind in kinds:
        kind.settle(await kind.revise(gw, kind.first_answers()))


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
