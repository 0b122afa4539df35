"""``budget_usd`` in the config and on the command line: a cap does not change results, so it
is in no config hash, run id prefix or stage memo; a bad cap is one line; a cap with an
unpriced model refuses to start (tasks/engine/run.py ``check_budget``)."""

from __future__ import annotations

import pytest
import yaml

from tasks.config import ConfigError, load_config
from tasks.engine.run import check_budget, recorded_spend, with_budget
from tasks.engine.stage_memo import _config_doc
from tests.support.factories import base_config
from warehouse import Warehouse


def _write(tmp_path, name, **over):
    cfg = base_config("http://127.0.0.1:9/v1", tmp_path / "home")
    cfg.update(over)
    path = tmp_path / name
    path.write_text(yaml.safe_dump(cfg))
    return load_config(path)


def test_a_cap_changes_no_hash_and_no_stage_memo(tmp_path):
    plain, capped = _write(tmp_path, "a.yaml"), _write(tmp_path, "b.yaml", budget_usd=12.5)
    assert capped.budget_usd == 12.5 and plain.budget_usd is None
    assert plain.config_hash() == capped.config_hash()
    assert _config_doc(plain) == _config_doc(capped)
    cli = with_budget(plain, 3.0)
    assert cli.budget_usd == 3.0 and cli.config_hash() == plain.config_hash()
    assert with_budget(capped, None).budget_usd == 12.5  # no --budget-usd: the config's


@pytest.mark.parametrize("bad", [0, -1, float("inf")])
def test_a_bad_cap_is_one_line(tmp_path, bad):
    with pytest.raises(ConfigError, match="budget-usd"):
        with_budget(_write(tmp_path, "a.yaml"), bad)
    path = tmp_path / "c.yaml"
    cfg = base_config("http://127.0.0.1:9/v1", tmp_path / "home")
    cfg["budget_usd"] = bad if bad != float("inf") else "inf"
    path.write_text(yaml.safe_dump(cfg))
    with pytest.raises(ConfigError, match="budget_usd"):
        load_config(path)


def test_a_cap_needs_every_model_it_may_pay_for_priced(tmp_path):
    cfg = _write(tmp_path, "a.yaml", budget_usd=5.0)
    with pytest.raises(ConfigError) as e:
        check_budget(cfg, ["targets", "safety_judge"])
    line = str(e.value)
    assert "\n" not in line and ("budget_usd: cannot count the spend of unpriced models: "
                                 "models.targets[0] (openai/test-target-a), "
                                 "models.safety_judge (openai/test-judge)") in line
    check_budget(_write(tmp_path, "b.yaml"), ["targets"])  # no cap: nothing to count
    priced = base_config("http://127.0.0.1:9/v1", tmp_path / "home", budget_usd=5.0)
    priced["models"]["defaults"]["price"] = {"input_per_mtok": 1.0, "output_per_mtok": 1.0}
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(priced))
    check_budget(load_config(tmp_path / "p.yaml"), ["targets", "safety_judge"])


def test_recorded_spend_is_every_runs_requests_not_their_cache_hits(tmp_path):
    wh = Warehouse(tmp_path / "w.duckdb").init()
    assert recorded_spend(wh) == 0.0
    wh.write("llm_calls", [
        {"run_id": r, "call_hash": h, "role": "targets", "model": "openai/x", "cache_hit": hit,
         "prompt_tokens": 1, "completion_tokens": 1, "cost_usd": c, "attempts": 1,
         "latency_s": 0.1}
        for r, h, hit, c in (("r1", "a", False, 0.25), ("r1", "b", False, 0.5),
                             ("r2", "a", True, 0.25),  # a hit repeats its answer's cost
                             ("r2", "c", False, 1.0))])
    assert recorded_spend(wh) == pytest.approx(1.75)
