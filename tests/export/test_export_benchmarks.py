"""Every shipped benchmark, end to end: a run on the loopback server, exported as a Hugging
Face dataset and read back with ``datasets.load_dataset("parquet", data_dir=...)`` offline
(every count and every view's rows equal the warehouse's; the card's header parses with
huggingface_hub's dataset card parser and names a licence and a source for every input), as
Inspect AI logs read back with ``read_eval_log`` (one sample per completed episode, every
score the warehouse's verdict), and imported into a fresh home whose views equal the
original's."""

from __future__ import annotations

import asyncio
import json
import datetime as dt
import decimal
import math
from pathlib import Path

import pytest
import yaml

from tasks.bench import load_spec
from tasks.export.hf import benchmark_views, write
from tasks.export.importer import import_export
from tasks.export.inspect_logs import write_logs
from tasks.export.provenance import inputs_used, provenance
from tests.export.test_inspect_logs import check_logs
from tests.support.factories import base_config
from warehouse import Warehouse

ROOT = Path(__file__).resolve().parents[2]
# Small runs of each shipped config: the first items only.
LIMITS = {"opensafeintent": 1, "clarify": 4, "clarifymt": 2, "eyt": 1, "regret": 3}


def loopback_config(name: str, api_base: str, home: Path) -> dict:
    if name == "carryon":
        cfg = base_config(api_base, home)
        cfg["dataset"]["limit"] = 1
        cfg["flows"] = {"lengths": [4], "bc_per_length": 1, "nc_per_length": 1}
        return cfg
    cfg = yaml.safe_load((ROOT / "configs" / f"{name}.yaml").read_text())
    cfg["home"] = str(home)
    cfg["dataset"]["limit"] = LIMITS[name]
    cfg["models"]["defaults"].update(api_base=api_base, timeout_s=5, max_retries=2)
    cfg["gateway"] = {**cfg.get("gateway", {}), "backoff_base_s": 0.01, "backoff_max_s": 0.1}
    return cfg


def norm(v):
    """A value as both readers give it: numbers as rounded floats, times in UTC."""
    if isinstance(v, bool) or v is None or isinstance(v, str):
        return v
    if isinstance(v, (int, float, decimal.Decimal)):
        f = float(v)
        return "nan" if math.isnan(f) else round(f, 9)
    if isinstance(v, dt.datetime):
        return (v if v.tzinfo else v.replace(tzinfo=dt.timezone.utc)).astimezone(dt.timezone.utc)
    if isinstance(v, dict):
        return {k: norm(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [norm(x) for x in v]
    return v


def rows_of(wh, view: str, benchmark: str) -> list[dict]:
    cols = {r["column_name"] for r in wh.query(
        "SELECT column_name FROM information_schema.columns WHERE table_name = ?", [view])}
    where = f"WHERE benchmark = '{benchmark}'" if "benchmark" in cols else ""
    return [norm(r) for r in wh.query(f"SELECT * FROM {view} {where} ORDER BY ALL")]


def view_snapshot(wh, spec) -> dict:
    return {v: rows_of(wh, v, spec.name) for v in benchmark_views(spec)}


@pytest.mark.e2e
@pytest.mark.parametrize("name", ["carryon", "opensafeintent", "clarify", "clarifymt", "eyt",
                                  "regret"])
def test_a_loopback_run_exports_reads_back_and_imports(prefect_harness, llm_server, tmp_path,
                                                       monkeypatch, name):
    import datasets
    from huggingface_hub import DatasetCard

    from flows.carryon import carryon

    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(loopback_config(name, llm_server.api_base, tmp_path / "home")))
    asyncio.run(carryon(config=str(path)))
    spec = load_spec(name)
    wh = Warehouse(tmp_path / "home" / "warehouse.duckdb")
    [run] = wh.query("SELECT run_id, status FROM runs")
    assert run["status"] == "succeeded"

    out = tmp_path / "hf"
    exp = write(wh, spec, out)

    def load(config):
        return datasets.load_dataset("parquet", data_dir=str(out / "data" / config),
                                     cache_dir=str(tmp_path / "hf-cache"), split="train")

    # Every count: the items, episodes (with their turns) and verdicts (with their votes).
    count = lambda sql: wh.query(sql, [name])[0]["n"]  # noqa: E731
    items, episodes, verdicts = load("items"), load("episodes"), load("verdicts")
    assert items.num_rows == count("SELECT count(*) AS n FROM bench_items WHERE benchmark = ?") > 0
    if name == "carryon":  # its items carry the checklist they were judged against
        for it in items:
            hidden = json.loads(it["hidden"])
            assert hidden["checklist"] and hidden["checklist_version"]
        assert {"checklists", "checklist_items", "queries", "intents"} <= set(exp.configs)
    assert episodes.num_rows == count("SELECT count(*) AS n FROM episodes WHERE benchmark = ?") > 0
    assert sum(len(e["turns"] or []) for e in episodes) == count(
        "SELECT count(*) AS n FROM episode_turns JOIN episodes USING (episode_id) WHERE benchmark = ?")
    assert verdicts.num_rows == count(
        "SELECT count(*) AS n FROM verdicts JOIN episodes USING (episode_id) WHERE benchmark = ?") > 0
    assert sum(len(v["votes"] or []) for v in verdicts) == count(
        "SELECT count(*) AS n FROM verdict_votes JOIN episodes USING (episode_id) WHERE benchmark = ?")
    # Every metric: each view the report reads, row for row.
    views = [c for c, e in exp.configs.items() if e["kind"] == "view"]
    assert views and set(benchmark_views(spec)) >= {exp.configs[c]["view"] for c in views}
    for config in views:
        got = [norm(r) for r in load(config)]
        assert got == rows_of(wh, exp.configs[config]["view"], name), config

    # The card: the Hub's parser reads its header; a licence and a source for every input.
    card = DatasetCard.load(out / "README.md")
    configs = [json_row(r) for r in wh.query("SELECT config_json FROM runs")]
    used = inputs_used(provenance(spec), configs)
    assert used
    for s in used:
        assert s.license in card.data.license
        assert (s.url or s.name) in card.data.source_datasets
        assert s.title in card.text and s.license in card.text
    assert {c["config_name"] for c in card.data.configs} == set(exp.configs)

    # Inspect AI logs: one sample per completed episode, every score the warehouse's verdict.
    write_logs(wh, spec, tmp_path / "inspect")
    assert check_logs(wh, spec, tmp_path / "inspect") == count(
        "SELECT count(*) AS n FROM verdicts JOIN episodes USING (episode_id) "
        "WHERE benchmark = ? AND status = 'completed'")

    # carryon import: a fresh home whose metric views equal the original's.
    import_export(out, tmp_path / "imported")
    again = Warehouse(tmp_path / "imported" / "warehouse.duckdb")
    assert view_snapshot(again, spec) == view_snapshot(wh, spec)


def json_row(r) -> dict:
    return json.loads(r["config_json"])
