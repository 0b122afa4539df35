"""The provider batch path against the loopback server's batch APIs: a judge entry that batches
(``spec_for``), calls to send (``calls_for``), a home with a warehouse (the ``home`` fixture),
gateways and the two ways to send (``run_batch``, ``run_live``), ``_Server``, a server
that is never called (for prices and plans), and each batch provider's entry
(``provider_spec``). Shared by test_batch_api, test_batch_providers, test_batch_ledger and
test_plan_prices."""

from __future__ import annotations

import asyncio

import pytest

from tasks.config import GatewayConfig, ModelSpec
from tasks.gateway import Gateway
from tasks.gateway.batch import BatchCall, BatchClient
from tests.support.factories import model_spec
from tests.support.gateway import Verdict
from warehouse import Warehouse

ROLE = "benutil_judge"


# A judge entry on the loopback server's batch API, polled often (the rest:
# tests/support/factories.py).
ENTRY = {"model": "openai/test-judge", "max_concurrency": 8, "max_retries": 1,
         "where": "models.benutil_judge", "batch": True, "batch_size": 10, "batch_poll_s": 0.02}


def spec_for(server, **over) -> ModelSpec:
    # ``over`` may set any field, the name and the api_base included.
    return model_spec(**{"name": "j", "api_base": server.api_base, **ENTRY, **over})


def calls_for(spec, n=5) -> list[BatchCall]:
    # Even positions structured, odd ones free text; the last repeats the first (one line).
    out = [BatchCall(spec, ROLE, [{"role": "user", "content": f"question {i}"}],
                     schema=Verdict if i % 2 == 0 else None) for i in range(n - 1)]
    return out + [BatchCall(spec, ROLE, [{"role": "user", "content": "question 0"}], schema=Verdict)]


@pytest.fixture
def home(tmp_path):
    wh = Warehouse(tmp_path / "warehouse.duckdb").init()
    return tmp_path, wh


def gateway(tmp_path, name="cache", run_id="run-1") -> Gateway:
    return Gateway(tmp_path / name, run_id, GatewayConfig(backoff_base_s=0.01, backoff_max_s=0.05))


def run_batch(gw, wh, calls):
    return asyncio.run(BatchClient(gw, wh).run(calls))


async def die_when(gw, wh, calls, ready) -> None:
    """Run a batch client over ``calls`` until ``ready()``, then cancel it, as a process killed
    at that moment stops (nothing after the cancellation point runs)."""
    task = asyncio.create_task(BatchClient(gw, wh).run(calls))
    while not ready():
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


def run_live(gw, calls):
    async def go():
        return await asyncio.gather(*(gw.chat(c.spec, c.role, c.messages, schema=c.schema)
                                      for c in calls))
    return asyncio.run(go())


class _Server:
    api_base = "http://127.0.0.1:9/v1"


# Each batch provider of the loopback server: (model, api_base attribute of the server, route
# counted per create, per poll). Shared by test_batch_providers and test_batch_ledger.
PROVIDERS = {
    "openai": ("openai/test-judge", "api_base", "POST /v1/batches", "GET /v1/batches"),
    "anthropic": ("anthropic/claude-sonnet-4-20250514", "anthropic_base",
                  "POST /v1/messages/batches", "GET /v1/messages/batches"),
    "gemini": ("gemini/gemini-2.5-flash", "gemini_base", "POST /v1beta/batchGenerateContent",
               "GET /v1beta/batches"),
}


def provider_spec(server, provider, **over) -> ModelSpec:
    """A judge entry of ``provider`` on the loopback server, batched, polled often."""
    model, base, _, _ = PROVIDERS[provider]
    fields = dict(name="j", model=model, api_base=getattr(server, base), max_concurrency=8,
                  max_retries=1, where="models.benutil_judge", batch=True, batch_size=10,
                  batch_poll_s=0.02)
    return model_spec(**{**fields, **over})


def creates(server, provider) -> int:
    """Batch creates the server received for ``provider``."""
    return server.counts[PROVIDERS[provider][2]]
