"""Provider batch APIs through the gateway: the same answers as live calls, at batch prices.

``await BatchClient(gateway, warehouse).run(calls)`` takes ``BatchCall``s (spec, role,
messages, schema, sample_key) and returns one ``CallResult`` per call, in order, as
``Gateway.chat`` would have:

1. cache hits are answered from the gateway's cache, under the gateway's own cache key
   (``Gateway.chat_key``): a batch run and a live run share every entry;
2. the misses of models with ``batch: true`` become request lines of their provider's batch
   API (one line per distinct cache key; at most ``batch_size`` lines per batch and the
   provider's caps on lines and bytes) and are submitted; models without it, or whose
   provider has no batch path here, are called live;
3. every submitted batch is stored in the warehouse table ``llm_batches`` (provider id, model,
   role, the ``custom_id`` → cache key map, status) before it is polled, so a process killed
   while it waits resumes polling the stored batch on the next run instead of paying again;
4. batches are polled every ``batch_poll_s`` seconds (progress: submitted / done / pending);
5. each answered line goes through the live path's own judging (``answers.judge``: parse,
   schema validation, junk rules, failure kinds), cache write and provenance row
   (``Gateway._store``), with ``batch_id`` set;
6. lines the batch did not answer (failed lines, an expired or cancelled batch, results that
   cannot be read) and answers that need a re-ask are sent once through ``Gateway.chat`` (its
   own retries and re-asks); what still fails is a ``CallResult`` with ``error_kind``, never
   an exception.

Providers: each batch API has a ``Wire`` (tasks/gateway/batch_wire.py): OpenAI's format through
litellm (OpenAI, Azure, OpenAI-compatible servers), Anthropic Message Batches and the Gemini
API's batch mode. A wire builds each request line from the live path's own request (litellm's
adapter for the provider), so a line is the request a live call would send; batches are cut
to the provider's caps on lines and bytes. Models without a wire (Vertex AI, Bedrock, …) are
called live with a warning that says why, and ``carryon plan`` prices them live.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pydantic import BaseModel

from tasks.gateway.answers import judge
from tasks.gateway.batch_wire import batch_route, wire_for
from tasks.gateway.budget import bound
from tasks.gateway.keys import normalise_api_base
from tasks.gateway.prices import billed
from tasks.gateway.result import CallResult
from tasks.gateway.transport import _cached_tokens
from tasks.model_entry import ModelSpec

if TYPE_CHECKING:  # annotations only: client.py imports this module (through batching.py)
    from tasks.gateway.client import Gateway

log = logging.getLogger("carryon.gateway.batch")

TERMINAL = ("completed", "expired", "cancelled", "failed")


@dataclass
class BatchCall:
    spec: ModelSpec
    role: str
    messages: list[dict]
    schema: type[BaseModel] | None = None
    sample_key: str | None = None


@dataclass
class _Line:
    key: str
    call: BatchCall
    idx: list[int]  # positions in the caller's list that this distinct request answers


class BatchClient:
    def __init__(self, gateway: Gateway, warehouse):
        self.gw = gateway
        self.wh = warehouse
        self._held: dict[str, float] = {}  # batch id -> budget held until it is read

    async def run(self, calls: list[BatchCall]) -> list[CallResult]:
        results: list[CallResult | None] = [None] * len(calls)
        todo: dict[str, _Line] = {}
        for i, c in enumerate(calls):
            key = self.gw.chat_key(c.spec, c.messages, c.schema, c.sample_key)
            if key in todo:
                todo[key].idx.append(i)
                continue
            hit = self.gw._hit(key, c.role, c.spec, c.messages, None, c.schema)
            if hit is not None:
                results[i] = hit
            else:
                todo[key] = _Line(key, c, [i])
        ok = {spec: self._batchable(spec) for spec in {ln.call.spec for ln in todo.values()}}
        live = [ln for ln in todo.values() if not ok[ln.call.spec]]
        batched = [ln for ln in todo.values() if ok[ln.call.spec]]
        retry: list[_Line] = []
        if batched:
            stored = self._resume(batched)
            fresh = [ln for ln in batched if ln.key not in stored["covered"]]
            by_key = {ln.key: ln for ln in batched}
            for row in stored["batches"]:  # submitted by an earlier run: billed whatever the cap
                mine = [by_key[k] for k in json.loads(row["lines"]).values() if k in by_key]
                self._held[row["batch_id"]] = await self.gw.hold_budget(
                    self._bound(mine), force=True)
            progress = self.gw.batch_progress
            progress["resumed"] += len(stored["batches"])
            progress["waiting"] += len(batched)
            submitted = await self._submit(fresh)
            progress["submitted"] += sum(b["batch_id"] is not None for b in submitted)
            open_batches = stored["batches"] + submitted
            try:
                retry = await self._collect(open_batches, {ln.key: ln for ln in batched}, results)
            finally:
                progress["waiting"] -= len(batched)
        answers = await asyncio.gather(*(self._live(ln) for ln in live + retry))
        for ln, r in zip(live + retry, answers):
            for i in ln.idx:
                results[i] = r
        return results  # type: ignore[return-value]

    # ----- submit --------------------------------------------------------------------------
    @staticmethod
    def _batchable(spec: ModelSpec) -> bool:
        if not spec.batch:
            return False
        if wire_for(spec.model) is None:
            log.warning("%s (%s): %s; calling it live", spec.where, spec.model,
                        batch_route(spec.model)[1])
            return False
        return True

    def _request(self, ln: _Line) -> tuple[dict, list]:
        """litellm's arguments and the messages of a line's call: what the live path sends."""
        c = ln.call
        return self.gw._request_kwargs(c.spec, c.role, c.messages, c.schema)

    async def _submit(self, lines: list[_Line]) -> list[dict]:
        groups: dict[tuple, list[_Line]] = {}
        for ln in lines:
            s = ln.call.spec
            groups.setdefault((s.model, normalise_api_base(s.api_base), ln.call.role), []).append(ln)
        out = []
        for group in groups.values():
            spec, role = group[0].call.spec, group[0].call.role
            for chunk, error in self._chunks(spec, group):
                if error is None:
                    # The budget first (tasks/gateway/budget.py): a batch that could pass the
                    # cap is not submitted, and the run stops (outside the try: a stop is not a
                    # refused submit whose lines would go live).
                    held = await self.gw.hold_budget(self._bound([ln for ln, _ in chunk], chunk))
                    try:
                        row = await self._submit_one(spec, role, chunk)
                        self._held[row["batch_id"]] = held
                        out.append(row)
                        continue
                    except Exception as e:  # an upload or submit refused
                        error = e
                        if self.gw.budget is not None:
                            self.gw.budget.settle(held, 0.0)
                log.warning("%s (%s): batch not submitted (%s: %s); calling its %d lines live",
                            spec.where, spec.model, type(error).__name__, str(error)[:200], len(chunk))
                out.append({"batch_id": None, "lines": json.dumps({str(n): ln.key for n, (ln, _)
                                                                   in enumerate(chunk)})})
        if out:
            log.info("batches: %d submitted (%d lines)", sum(b["batch_id"] is not None for b in out),
                     len(lines))
        return out

    def _bound(self, lines: list[_Line], chunk=None) -> float:
        """The most these lines can cost at the batch price (tasks/gateway/budget.py): each
        request line's JSON as its prompt, its entry's max_tokens as its answer; 0 without a
        cap."""
        if self.gw.budget is None:
            return 0.0
        reqs = [req for _, req in chunk] if chunk else [ln.call.messages for ln in lines]
        return sum(bound(ln.call.spec, len(json.dumps(req, ensure_ascii=False)), batch=True)
                   for ln, req in zip(lines, reqs))

    def _chunks(self, spec: ModelSpec, group: list[_Line]):
        """``(chunk, None)``: the group's request lines cut into batches the provider accepts
        (at most ``batch_size`` lines and the wire's caps on lines and bytes); ``([line],
        error)``: a line whose request cannot be built (a parameter the provider's adapter
        refuses), sent live, where it fails as data."""
        wire = wire_for(spec.model)
        cap = min(spec.batch_size, wire.limits.lines)
        chunk: list[tuple[_Line, dict]] = []
        size = 0
        for ln in group:
            try:
                kwargs, messages = self._request(ln)
                req = wire.line(str(len(chunk)), kwargs, messages)
            except Exception as e:
                yield [(ln, None)], e
                continue
            n = len(json.dumps(req, ensure_ascii=False).encode()) + 1
            if chunk and (len(chunk) >= cap or size + n > wire.limits.bytes):
                yield chunk, None
                chunk, size = [], 0
                req = wire.line("0", kwargs, messages)
            chunk.append((ln, req))
            size += n
        if chunk:
            yield chunk, None

    async def _submit_one(self, spec: ModelSpec, role: str, chunk: list[tuple[_Line, dict]]) -> dict:
        cids = {f"{n}": ln.key for n, (ln, _) in enumerate(chunk)}
        b = await wire_for(spec.model).submit(spec, role, [req for _, req in chunk])
        # Stored before the first poll: from here on a dead process resumes, never resubmits.
        row = {"batch_id": b["batch_id"], "run_id": self.gw.run_id, "role": role,
               "model": spec.model, "api_base": normalise_api_base(spec.api_base),
               "input_file_id": b["input_file_id"], "lines": json.dumps(cids),
               "n_lines": len(cids), "status": b["status"], "consumed": False,
               "output_file_id": None, "error_file_id": None,
               "submitted": dt.datetime.now(dt.timezone.utc), "finished": None}
        self.wh.write("llm_batches", [row])
        return row

    def _resume(self, lines: list[_Line]) -> dict:
        """Stored batches not yet consumed that hold any of these requests."""
        keys = {ln.key for ln in lines}
        found, covered = [], set()
        for row in self.wh.query("SELECT * FROM llm_batches WHERE NOT consumed ORDER BY submitted"):
            mine = keys & set(json.loads(row["lines"]).values())
            if mine:
                found.append(row)
                covered |= mine
        if found:
            log.info("batches: resuming %d stored batch(es) (%d lines)", len(found), len(covered))
        return {"batches": found, "covered": covered}

    # ----- poll and collect ----------------------------------------------------------------
    async def _collect(self, batches: list[dict], lines: dict[str, _Line],
                       results: list) -> list[_Line]:
        """Poll until every batch ended, feed its answers through the gateway, and return the
        lines to retry live (each once, even if it was in several batches)."""
        retry: dict[str, _Line] = {}
        answered: set[str] = set()
        for row in batches:  # never submitted: every line live
            if row["batch_id"] is None:
                retry.update({k: lines[k] for k in json.loads(row["lines"]).values()})
        batches = [b for b in batches if b["batch_id"] is not None]
        pending = list(batches)
        progress = self.gw.batch_progress
        progress["pending"] += len(pending)
        errors: dict[str, int] = {}
        while pending:
            poll_s = min(lines[k].call.spec.batch_poll_s for b in pending
                         for k in json.loads(b["lines"]).values() if k in lines)
            await asyncio.sleep(poll_s)
            still = []
            for row in pending:
                spec = self._spec_of(row, lines)
                try:
                    b = await wire_for(spec.model).poll(spec, row)
                except Exception as e:
                    # Polling failed (network, provider hiccup): poll again, up to max_retries
                    # times in a row; then its lines go live and the row stays unconsumed.
                    errors[row["batch_id"]] = n = errors.get(row["batch_id"], 0) + 1
                    log.warning("batch %s: poll failed (%s: %s)", row["batch_id"],
                                type(e).__name__, str(e)[:200])
                    if n <= spec.max_retries:
                        still.append(row)
                    else:
                        retry.update({k: lines[k] for k in json.loads(row["lines"]).values()
                                      if k in lines})
                    continue
                errors.pop(row["batch_id"], None)
                if b["status"] not in TERMINAL:
                    if b["status"] != row["status"]:
                        row["status"] = b["status"]
                        self.wh.write("llm_batches", [row])
                    still.append(row)
                    continue
                row.update(**b, finished=dt.datetime.now(dt.timezone.utc))
                try:
                    done, failed = await self._consume(row, spec, lines, results)
                except Exception as e:  # its files unreadable: every line live, row unconsumed
                    log.warning("batch %s: results not read (%s: %s); its lines go live",
                                row["batch_id"], type(e).__name__, str(e)[:200])
                    retry.update({k: lines[k] for k in json.loads(row["lines"]).values()
                                  if k in lines})
                    self.wh.write("llm_batches", [row])
                    continue
                answered |= done
                retry.update({k: lines[k] for k in failed if k in lines})
                row["consumed"] = True
                self.wh.write("llm_batches", [row])
                if self.gw.budget is not None:  # read: its lines' bills replace the bound
                    self.gw.budget.settle(self._held.pop(row["batch_id"], 0.0), 0.0)
            progress["done"] += len(pending) - len(still)
            progress["pending"] -= len(pending) - len(still)
            pending = still
            log.info("batches: %d submitted, %d done, %d pending",
                     len(batches), len(batches) - len(pending), len(pending))
        return [ln for k, ln in retry.items() if k not in answered]

    @staticmethod
    def _spec_of(row: dict, lines: dict[str, _Line]) -> ModelSpec:
        for k in json.loads(row["lines"]).values():
            if k in lines:
                return lines[k].call.spec
        raise KeyError(row["batch_id"])  # _resume only keeps batches holding our lines

    async def _consume(self, row: dict, spec: ModelSpec, lines: dict[str, _Line],
                       results: list) -> tuple[set[str], set[str]]:
        """Judge, cache and record every answered line; return (decided keys, keys to retry).
        Lines are matched by their custom id, never by position (results come in any order)."""
        cids: dict[str, str] = json.loads(row["lines"])

        def request(cid):  # the live request of a line, to read its answer as litellm would
            ln = lines.get(cids.get(cid))
            return self._request(ln) if ln is not None else (None, None)

        done: set[str] = set()
        errors = 0
        for cid, resp, why in await wire_for(spec.model).results(spec, row, request):
            key = cids.get(cid)
            # A line of a resumed batch that no caller asks for any more is dropped: without
            # its call (schema, role) it cannot be judged.
            if resp is None:
                errors += 1
            if key not in lines or resp is None or key in done:
                continue
            r = self._decide(key, lines[key], resp, row["batch_id"])
            if r is not None:
                done.add(key)
                for i in lines[key].idx:
                    results[i] = r
        failed = {k for k in cids.values() if k not in done}
        if failed:
            log.info("batch %s %s: %d answered, %d error lines, %d to retry live",
                     row["batch_id"], row["status"], len(done), errors, len(failed))
        return done, failed

    def _decide(self, key: str, ln: _Line, resp, batch_id: str) -> CallResult | None:
        """One answered line through the live path's judging and storing; None: it needs a
        re-ask, which the live retry does (the batch attempt stays in its provenance row)."""
        c = ln.call
        content = resp.choices[0].message.content if resp.choices else None
        _, messages = self._request(ln)
        r = CallResult(call_hash=key, attempts=1, batch_id=batch_id)
        decided, again = judge(r, resp, content, spec=c.spec, messages=messages, convo=list(messages),
                               prompt=None, schema=c.schema, started=time.perf_counter(),
                               api_key=None, reasks=0, max_reasks=self.gw.cfg.max_parse_retries,
                               cost=_batch_cost(c.spec, getattr(resp, "usage", None)))
        if decided is None:
            r.error_kind, r.error = "invalid_output", "batch answer needs a re-ask; retried live"
            self.gw._record(c.role, c.spec, r)
            return None
        self.gw._store(key, c.spec, c.role, decided)
        return decided

    async def _live(self, ln: _Line) -> CallResult:
        c = ln.call
        return await self.gw.chat(c.spec, c.role, c.messages, schema=c.schema,
                                  sample_key=c.sample_key, live=True)


def _batch_cost(spec: ModelSpec, usage) -> float:
    """The line's price at the model's batch rate (tasks/gateway/prices.py), its cached prompt
    tokens at the cached rate; 0 where unpriced."""
    cost = billed(spec, getattr(usage, "prompt_tokens", 0) or 0,
                  getattr(usage, "completion_tokens", 0) or 0, _cached_tokens(usage), batch=True)
    return cost or 0.0
