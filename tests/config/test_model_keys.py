"""A missing API key is a pre-flight error (tasks/model_keys.py): one line naming the entry
and the variable, before anything runs; never a key's value; loopback servers need none."""

from __future__ import annotations

import json
import socket

import pytest
import yaml
from typer.testing import CliRunner

from tasks import model_keys
from tasks.config import ConfigError, check_secrets, load_config
from tasks.model_keys import MEMO_NAME, litellm_missing, missing_provider_keys
from tasks.engine.run import preflight

PROVIDER_VARS = ("OPENAI_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY", "ANTHROPIC_API_KEY",
                 "ANTHROPIC_AUTH_TOKEN", "CARRYON_API_KEY")


@pytest.fixture(autouse=True)
def _no_provider_keys(monkeypatch):
    for var in PROVIDER_VARS:
        monkeypatch.delenv(var, raising=False)


def _config(tmp_path, targets, home=None, **models) -> str:
    home = home or tmp_path / "home"
    cfg = {"home": str(home), "models": {"targets": targets, **models}}
    path = tmp_path / "keys.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


def test_missing_provider_key_names_entry_and_variable(tmp_path):
    cfg = load_config(_config(tmp_path, [{"name": "a", "model": "openai/gpt-4o-mini"}]))
    with pytest.raises(ConfigError) as e:
        check_secrets(cfg, ["targets"])
    msg = str(e.value)
    assert "\n" not in msg
    assert "models.targets[0]" in msg and "openai/gpt-4o-mini" in msg
    assert "OPENAI_API_KEY is not set" in msg and "keys.yaml" in msg


def test_set_key_passes_and_its_value_is_never_written(tmp_path, monkeypatch):
    (tmp_path / "home").mkdir()
    monkeypatch.setenv("OPENAI_API_KEY", "sk-very-secret-value")
    cfg = load_config(_config(tmp_path, [{"name": "a", "model": "openai/gpt-4o-mini"}]))
    cfg.cache_path.mkdir(parents=True, exist_ok=True)
    check_secrets(cfg, ["targets"])
    memo = (cfg.cache_path / MEMO_NAME).read_text()
    assert "sk-very-secret-value" not in memo and "OPENAI_API_KEY" not in memo
    assert list(json.loads(memo).values()) == [True]


def test_either_gemini_variable_is_enough(tmp_path, monkeypatch):
    cfg = load_config(_config(tmp_path, [{"name": "g", "model": "gemini/gemini-2.5-flash"}]))
    with pytest.raises(ConfigError, match="none of .*GEMINI_API_KEY.* is set"):
        check_secrets(cfg, ["targets"])
    monkeypatch.setenv("GOOGLE_API_KEY", "g-secret")
    check_secrets(cfg, ["targets"])


@pytest.mark.parametrize("entry", [
    # a local OpenAI-compatible server: the gateway sends its own placeholder key
    {"name": "l", "model": "openai/local-smollm2", "api_base": "http://127.0.0.1:8765/v1"},
    {"name": "v", "model": "openai/qwen", "api_base": "http://localhost:8000/v1"},
    # credentials from outside the environment, or none needed
    {"name": "b", "model": "bedrock/anthropic.claude-3-haiku-20240307-v1:0"},
    {"name": "o", "model": "ollama/llama3"},
    # a provider litellm cannot route: the call says so, not pre-flight
    {"name": "x", "model": "x/y"},
])
def test_no_key_needed(tmp_path, entry):
    cfg = load_config(_config(tmp_path, [entry]))
    assert missing_provider_keys(cfg, ["targets"]) == []


def test_carryon_api_key_is_every_entrys_key(tmp_path, monkeypatch):
    cfg = load_config(_config(tmp_path, [{"name": "a", "model": "anthropic/claude-haiku-4-5"}]))
    with pytest.raises(ConfigError, match="ANTHROPIC_API_KEY is not set"):
        check_secrets(cfg, ["targets"])
    monkeypatch.setenv("CARRYON_API_KEY", "one-key")
    check_secrets(cfg, ["targets"])


def test_only_the_checked_roles(tmp_path):
    cfg = load_config(_config(tmp_path, [{"name": "l", "model": "openai/local",
                                          "api_base": "http://127.0.0.1:1/v1"}],
                              safety_judge={"model": "openai/gpt-4o-mini"}))
    check_secrets(cfg, ["targets"])  # the judge's stage is not selected
    with pytest.raises(ConfigError, match=r"models\.safety_judge.*OPENAI_API_KEY"):
        check_secrets(cfg, ["targets", "safety_judge"])


def test_litellm_check_makes_no_network_call(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("network call during the key check")

    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    assert litellm_missing("openai/gpt-4o-mini") == ("openai", ["OPENAI_API_KEY"])
    assert litellm_missing("gpt-4o-mini") == ("openai", ["OPENAI_API_KEY"])


def test_memo_skips_litellm_when_complete_but_never_remembers_a_missing_key(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-1")
    cfg = load_config(_config(tmp_path, [{"name": "a", "model": "openai/gpt-4o-mini"}]))
    cfg.cache_path.mkdir(parents=True)
    asked = []
    real = model_keys.litellm_missing
    monkeypatch.setattr(model_keys, "litellm_missing", lambda m: asked.append(m) or real(m))
    check_secrets(cfg, ["targets"])
    check_secrets(cfg, ["targets"])
    assert asked == ["openai/gpt-4o-mini"]  # the second run reads the memo: no litellm
    monkeypatch.delenv("OPENAI_API_KEY")  # another set of variable names: asked again
    for _ in range(2):
        with pytest.raises(ConfigError, match="OPENAI_API_KEY"):
            check_secrets(cfg, ["targets"])
    assert len(asked) == 3


def test_preflight_leaves_no_cache_folder_behind(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-1")
    path = _config(tmp_path, [{"name": "a", "model": "openai/gpt-4o-mini"}], home=tmp_path / "new")
    preflight(load_config(path), ["report"])
    assert not (tmp_path / "new").exists()


def test_carryon_run_stops_before_anything_runs(tmp_path, monkeypatch):
    from flows.cli import app

    monkeypatch.setenv("OPENAI_API_KEY", "sk-not-this-one")
    path = _config(tmp_path, [{"name": "l", "model": "openai/local", "api_base": "http://127.0.0.1:1/v1"}],
                   safety_judge={"model": "gemini/gemini-2.5-flash"},
                   benutil_judge={"model": "openai/local", "api_base": "http://127.0.0.1:1/v1"})
    res = CliRunner().invoke(app, ["run", "--config", path, "--stages", "verdicts"])
    assert res.exit_code == 2
    out = res.output.strip()
    assert "models.safety_judge" in out and "GEMINI_API_KEY" in out and len(out.splitlines()) == 1
    assert "sk-not-this-one" not in out
    assert not (tmp_path / "home" / "warehouse.duckdb").exists()


def test_plan_warns_where_run_would_stop(tmp_path):
    from tasks.engine.plan import make_plan

    path = _config(tmp_path, [{"name": "a", "model": "openai/gpt-4o-mini"},
                              {"name": "n", "model": "x/y", "api_key_env": "MY_UNSET_KEY_VAR"}])
    _, notes = make_plan(load_config(path), limit=1)
    warn = [n for n in notes if n.startswith("warning: carryon run will refuse")]
    assert len(warn) == 2
    assert any("MY_UNSET_KEY_VAR" in w and "models.targets[1]" in w for w in warn)
    assert any("OPENAI_API_KEY" in w and "models.targets[0]" in w for w in warn)
