"""The one judge protocol: every judge kind is a ``JudgeKind`` and every batch of judgments
runs through ``run_calls``.

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
  the rows a turn writes. The engine's judges run as ``SpecKind`` (tasks/judges/base.py),
  writing ``verdicts``; a stage with tables of its own would give its kinds its own row
  hooks.

``run_calls`` (not a kind) issues every kind's calls, kind by kind and judge-major, as one
gather, then each kind's revisions, then settles votes into verdicts. A stage loop
(tasks/engine/verdicts.py) only reads its turns and writes the rows the kinds produced.
"""

from __future__ import annotations

import asyncio
import hashlib
import json

from tasks.model_entry import ModelSpec
from tasks.judges.prompts import text_hash


class JudgeError(Exception):
    """Stored input a judge cannot use (names the table, row and field): a run stops on it
    with that one line, before the stage writes anything."""


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
        return judgment_sample_key(spec, messages)

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


def judgment_sample_key(spec: ModelSpec, messages: list[dict]) -> str | None:
    """A sampled judge's key under the judgment-set recipe (tasks/engine/verdicts.py). At
    temperature 0 the request alone determines the answer; a sampled judge gets a key derived
    from the request's last message, so reruns replay the same sample."""
    return None if not spec.temperature else "judge:" + text_hash(messages[-1]["content"])[:16]


def set_hash(doc) -> str:
    """The 16 hex digits of a judgment (or verdict) set id: sha256 of the sorted-key JSON. Set
    ids are stored and read by the views, so this recipe never changes."""
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]


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

