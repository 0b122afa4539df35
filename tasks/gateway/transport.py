"""The litellm side of the gateway: the lazy import, the structured-output request and its
parse, and what a provider's answer or error says (reasoning tokens, safety blocks,
Retry-After). Pure helpers: ``Gateway`` (client.py) owns the calls, retries and the cache.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import re
from dataclasses import dataclass
from types import SimpleNamespace

from pydantic import BaseModel, ValidationError

_LITELLM = None


def _litellm():
    """Import litellm on first real request: it costs seconds, and a fully cached run
    never needs it."""
    global _LITELLM
    if _LITELLM is None:
        # The price map is otherwise fetched over the network at import, and the Anthropic
        # beta-header map at the first Anthropic request.
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        os.environ.setdefault("LITELLM_LOCAL_ANTHROPIC_BETA_HEADERS", "True")
        os.environ.setdefault("LITELLM_LOG", "ERROR")
        import litellm

        litellm.suppress_debug_info = True
        litellm.telemetry = False
        litellm.drop_params = False  # never silently drop seed or response_format
        logging.getLogger("LiteLLM").setLevel(logging.ERROR)
        _LITELLM = litellm
    return _LITELLM


@functools.lru_cache(maxsize=512)
def schema_doc(schema_cls: type[BaseModel], max_chars: int | None = None) -> dict:
    """A model's JSON schema as sent, computed once per class: pydantic rebuilds it on every
    call (about 0.3 ms), and every structured call needs it for its cache key. With
    ``max_chars`` (a model entry's ``max_string_chars``) every free-text string gets that
    maxLength. Callers must not mutate the returned dict (``response_format_for`` copies it
    before it leaves the gateway). Bounded: stages build a few classes per query (merge,
    misuse) and those come and go."""
    doc = schema_cls.model_json_schema()
    if max_chars is not None:
        _cap_strings(doc, max_chars)
    return doc


def _cap_strings(node, max_chars: int) -> None:
    # In place, on a fresh pydantic schema: string fields anywhere (properties, $defs, anyOf
    # members, array items); a field whose values are listed (enum, const) is left as it is.
    if isinstance(node, dict):
        if node.get("type") == "string" and "enum" not in node and "const" not in node:
            node["maxLength"] = min(max_chars, node.get("maxLength", max_chars))
        for value in node.values():
            _cap_strings(value, max_chars)
    elif isinstance(node, list):
        for value in node:
            _cap_strings(value, max_chars)


@functools.lru_cache(maxsize=512)
def _schema_json(schema_cls: type[BaseModel], max_chars: int | None = None) -> str:
    return json.dumps(schema_doc(schema_cls, max_chars))


def response_format_for(schema_cls: type[BaseModel], structured: str,
                        max_chars: int | None = None) -> dict | None:
    # A fresh copy per request (litellm or a provider adapter may edit the schema it is
    # handed); parsing the cached JSON is several times cheaper than copy.deepcopy.
    schema = json.loads(_schema_json(schema_cls, max_chars))
    if structured == "json_schema":
        return {"type": "json_schema",
                "json_schema": {"name": schema_cls.__name__, "schema": schema}}
    if structured == "json_object":
        # llama.cpp and vLLM accept the schema beside json_object and constrain decoding to it.
        return {"type": "json_object", "schema": schema}
    return None  # "prompt": the schema travels in the prompt instead


def _with_schema_instructions(messages: list[dict], schema_cls: type[BaseModel],
                              max_chars: int | None = None) -> list[dict]:
    """Fallback for providers without structured output: state the schema in the prompt."""
    note = ("\n\nAnswer with a single JSON object and nothing else. It must match this JSON "
            "schema:\n" + _schema_json(schema_cls, max_chars))
    out = [dict(m) for m in messages]
    out[-1]["content"] = out[-1]["content"] + note
    return out


_FENCE = re.compile(r"^```(?:json)?\s*|\s*```$", re.S)


def parse_structured(content: str, schema_cls: type[BaseModel]) -> tuple[BaseModel | None, str | None]:
    """Validate an answer against the role's pydantic model: (object, None) or (None, reason)."""
    text = _FENCE.sub("", content.strip())
    if not text.startswith("{"):
        start, end = text.find("{"), text.rfind("}")
        if start != -1 and end > start:
            text = text[start:end + 1]
    try:
        return schema_cls.model_validate_json(text), None
    except ValidationError as e:
        err = e.errors()[0]
    if err["type"] == "json_invalid" and "control character" in err["msg"]:
        # A raw newline or tab inside a string: llama-cpp-python 0.3.36's schema grammar
        # (`char ::= [^"\\]`) lets constrained decoding write one. Read it as the text it
        # plainly is (json's strict=False), escaped again so the JSON-mode rules still apply.
        try:
            return schema_cls.model_validate_json(json.dumps(json.loads(text, strict=False))), None
        except ValidationError as e:
            err = e.errors()[0]
        except ValueError:
            pass  # not JSON even so: the first reason stands
    where = ".".join(str(p) for p in err["loc"]) or "answer"
    return None, f"{where}: {err['msg']}"


@functools.lru_cache(maxsize=256)
def _supported_params(model: str) -> frozenset:
    """The OpenAI-style parameters litellm's adapter for ``model`` accepts (once per model)."""
    try:
        return frozenset(_litellm().get_supported_openai_params(model=model) or [])
    except Exception:
        return frozenset()


def _reasoning_tokens(usage) -> int:
    """usage.completion_tokens_details.reasoning_tokens, 0 where the provider says nothing."""
    details = getattr(usage, "completion_tokens_details", None)
    if isinstance(details, dict):
        value = details.get("reasoning_tokens")
    else:
        value = getattr(details, "reasoning_tokens", None)
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


def _cached_tokens(usage) -> int:
    """Prompt tokens the provider served from its prompt cache: OpenAI's
    usage.prompt_tokens_details.cached_tokens, else Anthropic's cache_read_input_tokens
    (litellm usually folds the latter into the former); 0 where the provider says nothing."""
    def get(obj, name):
        return obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)
    value = get(get(usage, "prompt_tokens_details"), "cached_tokens") if usage is not None else None
    if not value and usage is not None:
        value = get(usage, "cache_read_input_tokens")
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


