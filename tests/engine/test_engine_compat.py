"""Homes written by earlier code rerun under today's.

``tests/fixtures/compat_home/`` holds one home in which the six shipped benchmarks ran
(CarryOnBench, clarify, OpenSafeIntent, EYT, regret, ClarifyMT; written at 53ee0d1), its
configs and every view's rows as the code that wrote it computed them; its ``make.py`` writes
it again from any checkout. Rerun under
today's code it must send 0 requests and give identical rows in every view: the gate for any
change of the engine, the warehouse or the report.

``tests/fixtures/pre_engine/`` holds an older home (CarryOnBench only, written at commit
5b0e871, before the benchmark spec and the episode engine: an older warehouse schema and a
cache of pickled values), against the loopback server on port 18791. Its cache is converted
first, as docs/results.md tells a user to (``carryon cache convert``). Its prompts predate the
fences around model-written text and the answer formats that describe their fields, changes
of rule made on purpose: the targets' answers to the bare query (their first turns, whose
prompt is the query itself) still come from its cache, the calls whose prompts changed
(the intent statement and what follows from it, the simulator, the judges) are sent once
more, and a second rerun sends nothing.

The cache key holds the api_base, so each rerun's server listens on its fixture's port.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
import tarfile
from pathlib import Path

import pytest
import yaml

from flows.carryon import carryon
from tasks.config import load_config
from tasks.gateway.cache import convert_legacy
from tests.support.factories import rounded
from tests.support.llm_server import LLMServer
from warehouse import Warehouse

pytestmark = pytest.mark.e2e

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "pre_engine"
PORT = 18791  # the port the fixture's cache keys were made with
# config_hash of the fixture's config before the spec existed (run ids embed it).
PRE_ENGINE_CONFIG_HASH = "931e92e2b22e051a"
COMPAT = Path(__file__).resolve().parents[1] / "fixtures" / "compat_home"
COMPAT_PORT = 18792  # tests/fixtures/compat_home/make.py's
BENCHMARKS = ("carryon", "clarify", "opensafeintent", "eyt", "regret", "clarifymt")


def _views(wh, names) -> dict:
    """Each view's rows as sorted JSON, floats to 9 decimals (tests/support/factories.py ``rounded``:
    a mean's last bit depends on the order DuckDB met the rows)."""
    out = {}
    for v in names:
        rows = wh.query(f"SELECT * FROM {v}")
        out[v] = sorted(json.dumps(rounded(r), sort_keys=True, default=str) for r in rows)
    return out


def _expected() -> dict:
    """views.json as the code that wrote the home computed it, floats as ``_views`` has them."""
    return {v: sorted(json.dumps(rounded(json.loads(r)), sort_keys=True) for r in rows)
            for v, rows in json.loads((COMPAT / "views.json").read_text()).items()}


def _home(tmp_path, tarball: Path) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    with tarfile.open(tarball) as tar:
        tar.extractall(home, filter="data")
    return home


def _config(tmp_path, source: Path, home: Path, name: str = "config.yaml") -> Path:
    cfg = yaml.safe_load(source.read_text())
    cfg["home"] = str(home)
    path = tmp_path / name
    path.write_text(yaml.safe_dump(cfg))
    return path


@pytest.fixture
def compat_home(tmp_path):
    home = _home(tmp_path, COMPAT / "home.tar.gz")
    return home, {b: _config(tmp_path, COMPAT / f"{b}.yaml", home, f"{b}.yaml") for b in BENCHMARKS}


def test_config_hash_unchanged_by_the_spec():
    # The fixture's config as written (its home path is part of the hash), and the shipped
    # configs as they hashed before the spec and the role table: adding a role must not move them.
    assert load_config(FIXTURE / "config.yaml").config_hash() == PRE_ENGINE_CONFIG_HASH
    root = Path(__file__).resolve().parents[2]
    # configs/demo.yaml changed on purpose when the guard's prompt began to fence the answer it
    # reads: its seeded guard then dropped the demo's one answer, and seed 5 keeps it (the hash
    # was 91a86d9cc1d66b94 before). It changed again on purpose with the xllamacpp server
    # (issue #33): new seeds, lengths 4 and 6 with one BC and one NC conversation each, and
    # judging.benutil_quote_choices (24925b1f8dc2f0a6 before).
    assert load_config(root / "configs" / "demo.yaml").config_hash() == "1a6b62c874ce9fb7"
    # configs/paper.yaml changed on purpose when it gained Table 2's fourteen targets (it held
    # eight, two of them ensemble-only): its hash was 680e0cf7aedcb6a5 before. Their paper_name
    # labels are not in the hash.
    assert load_config(root / "configs" / "paper.yaml").config_hash() == "2df518ad3866e659"


