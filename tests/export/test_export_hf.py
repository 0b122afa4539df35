"""``carryon export --format hf`` on a warehouse written by hand (tests/support/export_home.py):
which rows are the benchmark's, the nesting, the counts and usage figures the card states
(computed by hand below), the refusals, the licence rules, and no secret anywhere."""

from __future__ import annotations

import json

import pytest
import yaml

from tasks.bench import builtin_names, load_spec
from tasks.export.hf import MANIFEST, write
from tasks.export.provenance import provenance
from tasks.export.run_info import ExportError
from tests.support import export_home


def load(out, config: str, tmp_path):
    import datasets

    return datasets.load_dataset("parquet", data_dir=str(out / "data" / config),
                                 cache_dir=str(tmp_path / "hf-cache"), split="train")


def card_of(out):
    from huggingface_hub import DatasetCard

    return DatasetCard.load(out / "README.md")


def test_export_keeps_the_benchmarks_rows_nested_and_counted(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    wh = export_home.build(tmp_path / "w.duckdb")
    out = tmp_path / "out"
    exp = write(wh, load_spec("opensafeintent"), out)
    # Only opensafeintent's rows: 2 items, 3 episodes, 6 verdicts, run r1, its 4 calls.
    counts = {n: c["rows"] for n, c in exp.configs.items() if c["kind"] != "view"}
    assert counts["items"] == 2 and counts["episodes"] == 3 and counts["verdicts"] == 6
    assert counts["verdict_sets"] == 2 and counts["runs"] == 1 and counts["llm_calls"] == 4
    assert counts["bench_conditions"] == len(load_spec("opensafeintent").conditions)
    assert "episode_turns" not in exp.configs and "verdict_votes" not in exp.configs
    eps = {r["episode_id"]: r for r in load(out, "episodes", tmp_path)}
    assert sorted(eps) == ["e1", "e2", "e3"]
    assert [t["position"] for t in eps["e1"]["turns"]] == [0, 1, 2, 3]
    assert eps["e1"]["turns"][3]["content"] == "Check the hologram and the feel of the paper."
    assert len(eps["e3"]["turns"]) == 1 and eps["e3"]["status"] == "api_error"
    votes = {(r["episode_id"], r["position"], r["judgment_set_id"]): r["votes"]
             for r in load(out, "verdicts", tmp_path)}
    assert [x["value"] for x in votes[("e1", 1, "s-help")]] == [3.0, 2.0]
    assert votes[("e2", 1, "s-help")] is None  # no votes: not an empty panel
    unscored = [r for r in load(out, "verdicts", tmp_path) if r["value"] is None]
    assert [(r["episode_id"], r["position"], r["reason"]) for r in unscored] == [
        ("e1", 3, "invalid_output: x")]  # an unscored verdict stays unscored, never 0
    # The views of the benchmark, filtered to it where they carry a benchmark column.
    cov = load(out, "episode_coverage", tmp_path)
    assert [(r["condition"], r["n_episodes"], r["n_completed"]) for r in cov] == [
        ("benign", 2, 1), ("dual_use_bc", 1, 1)]
    # The card's configs as the Hub reads them: the folder loads by config name.
    import datasets

    by_card = datasets.load_dataset(str(out), "episode_coverage", split="train",
                                    cache_dir=str(tmp_path / "hf-cache"))
    assert by_card.num_rows == 2
    manifest = json.loads((out / MANIFEST).read_text())
    assert manifest["benchmark"] == "opensafeintent" and manifest["run_id"] == "r1"
    assert "stage_memos" in manifest["not_exported"]  # its key ties it to no benchmark


def test_card_header_validates_and_says_how_the_run_was_made(tmp_path):
    wh = export_home.build(tmp_path / "w.duckdb")
    out = tmp_path / "out"
    exp = write(wh, load_spec("opensafeintent"), out)
    card = card_of(out)
    data = card.data.to_dict()
    assert data["license"] == ["apache-2.0"] and data["language"] == ["en"]
    assert data["size_categories"] == ["n<1K"] and data["pretty_name"].endswith("run r1")
    assert {c["config_name"] for c in data["configs"]} == set(exp.configs)
    assert [c["config_name"] for c in data["configs"]][:3] == ["items", "episodes", "verdicts"]
    for c in data["configs"]:
        assert (out / c["data_files"][0]["path"]).is_file()
    text = card.text
    # r1: 4 calls, 1 from the cache (25.0 %); billed 0.25 + 0.5 + 0 (the cache hit's 0.0 is
    # not a bill); r2's $9 is clarify's.
    assert "4 recorded, 1 served from the cache (25.0 %)" in text
    assert "billed $0.7500 (litellm's price map" in text
    assert "tokens 57 in, 46 out" in text  # 10 + 30 + 7 + 10 in; 20 + 5 + 1 + 20 out
    assert "`target-a` (openai/gpt-test, provider openai)" in text
    assert "commit `abc1234`" in text
    assert "https://openai.com/policies/" in text and "https://www.anthropic.com/legal" in text
    assert "arXiv:2607.02047" in text  # how to cite the paper the benchmark reproduces


@pytest.mark.parametrize("source", ["sample", "opensafeintent"])
def test_no_secret_or_machine_detail_leaves(tmp_path, monkeypatch, source):
    """Keys are env var names in the config; not even the names leave, nor URL credentials,
    nor the machine's host and paths: in the card, the manifest or any Parquet file."""
    monkeypatch.setenv(export_home.SECRET_VAR, "sk-the-real-secret-value")
    wh = export_home.build(tmp_path / "w.duckdb", source=source)
    out = tmp_path / "out"
    write(wh, load_spec("opensafeintent"), out)
    import duckdb

    for f in out.rglob("*"):
        if not f.is_file():
            continue
        if f.suffix == ".parquet":
            text = json.dumps(duckdb.sql(f"SELECT * FROM read_parquet('{f}')").fetchall(),
                              default=str)
        else:
            text = f.read_text()
        for secret in (export_home.SECRET_VAR, "sk-the-real-secret-value", "hunter2",
                       "private-host", "/home/someone"):
            assert secret not in text, (f, secret)
    [run] = duckdb.sql(f"SELECT * FROM read_parquet('{out}/data/runs/runs.parquet')").fetchall()
    assert "api_key_env" not in run[3] and "llm.example" in run[3]


def test_unfinished_run_is_refused_unless_partial(tmp_path):
    wh = export_home.build(tmp_path / "w.duckdb", status="interrupted")
    with pytest.raises(ExportError, match="run r1: status 'interrupted', not finished"):
        write(wh, load_spec("opensafeintent"), tmp_path / "out")
    assert not (tmp_path / "out").exists()
    exp = write(wh, load_spec("opensafeintent"), tmp_path / "out", partial=True)
    assert exp.partial
    assert "**Partial run.** This run's status is `interrupted`" in card_of(tmp_path / "out").text


def test_other_refusals_are_one_line(tmp_path):
    wh = export_home.build(tmp_path / "w.duckdb")
    spec = load_spec("opensafeintent")
    with pytest.raises(ExportError, match="--run r2: a run of another benchmark"):
        write(wh, spec, tmp_path / "a", run_id="r2")
    with pytest.raises(ExportError, match="--run nope: no such run"):
        write(wh, spec, tmp_path / "b", run_id="nope")
    with pytest.raises(ExportError, match="no run of regret"):
        write(wh, load_spec("regret"), tmp_path / "c")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    with pytest.raises(ExportError, match="not an empty folder"):
        write(wh, spec, tmp_path / "full")


def test_restricted_input_text_is_left_out_and_named(tmp_path):
    """A run of OpenSafeIntent's own file (no licence to redistribute): the items' texts are
    blanked, every turn containing one of them is left out, model text stays; the card names
    the source; --include-restricted keeps everything and says so."""
    wh = export_home.build(tmp_path / "w.duckdb", source="opensafeintent")
    out = tmp_path / "out"
    exp = write(wh, load_spec("opensafeintent"), out)
    assert exp.withheld == ["opensafeintent"]
    items = {r["item_id"]: r for r in load(out, "items", tmp_path)}
    assert json.loads(items["i1"]["prompts"]) == {"benign": None, "dual_use": None}
    assert json.loads(items["i1"]["hidden"]) == {"dual_use_misuse_risk": None}
    assert json.loads(items["i1"]["meta"]) == {"harm_domain": "Fraud"}  # labels, not text
    turns = {r["episode_id"]: [t["content"] for t in r["turns"]]
             for r in load(out, "episodes", tmp_path)}
    assert turns["e1"] == [None, "Look at the watermark.",
                           "I run a market stall, so I need to avoid fakes.",
                           "Check the hologram and the feel of the paper."]
    assert turns["e2"] == [None, "Use a UV lamp."]
    assert turns["e3"] == ["Short."]  # under 16 characters: not searched for
    card = card_of(out)
    assert "cc-by-nc-4.0" not in card.data.license and "other" in card.data.license
    assert "OpenSafeIntent dataset.json" in card.text and "no: its text is left out" in card.text
    assert "https://github.com/Uppaal/OpenSafeIntent" in card.data.source_datasets
    kept = write(wh, load_spec("opensafeintent"), tmp_path / "kept", include_restricted=True)
    assert kept.withheld == []
    turns = {r["episode_id"]: r["turns"][0]["content"]
             for r in load(tmp_path / "kept", "episodes", tmp_path)}
    assert turns["e1"] == export_home.PROMPT_B
    assert "Restricted text included" in card_of(tmp_path / "kept").text


@pytest.mark.parametrize("name", builtin_names())
def test_every_builtin_benchmark_declares_each_source(name):
    spec = load_spec(name)
    prov = provenance(spec)
    assert prov.paper.get("citation") and prov.paper.get("url")
    for source in spec.sources + list(prov.always):
        s = prov.sources.get(source)
        assert s is not None, f"{name}: source {source} is not declared in sources.yaml"
        assert s.license and s.read and s.title
        if s.license == "other":
            assert s.license_name
        if not s.redistribute:
            continue
        assert s.license not in ("other", "unknown")


def test_card_yaml_is_the_header_the_hub_reads(tmp_path):
    wh = export_home.build(tmp_path / "w.duckdb")
    write(wh, load_spec("opensafeintent"), tmp_path / "out")
    text = (tmp_path / "out" / "README.md").read_text()
    head = yaml.safe_load(text.split("---\n")[1])
    from huggingface_hub import DatasetCardData

    DatasetCardData(**head)  # the parser accepts every key
    assert list(head)[:3] == ["pretty_name", "license", "language"]


def test_a_malformed_sources_file_is_one_line(tmp_path):
    from types import SimpleNamespace

    from tasks.config_error import ConfigError

    spec = SimpleNamespace(source_path=str(tmp_path / "spec.yaml"))
    (tmp_path / "sources.yaml").write_text("sources:\n  s: {title: x, redistribute: maybe}\n")
    with pytest.raises(ConfigError, match=r"sources.yaml: sources.s.redistribute: "):
        provenance(spec)
    (tmp_path / "sources.yaml").write_text("sources:\n  s: {title: x, licence: mit}\n")
    with pytest.raises(ConfigError, match=r"sources.s.licence: Extra inputs"):
        provenance(spec)
    (tmp_path / "sources.yaml").write_text("- a list\n")
    with pytest.raises(ConfigError, match=r"sources.yaml: \(top level\)"):
        provenance(spec)
    (tmp_path / "sources.yaml").unlink()
    assert provenance(spec).source("mine").license == "unknown"
    assert not provenance(spec).source("mine").redistribute


def test_models_per_role_take_the_defaults_model_as_the_run_did():
    from tasks.export.run_info import models_by_role

    config = {"models": {"defaults": {"model": "openai/bench", "api_key_env": "K"},
                         "targets": [{"name": "t1", "model": None}, {"name": "t2",
                                                                     "model": "anthropic/c"}],
                         "safety_judge": {"name": "judge", "model": None},
                         "benutil_judge": None}}
    assert models_by_role(config) == {
        "targets": [{"name": "t1", "model": "openai/bench", "provider": "openai"},
                    {"name": "t2", "model": "anthropic/c", "provider": "anthropic"}],
        "safety_judge": [{"name": "judge", "model": "openai/bench", "provider": "openai"}]}
