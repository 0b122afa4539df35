"""The wire side of provider batches: one ``Wire`` per batch API, so ``tasks/gateway/batch.py``
keeps one runner (cache, store, poll, judge, retry) for all of them.

A wire turns a call into the provider's request line, submits a list of lines as one batch,
reads its state in the OpenAI vocabulary (``in_progress`` … ``completed`` / ``expired`` /
``cancelled`` / ``failed``) and reads its results as ``(custom_id, ModelResponse | None,
why)``. Request bodies are the ones litellm's own adapters build for a live call of the same
model (``get_optional_params`` and the provider config's ``transform_request``), and answers
go back through the same adapters' ``transform_response``: a batch line is the live request,
only the envelope differs.

- ``openai``: OpenAI's batch API through litellm's file and batch calls (JSONL ``{custom_id,
  method, url, body}``), for OpenAI, Azure and OpenAI-compatible servers; 50,000 lines and
  200 MB per file.
- ``anthropic``: Message Batches (``POST /v1/messages/batches`` with ``{"requests":
  [{custom_id, params}]}``; ``GET /v1/messages/batches/{id}`` until ``processing_status`` is
  ``ended``; results JSONL at ``results_url``, one ``{custom_id, result: {type: succeeded |
  errored | canceled | expired}}`` per request, in any order; 100,000 requests or 256 MB per
  batch; results kept 29 days). litellm 1.110.2 can retrieve these batches but not create
  them, so this wire speaks HTTP itself.
- ``gemini``: the Gemini API's batch mode with inline requests (``POST
  {api_base}/models/{model}:batchGenerateContent`` with ``batch.input_config.requests.requests
  = [{request: GenerateContentRequest, metadata: {key}}]``; ``GET {api_base}/batches/{id}``, an
  Operation whose ``metadata.state`` is ``BATCH_STATE_*`` (the SDK's ``JOB_STATE_*``); results in
  ``response.inlinedResponses.inlinedResponses`` or a ``responsesFile``). Inline requests are
  capped at 20 MB per batch, so a large stage becomes several batches. litellm's Gemini batch
  config needs a Files-API upload of OpenAI-shaped lines; the inline form needs no upload.

Vertex AI batch prediction (Gemini through ``vertex_ai/``) reads its input from and writes its
output to a Cloud Storage bucket; it has no wire here, and such models are called live
(``batch_route`` says why, and ``carryon plan`` prices them live).

Keys come from the model entry's ``api_key_env`` (or the provider's usual variable) at call
time and travel in headers only, never in a URL, a row or a log line.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass

from tasks.gateway.transport import _litellm
from tasks.model_entry import ModelSpec, api_key_for

# Arguments of a litellm call that are not part of the provider's request body.
_NOT_BODY = ("api_base", "api_key", "timeout", "max_retries", "num_retries", "extra_headers",
             "allowed_openai_params")
_OPENAI_PREFIXES = ("openai", "azure", "hosted_vllm", "litellm_proxy")


def batch_route(model: str) -> tuple[str | None, str]:
    """The batch wire a model string goes through, or None and why it is called live. Read from
    the provider prefix alone, so ``carryon plan`` asks the same question without litellm."""
    prefix = model.split("/", 1)[0] if "/" in model else "openai"
    if prefix in _OPENAI_PREFIXES:
        return "openai", ""
    if prefix in ("anthropic", "gemini"):
        return prefix, ""
    if prefix.startswith("vertex_ai"):
        return None, ("Vertex AI batch prediction reads and writes a Cloud Storage bucket, "
                      "which this version does not submit to")
    return None, f"no batch API for litellm provider {prefix!r} in this version"


@dataclass(frozen=True)
class Limits:
    lines: int  # requests per batch
    bytes: int  # request bytes per batch (the JSONL file, or the create request's body)


def _bare(model: str) -> str:
    return model.split("/", 1)[1] if "/" in model else model


def _key(spec: ModelSpec, default_env: str) -> str | None:
    return api_key_for(spec) or os.environ.get(default_env)


class BatchHTTPError(Exception):
    """A batch API request the provider answered with an error status (the text has no key)."""


async def _http(method: str, url: str, headers: dict, timeout: float, body=None) -> bytes:
    import httpx

    async with httpx.AsyncClient(timeout=timeout) as client:
        resp = await client.request(method, url, headers=headers, json=body)
    if resp.status_code >= 400:
        raise BatchHTTPError(f"HTTP {resp.status_code} from {method} {url.split('?')[0]}: "
                             f"{resp.text[:200]}")
    return resp.content


def _logging(model: str):
    """The logging object litellm's response adapters call ``post_call`` on."""
    from litellm.litellm_core_utils.litellm_logging import Logging

    log = Logging(model=model, messages=[], stream=False, call_type="acompletion",
                  start_time=time.time(), litellm_call_id="carryon-batch", function_id="batch")
    log.optional_params = {}
    return log


