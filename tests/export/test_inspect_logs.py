"""``carryon export --format inspect``: Inspect AI eval logs written with inspect_ai's own
API, read back with ``inspect_ai.log.read_eval_log``: one sample per completed episode, its
turns as messages, every score the warehouse's verdict (an unscored one None, not 0)."""

from __future__ import annotations

import math

from tasks.bench import load_spec
from tasks.export.inspect_logs import log_name, score_key, write_logs
from tests.support import export_home


def check_logs(wh, spec, out) -> int:
    """Every completed episode of ``spec`` is one sample whose scores equal its verdicts;
    returns the number of verdicts compared."""
    from inspect_ai.log import read_eval_log

    episodes = wh.query("SELECT * FROM episodes WHERE benchmark = ? AND status = 'completed'",
                        [spec.name])
    targets = sorted({e["target"] for e in episodes})
    assert sorted(p.name for p in out.iterdir()) == sorted(log_name(spec.name, t) for t in targets)
    compared = 0
    for target in targets:
        log = read_eval_log(str(out / log_name(spec.name, target)))
        mine = {e["episode_id"]: e for e in episodes if e["target"] == target}
        assert log.eval.task == spec.name and log.eval.dataset.samples == len(mine)
        assert sorted(s.id for s in log.samples) == sorted(mine)
        assert log.stats.model_usage and log.eval.metadata["config"]["benchmark"]
        for s in log.samples:
            turns = wh.query("SELECT role, content FROM episode_turns WHERE episode_id = ? "
                             "ORDER BY position", [s.id])
            assert [(m.role, m.text) for m in s.messages] == [(t["role"], t["content"] or "")
                                                              for t in turns]
            assert s.metadata["condition"] == mine[s.id]["condition"]
            verdicts = wh.query(
                "SELECT v.*, s.kind AS set_kind FROM verdicts v JOIN verdict_sets s "
                "USING (judgment_set_id) WHERE episode_id = ?", [s.id])
            several = {}
            for v in verdicts:
                several.setdefault(v["set_kind"], set()).add(v["judgment_set_id"])
            assert len(s.scores or {}) == len({score_key(v["set_kind"], v["model_turn"],
                                                         v["judgment_set_id"],
                                                         len(several[v["set_kind"]]) > 1)
                                               for v in verdicts})
            for v in verdicts:
                key = score_key(v["set_kind"], v["model_turn"], v["judgment_set_id"],
                                len(several[v["set_kind"]]) > 1)
                got = s.scores[key].value[v["measure"]]
                if v["value"] is None:
                    assert got is None
                else:
                    assert math.isclose(got, v["value"]) if isinstance(got, float) else got == v["value"]
                compared += 1
    return compared


def test_logs_read_back_with_every_verdict(tmp_path):
    spec = load_spec("opensafeintent")
    wh = export_home.build(tmp_path / "w.duckdb")
    exp = write_logs(wh, spec, tmp_path / "logs")
    # Two completed episodes of one target (e3 failed: no sample); 6 verdicts compared.
    assert exp.logs == {"opensafeintent_target-a.json": 2}
    assert check_logs(wh, spec, tmp_path / "logs") == 6
    from inspect_ai.log import read_eval_log

    log = read_eval_log(str(tmp_path / "logs" / "opensafeintent_target-a.json"))
    [e1] = [s for s in log.samples if s.id == "e1"]
    # e1's turn 2: helpfulness 4; harmfulness unscored (None) with its reason.
    assert e1.scores["helpfulness/t2"].value == {"score": 4.0}
    assert e1.scores["harmfulness/t2"].value == {"score": None}
    assert e1.scores["harmfulness/t2"].explanation == "score: invalid_output: x"
    assert log.eval.model == "openai/gpt-test" and log.status == "success"
    assert log.stats.model_usage["anthropic/claude-test"].input_tokens == 37  # 30 + 7
    assert "api_key_env" not in str(log.eval.metadata)
