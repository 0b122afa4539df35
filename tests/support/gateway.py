"""The gateway against the loopback server: its test model entry (``spec_for``), a gateway on a
temporary cache (the ``gateway`` fixture), a structured answer (``Verdict``) and one user
message (``msgs``). Shared by the gateway tests and those that build on them."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from tasks.config import ModelSpec
from tasks.gateway import Gateway
from tests.support.factories import model_spec


class Verdict(BaseModel):
    fulfilled: bool
    evidence: str


# The loopback server's test model, with retries and concurrency to spare
# (tests/support/factories.py gives the rest); the gateway tests and test_gateway_workers,
# test_junk_and_down and others build on spec_for.
ENTRY = {"model": "openai/test-model", "max_concurrency": 8, "max_retries": 3,
         "where": "models.test"}


def spec_for(server, **over) -> ModelSpec:
    # ``over`` may set any field, the name and the api_base included.
    return model_spec(**{"name": "m", "api_base": server.api_base, **ENTRY, **over})


@pytest.fixture
def gateway(tmp_path):
    g = Gateway(tmp_path / "cache", "run-test")
    g.cfg.backoff_base_s, g.cfg.backoff_max_s = 0.01, 0.5
    yield g
    g.close()


def msgs(text):
    return [{"role": "user", "content": text}]
