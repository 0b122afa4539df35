"""One request, two ways: a batch line is the request litellm's live path sends for the same
call (tasks/gateway/batch_wire.py).

Each live call goes through litellm (``acompletion``) to a loopback capture server, which
records the HTTP request and refuses it; the batch wire builds the line of the same call. The
line's body must equal the captured body, and the headers its batch's create carries must
equal the captured headers, auth and envelope aside: for every model entry of every shipped
config that has a batch path, and for a table of model families (gpt-4o, gpt-5.x with and
without reasoning_effort, o-series, Claude 4 and 4.5 with and without a schema and reasoning,
Gemini 2.5 and 3 with and without a schema and thinking). The strict fakes
(tests/support/llm_batch.py, llm_providers.py) accept every such line.
"""

from __future__ import annotations

import asyncio
import dataclasses
import glob
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from aiohttp import web

from tasks.config import load_config
from tasks.gateway.batch_wire import WIRES, LineError, batch_route, entry_batch_route
from tasks.gateway.transport import _litellm, request_kwargs
from tests.support.factories import model_spec
from tests.support.gateway import Verdict
from tests.support.llm_batch import openai_refusal
from tests.support.llm_providers import anthropic_refusal, gemini_refusal

ROOT = Path(__file__).resolve().parents[2]
MESSAGES = [{"role": "system", "content": "You judge."},
            {"role": "user", "content": "Is the sky blue?"},
            {"role": "assistant", "content": "Let me think."},
            {"role": "user", "content": "Answer, please."}]
# Headers of the transport, the SDKs and auth, and the gateway's role tag: a batch request
# sets its own.
ENVELOPE = {"host", "content-length", "content-type", "accept", "accept-encoding", "connection",
            "user-agent", "authorization", "x-api-key", "x-goog-api-key", "x-carryon-role"}


class Capture:
    """A loopback server that records each request and refuses it (HTTP 400)."""

    def __init__(self):
        self.seen: list[dict] = []
        self.port = 0

    async def _handle(self, request: web.Request) -> web.Response:
        self.seen.append({"path": request.path, "headers": dict(request.headers),
                          "body": await request.read()})
        return web.json_response({"error": {"message": "captured", "type": "invalid_request_error"}},
                                 status=400)

    def start(self) -> "Capture":
        ready = threading.Event()

        def run():
            loop = asyncio.new_event_loop()
            app = web.Application()
            app.router.add_route("*", "/{tail:.*}", self._handle)
            runner = web.AppRunner(app, access_log=None)
            loop.run_until_complete(runner.setup())
            site = web.TCPSite(runner, "127.0.0.1", 0)
            loop.run_until_complete(site.start())
            self.port = site._server.sockets[0].getsockname()[1]
            ready.set()
            loop.run_forever()

        threading.Thread(target=run, daemon=True, name="capture").start()
        ready.wait(10)
        return self

    def base(self, provider: str) -> str:
        root = f"http://127.0.0.1:{self.port}"
        return {"openai": f"{root}/v1", "anthropic": root, "gemini": f"{root}/v1beta"}[provider]


@pytest.fixture(scope="module")
def capture():
    return Capture().start()


def _headers(raw: dict) -> dict:
    out = {}
    for k, v in raw.items():
        k = k.lower()
        if k in ENVELOPE or k.startswith("x-stainless-"):
            continue
        out[k] = ",".join(sorted(x.strip() for x in v.split(","))) if k == "anthropic-beta" else v
    return out


def live_and_line(capture: Capture, spec, schema, role="benutil_judge"):
    """The HTTP request of the live call, and the wire's request of the same call."""
    route = batch_route(spec.model)[0]
    kwargs, messages = request_kwargs(spec, role, MESSAGES, schema, "sk-test-key")
    capture.seen.clear()

    async def live():
        try:
            await _litellm().acompletion(messages=messages, **kwargs)
        except Exception:  # noqa: BLE001 - refused by the capture server, as intended
            pass

    asyncio.run(live())
    assert len(capture.seen) == 1, capture.seen
    return capture.seen[0], WIRES[route].request(kwargs, messages), route


