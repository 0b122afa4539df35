"""CASE-Bench as published: every category spelling, object-valued context fields, missing
optional fields, domains, selection counts, and a checklist run on its shapes.

The fixture (tests/fixtures/published_shapes.py) reproduces the published file's shapes with
text written by the team; the published file itself is never shipped."""

from __future__ import annotations

import asyncio
import copy
import re

import pytest
import yaml

from prompts import render, template_names, template_path
from tasks.benchmarks.carryon.categories import ALIASES, CATEGORIES, DOMAIN_NAMES, lookup
from tasks.config import load_config
from tasks.benchmarks.carryon.queries import CONTEXT_FIELDS, DataError, QueryRow, load_casebench, select_queries
from tasks.benchmarks.carryon.intents import intent_messages, situation_lines
from tests.fixtures.published_shapes import (
    EXCLUDED_IDS, PUBLISHED_SPELLINGS, published_category, published_shape_rows,
    write_published_shapes,
)


@pytest.fixture
def published(tmp_path):
    return write_published_shapes(tmp_path / "CASEBench_data.json")


def _cfg(tmp_path, path, **dataset):
    p = tmp_path / "c.yaml"
    p.write_text(yaml.safe_dump({"home": str(tmp_path / "home"),
                                 "dataset": {"source": "casebench", "path": str(path), **dataset}}))
    return load_config(p)


# ----- the alias table ------------------------------------------------------------------------
def test_every_published_spelling_maps_to_its_id_and_domain():
    for cid in CATEGORIES:
        cat = lookup(published_category(cid))
        assert cat is not None and cat.id == cid
    # the eight upstream spellings, exactly as published
    assert lookup("secual crimes").id == 9 and lookup("advice on discirmination behaviours").id == 31
    assert len({published_category(c) for c in CATEGORIES}) == 45
    assert set(ALIASES.values()) == set(range(1, 46))
    # SORRY-Bench's four domains by id range
    expect = {1: "Hate Speech Generation", 5: "Hate Speech Generation",
              6: "Assistance with Crimes or Torts", 25: "Assistance with Crimes or Torts",
              26: "Potentially Inappropriate Topics", 40: "Potentially Inappropriate Topics",
              41: "Potentially Unqualified Advice", 45: "Potentially Unqualified Advice"}
    for cid, domain in expect.items():
        assert CATEGORIES[cid].domain == domain
    assert [sum(c.domain == d for c in CATEGORIES.values()) for d in DOMAIN_NAMES] == [5, 20, 15, 5]
    assert lookup("12").id == 12 and lookup(12).id == 12 and lookup(True) is None
    assert lookup("fraud scams deception") is None  # no guessing


def test_published_shapes_load_with_ids_canonical_names_and_domains(published):
    rows = load_casebench(published)
    assert len(rows) == 45
    by_id = {r.category_id: r for r in rows}
    assert set(by_id) == set(range(1, 46))
    assert by_id[9].category == "sexual crimes" and by_id[9].domain == "Assistance with Crimes or Torts"
    assert by_id[31].category == "advice on discrimination behaviors"
    # the safe context is kept whether it comes first or second in its pair
    assert all(r.context["recipient"]["type"] == "Existing user" for r in rows)
    assert isinstance(by_id[3].context["recipient"]["background"], dict)
    assert isinstance(by_id[11].context["sender"]["nature_of_the_interaction"], dict)


def test_unknown_spelling_still_fails_with_row_and_value(tmp_path):
    rows = published_shape_rows()
    rows[7]["category"] = "secual crime"
    path = tmp_path / "cb.json"
    path.write_text(__import__("json").dumps(rows))
    with pytest.raises(DataError, match=r"row 7: field 'category': unknown category 'secual crime'"):
        load_casebench(path)


# ----- selection ------------------------------------------------------------------------------
def test_default_exclusions_and_safe_rate_threshold(tmp_path, published):
    rows = select_queries(_cfg(tmp_path, published))
    assert len(rows) == 45 - len(EXCLUDED_IDS)
    assert not {r.category_id for r in rows} & set(EXCLUDED_IDS)
    rates = {r.category_id: r.safe_rate for r in load_casebench(published)}
    kept = select_queries(_cfg(tmp_path, published, min_safe_rate=0.5))
    expect = sorted(c for c, v in rates.items() if c not in EXCLUDED_IDS and v >= 0.5)
    assert sorted(r.category_id for r in kept) == expect
    assert any(rates[c] == 0.5 for c in expect)  # the threshold itself is kept (>=)
    # exclusions by canonical name, published spelling or id all mean the same category
    for spelling in ("sexual crimes", "secual crimes", 9, "9"):
        rows = select_queries(_cfg(tmp_path, published, exclude_categories=[spelling]))
        assert 9 not in {r.category_id for r in rows} and len(rows) == 44


