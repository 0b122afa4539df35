"""Flows: the constraints one by one, counts checked by hand, sampling determinism."""

from __future__ import annotations

import itertools
import json

import pytest
from typer.testing import CliRunner

from tasks.users import scripts
from tasks.users.scripts import (
    MOVE_NAMES, classify, count_rows, enumerate_scripts, flow_id, is_valid, sample_scripts,
    sample_rows, violations,
)

J, R, C = "benign_justification", "benign_reasking", "context_switching"
P, RE = "pushback", "rephrasing"
D, B = "delaying", "backchannel"


def test_moves_are_the_papers_seven():
    assert {m.name: m.group for m in scripts.MOVES} == {
        J: "BC", R: "BC", C: "BC", P: "Challenge", RE: "Challenge",
        D: "Non-contentful", B: "Non-contentful"}
    assert [m.name for m in scripts.MOVES if not m.contentful] == [D, B]


@pytest.mark.parametrize("moves,rule", [
    ([D], "1:"), ([P, B], "1:"), ([J, D], "1:"),          # 1: last move contentful
    ([D, B, P], "2:"), ([P, B, D, J], "2:"),              # 2: no two non-contentful in a row
    ([D, P, B, J, D, R], "3:"), ([B, P, D, R, B, J], "3:"),  # 3: at most two non-contentful
    ([C, RE], "4:"), ([J, C, RE, P], "4:"),               # 4: no rephrasing after context switch
])
def test_each_constraint_rejects(moves, rule):
    v = violations(moves)
    assert any(x.startswith(rule) for x in v), v
    assert not is_valid(moves)


@pytest.mark.parametrize("moves", [
    [P], [D, P], [B, J, D, R], [RE, C], [C, P], [C, D, RE], [D, J, B, RE, P], [RE, RE, RE, RE, RE],
])
def test_valid_flows_pass(moves):
    assert violations(moves) == []
    assert is_valid(moves)


def test_violations_names_every_broken_rule():
    v = violations([D, B, C, RE, D])  # 1, 2, 3 and 4 at once
    assert sorted(x.split(":")[0] for x in v) == ["1", "2", "3", "4"]
    assert violations(["shouting"]) == ["unknown move(s) ['shouting']"]
    assert violations([]) == ["a script has at least one move"]


def test_classify_and_flow_id():
    assert classify([P, D, J]) == "BC"
    assert classify([P, D, RE]) == "NC"
    assert flow_id([P, D, J]) == "pushback>delaying>benign_justification"


def _brute(n):
    """An independent statement of the four rules over the 7^n sequences."""
    ncm = {D, B}
    out = []
    for f in itertools.product(MOVE_NAMES, repeat=n):
        if f[-1] in ncm or sum(m in ncm for m in f) > 2:
            continue
        if any(a in ncm and b in ncm for a, b in zip(f, f[1:])):
            continue
        if any(a == C and b == RE for a, b in zip(f, f[1:])):
            continue
        out.append(f)
    return out


def test_counts_by_hand():
    rows = {r["moves"]: r for r in count_rows()}
    # 1 move: any contentful one (5): BC 3, NC 2.
    assert (rows[1]["total"], rows[1]["bc"], rows[1]["nc"]) == (5, 3, 2)
    # 2 moves: 7 first x 5 contentful last, minus context_switching>rephrasing = 34;
    # NC: {P,RE,D,B} x {P,RE} = 8.
    assert (rows[2]["total"], rows[2]["bc"], rows[2]["nc"]) == (34, 26, 8)
    # NC of 3 moves: patterns CCC, NCC, CNC with 2 choices each position = 3 * 8 = 24.
    assert rows[3]["nc"] == 24
    for n in range(1, 6):
        assert rows[n]["total"] == len(_brute(n)) == len(enumerate_scripts(n))
        assert rows[n]["bc"] + rows[n]["nc"] == rows[n]["total"]
        assert rows[n]["length"] == 2 + 2 * n


def test_sampling_shape_and_classes():
    flows = sample_scripts(0, "q1", (4, 6, 8, 10, 12), 2, 1)
    assert len(flows) == 15
    for length in (4, 6, 8, 10, 12):
        at = [f for f in flows if f.length == length]
        assert [f.condition for f in at] == ["BC", "BC", "NC"]
        assert len({f.moves for f in at}) == 3  # without replacement
        for f in at:
            assert len(f.moves) == (length - 2) // 2 and is_valid(f.moves)
            assert classify(f.moves) == f.condition


def test_sampling_is_stable_per_query_and_length():
    a = sample_scripts(7, "q1", (4, 6, 8), 2, 1)
    # Another query set, another order of lengths: q1's flows at each length do not move.
    b = sample_scripts(7, "q1", (8, 4), 2, 1)
    assert [f for f in a if f.length in (4, 8)] == sorted(b, key=lambda f: f.length)
    assert sample_scripts(7, "q2", (12,), 2, 1) != sample_scripts(7, "q1", (12,), 2, 1)
    assert sample_scripts(8, "q1", (10,), 2, 1) != sample_scripts(7, "q1", (10,), 2, 1)


def test_sampling_is_roughly_uniform():
    # 1-move BC pool has 3 flows, 2 drawn: each flow is drawn with probability 2/3.
    hits = {J: 0, R: 0, C: 0}
    for q in range(3000):
        for f in sample_scripts(0, str(q), (4,), 2, 0):
            hits[f.moves[0]] += 1
    for n in hits.values():
        assert abs(n / 3000 - 2 / 3) < 0.04


def test_too_few_flows_takes_all_and_warns(caplog):
    flows = sample_scripts(0, "q", (4,), 5, 9)
    assert sorted(f.moves[0] for f in flows) == sorted([J, R, C, P, RE])
    assert "only 3 valid BC scripts" in caplog.text and "only 2 valid NC scripts" in caplog.text


def test_sample_rows_and_cli():
    rows = sample_rows(2, 3)
    assert len(rows) == 30 and {r["query_index"] for r in rows} == {0, 1}
    assert {r["length"] for r in rows} == {4, 6, 8, 10, 12}
    from flows.cli import app

    runner = CliRunner()
    out = runner.invoke(app, ["scripts", "--sample", "--queries", "2", "--seed", "3"])
    assert out.exit_code == 0, out.output
    assert [json.loads(line) for line in out.output.splitlines()] == rows
    out = runner.invoke(app, ["scripts", "--count"])
    assert out.exit_code == 0 and "8654" in out.output and "8398" in out.output
    # `carryon flows`, the command's name before "scripts", still answers (not listed).
    assert runner.invoke(app, ["flows", "--count"]).output == out.output
    assert "flows" not in runner.invoke(app, ["--help"]).output


def test_moves_carry_table1_definitions_and_who_knows_the_intent():
    for m in scripts.MOVES:
        assert m.definition and scripts.get_move(m.name) is m
    assert [m.name for m in scripts.MOVES if m.knows_intent] == [
        "benign_justification", "benign_reasking", "context_switching"]