class _ProviderAdapter:
    """A live request's body and answer through litellm's adapter for the provider."""

    provider = ""

    def optional_params(self, kwargs: dict) -> dict:
        from litellm.utils import get_optional_params

        params = {k: v for k, v in kwargs.items() if k not in _NOT_BODY and k != "model"}
        return dict(get_optional_params(model=_bare(kwargs["model"]),
                                        custom_llm_provider=self.provider, **params))

    def config(self, model: str):
        from litellm.types.utils import LlmProviders
        from litellm.utils import ProviderConfigManager

        return ProviderConfigManager.get_provider_chat_config(model=_bare(model),
                                                              provider=LlmProviders(self.provider))

    def answer(self, kwargs: dict, messages: list, raw: dict):
        """The provider's answer as litellm's ModelResponse, as the live path would read it."""
        import httpx

        litellm = _litellm()
        model, params = _bare(kwargs["model"]), self.optional_params(kwargs)
        return self.config(kwargs["model"]).transform_response(
            model=model, raw_response=httpx.Response(200, json=raw),
            model_response=litellm.ModelResponse(), logging_obj=_logging(model),
            request_data={}, messages=messages, optional_params=params, litellm_params={},
            encoding=None, json_mode=params.get("json_mode"))


    def read(self, cid, request, raw: dict) -> tuple:
        """One answered line: ``(cid, ModelResponse, None)``, or ``(cid, None, why)`` when no
        caller asks for it any more or litellm cannot read it (that line alone goes live)."""
        kwargs, messages = request(cid)
        if kwargs is None:
            return cid, None, "no caller asks for this line"
        try:
            return cid, self.answer(kwargs, messages, raw), None
        except Exception as e:  # noqa: BLE001 - one unreadable answer must not sink the batch
            return cid, None, f"unreadable answer ({type(e).__name__}: {str(e)[:150]})"


class OpenAIWire:
    """OpenAI's batch API through litellm (files + batches), as before this module."""

    limits = Limits(lines=50_000, bytes=200 * 2**20)
    url = "/v1/chat/completions"

    def line(self, cid: str, kwargs: dict, messages: list) -> dict:
        body = {k: v for k, v in kwargs.items() if k not in _NOT_BODY}
        body["model"] = _litellm().get_llm_provider(kwargs["model"])[0]
        return {"custom_id": cid, "method": "POST", "url": self.url,
                "body": {"messages": messages, **body}}

    @staticmethod
    def _creds(spec: ModelSpec) -> dict:
        # No retries inside the SDK: a failed poll is polled again, a failed submit goes live.
        out = {"custom_llm_provider": _litellm().get_llm_provider(spec.model)[1], "max_retries": 0}
        if spec.api_base:
            out["api_base"] = spec.api_base
        key = api_key_for(spec) or ("none" if spec.api_base else None)
        if key:
            out["api_key"] = key
        return out

    async def submit(self, spec: ModelSpec, role: str, lines: list[dict]) -> dict:
        litellm, creds = _litellm(), self._creds(spec)
        data = "".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines).encode()
        f = await litellm.acreate_file(file=("carryon-batch.jsonl", data, "application/jsonl"),
                                       purpose="batch", **creds)
        b = await litellm.acreate_batch(completion_window="24h", endpoint=self.url,
                                        input_file_id=f.id, metadata={"carryon_role": role}, **creds)
        return {"batch_id": b.id, "input_file_id": f.id, "status": b.status}

    async def poll(self, spec: ModelSpec, row: dict) -> dict:
        b = await _litellm().aretrieve_batch(batch_id=row["batch_id"], **self._creds(spec))
        return {"status": b.status, "output_file_id": b.output_file_id,
                "error_file_id": b.error_file_id}

    async def _read(self, spec: ModelSpec, file_id: str | None) -> list[dict]:
        if not file_id:
            return []
        content = await _litellm().afile_content(file_id=file_id, **self._creds(spec))
        return [json.loads(x) for x in content.content.decode().splitlines() if x.strip()]

    async def results(self, spec: ModelSpec, row: dict, request) -> list[tuple]:
        litellm, out = _litellm(), []
        for line in await self._read(spec, row["output_file_id"]):
            resp = line.get("response") or {}
            if resp.get("status_code") == 200:
                out.append((line.get("custom_id"), litellm.ModelResponse(**resp["body"]), None))
            else:
                out.append((line.get("custom_id"), None, f"HTTP {resp.get('status_code')}"))
        for line in await self._read(spec, row["error_file_id"]):
            out.append((line.get("custom_id"), None, str(line.get("error") or "error line")[:200]))
        return out


