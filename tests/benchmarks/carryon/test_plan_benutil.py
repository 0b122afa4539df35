"""`carryon plan` prices both Ben-Util modes (tasks/benchmarks/carryon/plan_benutil.py), and
its cached column follows what the providers reported once this home has recorded calls."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from tasks.benchmarks.carryon import plan_benutil
from tasks.config import load_config
from tasks.engine.plan import make_plan
from warehouse import Warehouse

ROOT = Path(__file__).resolve().parents[3]


def _paper(tmp_path, **judging) -> Path:
    """configs/paper.yaml on the published-shape CASE-Bench fixture (the real file is not
    shipped): its models, scripts and prices as they are."""
    doc = yaml.safe_load((ROOT / "configs" / "paper.yaml").read_text())
    doc["dataset"]["path"] = str(ROOT / "tests" / "fixtures" / "casebench_small.json")
    doc["home"] = str(tmp_path / "home")
    if judging:
        doc["judging"] = judging
    path = tmp_path / "paper.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _modes(notes: list[str]) -> dict[str, tuple[int, str, str]]:
    out = {}
    for line in notes:
        m = re.match(r"  (per_item|per_response)\b.*?: ([\d,]+) calls.*?; (\$[\d,.]+) live, "
                     r"(\$[\d,.]+) batch", line)
        if m:
            out[m.group(1)] = (int(m.group(2).replace(",", "")), m.group(3), m.group(4))
    return out


def test_the_paper_plan_prints_both_modes_and_per_response_is_under_a_tenth(tmp_path):
    rows, notes = make_plan(load_config(_paper(tmp_path)), key_warnings=False)
    row = next(r for r in rows if r["role"] == "benutil_judge")
    responses = next(r for r in rows if r["role"] == "targets")["calls"]
    modes = _modes(notes)
    assert set(modes) == {"per_item", "per_response"}, notes
    # Per item: every distinct response times the paper's mean of 18 items (no checklist
    # stored); per response: one call per response. The table's row is the configured mode.
    assert modes["per_item"][0] == row["calls"] == responses * 18
    assert modes["per_response"][0] == responses
    assert 10 * modes["per_response"][0] <= modes["per_item"][0]
    assert modes["per_item"][1] == f"${row['cost_usd']:,.2f}"  # priced (Gemini 2.5 Flash)
    assert not any("cannot hold a per-response answer" in n for n in notes)

    # Configured per response: the table's row follows, and the paper's max_tokens of 512 is
    # too short for a 23-item answer: 23 * (40 + 6) + 4 = 1,062 tokens.
    rows, notes = make_plan(load_config(_paper(tmp_path, benutil_mode="per_response")),
                            key_warnings=False)
    row = next(r for r in rows if r["role"] == "benutil_judge")
    assert row["calls"] == responses and _modes(notes)["per_item"][0] == responses * 18
    assert any("max_tokens 512 cannot hold a per-response answer for a checklist of 23 items "
               "(about 1062 tokens)" in n for n in notes), notes


def test_tokens_per_call_of_each_mode_worked_by_hand():
    # Per item: the measured prompt and the role's 40-token answer, as given. Per response:
    # its template's own text, the query (30), the response (500) and 10 items of 20 tokens,
    # each with its line's 2; the answer is 10 entries of 40 + 6 tokens and 4 of wrapping.
    assert plan_benutil.tokens("per_item", 900.4, 40, 30, 500, 20, 10) == (900, 40)
    base = plan_benutil.response_base()
    assert plan_benutil.tokens("per_response", 900.4, 40, 30, 500, 20, 10) == (
        round(base + 30 + 500 + 10 * 22), 10 * 46 + 4)
    assert plan_benutil.calls("per_item", 7, 18.0, 2) == 252
    assert plan_benutil.calls("per_response", 7, 18.0, 2) == 14


def test_the_cached_column_reads_what_the_providers_reported(write_config):
    price = {"input_per_mtok": 1.0, "output_per_mtok": 2.0, "cached_input_per_mtok": 0.1}
    path = write_config()
    doc = yaml.safe_load(Path(path).read_text())
    doc["models"]["benutil_judge"] = {**doc["models"]["benutil_judge"], "price": price}
    Path(path).write_text(yaml.safe_dump(doc))
    cfg = load_config(path)
    rows, _ = make_plan(cfg, key_warnings=False)
    before = next(r for r in rows if r["role"] == "benutil_judge")
    assert before["cached_usd"] == before["cost_usd"]  # a loopback model: no cache known
    # A pilot run's calls: 1,000 prompt tokens each, 400 of them read from the provider's
    # cache, 50 completion tokens.
    wh = Warehouse(cfg.home_path / "warehouse.duckdb").init()
    wh.write("llm_calls", [{"run_id": "r", "call_hash": f"h{i}", "role": "benutil_judge",
                            "model": "openai/test-judge", "cache_hit": False,
                            "prompt_tokens": 1000, "completion_tokens": 50,
                            "cached_tokens": 400, "cost_usd": 0.0, "latency_s": 0.1,
                            "attempts": 1} for i in range(3)])
    rows, notes = make_plan(cfg, key_warnings=False)
    row = next(r for r in rows if r["role"] == "benutil_judge")
    n = row["calls"]
    assert (row["prompt_tokens"], row["completion_tokens"]) == (n * 1000, n * 50)
    # Live: n * (1000 * 1 + 50 * 2) / 1e6; cached: 40 % of the prompt at 0.1, 60 % at 1.
    assert row["cost_usd"] == pytest.approx(round(n * 1100 / 1e6, 2))
    assert row["cached_usd"] == pytest.approx(round(n * (400 * 0.1 + 600 + 100) / 1e6, 2))
    assert any("llm_calls.cached_tokens" in x for x in notes)
