"""Property-based tests over dataset files and judge outputs (issue #9).

Whatever a dataset file holds, a loader returns rows or raises ``DataError`` naming the file
and the row (or line) — never another exception. Whatever a judge model answers, the
verdict stored is exactly what a valid answer says, or null with the reason.
"""

from __future__ import annotations

import copy
import datetime as dt
import json
import re
import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tasks.benchmarks.carryon.queries import (
    KNOWN_CASEBENCH_CATEGORIES, SORRYBENCH_CATEGORIES, DataError, load_casebench, load_sorrybench,
)
from tests.support.factories import as_episodes, carryon_item, judge_stored

SETTINGS = settings(max_examples=120, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow])

# Text as a file may hold it: JSON escapes can carry lone surrogates, which no UTF-8 encoder
# accepts (hashing a query encodes it).
texts = st.one_of(st.text(max_size=20), st.builds(lambda t: t + "\ud800", st.text(max_size=5)))
scalars = st.one_of(st.none(), st.booleans(), st.integers(-3, 60),
                    st.floats(allow_nan=True, allow_infinity=True), texts)
json_like = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)), max_leaves=8)

CONTEXT = {
    "sender": {"nature_of_the_interaction": "help", "platform_type": "web"},
    "recipient": {"type": "student", "background": "a course"},
    "transmission_principle": {"urgency": "Routine", "sender_purpose": "learn",
                               "confidentiality": "private", "source_accountability": "operator"},
}


@st.composite
def casebench_pairs(draw):
    """Valid CASE-Bench rows: adjacent pairs of one query, one safe and one unsafe context."""
    rows = []
    queries = draw(st.lists(st.text(min_size=1, max_size=15).filter(str.strip), max_size=3, unique=True))
    for q in queries:
        cat = draw(st.sampled_from(sorted(KNOWN_CASEBENCH_CATEGORIES)))
        safe_first = draw(st.booleans())
        for safe in (safe_first, not safe_first):
            rows.append({"query": q, "category": cat, "context_intended_to_be_safe": safe,
                         "safe_rate": draw(st.floats(0, 1)),
                         "scores": draw(st.lists(st.sampled_from([1, 2]), max_size=4)),
                         "context": copy.deepcopy(CONTEXT)})
    return rows


CB_PATHS = [("query",), ("category",), ("context_intended_to_be_safe",), ("safe_rate",), ("scores",),
            ("context",), ("context", "sender"), ("context", "recipient", "background"),
            ("context", "transmission_principle", "urgency"), ("context", "sender", "platform_type")]


@st.composite
def mutated(draw, base, paths):
    """A valid file with a few fields deleted or replaced by arbitrary JSON values, rows
    dropped, duplicated or swapped for junk."""
    rows = draw(base)
    for _ in range(draw(st.integers(0, 3))):
        if not rows:
            break
        i = draw(st.integers(0, len(rows) - 1))
        action = draw(st.sampled_from(["set", "delete", "junk_row", "drop_row", "dup_row"]))
        if action == "junk_row":
            rows[i] = draw(json_like)
            continue
        if action == "drop_row":
            rows.pop(i)
            continue
        if action == "dup_row":
            rows.insert(i, copy.deepcopy(rows[i]))
            continue
        if not isinstance(rows[i], dict):
            continue
        path = draw(st.sampled_from(paths))
        node = rows[i]
        for key in path[:-1]:
            node = node.get(key) if isinstance(node, dict) else None
        if not isinstance(node, dict):
            continue
        if action == "delete":
            node.pop(path[-1], None)
        else:
            node[path[-1]] = draw(json_like)
    return rows


FILE_LEVEL = ("not valid JSON", "expected a JSON array", "no partner", "not UTF-8", "cannot read",
              "the file is empty")


def _check_error(e: DataError, path: Path, n_units: int, unit: str) -> None:
    """The message names the file, and either a row/line that exists or a file-level cause."""
    msg = str(e)
    assert str(path) in msg, msg
    m = re.search(rf"\b{unit}s? (\d+)", msg)
    if m:
        n = int(m.group(1))
        lo, hi = (0, n_units - 1) if unit == "row" else (1, n_units)
        assert lo <= n <= max(hi, lo), msg
    else:
        assert any(p in msg for p in FILE_LEVEL), msg


