"""Conversation intent graphs (RegretBench, Ta et al., arXiv 2607.21143; its code is MIT and
was not fetched or copied: the layout below is described from the paper).

Published layout: ``data/<Domain>/<split>/<cig_id>.json``, one graph per file:
``{"cig_id": str, "prompt": str, "intents": [{"slots": {facet: value}, "answer_aliases":
"a|b"}, ...]}``. Read from a user path that is either that folder (or any folder under it:
every ``*.json`` below it, in sorted order; the domain and split are the two folders above a
file) or one JSON list of such objects (then each object's optional ``domain`` and ``split``
fields name them). Extra fields are ignored. Tolerated: ``answer_aliases`` as a list of
strings, slot values as numbers (kept as their text). Refused (DataError naming the file,
the row and the field): anything else, e.g. a missing or empty ``cig_id`` / ``prompt``,
``intents`` not a non-empty list, slots that are not a mapping of facet to text, an intent
without aliases, more than 50 intents.

Items: one per (graph, hidden intent, user behaviour), graph-major, so a small
``dataset.limit`` keeps whole graphs under the first behaviour. Prompt ``prompt`` (the graph's
prompt, the same for every item of a graph, so a target's first turn is one cached call);
hidden: the graph (``cig_id``, ``prompt``, ``intents``), ``hidden_index``, ``answers`` (the
hidden intent's aliases), ``intent`` (its slots as text) and ``rules`` (the reward weights,
the turn cap, the planner's depth, the behaviour and its rate: the loader's arguments, read by
the responder, the planner, the judge and the views alike); meta: domain, split, cig_id,
behaviour, hidden_index, n_intents.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator

from tasks.benchmarks.regret.cig import BEHAVIOURS, MAX_INTENTS
from tasks.datasets.fields import DataError, Style, read_json, text
from tasks.engine.items import Item, item_id
from tasks.engine.registry import loader

SAMPLE = Path(__file__).with_name("sample.json")
BENCHMARK = "regret"


class CigArgs(BaseModel):
    """The benchmark's rules, set in the spec (``loader: {name: cig, args: {...}}``)."""

    model_config = ConfigDict(extra="forbid")
    behaviours: list[str] = Field(default_factory=lambda: list(BEHAVIOURS), min_length=1)
    vague_rate: float = Field(0.5, ge=0, le=1)  # share of vague replies that are partial
    contradict_rate: float = Field(0.3, ge=0, le=1)  # share of conflicting replies
    utility: float = 1.0  # U: the reward of a correct answer
    turn_cost: float = Field(0.1, ge=0)  # c: the cost of each target turn
    ineffective_cost: float = Field(0.1, ge=0)  # lambda: the cost of an ineffective question
    max_turns: int = Field(5, ge=1, le=50)  # must equal the conditions' max_turns
    depth: int = Field(4, ge=0, le=8)  # the reference planner's look-ahead, in questions

    @field_validator("behaviours")
    @classmethod
    def _known(cls, v):
        bad = [b for b in v if b not in BEHAVIOURS]
        if bad:
            raise ValueError(f"{bad[0]!r} is not one of {', '.join(BEHAVIOURS)}")
        if len(set(v)) != len(v):
            raise ValueError("a behaviour is listed twice")
        return v


def _aliases(raw, where: str) -> list[str]:
    if isinstance(raw, str):
        out = [a.strip() for a in raw.split("|")]
    elif isinstance(raw, list) and all(isinstance(a, str) for a in raw):
        out = [a.strip() for a in raw]
    else:
        raise DataError(f"{where}: field 'answer_aliases': a string \"a|b\" (or a list of "
                        "strings) is required")
    out = [a for a in out if a]
    if not out:
        raise DataError(f"{where}: field 'answer_aliases': no alias")
    return out


def _intent(raw, where: str) -> dict:
    if not isinstance(raw, dict):
        raise DataError(f"{where}: an intent is an object with 'slots' and 'answer_aliases'")
    slots = raw.get("slots")
    if not isinstance(slots, dict):
        raise DataError(f"{where}: field 'slots': a mapping {{facet: value}} is required")
    clean = {}
    for facet, value in slots.items():
        if isinstance(value, bool) or not isinstance(value, (str, int, float)) or not str(value).strip():
            raise DataError(f"{where}: field 'slots.{facet}': a non-empty text value is required")
        if not str(facet).strip() or str(facet) == "UNSUPPORTED":
            raise DataError(f"{where}: field 'slots': {facet!r} is not a facet name")
        clean[str(facet)] = str(value).strip()
    return {"slots": clean, "aliases": _aliases(raw.get("answer_aliases"), where)}