def _run(path: Path, port: int) -> tuple[dict, dict]:
    """Run the config against the loopback server on ``port``: (summary, requests by role)."""
    with socket.socket() as s:
        if s.connect_ex(("127.0.0.1", port)) == 0:
            pytest.fail(f"port {port} is taken: this test's cache keys need the loopback server there")
    server = LLMServer().start(port=port)
    try:
        summary = asyncio.run(carryon(config=str(path)))
    finally:
        server.stop()
    return summary, dict(server.counts)


def _rerun(path: Path, port: int = COMPAT_PORT) -> dict:
    """Rerun and assert it sent nothing (every answer from the home's cache)."""
    summary, counts = _run(path, port)
    assert counts.get("total", 0) == 0 and summary["requests"] == 0, counts
    return summary


def test_home_of_the_six_benchmarks_reruns_with_zero_requests_and_identical_views(
        prefect_harness, compat_home):
    home, paths = compat_home
    for bench in BENCHMARKS:
        assert _rerun(paths[bench])["cache_hits"] > 0, bench
    expected = _expected()
    got = _views(Warehouse(home / "warehouse.duckdb"), sorted(expected))
    assert {v for v in expected if expected[v]} >= {
        "model_summary", "conversation_scores", "turn_scores", "clarify_summary", "osi_summary",
        "episode_verdicts", "eyt_ficr", "regret_summary", "clarifymt_summary"}
    # Rule change (CarryOnBench on the engine): its conversations are episodes now, so the
    # engine's episode_coverage counts them too; every other row is as it was.
    carryon = [r for r in got["episode_coverage"] if json.loads(r)["benchmark"] == "carryon"]
    got["episode_coverage"] = [r for r in got["episode_coverage"] if r not in carryon]
    assert {(json.loads(r)["target"], json.loads(r)["condition"], json.loads(r)["n_completed"])
            for r in carryon} == {
        (r["target"], r["condition"], r["n"]) for r in Warehouse(home / "warehouse.duckdb").query(
            "SELECT target, condition, count(*) AS n FROM conversations "
            "WHERE status = 'completed' GROUP BY ALL")}
    # Rule change (CarryOnBench's judging on the engine's verdicts stage): its judgments are
    # verdicts now. Its safety set is one set like any engine judge's, so episode_verdicts
    # lists its safety verdicts, each as safety_judgments gives it, and selected_verdict_sets
    # the set; its Ben-Util sets hash the checklist versions they judged (item_version), are
    # chosen per query by its own views (R1) and are left out of the generic views (E1).
    # Verdict sets gained columns (judges, item_version, args). Every other row is as it was.
    wh = Warehouse(home / "warehouse.duckdb")
    carryon = [json.loads(r) for r in got["episode_verdicts"]
               if json.loads(r)["benchmark"] == "carryon"]
    got["episode_verdicts"] = [r for r in got["episode_verdicts"]
                               if json.loads(r)["benchmark"] != "carryon"]
    safety = {(r["c"], r["p"], "score", r["v"]) for r in wh.query(
        "SELECT conversation_id AS c, position AS p, CAST(score AS DOUBLE) AS v "
        "FROM safety_judgments")}
    assert len(safety) > 10 and {(r["episode_id"], r["position"], r["measure"], r["value"])
                                 for r in carryon} == safety
    sets = [json.loads(r) for r in got["selected_verdict_sets"]]
    assert [r["judgment_set_id"] for r in sets if r["benchmark"] == "carryon"] == [
        r["judgment_set_id"] for r in wh.query(
            "SELECT judgment_set_id FROM selected_judgment_sets WHERE kind = 'safety'")]
    got["selected_verdict_sets"] = sorted(
        json.dumps({k: v for k, v in r.items() if k not in ("judges", "item_version", "args")},
                   sort_keys=True) for r in sets if r["benchmark"] != "carryon")
    for name in sorted(expected):
        assert got[name] == expected[name], f"view {name} changed on the compatibility home"