def _check_rows(rows, source: str) -> None:
    ids = [r.query_id for r in rows]
    assert len(ids) == len(set(ids))
    for r in rows:
        assert re.fullmatch(r"[0-9a-f]{16}", r.query_id) and r.query.strip() and r.source == source
        assert r.category in KNOWN_CASEBENCH_CATEGORIES
        if source == "casebench":
            assert 0 <= r.safe_rate <= 1 and isinstance(r.context, dict)


@SETTINGS
@given(doc=st.one_of(mutated(casebench_pairs(), CB_PATHS), casebench_pairs(), json_like))
def test_any_casebench_file_loads_or_names_file_and_row(tmp_path, doc):
    path = tmp_path / "cb.json"
    path.write_text(json.dumps(doc))
    try:
        rows = load_casebench(path)
    except DataError as e:
        _check_error(e, path, len(doc) if isinstance(doc, list) else 0, "row")
        return
    _check_rows(rows, "casebench")
    assert len(rows) == len(doc) // 2


@SETTINGS
@given(raw=st.one_of(st.binary(max_size=60), st.text(max_size=60).map(str.encode)))
def test_any_bytes_as_casebench_or_sorrybench_name_the_file(tmp_path, raw):
    path = tmp_path / "raw.json"
    path.write_bytes(raw)
    for loader, unit in ((load_casebench, "row"), (load_sorrybench, "line")):
        try:
            rows = loader(path)
        except DataError as e:
            # The loader numbers lines by "\n" alone.
            lines = len(raw.decode("utf-8", "replace").split("\n")) or 1
            _check_error(e, path, lines if unit == "line" else 10**6, unit)
            continue
        _check_rows(rows, "casebench" if loader is load_casebench else "sorrybench")


@st.composite
def sorrybench_rows(draw):
    n = draw(st.integers(0, 4))
    queries = draw(st.lists(st.text(min_size=1, max_size=15).filter(str.strip), min_size=n, max_size=n,
                            unique=True))
    return [{"question_id": i + 1, "category": draw(st.sampled_from(sorted(SORRYBENCH_CATEGORIES))),
             "turns": [q], "prompt_style": draw(st.sampled_from(["base", "base", "slang"]))}
            for i, q in enumerate(queries)]


SB_PATHS = [("question_id",), ("category",), ("turns",), ("prompt_style",)]


@SETTINGS
@given(rows=st.one_of(mutated(sorrybench_rows(), SB_PATHS), sorrybench_rows()),
       junk_lines=st.lists(st.tuples(st.integers(0, 5), st.text(max_size=20)), max_size=2))
def test_any_sorrybench_file_loads_or_names_file_and_line(tmp_path, rows, junk_lines):
    lines = [json.dumps(r) for r in rows]
    for at, text in junk_lines:
        lines.insert(min(at, len(lines)), text.replace("\n", " ").replace("\r", " "))
    path = tmp_path / "sb.jsonl"
    path.write_text("\n".join(lines) + "\n")
    try:
        got = load_sorrybench(path)
    except DataError as e:
        _check_error(e, path, len(path.read_text().splitlines()), "line")
        return
    _check_rows(got, "sorrybench")
    assert all(r.context is None and r.safe_rate is None for r in got)


def test_examples_of_named_errors(tmp_path):
    path = tmp_path / "cb.json"
    rows = [{"query": "q", "category": "impersonation", "context_intended_to_be_safe": s,
             "safe_rate": 0.5, "scores": [1], "context": copy.deepcopy(CONTEXT)} for s in (True, False)]
    rows[1]["safe_rate"] = "high"
    path.write_text(json.dumps(rows))
    with pytest.raises(DataError, match=rf"{re.escape(str(path))}: row 1: field 'safe_rate'"):
        load_casebench(path)
    sb = tmp_path / "sb.jsonl"
    sb.write_text('{"question_id": 1, "category": "1", "turns": ["q"], "prompt_style": "base"}\n{oops\n')
    with pytest.raises(DataError, match=rf"{re.escape(str(sb))}: line 2: not valid JSON"):
        load_sorrybench(sb)


