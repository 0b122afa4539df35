"""The sister benchmarks read their datasets as published (issue: whole and as meant): files in
the published shapes (tests/fixtures/sister_shapes.py, content written here) give the right
items through ``carryon data``, the wrong file is one line and exit 2, and what reaches the
models -- the simulators' and judges' prompts in a run against the loopback server -- holds
no joined phrasing, every persona field (or its recorded drop), each persona's own
preferences and no placeholder."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from flows.cli import app
from tasks.benchmarks.clarifymt import loaders
from tasks.benchmarks.eyt.personas import NEMOTRON_ORDER, PersonaArgs, Personas, fit
from tasks.benchmarks.regret.loader import CigArgs, CigLoader
from tasks.datasets.fields import DataError
from tests.fixtures import sister_shapes as S
from tests.support.factories import target_failures_only
from tests.support.llm_server import default_answer
from warehouse import Warehouse

ROOT = Path(__file__).resolve().parents[2]
PERSONAS = Personas(PersonaArgs())


def _invoke(*args) -> tuple[int, str]:
    r = CliRunner().invoke(app, list(args))
    return r.exit_code, r.output


def _config(tmp_path, bench: str, source: str, path, limit=None, api_base=None, **loader_args):
    cfg = yaml.safe_load((ROOT / "configs" / f"{bench}.yaml").read_text())
    cfg["home"] = str(tmp_path / f"home-{bench}-{source}")
    cfg["dataset"] = {"source": source, "path": str(path), "limit": limit}
    if api_base:
        cfg["models"]["defaults"].update(api_base=api_base, timeout_s=5, max_retries=2)
        cfg["gateway"] = {**cfg.get("gateway", {}), "backoff_base_s": 0.01, "backoff_max_s": 0.1}
    out = tmp_path / f"{bench}-{source}-{Path(path).name}.yaml"
    out.write_text(yaml.safe_dump(cfg))
    return str(out)


# ----- AmbigNQ ---------------------------------------------------------------------------------
@pytest.mark.parametrize("full", [False, True])
def test_ambignq_as_published(tmp_path, full):
    items = loaders.load(S.write_ambignq(tmp_path / "dev.json", full=full))
    assert len(items) == S.AMBIGNQ_ITEMS
    by = {}
    for it in items:
        by.setdefault(it.meta["source_id"], it)
    mural = by["-4417720002413101234"]
    # a one-pair draw would hide the split: whichever pair is drawn, no joined phrasing
    assert mural.meta["ambiguous"] and "|" not in json.dumps(mural.hidden)
    pairs = S.AMBIGNQ_LIGHT[0]["annotations"][0]["qaPairs"]
    meant = mural.hidden["intent"]
    k = next(i for i, p in enumerate(pairs) if p["question"].split("|")[0] == meant)
    assert mural.hidden["paraphrases"] == pairs[k]["question"].split("|")[1:]
    assert mural.hidden["answers"] == list(dict.fromkeys(pairs[k]["answer"]))  # de-duplicated
    assert mural.hidden["slot_forms"]["meaning"]["alternative"] == \
        pairs[1 - k]["question"].split("|")[0]
    ferry = by["5521009933117700042"]  # a singleAnswer annotation: unambiguous upstream
    assert not ferry.meta["ambiguous"] and ferry.hidden["answers"] == ["1911"]
    assert by["-902118833300017"].hidden["answers"] == ["three", "3"]


# ----- the CIG release -------------------------------------------------------------------------
def test_cig_release_folder_one_graph_file_and_checksums(tmp_path):
    data = S.write_cig_release(tmp_path)
    load = CigLoader(CigArgs())
    items = load(data)
    assert len(items) == S.CIG_ITEMS  # manifest.json is the release's index, not a graph
    assert {(i.meta["domain"], i.meta["split"]) for i in items} == {("OpenDomainQA", "test")}
    mural = next(i for i in items if i.meta["cig_id"] == "ambigdocs_harbour_mural")
    for intent in mural.hidden["intents"]:  # aliases are the answer, never a facet
        assert set(intent["slots"]) == {"town", "year"}
    assert mural.hidden["answers"] == ["Ines Varga", "Varga"]
    assert "answer_aliases" not in mural.hidden["intent"]
    # the domain folder, the split folder and one graph file give the same graphs' items
    assert [i.item_id for i in load(data / "OpenDomainQA" / "test")] == [i.item_id for i in items]
    one = load(data / "OpenDomainQA" / "test" / "ambigdocs_chapel_bells.json")
    assert [i.item_id for i in one] == [i.item_id for i in items if "chapel" in i.meta["cig_id"]]
    # a changed file no longer matches SHA256SUMS: refused, naming the file and the sums
    f = data / "OpenDomainQA" / "test" / "ambigdocs_chapel_bells.json"
    f.write_text(f.read_text().replace("five", "six"))
    with pytest.raises(DataError) as e:
        load(data)
    assert str(e.value).startswith(f"{f}: SHA-256") and "SHA256SUMS" in str(e.value)


# ----- Nemotron-Personas-USA ---------------------------------------------------------------------
def test_nemotron_persona_every_field_or_its_recorded_drop(tmp_path):
    items = PERSONAS(S.write_nemotron(tmp_path / "personas.jsonl"))
    short, long_ = (i.hidden for i in items)
    assert short["persona_dropped"] == [] and items[0].meta["persona_dropped"] == 0
    text = short["persona"]
    assert "{" not in text and "['" not in text
    assert "67 years old, male, married present. Education: bachelors (stem). Occupation: " \
           "surveying and mapping technician. Lives in Duluth, MN 55802, USA." in text
    for name, label in NEMOTRON_ORDER:  # every narrative column, whole
        assert f"{label}: {S.NEMOTRON_ROWS[0][name]}" in text
    # over the default budget: the least important fields go whole, and are named
    assert long_["persona_dropped"] and len(long_["persona"]) <= 6000
    order = ["persona", "demographics"] + [n for n, _ in NEMOTRON_ORDER]
    assert long_["persona_dropped"] == order[-len(long_["persona_dropped"]):]
    for name, label in NEMOTRON_ORDER:
        kept = f"{label}: {S.NEMOTRON_ROWS[1][name]}" in long_["persona"]
        assert kept != (name in long_["persona_dropped"]), name  # whole or not at all
    assert items[1].meta["persona_dropped"] == len(long_["persona_dropped"])
    # no budget: every field; a missing narrative column falls back to its *_list twin
    row = {**S.NEMOTRON_ROWS[1], "hobbies_and_interests": None}
    [item] = Personas(PersonaArgs(persona_budget=None))(S.write_nemotron(tmp_path / "b.jsonl", [row]))
    assert item.hidden["persona_dropped"] == []
    assert "Hobbies and interests: clock restoration and dawn walks." in item.hidden["persona"]


def test_fit_drops_whole_fields_from_the_least_important():
    fields = [("a", "x" * 10), ("b", "y" * 10), ("c", "z" * 10)]
    assert fit(fields, None) == ("\n".join(t for _, t in fields), [])
    assert fit(fields, 21) == ("x" * 10 + "\n" + "y" * 10, ["c"])
    assert fit(fields, 5) == ("x" * 10, ["b", "c"])  # the first field is kept whole


# ----- PersonaMem-v2 ----------------------------------------------------------------------------
def test_personamem_benchmark_csv_as_published(tmp_path):
    items = PERSONAMEM = PERSONAS(S.write_personamem_csv(tmp_path / "benchmark.csv"))
    assert [i.meta["persona_id"] for i in items] == ["12", "3"]  # "12.0" is persona 12
    nurse, keeper = (i.hidden["persona"] for i in PERSONAMEM)
    assert nurse.splitlines()[0] == "Short persona: A night-shift nurse who bakes bread on her days off."
    assert "Preferences (stereotypical):\n- Bakes rye sourdough every Sunday" in nurse
    assert "Preferences (neutral):\n- Sleeps through the morning after night shifts" in nurse
    assert "sensitive_info" not in nurse and "sensitive info" not in nurse  # the placeholder
    # the expanded persona as sentences, never raw JSON
    assert "Location: city: Leipzig; country: Germany." in nurse and "{" not in nurse
    assert "Languages: German." in nurse and "Short persona" not in nurse.split("\n", 1)[1]
    # a forget request is a change: the earlier preference is not listed as held
    assert "Changes the person asked for:\n- Asked the assistant to forget: Likes loud brass bands" in keeper
    assert "- Likes loud brass bands" not in keeper
    assert "- Keeps a handwritten ledger of every hive" in keeper
    assert "Do not remember" not in keeper
    assert "Bakes rye" not in keeper and "ledger" not in nurse  # each persona's own


def test_personamem_raw_data_folder(tmp_path):
    items = PERSONAS(S.write_personamem_raw(tmp_path / "raw_data"))
    assert [i.meta["persona_id"] for i in items] == ["uuid-3", "uuid-12"]  # persona order
    text = items[0].hidden["persona"]
    assert text.splitlines()[0].startswith("Short persona: A beekeeper")
    assert "- Enjoys beekeeper fairs" in text and "- Collects jazz records" in text
    assert "- Avoids spicy food" in text
    assert "clinic" not in text and "sensitive" not in text and "conversation seed" not in text


# ----- carryon data: counts and refusals ---------------------------------------------------------
def test_carryon_data_lists_each_published_shape(tmp_path):
    cases = [
        ("clarifymt", "ambignq", S.write_ambignq(tmp_path / "dev_light.json"), S.AMBIGNQ_ITEMS),
        ("regret", "cig", S.write_cig_release(tmp_path), S.CIG_ITEMS),
        ("eyt", "nemotron", S.write_nemotron(tmp_path / "p.jsonl"), len(S.NEMOTRON_ROWS)),
        ("eyt", "personamem", S.write_personamem_csv(tmp_path / "b.csv"), S.PERSONAMEM_PERSONAS),
        ("eyt", "personamem", S.write_personamem_raw(tmp_path / "raw_data"), len(S.PERSONAS)),
    ]
    for bench, source, path, n in cases:
        code, out = _invoke("data", "--config", _config(tmp_path, bench, source, path))
        assert code == 0, out
        assert f"{n} items selected" in out, (bench, source, out[-300:])


def _one_line(code: int, out: str, *expect: str) -> None:
    assert code == 2, out
    lines = [ln for ln in out.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in out, out
    for text in expect:
        assert text in lines[0], lines[0]


def test_refusals_are_one_line_naming_the_file(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    header = tmp_path / "header.csv"
    header.write_text(",".join(S.PERSONAMEM_COLUMNS) + "\n")
    manifest_only = tmp_path / "release" / "data" / "OpenDomainQA"
    manifest_only.mkdir(parents=True)
    (manifest_only / "manifest.json").write_text("{}")
    empty_json = tmp_path / "empty.json"
    empty_json.write_text("  \n")
    csv_ = S.write_personamem_csv(tmp_path / "benchmark.csv")
    ambig = S.write_ambignq(tmp_path / "dev.json")
    cases = [
        ("eyt", "nemotron", empty, [str(empty), "the file is empty"]),
        ("eyt", "personamem", header, [str(header), "no rows after the header"]),
        ("regret", "cig", manifest_only, [str(manifest_only), "no graph file in the folder"]),
        ("clarifymt", "ambignq", empty_json, [str(empty_json), "the file is empty"]),
        # a file whose shape belongs to another source than the config names
        ("eyt", "nemotron", csv_, [str(csv_), "shape of source 'personamem'",
                                   "dataset.source is 'nemotron'"]),
        ("clarifymt", "clarifymt", ambig, [str(ambig), "shape of source 'ambignq'"]),
        ("eyt", "personamem", S.write_nemotron(tmp_path / "n.jsonl"),
         ["shape of source 'nemotron'"]),
    ]
    for bench, source, path, expect in cases:
        _one_line(*_invoke("data", "--config", _config(tmp_path, bench, source, path)), *expect)
        _one_line(*_invoke("run", "--config", _config(tmp_path, bench, source, path)), *expect)


# ----- what reaches the models: a run against the loopback server --------------------------------
def _recorder(llm_server, roles, overrides=None):
    """Every role's requests recorded ({role: [last message text]}), answered by the script
    in ``overrides`` or the loopback server's default answer."""
    seen = {r: [] for r in roles}

    def make(role):
        def script(body):
            seen[role].append(body["messages"][-1]["content"])
            return (overrides or {}).get(role, lambda b: default_answer(role, b))(body)
        return script

    llm_server.scripts.update({r: make(r) for r in roles})
    return seen


