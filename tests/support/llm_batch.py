"""The OpenAI batch API of the loopback server (``tests/support/llm_server.py``), for hermetic
tests, as strict as the provider; and what every batch fake shares: ``BatchFaults``, the
rules a request must pass (``openai_refusal``) and the ledger of billed lines (``bill``).

Routes, under ``/v1`` and without it, as the OpenAI SDK inside litellm calls them:
``POST /files`` (multipart: ``file``, ``purpose``), ``GET /files/{id}/content``, ``POST
/batches`` (JSON: ``input_file_id``, ``endpoint``, ``completion_window``, ``metadata``), ``GET
/batches`` (``limit``, ``after``: newest first), ``GET /batches/{id}``, ``POST
/batches/{id}/cancel``. Sources (docs/batch.md has the list): the SDK's types
(openai-python ``src/openai/types/batch.py``, ``batch_create_params.py``, ``batch_error.py``,
``batch_list_params.py``), OpenAI's batch guide (50,000 requests and 200 MB per file, one
model per file, each ``url`` the batch's endpoint, unique ``custom_id``s) and its reasoning
guide (``max_tokens`` refused by gpt-5.x and o-series: ``max_completion_tokens``; temperature
only 1 while reasoning is on).

Each line of a batch is answered by the server's live chat handler (``LLMServer._answer``)
with the same scripts and fault rolls, so a batch and a live run give the same answers, and
refused by the same rules a live request is (``openai_refusal``: an error-file line with the
400, billed nothing). The role a script is chosen by comes from the batch's
``metadata["carryon_role"]`` (live calls carry it in the ``x-carryon-role`` header).

Batch faults (``server.batch_faults``, see ``BatchFaults``) apply to batches created while
they are set, here and in the Anthropic and Gemini batch APIs (tests/support/llm_providers.py).
Every request counts in ``counts["total"]`` and in ``counts[route]`` (e.g. ``counts["POST
/v1/batches"]``); each answered line counts in ``counts["batch_lines"]`` and
``counts["batch_line:<role>"]`` (not in ``counts[role]``, which stays the live requests).

**The ledger.** ``server.ledger`` holds one entry per answer a provider would charge for: each
live answer, and each line a batch answered, once per batch that ran it (``bill``), priced at
``server.prices[model]`` (the entries' ``price:`` rates, by bare model name) under the
provider's rule for batch and cached tokens.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import re
import time
from dataclasses import dataclass, field

from aiohttp import web


@dataclass
class BatchFaults:
    # Final status: completed, expired (the window ran out) or cancelled (by someone else).
    outcome: str = "completed"
    # Under expired/cancelled: how many lines (in file order) were answered before it ended;
    # None = half of them, rounded down. The rest go to the error file (expired) or nowhere.
    answered: int | None = None
    # Indices (0-based, file order) of lines that fail inside the batch: error file, HTTP 500.
    fail_lines: set[int] = field(default_factory=set)
    # Polls (GET /batches/{id}) that still see in_progress before the batch ends.
    delay_polls: int = 1
    # prompt_tokens_details.cached_tokens reported on every answered line (None: not at all).
    cached_tokens: int | None = None
    # The create refused for good (OpenAI, Anthropic: HTTP 400; Gemini: 400 INVALID_ARGUMENT).
    reject: bool = False
    # The next this-many polls (any batch) answer a transient error (500, 529, 503).
    poll_errors: int = 0
    # The next this-many polls (any batch) answer 404: a permanent error.
    poll_not_found: int = 0
    # Output and error files cannot be downloaded (HTTP 404): results are lost.
    lose_results: bool = False
    # The next this-many results downloads (any batch) answer a transient HTTP 500.
    results_errors: int = 0
    # Result lines come back in reverse order of the request lines.
    shuffle: bool = False
    # Gemini only: results in a responses file instead of inline in the operation.
    as_file: bool = False
    # The next this-many creates are accepted (the batch runs and bills) but answered only
    # after create_delay_s, past the client's timeout: the client never learns the id.
    create_timeouts: int = 0
    create_delay_s: float = 3.0
    # The next this-many creates are refused for a queue or enqueued-token limit, as each
    # provider does: OpenAI accepts the create and fails the batch at validation with
    # errors.data[0].code "token_limit_exceeded"; Anthropic answers 429 rate_limit_error;
    # Gemini 429 RESOURCE_EXHAUSTED. Nothing runs, nothing is billed.
    queue_full: int = 0
    # Polls after a batch ended that still show it ended without its results attached
    # (Gemini: SUCCEEDED with no response; OpenAI: completed, no output file; Anthropic:
    # ended, no results_url).
    results_late: int = 0
    # Results downloads answer 307 to another origin (``localhost`` for ``127.0.0.1``), as a
    # signed download URL would; the target records any key header it is sent.
    redirect: bool = False

    def snapshot(self) -> "BatchFaults":
        """The faults a batch keeps from its create (a test may change the server's later)."""
        return dataclasses.replace(self, fail_lines=set(self.fail_lines))


def take(f: BatchFaults, name: str) -> bool:
    """Use one of a counted fault: True (and one fewer left) while any is left."""
    if getattr(f, name) > 0:
        setattr(f, name, getattr(f, name) - 1)
        return True
    return False


def _body(resp: web.Response) -> dict:
    return json.loads(resp.body.decode() if isinstance(resp.body, bytes) else resp.text)


# ----- what OpenAI refuses ----------------------------------------------------------------------
_REASONING = re.compile(r"^(o\d|gpt-5)")


def openai_refusal(body: dict) -> dict | None:
    """The 400 error body OpenAI answers this chat request with, or None. Reasoning models
    (gpt-5.x, o-series) refuse ``max_tokens`` (``max_completion_tokens`` instead) and, while
    reasoning is on, any temperature but 1; gpt-5, -mini and -nano reason at least minimally
    (effort ``none`` came with gpt-5.1)."""
    model = str(body.get("model", "")).rsplit("/", 1)[-1]
    if not _REASONING.match(model):
        return None

    def err(param, message, code):
        return {"error": {"message": message, "type": "invalid_request_error", "param": param,
                          "code": code}}

    if "max_tokens" in body:
        return err("max_tokens", "Unsupported parameter: 'max_tokens' is not supported with this "
                                 "model. Use 'max_completion_tokens' instead.", "unsupported_parameter")
    dotted = re.match(r"^gpt-5\.\d", model) is not None
    effort = body.get("reasoning_effort") or ("none" if dotted else "medium")
    if effort == "none" and not dotted:
        return err("reasoning_effort", f"Unsupported value: 'reasoning_effort' does not support "
                                       f"'none' with this model.", "unsupported_value")
    if effort != "none" and body.get("temperature") not in (None, 1, 1.0):
        return err("temperature", f"Unsupported value: 'temperature' does not support "
                                  f"{body['temperature']} with this model. Only the default (1) "
                                  "value is supported.", "unsupported_value")
    return None


# ----- the ledger ---------------------------------------------------------------------------------
def request_key(model: str, messages) -> str:
    """Which request an answer was for, whatever API carried it: the model and the messages of
    the OpenAI-shaped body the server answers."""
    return hashlib.sha256(json.dumps([str(model).rsplit("/", 1)[-1], messages],
                                     sort_keys=True).encode()).hexdigest()[:16]


def price(rates: dict | None, provider: str, mode: str, prompt: int, completion: int,
          cached: int) -> float | None:
    """What the provider charges for one answer (None: no rates given). Batch: OpenAI and
    Anthropic take the discount off every token, cached ones too (the discounts stack);
    Gemini bills cached prompt tokens at the live cached rate, the rest at the batch rate."""
    if rates is None:
        return None
    per = 1e-6
    cached = min(cached, prompt)
    c_rate = rates.get("cached_input_per_mtok")
    c_rate = rates["input_per_mtok"] if c_rate is None else c_rate
    fresh = (prompt - cached) * rates["input_per_mtok"] * per + completion * rates["output_per_mtok"] * per
    cache = cached * c_rate * per
    if mode == "live":
        return fresh + cache
    keep = 1 - (rates.get("batch_discount") if rates.get("batch_discount") is not None else 0.5)
    return fresh * keep + (cache if provider == "gemini" else cache * keep)


def bill(server, provider: str, mode: str, body: dict, answer: dict,
         batch_id: str | None = None) -> None:
    """Enter one charged answer (``answer``: the OpenAI-shaped response the server made)."""
    usage = answer.get("usage") or {}
    prompt, completion = usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0)
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    model = str(body.get("model", "")).rsplit("/", 1)[-1]
    server.ledger.append({
        "provider": provider, "mode": mode, "batch_id": batch_id, "model": model,
        "key": request_key(model, body.get("messages") or body.get("prompt")),
        "prompt_tokens": prompt, "completion_tokens": completion, "cached_tokens": cached,
        "cost": price(server.prices.get(model), provider, mode, prompt, completion, cached)})