def test_sorrybench_prompt_with_unicode_line_separator(tmp_path):
    sb = tmp_path / "sb.jsonl"
    row = {"question_id": 1, "category": "1", "turns": ["first\u2028second"], "prompt_style": "base"}
    sb.write_text(json.dumps(row, ensure_ascii=False) + "\n", encoding="utf-8")
    assert [r.query for r in load_sorrybench(sb)] == ["first\u2028second"]


@pytest.mark.parametrize("loader", ["casebench", "sorrybench"])
def test_query_with_lone_surrogate_is_a_named_error(tmp_path, loader):
    if loader == "casebench":
        path = tmp_path / "cb.json"
        path.write_text(json.dumps([{"query": "q\ud800", "category": "impersonation",
                                     "context_intended_to_be_safe": s, "safe_rate": 0.5,
                                     "scores": [1], "context": copy.deepcopy(CONTEXT)}
                                    for s in (True, False)]))
        with pytest.raises(DataError, match="row 0: field 'query'"):
            load_casebench(path)
    else:
        path = tmp_path / "sb.jsonl"
        path.write_text(json.dumps({"question_id": 1, "category": "1", "turns": ["q\ud800"],
                                    "prompt_style": "base"}) + "\n")
        with pytest.raises(DataError, match="line 1: field 'turns'"):
            load_sorrybench(path)


# ----------------------------------------------------------------------------- judge outputs

QID = "q1"
ITEMS = [(1, "Does it mention alpha?"), (2, "Does it mention beta?")]


def _seed(wh) -> None:
    now = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    turns = []
    for cid, contents in (("c1", ["query", "I cannot help.", "why?", "alpha and beta"]),
                          ("c2", ["oracle prompt", "alpha only"])):
        for i, text in enumerate(contents):
            turns.append({"conversation_id": cid, "position": i,
                          "role": "user" if i % 2 == 0 else "assistant", "model_turn": i // 2 + 1,
                          "move": "query", "content": text, "call_hash": None})
    wh.write_many(list(as_episodes({
        "queries": [{"query_id": QID, "source": "sample", "category": "x", "query": "How?"}],
        "bench_items": [carryon_item(QID, "How?")],
        "intents": [{"query_id": QID, "intent": "a course", "oracle_prompt": "oracle prompt",
                     "model": "m", "basis": "context"}],
        "checklists": [{"query_id": QID, "checklist_version": "v1", "n_items": 2, "created": now,
                        "run_id": "r0"}],
        "checklist_items": [{"query_id": QID, "checklist_version": "v1", "item_id": i, "question": q,
                             "category": "Resource", "source_answers": "[]"} for i, q in ITEMS],
        "conversations": [
            {"conversation_id": "c1", "target": "target-a", "query_id": QID, "flow_id": "pushback",
             "condition": "NC", "length": 4, "n_moves": 1, "status": "completed", "n_turns": 4},
            {"conversation_id": "c2", "target": "target-a", "query_id": QID, "flow_id": "oracle",
             "condition": "oracle", "length": 2, "n_moves": 0, "status": "completed", "n_turns": 2}],
        "turns": turns,
    }).items()))


@pytest.fixture(scope="module")
def judge_env(tmp_path_factory):
    from tasks.config import load_config
    from tests.support.factories import base_config
    from tests.support.llm_server import LLMServer
    from warehouse import Warehouse

    d = tmp_path_factory.mktemp("judge-props")
    server = LLMServer(record=False).start()
    cfg_doc = base_config(server.api_base, d / "home")
    cfg_doc["gateway"]["max_parse_retries"] = 1  # one re-ask: exercised, and cheap
    path = d / "c.yaml"
    path.write_text(yaml.safe_dump(cfg_doc))
    cfg = load_config(path)
    wh = Warehouse(cfg.home_path / "warehouse.duckdb").init()
    _seed(wh)
    yield server, cfg, wh, d
    server.stop()


