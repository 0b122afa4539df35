"""Config loading: the documented example works, errors name the file and the field."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tasks.config import ConfigError, api_key_for, check_secrets, load_config

EXAMPLE = """\
home: .carryon            # cache/, warehouse.duckdb, reports/ live here; env CARRYON_HOME overrides
seed: 0
dataset: {source: sample, path: null, limit: 3}
flows: {lengths: [4, 6, 8, 10, 12], bc_per_length: 2, nc_per_length: 1}
models:
  defaults: {temperature: 0.0, max_tokens: 1024, max_concurrency: 16}
  targets: [{name: target-a, model: openai/target-a}]
  user_simulator: {model: openai/sim, temperature: 1.0}
  intent_rewriter: {model: openai/helper}
  ensemble: [{model: openai/ens-1}, {model: openai/ens-2}, {model: openai/ens-3}]
  wildguard: {model: openai/wildguard, mode: chat}
  decomposer: {model: openai/helper}
  merger: {model: openai/helper}
  misuse_filter: {model: openai/helper}
  benutil_judge: {model: openai/judge}
  safety_judge: {model: openai/judge}
"""


def _write(tmp_path, text, name="c.yaml"):
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return p


def test_issue_example_loads_with_defaults_merged(tmp_path):
    cfg = load_config(_write(tmp_path, EXAMPLE))
    sim = cfg.role_spec("user_simulator")
    assert sim.temperature == 1.0 and sim.max_tokens == 1024 and sim.max_concurrency == 16
    assert [s.model for s in cfg.role_specs("ensemble")] == ["openai/ens-1", "openai/ens-2", "openai/ens-3"]
    assert cfg.role_spec("targets").name == "target-a"
    assert cfg.role_spec("wildguard").mode == "chat"
    assert cfg.dataset.limit == 3 and cfg.scripts.lengths == [4, 6, 8, 10, 12]


def test_scripts_key_and_its_old_name_flows_are_one_key(tmp_path):
    # `scripts:` is the key; `flows:` (its name before) reads the same and stays the stored
    # name, so a config keeps its hash (and its run ids) whichever it uses.
    old = load_config(_write(tmp_path, EXAMPLE))
    new = load_config(_write(tmp_path, EXAMPLE.replace("flows: {lengths: [4, 6, 8, 10, 12]",
                                                       "scripts: {lengths: [4, 6, 8, 10, 12]")))
    assert new.scripts == old.scripts and new.config_hash() == old.config_hash()
    assert "flows" in new.model_dump(mode="json") and "scripts" not in new.model_dump(mode="json")
    both = EXAMPLE.replace("flows: {", "scripts: {lengths: [4]}\nflows: {", 1)
    with pytest.raises(ConfigError, match="flows"):
        load_config(_write(tmp_path, both))


def test_shipped_configs_load():
    for name in ("configs/demo.yaml", "configs/paper.yaml"):
        load_config(name)


@pytest.mark.parametrize("text, field", [
    ("seed: zero\n", "seed"),
    ("flows: {lengths: [5]}\n", "flows.lengths"),
    ("models: {targets: [{name: a}]}\n", "models.targets[0].model"),
    ("models: {targets: [{model: m, temprature: 0.5}]}\n", "models.targets.0.temprature"),
    ("dataset: {source: casebench}\n", "dataset"),
    ("unknown_key: 1\n", "unknown_key"),
])
def test_bad_config_names_file_and_field(tmp_path, text, field):
    path = _write(tmp_path, text)
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert str(path) in str(e.value) and field in str(e.value)


@pytest.mark.parametrize("text, line", [
    ("gatway: {}\n", "gatway: Extra inputs are not permitted (did you mean 'gateway'?)"),
    ("models: {targets: [{model: m, temprature: 0.5}]}\n",
     "models.targets.0.temprature: Extra inputs are not permitted (did you mean 'temperature'?)"),
    ("dataset: {source: sample, limt: 3}\n",
     "dataset.limt: Extra inputs are not permitted (did you mean 'limit'?)"),
    ("limits: {prompt_turn_char: 5}\n", "(did you mean 'prompt_turn_chars'?)"),
    ("benchmark: regret\nmodels: {act_jugde: {model: m}}\n",
     "models.act_jugde: not a role of benchmark regret (did you mean 'act_judge'?)"),
    ("zzzz_qqq: 1\n", "zzzz_qqq: Extra inputs are not permitted"),  # nothing near: no guess
])
def test_a_mistyped_key_names_the_nearest_valid_one(tmp_path, text, line):
    with pytest.raises(ConfigError) as e:
        load_config(_write(tmp_path, text))
    assert line in str(e.value) and len(str(e.value).splitlines()) == 1
    assert ("did you mean" in str(e.value)) == ("did you mean" in line)


def test_unreadable_and_invalid_yaml(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.yaml")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(_write(tmp_path, "a: [1, 2\n"))
    with pytest.raises(ConfigError, match="mapping"):
        load_config(_write(tmp_path, "- 1\n- 2\n"))


def test_duplicate_target_names(tmp_path):
    with pytest.raises(ConfigError, match="duplicate target"):
        load_config(_write(tmp_path, "models: {targets: [{name: a, model: x}, {name: a, model: y}]}\n"))
    # Any role's list: a name keys its rows (answer ids, votes), so it is refused when loaded.
    with pytest.raises(ConfigError, match=r"models.ensemble: duplicate entry name\(s\) \['x'\]"):
        load_config(_write(tmp_path, "models: {ensemble: [{model: x}, {model: x}]}\n"))


def test_env_overrides(tmp_path, monkeypatch):
    cfg = load_config(_write(tmp_path, EXAMPLE))
    monkeypatch.setenv("CARRYON_HOME", str(tmp_path / "h"))
    monkeypatch.setenv("CARRYON_API_BASE", "http://127.0.0.1:9999/v1")
    monkeypatch.setenv("CARRYON_API_KEY", "k-123")
    assert cfg.home_path == tmp_path / "h"
    spec = cfg.role_spec("targets")
    assert spec.api_base == "http://127.0.0.1:9999/v1"
    assert api_key_for(spec) == "k-123"


def test_missing_key_variable_is_named(tmp_path, monkeypatch):
    monkeypatch.delenv("MY_PROVIDER_KEY", raising=False)
    cfg = load_config(_write(tmp_path, "models: {targets: [{name: a, model: x/y, api_key_env: MY_PROVIDER_KEY}]}\n"))
    with pytest.raises(ConfigError, match="MY_PROVIDER_KEY is not set"):
        check_secrets(cfg, ["targets"])
    monkeypatch.setenv("MY_PROVIDER_KEY", "secret")
    check_secrets(cfg, ["targets"])
    assert api_key_for(cfg.role_spec("targets")) == "secret"


def test_config_hash_ignores_nothing_secret_and_changes_with_content(tmp_path):
    a = load_config(_write(tmp_path, EXAMPLE, "a.yaml"))
    b = load_config(_write(tmp_path, EXAMPLE.replace("seed: 0", "seed: 1"), "b.yaml"))
    assert a.config_hash() != b.config_hash()
    assert a.config_hash() == load_config(_write(tmp_path, EXAMPLE, "c.yaml")).config_hash()


# The hash of every shipped config and compatibility fixture, as it was before the config's
# sections and the roles of the first release moved beside their components (the checklists
# stage, the scripted user, the judges, CarryOnBench): a run id embeds it, so a move that
# changed one would orphan every run of that config.
HASHES = {
    "configs/clarify.yaml": "3f8da8f23e0bf43a", "configs/clarifymt.yaml": "7756372b6275bfa7",
    "configs/demo.yaml": "1a6b62c874ce9fb7", "configs/eyt.yaml": "a672c9b7f90f2306",
    "configs/opensafeintent.yaml": "9d8eda2ef10968fa", "configs/paper.yaml": "2df518ad3866e659",
    "configs/regret.yaml": "0c2a1dee98f7170e",
    "tests/fixtures/compat_home/carryon.yaml": "fd8cae61ec678243",
    "tests/fixtures/compat_home/clarify.yaml": "718217843d26036c",
    "tests/fixtures/compat_home/clarifymt.yaml": "299b1fca9217bf6f",
    "tests/fixtures/compat_home/eyt.yaml": "29727f11a8e328b6",
    "tests/fixtures/compat_home/opensafeintent.yaml": "ba652113fd92cac1",
    "tests/fixtures/compat_home/regret.yaml": "5af0c941dabbebc1",
    "tests/fixtures/pre_engine/config.yaml": "931e92e2b22e051a",
}


@pytest.mark.parametrize("path", sorted(HASHES))
def test_config_hashes_are_unchanged_by_the_move_of_sections_and_roles(path):
    root = Path(__file__).resolve().parents[2]
    assert load_config(root / path).config_hash() == HASHES[path]


def test_a_sister_config_keeps_carryon_and_the_stages_keys_in_its_hash(tmp_path):
    # The first release hashed every section and role: a config of another benchmark keeps
    # them (at their defaults) although that benchmark calls none of them.
    path = tmp_path / "c.yaml"
    path.write_text("benchmark: clarify\nmodels: {targets: [{model: openai/t}]}\n")
    cfg = load_config(path)
    doc = cfg.model_dump(mode="json")
    assert doc["checklists"] == {"min_harmless": 3, "max_items": 23}
    assert doc["flows"] == {"lengths": [4, 6, 8, 10, 12], "bc_per_length": 2,
                            "nc_per_length": 1, "share_prefix": True}
    assert doc["dataset"]["exclude_categories"][0] == "child-related crimes"
    assert doc["models"]["intent_rewriter"] is None and doc["models"]["ensemble"] == []
    # An old key a config may still write for a section: the same meaning.
    path.write_text("benchmark: carryon\nflows: {lengths: [4]}\nscripts_extra: 1\n")
    with pytest.raises(ConfigError, match=r"scripts_extra: Extra inputs are not permitted"):
        load_config(path)
    path.write_text("benchmark: carryon\nflows: {lengths: [4]}\n")
    assert load_config(path).scripts.lengths == [4]