# ----- the intent prompt: objects rendered, optional fields optional ----------------------------
def _row(ctx) -> QueryRow:
    return QueryRow("q", "casebench", "impersonation", "Request?", ctx, 0.8, 12, "x")


def test_object_values_are_rendered_as_key_value_text(published):
    rows = {r.category_id: r for r in load_casebench(published)}
    text = intent_messages(rows[33])[0]["content"]  # 33: object background and interaction
    assert "previous experience: Has asked about topic 33 before." in text
    assert "purpose of query: Preparing training material number 33." in text
    assert "{" not in text.split("Answer with JSON")[0] and "'" not in text
    text = intent_messages(rows[11])[0]["content"]
    assert "Kind of interaction: usage: Customised usage. focus: Professional training on topic 11." in text


def test_missing_urgency_leaves_the_line_out(published):
    rows = {r.category_id: r for r in load_casebench(published)}
    assert "urgency" not in rows[5].context["transmission_principle"]
    assert "- Urgency:" not in intent_messages(rows[5])[0]["content"]  # 5 % 4 == 1: no urgency
    assert "- Urgency: Routine" in intent_messages(rows[6])[0]["content"]


def _full_context() -> dict:
    return {part: {k: f"{part} {k} text" for k in keys} for part, keys in CONTEXT_FIELDS.items()}


@pytest.mark.parametrize("part,key", [(p, k) for p, ks in CONTEXT_FIELDS.items() for k in ks])
def test_intent_template_renders_with_each_optional_field_absent(part, key):
    for absent in ("missing", "null"):
        ctx = _full_context()
        if absent == "missing":
            del ctx[part][key]
        else:
            ctx[part][key] = None
        text = intent_messages(_row(ctx))[0]["content"]
        assert f"{part} {key} text" not in text
        others = [f"{p} {k} text" for p, ks in CONTEXT_FIELDS.items() for k in ks
                  if (p, k) != (part, key) and k != "source_accountability"]
        assert all(o in text for o in others)


@pytest.mark.parametrize("part", list(CONTEXT_FIELDS))
def test_intent_template_renders_with_a_whole_part_absent(part):
    ctx = _full_context()
    del ctx[part]
    assert "Situation:" in intent_messages(_row(ctx))[0]["content"]
    assert situation_lines({}) == []


def test_only_the_intent_template_reads_dataset_fields():
    # Every template that sees a dataset row's fields must test them for presence; today the
    # intent template is the only one that sees the context (via situation lines).
    import tasks.benchmarks.carryon  # noqa: F401 (mounts its templates: carryon/intent.j2, ...)

    for name in template_names():
        path = template_path(name)
        src = path.read_text()
        assert not re.search(r"\bcontext\.", src), f"{path} reads context fields directly"


# ----- a checklist run on three published-shape queries -----------------------------------------
@pytest.mark.slow  # the Prefect test server (prefect_harness): a checklist flow run
def test_checklists_on_three_published_shape_queries(prefect_harness, llm_server, write_config,
                                                     tmp_path, published):
    from flows.carryon import carryon
    from warehouse import Warehouse

    path = write_config(dataset={"source": "casebench", "path": str(published), "limit": 3})
    out = asyncio.run(carryon(config=str(path), stages="checklists"))
    assert out["stages"]["intents"]["queries"] == out["stages"]["checklists"]["items"] == 3
    wh = Warehouse(tmp_path / "home" / "warehouse.duckdb")
    q = wh.query("SELECT category, category_id, domain FROM queries ORDER BY category_id")
    assert [r["category_id"] for r in q] == [1, 2, 3]
    assert {r["domain"] for r in q} == {"Hate Speech Generation"}
    done = wh.query("SELECT count(*) AS n FROM checklist_queries WHERE kept")[0]["n"]
    assert done == 3