_SAFETY_MARKS = ("content_policy_violation", "content_filter", "content management policy",
                 "content filtering policy", "safety system")


def _is_safety_block(exc: Exception) -> bool:
    """A bad-request error the provider marks as a safety block, where litellm did not map it
    to ContentPolicyViolationError (e.g. Azure's code "content_filter" on another adapter)."""
    status = getattr(exc, "status_code", None)
    if status is not None and str(status) != "400":
        return False
    text = f"{getattr(exc, 'code', '') or ''} {exc}".lower()
    return any(m in text for m in _SAFETY_MARKS)


def _retry_after(exc: Exception) -> float | None:
    """Seconds the provider asked us to wait (Retry-After), if it said."""
    for headers in (getattr(exc, "headers", None),
                    getattr(getattr(exc, "response", None), "headers", None),
                    getattr(exc, "litellm_response_headers", None)):
        if not headers:
            continue
        try:
            value = headers.get("retry-after") or headers.get("Retry-After")
        except Exception:
            continue
        if value is not None:
            try:
                return max(0.0, float(value))
            except ValueError:
                return None
    return None


# ----- one request, as plain data ------------------------------------------------------------
# A request is sent either in the run's process or in a gateway worker process
# (tasks/gateway/workers.py). Both run ``send`` below; its outcome is plain data (a ``Reply``
# or a ``Failure``), so a worker can pickle it back and the retry loop of client.py treats
# both the same way.

@dataclass
class Failure:
    """A request that raised: which way the retry loop must take it, and its one-line text.

    group: ``context`` (window exceeded), ``blocked`` (provider safety refusal), ``transient``
    (429, 5xx, timeouts, connection: retried with backoff), ``server`` (another APIError of
    status >= 500: retried while retries last), ``api`` (anything else: not retried)."""
    group: str
    text: str
    retry_after: float | None = None
    connect: bool = False  # the server could not be reached at all


@dataclass
class Reply:
    """What the gateway reads from an answer. Duck-types litellm's response for
    ``answers.add_usage``/``judge`` (``usage``, ``choices[0].finish_reason``, the cost)."""
    content: str | None
    finish_reason: str | None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    reasoning_tokens: int = 0
    response_cost: float = 0.0

    @property
    def usage(self):
        return SimpleNamespace(prompt_tokens=self.prompt_tokens,
                               completion_tokens=self.completion_tokens,
                               prompt_tokens_details={"cached_tokens": self.cached_tokens},
                               completion_tokens_details={"reasoning_tokens": self.reasoning_tokens})

    @property
    def choices(self):
        return [SimpleNamespace(finish_reason=self.finish_reason)]

    @property
    def _hidden_params(self):
        return {"response_cost": self.response_cost}


def error_text(e) -> str:
    """``Type: first line`` of an error (at most 300 characters of message); a string as is."""
    if not isinstance(e, BaseException):
        return str(e)
    msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return f"{type(e).__name__}: {msg[:300]}"


def failure_of(e: Exception) -> Failure:
    litellm = _litellm()
    text = error_text(e)
    if isinstance(e, litellm.ContextWindowExceededError):
        return Failure("context", text)
    if isinstance(e, litellm.ContentPolicyViolationError):
        # The provider's safety system refused the request: an answer, not a fault to retry.
        return Failure("blocked", text)
    if isinstance(e, (litellm.RateLimitError, litellm.InternalServerError,
                      litellm.ServiceUnavailableError, litellm.APIConnectionError,
                      litellm.Timeout, litellm.BadGatewayError)):
        # litellm reports a refused connection as APIConnectionError or as an
        # InternalServerError whose message says "Connection error".
        connect = (isinstance(e, litellm.APIConnectionError)
                   or "connection error" in str(e).lower())
        return Failure("transient", text, _retry_after(e), connect)
    if isinstance(e, litellm.APIError):
        status = getattr(e, "status_code", None)
        if status and int(status) >= 500:
            return Failure("server", text, _retry_after(e))
        return Failure("api", text)
    # bad request, auth, not found, provider quirks
    return Failure("blocked" if _is_safety_block(e) else "api", text)


