"""One provider model's concurrency and rpm budget, shared by every process of a deployment.

The per-process limits (tasks/gateway/limits.py) multiply with the number of shards. Here the
budget lives on the Prefect server as two global concurrency limits (GCL, ``/v2/concurrency_limits``):

- a concurrency GCL (limit = max_concurrency, no slot decay), leased with
  ``increment-with-lease``: leases expire on the server, so a killed process gives its slots
  back by itself;
- a rate GCL (a limit with ``slot_decay_per_second``), drawn with
  ``prefect.concurrency.asyncio.rate_limit``.

Server-side limits already span workers and machines, which is why Prefect and not a lock file
or a new service. But the gateway runs ~300 calls/s and a round trip per call would cap it far
below that, so slots and rate tokens are leased in BLOCKS and spent locally; only block
acquisitions and returns (and lease renewals) reach the server.

Prefect APIs used (all public): ``get_client()`` and its methods
``create/read/update_global_concurrency_limit*``, ``increment_concurrency_slots_with_lease``,
``renew_concurrency_lease``, ``release_concurrency_slots_with_lease``; and
``prefect.concurrency.asyncio.rate_limit``. The 423-and-Retry-After waiting for slots is done
here (not by ``prefect.concurrency._asyncio``) because for a non-decaying limit the server's
Retry-After grows with the average slot occupancy (a block is held for minutes, so up to 30 s),
far too slow to pick up a block another shard just returned.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
import time
from collections import deque
from uuid import UUID

log = logging.getLogger("carryon.gateway.shared_limits")

# Leases: the server accepts 60 s .. 1 day. A process that dies without close() frees its
# slots when its leases expire, so keep it short and renew often.
LEASE_S = 60.0
RENEW_EVERY_S = 20.0
# Longest pause between attempts to lease a block while the global limit is full.
POLL_MAX_S = 0.1
# Waiting this long without a single slot is said once (a log line naming the limit).
WAIT_WARN_S = 30.0
# A rate token not spent within this many seconds of its grant is dropped (see rate_sizing).
TOKEN_TTL_S = 1.0


class SharedLimitsUnavailable(RuntimeError):
    """The Prefect API could not be reached or refused the limits' setup."""


def shared_limits_enabled(setting: str, shards: int = 1) -> bool:
    """``gateway.shared_limits``: on, off, or auto = when the run is one shard of several and
    talks to a long-lived Prefect server (a deployment's worker, ``carryon server up``). A
    temporary server serves one process only, whose own limits already hold; a run that is not
    sharded shares only when asked (``on``), because slots held by a killed run stay taken
    until their leases expire."""
    if setting == "auto":
        from tasks.ops.ephemeral import long_lived_api_url

        return shards > 1 and long_lived_api_url() is not None
    return setting == "on"


def rate_sizing(rpm: float, token_ttl_s: float = TOKEN_TTL_S) -> tuple[int, float]:
    """(capacity C, decay per second) of the rate GCL for a provider's ``rpm``.

    Providers count rpm over a sliding 60 s window. A bucket of capacity rpm would let a full
    bucket go at once and then refill, 2 x rpm in one minute. Instead the bucket is small:
    at most C grants at once, plus ``decay`` per second after. Grants in any T seconds are
    then at most C + decay * T. A token is spent within ``token_ttl_s`` of its grant (or
    dropped), so the starts in a 60 s window used tokens granted in a 60 + ttl window:
    at most C + decay * (60 + ttl) = C + (rpm - C) = rpm.
    """
    cap = max(1, math.ceil(rpm / 60))
    return cap, max(rpm - cap, 0.0) / (60.0 + token_ttl_s)


def _one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0]}" if text else type(e).__name__


