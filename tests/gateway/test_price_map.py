"""litellm's price map read as a file (tasks/gateway/price_map.py): litellm's own answer, or
no answer, never another one; and read without importing litellm."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tasks.gateway import price_map
from tasks.gateway.prices import _litellm_info

ROOT = Path(__file__).resolve().parents[2]


def _config_models() -> set[str]:
    """Every model string of the shipped configs and examples."""
    found: set[str] = set()

    def walk(x):
        if isinstance(x, dict):
            if isinstance(x.get("model"), str):
                found.add(x["model"])
            for v in x.values():
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)

    for path in [*ROOT.glob("configs/*.yaml"), *ROOT.glob("examples/**/*.yaml")]:
        walk(yaml.safe_load(path.read_text(encoding="utf-8")))
    return found


def test_every_answer_is_litellms():
    """For every entry of the providers it answers for (as a user would write it), every
    model of the shipped configs and a few names nobody prices: the file's answer, where it
    gives one, is exactly what litellm's get_model_info gives."""
    entries = price_map._book()[0]
    models = _config_models() | {"openai/test-target-a", "together_ai/Qwen/Qwen3-32B",
                                 "gemini/gemini-2.5-flash-001", "openai/no-such-model-here"}
    for key, info in entries.items():
        p = info.get("litellm_provider")
        if p in price_map.PROVIDERS:
            models.add(key if key.startswith(p + "/") else f"{p}/{key}")
    answered = 0
    for model in sorted(models):
        got = price_map.lookup(model)
        if got is None:
            continue
        answered += 1
        assert got == _litellm_info(model), model
    # It must answer for nearly all of them, or the plan imports litellm after all.
    assert answered > 0.9 * len(models)
    # The paper's line-up: every model either priced by the project's table or answered here.
    from tasks.gateway.price_table import TABLE

    paper = [m for m in _models_of(ROOT / "configs" / "paper.yaml") if m not in TABLE]
    assert paper and all(price_map.lookup(m) is not None for m in paper)


def _models_of(path: Path) -> set[str]:
    found: set[str] = set()
    for entry in yaml.safe_load(path.read_text())["models"].values():
        for e in entry if isinstance(entry, list) else [entry]:
            if isinstance(e, dict) and "model" in e:
                found.add(e["model"])
    return found


@pytest.fixture
def small_map(tmp_path, monkeypatch):
    """A hand-written price map in litellm's format, read in place of litellm's."""
    doc = {
        "sample_spec": {"input_cost_per_token": 0.0},
        "gpt-x": {"litellm_provider": "openai", "input_cost_per_token": 1e-6,
                  "output_cost_per_token": 4e-6, "cache_read_input_token_cost": 2.5e-7},
        "gemini/flash-9": {"litellm_provider": "gemini", "input_cost_per_token": 3e-7,
                           "output_cost_per_token": 2.5e-6},
        "tts-z": {"litellm_provider": "openai", "output_cost_per_token": 1e-5},
        "dup-a": {"litellm_provider": "openai", "input_cost_per_token": 1e-6},
        "DUP-A": {"litellm_provider": "openai", "input_cost_per_token": 2e-6},
        "azure-only": {"litellm_provider": "azure", "input_cost_per_token": 1e-6},
        "claude-q-1": {"litellm_provider": "anthropic", "input_cost_per_token": 1e-6,
                       "output_cost_per_token": 5e-6},
        "fallback_generalizations": {"rules": [
            {"name": "route", "pattern": "^routed-", "model_info": {"litellm_provider": "openai"}},
            {"name": "priced", "pattern": "^rule-priced-",
             "model_info": {"input_cost_per_token": 9e-6, "mode": "chat"}},
            {"name": "fill", "pattern": "^claude-", "fill_missing_for_providers": ["anthropic"],
             "model_info": {"cache_read_input_token_cost": 1e-7}},
        ]},
    }
    path = tmp_path / price_map.FILE
    path.write_text(json.dumps(doc))
    monkeypatch.setattr(price_map, "map_path", lambda: path)
    price_map._book.cache_clear()
    yield
    price_map._book.cache_clear()


def test_hits_misses_and_where_it_will_not_answer(small_map):
    # Hits: the whole string, or the name after the provider, without case, that provider's.
    assert price_map.lookup("openai/gpt-x") == {"input_cost_per_token": 1e-6,
                                                "output_cost_per_token": 4e-6,
                                                "cache_read_input_token_cost": 2.5e-7}
    assert price_map.lookup("openai/GPT-X") == price_map.lookup("openai/gpt-x")
    assert price_map.lookup("gemini/flash-9") == {"input_cost_per_token": 3e-7,
                                                  "output_cost_per_token": 2.5e-6}
    # A rate the entry lacks reads as 0, as litellm reads it (no cached rate: none).
    assert price_map.lookup("openai/tts-z") == {"input_cost_per_token": 0,
                                                "output_cost_per_token": 1e-5}
    # A miss litellm cannot turn into a hit: no price.
    assert price_map.lookup("openai/unheard-of") == {}
    assert price_map.lookup("openai/routed-thing") == {}  # a routing rule: no price
    # Not sure: ask litellm.
    assert price_map.lookup("openai/dup-a") is None  # two keys differ only by case
    assert price_map.lookup("openai/azure-only") is None  # another provider's entry
    assert price_map.lookup("openai/gpt-x-2099-01-01") is None  # a shorter key: stripped names
    assert price_map.lookup("openai/rule-priced-1") is None  # a rule that carries a price
    assert price_map.lookup("anthropic/claude-q-1") is None  # a rule fills its cached rate
    assert price_map.lookup("vertex_ai/gpt-x") is None  # a provider it does not answer for
    assert price_map.lookup("gpt-x") is None  # no provider: litellm infers one


def test_no_map_file_means_no_answer(tmp_path, monkeypatch):
    monkeypatch.setattr(price_map, "map_path", lambda: None)
    price_map._book.cache_clear()
    try:
        assert price_map.lookup("openai/gpt-4o") is None
    finally:
        price_map._book.cache_clear()


def test_rates_come_without_importing_litellm(tmp_path):
    """A model priced only by litellm's map, no memo file: the rates, and litellm never
    imported (it costs seconds)."""
    code = ("import sys\n"
            "from tasks.gateway.prices import rates\n"
            "from tests.support.batch import _Server, spec_for\n"
            "r = rates(spec_for(_Server, model='openai/gpt-4o-mini'))\n"
            "print(r.input * 1e6, r.output * 1e6, 'litellm' in sys.modules)\n")
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         cwd=ROOT, check=True).stdout.split()
    assert out[2] == "False"
    assert (float(out[0]), float(out[1])) == pytest.approx((0.15, 0.6))
