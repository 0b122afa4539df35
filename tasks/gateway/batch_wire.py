"""The wire side of provider batches: one ``Wire`` per batch API, so ``tasks/gateway/batch.py``
keeps one runner (cache, store, poll, judge, retry) for all of them.

**One request, two ways.** A batch line is the request litellm's live path sends for the same
call. ``live_request`` runs litellm's own ``completion`` with the gateway's arguments and stops
it at the moment it hands the finished request to its logger, just before the HTTP send
(``Logging.pre_call``, the hook litellm's ``return_raw_request`` uses): the body after
litellm's parameter mapping (``max_completion_tokens`` for gpt-5.x and o-series, Anthropic's
``output_format`` or tool, Gemini's ``generationConfig``) and the headers litellm added
(``anthropic-beta`` for structured outputs or other betas). Nothing is sent and nothing is
rebuilt beside litellm. A wire then wraps the body in its API's envelope (``line``); of the
headers, auth and transport ones are the envelope's own, the ones the API takes once per batch
(Anthropic's ``anthropic-version`` and ``anthropic-beta``) go on the batch create (the runner
groups lines by them), and a call whose headers fit neither (``LineError``) goes live.
``docs/batch.md`` has the CPU cost per line.

A wire: ``request(kwargs, messages) -> Request`` (the live request), ``line(cid, request) ->
dict`` (one line of the batch), ``submit(spec, role, lines, headers, tag)`` (one create; the
``tag`` is a client id the provider echoes back), ``find(spec, row)`` (the batches a create
that failed or timed out may have made, by that tag), ``poll(spec, row)`` (state in OpenAI's
words: ``in_progress`` … ``completed`` / ``expired`` / ``cancelled`` / ``failed``, whether its
results are attached, whether it was refused for a queue limit) and ``results(spec, row,
request)`` (``(custom_id, ModelResponse | None, why)``, answers read back through litellm's
adapter for the provider, as the live path reads them). A one-line batch (``carryon check``)
uses the same five calls.

- ``openai``: OpenAI's batch API through litellm's file and batch calls (JSONL ``{custom_id,
  method, url, body}``), for OpenAI, Azure and OpenAI-compatible servers; 50,000 lines and
  200 MB per file; the tag travels in the batch's ``metadata``.
- ``anthropic``: Message Batches (``POST /v1/messages/batches`` with ``{"requests":
  [{custom_id, params}]}``, betas in the create's ``anthropic-beta`` header; ``GET
  /v1/messages/batches/{id}`` until ``processing_status`` is ``ended``; results JSONL at
  ``results_url``, one ``{custom_id, result: {type: succeeded | errored | canceled |
  expired}}`` per request, in any order; 100,000 requests or 256 MB per batch). A batch echoes
  nothing of the caller's but the custom ids of its results, so the tag is the prefix of every
  custom id. litellm 1.110.2 can retrieve these batches but not create them: this wire speaks
  HTTP itself.
- ``gemini``: the Gemini API's batch mode with inline requests (``POST
  {root}/models/{model}:batchGenerateContent`` with ``batch.inputConfig.requests.requests =
  [{request: GenerateContentRequest, metadata: {key}}]``, on the API version litellm's live call
  uses; ``GET {root}/batches/{id}``, an Operation whose ``metadata.state`` is ``BATCH_STATE_*``;
  results in ``response.inlinedResponses.inlinedResponses`` or a ``responsesFile``). Inline
  requests are capped at 20 MB per batch. The tag travels in ``displayName``.

Vertex AI batch prediction (Gemini through ``vertex_ai/``) reads its input from and writes its
output to a Cloud Storage bucket; it has no wire here, and such models are called live
(``batch_route`` says why, and ``carryon plan`` prices them live).

Keys come from the model entry's ``api_key_env`` (or the provider's usual variable) at call
time and travel in headers only, never in a URL, a row or a log line; a download that
redirects to another host is followed without them.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import os
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

from pydantic import BaseModel

from tasks.gateway.transport import _litellm, request_kwargs
from tasks.model_entry import ModelSpec, api_key_for

_OPENAI_PREFIXES = ("openai", "azure", "hosted_vllm", "litellm_proxy")


def batch_route(model: str) -> tuple[str | None, str]:
    """The batch wire a model string goes through, or None and why it is called live. Read from
    the provider prefix alone, so ``carryon plan`` asks the same question without litellm
    (``entry_batch_route`` also asks whether the entry's calls can travel in a batch)."""
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


# ----- the live request, from litellm itself --------------------------------------------------
class LineError(Exception):
    """A call that cannot travel as a batch line (the text says why); it goes live."""


@dataclass(frozen=True)
class Request:
    """A live request as litellm would send it: its URL, the headers a batch must carry for it
    (sorted ``(name, value)`` pairs, names lower-case; the auth and transport ones left out)
    and its JSON body."""
    url: str
    headers: tuple
    body: dict


class _Captured(BaseException):
    # A BaseException, so no ``except Exception`` inside litellm turns it into an error to map,
    # log and retry (which is what makes ``return_raw_request`` cost several times more).
    def __init__(self, url: str, headers: dict, body: dict):
        super().__init__("captured")
        self.url, self.headers, self.body = url, headers, body


@functools.lru_cache(maxsize=1)
def _capture_logging_class():
    from litellm.litellm_core_utils.litellm_logging import Logging

    class Capture(Logging):
        """litellm's logging object, stopped at ``pre_call``: litellm hands it the finished
        request (``complete_input_dict``, ``headers``, ``api_base``) right before it sends."""

        def pre_call(self, input, api_key, model=None, additional_args=None):  # noqa: A002
            a = additional_args or {}
            raise _Captured(str(a.get("api_base") or ""), dict(a.get("headers") or {}),
                            a.get("complete_input_dict") or {})

    return Capture


def live_request(kwargs: dict, messages: list) -> tuple[str, dict, dict]:
    """``(url, headers, body)`` of the request litellm's live path builds for this call, taken
    from litellm's own ``completion`` stopped before it sends (nothing goes on the wire)."""
    litellm = _litellm()
    log = _capture_logging_class()(
        model=kwargs["model"], messages=messages, stream=False, call_type="completion",
        litellm_call_id="carryon-batch-line", start_time=dt.datetime.now(), function_id="batch")
    try:
        litellm.completion(messages=[dict(m) for m in messages], **kwargs,
                           litellm_logging_obj=log)
    except _Captured as c:
        return c.url, c.headers, c.body
    raise LineError(f"litellm sent {kwargs['model']} without the request passing its logger")


# Headers of the transport, the auth and the gateway's own role tag: every batch request sets
# its own, so a line never needs them.
_ENVELOPE = frozenset({"authorization", "x-api-key", "api-key", "x-goog-api-key", "content-type",
                       "accept", "user-agent", "x-carryon-role"})


def _split_headers(provider: str, headers: dict, per_batch: frozenset) -> tuple:
    """The headers a line needs on its batch's create; LineError for any the API cannot take."""
    out, stray = {}, []
    for name, value in headers.items():
        n = name.lower()
        if n in _ENVELOPE:
            continue
        if n in per_batch:
            out[n] = ",".join(sorted({v.strip() for v in str(value).split(",") if v.strip()}))
        else:
            stray.append(n)
    if stray:
        raise LineError(f"litellm sends header(s) {', '.join(sorted(stray))} with this call, "
                        f"which a {provider} batch cannot carry")
    return tuple(sorted(out.items()))


# ----- HTTP for the wires that speak it themselves ---------------------------------------------
def _bare(model: str) -> str:
    return model.split("/", 1)[1] if "/" in model else model


def _key(spec: ModelSpec, default_env: str) -> str | None:
    return api_key_for(spec) or os.environ.get(default_env)


# Requests that carry a batch's lines or its results take longer than a chat call: the
# entry's timeout_s plus a second per MB sent (``_http``), and at least ten minutes for a
# download.
DOWNLOAD_TIMEOUT_S = 600.0


def _download_timeout(spec: ModelSpec) -> float:
    return max(spec.timeout_s, DOWNLOAD_TIMEOUT_S)


class BatchHTTPError(Exception):
    """A batch API request the provider answered with an error status (the text has no key)."""

    def __init__(self, status: int, text: str):
        super().__init__(text)
        self.status = status


_KEY_HEADERS = ("x-api-key", "x-goog-api-key", "authorization", "api-key")


async def _http(method: str, url: str, headers: dict, timeout: float, body=None,
                params: dict | None = None) -> bytes:
    """One request (``body`` sent as JSON, its timeout a second longer per MB); redirects
    followed as both official SDKs do (httpx ``follow_redirects``), the key headers dropped
    when a redirect leaves the origin (a signed download URL needs none, and the key must not
    reach another host)."""
    import httpx

    data = json.dumps(body, ensure_ascii=False).encode() if body is not None else None
    headers = {**headers, **({"content-type": "application/json"} if data is not None else {})}
    async with httpx.AsyncClient(timeout=timeout + len(data or b"") / 2**20) as client:
        for _ in range(6):
            resp = await client.request(method, url, headers=headers, content=data, params=params)
            if resp.status_code not in (301, 302, 303, 307, 308) or "location" not in resp.headers:
                break
            nxt = str(resp.url.join(resp.headers["location"]))
            if urlsplit(nxt)[:2] != urlsplit(str(resp.url))[:2]:
                headers = {k: v for k, v in headers.items() if k.lower() not in _KEY_HEADERS}
            if resp.status_code == 303 or (resp.status_code in (301, 302) and method == "POST"):
                method, data = "GET", None
            url, params = nxt, None
    if resp.status_code >= 400:
        raise BatchHTTPError(resp.status_code, f"HTTP {resp.status_code} from {method} "
                                               f"{url.split('?')[0]}: {resp.text[:200]}")
    return resp.content


def refusal(e: Exception) -> str | None:
    """A create's error read as the provider's refusal, nothing submitted: ``"queue"`` (429: a
    queue or enqueued-token limit; submit again later) or ``"refused"`` (another 4xx: for
    good). None: no answer, or a 5xx; the provider may have accepted it."""
    if _status(e) == 429:
        return "queue"
    return "refused" if permanent(e) else None


def _status(e: Exception) -> int | None:
    status = getattr(e, "status", None) or getattr(e, "status_code", None)
    try:
        return int(status)
    except (TypeError, ValueError):
        return None


def permanent(e: Exception) -> bool:
    """An error that asking again will not mend: a 4xx other than timeout and rate limit (a
    lost batch, a revoked key). Timeouts, connection errors and 5xx are transient."""
    status = _status(e)
    return status is not None and 400 <= status < 500 and status not in (408, 409, 425, 429)


def _logging(model: str):
    """The logging object litellm's response adapters call ``post_call`` on."""
    from litellm.litellm_core_utils.litellm_logging import Logging

    log = Logging(model=model, messages=[], stream=False, call_type="acompletion",
                  start_time=time.time(), litellm_call_id="carryon-batch", function_id="batch")
    log.optional_params = {}
    return log


def _after(created, since: dt.datetime) -> bool:
    """A batch created no earlier than ``since`` less ten minutes (the provider's clock is not
    ours); created as Unix seconds or an RFC 3339 string."""
    try:
        if isinstance(created, (int, float)):
            t = dt.datetime.fromtimestamp(created, dt.timezone.utc)
        else:
            t = dt.datetime.fromisoformat(str(created).replace("Z", "+00:00"))
    except (TypeError, ValueError):
        return True  # unreadable: a candidate, to be safe
    if since.tzinfo is None:
        since = since.replace(tzinfo=dt.timezone.utc)
    return t >= since - dt.timedelta(minutes=10)


class _Wire:
    """What every wire shares: the live request of a call and its headers' split."""

    provider = ""
    per_batch_headers: frozenset = frozenset()

    def request(self, kwargs: dict, messages: list) -> Request:
        url, headers, body = live_request(kwargs, messages)
        return Request(url, _split_headers(self.provider, headers, self.per_batch_headers), body)


class _ProviderAdapter(_Wire):
    """Answers read back through litellm's adapter for the provider."""

    def optional_params(self, kwargs: dict) -> dict:
        from litellm.utils import get_optional_params

        skip = ("api_base", "api_key", "timeout", "max_retries", "num_retries", "extra_headers",
                "allowed_openai_params", "model")
        params = {k: v for k, v in kwargs.items() if k not in skip}
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


# ----- OpenAI ------------------------------------------------------------------------------------
# Arguments of the OpenAI SDK's ``create`` that are not part of the JSON body: litellm hands the
# SDK its request as ``create(**data)``, and the SDK sends extra_headers as headers and merges
# extra_body into the body.
_SDK_ONLY = ("extra_headers", "extra_query", "extra_body", "timeout")
_OPENAI_QUEUE_CODES = ("token_limit_exceeded", "request_limit_exceeded")


class OpenAIWire(_Wire):
    """OpenAI's batch API through litellm (files + batches)."""

    provider = "openai"
    limits = Limits(lines=50_000, bytes=200 * 2**20)
    url = "/v1/chat/completions"

    def request(self, kwargs: dict, messages: list) -> Request:
        url, headers, data = live_request(kwargs, messages)
        if "messages" not in data:
            raise LineError("litellm sends this model's calls to another OpenAI endpoint than "
                            f"{self.url}, which this wire does not batch")
        body = {k: v for k, v in data.items() if k not in _SDK_ONLY}
        body.update(data.get("extra_body") or {})
        headers = {**headers, **(data.get("extra_headers") or {})}
        return Request(url, _split_headers(self.provider, headers, self.per_batch_headers), body)

    def line(self, cid: str, req: Request) -> dict:
        return {"custom_id": cid, "method": "POST", "url": self.url, "body": req.body}

    @staticmethod
    def _creds(spec: ModelSpec) -> dict:
        # No retries inside the SDK: the runner decides what a failure means.
        out = {"custom_llm_provider": _litellm().get_llm_provider(spec.model)[1], "max_retries": 0,
               "timeout": spec.timeout_s}
        if spec.api_base:
            out["api_base"] = spec.api_base
        key = api_key_for(spec) or ("none" if spec.api_base else None)
        if key:
            out["api_key"] = key
        return out

    async def submit(self, spec: ModelSpec, role: str, lines: list[dict], headers: tuple = (),
                     tag: str = "") -> dict:
        litellm, creds = _litellm(), self._creds(spec)
        data = "".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines).encode()
        f = await litellm.acreate_file(file=("carryon-batch.jsonl", data, "application/jsonl"),
                                       purpose="batch", **{**creds, "timeout": spec.timeout_s
                                                           + len(data) / 2**20})
        b = await litellm.acreate_batch(
            completion_window="24h", endpoint=self.url, input_file_id=f.id,
            metadata={"carryon_role": role, "carryon_client_id": tag}, **creds)
        return {"batch_id": b.id, "input_file_id": f.id, "status": b.status}

    async def find(self, spec: ModelSpec, row: dict) -> list[dict]:
        """The batches tagged with the row's client id, newest first, back to its intent."""
        litellm, creds, out, after = _litellm(), self._creds(spec), [], None
        while True:
            page = await litellm.alist_batches(limit=100, after=after, **creds)
            data = list(getattr(page, "data", None) or [])
            for b in data:
                meta = getattr(b, "metadata", None) or {}
                if meta.get("carryon_client_id") == row["client_id"]:
                    out.append({"batch_id": b.id, "status": b.status, "confirmed": True,
                                "input_file_id": b.input_file_id})
            if not data or not getattr(page, "has_more", False) \
                    or not _after(getattr(data[-1], "created_at", None), row["submitted"]):
                return out
            after = data[-1].id

    async def poll(self, spec: ModelSpec, row: dict) -> dict:
        b = await _litellm().aretrieve_batch(batch_id=row["batch_id"], **self._creds(spec))
        counts = getattr(b, "request_counts", None)
        done, failed = (getattr(counts, "completed", 0) or 0), (getattr(counts, "failed", 0) or 0)
        errors = [getattr(x, "code", None) for x in (getattr(getattr(b, "errors", None), "data", None)
                                                     or [])]
        # Finished, but a file its counts promise is not attached yet: not ready to read.
        ready = not ((done and not b.output_file_id) or (failed and not b.error_file_id))
        return {"status": b.status, "output_file_id": b.output_file_id,
                "error_file_id": b.error_file_id, "ready": ready,
                "queue_limited": b.status == "failed" and any(c in _OPENAI_QUEUE_CODES for c in errors)}

    async def _read(self, spec: ModelSpec, file_id: str | None) -> list[dict]:
        if not file_id:
            return []
        content = await _litellm().afile_content(file_id=file_id, **{
            **self._creds(spec), "timeout": _download_timeout(spec)})
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
            resp = line.get("response") or {}
            err = line.get("error") or (resp.get("body") or {}).get("error") or "error line"
            out.append((line.get("custom_id"), None, str(err)[:200]))
        return out