class AnthropicWire(_ProviderAdapter):
    """Anthropic Message Batches over HTTP (see the module docstring)."""

    provider = "anthropic"
    limits = Limits(lines=100_000, bytes=256 * 2**20)
    DEFAULT_BASE = "https://api.anthropic.com"

    def line(self, cid: str, kwargs: dict, messages: list) -> dict:
        params = self.optional_params(kwargs)
        params.pop("json_mode", None)  # litellm's own flag, read back when parsing the answer
        body = self.config(kwargs["model"]).transform_request(
            model=_bare(kwargs["model"]), messages=[dict(m) for m in messages],
            optional_params=params, litellm_params={}, headers={})
        body.pop("json_mode", None)
        return {"custom_id": cid, "params": body}

    def _base(self, spec: ModelSpec) -> str:
        return (spec.api_base or self.DEFAULT_BASE).rstrip("/")

    def _headers(self, spec: ModelSpec, role: str | None = None) -> dict:
        h = {"anthropic-version": "2023-06-01", "content-type": "application/json"}
        key = _key(spec, "ANTHROPIC_API_KEY")
        if key:
            h["x-api-key"] = key
        if role:
            h["x-carryon-role"] = role
        return h

    async def submit(self, spec: ModelSpec, role: str, lines: list[dict]) -> dict:
        raw = await _http("POST", f"{self._base(spec)}/v1/messages/batches",
                          self._headers(spec, role), spec.timeout_s, {"requests": lines})
        b = json.loads(raw)
        return {"batch_id": b["id"], "input_file_id": "", "status": self._status(b)}

    @staticmethod
    def _status(b: dict) -> str:
        state = b.get("processing_status")
        if state != "ended":
            return "cancelling" if state == "canceling" else "in_progress"
        counts = b.get("request_counts") or {}
        if b.get("cancel_initiated_at"):
            return "cancelled"
        return "expired" if counts.get("expired") else "completed"

    async def poll(self, spec: ModelSpec, row: dict) -> dict:
        raw = await _http("GET", f"{self._base(spec)}/v1/messages/batches/{row['batch_id']}",
                          self._headers(spec), spec.timeout_s)
        b = json.loads(raw)
        return {"status": self._status(b), "output_file_id": b.get("results_url"),
                "error_file_id": None}

    async def results(self, spec: ModelSpec, row: dict, request) -> list[tuple]:
        if not row["output_file_id"]:
            return []
        raw = await _http("GET", row["output_file_id"], self._headers(spec), spec.timeout_s)
        out = []
        for text in raw.decode().splitlines():
            if not text.strip():
                continue
            line = json.loads(text)
            cid, result = line.get("custom_id"), line.get("result") or {}
            if result.get("type") == "succeeded":
                out.append(self.read(cid, request, result["message"]))
            else:
                err = (result.get("error") or {}).get("error") or {}
                out.append((cid, None, f"{result.get('type')}: {err.get('type', '')} "
                                       f"{err.get('message', '')}".strip()[:200]))
        return out


