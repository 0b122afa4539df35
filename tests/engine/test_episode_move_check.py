"""The move check on the episode engine: any benchmark whose conditions use the scripted user
gets its user turns checked (and a failing one sampled again) when its config sets
``models.move_checker``; without one, nothing changes. The verdicts are stored in
``move_checks`` under the episode's id."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass

from tasks.bench import BenchmarkSpec, ConditionSpec
from tasks.engine import episode as ep
from tasks.core.items import Item
from tasks.core.keys import check_key, resample_key
from tasks.core.targets import Seat
from tasks.targets.llm import LLM
from tasks.core.users import MoveCheck, PolicyEnv
from tasks.users.scripted import Scripted
from tests.support.factories import FakeGateway, model_spec
from warehouse import Warehouse

ITEM = Item("i1", 0, {"q": "How do locks fail?"}, {"intent": "I repair doors for a living."})
COND = ConditionSpec(name="nc", prompt="q", user="scripted", max_turns=6,
                     script={"group": "NC", "lengths": [4], "per_length": 1})


def _spec() -> BenchmarkSpec:
    return BenchmarkSpec(name="toy", title="Toy", engine="episodes", loader="x",
                         conditions=[COND])


@dataclass
class Cfg:
    """A config as the play loop reads it: the simulator and, maybe, a move checker."""

    checker: object | None = None

    def role_spec(self, role):
        return model_spec("sim", temperature=1.0)

    def role_specs(self, role):
        return [self.checker] if role == "move_checker" and self.checker else []

    class move_check:  # noqa: N801 (the config section's name)
        max_resamples = 2
        exclude_failing = False


def _gateway(verdicts: list[bool]):
    """The simulator writes "candidate <n>" for its n-th call; the checker fails the first
    ``verdicts`` as given (realises_move), the target answers "An answer."."""
    sims = iter(range(1, 100))
    checks = iter(verdicts)

    def answer(call):
        if call.role == "user_simulator":
            return f"candidate {next(sims)}"
        if call.role == "move_checker":
            ok = next(checks)
            return json.dumps({"reasoning": "r", "realises_move": ok, "reveals_purpose": False})
        return "An answer."

    return FakeGateway(answer)


def _play(gw, move_check):
    user = Scripted()
    spec = _spec()
    spec._built[("user", COND.name)] = user  # the spec's built user policy
    (plan,) = user.plans(ITEM, COND, seed=0)
    env = PolicyEnv(gw, Cfg(), move_check=move_check)
    seat = Seat("t", "llm", LLM(), model_spec("t"))
    return asyncio.run(ep.play(env, spec, ITEM, COND, seat, plan=plan)), plan


def test_a_failing_user_turn_is_sampled_again_and_every_verdict_kept():
    gw = _gateway([False, True])
    played, plan = _play(gw, MoveCheck(model_spec("checker"), max_resamples=2))
    user_turns = [t for t in played.turns if t["role"] == "user"]
    # The second candidate passed and is the turn the target answered.
    assert user_turns[1]["content"] == "candidate 2"
    assert [(c["position"], c["attempt"], c["passed"], c["kept"], c["move"])
            for c in played.checks] == [(2, 0, False, False, plan[0]), (2, 1, True, True, plan[0])]
    sims = [c for c in gw.calls if c.role == "user_simulator"]
    checks = [c for c in gw.calls if c.role == "move_checker"]
    # The resample's key derives from the turn's own key; each check's from its candidate's.
    assert sims[1].sample_key == resample_key(sims[0].sample_key, 1) != sims[0].sample_key
    assert [c.sample_key for c in checks] == [check_key(s.sample_key) for s in sims]
    assert played.episode["status"] == "completed"


def test_without_a_checker_nothing_changes():
    gw = _gateway([])
    played, _ = _play(gw, None)
    assert played.checks == [] and not [c for c in gw.calls if c.role == "move_checker"]
    assert [t["content"] for t in played.turns if t["role"] == "user"][1] == "candidate 1"


def test_the_episode_stage_stores_the_verdicts_under_the_episode(tmp_path):
    wh = Warehouse(tmp_path / "w.duckdb").init()
    spec = _spec()
    spec._built[("user", COND.name)] = Scripted()
    (plan,) = Scripted().plans(ITEM, COND, seed=0)

    @dataclass
    class Ctx:
        warehouse: object
        gateway: object
        config: object
        run_id: str = "run-1"

    ctx = Ctx(wh, _gateway([False, False, False]), Cfg(checker=model_spec("checker")))
    seat = Seat("t", "llm", LLM(), model_spec("t"))
    out = ep.play_batch(ctx, spec, [(ITEM, COND, seat, plan)])
    assert asyncio.run(out)["status"] == {"completed": 1}
    (eid,) = [r["episode_id"] for r in wh.query("SELECT episode_id FROM episodes")]
    rows = wh.query("SELECT conversation_id, attempt, passed, kept FROM move_checks "
                    "ORDER BY attempt")
    # Three candidates, all failing (max_resamples 2): the last one is kept.
    assert rows == [{"conversation_id": eid, "attempt": a, "passed": False, "kept": a == 2}
                    for a in range(3)]
