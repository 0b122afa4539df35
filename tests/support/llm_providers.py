"""Anthropic's and Gemini's APIs on the loopback server (``tests/support/llm_server.py``), live and
batch, for hermetic tests. Written from the providers' published references:

Anthropic (docs.anthropic.com / platform.claude.com, "Messages" and "Message Batches"):
  ``POST /v1/messages``; ``POST /v1/messages/batches`` with ``{"requests": [{custom_id,
  params}]}`` (at most 100,000 requests and 256 MB; custom_id ``^[a-zA-Z0-9_-]{1,64}$``, unique);
  ``GET /v1/messages/batches/{id}`` (``processing_status`` in_progress → canceling → ended,
  ``request_counts``, ``results_url`` once ended); ``POST …/{id}/cancel``; ``GET …/{id}/results``:
  JSONL, one ``{custom_id, result}`` per request, ``result.type`` succeeded (``message``),
  errored (``error``: an error response), canceled or expired, in any order.
Gemini API (ai.google.dev/api/batch-api, /gemini-api/docs/batch-mode):
  ``POST /v1beta/models/{model}:generateContent``; ``POST /v1beta/models/{model}:batchGenerateContent``
  with ``batch.input_config.requests.requests = [{request, metadata: {key}}]`` (inline: 20 MB
  per create request) → an Operation ``{name: "batches/…", metadata: {state: BATCH_STATE_*}}``;
  ``GET /v1beta/batches/{id}`` → the Operation, ``done`` and ``response.inlinedResponses
  .inlinedResponses = [{metadata: {key}, response | error}]`` (or ``response.responsesFile``,
  read at ``GET /download/v1beta/{file}:download?alt=media`` as JSONL ``{key, response |
  error}``) once it ends; ``POST /v1beta/batches/{id}:cancel``. An expired batch (48 h) has no
  results.

Each request is answered by the server's live chat handler (``LLMServer._answer``) on the
OpenAI-shaped body the provider request stands for, so a live call and a batch line of the
same request get the same answer. Batch faults are the server's ``batch_faults``
(tests/support/llm_batch.py ``BatchFaults``), shared with its OpenAI batch API; ``shuffle`` returns the
result lines in reverse order. Counts: ``counts[role]`` for live requests, ``batch_lines`` and
``batch_line:<role>`` for answered lines, ``counts["<METHOD> <route>"]`` per route.
"""

from __future__ import annotations

import datetime as dt
import json
import re

from aiohttp import web

from tests.support.llm_batch import BatchFaults

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


