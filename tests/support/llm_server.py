"""A loopback LLM server that speaks the OpenAI HTTP API, for hermetic tests and benchmarks.

It answers ``/v1/chat/completions`` and ``/v1/completions`` so the real litellm HTTP path is
exercised, the OpenAI batch API (files and batches: ``tests/support/llm_batch.py``), and Anthropic's
and Gemini's live and batch APIs (``tests/support/llm_providers.py``). Answers are deterministic functions of the request:

- structured requests (``response_format`` with a JSON schema) get a schema-valid instance
  whose booleans and integers vary with a hash of the prompt;
- WildGuard-format text prompts get WildGuard's three answer lines;
- anything else gets a short text that names the model and a hash of the prompt.

Per-role scripts (``scripts={"role": fn(request_json) -> str}``) override the defaults. The
role comes from the ``x-carryon-role`` header the gateway sends. Faults are injected at
configurable rates: HTTP 500, HTTP 429 with ``retry-after``, timeouts (the server sleeps past
the client's timeout) and malformed structured output.

Use in-process (``LLMServer().start()`` in a thread) or as a process:
``python -m tests.support.llm_server --port 0 --port-file PATH [--latency 0.05]``; the control
endpoints ``GET /_stats``, ``POST /_reset`` and ``POST /_config`` serve tests that drive the
CLI in a subprocess.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import random
import re
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web

from tests.support.llm_batch import BatchAPI, BatchFaults, bill, openai_refusal
from tests.support.llm_providers import ProviderAPIs


@dataclass
class Faults:
    error500: float = 0.0
    error429: float = 0.0
    retry_after_s: float = 0.05
    timeout: float = 0.0
    timeout_sleep_s: float = 3.0
    malformed: float = 0.0
    # Rate of chat answers refused by a provider safety filter: finish_reason
    # "content_filter" with empty content (fault kind "content_filter").
    content_filter: float = 0.0
    seed: int = 0
    # A provider's concurrency limit: a chat/completions request that arrives while this many
    # are being answered gets HTTP 429 (fault kind "429_limit"); 0 = no limit.
    max_inflight: int = 0


def _h(text: str) -> int:
    return int(hashlib.sha256(text.encode()).hexdigest()[:12], 16)


def _resolve(schema: dict, root: dict) -> dict:
    while "$ref" in schema:
        name = schema["$ref"].split("/")[-1]
        schema = root.get("$defs", {}).get(name, {})
    return schema


def instance_for(schema: dict, seed: int, name: str = "", root: dict | None = None):
    """A deterministic instance of a (pydantic-generated) JSON schema."""
    root = root or schema
    schema = _resolve(schema, root)
    if "anyOf" in schema:
        options = [s for s in schema["anyOf"] if _resolve(s, root).get("type") != "null"]
        return instance_for(options[0] if options else {"type": "null"}, seed, name, root)
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        return schema["enum"][seed % len(schema["enum"])]
    t = schema.get("type")
    if t == "object":
        return {k: instance_for(v, _h(f"{seed}:{k}"), k, root)
                for k, v in schema.get("properties", {}).items()}
    if t == "array":
        n = max(schema.get("minItems", 0), 3 + seed % 3)
        if "maxItems" in schema:
            n = min(n, schema["maxItems"])
        return [instance_for(schema.get("items", {}), _h(f"{seed}:{i}"), name, root) for i in range(n)]
    if t == "boolean":
        lowered = name.lower()
        if "harm" in lowered or "refus" in lowered:
            return False  # guards and filters keep things by default
        if lowered in ("keep", "kept"):
            return True
        if lowered.startswith("realises"):  # the move checker passes turns by default
            return True
        if lowered.startswith("reveals"):
            return False
        return bool(seed % 2)
    if t == "integer":
        lo = schema.get("minimum", 0)
        hi = schema.get("maximum", lo + 9)
        return lo + seed % (hi - lo + 1)
    if t == "number":
        return round((seed % 1000) / 1000, 3)
    if t == "string":
        return f"{name or 'text'} {seed % 100000:05d}"
    return None


_RESPONSE_BLOCK = re.compile(r"<<<BEGIN RESPONSE (\S+)>>>\n(.*?)\n<<<END RESPONSE \1>>>", re.S)


def _quote_evidence(obj, prompt: str):
    """A Ben-Util-shaped answer ({"evidence", "fulfilled"}) quotes the judged response, as the
    judge checks it must: "fulfilled" quotes its first words, "not fulfilled" quotes nothing."""
    if not (isinstance(obj, dict) and "evidence" in obj and isinstance(obj.get("fulfilled"), bool)):
        return obj
    m = _RESPONSE_BLOCK.search(prompt)
    words = m.group(2).split()[:6] if m else []
    if obj["fulfilled"] and words:
        obj["evidence"] = " ".join(words)
    elif obj["fulfilled"] and m:  # an empty response: nothing to quote
        obj["fulfilled"], obj["evidence"] = False, ""
    elif m:
        obj["evidence"] = ""
    return obj


WILDGUARD_MARK = "Answers: [/INST]"
SCHEMA_MARK = "It must match this JSON schema:\n"


def default_answer(role: str, body: dict) -> str:
    if "prompt" in body and "messages" not in body:
        prompt = body["prompt"] if isinstance(body["prompt"], str) else body["prompt"][0]
        if WILDGUARD_MARK in prompt:
            return " Harmful request: no\nResponse refusal: no\nHarmful response: no"
        return f"completion {_h(prompt) % 100000:05d}"
    seed = _h(json.dumps(body.get("messages"), sort_keys=True) + f"|{body.get('model')}|{body.get('temperature')}")
    rf = body.get("response_format") or {}
    schema = (rf.get("json_schema") or {}).get("schema") or rf.get("schema")
    last_text = str(body["messages"][-1]["content"]) if body.get("messages") else ""
    if not schema and SCHEMA_MARK in last_text:  # the gateway's "prompt" structured mode
        schema = json.loads(last_text.split(SCHEMA_MARK, 1)[1])
    if schema:
        return json.dumps(_quote_evidence(instance_for(schema, seed), last_text))
    last = body["messages"][-1]["content"] if body.get("messages") else ""
    if isinstance(last, list):
        last = " ".join(p.get("text", "") for p in last if isinstance(p, dict))
    return (f"Reply {seed % 100000:05d} from {body.get('model')} as {role or 'assistant'}: "
            f"here is what I can say about '{str(last)[:60]}'.")


def answer(content: str | None, finish_reason: str = "stop", reasoning_tokens: int | None = None,
           cached_tokens: int | None = None) -> dict:
    """A scripted answer with a finish reason, reasoning tokens (usage's
    completion_tokens_details) and cached prompt tokens (usage's prompt_tokens_details), e.g.
    ``answer(None, "content_filter")`` for a provider block or ``answer("", "length", 500)``
    for a budget spent on thinking."""
    return {"content": content, "finish_reason": finish_reason, "reasoning_tokens": reasoning_tokens,
            "cached_tokens": cached_tokens}


def content_policy_error() -> web.Response:
    """An HTTP 400 that litellm maps to ContentPolicyViolationError (a provider's safety block)."""
    return web.json_response({"error": {
        "message": "Your request was rejected as a result of the safety system.",
        "type": "invalid_request_error", "code": "content_policy_violation"}}, status=400)


class LLMServer:
    def __init__(self, latency_s: float = 0.0, faults: Faults | None = None,
                 scripts: dict | None = None, record: bool = True):
        self.latency_s = latency_s
        self.faults = faults or Faults()
        self.scripts = dict(scripts or {})
        self.record = record
        self.requests: list[dict] = []  # (role, headers, body) of each request when recording
        self.counts: Counter = Counter()
        self.inflight = 0
        self.max_inflight = 0
        self._rng = random.Random(self.faults.seed)
        # The OpenAI batch API (tests/support/llm_batch.py) and its faults.
        self.batch_faults = BatchFaults()
        # Every answer a provider would charge for, live or batch line (llm_batch.bill), priced
        # at prices[bare model] ({input,output,cached_input}_per_mtok, batch_discount).
        self.ledger: list[dict] = []
        self.prices: dict[str, dict] = {}
        # Key headers that reached a redirected download (a different origin): none should.
        self.redirect_keys: set[str] = set()
        self.batch = BatchAPI(self)
        # Anthropic's and Gemini's live and batch APIs (tests/support/llm_providers.py).
        self.providers = ProviderAPIs(self)
        self.port: int | None = None
        self._runner = None
        self._loop = None
        self._thread = None

    # ----- request handling ----------------------------------------------------------------
    def reset(self) -> None:
        self.requests.clear()
        self.counts.clear()
        self.ledger.clear()
        self.max_inflight = 0

    async def _arrived(self, request: web.Request) -> tuple[dict, str]:
        """Count and record a request: (its JSON body, its role header)."""
        body = await request.json()
        role = request.headers.get("x-carryon-role", "")
        self.counts["total"] += 1
        self.counts[role] += 1
        if self.record:
            self.requests.append({"role": role, "headers": dict(request.headers), "body": body})
        return body, role

    async def _handle(self, request: web.Request, kind: str) -> web.Response:
        body, role = await self._arrived(request)
        limit = self.faults.max_inflight
        if limit and self.inflight >= limit:  # rejected: never counted as in flight
            self.counts["fault_429_limit"] += 1
            return web.json_response(
                {"error": {"message": "over the concurrency limit", "type": "rate_limit"}},
                status=429, headers={"retry-after": str(self.faults.retry_after_s)})
        refused = openai_refusal(body) if kind == "chat" else None
        if refused:  # what OpenAI refuses (tests/support/llm_batch.py), refused here too
            self.counts["refused"] += 1
            return web.json_response(refused, status=400)
        self.inflight += 1
        self.max_inflight = max(self.max_inflight, self.inflight)
        try:
            resp = await self._answer(body, role, kind)
        finally:
            self.inflight -= 1
        if resp.status == 200:
            bill(self, "openai", "live", body, json.loads(resp.body.decode()))
        return resp

    async def _answer(self, body: dict, role: str, kind: str) -> web.Response:
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        f = self.faults
        roll = self._rng.random()
        if roll < f.error500:
            self.counts["fault_500"] += 1
            return web.json_response({"error": {"message": "injected 500", "type": "server_error"}}, status=500)
        roll -= f.error500
        if roll < f.error429:
            self.counts["fault_429"] += 1
            return web.json_response({"error": {"message": "injected 429", "type": "rate_limit"}},
                                     status=429, headers={"retry-after": str(f.retry_after_s)})
        roll -= f.error429
        if roll < f.timeout:
            self.counts["fault_timeout"] += 1
            await asyncio.sleep(f.timeout_sleep_s)
        roll -= f.timeout
        script = self.scripts.get(role)
        if kind == "chat" and roll < f.content_filter:  # a provider block, as answer() scripts it
            self.counts["fault_content_filter"] += 1
            content = answer(None, "content_filter")
        else:
            content = script(body) if script else default_answer(role, body)
        roll -= f.content_filter
        structured = bool(body.get("response_format"))
        if structured and 0 <= roll < f.malformed:
            self.counts["fault_malformed"] += 1
            content = '{"truncated": '
        if isinstance(content, web.Response):
            return content
        # A script may answer a dict: {"content": str | None, "finish_reason": "stop" |
        # "length" | "content_filter", "reasoning_tokens": int} (see ``answer``).
        finish, reasoning, cached = "stop", None, None
        if isinstance(content, dict):
            finish = content.get("finish_reason", "stop")
            reasoning = content.get("reasoning_tokens")
            cached = content.get("cached_tokens")
            content = content.get("content")
        usage = {"prompt_tokens": max(1, len(json.dumps(body.get("messages") or body.get("prompt"))) // 4),
                 "completion_tokens": max(1, len(content or "") // 4) + (reasoning or 0)}
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        if reasoning is not None:
            usage["completion_tokens_details"] = {"reasoning_tokens": reasoning}
        if cached is not None:
            usage["prompt_tokens_details"] = {"cached_tokens": cached}
        base = {"id": f"cmpl-{self.counts['total']}", "created": int(time.time()),
                "model": body.get("model", "test"), "usage": usage}
        if kind == "chat":
            base |= {"object": "chat.completion", "choices": [{
                "index": 0, "finish_reason": finish,
                "message": {"role": "assistant", "content": content}}]}
        else:
            base |= {"object": "text_completion", "choices": [{
                "index": 0, "finish_reason": finish, "text": content, "logprobs": None}]}
        return web.json_response(base)

    async def _embed(self, request: web.Request) -> web.Response:
        """Embeddings: 8 numbers per input from a hash of its text (same text, same vector);
        the injected 500 fault applies here too."""
        body, _ = await self._arrived(request)
        if self._rng.random() < self.faults.error500:
            self.counts["fault_500"] += 1
            return web.json_response({"error": {"message": "injected 500", "type": "server_error"}},
                                     status=500)
        texts = body.get("input")
        texts = [texts] if isinstance(texts, str) else list(texts or [])
        data = [{"object": "embedding", "index": i,
                 "embedding": [b / 255.0 for b in hashlib.sha256(t.encode()).digest()[:8]]}
                for i, t in enumerate(texts)]
        tokens = max(1, sum(len(t) for t in texts) // 4)
        return web.json_response({"object": "list", "data": data, "model": body.get("model"),
                                  "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 2**20)

        async def chat(request):
            return await self._handle(request, "chat")

        async def completions(request):
            return await self._handle(request, "text")

        async def embeddings(request):
            return await self._embed(request)

        async def models(request):
            return web.json_response({"object": "list", "data": [{"id": "test", "object": "model"}]})

        async def stats(request):
            return web.json_response(dict(self.counts))

        async def reset(request):
            self.reset()
            return web.json_response({"ok": True})

        async def configure(request):
            body = await request.json()
            self.latency_s = body.get("latency_s", self.latency_s)
            for k, v in (body.get("faults") or {}).items():
                setattr(self.faults, k, v)
            for k, v in (body.get("batch_faults") or {}).items():
                setattr(self.batch_faults, k, set(v) if k == "fail_lines" else v)
            return web.json_response({"ok": True})

        for prefix in ("", "/v1"):
            app.router.add_post(f"{prefix}/chat/completions", chat)
            app.router.add_post(f"{prefix}/completions", completions)
            app.router.add_post(f"{prefix}/embeddings", embeddings)
            app.router.add_get(f"{prefix}/models", models)
        self.batch.routes(app)
        self.providers.routes(app)
        app.router.add_get("/_stats", stats)
        app.router.add_post("/_reset", reset)
        app.router.add_post("/_config", configure)
        return app

    # ----- lifecycle -------------------------------------------------------------------------
    async def serve(self, host: str = "127.0.0.1", port: int = 0) -> int:
        self._runner = web.AppRunner(self.app(), access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port, backlog=1024)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]
        return self.port

    def start(self, port: int = 0) -> "LLMServer":
        """Serve from a background thread (for in-process tests); port 0 = any free port."""
        ready = threading.Event()

        def run():
            self._loop = asyncio.new_event_loop()
            asyncio.set_event_loop(self._loop)
            self._loop.run_until_complete(self.serve(port=port))
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, daemon=True, name="llm-test-server")
        self._thread.start()
        ready.wait(10)
        return self

    def stop(self) -> None:
        if self._loop is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def anthropic_base(self) -> str:
        """An ``anthropic/`` model entry's api_base (litellm appends /v1/messages)."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def gemini_base(self) -> str:
        """A ``gemini/`` model entry's api_base (litellm appends /models/{model}:generateContent)."""
        return f"http://127.0.0.1:{self.port}/v1beta"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--port-file", type=Path)
    p.add_argument("--latency", type=float, default=0.0)
    p.add_argument("--error500", type=float, default=0.0)
    p.add_argument("--error429", type=float, default=0.0)
    p.add_argument("--timeout", type=float, default=0.0)
    p.add_argument("--malformed", type=float, default=0.0)
    p.add_argument("--max-inflight", type=int, default=0,
                   help="answer 429 to requests beyond this many in flight (0: no limit)")
    p.add_argument("--retry-after", type=float, default=0.05)
    args = p.parse_args()
    server = LLMServer(latency_s=args.latency, record=False, faults=Faults(
        error500=args.error500, error429=args.error429, timeout=args.timeout, malformed=args.malformed,
        max_inflight=args.max_inflight, retry_after_s=args.retry_after))

    async def run():
        port = await server.serve(port=args.port)
        if args.port_file:
            args.port_file.write_text(str(port))
        print(f"llm test server on http://127.0.0.1:{port}/v1", flush=True)
        await asyncio.Event().wait()

    try:
        asyncio.run(run())
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