# ----- Anthropic ---------------------------------------------------------------------------------
class AnthropicWire(_ProviderAdapter):
    """Anthropic Message Batches over HTTP (see the module docstring)."""

    provider = "anthropic"
    per_batch_headers = frozenset({"anthropic-version", "anthropic-beta"})
    limits = Limits(lines=100_000, bytes=256 * 2**20)
    DEFAULT_BASE = "https://api.anthropic.com"

    def line(self, cid: str, req: Request) -> dict:
        return {"custom_id": cid, "params": req.body}

    def _base(self, spec: ModelSpec) -> str:
        return (spec.api_base or self.DEFAULT_BASE).rstrip("/").removesuffix("/v1/messages")

    def _headers(self, spec: ModelSpec, role: str | None = None, batch_headers: tuple = ()) -> dict:
        h = {"anthropic-version": "2023-06-01", "content-type": "application/json",
             **dict(batch_headers)}
        key = _key(spec, "ANTHROPIC_API_KEY")
        if key:
            h["x-api-key"] = key
        if role:
            h["x-carryon-role"] = role
        return h

    async def submit(self, spec: ModelSpec, role: str, lines: list[dict], headers: tuple = (),
                     tag: str = "") -> dict:
        raw = await _http("POST", f"{self._base(spec)}/v1/messages/batches",
                          self._headers(spec, role, headers), spec.timeout_s, {"requests": lines})
        b = json.loads(raw)
        return {"batch_id": b["id"], "input_file_id": "", "status": self._status(b)}

    async def find(self, spec: ModelSpec, row: dict) -> list[dict]:
        """Candidates: batches created since the intent with as many requests. Anthropic echoes
        no tag until a batch ends (its results' custom ids), so none is confirmed here."""
        out, after = [], None
        while True:
            raw = await _http("GET", f"{self._base(spec)}/v1/messages/batches", self._headers(spec),
                              spec.timeout_s, params={"limit": 100, **({"after_id": after} if after else {})})
            page = json.loads(raw)
            data = page.get("data") or []
            for b in data:
                if _after(b.get("created_at"), row["submitted"]) \
                        and sum((b.get("request_counts") or {}).values()) == row["n_lines"]:
                    out.append({"batch_id": b["id"], "status": self._status(b), "confirmed": False})
            if not data or not page.get("has_more") or not _after(data[-1].get("created_at"),
                                                                   row["submitted"]):
                return out
            after = page.get("last_id") or data[-1]["id"]

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
                "error_file_id": None, "ready": bool(b.get("results_url")),
                "queue_limited": False}

    async def results(self, spec: ModelSpec, row: dict, request) -> list[tuple]:
        if not row["output_file_id"]:
            return []
        raw = await _http("GET", row["output_file_id"], self._headers(spec), _download_timeout(spec))
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