def reply_of(resp, text_completion: bool) -> Reply:
    choice = resp.choices[0]
    usage = getattr(resp, "usage", None)
    return Reply(content=choice.text if text_completion else choice.message.content,
                 finish_reason=getattr(choice, "finish_reason", None),
                 prompt_tokens=getattr(usage, "prompt_tokens", 0) or 0,
                 completion_tokens=getattr(usage, "completion_tokens", 0) or 0,
                 cached_tokens=_cached_tokens(usage), reasoning_tokens=_reasoning_tokens(usage),
                 response_cost=float((getattr(resp, "_hidden_params", None) or {})
                                     .get("response_cost") or 0.0))


async def send(kwargs: dict, messages: list | None, prompt: str | None) -> Reply | Failure:
    """One request through litellm: a chat completion (``messages``) or a text completion."""
    litellm = _litellm()
    try:
        if messages is not None:
            return reply_of(await litellm.acompletion(messages=messages, **kwargs), False)
        return reply_of(await litellm.atext_completion(prompt=prompt, **kwargs), True)
    except Exception as e:
        return failure_of(e)


# Providers whose prompt cache serves only a prefix the request marks (``cache_control``):
# Anthropic's Messages API (its prompt-caching page: a breakpoint on a content block caches
# everything up to and including that block). OpenAI and Gemini cache prefixes by themselves,
# unmarked; litellm would turn a mark on a Gemini message into an explicit context cache (a
# stored, billed object), so only these providers get one.
CACHE_MARK_PROVIDERS = ("anthropic",)


def needs_cache_mark(model: str) -> bool:
    """Whether a request to ``model`` must mark a shared prefix to have it cached."""
    return "/" in model and model.split("/", 1)[0] in CACHE_MARK_PROVIDERS


def mark_cache_prefix(messages: list[dict], chars: int) -> list[dict]:
    """The messages with the first ``chars`` characters of the first message marked as a
    prompt-cache prefix: its text split into two text blocks, ``cache_control`` on the first.
    The text is the same, in the same order; only how it travels changes (the cache key holds
    the messages as rendered, unmarked)."""
    first = messages[0].get("content")
    if not isinstance(first, str) or not 0 < chars < len(first):
        return messages
    block = {"type": "text", "text": first[:chars], "cache_control": {"type": "ephemeral"}}
    return [{**messages[0], "content": [block, {"type": "text", "text": first[chars:]}]},
            *messages[1:]]


def request_kwargs(spec, role: str, messages, schema, api_key: str | None,
                   cache_prefix: int | None = None) -> tuple[dict, list | None]:
    """litellm's arguments for a call, and the messages to send (the schema appended in
    "prompt" structured mode; ``cache_prefix`` characters of the first message marked for the
    provider's prompt cache where it caches only marked prefixes, ``needs_cache_mark``). The
    gateway and the batch client build their requests alike (``Gateway._request_kwargs``,
    which reads the key from the environment)."""
    kwargs = {
        "model": spec.model, "api_base": spec.api_base, "api_key": api_key,
        "timeout": spec.timeout_s, "max_retries": 0, "num_retries": 0,
        "extra_headers": {"x-carryon-role": role},
        **{k: v for k, v in spec.generation_params().items() if v is not None},
    }
    _allow_reasoning_params(spec, kwargs)
    if kwargs["api_key"] is None:
        # OpenAI-compatible local servers need some key; real providers fall back to
        # litellm's own env lookup when we pass none.
        kwargs.pop("api_key")
        if spec.api_base:
            kwargs["api_key"] = "none"
    if schema is not None:
        rf = response_format_for(schema, spec.structured, spec.max_string_chars)
        if rf is not None:
            kwargs["response_format"] = rf
        else:
            messages = _with_schema_instructions(messages, schema, spec.max_string_chars)
    if cache_prefix and messages is not None and needs_cache_mark(spec.model):
        messages = mark_cache_prefix(messages, cache_prefix)
    return kwargs, messages


def _allow_reasoning_params(spec, kwargs: dict) -> None:
    """A reasoning control the provider adapter does not know (``thinking`` on an
    OpenAI-compatible server) is passed through as is instead of failing: the user set it
    on purpose, and litellm would otherwise refuse the call (drop_params is off)."""
    wanted = [k for k in ("reasoning_effort", "thinking") if k in kwargs]
    if not wanted:
        return
    supported = _supported_params(spec.model)
    extra = [k for k in wanted if k not in supported]
    if extra:
        kwargs["allowed_openai_params"] = extra

