"""`carryon plan` against what a run sends: within a quarter of the calls and prompt tokens.

A loopback run whose answers have the lengths the plan assumes (half their max_tokens; the
simulated user's 60 tokens) is planned, run, and compared per role with the gateway's own
count of what went out (``llm_calls``: one row per call, its prompt tokens as the server
counted them, characters / 4 like the plan). Ben-Util's call count rests on the checklists'
size, which only the checklist stage knows: the simulation and judge roles are planned once
the checklists are stored (as ``carryon plan`` does then), the checklist roles before.
"""

from __future__ import annotations

import asyncio
import hashlib
import json

import pytest
import yaml

from tasks.config import load_config
from tasks.engine.plan import make_plan
from warehouse import Warehouse

pytestmark = pytest.mark.slow

TARGET_MAX, USER_OUT = 160, 60
ANSWER = TARGET_MAX // 2


def _text(tokens: int, body: dict, tag: str) -> str:
    """``tokens`` tokens (4 characters each) of words that differ per request and per role
    (an answer that repeats the prompt's text is refused as a copy)."""
    seed = hashlib.sha256((tag + json.dumps(body.get("messages"), sort_keys=True)).encode())
    words = []
    while sum(len(w) + 1 for w in words) < 4 * tokens:
        seed = hashlib.sha256(seed.digest())
        words.append(seed.hexdigest()[:7])
    return " ".join(words)[:4 * tokens]


def _actual(home, run_id: str) -> dict:
    wh = Warehouse(home / "warehouse.duckdb")
    rows = wh.query("SELECT role, count(*) AS calls, sum(prompt_tokens) AS prompt_tokens "
                    "FROM llm_calls WHERE run_id = ? AND NOT cache_hit GROUP BY role", [run_id])
    return {r["role"]: r for r in rows}


def _close(planned: float, actual: float) -> bool:
    return abs(planned - actual) <= 0.25 * actual


def test_carryon_plan_within_a_quarter_of_a_loopback_run(prefect_harness, llm_server, write_config):
    from flows.carryon import carryon

    llm_server.scripts["targets"] = lambda body: _text(ANSWER, body, "t")
    llm_server.scripts["user_simulator"] = lambda body: _text(USER_OUT, body, "u")
    path = write_config(dataset={"source": "sample", "path": None, "limit": 2},
                        flows={"lengths": [4, 6, 8], "bc_per_length": 2, "nc_per_length": 1})
    raw = yaml.safe_load(path.read_text())
    raw["models"]["targets"][0]["max_tokens"] = TARGET_MAX
    path.write_text(yaml.safe_dump(raw))
    cfg = load_config(path)

    before, _ = make_plan(cfg)
    first = asyncio.run(carryon(config=str(path), stages="checklists"))
    after, _ = make_plan(load_config(path))  # the checklists are stored now
    second = asyncio.run(carryon(config=str(path), stages="episodes,judge"))
    made = {**_actual(cfg.home_path, first["run_id"]), **_actual(cfg.home_path, second["run_id"])}

    # Checklist roles: exact where the shape fixes them, upper bounds where answers drop out.
    plan1 = {r["role"]: r for r in before}
    for role in ("intent_rewriter", "ensemble", "merger", "misuse_filter"):
        assert plan1[role]["calls"] == made[role]["calls"], role
    for role in ("wildguard", "decomposer"):
        assert made.get(role, {"calls": 0})["calls"] <= plan1[role]["calls"], role

    plan2 = {r["role"]: r for r in after}
    report = []
    for role in ("targets", "user_simulator", "benutil_judge", "safety_judge"):
        p, a = plan2[role], made[role]
        report.append(f"{role}: calls {p['calls']} planned / {a['calls']} made; prompt tokens "
                      f"{p['prompt_tokens']} / {a['prompt_tokens']}")
        # exact, but Ben-Util's: responses x the mean checklist size, not each query's own
        assert _close(p["calls"], a["calls"]) and (role == "benutil_judge" or p["calls"] == a["calls"]), report[-1]
        assert _close(p["prompt_tokens"], a["prompt_tokens"]), report[-1]
    print("\n".join(report))
    total_p = sum(plan2[r]["prompt_tokens"] for r in made if r in plan2 and r in
                  ("targets", "user_simulator", "benutil_judge", "safety_judge"))
    total_a = sum(made[r]["prompt_tokens"] for r in
                  ("targets", "user_simulator", "benutil_judge", "safety_judge"))
    assert _close(total_p, total_a), report


def test_clarify_plan_within_a_quarter_of_a_loopback_run(prefect_harness, llm_server, tmp_path):
    from flows.carryon import carryon

    m = "openai/test-"
    raw = {"benchmark": "clarify", "home": str(tmp_path / "home"), "seed": 0,
           "dataset": {"source": "sample", "path": None, "limit": 4},
           "models": {"defaults": {"api_base": llm_server.api_base, "temperature": 0.0,
                                   "max_tokens": 256, "max_concurrency": 8, "timeout_s": 5,
                                   "max_retries": 3},
                      "targets": [{"name": "target-a", "model": m + "target-a",
                                   "max_tokens": TARGET_MAX}],
                      "user_simulator": {"model": m + "sim", "temperature": 1.0},
                      "act_judge": {"model": m + "judge"}},
           "gateway": {"backoff_base_s": 0.01, "backoff_max_s": 0.2}}
    path = tmp_path / "clarify.yaml"
    path.write_text(yaml.safe_dump(raw))
    # Every target asks back once, then answers at the assumed length: the upper bound the
    # plan gives for a reactive user (it speaks only when asked) is what this run sends.
    llm_server.scripts["targets"] = lambda body: (
        "Which year do you mean?" if len(body["messages"]) == 1 else _text(ANSWER, body, "t"))
    llm_server.scripts["user_simulator"] = lambda body: _text(USER_OUT, body, "u")

    def act(body):  # a question is a clarifying question; the reactive user answers it
        asks = body["messages"][-1]["content"].split("<<<END RESPONSE")[0].strip().endswith("?")
        return json.dumps({"reason": "r", "act": "clarifying_question" if asks else "direct_answer",
                           "on_target": True if asks else None})

    llm_server.scripts["act_judge"] = act
    cfg = load_config(path)
    rows, _ = make_plan(cfg)
    out = asyncio.run(carryon(config=str(path)))
    made = _actual(cfg.home_path, out["run_id"])
    plan = {r["role"]: r for r in rows}
    report = [f"{role}: calls {plan[role]['calls']} / {made[role]['calls']}; prompt tokens "
              f"{plan[role]['prompt_tokens']} / {made[role]['prompt_tokens']}" for role in made]
    print("\n".join(report))
    for role in made:
        assert _close(plan[role]["calls"], made[role]["calls"]), report
        assert _close(plan[role]["prompt_tokens"], made[role]["prompt_tokens"]), report
