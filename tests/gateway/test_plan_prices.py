"""Live, batch and cached-input prices (tasks/gateway/prices.py) and their columns in
`carryon plan`, worked by hand."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from tasks.config import PriceEntry, load_config
from tasks.gateway.prices import costs, rates
from tasks.engine.plan import make_plan
from tests.support.batch import _Server, spec_for


def test_litellm_price_map_rates_for_a_priced_model():
    # litellm's local map for gpt-4o-mini: $0.15 in, $0.60 out, $0.075 cached in, per M tokens.
    s = spec_for(_Server, model="openai/gpt-4o-mini")
    got = costs(s, 1_000_000, 1_000_000)
    assert got["live"] == pytest.approx(0.15 + 0.60)  # 0.75
    assert got["batch"] == pytest.approx(0.75 * 0.5)  # 0.375: half of live by default
    assert got["cached"] == pytest.approx(0.075 + 0.60)  # 0.675


def test_config_price_overrides_litellm_and_unpriced_models_are_blank():
    s = spec_for(_Server, model="openai/gpt-4o-mini",
                 price=PriceEntry(input_per_mtok=2.0, output_per_mtok=8.0,
                                  cached_input_per_mtok=0.5, batch_discount=0.4))
    got = costs(s, 500_000, 250_000)
    assert got["live"] == pytest.approx(0.5 * 2.0 + 0.25 * 8.0)  # 1.0 + 2.0 = 3.0
    assert got["batch"] == pytest.approx(3.0 * 0.6)  # 40% off: 1.8
    assert got["cached"] == pytest.approx(0.5 * 0.5 + 0.25 * 8.0)  # 0.25 + 2.0 = 2.25
    unpriced = spec_for(_Server, model="openai/test-judge")
    assert costs(unpriced, 10, 10) == {"live": None, "batch": None, "cached": None}
    # A price for input and output only: no cached rate, so no cached cost.
    half = replace(unpriced, price=PriceEntry(input_per_mtok=1.0, output_per_mtok=1.0))
    assert rates(half).cached_input is None and costs(half, 1e6, 0)["cached"] is None
    assert costs(half, 1e6, 0)["live"] == pytest.approx(1.0)


def test_plan_prints_live_batch_and_cached_columns(tmp_path):
    from tests.support.factories import base_config

    cfg = base_config("http://127.0.0.1:9/v1", tmp_path / "home")
    plain = tmp_path / "plain.yaml"
    plain.write_text(yaml.safe_dump(cfg))
    cfg["models"]["safety_judge"]["price"] = {"input_per_mtok": 2.0, "output_per_mtok": 8.0,
                                              "cached_input_per_mtok": 0.5}
    priced = tmp_path / "priced.yaml"
    priced.write_text(yaml.safe_dump(cfg))
    a, b = load_config(plain), load_config(priced)
    assert a.config_hash() == b.config_hash()  # a price is not part of the run's identity
    rows = {r["role"]: r for r in make_plan(b)[0]}
    row = rows["safety_judge"]
    pt, ct = row["prompt_tokens"], row["completion_tokens"]
    assert row["cost_usd"] == round(pt * 2.0 / 1e6 + ct * 8.0 / 1e6, 2)
    assert row["batch_usd"] == round((pt * 2.0 / 1e6 + ct * 8.0 / 1e6) * 0.5, 2)
    # Safety requests share no prefix worth caching (one per turn): priced live.
    assert row["cached_usd"] == row["cost_usd"]
    # The loopback test models are unpriced: blank in all three columns.
    assert (rows["targets"]["cost_usd"], rows["targets"]["batch_usd"], rows["targets"]["cached_usd"]) \
        == (None, None, None)
    # `carryon plan` prints the three columns (its table prints every key of the rows).
    from typer.testing import CliRunner

    from flows.cli import app

    out = CliRunner().invoke(app, ["plan", "--config", str(priced)], catch_exceptions=False).output
    header = next(x for x in out.splitlines() if x.startswith("role "))
    assert header.split()[-3:] == ["cost_usd", "batch_usd", "cached_usd"]
    line = next(x for x in out.splitlines() if x.startswith("safety_judge "))
    assert line.split()[-3:] == [f"{row['cost_usd']:.4g}", f"{row['batch_usd']:.4g}",
                                 f"{row['cached_usd']:.4g}"]


def test_plan_prices_benutil_prompt_caching_from_the_layout(tmp_path):
    from tests.support.factories import base_config
    from tasks.judges.prompt_layout import benutil_layout

    cfg = base_config("http://127.0.0.1:9/v1", tmp_path / "home")
    cfg["models"]["benutil_judge"]["price"] = {"input_per_mtok": 2.0, "output_per_mtok": 8.0,
                                               "cached_input_per_mtok": 0.5}
    path = tmp_path / "c.yaml"
    for max_tokens, cached in ((256, False), (2048, True)):
        cfg["models"]["targets"][0]["max_tokens"] = max_tokens
        path.write_text(yaml.safe_dump(cfg))
        rows, notes = make_plan(load_config(path))
        row = next(r for r in rows if r["role"] == "benutil_judge")
        pt, ct = row["prompt_tokens"], row["completion_tokens"]
        live = pt * 2.0 / 1e6 + ct * 8.0 / 1e6
        assert row["cost_usd"] == round(live, 2)
        if not cached:
            # responses of ~128 tokens: a prefix of ~594 tokens, under OpenAI's 1,024
            assert row["cached_usd"] == row["cost_usd"]
            assert any("below the provider's 1,024-token minimum" in n for n in notes)
            continue
        # responses of ~1024 tokens: prefix = instructions/4 + 30 + 1024 tokens; per request
        # prefix + 20 (item) + suffix/4; 17 of 18 requests read the prefix.
        lay = benutil_layout()
        prefix = lay.instructions_chars / 4 + 30 + 1024
        share = 17 * prefix / (18 * (prefix + 20 + lay.suffix_chars / 4))
        want = pt * (share * 0.5 + (1 - share) * 2.0) / 1e6 + ct * 8.0 / 1e6
        assert row["cached_usd"] == round(want, 2) < row["cost_usd"]
        assert any(f"{share:.0%} of its prompt tokens can be cache reads" in n for n in notes)


def test_billed_cost_worked_by_hand():
    from tasks.gateway.prices import billed

    s = replace(spec_for(_Server, model="openai/test-judge"),
                price=PriceEntry(input_per_mtok=2.0, output_per_mtok=8.0, cached_input_per_mtok=0.5))
    # 600 uncached prompt tokens at $2/M, 400 cached at $0.5/M, 100 completion at $8/M
    assert billed(s, 1000, 100, 400) == pytest.approx((600 * 2 + 400 * 0.5 + 100 * 8) / 1e6)
    assert billed(s, 1000, 100, 400, batch=True) == pytest.approx(0.5 * 2.2e-3)
    assert billed(replace(s, price=None), 1000, 100) is None  # unpriced: no number, not 0


def test_report_cost_section_beside_the_plan(tmp_path):
    import datetime as dt
    import json

    from tasks.benchmarks.carryon.report import cost
    from tests.support.factories import base_config
    from warehouse import Warehouse

    cfg = load_config(_write(tmp_path, base_config("http://127.0.0.1:9/v1", tmp_path / "home")))
    wh = Warehouse(tmp_path / "w.duckdb").init()
    now = dt.datetime.now(dt.timezone.utc)
    wh.write("runs", [{"run_id": r, "config_hash": "h", "config_json": json.dumps(
        cfg.model_dump(mode="json")), "seed": 0, "stages": "all", "started": now,
        "status": "succeeded"} for r in ("r1", "r2")])
    calls = [("r1", "a", "benutil_judge", False, 100, 30, 0.01, "b-1"),
             ("r1", "b", "benutil_judge", False, 100, 10, 0.02, None),
             ("r2", "a", "benutil_judge", True, 100, 30, 0.01, None),  # a hit: costs nothing
             ("r2", "c", "benutil_judge", False, 50, 0, 0.005, "b-2")]
    wh.write("llm_calls", [{"run_id": r, "call_hash": h, "role": role, "model": "openai/test-judge",
                            "cache_hit": hit, "prompt_tokens": pt, "completion_tokens": 5,
                            "cached_tokens": ct, "cost_usd": c, "attempts": 1, "batch_id": b,
                            "latency_s": 0.1}
                           for r, h, role, hit, pt, ct, c, b in calls])
    (stat,) = cost.stats(cost.load(wh, "r2"))
    (row,) = stat.table.to_dict("records")
    assert (row["requests"], row["requests_this_run"], row["batched"]) == (3, 1, 2)
    assert (row["prompt_tokens"], row["cached_tokens"]) == (250, 40)
    assert row["cost_usd"] == pytest.approx(0.035) and row["cost_this_run"] == pytest.approx(0.005)
    plan = {r["role"]: r for r in make_plan(cfg)[0]}["benutil_judge"]
    assert row["plan_calls"] == plan["calls"]


def _write(tmp_path, cfg) -> Path:
    p = tmp_path / "cost.yaml"
    p.write_text(yaml.safe_dump(cfg))
    return p


def test_rate_memo_matches_litellm_and_spares_its_import(tmp_path, monkeypatch):
    """For a model litellm's price map file cannot answer for (price_map.py: here, every
    model), the plan reads litellm's rates through a memo file (prices.py): the same numbers
    as litellm, and a second process with the memo never imports litellm (seconds per run)."""
    import json
    import subprocess
    import sys

    from tasks.gateway import price_map
    from tasks.gateway.prices import MEMO_NAME

    monkeypatch.setattr(price_map, "lookup", lambda model: None)

    memo = tmp_path / MEMO_NAME
    s = spec_for(_Server, model="openai/gpt-4o-mini")
    unpriced = spec_for(_Server, model="openai/test-judge")
    assert costs(s, 1e6, 1e6, memo=memo) == costs(s, 1e6, 1e6)
    assert rates(s, memo) == rates(s)
    assert costs(unpriced, 10, 10, memo=memo) == {"live": None, "batch": None, "cached": None}
    book = json.loads(memo.read_text())
    assert len(book) == 2 and all(k.startswith("litellm ") for k in book)
    code = (
        "import sys; from pathlib import Path\n"
        "from tasks.gateway import price_map; price_map.lookup = lambda model: None\n"
        "from tasks.gateway.prices import costs\n"
        "from tests.support.batch import _Server, spec_for\n"
        f"memo = Path({str(memo)!r})\n"
        "got = costs(spec_for(_Server, model='openai/gpt-4o-mini'), 1e6, 1e6, memo=memo)\n"
        "print(round(got['live'], 6), 'litellm' in sys.modules)\n")
    env = {k: v for k, v in os.environ.items() if k != "LITELLM_LOCAL_MODEL_COST_MAP"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         cwd=Path(__file__).resolve().parents[2], check=True).stdout.split()
    assert out == ["0.75", "False"]
    # The memo is what is read, while litellm reads its local map (this process's setting).
    memo.write_text(json.dumps({k: {"input_cost_per_token": 1.0, "output_cost_per_token": 1.0}
                                for k in book}))
    assert rates(s, memo).input == 1.0
    # A remote price map can change between runs: then litellm is asked, the memo ignored.
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "False")
    assert rates(s, memo) == rates(s) and rates(s).input != 1.0


def test_plan_prices_batch_only_where_this_version_submits_one(tmp_path):
    """batch_usd is the batch price where the provider's batch path exists here (OpenAI,
    Anthropic, Gemini) and the live price where it does not (Vertex AI, Together); the notes
    name every entry that says batch: true and is called live anyway, and why."""
    from tests.support.factories import base_config

    cfg = base_config("http://127.0.0.1:9/v1", tmp_path / "home")
    price = {"input_per_mtok": 2.0, "output_per_mtok": 8.0, "cached_input_per_mtok": 0.5}
    models = {"safety_judge": "anthropic/claude-sonnet-4-20250514",
              "benutil_judge": "vertex_ai/gemini-2.5-flash",
              "user_simulator": "gemini/gemini-2.5-flash"}
    for role, model in models.items():
        cfg["models"][role].update(model=model, batch=True, price=price)
    path = _write(tmp_path, cfg)
    rows, notes = make_plan(load_config(path))
    rows = {r["role"]: r for r in rows}
    for role in ("safety_judge", "user_simulator"):
        assert rows[role]["submit"] == "batch"
        assert rows[role]["batch_usd"] == pytest.approx(rows[role]["cost_usd"] * 0.5, abs=0.01)
    vertex = rows["benutil_judge"]
    assert vertex["submit"] == "live" and vertex["batch_usd"] == vertex["cost_usd"]
    assert rows["intent_rewriter"]["submit"] == "live"  # no batch: true
    assert any(n.startswith("batch: true, but called live (no batch path here): "
                            "benutil_judge vertex_ai/gemini-2.5-flash") for n in notes)
    assert any("benutil_judge vertex_ai/gemini-2.5-flash: Vertex AI batch prediction" in n
               for n in notes)