# ----- a new user's run: three published-shape queries, checklists and the report --------------
SIZES = (7, 12, 30)  # merged lists per query, by category id 1, 2, 3; 30 is capped to 23
CATS = ("Practical Advice", "Domain-Specific Guidance", "Conceptual Explanation", "Audience Benefit",
        "Resource", "Legal Framework", "Case Study")


def _answer_ids(schema: dict) -> list[str]:
    """The answer ids the merge schema allows (the enum under ``source_answers``)."""
    defs = schema.get("$defs", {})

    def resolve(node):
        while isinstance(node, dict) and "$ref" in node:
            node = defs[node["$ref"].rsplit("/", 1)[1]]
        return node

    def walk(node):
        node = resolve(node)
        if isinstance(node, dict):
            if "source_answers" in node.get("properties", {}):
                return resolve(resolve(node["properties"]["source_answers"]).get("items"))["enum"]
            for v in node.values():
                found = walk(v)
                if found:
                    return found
        elif isinstance(node, list):
            for v in node:
                found = walk(v)
                if found:
                    return found
        return None

    return walk(schema)


@pytest.mark.slow  # the Prefect test server (prefect_harness): flow runs and a report
def test_report_shows_checklist_sizes_and_categories_of_published_shape_queries(
        prefect_harness, llm_server, write_config, tmp_path, published):
    import json as _json

    from flows.carryon import carryon
    from tests.support.report import md_table_by_header
    from warehouse import Warehouse

    rows = load_casebench(published)
    size_of = {r.query: SIZES[r.category_id - 1] for r in rows if r.category_id in (1, 2, 3)}

    def merger(body):
        prompt = " ".join(str(m.get("content")) for m in body["messages"])
        n = next(n for q, n in size_of.items() if q in prompt)
        rf = body["response_format"]
        ids = _answer_ids((rf.get("json_schema") or {}).get("schema") or rf.get("schema"))
        # Item k of every list has category CATS[k % 7].
        return _json.dumps({"items": [{"question": f"Does it explain point {k + 1} of the purpose?",
                                       "category": CATS[k % 7], "source_answers": [ids[0]]}
                                      for k in range(n)]})

    def misuse(body):
        rf = body["response_format"]
        schema = (rf.get("json_schema") or {}).get("schema") or rf.get("schema")
        return _json.dumps({k: {"keep": True, "reason": "serves the purpose"} for k in schema["properties"]})

    llm_server.scripts["merger"] = merger
    llm_server.scripts["misuse_filter"] = misuse
    path = write_config(dataset={"source": "casebench", "path": str(published), "limit": 3})
    out = asyncio.run(carryon(config=str(path), stages="checklists,report"))
    assert out["stages"]["intents"]["queries"] == out["stages"]["checklists"]["items"] == 3
    wh = Warehouse(tmp_path / "home" / "warehouse.duckdb")
    assert sorted(r["n"] for r in wh.query(
        "SELECT count(*) AS n FROM checklist_items GROUP BY query_id")) == [7, 12, 23]
    report = next((tmp_path / "home" / "reports").glob("*/report.md")).read_text()

    # Sizes 7, 12 and 23 (30 capped): min 7, mean 42 / 3 = 14, median 12, max 23; all three in
    # 7-23; one capped.
    sizes = md_table_by_header(report, "### Checklist items per query")
    assert sizes == [{"checklists": "3", "min": "7", "mean": "14.00", "median": "12.00", "max": "23",
                      "in_7_23_pct": "100.00", "capped": "1"}]
    # Items per category: item k has CATS[k % 7]. A list of n items has n // 7 + (1 if
    # k < n % 7) of category k: n = 7 -> 1 each; n = 12 -> 2 for k < 5, 1 for k = 5, 6;
    # n = 23 -> 4 for k < 2, 3 otherwise. Totals: k = 0, 1: 1 + 2 + 4 = 7; k = 2, 3, 4:
    # 1 + 2 + 3 = 6; k = 5, 6: 1 + 1 + 3 = 5. Sum 7 + 7 + 6 + 6 + 6 + 5 + 5 = 42.
    cats = {r["category"]: r for r in md_table_by_header(report, "### Checklist items per category")}
    expected = dict(zip(CATS, (7, 7, 6, 6, 6, 5, 5)))
    assert {c: int(cats[c]["items"]) for c in CATS} == expected
    assert any("checklist_sizes.png" in line for line in report.splitlines())
