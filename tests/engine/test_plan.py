"""`carryon plan`: exact call counts where the pipeline's shape fixes them."""

from __future__ import annotations

from tasks.config import load_config
from tasks.engine.plan import make_plan
from tasks.benchmarks.carryon.queries import select_queries
from tasks.benchmarks.carryon.simulate_plan import scripts_for, plan_calls

FLOWS_Q1 = [("benign_reasking",), ("benign_justification",), ("pushback",),
            ("benign_justification", "rephrasing"), ("backchannel", "context_switching"),
            ("delaying", "pushback")]
FLOWS_Q2 = [("benign_justification",), ("benign_reasking",), ("rephrasing",),
            ("benign_reasking", "benign_justification"), ("benign_justification", "benign_reasking"),
            ("backchannel", "rephrasing")]


def qids(cfg):
    return [q.query_id for q in select_queries(cfg, None)]


def test_plan_counts_follow_the_pipeline_shape(write_config):
    cfg = load_config(write_config())  # 2 queries, 3 ensemble models, lengths 4 and 6
    rows, notes = make_plan(cfg)
    calls = {r["role"]: r["calls"] for r in rows}
    assert calls["intent_rewriter"] == 2 and calls["merger"] == 2 and calls["misuse_filter"] == 2
    assert calls["ensemble"] == calls["wildguard"] == calls["decomposer"] == 6
    sim = plan_calls(cfg, 2, qids(cfg))
    assert sim["conversations"] == 2 * (6 + 1)  # 2 BC + 1 NC per length, plus the oracle
    # Per query without sharing: oracle 1 + three 1-move flows x 2 target calls
    # + three 2-move flows x 3 target calls = 16; with sharing the first answer is shared.
    assert sim["roles"]["targets"]["without_sharing"] == 2 * 16
    # With sharing, per query: 1 shared first answer + one call per distinct move prefix,
    # plus the oracle. The flows config seed 0 samples for the two sample queries:
    #   q1: br | bj | pb | bj>reph | bc>cs | del>pb  -> prefixes br, bj, pb, bj>reph, bc,
    #       bc>cs, del, del>pb = 8 -> 1 + 8 + oracle 1 = 10 target calls, 8 simulator calls;
    #   q2: bj | br | reph | br>bj | bj>br | bc>reph -> prefixes bj, br, reph, br>bj, bj>br,
    #       bc, bc>reph = 7 -> 1 + 7 + 1 = 9 target calls, 7 simulator calls.
    # 19 target calls, 15 simulator calls (without sharing: 32, and (3 x 1 + 3 x 2) moves per
    # query x 2 queries = 18 simulator calls).
    flows = {qid: [f.moves for f in scripts_for(cfg, qid)] for qid in qids(cfg)}
    assert sorted(flows.values()) == sorted([FLOWS_Q1, FLOWS_Q2])
    # The same count, from the sampled flows, counted here independently of plan_calls.
    prefixes = sum(len({m[:k] for m in fl for k in range(1, len(m) + 1)}) for fl in flows.values())
    assert prefixes == 15
    assert calls["targets"] == sim["roles"]["targets"]["planned"] == sim["roles"]["targets"]["with_sharing"] == 19
    assert sim["roles"]["targets"]["with_sharing"] == 2 * (1 + 1) + prefixes
    assert calls["user_simulator"] == sim["roles"]["user_simulator"]["planned"] == prefixes
    assert sim["roles"]["user_simulator"]["without_sharing"] == 18
    assert sim["saved_by_sharing"] == (32 - 19) + (18 - 15)
    # Ben-Util: every distinct response times the paper's mean of 18 items (nothing stored).
    assert calls["benutil_judge"] == 19 * 18 == 342
    assert calls["safety_judge"] == 19
    assert "prefix sharing saves 16 simulation calls (50 without sharing → 34 with)." in notes
