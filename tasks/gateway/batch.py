"""Provider batch APIs through the gateway: the same answers as live calls, at batch prices,
and no line paid for twice.

``await BatchClient(gateway, warehouse).run(calls)`` takes ``BatchCall``s (spec, role,
messages, schema, sample_key) and returns one ``CallResult`` per call, in order, as
``Gateway.chat`` would have:

1. cache hits are answered from the gateway's cache, under the gateway's own cache key
   (``Gateway.chat_key``): a batch run and a live run share every entry;
2. the misses of models with ``batch: true`` become request lines of their provider's batch
   API: each line is the request litellm's live path would send (tasks/gateway/batch_wire.py),
   one per distinct cache key; lines are grouped by the headers their batch must carry
   (Anthropic betas) and cut into chunks of at most ``batch_size`` lines and the provider's
   caps on lines and bytes. Models without a batch path here, and calls whose request cannot
   travel in a batch, are called live;
3. each chunk is submitted in one place, ``_submit_chunk``: an *intent* row is stored in the
   warehouse table ``llm_batches`` first (status ``submitting``, a fresh client id the
   provider echoes back), then the create is sent, then the intent becomes the batch's row.
   A create the provider refuses for good sends the chunk's lines live; one refused for a
   queue or enqueued-token limit waits and is submitted again; one that failed or timed out
   without an answer may still have been accepted, so the provider is asked for the tagged
   batch (``Wire.find``) before anything is submitted again. A process killed at any point
   resumes from the stored rows on the next run: a batch is polled again, an intent is looked
   up again, never resubmitted blind;
4. batches are polled every ``batch_poll_s`` seconds (progress: submitted / done / pending). A
   failed poll is polled again; a batch that reports its end before its results are attached
   is polled until they are;
5. each answered line goes through the live path's own judging (``answers.judge``: parse,
   schema validation, junk rules, failure kinds), cache write and provenance row
   (``Gateway._store``), with ``batch_id`` set;
6. a line goes live only when its batch has ended without its answer (a failed line, an
   expired or cancelled batch, results that cannot be read) or was never accepted; it is sent
   once through ``Gateway.chat`` (its own retries and re-asks), as are answers that need a
   re-ask; what still fails is a ``CallResult`` with ``error_kind``. A batch that cannot be
   polled at all (a permanent error, after ``max_retries``) raises ``BatchUnreachable``: its
   lines are not sent again while it may still run and bill; a rerun polls it again.

With a spending cap (``budget_usd``, tasks/gateway/budget.py) a chunk holds the most its lines
can cost at the batch price before its intent is stored; a chunk that could pass the cap is
not submitted and the run stops. The hold lasts while the batch may run and bill (an
unanswered create included) and is released when its results are read (each answered line's
bill is then spent, ``Gateway._store``), when nothing was submitted, or when the provider has
no such batch. Batches and intents resumed from an earlier run are held whatever the cap: they
were submitted and will be billed.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import logging
import secrets
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pydantic import BaseModel

from tasks.gateway.answers import judge
from tasks.gateway.batch_wire import Request, batch_route, permanent, refusal, wire_for
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
SUBMITTING = "submitting"  # the status of an intent row: a create sent, its answer not yet stored
QUEUE_BACKOFF_MAX_S = 600.0
QUEUE_GIVE_UP_S = 24 * 3600.0  # a chunk refused for queue limits this long goes live
LOOKUP_PAUSE_MAX_S = 30.0  # how long a provider may take to list a batch it just accepted


class BatchUnreachable(Exception):
    """A submitted batch that cannot be polled or looked up (a permanent error): its lines are
    not sent again while it may still run; the row stays, and a rerun polls it again."""


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
    req: Request | None = None  # the live request, built once
    creates: int = 0  # creates of its chunks that failed without an answer and were not found
    refusals: int = 0  # creates of its chunks refused for a queue limit
    queued_since: float | None = None  # when the first of them was
    not_before: float = 0.0  # not submitted again before this (monotonic seconds)


@dataclass
class _Chunk:
    spec: ModelSpec
    role: str
    headers: tuple  # the headers its batch's create carries (Request.headers)
    tag: str  # the client id the provider echoes back
    lines: list[tuple[_Line, dict]]  # each line and its request line (custom id inside)

    def cids(self) -> dict[str, str]:
        return {f"{self.tag}-{n}": ln.key for n, (ln, _) in enumerate(self.lines)}


@dataclass
class _Drive:
    """One ``run``'s batches: what waits to be submitted, what is out, what is decided."""
    lines: dict[str, _Line]
    results: list
    waiting: list[_Line]
    pending: list[dict]  # batch rows to poll (an unconfirmed candidate's row too)
    intents: dict[str, dict]  # client id -> intent row, while its batch is not known
    unsettled: list[tuple[dict, float]]  # intents to look up, not before the time given
    retry: dict[str, _Line]
    answered: set[str]
    errors: dict[str, int]  # consecutive failures per batch or intent id
    submitted: int = 0


