"""A home written before the benchmark spec and the episode engine existed reruns with 0
requests and identical views.

``tests/fixtures/pre_engine/`` holds such a home (warehouse + response cache, written by
``carryon run --config tests/fixtures/pre_engine/config.yaml`` at commit 5b0e871 against the
loopback server on port 18791: 2 sample queries, 2 targets, lengths 4 and 6), the config,
and every view's rows as that version computed them (``views.json``). The cache key holds
the api_base, so the server must listen on the same port.

``tests/fixtures/sister_homes/`` holds a home of the sister benchmarks (clarify and
OpenSafeIntent) written before the component registry, with its configs and views; its
``make.py`` writes it again from any checkout.

Both caches were written when values were pickles: each test converts its copy first, as the
README tells a user to (``carryon cache convert``), and the rerun then needs nothing else.
"""

from __future__ import annotations

import asyncio
import json
import socket
import tarfile
from pathlib import Path

import pytest
import yaml

from flows.carryon import carryon
from tasks.config import load_config
from tasks.gateway.cache import convert_legacy
from tests.llm_server import LLMServer
from warehouse import Warehouse

pytestmark = pytest.mark.e2e

FIXTURE = Path(__file__).parent / "fixtures" / "pre_engine"
PORT = 18791  # the port the fixture's cache keys were made with
# config_hash of the fixture's config before the spec existed (run ids embed it).
PRE_ENGINE_CONFIG_HASH = "931e92e2b22e051a"


def _views(wh, names) -> dict:
    out = {}
    for v in names:
        rows = wh.query(f"SELECT * FROM {v}")
        out[v] = sorted(json.dumps(r, sort_keys=True, default=str) for r in rows)
    return out


@pytest.fixture
def old_home(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    with tarfile.open(FIXTURE / "home.tar.gz") as tar:
        tar.extractall(home, filter="data")
    assert convert_legacy(home / "cache") > 0  # its answers were pickles
    cfg = yaml.safe_load((FIXTURE / "config.yaml").read_text())
    cfg["home"] = str(home)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return home, path


def test_config_hash_unchanged_by_the_spec():
    # The fixture's config as written (its home path is part of the hash), and the shipped
    # configs as they hashed before the spec and the role table: adding a role must not move them.
    assert load_config(FIXTURE / "config.yaml").config_hash() == PRE_ENGINE_CONFIG_HASH
    root = Path(__file__).parent.parent
    assert load_config(root / "configs" / "demo.yaml").config_hash() == "91a86d9cc1d66b94"
    # configs/paper.yaml changed on purpose when it gained Table 2's fourteen targets (it held
    # eight, two of them ensemble-only): its hash was 680e0cf7aedcb6a5 before. Their paper_name
    # labels are not in the hash.
    assert load_config(root / "configs" / "paper.yaml").config_hash() == "2df518ad3866e659"


def _rerun(path: Path, port: int = PORT) -> dict:
    """Run the config against the loopback server on the fixture's port; assert it sent
    nothing (every answer from the fixture's cache)."""
    with socket.socket() as s:
        if s.connect_ex(("127.0.0.1", port)) == 0:
            pytest.fail(f"port {port} is taken: this test's cache keys need the loopback server there")
    server = LLMServer().start(port=port)
    try:
        summary = asyncio.run(carryon(config=str(path)))
    finally:
        server.stop()
    assert server.counts["total"] == 0 and summary["requests"] == 0
    return summary


def test_pre_engine_home_reruns_with_zero_requests_and_identical_views(prefect_harness, old_home):
    home, path = old_home
    expected = json.loads((FIXTURE / "views.json").read_text())
    summary = _rerun(path)
    assert summary["cache_hits"] > 0
    wh = Warehouse(home / "warehouse.duckdb")
    got = _views(wh, sorted(expected))
    for name in sorted(expected):
        assert got[name] == expected[name], f"view {name} changed on the pre-engine home"


RENAMED = {"BC": "clarify", "NC": "plain", "oracle": "informed"}


def test_renamed_conditions_keep_cache_and_numbers(prefect_harness, old_home, tmp_path):
    # Conditions are data: a CarryOnBench spec that names its conditions otherwise reruns the
    # same home from the cache (ids and sample keys never hold a condition's name), stores
    # the spec's names, and the views give the same numbers under them.
    home, path = old_home
    spec = yaml.safe_load((Path(__file__).parent.parent / "tasks" / "benchmarks" / "carryon" / "spec.yaml")
                          .read_text())
    for c in spec["conditions"]:
        c["name"] = RENAMED[c["name"]]
    spec_file = tmp_path / "renamed.yaml"
    spec_file.write_text(yaml.safe_dump(spec))
    cfg = yaml.safe_load(path.read_text())
    cfg["benchmark"] = str(spec_file)
    path.write_text(yaml.safe_dump(cfg))
    expected = json.loads((FIXTURE / "views.json").read_text())
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


SISTERS = Path(__file__).parent / "fixtures" / "sister_homes"
SISTERS_PORT = 18792  # tests/fixtures/sister_homes/make.py's


def test_sister_benchmarks_home_reruns_with_zero_requests_and_identical_views(prefect_harness,
                                                                               tmp_path):
    # clarify and OpenSafeIntent, run into one home by the code before the component
    # registry, target policies and benchmark folders (tests/fixtures/sister_homes/make.py):
    # rerun under today's code, every call comes from the cache and every view (the engine's,
    # clarify_*, osi_*, and CarryOnBench's, empty here) holds the same rows.
    home = tmp_path / "home"
    home.mkdir()
    with tarfile.open(SISTERS / "home.tar.gz") as tar:
        tar.extractall(home, filter="data")
    convert_legacy(home / "cache")  # a no-op once make.py has rewritten it with JSON values
    for bench in ("clarify", "opensafeintent"):
        cfg = yaml.safe_load((SISTERS / f"{bench}.yaml").read_text())
        cfg["home"] = str(home)
        path = tmp_path / f"{bench}.yaml"
        path.write_text(yaml.safe_dump(cfg))
        summary = _rerun(path, SISTERS_PORT)
        assert summary["cache_hits"] > 0, bench
    expected = json.loads((SISTERS / "views.json").read_text())
    got = _views(Warehouse(home / "warehouse.duckdb"), sorted(expected))
    assert {v for v in expected if expected[v]} >= {"clarify_summary", "osi_summary",
                                                     "episode_verdicts"}
    for name in sorted(expected):
        assert got[name] == expected[name], f"view {name} changed on the sister benchmarks' home"