def redirect_to(request: web.Request, path: str) -> web.Response:
    """307 to the same server under another origin (``localhost``), as a signed URL would."""
    port = request.url.port
    raise web.HTTPTemporaryRedirect(f"http://localhost:{port}{path}")


# ----- OpenAI's batch API -------------------------------------------------------------------------
_ENDPOINTS = ("/v1/responses", "/v1/chat/completions", "/v1/embeddings", "/v1/completions",
              "/v1/moderations")
MAX_LINES, MAX_FILE_BYTES = 50_000, 200 * 2**20


def _error(status: int, message: str, kind: str = "invalid_request_error", **extra) -> web.Response:
    return web.json_response({"error": {"message": message, "type": kind, **extra}}, status=status)


class BatchAPI:
    def __init__(self, server):
        self.server = server
        self.files: dict[str, dict] = {}  # id -> {"bytes", "purpose", "filename"}
        self.batches: dict[str, dict] = {}
        self._n = 0

    def _id(self, prefix: str) -> str:
        self._n += 1
        return f"{prefix}-{self._n:04d}"

    def _count(self, route: str) -> None:
        self.server.counts["total"] += 1
        self.server.counts[route] += 1

    # ----- files -------------------------------------------------------------------------------
    async def create_file(self, request: web.Request) -> web.Response:
        self._count("POST /v1/files")
        form = await request.post()
        upload = form["file"]
        data = upload.file.read() if hasattr(upload, "file") else bytes(upload, "utf-8")
        if form.get("purpose") == "batch" and len(data) > MAX_FILE_BYTES:
            return _error(400, "File is larger than the 200 MB a batch input file may be.")
        fid = self._id("file")
        self.files[fid] = {"bytes": data, "purpose": form.get("purpose"),
                           "filename": getattr(upload, "filename", "upload.jsonl")}
        return web.json_response(self._file_obj(fid))

    def _file_obj(self, fid: str) -> dict:
        f = self.files[fid]
        return {"id": fid, "object": "file", "bytes": len(f["bytes"]), "created_at": int(time.time()),
                "filename": f["filename"], "purpose": f["purpose"] or "batch", "status": "processed"}

    async def file_content(self, request: web.Request) -> web.Response:
        self._count("GET /v1/files/content")
        fid = request.match_info["fid"]
        f = self.files.get(fid)
        if f is not None and f["purpose"] == "batch_output":
            if take(self.server.batch_faults, "results_errors"):
                return _error(500, "injected 500", "server_error")
            if f.get("faults") and f["faults"].lose_results:
                f = None
            elif f.get("faults") and f["faults"].redirect and request.host.startswith("127.0.0.1"):
                redirect_to(request, f"/_redirected/openai/files/{fid}")
        if f is None:
            return _error(404, "no such file")
        return web.Response(body=f["bytes"], content_type="application/octet-stream")

    async def redirected_file(self, request: web.Request) -> web.Response:
        self._count("GET /_redirected")
        self.server.redirect_keys |= {request.headers[h] for h in ("authorization", "x-api-key")
                                      if h in request.headers}
        f = self.files.get(request.match_info["fid"])
        return web.Response(body=f["bytes"], content_type="application/octet-stream")

    # ----- batches -----------------------------------------------------------------------------
    def _validate(self, lines: list, endpoint: str) -> list[dict]:
        """What the validation stage finds wrong with an input file (errors.data)."""
        errors, models = [], set()
        if len(lines) > MAX_LINES:
            errors.append({"code": "too_many_requests", "line": None, "param": None,
                           "message": f"The input file has {len(lines)} requests; at most "
                                      f"{MAX_LINES} are allowed."})
        for n, line in enumerate(lines, 1):
            if not isinstance(line, dict) or not isinstance(line.get("body"), dict):
                errors.append({"code": "invalid_json_line", "line": n, "param": None,
                               "message": "This line is not a valid request."})
                continue
            if line.get("method") != "POST" or line.get("url") != endpoint:
                errors.append({"code": "invalid_url", "line": n, "param": "url",
                               "message": f"The url must be the batch's endpoint {endpoint}."})
            models.add(line["body"].get("model"))
        if len(models) > 1:
            errors.append({"code": "mismatched_model", "line": None, "param": "body.model",
                           "message": "All requests of a batch must use the same model."})
        return errors

    async def create_batch(self, request: web.Request) -> web.Response:
        self._count("POST /v1/batches")
        body = await request.json()
        f = self.server.batch_faults
        if f.reject:
            return _error(400, "injected: batch refused")
        fid = body.get("input_file_id")
        if fid not in self.files or self.files[fid]["purpose"] != "batch":
            return _error(400, f"no batch input file {fid}")
        if body.get("endpoint") not in _ENDPOINTS or body.get("completion_window") != "24h":
            return _error(400, "endpoint or completion_window not supported")
        meta = body.get("metadata") or {}
        if len(meta) > 16 or any(len(k) > 64 or len(str(v)) > 512 for k, v in meta.items()):
            return _error(400, "metadata: at most 16 pairs, keys of 64 and values of 512 characters")
        try:
            lines = [json.loads(x) for x in self.files[fid]["bytes"].decode().splitlines() if x.strip()]
        except ValueError:
            lines = [None]
        ids = [x.get("custom_id") if isinstance(x, dict) else None for x in lines]
        if any(not isinstance(i, str) or not i for i in ids) or len(set(ids)) != len(ids):
            return _error(400, "Each request's custom_id must be a non-empty string, unique within "
                               "the batch.", param="custom_id")
        bid = self._id("batch")
        errors = self._validate(lines, body.get("endpoint"))
        if take(f, "queue_full"):
            errors = [{"code": "token_limit_exceeded", "line": None, "param": None,
                       "message": f"Enqueued token limit reached for {lines[0]['body'].get('model')} "
                                  "in organization org-test. Limit: 90,000 enqueued tokens. Please try "
                                  "again once some in_progress batches have been completed."}]
        self.batches[bid] = {
            "id": bid, "object": "batch", "endpoint": body.get("endpoint"),
            "input_file_id": fid, "completion_window": body.get("completion_window", "24h"),
            "status": "validating", "created_at": int(time.time()), "errors": None,
            "metadata": meta, "output_file_id": None, "error_file_id": None,
            "request_counts": {"total": 0, "completed": 0, "failed": 0},
            "_faults": f.snapshot(), "_polls": 0, "_validation": errors, "_late": 0,
        }
        if take(f, "create_timeouts"):  # accepted; the answer comes too late to be read
            await asyncio.sleep(f.create_delay_s)
        return web.json_response(self._public(bid))

    def _public(self, bid: str) -> dict:
        b = {k: v for k, v in self.batches[bid].items() if not k.startswith("_")}
        if self.batches[bid]["_late"] > 0:  # ended, its files not attached yet
            b.update(output_file_id=None, error_file_id=None)
        return b

    async def list_batches(self, request: web.Request) -> web.Response:
        self._count("GET /v1/batches/list")
        limit = min(int(request.query.get("limit", 20)), 100)
        ids = sorted(self.batches, reverse=True)  # newest first
        after = request.query.get("after")
        if after in ids:
            ids = ids[ids.index(after) + 1:]
        page = ids[:limit]
        return web.json_response({"object": "list", "data": [self._public(i) for i in page],
                                  "first_id": page[0] if page else None,
                                  "last_id": page[-1] if page else None,
                                  "has_more": len(ids) > limit})

    async def retrieve_batch(self, request: web.Request) -> web.Response:
        self._count("GET /v1/batches")
        f = self.server.batch_faults
        if take(f, "poll_errors"):
            return _error(500, "injected 500", "server_error")
        if take(f, "poll_not_found"):
            return _error(404, "No batch found with that id.")
        bid = request.match_info["bid"]
        b = self.batches.get(bid)
        if b is None:
            return _error(404, "No batch found with that id.")
        if b["_late"] > 0:  # ended earlier; one more poll without its files
            b["_late"] -= 1
        elif b["status"] == "validating" and b["_validation"]:
            b.update(status="failed", failed_at=int(time.time()),
                     errors={"object": "list", "data": b["_validation"]})
        elif b["status"] in ("validating", "in_progress"):
            b["_polls"] += 1
            if b["_polls"] > b["_faults"].delay_polls:
                await self._finish(b, b["_faults"].outcome)
                b["_late"] = b["_faults"].results_late
            else:
                b["status"] = "in_progress"
        elif b["status"] == "cancelling":
            await self._finish(b, "cancelled")
        return web.json_response(self._public(bid))

    async def cancel_batch(self, request: web.Request) -> web.Response:
        self._count("POST /v1/batches/cancel")
        b = self.batches.get(request.match_info["bid"])
        if b is None:
            return _error(404, "No batch found with that id.")
        if b["status"] in ("validating", "in_progress"):
            b["status"] = "cancelling"
            b["_faults"].answered = 0  # nothing more gets answered once asked to stop
        return web.json_response(self._public(b["id"]))

    async def _finish(self, b: dict, outcome: str) -> None:
        """Answer the lines the outcome allows and write the output and error files."""
        lines = [json.loads(x) for x in self.files[b["input_file_id"]]["bytes"].decode().splitlines()
                 if x.strip()]
        faults: BatchFaults = b["_faults"]
        role = b["metadata"].get("carryon_role", "")
        n = len(lines) if outcome == "completed" else (
            faults.answered if faults.answered is not None else len(lines) // 2)
        out, err = [], []
        for i, line in enumerate(lines):
            cid = line["custom_id"]
            if i >= n:
                if outcome == "expired":  # as OpenAI: unfinished lines in the error file
                    err.append({"id": f"req-{i}", "custom_id": cid, "response": None,
                                "error": {"code": "batch_expired",
                                          "message": "This request could not be executed before the "
                                                     "completion window expired."}})
                continue
            refused = openai_refusal(line["body"])
            if i in faults.fail_lines or refused:
                status = 400 if refused else 500
                body = refused or {"error": {"message": "injected batch line failure",
                                             "type": "server_error"}}
                err.append({"id": f"req-{i}", "custom_id": cid, "error": None, "response": {
                    "status_code": status, "request_id": f"req-{i}", "body": body}})
                continue
            self.server.counts["batch_lines"] += 1
            self.server.counts[f"batch_line:{role}"] += 1
            resp = await self.server._answer(line["body"], role, "chat")
            body = _body(resp)
            if resp.status == 200 and faults.cached_tokens is not None:
                body["usage"]["prompt_tokens_details"] = {"cached_tokens": faults.cached_tokens}
            if resp.status == 200:
                bill(self.server, "openai", "batch", line["body"], body, b["id"])
            entry = {"id": f"req-{i}", "custom_id": cid, "error": None,
                     "response": {"status_code": resp.status, "request_id": f"req-{i}", "body": body}}
            (out if resp.status == 200 else err).append(entry)
        if faults.shuffle:
            out.reverse()
        b["request_counts"] = {"total": len(lines), "completed": len(out), "failed": len(err)}
        for key, rows in (("output_file_id", out), ("error_file_id", err)):
            if rows:
                fid = self._id("file")
                self.files[fid] = {"bytes": "".join(json.dumps(r) + "\n" for r in rows).encode(),
                                   "purpose": "batch_output", "filename": f"{key}.jsonl",
                                   "faults": faults}
                b[key] = fid
        b["status"] = outcome
        b[f"{outcome}_at" if outcome != "completed" else "completed_at"] = int(time.time())

    def routes(self, app: web.Application) -> None:
        for prefix in ("", "/v1"):
            app.router.add_post(f"{prefix}/files", self.create_file)
            app.router.add_get(prefix + "/files/{fid}/content", self.file_content)
            app.router.add_post(f"{prefix}/batches", self.create_batch)
            app.router.add_get(f"{prefix}/batches", self.list_batches)
            app.router.add_get(prefix + "/batches/{bid}", self.retrieve_batch)
            app.router.add_post(prefix + "/batches/{bid}/cancel", self.cancel_batch)
        app.router.add_get("/_redirected/openai/files/{fid}", self.redirected_file)
