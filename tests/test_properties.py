"""Property-based tests: whatever a user or a model throws at us, the answer is a value or a
named error — never an uncaught traceback."""

from __future__ import annotations

import pytest

import json

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, Field

from tasks.config import ConfigError, load_config
from tasks.gateway import parse_structured

SETTINGS = settings(max_examples=150, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])

scalars = st.one_of(st.none(), st.booleans(), st.integers(-5, 50), st.floats(allow_nan=False, width=32),
                    st.text(max_size=12))
json_like = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=10), inner, max_size=4)), max_leaves=12)

config_keys = st.sampled_from(["home", "seed", "dataset", "flows", "models", "checklists",
                               "judging", "gateway", "bogus"])
model_entry = st.dictionaries(st.sampled_from(["name", "model", "api_base", "temperature", "max_tokens",
                                               "rpm", "max_concurrency", "structured", "mode", "x"]),
                              scalars, max_size=5)
models = st.fixed_dictionaries({}, optional={
    "targets": st.lists(model_entry, max_size=3), "user_simulator": model_entry,
    "ensemble": st.lists(model_entry, max_size=3), "benutil_judge": st.one_of(model_entry, st.lists(model_entry, max_size=2)),
    "defaults": model_entry})
configs = st.one_of(
    st.dictionaries(config_keys, json_like, max_size=5),
    st.fixed_dictionaries({"models": models}, optional={
        "flows": st.fixed_dictionaries({}, optional={"lengths": st.lists(st.integers(0, 14), max_size=5),
                                                     "bc_per_length": scalars}),
        "dataset": st.fixed_dictionaries({}, optional={"source": st.sampled_from(["sample", "casebench", "x"]),
                                                       "path": scalars, "limit": scalars})}),
    json_like,
)


@SETTINGS
@given(doc=configs)
@pytest.mark.slow  # one of the fast suite's slowest (kept under 5 min on 2 cores)
def test_any_config_loads_or_names_its_problem(tmp_path, doc):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(doc))
    try:
        cfg = load_config(path)
    except ConfigError as e:
        assert str(path) in str(e)
        return
    for role in ("targets", "ensemble", "benutil_judge"):
        for spec in cfg.role_specs(role):
            assert spec.model


@SETTINGS
@given(text=st.text(max_size=200))
def test_any_yaml_text_loads_or_names_its_problem(tmp_path, text):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    try:
        load_config(path)
    except ConfigError as e:
        assert str(path) in str(e)


class Verdict(BaseModel):
    fulfilled: bool
    evidence: str


class Score(BaseModel):
    score: int = Field(ge=1, le=5)
    reason: str


@SETTINGS
@given(raw=st.one_of(st.text(max_size=300), json_like.map(json.dumps),
                     st.builds(lambda d: "```json\n" + json.dumps(d) + "\n```", json_like)))
def test_any_model_output_parses_or_gives_a_reason(raw):
    for schema in (Verdict, Score):
        obj, err = parse_structured(raw, schema)
        assert (obj is None) != (err is None)
        if obj is not None:
            assert isinstance(obj, schema)
        else:
            assert isinstance(err, str) and err


def test_parse_examples():
    assert parse_structured('{"score": 4, "reason": "r"}', Score)[0].score == 4
    assert parse_structured('Sure! {"score": 2, "reason": "ok"} hope this helps', Score)[0].score == 2
    obj, err = parse_structured('{"score": 7, "reason": "r"}', Score)
    assert obj is None and "score" in err
    obj, err = parse_structured('{"fulfilled": "maybe", "evidence": "e"}', Verdict)
    assert obj is None and "fulfilled" in err