def _fenced(text: str, label: str) -> str:
    return text.split(f"<<<BEGIN {label} ", 1)[1].split("\n", 1)[1].split("\n<<<END ", 1)[0]


@pytest.mark.slow  # the Prefect test server (prefect_harness): four runs through the CLI
def test_runs_on_published_shapes_send_whole_personas_and_no_joined_phrasing(
        prefect_harness, llm_server, tmp_path):
    def run(path):
        # The loopback server's default answers are junk to some seats (the clarify_agent's
        # act): a target that completed nothing fails the run after its report, by rule.
        code, out = _invoke("run", "--config", path)
        assert target_failures_only(code, out), out

    # EYT on Nemotron-Personas-USA: the simulator sees every field or the persona's recorded drops
    seen = _recorder(llm_server, ["targets", "user_simulator", "eyt_judge"], {
        "targets": lambda b: json.dumps({"perceived_intent": "a plan", "response": "Sure."})})
    path = _config(tmp_path, "eyt", "nemotron", S.write_nemotron(tmp_path / "p.jsonl"),
                   api_base=llm_server.api_base)
    run(path)
    items = PERSONAS(tmp_path / "p.jsonl")
    assert seen["user_simulator"]
    for it in items:
        prompts = [p for p in seen["user_simulator"] if it.hidden["persona"] in p]
        assert prompts, it.meta["persona_id"]  # its persona text, whole, in its own prompts
        for name, label in NEMOTRON_ORDER:
            value = S.NEMOTRON_ROWS[items.index(it)][name]
            shown = all(f"{label}: {value}" in p for p in prompts)
            assert shown != (name in it.hidden["persona_dropped"]), name
    dropped = sum(len(i.hidden["persona_dropped"]) for i in items)
    [md] = _report(path, tmp_path / "home-eyt-nemotron")
    assert f"| nemotron | 2 | 1 | {dropped} |" in md  # the report counts the drops

    # EYT on the PersonaMem-v2 CSV: each persona's own preferences, no placeholder
    for v in seen.values():
        v.clear()
    path = _config(tmp_path, "eyt", "personamem", S.write_personamem_csv(tmp_path / "b.csv"),
                   api_base=llm_server.api_base)
    run(path)
    sims = seen["user_simulator"]
    nurse = [p for p in sims if "night-shift nurse" in p]
    keeper = [p for p in sims if "beekeeper" in p]
    assert nurse and keeper and len(nurse) + len(keeper) == len(sims)
    assert all("Bakes rye sourdough" in p and "ledger" not in p for p in nurse)
    assert all("Keeps a handwritten ledger" in p and "Bakes rye" not in p for p in keeper)
    assert all("forget: Likes loud brass bands" in p and "- Likes loud brass bands" not in p
               for p in keeper)
    assert not any("sensitive_info" in p or '"short_persona"' in p for p in sims)
    assert seen["eyt_judge"] and not any("sensitive_info" in p for p in seen["eyt_judge"])

    # ClarifyMT on AmbigNQ: no joined phrasing reaches the simulator or any judge
    roles = ["targets", "user_simulator", "act_judge", "question_judge", "slot_judge", "move_checker"]
    seen = _recorder(llm_server, roles, {
        "targets": lambda b: "Which mural do you mean?" if len(b["messages"]) < 3 else "Ines Varga."})
    path = _config(tmp_path, "clarifymt", "ambignq", S.write_ambignq(tmp_path / "dev_light.json"),
                   limit=6, api_base=llm_server.api_base)
    run(path)
    sent = [p for r in roles if r != "targets" for p in seen[r]]
    assert seen["user_simulator"] and seen["act_judge"]
    assert not any("?|" in p for p in sent)
    joined = S.AMBIGNQ_LIGHT[0]["annotations"][0]["qaPairs"][0]["question"]
    first, second = joined.split("|")
    assert any(first in p or "restored in 2015" in p for p in seen["user_simulator"])

    # RegretBench on the CIG release: the facets are the release's ask_facets, never the aliases
    def ask(b):
        first = b["messages"][0]["content"]
        if len(b["messages"]) > 1:
            return "Ines Varga." if "mural" in first else "Three."
        return "Which chapel do you mean?" if "chapel" in first else "Which harbour town do you mean?"

    seen = _recorder(llm_server, ["targets", "act_judge", "facet_mapper", "user_simulator"], {
        "targets": ask,
        "act_judge": lambda b: json.dumps({"reason": "r", "on_target": None, "act": (
            "clarifying_question" if _fenced(b["messages"][-1]["content"], "RESPONSE").endswith("?")
            else "direct_answer")}),
        "facet_mapper": lambda b: json.dumps({"reason": "r", "facet": next(
            (f for f in ("chapel", "year", "town")
             if f in _fenced(b["messages"][-1]["content"], "QUESTION")), "UNSUPPORTED")})})
    path = _config(tmp_path, "regret", "cig", S.write_cig_release(tmp_path / "cig"),
                   api_base=llm_server.api_base)
    run(path)
    maps = seen["facet_mapper"]
    assert maps and seen["user_simulator"]
    mural = next(p for p in maps if "harbour" in p)
    assert "town" in mural and "year" in mural
    for p in maps:
        assert "answer_aliases" not in p and not re.search(r"Ines Varga|Tomas Reyl|Ada Lund", p)
    for p in seen["user_simulator"]:  # the responder states facet values, never an answer
        assert "answer_aliases" not in p and not re.search(r"Varga|Reyl|Lund", p)
    wh = Warehouse(tmp_path / "home-regret-cig" / "warehouse.duckdb")
    [n] = wh.query("SELECT count(*) AS n FROM episodes WHERE status = 'completed'")
    assert n["n"] == 2 * S.CIG_ITEMS  # the model and the reference planner


def _report(config: str, home: Path) -> list[str]:
    code, out = _invoke("report", "--config", config)
    assert code == 0, out
    return [p.read_text() for p in (home / "reports").glob("*/report.md")]
