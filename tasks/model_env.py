"""The pre-flight check of the keys model entries name, and the embedded local model.

Keys are never stored: ``api_key_for`` (tasks/model_entry.py) reads the variable an entry
names (or CARRYON_API_KEY, the key of every entry) when a call is made; ``check_secrets``
fails before any work when a named variable is unset, or a provider's own variable is
(tasks/model_keys.py).
"""

from __future__ import annotations

import os

from tasks.config_error import ConfigError

# The embedded local model (`carryon local-model`) is served under "openai/local-<name>"; a run
# that uses it for any role is a smoke run of the pipeline, and its outputs say so.
LOCAL_MODEL_PREFIX = "openai/local-"


def is_smoke_model(model: str | None) -> bool:
    return bool(model) and str(model).startswith(LOCAL_MODEL_PREFIX)


def check_secrets(cfg, roles: list[str]) -> None:
    """Fail before any work if a named key variable is unset, or an entry that names none
    goes to a provider whose key litellm finds unset (tasks/model_keys.py); the one-line
    message names the entry and the variable, never a value."""
    for role in roles:
        for spec in cfg.role_specs(role):
            if spec.api_key_env and not os.environ.get(spec.api_key_env) and not os.environ.get("CARRYON_API_KEY"):
                raise ConfigError(
                    f"{cfg.source_path or 'config'}: {spec.where} ({spec.model}): environment "
                    f"variable {spec.api_key_env} is not set"
                )
    from tasks.model_keys import check_provider_keys

    check_provider_keys(cfg, roles)
