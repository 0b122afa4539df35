"""Pre-flight: a model entry whose provider needs an API key that is not set.

An entry that names its key (``api_key_env``) is checked by ``tasks.model_env.check_secrets``.
One that names none is sent with litellm's own environment lookup (OPENAI_API_KEY for
``openai/...``, GEMINI_API_KEY for ``gemini/...``), and a missing one used to surface only at
the first call: litellm's "Missing credentials", retried as a server error, then a failed
stage. Here litellm's own table (``validate_environment``, environment reads only, no network)
says which variables the provider reads, before anything runs.

Not checked, on purpose:
- an entry with an ``api_base``: the gateway sends it a placeholder key when none is named
  (tasks/gateway/client.py), as a local OpenAI-compatible server (llama.cpp, vLLM) expects,
  and never reads the provider's variable for it;
- CARRYON_API_KEY set: it is every entry's key;
- providers that find credentials without a variable (AWS, Google Cloud and Azure credential
  chains, a local Ollama): litellm lists variables for them that a working setup may lack;
- a missing variable that is not a secret (an endpoint, a region): not a key.

Importing litellm costs seconds, and a warm rerun should cost none of them: an entry found
complete is remembered in ``<cache>/model_keys.json`` under litellm's version, the model and
the NAMES of the credential-like variables set (never their values). A missing key is never
remembered: it is asked again each time, so setting it takes effect at once.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
from pathlib import Path

from tasks.config_error import ConfigError

MEMO_NAME = "model_keys.json"
MEMO_MAX = 256  # entries kept (one per model and set of variable names)

# Providers whose credentials may come from outside the environment (files, instance
# metadata, gcloud) or need none: litellm's list of variables is not a requirement there.
CHAIN_PROVIDERS = frozenset({
    "bedrock", "bedrock_converse", "sagemaker", "sagemaker_chat", "vertex_ai", "vertex_ai_beta",
    "azure", "azure_ai", "azure_text", "ollama", "ollama_chat", "lm_studio", "hosted_vllm",
    "llamafile", "custom", "custom_openai",
})
# Variable names that hold a secret (as litellm names them): only these make an entry fail.
_SECRET = re.compile(r"(KEY|TOKEN|SECRET)", re.I)
# Names that may change litellm's answer: the memo's key holds which of these are set.
_CREDENTIAL_LIKE = re.compile(
    r"(KEY|TOKEN|SECRET|PROJECT|LOCATION|REGION|BASE|VERSION|ARN|PROFILE|CREDENTIAL|ACCOUNT)",
    re.I)


def _needs_check(spec) -> bool:
    return not (spec.api_base or spec.api_key_env or os.environ.get("CARRYON_API_KEY"))


def _names_set() -> tuple[str, ...]:
    return tuple(sorted(n for n, v in os.environ.items() if v and _CREDENTIAL_LIKE.search(n)))


@functools.lru_cache(maxsize=1)
def _litellm_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("litellm")
    except PackageNotFoundError:
        return "none"


def _memo_key(model: str) -> str:
    names = hashlib.sha256("\n".join(_names_set()).encode()).hexdigest()[:16]
    return f"litellm {_litellm_version()} {model} {names}"


def litellm_missing(model: str) -> tuple[str | None, list[str]]:
    """(provider, secret variables litellm finds unset) for a model sent without api_base or
    named key; ([], provider) when the provider needs none litellm knows of."""
    from tasks.gateway.transport import _litellm  # sets the local price map: no network

    litellm = _litellm()
    try:
        provider = litellm.get_llm_provider(model=model)[1]
    except Exception:  # a model litellm cannot route: the call itself will say so
        return None, []
    if provider in CHAIN_PROVIDERS:
        return provider, []
    try:
        found = litellm.validate_environment(model=model)
    except Exception:
        return provider, []
    if found.get("keys_in_environment"):
        return provider, []
    missing = [k for k in found.get("missing_keys") or []
               if _SECRET.search(k) and not os.environ.get(k)]
    return provider, missing


def _read(memo: Path | None) -> dict:
    if memo is None:
        return {}
    try:
        book = json.loads(memo.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return book if isinstance(book, dict) else {}


def _remember(memo: Path | None, keys: list[str]) -> None:
    """Add complete entries to the memo, atomically; only where the cache folder exists (a
    pre-flight check leaves no folder behind) and never failing the run."""
    if memo is None or not keys or not memo.parent.is_dir():
        return
    book = _read(memo)
    for k in keys:
        book[k] = True
    if len(book) > MEMO_MAX:
        book = dict(list(book.items())[-MEMO_MAX:])
    try:
        tmp = memo.with_name(f".{memo.name}.{os.getpid()}")
        tmp.write_text(json.dumps(book, sort_keys=True), encoding="utf-8")
        os.replace(tmp, memo)
    except OSError:
        pass


def missing_provider_keys(cfg, roles: list[str]) -> list[str]:
    """One line per model entry (of ``roles``) whose provider's key is not set; [] if none."""
    specs = [s for role in roles for s in cfg.role_specs(role) if _needs_check(s)]
    if not specs:
        return []
    memo = Path(cfg.cache_path) / MEMO_NAME
    known = _read(memo)
    where = cfg.source_path or "config"
    out, complete, asked = [], [], {}
    for spec in specs:
        key = _memo_key(spec.model)
        if known.get(key) is True:
            continue
        if spec.model not in asked:
            asked[spec.model] = litellm_missing(spec.model)
        provider, missing = asked[spec.model]
        if not missing:
            complete.append(key)
            continue
        unset = (f"{missing[0]} is not set (litellm's {provider} provider reads it)"
                 if len(missing) == 1 else
                 f"none of {', '.join(missing)} is set (litellm's {provider} provider reads them)")
        out.append(f"{where}: {spec.where} ({spec.model}): no API key: {unset}; set it, name "
                   "the variable with api_key_env, or set CARRYON_API_KEY")
    _remember(memo, complete)
    return out


def check_provider_keys(cfg, roles: list[str]) -> None:
    """Raise ConfigError with the first entry whose provider key is missing (one line)."""
    problems = missing_provider_keys(cfg, roles)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise ConfigError(problems[0] + more)


def plan_warnings(cfg) -> list[str]:
    """``carryon plan``'s lines for every configured entry whose key is missing: a plan is
    made before keys are set, so it warns where ``carryon run`` will stop (no value shown)."""
    roles = [r for r, specs in cfg.all_specs().items() if specs]
    where = cfg.source_path or "config"
    named = [f"{where}: {s.where} ({s.model}): environment variable {s.api_key_env} is not set"
             for r in roles for s in cfg.role_specs(r)
             if s.api_key_env and not os.environ.get(s.api_key_env)
             and not os.environ.get("CARRYON_API_KEY")]
    return [f"warning: carryon run will refuse to start: {line}"
            for line in named + missing_provider_keys(cfg, roles)]