# ----- Gemini ------------------------------------------------------------------------------------
_GEMINI_STATES = {"SUCCEEDED": "completed", "FAILED": "failed", "CANCELLED": "cancelled",
                  "EXPIRED": "expired", "PENDING": "in_progress", "RUNNING": "in_progress",
                  "UNSPECIFIED": "in_progress"}
_GEMINI_METHOD = ":generateContent"


class GeminiWire(_ProviderAdapter):
    """The Gemini API's batch mode with inline requests (see the module docstring)."""

    provider = "gemini"
    # Inline requests: 20 MB for the whole create request (a margin for its envelope); the
    # reference names no cap on their number, so OpenAI's 50,000 bounds one batch here too.
    limits = Limits(lines=50_000, bytes=19 * 2**20)

    def line(self, cid: str, req: Request) -> dict:
        return {"request": req.body, "metadata": {"key": cid}}

    @staticmethod
    @functools.lru_cache(maxsize=64)
    def _root_of(model: str, api_base: str | None) -> str:
        # litellm's URL for a model depends on the model and api_base alone (get_gemini_url:
        # the API version by model family, v1alpha for Gemini 3): asked once per pair, of a
        # probe request with a placeholder key (nothing is sent).
        probe = ModelSpec(name="probe", model=model, api_base=api_base, api_key_env=None,
                          temperature=0.0, top_p=None, max_tokens=16, seed=None, stop=None,
                          max_concurrency=1, rpm=None, timeout_s=60.0, max_retries=0,
                          structured="json_schema", mode="chat", where="probe")
        kwargs, messages = request_kwargs(probe, "probe", [{"role": "user", "content": "."}],
                                          None, "carryon-probe")
        url, _, _ = live_request(kwargs, messages)
        return url.split("?")[0].rsplit("/models/", 1)[0]

    def _root(self, spec: ModelSpec) -> str:
        """The API root litellm's live calls of this model go to (``…/v1beta``, ``…/v1alpha``)."""
        return self._root_of(spec.model, spec.api_base)

    def _headers(self, spec: ModelSpec) -> dict:
        key = _key(spec, "GEMINI_API_KEY")
        return {"content-type": "application/json", **({"x-goog-api-key": key} if key else {})}

    @staticmethod
    def display_name(role: str, tag: str) -> str:
        return f"carryon {role} {tag}"

    async def submit(self, spec: ModelSpec, role: str, lines: list[dict], headers: tuple = (),
                     tag: str = "") -> dict:
        body = {"batch": {"displayName": self.display_name(role, tag),
                          "inputConfig": {"requests": {"requests": lines}}}}
        raw = await _http("POST", f"{self._root(spec)}/models/{_bare(spec.model)}"
                                  ":batchGenerateContent", self._headers(spec), spec.timeout_s, body)
        op = json.loads(raw)
        return {"batch_id": op["name"].removeprefix("batches/"), "input_file_id": "",
                "status": self._status(op)}

    async def find(self, spec: ModelSpec, row: dict) -> list[dict]:
        """The batches whose displayName carries the row's client id, back to its intent."""
        out, token = [], None
        while True:
            raw = await _http("GET", f"{self._root(spec)}/batches", self._headers(spec),
                              spec.timeout_s, params={"pageSize": 100, **({"pageToken": token} if token else {})})
            page = json.loads(raw)
            ops = page.get("operations") or []
            for op in ops:
                meta = op.get("metadata") or {}
                if str(meta.get("displayName", "")).endswith(f" {row['client_id']}"):
                    out.append({"batch_id": op["name"].removeprefix("batches/"),
                                "status": self._status(op), "confirmed": True})
            token = page.get("nextPageToken")
            if not ops or not token or not _after((ops[-1].get("metadata") or {}).get("createTime"),
                                                  row["submitted"]):
                return out

    @staticmethod
    def _status(op: dict) -> str:
        state = str((op.get("metadata") or {}).get("state") or "UNSPECIFIED")
        return _GEMINI_STATES.get(state.rsplit("_", 1)[-1], "in_progress")

    async def _get(self, spec: ModelSpec, batch_id: str, timeout: float | None = None) -> dict:
        return json.loads(await _http("GET", f"{self._root(spec)}/batches/{batch_id}",
                                      self._headers(spec), timeout or spec.timeout_s))

    async def poll(self, spec: ModelSpec, row: dict) -> dict:
        op = await self._get(spec, row["batch_id"])
        response = op.get("response")
        status = self._status(op)
        # SUCCEEDED can be reported before the results are attached to the operation.
        ready = status != "completed" or bool(response and ("inlinedResponses" in response
                                                            or response.get("responsesFile")))
        return {"status": status, "output_file_id": (response or {}).get("responsesFile"),
                "error_file_id": None, "ready": ready, "queue_limited": False}

    async def results(self, spec: ModelSpec, row: dict, request) -> list[tuple]:
        if row["output_file_id"]:  # a responses file: JSONL of {key, response | error}
            root, version = self._root(spec).rsplit("/", 1)
            raw = await _http("GET", f"{root}/download/{version}/{row['output_file_id']}"
                                     ":download?alt=media", self._headers(spec),
                              _download_timeout(spec))
            items = [json.loads(x) for x in raw.decode().splitlines() if x.strip()]
            items = [{**x, "metadata": {"key": x.get("key")}} for x in items]
        else:
            op = await self._get(spec, row["batch_id"], _download_timeout(spec))  # inline: up to 20 MB
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


class _ProbeAnswer(BaseModel):
    """A structured answer for ``entry_batch_route``'s probe: a provider's adapter adds its
    headers (Anthropic's structured-output beta) for any schema, not for one in particular."""
    answer: str


def entry_batch_route(spec: ModelSpec, schemas: tuple = (None, _ProbeAnswer)) -> tuple[str | None, str]:
    """``batch_route`` of an entry, and whether its calls can travel in a batch: the live
    request of a probe call (with each of ``schemas``: the structured classes its role asks
    for, None for free text; by default free text and a structured answer) must carry no
    header the provider's batch cannot take. What ``carryon plan`` reads to say which entries
    with ``batch: true`` go live and why (it needs litellm)."""
    route, why = batch_route(spec.model)
    if route is None:
        return route, why
    for schema in schemas:
        kwargs, messages = request_kwargs(spec, "probe", [{"role": "user", "content": "."}],
                                          schema, api_key_for(spec) or "carryon-probe")
        try:
            WIRES[route].request(kwargs, messages)
        except LineError as e:
            return None, str(e)
        except Exception:  # noqa: BLE001 - a probe litellm refuses fails live too, as data
            continue
    return route, ""
