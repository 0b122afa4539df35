"""Anthropic's and Gemini's APIs on the loopback server (``tests/support/llm_server.py``), live and
batch, for hermetic tests, as strict as the providers. Sources (docs/batch.md lists each
behaviour with its own):

Anthropic (platform.claude.com "Messages", "Message Batches", "Structured outputs",
"Extended thinking"; anthropic-sdk-python ``types/messages/batch_create_params.py``,
``message_batch.py``, ``batch_list_params.py``, ``types/beta/message_create_params.py``):
  ``POST /v1/messages``; ``POST /v1/messages/batches`` with ``{"requests": [{custom_id,
  params}]}`` and the betas of every request in its ``anthropic-beta`` header (at most 100,000
  requests and 256 MB; custom_id ``^[a-zA-Z0-9_-]{1,64}$``, unique; a full processing queue is
  429 ``rate_limit_error``); ``GET /v1/messages/batches`` (``limit``, ``after_id``: newest
  first); ``GET /v1/messages/batches/{id}`` (``processing_status`` in_progress → canceling →
  ended, ``request_counts``, ``results_url`` once ended); ``POST …/{id}/cancel``; ``GET
  …/{id}/results``: JSONL, one ``{custom_id, result}`` per request, ``result.type`` succeeded
  (``message``), errored (``error``: an error response, e.g. a request the Messages API
  refuses), canceled or expired, in any order. A request is refused (400
  ``invalid_request_error``; in a batch, an errored result) for a parameter the Messages API
  does not know, ``output_format`` without a ``structured-outputs-*`` beta, no ``max_tokens``,
  or thinking with a temperature other than 1 or a budget not below ``max_tokens``.
Gemini API (ai.google.dev/api/batch-api, /gemini-api/docs/batch-mode, /gemini-api/docs/thinking;
python-genai ``batches.py``, ``_transformers.py``):
  ``POST /{v}/models/{model}:generateContent`` and ``…:batchGenerateContent`` (``v`` is v1beta
  or v1alpha) with ``batch.inputConfig.requests.requests = [{request, metadata: {key}}]``
  (inline: 20 MB per create request; over the enqueued-token limit, 429 RESOURCE_EXHAUSTED)
  → an Operation ``{name: "batches/…", metadata: {state: BATCH_STATE_*, displayName}}``; ``GET
  /{v}/batches`` (``pageSize``, ``pageToken`` → ``operations``, ``nextPageToken``); ``GET
  /{v}/batches/{id}`` → the Operation, ``done`` and ``response.inlinedResponses
  .inlinedResponses = [{metadata: {key}, response | error}]`` (or ``response.responsesFile``,
  read at ``GET /download/{v}/{file}:download?alt=media`` as JSONL ``{key, response |
  error}``) once it ends; ``POST /{v}/batches/{id}:cancel``. An expired batch (48 h) has no
  results. A field the request's proto does not have is refused as the JSON payload is read
  (400 INVALID_ARGUMENT, the whole create for an inline request); a thinking level on a
  model before Gemini 3, or a level with a budget, is refused per request.

Each request is answered by the server's live chat handler (``LLMServer._answer``) on the
OpenAI-shaped body the provider request stands for, so a live call and a batch line of the
same request get the same answer; each charged answer is entered in ``server.ledger``
(tests/support/llm_batch.py ``bill``). Batch faults are the server's ``batch_faults``
(tests/support/llm_batch.py ``BatchFaults``), shared with its OpenAI batch API. Counts:
``counts[role]`` for live requests, ``batch_lines`` and ``batch_line:<role>`` for answered
lines, ``counts["<METHOD> <route>"]`` per route.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import re

from aiohttp import web

from tests.support.llm_batch import BatchFaults, bill, redirect_to, take

_CUSTOM_ID = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
JSON_TOOL = "json_tool_call"  # the tool litellm's Anthropic adapter asks for structured output


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat().replace("+00:00", "Z")


def _text(content) -> str:
    if isinstance(content, str):
        return content
    return "".join(p.get("text", "") for p in content or [] if isinstance(p, dict))


def _schema_format(schema: dict | None) -> dict:
    return {"response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": schema}}} \
        if schema else {}


# ----- what the providers refuse -------------------------------------------------------------
# The Messages API's parameters (anthropic-sdk-python types/message_create_params.py and its beta
# twin); a beta-only one needs its beta.
_ANTHROPIC_PARAMS = frozenset({
    "model", "messages", "max_tokens", "system", "temperature", "top_p", "top_k", "stop_sequences",
    "stream", "metadata", "tools", "tool_choice", "thinking", "service_tier", "output_config",
    "container", "cache_control", "inference_geo", "output_format", "mcp_servers",
    "context_management", "speed"})


def anthropic_refusal(params: dict, betas: set[str]) -> str | None:
    """Why the Messages API refuses this request (400 invalid_request_error), or None."""
    extra = sorted(set(params) - _ANTHROPIC_PARAMS)
    if extra:
        return f"{extra[0]}: Extra inputs are not permitted"
    if not isinstance(params.get("max_tokens"), int) or params["max_tokens"] < 1:
        return "max_tokens: Field required (at least 1)"
    if "output_format" in params and not any(b.startswith("structured-outputs-") for b in betas):
        return "output_format: Extra inputs are not permitted (it needs the structured-outputs beta)"
    thinking = params.get("thinking") or {}
    if thinking.get("type") == "enabled":
        if params.get("temperature") not in (None, 1, 1.0):
            return "temperature may only be set to 1 when thinking is enabled"
        if thinking.get("budget_tokens", 0) >= params["max_tokens"]:
            return "max_tokens must be greater than thinking.budget_tokens"
    return None


def _fields(*names: str) -> frozenset:
    """Proto field names as JSON accepts them: lowerCamelCase and snake_case."""
    out = set()
    for n in names:
        out.add(n)
        out.add(re.sub(r"[A-Z]", lambda m: "_" + m.group(0).lower(), n))
    return frozenset(out)


# GenerateContentRequest and GenerationConfig (ai.google.dev/api/generate-content).
_GEMINI_REQUEST = _fields("contents", "systemInstruction", "generationConfig", "safetySettings",
                          "tools", "toolConfig", "cachedContent", "labels")
_GEMINI_GENERATION = _fields(
    "temperature", "topP", "topK", "candidateCount", "maxOutputTokens", "stopSequences",
    "responseMimeType", "responseSchema", "responseJsonSchema", "_responseJsonSchema", "seed",
    "presencePenalty", "frequencyPenalty", "responseLogprobs", "logprobs", "thinkingConfig",
    "responseModalities", "mediaResolution", "speechConfig", "enableEnhancedCivicAnswers",
    "imageConfig")
_GEMINI_THINKING = _fields("thinkingBudget", "includeThoughts", "thinkingLevel")


def gemini_unknown_field(req: dict) -> str | None:
    """The message of a proto JSON parse failure for a field the request cannot have."""
    for name in req:
        if name not in _GEMINI_REQUEST:
            return f'Invalid JSON payload received. Unknown name "{name}": Cannot find field.'
    gen = req.get("generationConfig") or req.get("generation_config") or {}
    for name in gen:
        if name not in _GEMINI_GENERATION:
            return (f'Invalid JSON payload received. Unknown name "{name}" at '
                    "'generation_config': Cannot find field.")
    thinking = gen.get("thinkingConfig") or gen.get("thinking_config") or {}
    for name in thinking:
        if name not in _GEMINI_THINKING:
            return (f'Invalid JSON payload received. Unknown name "{name}" at '
                    "'generation_config.thinking_config': Cannot find field.")
    return None


def gemini_refusal(model: str, req: dict) -> str | None:
    """Why generateContent refuses this request (400 INVALID_ARGUMENT), or None."""
    unknown = gemini_unknown_field(req)
    if unknown:
        return unknown
    gen = req.get("generationConfig") or req.get("generation_config") or {}
    thinking = gen.get("thinkingConfig") or gen.get("thinking_config") or {}
    level = thinking.get("thinkingLevel") or thinking.get("thinking_level")
    budget = thinking.get("thinkingBudget", thinking.get("thinking_budget"))
    if level is not None and not model.startswith("gemini-3"):
        return f"Thinking level is not supported for {model}."
    if level is not None and budget is not None:
        return "Only one of thinking_level and thinking_budget may be set."
    return None


# ----- provider request -> the OpenAI body the server answers, and back ----------------------
def anthropic_body(params: dict) -> dict:
    messages = []
    if params.get("system"):
        messages.append({"role": "system", "content": _text(params["system"])})
    messages += [{"role": m["role"], "content": _text(m["content"])} for m in params.get("messages", [])]
    tool = next((t for t in params.get("tools") or [] if t.get("name") == JSON_TOOL), None)
    schema = (tool and tool.get("input_schema")) or (params.get("output_format") or {}).get("schema")
    return {"model": params.get("model"), "messages": messages, "temperature": params.get("temperature"),
            **_schema_format(schema)}


def gemini_body(model: str, req: dict) -> dict:
    messages = []
    system = req.get("system_instruction") or req.get("systemInstruction")
    if system:
        messages.append({"role": "system", "content": _text(system.get("parts"))})
    messages += [{"role": "assistant" if c.get("role") == "model" else "user",
                  "content": _text(c.get("parts"))} for c in req.get("contents", [])]
    gen = req.get("generationConfig") or req.get("generation_config") or {}
    schema = gen.get("response_json_schema") or gen.get("responseJsonSchema") or gen.get("response_schema")
    return {"model": model, "messages": messages, "temperature": gen.get("temperature"),
            **_schema_format(schema)}


def anthropic_message(openai: dict, structured: bool, cached: int | None) -> dict:
    choice, usage = openai["choices"][0], openai["usage"]
    text = choice["message"]["content"]
    stop = {"stop": "end_turn", "length": "max_tokens", "content_filter": "refusal"}.get(
        choice["finish_reason"], "end_turn")
    content = [{"type": "text", "text": text}] if text else []
    if structured and text:
        try:
            content = [{"type": "tool_use", "id": "toolu_1", "name": JSON_TOOL, "input": json.loads(text)}]
            stop = "tool_use"
        except ValueError:
            pass  # not JSON: a text block, as a model that ignored the tool would answer
    u = {"input_tokens": usage["prompt_tokens"] - (cached or 0), "output_tokens": usage["completion_tokens"],
         "cache_creation_input_tokens": 0, "cache_read_input_tokens": cached or 0}
    return {"id": f"msg_{openai['id']}", "type": "message", "role": "assistant",
            "model": openai["model"], "content": content, "stop_reason": stop,
            "stop_sequence": None, "usage": u}


def gemini_response(openai: dict, cached: int | None) -> dict:
    choice, usage = openai["choices"][0], openai["usage"]
    finish = {"stop": "STOP", "length": "MAX_TOKENS", "content_filter": "SAFETY"}.get(
        choice["finish_reason"], "STOP")
    text = choice["message"]["content"]
    cand = {"index": 0, "finishReason": finish,
            "content": {"role": "model", "parts": [{"text": text}] if text else []}}
    meta = {"promptTokenCount": usage["prompt_tokens"], "candidatesTokenCount": usage["completion_tokens"],
            "totalTokenCount": usage["total_tokens"]}
    if cached:
        meta["cachedContentTokenCount"] = cached
    return {"candidates": [cand], "usageMetadata": meta, "modelVersion": openai["model"]}


def anthropic_error(status: int, kind: str, message: str) -> web.Response:
    return web.json_response({"type": "error", "error": {"type": kind, "message": message}}, status=status)


def gemini_error(status: int, code: str, message: str) -> web.Response:
    return web.json_response({"error": {"code": status, "message": message, "status": code}}, status=status)


class ProviderAPIs:
    """Anthropic's and Gemini's live and batch endpoints on the loopback server."""

    def __init__(self, server):
        self.server = server
        self.batches: dict[str, dict] = {}
        self.files: dict[str, bytes] = {}
        self.submitted: list[dict] = []  # every create request's body, for tests to read
        self.keys_seen: set[str] = set()  # API keys the batch requests carried (headers)
        self._n = 0

    def _id(self, prefix: str) -> str:
        self._n += 1
        return f"{prefix}{self._n:04d}"

    def _count(self, route: str, request: web.Request | None = None) -> None:
        self.server.counts["total"] += 1
        self.server.counts[route] += 1
        if request is not None:
            self.keys_seen |= {request.headers[h] for h in ("x-api-key", "x-goog-api-key")
                               if h in request.headers}

    async def _openai(self, body: dict, role: str) -> tuple[int, dict]:
        resp = await self.server._answer(body, role, "chat")
        raw = resp.body.decode() if isinstance(resp.body, bytes) else resp.text
        return resp.status, json.loads(raw)

    @staticmethod
    def _betas(request: web.Request) -> set[str]:
        return {b.strip() for b in request.headers.get("anthropic-beta", "").split(",") if b.strip()}

    # ----- live ------------------------------------------------------------------------------
    async def anthropic_live(self, request: web.Request) -> web.Response:
        params, role = await self.server._arrived(request)
        refused = anthropic_refusal(params, self._betas(request))
        if refused:
            self.server.counts["refused"] += 1
            return anthropic_error(400, "invalid_request_error", refused)
        body = anthropic_body(params)
        status, out = await self._openai(body, role)
        if status != 200:
            return anthropic_error(status, "api_error" if status >= 500 else "rate_limit_error",
                                   str(out.get("error"))[:200])
        bill(self.server, "anthropic", "live", body, out)
        return web.json_response(anthropic_message(out, bool(params.get("tools")), None))

    async def gemini_models(self, request: web.Request) -> web.Response:
        model, _, method = request.match_info["tail"].partition(":")
        if method == "batchGenerateContent":
            return await self.gemini_create(request, model)
        if method != "generateContent":
            return gemini_error(404, "NOT_FOUND", f"no method {method}")
        req, role = await self.server._arrived(request)
        refused = gemini_refusal(model, req)
        if refused:
            self.server.counts["refused"] += 1
            return gemini_error(400, "INVALID_ARGUMENT", refused)
        body = gemini_body(model, req)
        status, out = await self._openai(body, role)
        if status != 200:
            return gemini_error(status, "INTERNAL" if status >= 500 else "RESOURCE_EXHAUSTED",
                                str(out.get("error"))[:200])
        bill(self.server, "gemini", "live", body, out)
        return web.json_response(gemini_response(out, None))

    # ----- batches: shared -----------------------------------------------------------------
    def _new(self, kind: str, role: str, lines: list[tuple[str, dict]], extra: dict) -> dict:
        b = {"kind": kind, "role": role, "lines": lines, "state": "running", "polls": 0,
             "created": _now(), "ended": None, "cancelled": False, "results": None, "late": 0,
             # the faults in force when it was created, copied so a test may change them later
             "faults": self.server.batch_faults.snapshot(), **extra}
        self.batches[b["id"]] = b
        return b

    def _newest_first(self, kind: str) -> list[dict]:
        return [b for _, b in sorted(((b["id"], b) for b in self.batches.values()
                                      if b["kind"] == kind), key=lambda x: x[0], reverse=True)]

    def _refused(self, raw: bytes, cap: int, error, answers: dict) -> web.Response | None:
        """A create refused before it is read: for good (the ``reject`` fault), for a full
        queue (``queue_full``) or for its size; ``answers``: each one's (status, kind, text)."""
        f = self.server.batch_faults
        why = ("reject" if f.reject else "queue" if take(f, "queue_full")
               else "size" if len(raw) > cap else None)
        return error(*answers[why]) if why else None

    async def _accepted(self) -> None:
        """A create that times out after it was accepted: answered too late to be read."""
        f = self.server.batch_faults
        if take(f, "create_timeouts"):
            await asyncio.sleep(f.create_delay_s)

    async def _advance(self, b: dict) -> None:
        """One poll: a running batch ends after ``delay_polls`` polls (or at once if cancelled);
        an ended one may show its results only ``results_late`` polls later."""
        if b["state"] != "running":
            if b["late"] > 0:
                b["late"] -= 1
            return
        b["polls"] += 1
        if b["cancelled"] or b["polls"] > b["faults"].delay_polls:
            outcome = "cancelled" if b["cancelled"] else b["faults"].outcome
            await self._finish(b, outcome)
            b["late"] = b["faults"].results_late

    async def _finish(self, b: dict, outcome: str) -> None:
        """Answer the lines the outcome allows: ``[(id, "ok", provider answer) | (id, "error",
        (status, message)) | (id, "canceled" | "expired", None)]``; each answer is billed."""
        f: BatchFaults = b["faults"]
        n = len(b["lines"])
        if outcome != "completed":
            n = f.answered if f.answered is not None else n // 2
            if b["cancelled"] and f.answered is None:
                n = 0  # nothing more gets answered once asked to stop
        out = []
        for i, (cid, req) in enumerate(b["lines"]):
            if i >= n:
                out.append((cid, "expired" if outcome == "expired" else "canceled", None))
                continue
            refused = (anthropic_refusal(req, b["betas"]) if b["kind"] == "anthropic"
                       else gemini_refusal(b["model"], req))
            if refused:  # refused as the live API would: not billed
                out.append((cid, "error", (400, refused)))
                continue
            if i in f.fail_lines:
                out.append((cid, "error", (500, "injected batch line failure")))
                continue
            self.server.counts["batch_lines"] += 1
            self.server.counts[f"batch_line:{b['role']}"] += 1
            body = anthropic_body(req) if b["kind"] == "anthropic" else gemini_body(b["model"], req)
            status, res = await self._openai(body, b["role"])
            if status != 200:
                out.append((cid, "error", (status, str(res.get("error"))[:200])))
                continue
            if f.cached_tokens is not None:
                res["usage"]["prompt_tokens_details"] = {"cached_tokens": f.cached_tokens}
            bill(self.server, b["kind"], "batch", body, res, b["id"])
            if b["kind"] == "anthropic":
                out.append((cid, "ok", anthropic_message(res, bool(req.get("tools")), f.cached_tokens)))
            else:
                out.append((cid, "ok", gemini_response(res, f.cached_tokens)))
        if f.shuffle:
            out.reverse()
        # a batch is cancelled through the cancel call, which stamps cancel_initiated_at
        b.update(state=outcome, ended=_now(), results=out,
                 cancelled=b["cancelled"] or outcome == "cancelled")

    # ----- Anthropic Message Batches ---------------------------------------------------------
    def _anthropic_obj(self, b: dict, request: web.Request) -> dict:
        counts = {"processing": 0, "succeeded": 0, "errored": 0, "canceled": 0, "expired": 0}
        if b["results"] is None:
            counts["processing"] = len(b["lines"])
        else:
            for _, kind, _ in b["results"]:
                counts[{"ok": "succeeded", "error": "errored"}.get(kind, kind)] += 1
        ended = b["results"] is not None
        status = "ended" if ended else ("canceling" if b["cancelled"] else "in_progress")
        base = f"{request.scheme}://{request.host}"
        ready = ended and b["late"] == 0
        return {"id": b["id"], "type": "message_batch", "processing_status": status,
                "request_counts": counts, "ended_at": b["ended"], "created_at": b["created"],
                "expires_at": b["created"], "archived_at": None,
                "cancel_initiated_at": b["created"] if b["cancelled"] else None,
                "results_url": f"{base}/v1/messages/batches/{b['id']}/results" if ready else None}

    async def anthropic_create(self, request: web.Request) -> web.Response:
        self._count("POST /v1/messages/batches", request)
        raw = await request.read()
        refused = self._refused(raw, 256 * 2**20, anthropic_error, {
            "reject": (400, "invalid_request_error", "injected: batch refused"),
            "queue": (429, "rate_limit_error", "Number of batch requests in the processing "
                                               "queue exceeds your organization's limit."),
            "size": (413, "request_too_large", "batch over 256 MB")})
        if refused is not None:
            return refused
        reqs = json.loads(raw).get("requests") or []
        ids = [r.get("custom_id", "") for r in reqs]
        if not reqs or len(reqs) > 100_000 or len(set(ids)) != len(ids) \
                or not all(_CUSTOM_ID.match(i) for i in ids) \
                or not all(isinstance(r.get("params"), dict) for r in reqs):
            return anthropic_error(400, "invalid_request_error", "invalid requests")
        self.submitted.append(json.loads(raw))
        b = self._new("anthropic", request.headers.get("x-carryon-role", ""),
                      [(r["custom_id"], r["params"]) for r in reqs],
                      {"id": self._id("msgbatch_"), "betas": self._betas(request)})
        await self._accepted()
        return web.json_response(self._anthropic_obj(b, request))

    async def anthropic_list(self, request: web.Request) -> web.Response:
        self._count("GET /v1/messages/batches/list")
        limit = min(int(request.query.get("limit", 20)), 1000)
        rows = self._newest_first("anthropic")
        after = request.query.get("after_id")
        ids = [b["id"] for b in rows]
        if after in ids:
            rows = rows[ids.index(after) + 1:]
        page = rows[:limit]
        return web.json_response({"data": [self._anthropic_obj(b, request) for b in page],
                                  "has_more": len(rows) > limit,
                                  "first_id": page[0]["id"] if page else None,
                                  "last_id": page[-1]["id"] if page else None})

    async def anthropic_get(self, request: web.Request) -> web.Response:
        self._count("GET /v1/messages/batches")
        f = self.server.batch_faults
        if take(f, "poll_errors"):
            return anthropic_error(529, "overloaded_error", "injected: overloaded")
        if take(f, "poll_not_found"):
            return anthropic_error(404, "not_found_error", "no such batch")
        b = self.batches.get(request.match_info["bid"])
        if b is None:
            return anthropic_error(404, "not_found_error", "no such batch")
        await self._advance(b)
        return web.json_response(self._anthropic_obj(b, request))

    async def anthropic_cancel(self, request: web.Request) -> web.Response:
        self._count("POST /v1/messages/batches/cancel")
        b = self.batches.get(request.match_info["bid"])
        if b is None:
            return anthropic_error(404, "not_found_error", "no such batch")
        b["cancelled"] = b["results"] is None
        return web.json_response(self._anthropic_obj(b, request))

    async def anthropic_results(self, request: web.Request) -> web.Response:
        self._count("GET /v1/messages/batches/results")
        bid = request.match_info["bid"]
        b = self.batches.get(bid)
        if b is None or b["results"] is None or b["faults"].lose_results:
            return anthropic_error(404, "not_found_error", "no results")
        if take(self.server.batch_faults, "results_errors"):
            return anthropic_error(500, "api_error", "injected: results unavailable")
        if b["faults"].redirect and request.host.startswith("127.0.0.1"):
            redirect_to(request, f"/_redirected/anthropic/{bid}")
        return self._anthropic_jsonl(b)

    async def anthropic_redirected(self, request: web.Request) -> web.Response:
        self._count("GET /_redirected")
        self.server.redirect_keys |= {request.headers[h] for h in ("x-api-key", "authorization")
                                      if h in request.headers}
        return self._anthropic_jsonl(self.batches[request.match_info["bid"]])

    @staticmethod
    def _anthropic_jsonl(b: dict) -> web.Response:
        rows = []
        for cid, kind, value in b["results"]:
            if kind == "ok":
                result = {"type": "succeeded", "message": value}
            elif kind == "error":
                etype = "invalid_request_error" if value[0] == 400 else "api_error"
                result = {"type": "errored", "error": {"type": "error", "error": {
                    "type": etype, "message": value[1]}}}
            else:
                result = {"type": kind}
            rows.append(json.dumps({"custom_id": cid, "result": result}))
        return web.Response(body="\n".join(rows).encode() + b"\n", content_type="application/binary")

    # ----- Gemini batch mode ---------------------------------------------------------------
    def _gemini_op(self, b: dict) -> dict:
        state = {"running": "BATCH_STATE_RUNNING", "completed": "BATCH_STATE_SUCCEEDED",
                 "expired": "BATCH_STATE_EXPIRED", "cancelled": "BATCH_STATE_CANCELLED"}[b["state"]]
        op = {"name": f"batches/{b['id']}", "metadata": {
            "@type": "type.googleapis.com/google.ai.generativelanguage.v1main.GenerateContentBatch",
            "model": f"models/{b['model']}", "displayName": b["display_name"], "state": state,
            "createTime": b["created"], "batchStats": {"requestCount": str(len(b["lines"]))}}}
        if b["results"] is None or b["late"] > 0:
            return op  # running, or SUCCEEDED before its results are attached
        op["done"] = True
        items = []
        for cid, kind, value in b["results"]:
            if kind == "ok":
                items.append({"metadata": {"key": cid}, "response": value})
            elif kind == "error":
                items.append({"metadata": {"key": cid}, "error": {
                    "code": value[0], "message": value[1],
                    "status": "INVALID_ARGUMENT" if value[0] == 400 else "INTERNAL"}})
            # canceled / expired lines have no entry
        if b["state"] == "expired":
            items = []  # an expired batch has no results to retrieve
        out = {"@type": "type.googleapis.com/google.ai.generativelanguage.v1main.GenerateContentBatchOutput"}
        if b["faults"].as_file or b["faults"].lose_results:
            fid = f"files/{b['id']}-out"
            if not b["faults"].lose_results:
                self.files[fid] = "".join(json.dumps({"key": x["metadata"]["key"],
                                                      **{k: v for k, v in x.items() if k != "metadata"}})
                                          + "\n" for x in items).encode()
            out["responsesFile"] = fid
        else:
            out["inlinedResponses"] = {"inlinedResponses": items}
        op["response"] = out
        return op

    async def gemini_create(self, request: web.Request, model: str) -> web.Response:
        self._count("POST /v1beta/batchGenerateContent", request)
        raw = await request.read()
        refused = self._refused(raw, 20 * 2**20, gemini_error, {
            "reject": (400, "INVALID_ARGUMENT", "injected: batch refused"),
            "queue": (429, "RESOURCE_EXHAUSTED", "Enqueued tokens exceed the batch limit for "
                                                 "this model; try again once running batches finish."),
            "size": (400, "INVALID_ARGUMENT", "inline requests over 20 MB")})
        if refused is not None:
            return refused
        batch = json.loads(raw).get("batch") or {}
        config = batch.get("inputConfig") or batch.get("input_config") or {}
        reqs = ((config.get("requests") or {}).get("requests")) or []
        if not reqs:
            return gemini_error(400, "INVALID_ARGUMENT", "no requests")
        for r in reqs:  # the create's own JSON payload: an unknown field fails all of it
            unknown = gemini_unknown_field(r.get("request") or {})
            if unknown:
                return gemini_error(400, "INVALID_ARGUMENT", unknown)
        self.submitted.append(json.loads(raw))
        name = batch.get("displayName") or batch.get("display_name") or ""
        b = self._new("gemini", name.split(" ")[1] if name.count(" ") == 2 else "",
                      [((r.get("metadata") or {}).get("key"), r["request"]) for r in reqs],
                      {"id": self._id("b"), "model": model, "display_name": name})
        await self._accepted()
        return web.json_response(self._gemini_op(b))

    async def gemini_batches(self, request: web.Request) -> web.Response:
        tail = request.match_info.get("tail", "")
        if request.method == "GET" and not tail:  # the list
            self._count("GET /v1beta/batches/list")
            size = min(int(request.query.get("pageSize", 50)), 1000)
            rows = self._newest_first("gemini")
            start = int(request.query.get("pageToken") or 0)
            page = rows[start:start + size]
            more = start + size < len(rows)
            return web.json_response({"operations": [self._gemini_op(b) for b in page],
                                      **({"nextPageToken": str(start + size)} if more else {})})
        bid, _, method = tail.partition(":")
        b = self.batches.get(bid)
        if request.method == "POST" and method == "cancel":
            self._count("POST /v1beta/batches/cancel")
            if b is None:
                return gemini_error(404, "NOT_FOUND", "no such batch")
            b["cancelled"] = b["results"] is None
            return web.json_response({})
        self._count("GET /v1beta/batches")
        f = self.server.batch_faults
        if take(f, "poll_errors"):
            return gemini_error(503, "UNAVAILABLE", "injected: unavailable")
        if take(f, "poll_not_found"):
            return gemini_error(404, "NOT_FOUND", "no such batch")
        if b is None:
            return gemini_error(404, "NOT_FOUND", "no such batch")
        await self._advance(b)
        return web.json_response(self._gemini_op(b))

    async def gemini_download(self, request: web.Request) -> web.Response:
        self._count("GET /download/v1beta/files")
        name = request.match_info["tail"].partition(":")[0]
        fid = "files/" + name
        if fid not in self.files:
            return gemini_error(404, "NOT_FOUND", "no such file")
        if take(self.server.batch_faults, "results_errors"):
            return gemini_error(500, "INTERNAL", "injected: download failed")
        b = self.batches.get(name.removesuffix("-out"))
        if b is not None and b["faults"].redirect and request.host.startswith("127.0.0.1"):
            redirect_to(request, f"/_redirected/gemini/{name}")
        return web.Response(body=self.files[fid], content_type="application/octet-stream")

    async def gemini_redirected(self, request: web.Request) -> web.Response:
        self._count("GET /_redirected")
        self.server.redirect_keys |= {request.headers[h] for h in ("x-goog-api-key", "authorization")
                                      if h in request.headers}
        return web.Response(body=self.files["files/" + request.match_info["name"]],
                            content_type="application/octet-stream")

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/messages", self.anthropic_live)
        app.router.add_post("/v1/messages/batches", self.anthropic_create)
        app.router.add_get("/v1/messages/batches", self.anthropic_list)
        app.router.add_get("/v1/messages/batches/{bid}", self.anthropic_get)
        app.router.add_post("/v1/messages/batches/{bid}/cancel", self.anthropic_cancel)
        app.router.add_get("/v1/messages/batches/{bid}/results", self.anthropic_results)
        app.router.add_get("/_redirected/anthropic/{bid}", self.anthropic_redirected)
        for v in ("v1beta", "v1alpha"):
            app.router.add_post(f"/{v}/models/{{tail}}", self.gemini_models)
            app.router.add_get(f"/{v}/batches", self.gemini_batches)
            app.router.add_route("*", f"/{v}/batches/{{tail}}", self.gemini_batches)
            app.router.add_get(f"/download/{v}/files/{{tail}}", self.gemini_download)
        app.router.add_get("/_redirected/gemini/{name}", self.gemini_redirected)