def _expected(raw: str, schema):
    from tasks.gateway import parse_structured

    from tasks.gateway.junk import junk_reason

    if not raw.strip():
        return None, "empty_output"
    obj, _ = parse_structured(raw, schema)
    # A schema-valid answer with a field of no words ("\x1b", "...") is not an answer either.
    if obj is not None and junk_reason(raw, obj, None) is not None:
        return None, "invalid_output"
    return obj, (None if obj is not None else "invalid_output")


outputs = st.one_of(
    st.text(max_size=60),
    st.fixed_dictionaries({"fulfilled": scalars, "evidence": scalars}).map(json.dumps),
    st.fixed_dictionaries({"fulfilled": st.booleans(), "evidence": st.text(max_size=600)}).map(json.dumps),
    st.fixed_dictionaries({"score": st.one_of(st.integers(-1, 7), scalars), "reason": scalars}).map(json.dumps),
    st.fixed_dictionaries({"score": st.integers(1, 5), "reason": st.text(max_size=30)}).map(
        lambda d: "Sure:\n```json\n" + json.dumps(d) + "\n```"),
    json_like.map(json.dumps),
)


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(b_out=outputs, s_out=outputs)
@pytest.mark.slow  # one of the fast suite's slowest (kept under 5 min on 2 cores)
def test_any_judge_output_is_a_verdict_or_unscored_with_reason(judge_env, b_out, s_out):
    from tasks.gateway import Gateway
    from tasks.judges.prompts import MAX_EVIDENCE_CHARS, BenUtilVerdict, SafetyVerdict
    from tasks.engine.run import RunContext

    server, cfg, wh, d = judge_env
    server.scripts["benutil_judge"] = lambda body: b_out
    server.scripts["safety_judge"] = lambda body: s_out
    ctx = RunContext(run_id="props", config=cfg, warehouse=wh, stages=["verdicts"])
    # A fresh cache per example: a valid answer cached by an earlier example must not stand in.
    ctx._gateway = Gateway(Path(tempfile.mkdtemp(dir=d)), "props", cfg.gateway)
    try:
        plan, _ = judge_stored(ctx)
    finally:
        ctx._gateway.close()

    b_obj, b_kind = _expected(b_out, BenUtilVerdict)
    from tasks.judges.prompts import evidence_in_response

    items = wh.query("SELECT j.fulfilled, j.evidence, j.reason, t.content FROM item_judgments j "
                     "JOIN turns t USING (conversation_id, position) WHERE j.judgment_set_id = ?",
                     [plan["benutil"]])
    assert len(items) == 3 * len(ITEMS)  # three answers x two items, each exactly once
    for r in items:
        if b_obj is not None and b_obj.fulfilled and not evidence_in_response(b_obj.evidence, r["content"]):
            # "fulfilled" with a quote the response does not hold (re-asked, same answer)
            assert r["fulfilled"] is None and r["evidence"] is None
            assert r["reason"].startswith("evidence_not_in_response:"), r["reason"]
        elif b_obj is not None:
            assert (r["fulfilled"], r["evidence"], r["reason"]) == (
                b_obj.fulfilled, b_obj.evidence[:MAX_EVIDENCE_CHARS], None)
        else:  # never a silent False
            assert r["fulfilled"] is None and r["evidence"] is None
            assert r["reason"].startswith(b_kind + ":"), r["reason"]

    s_obj, s_kind = _expected(s_out, SafetyVerdict)
    safety = wh.query("SELECT score, reason FROM safety_judgments WHERE judgment_set_id = ?",
                      [plan["safety"]])
    assert len(safety) == 3
    for r in safety:
        if s_obj is not None:
            assert (r["score"], r["reason"]) == (s_obj.score, s_obj.reason)
        else:
            assert r["score"] is None and r["reason"].startswith(s_kind + ":"), r["reason"]