def _tag() -> str:
    return "cob" + secrets.token_hex(8)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


class BatchClient:
    def __init__(self, gateway: Gateway, warehouse):
        self.gw = gateway
        self.wh = warehouse
        # Budget held per submitted (or possibly submitted) batch, by its client id (a row
        # stored before client ids existed: its batch id) until its results are read.
        self._held: dict[str, float] = {}

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
            progress = self.gw.batch_progress
            progress["waiting"] += len(batched)
            try:
                retry = await self._drive(batched, results)
            finally:
                progress["waiting"] -= len(batched)
        answers = await asyncio.gather(*(self._live(ln) for ln in live + retry))
        for ln, r in zip(live + retry, answers):
            for i in ln.idx:
                results[i] = r
        return results  # type: ignore[return-value]

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

    # ----- the loop ------------------------------------------------------------------------
    async def _drive(self, batched: list[_Line], results: list) -> list[_Line]:
        """Submit, look up, poll and read until every line is answered or decided to go live;
        return the lines to send live (each once, even if it was in several batches)."""
        st = _Drive(lines={ln.key: ln for ln in batched}, results=results, waiting=[],
                    pending=[], intents={}, unsettled=[], retry={}, answered=set(), errors={})
        covered = self._resume(st)
        st.waiting = [ln for ln in batched if ln.key not in covered]
        progress = self.gw.batch_progress
        while st.waiting or st.pending or st.unsettled:
            await self._settle_due(st)
            await self._submit_due(st)
            if not st.pending:
                pause = self._next_due(st)
                if pause is not None:
                    await asyncio.sleep(pause)
                continue
            await asyncio.sleep(min(self._spec_of(r, st).batch_poll_s for r in st.pending))
            for row in list(st.pending):
                if not any(r is row for r in st.pending):
                    continue  # dropped meanwhile (another candidate proved to be ours)
                if not await self._poll_one(st, row):
                    st.pending = [r for r in st.pending if r is not row]
                    progress["done"] += 1
                    progress["pending"] -= 1
            log.info("batches: %d submitted, %d pending, %d lines waiting", st.submitted,
                     len(st.pending), len(st.waiting))
        return [ln for k, ln in st.retry.items() if k not in st.answered]

    def _next_due(self, st: _Drive) -> float | None:
        """Seconds until a waiting line or an intent to look up is due (None: nothing waits)."""
        times = [ln.not_before for ln in st.waiting] + [t for _, t in st.unsettled]
        return max(0.0, min(times) - time.monotonic()) if times else None

    def _resume(self, st: _Drive) -> set[str]:
        """Stored rows not yet consumed that hold any of these requests: batches to poll again,
        intents whose create may have been accepted (looked up before anything is resubmitted)
        and the candidates found for them. Returns the keys they cover."""
        covered: set[str] = set()
        rows = [r for r in self.wh.query("SELECT * FROM llm_batches WHERE NOT consumed "
                                         "ORDER BY submitted")
                if set(json.loads(r["lines"]).values()) & st.lines.keys()]
        with_candidates = {r.get("client_id") for r in rows if r["status"] != SUBMITTING}
        for row in rows:
            covered |= set(json.loads(row["lines"]).values()) & st.lines.keys()
            self._hold_resumed(row, st)
            if row["status"] == SUBMITTING:
                st.intents[row["client_id"]] = row
                if row["client_id"] not in with_candidates:
                    st.unsettled.append((row, 0.0))
            else:
                st.pending.append(row)
        if rows:
            log.info("batches: resuming %d stored batch(es) and %d unsettled submit(s) (%d lines)",
                     len(st.pending), len(st.unsettled), len(covered))
        progress = self.gw.batch_progress
        progress["resumed"] += len(st.pending)
        progress["pending"] += len(st.pending)
        return covered

    # ----- submit --------------------------------------------------------------------------
    async def _submit_due(self, st: _Drive) -> None:
        now = time.monotonic()
        due = [ln for ln in st.waiting if ln.not_before <= now]
        if not due:
            return
        st.waiting = [ln for ln in st.waiting if ln.not_before > now]
        await self._build(due, st)
        for chunk in self._chunks([ln for ln in due if ln.req is not None]):
            outcome, value = await self._submit_chunk(chunk)
            if outcome == "submitted":
                st.submitted += 1
                self.gw.batch_progress["submitted"] += 1
                self._track(st, value)
            elif outcome == "unknown":  # look for it before submitting again
                st.intents[chunk.tag] = value
                st.unsettled.append((value, time.monotonic() + self._lookup_pause(chunk.spec)))
            elif outcome == "queued":
                self._wait_for_queue(st, [ln for ln, _ in chunk.lines], chunk.spec, value)
            else:  # refused for good: nothing was submitted, its lines go live
                self._go_live(st, [ln for ln, _ in chunk.lines], chunk.spec, value)

    async def _build(self, lines: list[_Line], st: _Drive) -> None:
        """Each line's live request (a millisecond or three of CPU each; the loop is let go
        every 200 lines). A line whose request cannot be built (a parameter litellm refuses),
        or cannot travel in a batch (a header its batch cannot carry), goes live, where it
        fails as data or is sent as litellm sends it."""
        for n, ln in enumerate(lines):
            if n % 200 == 199:
                await asyncio.sleep(0)
            if ln.req is not None:
                continue
            try:
                ln.req = wire_for(ln.call.spec.model).request(*self._request(ln))
            except Exception as e:  # noqa: BLE001
                self._go_live(st, [ln], ln.call.spec, e, what="request not batched")

    def _chunks(self, lines: list[_Line]):
        """The lines' requests, grouped by model, server, role and the headers their batch
        must carry, cut into chunks the provider accepts (at most ``batch_size`` lines and the
        wire's caps on lines and bytes)."""
        groups: dict[tuple, list[tuple[_Line, Request]]] = {}
        for ln in lines:
            s = ln.call.spec
            key = (s.model, normalise_api_base(s.api_base), ln.call.role, ln.req.headers)
            groups.setdefault(key, []).append((ln, ln.req))
        for items in groups.values():
            spec, role, headers = items[0][0].call.spec, items[0][0].call.role, items[0][1].headers
            wire = wire_for(spec.model)
            cap = min(spec.batch_size, wire.limits.lines)
            chunk = _Chunk(spec, role, headers, _tag(), [])
            size = 0
            for ln, req in items:
                line = wire.line(f"{chunk.tag}-{len(chunk.lines)}", req)
                n = len(json.dumps(line, ensure_ascii=False).encode()) + 1
                if chunk.lines and (len(chunk.lines) >= cap or size + n > wire.limits.bytes):
                    yield chunk
                    chunk, size = _Chunk(spec, role, headers, _tag(), []), 0
                    line = wire.line(f"{chunk.tag}-0", req)
                chunk.lines.append((ln, line))
                size += n
            if chunk.lines:
                yield chunk

    async def _submit_chunk(self, chunk: _Chunk) -> tuple[str, dict | Exception]:
        """Submit one chunk as one provider batch: the one place a batch is created.

        The intent (the chunk's client id and lines) is stored before the create, so a process
        that dies while the create is out finds it on the next run and looks the batch up
        instead of paying again. Returns ``("submitted", row)``, ``("queued", error)`` (refused
        for a queue limit: submit again later), ``("refused", error)`` (nothing submitted: its
        lines go live) or ``("unknown", intent row)`` (the create failed without an answer:
        the provider may have accepted it; look it up before submitting again)."""
        spec, role = chunk.spec, chunk.role
        # The budget first: a chunk that could pass the cap is not submitted, and the run
        # stops here (hold_budget does not return then; its lines never go live).
        self._held[chunk.tag] = await self.gw.hold_budget(
            sum(bound(spec, len(json.dumps(line, ensure_ascii=False)), batch=True)
                for _, line in chunk.lines) if self.gw.budget is not None else 0.0)
        intent = {"batch_id": f"intent-{chunk.tag}", "run_id": self.gw.run_id, "role": role,
                  "model": spec.model, "api_base": normalise_api_base(spec.api_base),
                  "input_file_id": "", "lines": json.dumps(chunk.cids()), "n_lines": len(chunk.lines),
                  "status": SUBMITTING, "consumed": False, "output_file_id": None,
                  "error_file_id": None, "submitted": _now(), "finished": None,
                  "client_id": chunk.tag}
        self.wh.write("llm_batches", [intent])
        try:
            b = await wire_for(spec.model).submit(spec, role, [line for _, line in chunk.lines],
                                                  headers=chunk.headers, tag=chunk.tag)
        except Exception as e:  # noqa: BLE001 - the provider's refusal, or no answer at all
            refused = refusal(e)
            if refused is not None:  # nothing was submitted
                self._forget(intent)
                self._release(intent)
                return ("queued" if refused == "queue" else "refused"), e
            log.warning("%s (%s): batch create got no answer (%s: %s); looking for batch %s "
                        "before submitting again", spec.where, spec.model, type(e).__name__,
                        str(e)[:200], chunk.tag)
            return "unknown", intent
        row = {**intent, "batch_id": b["batch_id"], "input_file_id": b["input_file_id"],
               "status": b["status"]}
        # The intent becomes the batch, in one transaction: from here a rerun polls it.
        self.wh.write_many([("llm_batches", [row], ("batch_id = ?", [intent["batch_id"]]))])
        log.info("batch %s: submitted (%s, %s, %d lines)", row["batch_id"], spec.model, role,
                 len(chunk.lines))
        return "submitted", row

    def _forget(self, row: dict) -> None:
        self.wh.write_many([("llm_batches", [], ("batch_id = ?", [row["batch_id"]]))])

    @staticmethod
    def _lookup_pause(spec: ModelSpec) -> float:
        return min(spec.batch_poll_s, LOOKUP_PAUSE_MAX_S)

    def _wait_for_queue(self, st: _Drive, lines: list[_Line], spec: ModelSpec, why) -> None:
        """Lines whose batch the provider refused for a queue or enqueued-token limit: submitted
        again after a backoff (doubling from ``batch_poll_s`` up to ten minutes), live after a
        day of refusals."""
        now = time.monotonic()
        for ln in lines:
            ln.refusals += 1
            if ln.queued_since is None:
                ln.queued_since = now
        if now - min(ln.queued_since for ln in lines) > QUEUE_GIVE_UP_S:
            self._go_live(st, lines, spec, why, what="queue still full after a day")
            return
        delay = min(spec.batch_poll_s * 2 ** min(max(ln.refusals for ln in lines), 20),
                    QUEUE_BACKOFF_MAX_S)
        log.warning("%s (%s): batch refused for a queue limit (%s); its %d lines are submitted "
                    "again in %.0f s", spec.where, spec.model, str(why)[:200], len(lines), delay)
        for ln in lines:
            ln.not_before = now + delay
        st.waiting += lines

    def _go_live(self, st: _Drive, lines: list[_Line], spec: ModelSpec, why,
                 what: str = "batch not submitted") -> None:
        log.warning("%s (%s): %s (%s: %s); calling its %d line(s) live", spec.where, spec.model,
                    what, type(why).__name__, str(why)[:200], len(lines))
        st.retry.update({ln.key: ln for ln in lines})

    # ----- intents: was an unanswered create accepted? ---------------------------------------
    async def _settle_due(self, st: _Drive) -> None:
        now = time.monotonic()
        due = [(row, t) for row, t in st.unsettled if t <= now]
        st.unsettled = [(row, t) for row, t in st.unsettled if t > now]
        for row, _ in due:
            await self._settle(st, row)

    async def _settle(self, st: _Drive, intent: dict) -> None:
        """Look for the batch an unanswered create may have made, by its client id: found, it
        is polled like any other; a candidate the provider cannot confirm yet (Anthropic) is
        polled until its results say whose it is; nothing found, its lines are submitted again
        (live once ``max_retries`` creates went unanswered)."""
        spec = self._spec_of(intent, st)
        try:
            found = await wire_for(spec.model).find(spec, intent)
        except Exception as e:  # noqa: BLE001
            n = st.errors[intent["batch_id"]] = st.errors.get(intent["batch_id"], 0) + 1
            if permanent(e) and n > spec.max_retries:
                raise BatchUnreachable(f"{spec.where} ({spec.model}): cannot look up batch "
                                       f"{intent['client_id']} ({e}); its lines were not sent "
                                       "again; a rerun looks again") from e
            log.warning("batch %s: lookup failed (%s: %s); looking again", intent["client_id"],
                        type(e).__name__, str(e)[:200])
            st.unsettled.append((intent, time.monotonic() + self._lookup_pause(spec)))
            return
        st.errors.pop(intent["batch_id"], None)
        rows = [{**intent, "batch_id": f["batch_id"], "status": f["status"],
                 "input_file_id": f.get("input_file_id") or ""} for f in found]
        confirmed = [r for r, f in zip(rows, found) if f["confirmed"]]
        if confirmed:
            log.info("batch %s: found as %s; polling it", intent["client_id"],
                     ", ".join(r["batch_id"] for r in confirmed))
            self.wh.write_many([("llm_batches", confirmed, ("batch_id = ?", [intent["batch_id"]]))])
            del st.intents[intent["client_id"]]
            for r in confirmed:
                self._track(st, r)
        elif rows:
            log.info("batch %s: %d candidate(s) (%s); polling them until their results say "
                     "which is ours", intent["client_id"], len(rows),
                     ", ".join(r["batch_id"] for r in rows))
            self.wh.write("llm_batches", rows)
            for r in rows:
                self._track(st, r)
        else:
            self._not_submitted(st, intent)

    def _not_submitted(self, st: _Drive, intent: dict) -> None:
        """An intent the provider has no batch for: forgotten, its lines submitted again."""
        self._forget(intent)
        self._release(intent)
        st.intents.pop(intent["client_id"], None)
        spec = self._spec_of(intent, st)
        lines = [st.lines[k] for k in json.loads(intent["lines"]).values() if k in st.lines]
        again = []
        for ln in lines:
            ln.creates += 1
            (again if ln.creates <= spec.max_retries else []).append(ln)
        gone = [ln for ln in lines if ln not in again]
        if gone:
            self._go_live(st, gone, spec, RuntimeError("no batch was made"),
                          what=f"{gone[0].creates} creates went unanswered")
        for ln in again:
            ln.not_before = 0.0
        st.waiting += again
        log.info("batch %s: the provider has no such batch; %d lines submitted again",
                 intent["client_id"], len(again))

    # ----- poll and read -------------------------------------------------------------------
    def _track(self, st: _Drive, row: dict) -> None:
        st.pending.append(row)
        self.gw.batch_progress["pending"] += 1

    async def _poll_one(self, st: _Drive, row: dict) -> bool:
        """One poll of one batch, and its results read once it ended with them attached;
        True while it stays pending."""
        spec = self._spec_of(row, st)
        bid = row["batch_id"]
        try:
            b = await wire_for(spec.model).poll(spec, row)
        except Exception as e:  # noqa: BLE001
            n = st.errors[bid] = st.errors.get(bid, 0) + 1
            log.warning("batch %s: poll failed (%s: %s)", bid, type(e).__name__, str(e)[:200])
            if permanent(e) and n > spec.max_retries:
                raise BatchUnreachable(f"{spec.where} ({spec.model}): batch {bid} cannot be "
                                       f"polled ({str(e)[:200]}); its lines were not sent again; "
                                       "a rerun polls it again") from e
            return True  # transient: the batch may still run and bill, so poll again
        st.errors.pop(bid, None)
        if b["status"] not in TERMINAL or not b["ready"]:
            if b["status"] != row["status"]:
                if b["status"] in TERMINAL:
                    log.info("batch %s: %s, its results not attached yet; polling on", bid,
                             b["status"])
                row["status"] = b["status"]
                self.wh.write("llm_batches", [row])
            return True
        row.update(status=b["status"], output_file_id=b["output_file_id"],
                   error_file_id=b["error_file_id"], finished=_now())
        keys = [k for k in json.loads(row["lines"]).values() if k in st.lines]
        if b["queue_limited"]:  # refused before it ran: nothing billed, submit again
            row["consumed"] = True
            self.wh.write("llm_batches", [row])
            self._release(row)
            self._wait_for_queue(st, [st.lines[k] for k in keys if k not in st.answered],
                                 spec, f"batch {bid} failed: enqueued-token limit")
            return False
        try:
            done, ours = await self._consume(row, spec, st)
        except Exception as e:  # noqa: BLE001 - results unreadable
            # Counted apart from the polls (each of which succeeds and clears theirs).
            n = st.errors[f"read {bid}"] = st.errors.get(f"read {bid}", 0) + 1
            if not permanent(e) and n <= spec.max_retries:
                log.warning("batch %s: results not read (%s: %s); reading again", bid,
                            type(e).__name__, str(e)[:200])
                return True
            log.warning("batch %s: results not read (%s: %s); its lines go live", bid,
                        type(e).__name__, str(e)[:200])
            st.retry.update({k: st.lines[k] for k in keys})
            self.wh.write("llm_batches", [row])  # unconsumed: a later run may read it
            self._release(row)  # its lines go live, each holding its own price
            return False
        tag = row.get("client_id")
        if tag in st.intents:  # a candidate for an unanswered create
            if not ours:
                self._forget(row)  # someone else's batch of the same size
                if not any(r.get("client_id") == tag for r in st.pending if r is not row):
                    self._not_submitted(st, st.intents[tag])
                return False
            siblings = [r for r in st.pending if r is not row and r.get("client_id") == tag]
            self.wh.write_many([("llm_batches", [], ("batch_id IN (SELECT unnest(?))",
                                                     [[st.intents[tag]["batch_id"]]
                                                      + [r["batch_id"] for r in siblings]]))])
            st.pending = [r for r in st.pending if not any(r is x for x in siblings)]
            self.gw.batch_progress["pending"] -= len(siblings)
            del st.intents[tag]
        st.answered |= done
        st.retry.update({k: st.lines[k] for k in keys if k not in done})
        row["consumed"] = True
        self.wh.write("llm_batches", [row])
        self._release(row)  # read: its answered lines' bills replaced the bound
        return False

    # ----- the budget ----------------------------------------------------------------------
    def _hold_resumed(self, row: dict, st: _Drive) -> None:
        """A batch or intent an earlier run stored: held whatever the cap (it may bill)."""
        budget, key = self.gw.budget, _hold_key(row)
        if budget is None or key in self._held:
            return
        spec = self._spec_of(row, st)
        usd = sum(bound(spec, sum(len(str(m.get("content") or "")) for m in st.lines[k].call.messages),
                        batch=True)
                  for k in json.loads(row["lines"]).values() if k in st.lines)
        budget.hold(usd, force=True)
        self._held[key] = usd

    def _release(self, row: dict) -> None:
        """The hold of a batch whose results were read or that was never made."""
        held = self._held.pop(_hold_key(row), None)
        if held is not None and self.gw.budget is not None:
            self.gw.budget.settle(held, 0.0)

    def _spec_of(self, row: dict, st: _Drive) -> ModelSpec:
        for k in json.loads(row["lines"]).values():
            if k in st.lines:
                return st.lines[k].call.spec
        raise KeyError(row["batch_id"])  # _resume only keeps batches holding our lines

    async def _consume(self, row: dict, spec: ModelSpec, st: _Drive) -> tuple[set[str], bool]:
        """Judge, cache and record every answered line; return the decided keys and whether
        any result carried one of the row's custom ids (a candidate's proof of ownership).
        Lines are matched by their custom id, never by position (results come in any order)."""
        cids: dict[str, str] = json.loads(row["lines"])

        def request(cid):  # the live request of a line, to read its answer as litellm would
            ln = st.lines.get(cids.get(cid))
            return self._request(ln) if ln is not None else (None, None)

        done: set[str] = set()
        errors, ours = 0, False
        for cid, resp, why in await wire_for(spec.model).results(spec, row, request):
            key = cids.get(cid)
            ours = ours or key is not None
            # A line of a resumed batch that no caller asks for any more is dropped: without
            # its call (schema, role) it cannot be judged.
            if resp is None:
                errors += 1
            if key not in st.lines or resp is None or key in done or key in st.answered:
                continue
            r = self._decide(key, st.lines[key], resp, row["batch_id"])
            if r is not None:
                done.add(key)
                for i in st.lines[key].idx:
                    st.results[i] = r
        failed = [k for k in cids.values() if k not in done]
        if failed and ours:
            log.info("batch %s %s: %d answered, %d error lines, %d to retry live",
                     row["batch_id"], row["status"], len(done), errors, len(failed))
        return done, ours

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


def _hold_key(row: dict) -> str:
    return row.get("client_id") or row["batch_id"]


def _batch_cost(spec: ModelSpec, usage) -> float:
    """The line's price at the model's batch rate (tasks/gateway/prices.py), its cached prompt
    tokens at the cached rate; 0 where unpriced."""
    cost = billed(spec, getattr(usage, "prompt_tokens", 0) or 0,
                  getattr(usage, "completion_tokens", 0) or 0, _cached_tokens(usage), batch=True)
    return cost or 0.0