def assert_same_request(capture: Capture, spec, schema):
    sent, req, route = live_and_line(capture, spec, schema)
    label = f"{spec.model} {spec.where} schema={schema is not None}"
    assert req.body == json.loads(sent["body"]), label
    assert dict(req.headers) == _headers(sent["headers"]), label
    if route != "openai":  # the batch endpoints are derived from the live URL
        assert urlsplit(req.url).path == sent["path"], label
    # The strict fakes take the line as the provider would.
    if route == "openai":
        assert openai_refusal(req.body) is None, label
    elif route == "anthropic":
        betas = set(dict(req.headers).get("anthropic-beta", "").split(",")) - {""}
        assert anthropic_refusal(req.body, betas) is None, label
    else:
        assert gemini_refusal(spec.model.split("/", 1)[1], req.body) is None, label


def _shipped_entries():
    out = []
    for path in sorted(glob.glob(str(ROOT / "configs" / "*.yaml"))):
        cfg = load_config(path)
        for role, specs in cfg.all_specs().items():
            for s in specs:
                if batch_route(s.model)[0] is not None:
                    out.append(pytest.param(s, id=f"{Path(path).stem}:{s.where}:{s.model}"))
    return out


SHIPPED = _shipped_entries()


def test_the_shipped_configs_have_entries_of_every_batch_provider():
    providers = {batch_route(p.values[0].model)[0] for p in SHIPPED}
    assert providers == {"openai", "anthropic", "gemini"}


@pytest.mark.parametrize("schema", [None, Verdict], ids=["text", "schema"])
@pytest.mark.parametrize("spec", SHIPPED)
def test_each_shipped_entry_batch_line_is_its_live_request(capture, spec, schema):
    provider = batch_route(spec.model)[0]
    spec = model_spec(**{**spec.__dict__, "api_base": capture.base(provider)})
    assert_same_request(capture, spec, schema)


FAMILIES = [
    ("openai/gpt-4o", {}),
    ("openai/gpt-5.2", {}),
    ("openai/gpt-5.2", {"reasoning_effort": "none"}),
    ("openai/gpt-5.2", {"reasoning_effort": "high", "temperature": 1.0}),
    ("openai/gpt-5.4", {"reasoning_effort": "none"}),
    ("openai/gpt-5-mini", {"reasoning_effort": "minimal", "temperature": 1.0}),
    ("openai/o3", {"temperature": 1.0}),
    ("openai/o4-mini", {"reasoning_effort": "low", "temperature": 1.0}),
    ("anthropic/claude-sonnet-4-20250514", {}),
    ("anthropic/claude-sonnet-4-20250514", {"thinking_budget": 1024, "max_tokens": 4096,
                                            "temperature": 1.0}),
    ("anthropic/claude-sonnet-4-5", {}),
    ("anthropic/claude-sonnet-4-5", {"reasoning_effort": "low", "max_tokens": 4096,
                                     "temperature": 1.0}),
    ("anthropic/claude-haiku-4-5", {}),
    ("anthropic/claude-haiku-4-5", {"thinking_budget": 2048, "max_tokens": 8192,
                                    "temperature": 1.0}),
    ("anthropic/claude-sonnet-4-6", {}),
    ("gemini/gemini-2.5-flash", {}),
    ("gemini/gemini-2.5-flash", {"thinking_budget": 0}),
    ("gemini/gemini-2.5-pro", {"thinking_budget": 1024}),
    ("gemini/gemini-3-flash-preview", {"reasoning_effort": "minimal", "temperature": 1.0}),
    ("gemini/gemini-3.1-pro-preview", {}),
    ("gemini/gemini-3.1-pro-preview", {"reasoning_effort": "low"}),
]


@pytest.mark.parametrize("schema", [None, Verdict], ids=["text", "schema"])
@pytest.mark.parametrize("model, over", FAMILIES,
                         ids=[f"{m}{'+' + '+'.join(o) if o else ''}" for m, o in FAMILIES])
def test_each_family_batch_line_is_its_live_request(capture, model, over, schema):
    provider = batch_route(model)[0]
    spec = model_spec(**{"name": "m", "model": model, "api_base": capture.base(provider),
                         "max_tokens": 512, "where": "models.family", **over})
    assert_same_request(capture, spec, schema)