class SharedLimits:
    """One provider model's budget, shared by every process through Prefect global concurrency limits."""

    def __init__(self, model: str, server: str, max_concurrency: int, rpm: float | None,
                 *, block: int | None = None, idle_release_s: float = 0.5):
        if max_concurrency < 1:
            raise ValueError("max_concurrency must be >= 1")
        self.model, self.server = model, server
        self.max_concurrency = max_concurrency
        self.rpm = rpm
        self.block = max(1, min(block or max_concurrency // 8, max_concurrency))
        self.idle_release_s = idle_release_s
        self.conc_name, self.rate_name = self.limit_names(model, server)
        if rpm:
            self.rate_cap, self.rate_decay = rate_sizing(rpm)
            # Tokens per round trip: a few, so a busy shard makes few calls to the server,
            # but not the whole bucket, so shards share it.
            self.rate_block = max(1, min(self.rate_cap, 4))
        self.stats = {"blocks_acquired": 0, "blocks_released": 0, "server_calls": 0, "waits": 0}
        self._client = None
        self._setup_lock: asyncio.Lock | None = None
        self._ready = False
        self._closed = False
        self._capacity = 0  # slots of the blocks held (never less than _inflight)
        self._inflight = 0
        self._peak = 0  # most slots in use (or wanted) since the last idle check
        self._blocks: list[tuple[UUID, int]] = []  # (lease id, slots), in lease order
        self._waiters: deque[asyncio.Future] = deque()
        self._leasing: asyncio.Task | None = None  # at most one block request in flight
        self._background: set[asyncio.Task] = set()
        self._reaper: asyncio.Task | None = None
        self._renewer: asyncio.Task | None = None
        self._tokens: deque[float] = deque()  # grant times of unspent rate tokens
        self._token_lock: asyncio.Lock | None = None

    @staticmethod
    def limit_names(model: str, server: str) -> tuple[str, str]:
        # Prefect names may not contain / % & > < (prefect.types.names); a model string
        # ("openai/gpt-4o") and a URL do, so the names carry a hash of them.
        h = hashlib.sha1(f"{model}@{server}".encode()).hexdigest()[:12]
        return f"carryon-conc-{h}", f"carryon-rate-{h}"

    # ----- setup -----------------------------------------------------------------------------
    async def _setup(self) -> None:
        if self._ready:
            return
        if self._setup_lock is None:
            self._setup_lock = asyncio.Lock()
            self._token_lock = asyncio.Lock()
        async with self._setup_lock:
            if self._ready:
                return
            from prefect.client.orchestration import get_client

            client = get_client()
            url = str(getattr(client, "api_url", "") or "(ephemeral)")
            try:
                await client.__aenter__()
                await self._ensure_limit(client, self.conc_name, self.max_concurrency, 0.0)
                if self.rpm:
                    await self._ensure_limit(client, self.rate_name, self.rate_cap, self.rate_decay)
            except Exception as e:
                await client.__aexit__(None, None, None)
                raise SharedLimitsUnavailable(
                    f"shared limits for model {self.model}: Prefect API at {url} failed: "
                    f"{_one_line(e)}") from None
            self._client = client
            self._renewer = asyncio.create_task(self._renew_loop())
            self._ready = True

    async def _ensure_limit(self, client, name: str, limit: int, decay: float) -> None:
        """Create the GCL, or bring an existing one to this config (idempotent; two processes
        racing both succeed: the loser of the create reads the winner's)."""
        from prefect.client.schemas.actions import (
            GlobalConcurrencyLimitCreate, GlobalConcurrencyLimitUpdate)
        from prefect.exceptions import ObjectAlreadyExists, ObjectNotFound

        create = GlobalConcurrencyLimitCreate(name=name, limit=limit, slot_decay_per_second=decay)
        # Read first: the usual case (the limit exists) then costs the server no failed insert.
        for _ in range(3):
            self.stats["server_calls"] += 1
            try:
                have = await client.read_global_concurrency_limit_by_name(name)
                break
            except ObjectNotFound:
                pass
            self.stats["server_calls"] += 1
            try:
                await client.create_global_concurrency_limit(create)
                return
            except ObjectAlreadyExists:  # another process created it meanwhile: read theirs
                continue
        else:
            raise RuntimeError(f"could not create or read global concurrency limit {name}")
        if have.limit != limit or not math.isclose(have.slot_decay_per_second or 0.0, decay) \
                or not have.active:
            log.warning("shared limit %s of model %s had limit=%s decay=%s; set to this "
                        "process's config: limit=%s decay=%.4g", name, self.model, have.limit,
                        have.slot_decay_per_second, limit, decay)
            self.stats["server_calls"] += 1
            await client.update_global_concurrency_limit(name, GlobalConcurrencyLimitUpdate(
                limit=limit, slot_decay_per_second=decay, active=True))

    # ----- slots -----------------------------------------------------------------------------
    async def acquire(self) -> None:
        """Wait for one in-flight slot (and one rate token when rpm is set)."""
        if self._closed:
            raise RuntimeError("SharedLimits is closed")
        await self._setup()
        if not self._waiters and self._inflight < self._capacity:
            self._inflight += 1
        else:
            self.stats["waits"] += 1
            fut = asyncio.get_running_loop().create_future()
            self._waiters.append(fut)
            self._want_block()
            try:
                await fut  # _wake() counted the slot as ours before setting the result
            except asyncio.CancelledError:
                if fut.done() and not fut.cancelled():
                    self.release()  # a slot was handed over just before the cancel
                elif fut in self._waiters:
                    self._waiters.remove(fut)
                raise
        self._peak = max(self._peak, self._inflight + len(self._waiters))
        # The token comes last, right before the request starts: a token taken before a wait
        # for a slot could be spent after its TTL, outside the rpm bound (rate_sizing).
        if self.rpm:
            try:
                await self._take_token()
            except BaseException:
                self.release()
                raise

    def release(self) -> None:
        """Give back one in-flight slot. Idle blocks go back to Prefect later (_reap)."""
        self._inflight -= 1
        self._wake()

    def _wake(self) -> None:
        # Hand free slots straight to waiters, so a newcomer cannot overtake them.
        while self._waiters and self._inflight < self._capacity:
            fut = self._waiters.popleft()
            if not fut.done():
                self._inflight += 1
                fut.set_result(None)

    def _want_block(self) -> None:
        if self._leasing is None and self._capacity < self.max_concurrency:
            self._leasing = asyncio.create_task(self._lease_blocks())

    async def _lease_blocks(self) -> None:
        """Lease blocks while callers wait for slots; one request in flight at a time."""
        import httpx

        pause = 0.01
        began, warned = time.monotonic(), False
        try:
            while (self._waiters and not self._closed
                   and self._capacity < self.max_concurrency):
                n = min(self.block, self.max_concurrency - self._capacity)
                self.stats["server_calls"] += 1
                try:
                    resp = await self._client.increment_concurrency_slots_with_lease(
                        names=[self.conc_name], slots=n, mode="concurrency", lease_duration=LEASE_S)
                except httpx.HTTPStatusError as e:
                    if e.response.status_code != 423:
                        raise
                    # The global limit is full: poll (see the module docstring on Retry-After).
                    if not self._capacity and not warned and time.monotonic() - began > WAIT_WARN_S:
                        warned = True
                        log.warning(
                            "model %s: no slot of shared limit %s for %.0f s. Other processes "
                            "hold them, or a killed run does until its leases expire (%.0f s; "
                            "the Prefect server's repossessor service frees them)", self.model,
                            self.conc_name, time.monotonic() - began, LEASE_S)
                    after = float(e.response.headers.get("Retry-After", POLL_MAX_S))
                    await asyncio.sleep(min(after, pause))
                    pause = min(pause * 2, POLL_MAX_S)
                    continue
                pause = 0.01
                body = resp.json()
                if not body.get("limits"):  # deleted under us: Prefect grants nothing
                    raise RuntimeError(f"global concurrency limit {self.conc_name} is missing")
                self._blocks.append((UUID(body["lease_id"]), n))
                self._capacity += n
                self.stats["blocks_acquired"] += 1
                self._wake()
                if self._reaper is None:
                    self._reaper = asyncio.create_task(self._reap())
        except Exception as e:  # fail the waiters rather than leave them hanging
            err = SharedLimitsUnavailable(
                f"shared limits for model {self.model}: leasing a block failed: {_one_line(e)}")
            while self._waiters:
                fut = self._waiters.popleft()
                if not fut.done():
                    fut.set_exception(err)
        finally:
            self._leasing = None

    async def _reap(self) -> None:
        """Every idle_release_s, return the blocks that the peak use of the whole period never
        reached. A block in use at any moment of the period stays: no lease/return thrash
        under steady load."""
        while self._blocks and not self._closed:
            self._peak = self._inflight + len(self._waiters)
            await asyncio.sleep(self.idle_release_s)
            need = max(self._peak, self._inflight + len(self._waiters))
            while self._blocks and self._capacity - self._blocks[-1][1] >= need:
                lease_id, n = self._blocks.pop()
                self._capacity -= n  # never below _inflight: need >= _inflight
                self._spawn(self._return(lease_id))
        self._reaper = None

    async def _return(self, lease_id: UUID) -> None:
        self.stats["server_calls"] += 1
        try:
            await self._client.release_concurrency_slots_with_lease(lease_id)
            self.stats["blocks_released"] += 1
        except Exception as e:  # the lease expires on the server anyway
            log.warning("could not return a block of model %s: %s", self.model, _one_line(e))

    async def _renew_loop(self) -> None:
        while True:
            await asyncio.sleep(RENEW_EVERY_S)
            for lease_id, _ in list(self._blocks):
                self.stats["server_calls"] += 1
                try:
                    await self._client.renew_concurrency_lease(lease_id, LEASE_S)
                except Exception as e:
                    log.warning("could not renew a lease of model %s: %s", self.model, _one_line(e))

    def _spawn(self, coro) -> None:
        task = asyncio.create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # ----- rate tokens -----------------------------------------------------------------------
    async def _take_token(self) -> None:
        from prefect.concurrency.asyncio import rate_limit

        async with self._token_lock:
            now = time.monotonic()
            while self._tokens and now - self._tokens[0] > TOKEN_TTL_S:
                self._tokens.popleft()  # too old to spend within the rpm bound (rate_sizing)
            if not self._tokens:
                self.stats["server_calls"] += 1
                await rate_limit(self.rate_name, occupy=self.rate_block, strict=True)
                self._tokens.extend([time.monotonic()] * self.rate_block)
            self._tokens.popleft()

    # ----- shutdown --------------------------------------------------------------------------
    async def close(self) -> None:
        """Return every held block to Prefect. Callers still in flight keep running; their
        slots are no longer held."""
        if self._closed:
            return
        self._closed = True
        while self._waiters:
            fut = self._waiters.popleft()
            if not fut.done():
                fut.set_exception(RuntimeError("SharedLimits closed"))
        # Let a block request in flight finish (not cancel it: a grant whose lease id is lost
        # would hold its slots until the lease expires); with no waiters it stops after it.
        if self._leasing is not None:
            await asyncio.gather(self._leasing, return_exceptions=True)
        for task in (self._reaper, self._renewer):
            if task is not None:
                task.cancel()
        blocks, self._blocks, self._capacity = self._blocks, [], 0
        for lease_id, _ in blocks:
            self._spawn(self._return(lease_id))
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)
        if self._client is not None:
            await self._client.__aexit__(None, None, None)
            self._client = None