_GEMINI_STATES = {"SUCCEEDED": "completed", "FAILED": "failed", "CANCELLED": "cancelled",
                  "EXPIRED": "expired", "PENDING": "in_progress", "RUNNING": "in_progress",
                  "UNSPECIFIED": "in_progress"}


class GeminiWire(_ProviderAdapter):
    """The Gemini API's batch mode with inline requests (see the module docstring)."""

    provider = "gemini"
    # Inline requests: 20 MB for the whole create request (a margin for its envelope); the
    # reference names no cap on their number, so OpenAI's 50,000 bounds one batch here too.
    limits = Limits(lines=50_000, bytes=19 * 2**20)
    DEFAULT_BASE = "https://generativelanguage.googleapis.com/v1beta"

    def line(self, cid: str, kwargs: dict, messages: list) -> dict:
        from litellm.llms.vertex_ai.gemini.transformation import transform_request_body

        params = self.optional_params(kwargs)
        body = transform_request_body(messages=[dict(m) for m in messages],
                                      model=_bare(kwargs["model"]), optional_params=params,
                                      custom_llm_provider="gemini", litellm_params={},
                                      cached_content=None)
        return {"request": dict(body), "metadata": {"key": cid}}

    def _base(self, spec: ModelSpec) -> str:
        return (spec.api_base or self.DEFAULT_BASE).rstrip("/")

    def _headers(self, spec: ModelSpec) -> dict:
        key = _key(spec, "GEMINI_API_KEY")
        return {"content-type": "application/json", **({"x-goog-api-key": key} if key else {})}

    async def submit(self, spec: ModelSpec, role: str, lines: list[dict]) -> dict:
        body = {"batch": {"display_name": f"carryon-{role}",
                          "input_config": {"requests": {"requests": lines}}}}
        raw = await _http("POST", f"{self._base(spec)}/models/{_bare(spec.model)}:batchGenerateContent",
                          self._headers(spec), spec.timeout_s, body)
        op = json.loads(raw)
        return {"batch_id": op["name"].removeprefix("batches/"), "input_file_id": "",
                "status": self._status(op)}

    @staticmethod
    def _status(op: dict) -> str:
        state = str((op.get("metadata") or {}).get("state") or "UNSPECIFIED")
        return _GEMINI_STATES.get(state.rsplit("_", 1)[-1], "in_progress")

    async def _get(self, spec: ModelSpec, batch_id: str) -> dict:
        return json.loads(await _http("GET", f"{self._base(spec)}/batches/{batch_id}",
                                      self._headers(spec), spec.timeout_s))

    async def poll(self, spec: ModelSpec, row: dict) -> dict:
        op = await self._get(spec, row["batch_id"])
        return {"status": self._status(op),
                "output_file_id": (op.get("response") or {}).get("responsesFile"),
                "error_file_id": None}

    async def results(self, spec: ModelSpec, row: dict, request) -> list[tuple]:
        if row["output_file_id"]:  # a responses file: JSONL of {key, response | error}
            base = self._base(spec)
            root, version = base.rsplit("/", 1)
            raw = await _http("GET", f"{root}/download/{version}/{row['output_file_id']}"
                                     ":download?alt=media", self._headers(spec), spec.timeout_s)
            items = [json.loads(x) for x in raw.decode().splitlines() if x.strip()]
            items = [{**x, "metadata": {"key": x.get("key")}} for x in items]
        else:
            op = await self._get(spec, row["batch_id"])
            inlined = (op.get("response") or {}).get("inlinedResponses") or {}
            items = inlined.get("inlinedResponses", []) if isinstance(inlined, dict) else inlined
        out = []
        for item in items:
            cid = (item.get("metadata") or {}).get("key")
            if item.get("response") is not None:
                out.append(self.read(cid, request, item["response"]))
            else:
                err = item.get("error") or item.get("status") or {}
                out.append((cid, None, f"{err.get('status', '')} {err.get('message', '')}".strip()[:200]))
        return out


WIRES = {"openai": OpenAIWire(), "anthropic": AnthropicWire(), "gemini": GeminiWire()}


def wire_for(model: str):
    """The wire of a model string, or None (called live; ``batch_route`` says why)."""
    route, _ = batch_route(model)
    return WIRES.get(route) if route else None
