"""The plan is the bill (issue 52, item 5): every role and every model priced or named, a view
by model, and a headline that says "lower bound" and names what it leaves out.

Hand-worked rows first (tasks/gateway/prices.py ``plan_row``, ``by_model``, ``cost_lines``),
then ``configs/paper.yaml`` on a CASE-Bench file in the published shapes
(tests/fixtures/published_shapes.py): its fourteen targets and WildGuard all in the plan.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tasks.config import PriceEntry, load_config
from tasks.engine.plan import make_plan
from tasks.gateway.prices import by_model, cost_lines, plan_row
from tests.fixtures.published_shapes import write_published_shapes
from tests.support.factories import model_spec

ROOT = Path(__file__).resolve().parents[2]
P28 = PriceEntry(input_per_mtok=2.0, output_per_mtok=8.0)


def test_a_role_with_an_unpriced_model_sums_the_priced_ones_and_names_the_rest():
    priced = model_spec("a", price=P28)
    free = model_spec("local-smollm2")  # openai/local-smollm2: the table's $0, with its source
    unknown = model_spec("mystery")
    # 300 calls over three models: 100 each, 1,000 prompt and 100 completion tokens a call.
    row = plan_row("targets", [priced, free, unknown], 300, 1000, 100)
    # a: 100 * (1000 * 2 + 100 * 8) / 1e6 = 0.28; local: 0; mystery: not priced.
    assert (row["cost_usd"], row["batch_usd"], row["unpriced"]) == (0.28, 0.14, "1 of 3")
    judge = plan_row("safety_judge", [model_spec("a", price=P28)], 50, 2000, 10)
    # 50 * (2000 * 2 + 10 * 8) / 1e6 = 0.204
    assert judge["cost_usd"] == 0.2 and judge["unpriced"] == ""
    models = {m["model"]: m for m in by_model([row, judge])}
    a = models["openai/a"]
    assert (a["roles"], a["calls"], a["prompt_tokens"]) == ("targets, safety_judge", 150, 200_000)
    assert a["cost_usd"] == pytest.approx(0.28 + 0.204, abs=0.005)
    assert models["openai/mystery"]["cost_usd"] is None
    assert models["openai/mystery"]["priced_by"] == "unpriced: litellm has no price for it"
    assert models["openai/local-smollm2"]["cost_usd"] == 0.0
    assert models["openai/local-smollm2"]["priced_by"] == "table"
    lines = cost_lines([row, judge], "cached: n/a.")
    assert lines[0].startswith("LOWER BOUND: $0.48; $0.24 with batch: true")
    assert "leaving out 1 unpriced model(s): openai/mystery" in lines[0]
    assert any(ln.startswith("unpriced: openai/mystery (targets): litellm has no price") for ln in lines)
    # The $0 model is not silent: its source is printed.
    assert any("openai/local-smollm2: this project's embedded local model" in ln for ln in lines)
    # Every model priced: a total, not a bound.
    whole = cost_lines([judge], "cached: n/a.")
    assert whole[0].startswith("estimated cost: $0.20; $0.10 with batch") and len(whole) == 1


def _paper(tmp_path: Path, **prices) -> Path:
    cfg = yaml.safe_load((ROOT / "configs" / "paper.yaml").read_text())
    cfg["home"] = str(tmp_path / "home")
    cfg["dataset"]["path"] = str(write_published_shapes(tmp_path / "casebench.json"))
    for entry in cfg["models"]["targets"] + [cfg["models"]["wildguard"]]:
        if entry["model"] in prices:
            entry["price"] = prices[entry["model"]]
    path = tmp_path / "paper.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


UNPRICED = {"text-completion-openai/allenai/wildguard",
            "together_ai/Qwen/Qwen3-235B-A22B-Instruct-2507", "together_ai/Qwen/Qwen3-32B",
            "together_ai/allenai/Olmo-3-7B-Instruct", "together_ai/allenai/Olmo-3.1-32B-Instruct"}


def test_paper_plan_holds_every_target_and_wildguard_and_names_the_unpriced(tmp_path):
    rows, notes = make_plan(load_config(_paper(tmp_path)), key_warnings=False)
    by_role = {r["role"]: r for r in rows}
    targets = by_role["targets"]["per_model"]
    assert len(targets) == 14 and by_role["wildguard"]["per_model"]
    # claude-sonnet-4-20250514 (litellm: 0 and 0) is priced from the table, not at $0.
    sonnet = next(m for m in targets if m["model"] == "anthropic/claude-sonnet-4-20250514")
    assert sonnet["priced_by"] == "table" and sonnet["cost_usd"] > 0
    headline = next(n for n in notes if n.startswith(("LOWER BOUND", "estimated cost")))
    assert headline.startswith("LOWER BOUND")
    named = headline.split("unpriced model(s): ")[1].split(" (batch_usd")[0].split(", ")
    assert set(named) == UNPRICED
    # No model silently $0: each one has a cost above 0, or is named unpriced.
    for m in (m for r in rows for m in r["per_model"]):
        assert (m["cost_usd"] or 0) > 0 or m["model"] in UNPRICED, m
    # The role table's targets cost is the priced targets' sum.
    assert by_role["targets"]["cost_usd"] == pytest.approx(
        sum(m["cost_usd"] for m in targets if m["cost_usd"] is not None), abs=0.01)
    assert by_role["targets"]["unpriced"] == "4 of 14"


def test_paper_plan_with_every_model_priced_is_a_total_over_all_of_them(tmp_path):
    price = {"input_per_mtok": 0.5, "output_per_mtok": 1.0}
    rows, notes = make_plan(load_config(_paper(tmp_path, **{m: price for m in UNPRICED})),
                            key_warnings=False)
    headline = next(n for n in notes if n.startswith(("LOWER BOUND", "estimated cost")))
    assert headline.startswith("estimated cost: $"), headline
    total = float(headline.split("$")[1].split(";")[0].replace(",", ""))
    models = by_model(rows)
    assert all(m["cost_usd"] is not None for m in models)
    assert total == pytest.approx(sum(m["cost_usd"] for m in models), abs=0.05)
    wildguard = next(m for m in models if m["model"] == "text-completion-openai/allenai/wildguard")
    assert wildguard["priced_by"] == "price:" and wildguard["cost_usd"] > 0