def parse_graph(obj, where: str) -> dict:
    """One graph checked: {cig_id, prompt, intents, domain, split}."""
    if not isinstance(obj, dict):
        raise DataError(f"{where}: a graph is a JSON object with cig_id, prompt and intents")
    intents = obj.get("intents")
    if not isinstance(intents, list) or not intents:
        raise DataError(f"{where}: field 'intents': a non-empty list is required")
    if len(intents) > MAX_INTENTS:
        raise DataError(f"{where}: field 'intents': {len(intents)} intents; at most {MAX_INTENTS}")
    out = {"cig_id": text(obj.get("cig_id"), f"{where}: field 'cig_id'"),
           "prompt": text(obj.get("prompt"), f"{where}: field 'prompt'"),
           "intents": [_intent(x, f"{where} (intents[{k}])") for k, x in enumerate(intents)]}
    for field in ("domain", "split"):
        v = obj.get(field)
        if v is not None and not isinstance(v, str):
            raise DataError(f"{where}: field {field!r}: a string is required")
        out[field] = v
    return out


# RegretBench's wording of an unreadable file (tests and scripts match it).
STYLE = Style(cannot_read="{path}: cannot read: {strerror}",
              not_utf8="{path}: not UTF-8 text: {reason}",
              not_json="{where}: not JSON: line {line}, column {column}: {msg}")


def _read_json(path: Path):
    return read_json(path, encoding="utf-8-sig", style=STYLE)


def read_graphs(path) -> list[dict]:
    """Every graph of a folder in the published layout, or of one JSON list file."""
    path = Path(path)
    if path.is_dir():
        files = sorted(p for p in path.rglob("*.json") if p.is_file())
        if not files:
            raise DataError(f"{path}: no .json file in the folder (expected "
                            "data/<Domain>/<split>/<cig_id>.json)")
        graphs = []
        for f in files:
            obj = _read_json(f)
            if isinstance(obj, list):
                raise DataError(f"{f}: row 0: a per-item file holds one graph object, not a list")
            g = parse_graph(obj, f"{f}: row 0")
            rel = f.relative_to(path).parts
            folders = (path.parts + rel)[-3:-1]  # <Domain>/<split> above the file
            if len(folders) == 2:
                g["domain"], g["split"] = folders
            graphs.append(g)
        return graphs
    obj = _read_json(path)
    if not isinstance(obj, list):
        raise DataError(f"{path}: expected a folder of per-item files or a JSON list of "
                        f"graphs, got a JSON {type(obj).__name__}")
    return [parse_graph(x, f"{path}: row {i}") for i, x in enumerate(obj)]


def intent_text(slots: dict) -> str:
    return "; ".join(f"{k.replace('_', ' ')}: {v}" for k, v in slots.items())


@loader("cig", sample=SAMPLE, args=CigArgs)
class CigLoader:
    """``load(path)`` with the spec's rules (an instance is the loader)."""

    def __init__(self, args: CigArgs):
        self.args = args

    def _rules(self, behaviour: str) -> dict:
        a = self.args
        rate = {"vague": a.vague_rate, "contradictory": a.contradict_rate}.get(behaviour, 0.0)
        return {"utility": a.utility, "turn_cost": a.turn_cost,
                "ineffective_cost": a.ineffective_cost, "max_turns": a.max_turns,
                "depth": a.depth, "behaviour": behaviour, "rate": rate}

    def __call__(self, path) -> list[Item]:
        items = []
        for row, g in enumerate(read_graphs(path)):
            graph = {"cig_id": g["cig_id"], "prompt": g["prompt"], "intents": g["intents"]}
            for behaviour in self.args.behaviours:
                for k, intent in enumerate(g["intents"]):
                    hidden = {**graph, "hidden_index": k, "answers": intent["aliases"],
                              "intent": intent_text(intent["slots"]),
                              "rules": self._rules(behaviour)}
                    meta = {"domain": g["domain"], "split": g["split"], "cig_id": g["cig_id"],
                            "behaviour": behaviour, "hidden_index": k,
                            "n_intents": len(g["intents"])}
                    iid = item_id(BENCHMARK, g["domain"] or "", g["split"] or "", g["cig_id"],
                                  str(k), behaviour)
                    items.append(Item(iid, row, {"prompt": g["prompt"]}, hidden, meta))
        return items
