"""`carryon plan`: exact call counts where the pipeline's shape fixes them."""

from __future__ import annotations

from tasks.config import load_config
from tasks.plan import make_plan
from tasks.simulate import plan_calls


def test_plan_counts_follow_the_pipeline_shape(write_config):
    cfg = load_config(write_config())  # 2 queries, 3 ensemble models, lengths 4 and 6
    rows, notes = make_plan(cfg)
    calls = {r["role"]: r["calls"] for r in rows}
    assert calls["intent_rewriter"] == 2 and calls["merger"] == 2 and calls["misuse_filter"] == 2
    assert calls["ensemble"] == calls["wildguard"] == calls["decomposer"] == 6
    sim = plan_calls(cfg, 2, None)
    assert sim["conversations"] == 2 * (6 + 1)  # 2 BC + 1 NC per length, plus the oracle
    # Per query without sharing: oracle 1 + three 1-move flows x 2 target calls
    # + three 2-move flows x 3 target calls = 16; with sharing the first answer is shared.
    assert sim["roles"]["targets"]["without_sharing"] == 2 * 16
    assert calls["targets"] < sim["roles"]["targets"]["without_sharing"]
    # Ben-Util: every distinct response times the paper's mean of 18 items (nothing stored).
    assert calls["benutil_judge"] == calls["targets"] * 18
    assert calls["safety_judge"] == calls["targets"]
    assert any("prefix sharing saves" in n for n in notes)