RENAMED = {"BC": "clarify", "NC": "plain", "oracle": "informed"}
CARRYON_SPEC = Path(__file__).resolve().parents[2] / "tasks" / "benchmarks" / "carryon" / "spec.yaml"


def test_renamed_conditions_keep_cache_and_numbers(prefect_harness, compat_home, tmp_path):
    # Conditions are data: a CarryOnBench spec that names its conditions otherwise reruns the
    # same home from the cache (ids and sample keys never hold a condition's name), stores
    # the spec's names, and the views give the same numbers under them.
    home, paths = compat_home
    path = paths["carryon"]
    spec = yaml.safe_load(CARRYON_SPEC.read_text())
    for c in spec["conditions"]:
        c["name"] = RENAMED[c["name"]]
    spec["sample_keys"]["oracle"] = RENAMED[spec["sample_keys"]["oracle"]]
    spec_file = tmp_path / "renamed.yaml"
    spec_file.write_text(yaml.safe_dump(spec))
    # A spec's views are beside it: the copy takes CarryOnBench's along.
    for name in ("views.sql", "migrate.sql", "migrate_judgments.sql"):
        shutil.copy(CARRYON_SPEC.with_name(name), tmp_path / name)
    cfg = yaml.safe_load(path.read_text())
    cfg["benchmark"] = str(spec_file)
    path.write_text(yaml.safe_dump(cfg))
    expected = _expected()
    _rerun(path)
    wh = Warehouse(home / "warehouse.duckdb")
    assert {r["condition"] for r in wh.query("SELECT DISTINCT condition FROM conversations")} \
        == set(RENAMED.values())
    assert _views(wh, ["model_summary"])["model_summary"] == expected["model_summary"]
    # The per-conversation views carry the new names and otherwise the same rows.
    def renamed(rows):
        out = []
        for r in rows:
            d = json.loads(r)
            d["condition"] = RENAMED.get(d["condition"], d["condition"])
            out.append(json.dumps(d, sort_keys=True, default=str))
        return sorted(out)
    got = _views(wh, ["conversation_scores"])["conversation_scores"]
    assert got == renamed(expected["conversation_scores"])
    report = (home / "reports").glob("*/report.md")
    text = max(report, key=lambda p: p.stat().st_mtime).read_text()
    assert "the spec's `clarify` is BC" in text


def test_pre_engine_home_converts_and_keeps_the_answers_its_prompts_still_ask_for(
        prefect_harness, tmp_path):
    home = _home(tmp_path, FIXTURE / "home.tar.gz")
    assert convert_legacy(home / "cache") > 0  # its answers were pickles
    path = _config(tmp_path, FIXTURE / "config.yaml", home)
    wh = Warehouse(home / "warehouse.duckdb")
    before = wh.query("SELECT count(*) AS n FROM conversations")[0]["n"]
    summary, counts = _run(path, PORT)
    # Unchanged prompts: the targets' answers to the bare query are read from the old cache.
    assert summary["cache_hits"] > 0
    targets = wh.query("SELECT count(*) AS n, count(*) FILTER (WHERE cache_hit) AS hits "
                       "FROM llm_calls WHERE role = 'targets' AND run_id = ?",
                       [summary["run_id"]])[0]
    assert targets["hits"] > 0 and targets["hits"] < targets["n"]
    # The prompts that now fence model-written text were sent again, once.
    assert counts.get("user_simulator", 0) > 0 and counts.get("benutil_judge", 0) > 0
    assert wh.query("SELECT count(*) AS n FROM conversations")[0]["n"] == before
    assert _views(wh, ["model_summary"])["model_summary"]
    _rerun(path, PORT)