# ----- provider request -> the OpenAI body the server answers, and back ----------------------
def anthropic_body(params: dict) -> dict:
    messages = []
    if params.get("system"):
        messages.append({"role": "system", "content": _text(params["system"])})
    messages += [{"role": m["role"], "content": _text(m["content"])} for m in params.get("messages", [])]
    tool = next((t for t in params.get("tools") or [] if t.get("name") == JSON_TOOL), None)
    return {"model": params.get("model"), "messages": messages, "temperature": params.get("temperature"),
            **_schema_format(tool and tool.get("input_schema"))}


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

    # ----- live ------------------------------------------------------------------------------
    async def anthropic_live(self, request: web.Request) -> web.Response:
        params, role = await self.server._arrived(request)
        status, out = await self._openai(anthropic_body(params), role)
        if status != 200:
            return anthropic_error(status, "api_error" if status >= 500 else "rate_limit_error",
                                   str(out.get("error"))[:200])
        return web.json_response(anthropic_message(out, bool(params.get("tools")), None))

    async def gemini_models(self, request: web.Request) -> web.Response:
        model, _, method = request.match_info["tail"].partition(":")
        if method == "batchGenerateContent":
            return await self.gemini_create(request, model)
        if method != "generateContent":
            return gemini_error(404, "NOT_FOUND", f"no method {method}")
        req, role = await self.server._arrived(request)
        status, out = await self._openai(gemini_body(model, req), role)
        if status != 200:
            return gemini_error(status, "INTERNAL" if status >= 500 else "RESOURCE_EXHAUSTED",
                                str(out.get("error"))[:200])
        return web.json_response(gemini_response(out, None))

    # ----- batches: shared -----------------------------------------------------------------
    def _new(self, kind: str, role: str, lines: list[tuple[str, dict]], extra: dict) -> dict:
        f = self.server.batch_faults
        b = {"kind": kind, "role": role, "lines": lines, "state": "running", "polls": 0,
             "created": _now(), "ended": None, "cancelled": False, "results": None,
             # the faults in force when it was created, copied so a test may change them later
             "faults": BatchFaults(f.outcome, f.answered, set(f.fail_lines), f.delay_polls,
                                   f.cached_tokens, lose_results=f.lose_results,
                                   shuffle=f.shuffle, as_file=f.as_file), **extra}
        self.batches[b["id"]] = b
        return b

    def _poll_fault(self) -> bool:
        f = self.server.batch_faults
        if f.poll_errors > 0:
            f.poll_errors -= 1
            return True
        return False

    async def _advance(self, b: dict) -> None:
        """One poll: a running batch ends after ``delay_polls`` polls (or at once if cancelled)."""
        if b["state"] != "running":
            return
        b["polls"] += 1
        if b["cancelled"] or b["polls"] > b["faults"].delay_polls:
            outcome = "cancelled" if b["cancelled"] else b["faults"].outcome
            await self._finish(b, outcome)

    async def _finish(self, b: dict, outcome: str) -> None:
        """Answer the lines the outcome allows: ``[(id, "ok", provider answer) | (id, "error",
        (status, message)) | (id, "canceled" | "expired", None)]``."""
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
            if i in f.fail_lines:
                out.append((cid, "error", (500, "injected batch line failure")))
                continue
            self.server.counts["batch_lines"] += 1
            self.server.counts[f"batch_line:{b['role']}"] += 1
            body = anthropic_body(req) if b["kind"] == "anthropic" else gemini_body(b["model"], req)
            status, res = await self._openai(body, b["role"])
            if status != 200:
                out.append((cid, "error", (status, str(res.get("error"))[:200])))
            elif b["kind"] == "anthropic":
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
        return {"id": b["id"], "type": "message_batch", "processing_status": status,
                "request_counts": counts, "ended_at": b["ended"], "created_at": b["created"],
                "expires_at": b["created"], "archived_at": None,
                "cancel_initiated_at": b["created"] if b["cancelled"] else None,
                "results_url": f"{base}/v1/messages/batches/{b['id']}/results" if ended else None}

    async def anthropic_create(self, request: web.Request) -> web.Response:
        self._count("POST /v1/messages/batches", request)
        raw = await request.read()
        if self.server.batch_faults.reject:
            return anthropic_error(400, "invalid_request_error", "injected: batch refused")
        if len(raw) > 256 * 2**20:
            return anthropic_error(413, "request_too_large", "batch over 256 MB")
        reqs = json.loads(raw).get("requests") or []
        ids = [r.get("custom_id", "") for r in reqs]
        if not reqs or len(reqs) > 100_000 or len(set(ids)) != len(ids) \
                or not all(_CUSTOM_ID.match(i) for i in ids):
            return anthropic_error(400, "invalid_request_error", "invalid requests")
        self.submitted.append(json.loads(raw))
        b = self._new("anthropic", request.headers.get("x-carryon-role", ""),
                      [(r["custom_id"], r["params"]) for r in reqs], {"id": self._id("msgbatch_")})
        return web.json_response(self._anthropic_obj(b, request))

    async def anthropic_get(self, request: web.Request) -> web.Response:
        self._count("GET /v1/messages/batches")
        if self._poll_fault():
            return anthropic_error(529, "overloaded_error", "injected: overloaded")
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
        b = self.batches.get(request.match_info["bid"])
        if b is None or b["results"] is None or b["faults"].lose_results:
            return anthropic_error(404, "not_found_error", "no results")
        rows = []
        for cid, kind, value in b["results"]:
            if kind == "ok":
                result = {"type": "succeeded", "message": value}
            elif kind == "error":
                result = {"type": "errored", "error": {"type": "error", "error": {
                    "type": "api_error", "message": value[1]}}}
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
        if b["results"] is None:
            return op
        op["done"] = True
        items = []
        for cid, kind, value in b["results"]:
            if kind == "ok":
                items.append({"metadata": {"key": cid}, "response": value})
            elif kind == "error":
                items.append({"metadata": {"key": cid}, "error": {"code": value[0], "message": value[1],
                                                                   "status": "INTERNAL"}})
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
        if self.server.batch_faults.reject:
            return gemini_error(429, "RESOURCE_EXHAUSTED", "injected: batch refused")
        if len(raw) > 20 * 2**20:
            return gemini_error(400, "INVALID_ARGUMENT", "inline requests over 20 MB")
        batch = json.loads(raw).get("batch") or {}
        reqs = (((batch.get("input_config") or {}).get("requests") or {}).get("requests")) or []
        if not reqs:
            return gemini_error(400, "INVALID_ARGUMENT", "no requests")
        self.submitted.append(json.loads(raw))
        name = batch.get("display_name") or ""
        b = self._new("gemini", name.removeprefix("carryon-"),
                      [((r.get("metadata") or {}).get("key"), r["request"]) for r in reqs],
                      {"id": self._id("b"), "model": model, "display_name": name})
        return web.json_response(self._gemini_op(b))

    async def gemini_batches(self, request: web.Request) -> web.Response:
        bid, _, method = request.match_info["tail"].partition(":")
        b = self.batches.get(bid)
        if request.method == "POST" and method == "cancel":
            self._count("POST /v1beta/batches/cancel")
            if b is None:
                return gemini_error(404, "NOT_FOUND", "no such batch")
            b["cancelled"] = b["results"] is None
            return web.json_response({})
        self._count("GET /v1beta/batches")
        if self._poll_fault():
            return gemini_error(503, "UNAVAILABLE", "injected: unavailable")
        if b is None:
            return gemini_error(404, "NOT_FOUND", "no such batch")
        await self._advance(b)
        return web.json_response(self._gemini_op(b))

    async def gemini_download(self, request: web.Request) -> web.Response:
        self._count("GET /download/v1beta/files")
        fid = "files/" + request.match_info["tail"].partition(":")[0]
        if fid not in self.files:
            return gemini_error(404, "NOT_FOUND", "no such file")
        return web.Response(body=self.files[fid], content_type="application/octet-stream")

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/messages", self.anthropic_live)
        app.router.add_post("/v1/messages/batches", self.anthropic_create)
        app.router.add_get("/v1/messages/batches/{bid}", self.anthropic_get)
        app.router.add_post("/v1/messages/batches/{bid}/cancel", self.anthropic_cancel)
        app.router.add_get("/v1/messages/batches/{bid}/results", self.anthropic_results)
        app.router.add_post("/v1beta/models/{tail}", self.gemini_models)
        app.router.add_route("*", "/v1beta/batches/{tail}", self.gemini_batches)
        app.router.add_get("/download/v1beta/files/{tail}", self.gemini_download)
