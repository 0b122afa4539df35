"""The one LLM gateway: every model call of CarryOnBench goes through ``Gateway``.

It owns litellm (no other module imports it; its helpers are in transport.py), the
content-hash cache, per-model concurrency and rpm limits, retries with backoff, structured
output and its validation (``answers.judge``, shared with the provider batch path of
batch.py), and a provenance record per call. Model failures never raise: they come back as a
``CallResult`` with ``error`` set, so a stage can record them as data. Configuration mistakes
do raise.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel

from tasks.gateway.answers import fail, judge
from tasks.gateway.batching import collector_for, progress_line
from tasks.gateway.budget import Budget, bound, prompt_chars
from tasks.gateway.cache import ResponseCache
from tasks.gateway.claims import Claims
from tasks.gateway.junk import junk_reason
from tasks.gateway.keys import cache_key
from tasks.gateway.limits import ModelLimits
from tasks.gateway.prices import answer_cost
from tasks.gateway.servers import ServerUnavailable, ServerWatch, server_of  # noqa: F401
# CallResult lives in result.py (batch.py builds them too); re-exported here, where callers import it.
from tasks.gateway.result import CallResult
# The litellm helpers (_litellm and parse_structured re-exported: benchmarks and tests import
# them from here).
from tasks.gateway.transport import (  # noqa: F401
    Failure, Reply, _litellm, parse_structured, request_kwargs, schema_doc, send,
)
from tasks.gateway.shared_limits import shared_limits_enabled
from tasks.gateway.workers import WorkerPool, worker_count
from tasks.model_entry import GatewayConfig, ModelSpec, api_key_for
from tasks.ops import interrupt

log = logging.getLogger("carryon.gateway")


@dataclass
class _Stats:
    requests: int = 0
    hits: int = 0
    failures: int = 0  # calls that failed in this run (sent, or from a batch line)
    retries: int = 0
    remembered: int = 0  # failures read back from an earlier run, not sent again


# The exit status of a run stopped by its budget (tasks/gateway/budget.py): 130 is a signal's.
BUDGET_EXIT_CODE = 3

# Failures a deterministic call (temperature 0) meets again on every resend: the same request
# to the same model gives the same junk. Remembered in the cache beside the answers, so a
# rerun does not pay for them; every other failure (connection, rate limit, 5xx, timeout) is
# transient and always retried. ``carryon run --retry-failed`` sends remembered ones again.
DETERMINISTIC_FAILURES = ("invalid_output", "empty_output", "reasoning_exhausted")
REMEMBERED_NOTE = ("remembered from an earlier run: the same deterministic request gave this; "
                   "`carryon run --retry-failed` sends it again")


# Numbers a provenance row adds up over the real requests of one call hash.
SUMMED = ("attempts", "prompt_tokens", "completion_tokens", "cost_usd", "latency_s",
          "reasoning_tokens", "cached_tokens")


def merge_call_rows(prev: dict | None, now: dict) -> dict | None:
    """The provenance row of a call hash met again in one run: ``prev`` its row so far (None:
    the first time), ``now`` the new call's. A cache hit after a real request adds nothing
    (None: ``prev`` stands); a real request after a real one (the earlier failed) adds up
    their attempts, tokens, cost and latency; otherwise the new row replaces the old. The
    gateway applies it to the rows it holds, the run's writer to a drained row and the stored
    one (the rule is associative, so both give the row one pass over the calls would)."""
    if prev is None:
        return now
    if now["cache_hit"] and not prev["cache_hit"]:
        return None
    if not now["cache_hit"] and not prev["cache_hit"]:
        return {**now, **{k: (prev[k] or 0) + now[k] for k in SUMMED},
                "batch_id": now["batch_id"] or prev["batch_id"]}
    return now


class Gateway:
    """Cached, limited, retrying access to every model. Create one per run, on the run's
    event loop; call ``drain_records()`` to collect provenance rows for the warehouse."""

    def __init__(self, cache_dir: Path, run_id: str, cfg: GatewayConfig | None = None,
                 shards: int = 1):
        self.cache = ResponseCache(cache_dir)
        self.claims = Claims(cache_dir)  # calls in flight, across processes sharing the cache
        self.run_id = run_id
        self.cfg = cfg or GatewayConfig()
        # The warehouse batch mode records its provider batches in (llm_batches), set by the
        # run context; without one every call is live.
        self.batch_store = None
        # True: remembered failures are sent again (carryon run --retry-failed).
        self.retry_failed = False
        # The spending cap (budget_usd), set by the run context; None: no cap.
        self.budget: Budget | None = None
        self._batchers: dict = {}
        self.batch_progress = {"submitted": 0, "resumed": 0, "done": 0, "pending": 0, "waiting": 0}
        # Limits and in-flight futures belong to one event loop; keyed by loop so a gateway
        # shared by stages on different loops (Prefect may run sync tasks in threads) is safe.
        self._limits: dict[tuple, ModelLimits] = {}
        # Worker processes that send the requests (workers.py), one pool per loop, started
        # on the first cache miss.
        self.workers = worker_count(self.cfg.workers)
        self.shared_limits = shared_limits_enabled(self.cfg.shared_limits, shards)
        self._pools: dict[int, WorkerPool] = {}
        self._inflight: dict[tuple, asyncio.Future] = {}
        # Provenance: one row per call hash per run. A hash met again in the same run (a cache
        # hit after a real request, or a retry after a failure) merges into its row
        # (``merge_call_rows``), so a later hit never erases the attempts, tokens and cost of
        # the real request. Only the rows not yet drained are held here: a hash met again
        # after a drain gives a new row, which the run's writer merges into the stored one
        # (tasks/engine/run.py ``RunContext.flush_calls``), so memory is set by what one drain
        # holds, not by the run's calls.
        self._pending: dict[str, dict] = {}  # rows not yet drained to the warehouse
        self.stats: dict[str, _Stats] = {}
        # Servers that stopped answering (several calls in a row could not connect).
        self.servers = ServerWatch(self.cfg.max_connection_failures)

    # ----- public API ----------------------------------------------------------------------
    async def chat(self, spec: ModelSpec, role: str, messages: list[dict], *,
                   schema: type[BaseModel] | None = None, sample_key: str | None = None,
                   live: bool = False, cache_prefix: int | None = None) -> CallResult:
        """One chat completion. With ``schema`` the answer is validated (``result.parsed``).
        A ``batch: true`` model's call waits for its provider batch (tasks/gateway/batching.py)
        when the run gave the gateway a warehouse to record batches in, unless ``live``.
        ``cache_prefix``: the leading characters of the first message that other requests
        share, marked for a provider that caches only marked prefixes (transport.py
        ``needs_cache_mark``); how the request travels, so never in the cache key. Provider
        batches are sent unmarked."""
        self.servers.check(spec)
        if spec.batch and self.batch_store is not None and not live:
            await interrupt.checkpoint()  # no provider batch is submitted after Ctrl-C
            return await collector_for(self).chat(spec, role, messages, schema, sample_key)
        key = self.chat_key(spec, messages, schema, sample_key)
        return await self._dedup(key, lambda: self._run(key, spec, role, messages, None, schema,
                                                        cache_prefix))

    @staticmethod
    def chat_key(spec: ModelSpec, messages: list[dict], schema: type[BaseModel] | None = None,
                 sample_key: str | None = None) -> str:
        """The cache key of a chat call (the batch client files its answers under the same)."""
        doc = schema_doc(schema, spec.max_string_chars) if schema is not None else None
        return cache_key(model=spec.model, api_base=spec.api_base, messages=messages, prompt=None,
                         params=spec.generation_params(), schema=doc,
                         structured=spec.structured, sample_key=sample_key)

    async def text(self, spec: ModelSpec, role: str, prompt: str, *,
                   sample_key: str | None = None) -> CallResult:
        """One text completion (a raw prompt, e.g. WildGuard's own format)."""
        self.servers.check(spec)
        key = cache_key(model=spec.model, api_base=spec.api_base, messages=None, prompt=prompt,
                        params=spec.generation_params(), schema=None, structured=None,
                        sample_key=sample_key)
        return await self._dedup(key, lambda: self._run(key, spec, role, None, prompt, None))

    def activity(self) -> str:
        """One line for progress heartbeats: calls answered, from the cache, failed."""
        req = sum(s.requests for s in self.stats.values())
        hits = sum(s.hits for s in self.stats.values())
        fails = sum(s.failures + s.remembered for s in self.stats.values())
        inflight = len(self._inflight)
        line = f"model calls: {req} sent, {hits} from cache, {fails} failed, {inflight} in flight"
        if self.batch_progress["submitted"] or self.batch_progress["resumed"]:
            line += "; " + progress_line(self.batch_progress)
        return line

    def drain_records(self) -> list[dict]:
        """Provenance rows collected since the last drain (one per call hash; a hash met again
        after an earlier drain has a row again, to merge into the stored one with
        ``merge_call_rows``)."""
        out = [{**r, "latency_s": round(r["latency_s"], 4)} for r in self._pending.values()]
        self._pending = {}
        return out

    def close(self) -> None:
        for pool in self._pools.values():
            pool.close()
        self._pools = {}
        self.cache.close()

    async def start_workers(self) -> WorkerPool | None:
        """Start this loop's worker processes now and wait until they are up (benchmarks
        measure steady state; a run starts them on its first miss without waiting)."""
        pool = self._pool()
        if pool is not None:
            await pool.wait_ready()
        return pool

    # ----- internals -----------------------------------------------------------------------
    async def _dedup(self, key: str, make) -> CallResult:
        # Identical requests in flight at once share one call (conversations sharing a prefix).
        loop = asyncio.get_running_loop()
        slot = (id(loop), key)
        fut = self._inflight.get(slot)
        if fut is not None:
            return await asyncio.shield(fut)
        fut = loop.create_future()
        self._inflight[slot] = fut
        try:
            result = await make()
            fut.set_result(result)
            return result
        except BaseException as e:
            fut.set_exception(e)
            fut.exception()  # mark retrieved: waiters (if any) re-raise it themselves
            raise
        finally:
            del self._inflight[slot]

    def _stat(self, role: str) -> _Stats:
        return self.stats.setdefault(role, _Stats())

    def _pool(self) -> WorkerPool | None:
        if not self.workers:
            return None
        loop = asyncio.get_running_loop()
        pool = self._pools.get(id(loop))
        if pool is None:
            pool = self._pools[id(loop)] = WorkerPool(self.workers)
            pool.start()
        return pool

    def _limit(self, spec: ModelSpec) -> ModelLimits:
        k = (id(asyncio.get_running_loop()), spec.model, spec.api_base)
        lim = self._limits.get(k)
        if lim is None:
            lim = self._limits[k] = ModelLimits(spec.max_concurrency, spec.rpm)
            if self.shared_limits:
                from tasks.gateway.shared_limits import SharedLimits

                lim.shared = SharedLimits(spec.model, server_of(spec), spec.max_concurrency,
                                          spec.rpm)
        return lim

    async def release_limits(self) -> None:
        """Give this loop's shared slots back to the Prefect server (the run's end); leases
        left behind expire on the server within a minute."""
        here = id(asyncio.get_running_loop())
        for (loop_id, *_), lim in self._limits.items():
            if loop_id == here and lim.shared is not None:
                await lim.shared.close()
                lim.shared = None

    def _record(self, role: str, spec: ModelSpec, r: CallResult) -> None:
        if r.batch_id and not r.cached and self.budget is not None:
            self.budget.settle(0.0, r.cost_usd)  # a batch line's bill (live ones: _request)
        row = merge_call_rows(self._pending.get(r.call_hash), {
            "run_id": self.run_id, "call_hash": r.call_hash, "role": role, "model": spec.model,
            "cache_hit": r.cached, "batch_id": r.batch_id, **{k: getattr(r, k) for k in SUMMED},
            "error": f"{r.error_kind}: {r.error}" if r.error else None,
        })
        if row is not None:
            self._pending[r.call_hash] = row

    def _hit(self, key, role, spec, messages, prompt, schema) -> CallResult | None:
        """The cached answer of ``key`` as a result (recorded), or None: a miss, an entry whose
        schema no longer parses, or one stored before the junk rules that fails them."""
        hit = self.cache.get(key)
        if hit is None:
            return None
        r = CallResult(call_hash=key, content=hit["content"], cached=True,
                       prompt_tokens=hit.get("prompt_tokens", 0),
                       completion_tokens=hit.get("completion_tokens", 0),
                       reasoning_tokens=hit.get("reasoning_tokens", 0),
                       cached_tokens=hit.get("cached_tokens", 0),
                       cost_usd=hit.get("cost_usd", 0.0))
        if schema is not None:
            r.parsed, err = parse_structured(r.content, schema)
            if err:  # a schema changed under an old entry: treat as a miss
                return None
        if not hit.get("junk_checked") and junk_reason(r.content, r.parsed, messages, prompt):
            return None  # stored by a version without the junk rules: ask again
        self._stat(role).hits += 1
        self._record(role, spec, r)
        return r

    def _store(self, key: str, spec: ModelSpec, role: str, r: CallResult) -> None:
        """Count a decided call, cache it when valid, record its provenance: the one ending of
        a live request and of a batch line."""
        st = self._stat(role)
        st.requests += r.attempts
        st.retries += max(0, r.attempts - 1)
        if r.ok:
            self.cache.set(key, {"content": r.content, "prompt_tokens": r.prompt_tokens,
                                 "completion_tokens": r.completion_tokens,
                                 "reasoning_tokens": r.reasoning_tokens,
                                 "cached_tokens": r.cached_tokens,
                                 "cost_usd": r.cost_usd, "role": role, "model": spec.model,
                                 # passed junk_reason when stored: no re-check on every hit
                                 "junk_checked": True}, role)
            if self.retry_failed:  # only then can this key have a remembered failure
                self.cache.forget_failure(key)
        else:
            st.failures += 1
            if not spec.temperature and r.error_kind in DETERMINISTIC_FAILURES:
                self.cache.remember_failure(key, {"error_kind": r.error_kind, "error": r.error,
                                                  "role": role, "model": spec.model}, role)
        self._record(role, spec, r)

    def _remembered(self, key: str, role: str, spec: ModelSpec) -> CallResult | None:
        """The failure an earlier run met on this deterministic call, as a failed result (never
        an answer), or None."""
        if spec.temperature or self.retry_failed:
            return None
        failed = self.cache.get_failure(key)
        if failed is None or failed["error_kind"] not in DETERMINISTIC_FAILURES:
            return None
        r = CallResult(call_hash=key, cached=True, error_kind=failed["error_kind"],
                       error=f"{failed.get('error') or ''} ({REMEMBERED_NOTE})")
        self._stat(role).remembered += 1
        self._record(role, spec, r)
        return r

    def _known(self, key, role, spec, messages, prompt, schema) -> CallResult | None:
        """The cached answer, or the remembered failure, of ``key``; None: it must be sent."""
        hit = self._hit(key, role, spec, messages, prompt, schema)
        return hit if hit is not None else self._remembered(key, role, spec)

    async def _run(self, key, spec, role, messages, prompt, schema,
                   cache_prefix: int | None = None) -> CallResult:
        known = self._known(key, role, spec, messages, prompt, schema)
        if known is not None:
            return known
        # One process per call in flight (claims.py): another run on this cache sending the
        # same request is waited for, and its stored answer read instead of paying twice.
        async with self.claims.hold(key) as waited:
            known = self._known(key, role, spec, messages, prompt, schema) if waited else None
            if known is not None:
                return known
            r = await self._request(key, spec, role, messages, prompt, schema, cache_prefix)
            self._store(key, spec, role, r)
        self.servers.note(spec, r)  # may raise ServerUnavailable
        return r

    @staticmethod
    def _request_kwargs(spec: ModelSpec, role: str, messages, schema,
                        cache_prefix: int | None = None) -> tuple[dict, list | None]:
        """litellm's arguments for a call (transport.py), the key read from the environment
        now; the batch client builds its request lines from the same."""
        return request_kwargs(spec, role, messages, schema, api_key_for(spec), cache_prefix)

    async def _request(self, key, spec, role, messages, prompt, schema,
                       cache_prefix: int | None = None) -> CallResult:
        """Send the request with retries (transport) and re-asks (invalid structured output)."""
        r = CallResult(call_hash=key)
        kwargs, messages = self._request_kwargs(spec, role, messages, schema, cache_prefix)
        api_key = kwargs.get("api_key")
        convo = list(messages) if messages is not None else None
        lim = self._limit(spec)
        reasks = 0
        transport_failures = 0
        started = time.perf_counter()
        while True:
            r.attempts += 1
            async with lim.slot():
                held = await self.hold_budget(
                    bound(spec, prompt_chars(kwargs, convo, prompt))) if self.budget else 0.0
                got = await self._send(kwargs, convo, prompt)
                if self.budget is not None:
                    self.budget.settle(held, 0.0 if isinstance(got, Failure) else answer_cost(
                        spec, got.usage, got.response_cost))
            if isinstance(got, Failure):
                if got.group == "context":
                    return self._fail(r, started, api_key, "context_exceeded", got.text)
                if got.group == "blocked":
                    return self._fail(r, started, api_key, "content_blocked", got.text)
                if got.group in ("transient", "server"):  # retried, on one count
                    transport_failures += 1
                    if transport_failures <= spec.max_retries:
                        await asyncio.sleep(self._backoff(transport_failures, got.retry_after))
                        continue
                    if got.group == "transient":
                        r.connect_failed = got.connect
                        return self._fail(r, started, api_key, "retries_exhausted", got.text)
                return self._fail(r, started, api_key, "api_error", got.text)

            decided, convo = judge(r, got, got.content, spec=spec, messages=messages, convo=convo,
                                   prompt=prompt, schema=schema, started=started,
                                   api_key=api_key, reasks=reasks,
                                   max_reasks=self.cfg.max_parse_retries)
            if decided is not None:
                return decided
            reasks += 1

    async def hold_budget(self, usd: float, force: bool = False) -> float:
        """Commit ``usd`` of the budget before a request or a batch goes out; when it would
        pass the cap, stop the run as Ctrl-C does (tasks/ops/interrupt.py): this call never
        returns, nothing new is sent, what is in flight finishes. Returns what it held (0
        without a cap); ``force``: held whatever the cap (a batch already submitted)."""
        budget = self.budget
        if budget is None:
            return 0.0
        first = not budget.stopped
        if not budget.hold(usd, force):
            if first:
                log.warning("%s", budget.line())
            interrupt.stop(budget.line, BUDGET_EXIT_CODE)
            await interrupt.checkpoint()
        return usd

    async def _send(self, kwargs: dict, convo, prompt) -> Reply | Failure:
        """One request: in a gateway worker process when the run has them, else here.
        Limits, the in-flight table and the cache stay in this process either way."""
        await interrupt.checkpoint()  # after Ctrl-C nothing new is sent, retries included
        with interrupt.sending():
            pool = self._pool()
            if pool is not None:
                return await pool.send(kwargs, convo, prompt)
            return await send(kwargs, convo, prompt)

    def _backoff(self, n: int, after: float | None) -> float:
        """Seconds to wait before retry ``n``: what the provider asked for (Retry-After), else
        exponential with jitter."""
        if after is not None:
            return min(after, self.cfg.backoff_max_s)
        base = min(self.cfg.backoff_max_s, self.cfg.backoff_base_s * 2 ** (n - 1))
        return base * random.uniform(0.5, 1.5)  # jitter: retries of many calls spread out

    # Kept on the class: embed.py and the batch client fail results through the gateway.
    _fail = staticmethod(fail)
