"""The cache key: a hash of exactly what determines a model's output.

In: model string, normalised api_base, the rendered messages (or prompt), every generation
parameter, the response schema and how it is requested, the sample key of sampled calls, and
the cache-format version. Out, on purpose: API keys, timeouts, retry and concurrency settings,
the role (two roles sending the same request get the same answer).
"""

from __future__ import annotations

import functools
import hashlib
import json
from urllib.parse import urlsplit, urlunsplit

# Bump when the cached value's shape or the key's recipe changes: old entries become misses.
CACHE_FORMAT_VERSION = 1


@functools.lru_cache(maxsize=256)  # pure, and asked twice per call (the key, the limits)
def normalise_api_base(api_base: str | None) -> str | None:
    """Lower-case scheme and host, drop default ports and trailing slashes."""
    if not api_base:
        return None
    parts = urlsplit(api_base.strip())
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower()
    port = parts.port
    if (scheme, port) in (("http", 80), ("https", 443)):
        port = None
    netloc = host + (f":{port}" if port else "")
    return urlunsplit((scheme, netloc, parts.path.rstrip("/"), parts.query, ""))


def cache_key(
    *,
    model: str,
    api_base: str | None,
    messages: list[dict] | None,
    prompt: str | None,
    params: dict,
    schema: dict | None,
    structured: str | None,
    sample_key: str | None,
) -> str:
    """sha256 over a canonical JSON document of everything that determines the output.

    ``sample_key`` only counts for sampled calls (temperature > 0): at temperature 0 the
    request alone determines the answer, so conversations share it whatever their key.
    """
    sampled = (params.get("temperature") or 0) > 0
    doc = {
        "v": CACHE_FORMAT_VERSION,
        "model": model,
        "api_base": normalise_api_base(api_base),
        "messages": messages,
        "prompt": prompt,
        "params": {k: v for k, v in sorted(params.items()) if v is not None},
        "schema": schema,
        "structured": structured if schema is not None else None,
        "sample_key": sample_key if sampled else None,
    }
    blob = json.dumps(doc, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()