def test_the_fixes_are_in_the_lines(capture):
    # What the table guards, said plainly: gpt-5.x lines carry max_completion_tokens, never
    # max_tokens; a Claude 4.5 line with a schema needs the structured-outputs beta on its batch.
    gpt = model_spec(name="g", model="openai/gpt-5.2", api_base=capture.base("openai"),
                     max_tokens=512, reasoning_effort="none")
    _, req, _ = live_and_line(capture, gpt, Verdict)
    assert req.body["max_completion_tokens"] == 512 and "max_tokens" not in req.body
    claude = model_spec(name="c", model="anthropic/claude-sonnet-4-5",
                        api_base=capture.base("anthropic"), max_tokens=512)
    _, req, _ = live_and_line(capture, claude, Verdict)
    assert "output_format" in req.body
    assert dict(req.headers)["anthropic-beta"].startswith("structured-outputs-")


def test_a_call_whose_headers_cannot_travel_in_a_batch_goes_live_and_the_route_says_why(
        capture, monkeypatch):
    # A header litellm adds that Gemini's batch lines cannot carry: the line is refused
    # (LineError, so the runner calls it live) and entry_batch_route says why.
    import tasks.gateway.batch_wire as bw

    assert entry_batch_route(model_spec(name="o", model="openai/gpt-4o"))[0] == "openai"
    real = bw.live_request

    def with_header(kwargs, messages):
        url, headers, body = real(kwargs, messages)
        return url, {**headers, "x-goog-user-project": "p"}, body

    monkeypatch.setattr(bw, "live_request", with_header)
    spec = model_spec(name="m", model="gemini/gemini-2.5-flash", api_base=capture.base("gemini"))
    kwargs, messages = request_kwargs(spec, "r", MESSAGES, None, "k")
    with pytest.raises(LineError, match="x-goog-user-project"):
        WIRES["gemini"].request(kwargs, messages)
    route, why = entry_batch_route(spec)
    assert route is None and "x-goog-user-project" in why
    # carryon plan says so for an entry that asks for batches (prices.batch_notes), and only
    # for such an entry (the probe needs litellm).
    from tasks.gateway.prices import batch_notes

    asked = dataclasses.replace(spec, batch=True)
    note = [n for n in batch_notes({"benutil_judge": [asked]}) if "cannot travel" in n]
    assert len(note) == 1 and "benutil_judge gemini/gemini-2.5-flash" in note[0] \
        and "x-goog-user-project" in note[0]
    assert not [n for n in batch_notes({"benutil_judge": [spec]}) if "cannot travel" in n]


@pytest.mark.slow  # one of the fast suite's slowest (kept under 5 min on 2 cores)
def test_building_lines_reaches_no_network_for_the_anthropic_beta_map():
    # litellm fetches its Anthropic beta-header map from the network unless told not to; the
    # gateway tells it (transport.py), as it does for the price map. A fresh process without
    # the variable: building an Anthropic line with a schema (which needs a beta) must not try.
    code = """
import os
os.environ.pop("LITELLM_LOCAL_ANTHROPIC_BETA_HEADERS", None)
from tasks.gateway.transport import _litellm, request_kwargs
_litellm()
assert os.environ["LITELLM_LOCAL_ANTHROPIC_BETA_HEADERS"] == "True"
import litellm.anthropic_beta_headers_manager as m
def no_network(*a, **k):
    raise AssertionError("fetched the beta-header map over the network")
m.GetAnthropicBetaHeadersConfig.fetch_remote_beta_headers_config = staticmethod(no_network)
from tasks.gateway.batch_wire import WIRES
from tests.support.factories import model_spec
from tests.support.gateway import Verdict
spec = model_spec(name="c", model="anthropic/claude-sonnet-4-5", api_base="http://127.0.0.1:9")
req = WIRES["anthropic"].request(*request_kwargs(spec, "r", [{"role": "user", "content": "x"}],
                                                 Verdict, "k"))
assert dict(req.headers)["anthropic-beta"].startswith("structured-outputs-")
print("ok")
"""
    env = {k: v for k, v in os.environ.items() if k != "LITELLM_LOCAL_ANTHROPIC_BETA_HEADERS"}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-2000:]
