"""The OpenAI batch API of the loopback server (``tests/support/llm_server.py``), for hermetic tests.

Routes, under ``/v1`` and without it, as the OpenAI SDK inside litellm calls them:
``POST /files`` (multipart: ``file``, ``purpose``), ``GET /files/{id}/content``,
``POST /batches`` (JSON: ``input_file_id``, ``endpoint``, ``completion_window``,
``metadata``), ``GET /batches/{id}``, ``POST /batches/{id}/cancel``.

Each line of a batch is answered by the server's live chat handler (``LLMServer._answer``)
with the same scripts and fault rolls, so a batch and a live run give the same answers. The
role a script is chosen by comes from the batch's ``metadata["carryon_role"]`` (live calls
carry it in the ``x-carryon-role`` header).

Batch faults (``server.batch_faults``, see ``BatchFaults``) apply to batches created while
they are set, here and in the Anthropic and Gemini batch APIs (tests/support/llm_providers.py). Every request counts in ``counts["total"]`` and in ``counts[route]`` (e.g.
``counts["POST /v1/batches"]``); each answered line counts in ``counts["batch_lines"]`` and
``counts["batch_line:<role>"]`` (not in ``counts[role]``, which stays the live requests).
"""

from __future__ import annotations

import json
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
    # POST /batches refused (HTTP 400): nothing is submitted.
    reject: bool = False
    # The next this-many polls (GET /batches/{id}, any batch) answer HTTP 500.
    poll_errors: int = 0
    # Output and error files cannot be downloaded (HTTP 404): results are lost.
    lose_results: bool = False
    # Result lines come back in reverse order of the request lines.
    shuffle: bool = False
    # Gemini only: results in a responses file instead of inline in the operation.
    as_file: bool = False


def _body(resp: web.Response) -> dict:
    return json.loads(resp.body.decode() if isinstance(resp.body, bytes) else resp.text)


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
        f = self.files.get(request.match_info["fid"])
        if f is not None and f["purpose"] == "batch_output" and self.server.batch_faults.lose_results:
            f = None
        if f is None:
            return web.json_response({"error": {"message": "no such file", "type": "invalid_request_error"}},
                                     status=404)
        return web.Response(body=f["bytes"], content_type="application/octet-stream")

    # ----- batches -----------------------------------------------------------------------------
    async def create_batch(self, request: web.Request) -> web.Response:
        self._count("POST /v1/batches")
        body = await request.json()
        if self.server.batch_faults.reject:
            return web.json_response({"error": {"message": "injected: batch refused",
                                                "type": "invalid_request_error"}}, status=400)
        fid = body.get("input_file_id")
        if fid not in self.files:
            return web.json_response({"error": {"message": f"no file {fid}", "type": "invalid_request_error"}},
                                     status=400)
        bid = self._id("batch")
        f = self.server.batch_faults
        self.batches[bid] = {
            "id": bid, "object": "batch", "endpoint": body.get("endpoint"),
            "input_file_id": fid, "completion_window": body.get("completion_window", "24h"),
            "status": "validating", "created_at": int(time.time()),
            "metadata": body.get("metadata") or {}, "output_file_id": None, "error_file_id": None,
            "request_counts": {"total": 0, "completed": 0, "failed": 0},
            # the faults in force when it was created, copied so a test may change them later
            "_faults": BatchFaults(f.outcome, f.answered, set(f.fail_lines), f.delay_polls,
                                   f.cached_tokens, shuffle=f.shuffle),
            "_polls": 0,
        }
        return web.json_response(self._public(bid))

    def _public(self, bid: str) -> dict:
        return {k: v for k, v in self.batches[bid].items() if not k.startswith("_")}

    async def retrieve_batch(self, request: web.Request) -> web.Response:
        self._count("GET /v1/batches")
        if self.server.batch_faults.poll_errors > 0:
            self.server.batch_faults.poll_errors -= 1
            return web.json_response({"error": {"message": "injected 500", "type": "server_error"}},
                                     status=500)
        bid = request.match_info["bid"]
        b = self.batches.get(bid)
        if b is None:
            return web.json_response({"error": {"message": "no such batch", "type": "invalid_request_error"}},
                                     status=404)
        if b["status"] in ("validating", "in_progress"):
            b["_polls"] += 1
            if b["_polls"] > b["_faults"].delay_polls:
                await self._finish(b, b["_faults"].outcome)
            else:
                b["status"] = "in_progress"
        elif b["status"] == "cancelling":
            await self._finish(b, "cancelled")
        return web.json_response(self._public(bid))

    async def cancel_batch(self, request: web.Request) -> web.Response:
        self._count("POST /v1/batches/cancel")
        b = self.batches.get(request.match_info["bid"])
        if b is None:
            return web.json_response({"error": {"message": "no such batch", "type": "invalid_request_error"}},
                                     status=404)
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
            if i in faults.fail_lines:
                err.append({"id": f"req-{i}", "custom_id": cid, "error": None, "response": {
                    "status_code": 500, "request_id": f"req-{i}",
                    "body": {"error": {"message": "injected batch line failure", "type": "server_error"}}}})
                continue
            self.server.counts["batch_lines"] += 1
            self.server.counts[f"batch_line:{role}"] += 1
            resp = await self.server._answer(line["body"], role, "chat")
            body = _body(resp)
            if resp.status == 200 and faults.cached_tokens is not None:
                body["usage"]["prompt_tokens_details"] = {"cached_tokens": faults.cached_tokens}
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
                                   "purpose": "batch_output", "filename": f"{key}.jsonl"}
                b[key] = fid
        b["status"] = outcome
        b[f"{outcome}_at" if outcome != "completed" else "completed_at"] = int(time.time())

    def routes(self, app: web.Application) -> None:
        for prefix in ("", "/v1"):
            app.router.add_post(f"{prefix}/files", self.create_file)
            app.router.add_get(prefix + "/files/{fid}/content", self.file_content)
            app.router.add_post(f"{prefix}/batches", self.create_batch)
            app.router.add_get(prefix + "/batches/{bid}", self.retrieve_batch)
            app.router.add_post(prefix + "/batches/{bid}/cancel", self.cancel_batch)
