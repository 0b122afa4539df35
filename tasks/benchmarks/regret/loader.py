"""Conversation intent graphs (RegretBench, Ta et al., arXiv 2607.21143; its code is MIT).
docs/benchmarks.md, "RegretBench CIG release", says what was read of the release and how.

The release (dataset 1.0.0, source commit b2978e1): ``data/<Domain>/<split>/<cig_id>.json``,
one graph per file, with ``manifest.json`` and ``SHA256SUMS`` in the domain folder. A graph:
``{"cig_id", "prompt", "intents": [{"slots": {facet: value, ..., "answer_aliases": "a|b"}}],
"semantic_action_schema": {"ask_facets": [facet, ...]}, "reference_questions":
[{"semantic_action": "ask:<facet>", "text"}], "latent_variables": ...}``. What is read:

- ``cig_id``, ``prompt`` (required text);
- ``intents[].slots``: the facet values; ``answer_aliases`` inside ``slots`` is the intent's
  answer (a "|"-joined string or a list), never a facet one could ask about. The team's
  sample (and the shape the paper describes) puts ``answer_aliases`` beside ``slots``; both
  are read, and an intent with both is refused (which one is meant?);
- ``semantic_action_schema.ask_facets`` when present: the askable facets, in the release's
  order; slot keys outside it are not askable and are left out of the graph (a facet listed
  there must have a value in some intent). Without it every slot key is a facet;
- ``reference_questions``, ``latent_variables`` and any other field: not used (the planner
  and the responder work from the facets), ignored on purpose.

The user's path is a folder (the release's ``data/``, a domain or a split folder: every
``*.json`` below it in sorted order, ``manifest.json`` skipped as the release's index; the
domain and split are the two folders above each file), one graph file (a JSON object), or
one JSON list of graphs (then each object's optional ``domain`` and ``split`` name them). A
``SHA256SUMS`` file in a graph's folder or up to two folders above it (paths relative to
it, ``sha256sum``'s format) is checked for every graph file it lists; a file it does not
list is read unchecked (a user's own graph beside the release). Tolerated: slot values as
numbers (kept as their text). Refused (DataError naming the file, the row and the field):
anything else, e.g. a folder with no graph, a checksum that does not match, a missing or
empty ``cig_id`` / ``prompt``, ``intents`` not a non-empty list, slots that are not a
mapping of facet to text, an intent without aliases, more than 50 intents.

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

import hashlib
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator

from tasks.benchmarks.regret.cig import BEHAVIOURS, MAX_INTENTS
from tasks.datasets.fields import DataError, Style, read_dataset, read_json, read_text, text
from tasks.core.items import Item, item_id
from tasks.core.registry import loader

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


def _intent(raw, where: str, facets: list[str] | None) -> dict:
    if not isinstance(raw, dict):
        raise DataError(f"{where}: an intent is an object with 'slots' (holding 'answer_aliases')")
    slots = raw.get("slots")
    if not isinstance(slots, dict):
        raise DataError(f"{where}: field 'slots': a mapping {{facet: value}} is required")
    if "answer_aliases" in slots and "answer_aliases" in raw:
        raise DataError(f"{where}: field 'answer_aliases': given both inside 'slots' (the "
                        "release's place) and beside it; keep one")
    # The release keeps the answer inside slots; it is the intent's answer, not a facet.
    aliases = slots["answer_aliases"] if "answer_aliases" in slots else raw.get("answer_aliases")
    clean = {}
    for facet, value in slots.items():
        if facet == "answer_aliases" or (facets is not None and facet not in facets):
            continue
        if isinstance(value, bool) or not isinstance(value, (str, int, float)) or not str(value).strip():
            raise DataError(f"{where}: field 'slots.{facet}': a non-empty text value is required")
        if not str(facet).strip() or str(facet) == "UNSUPPORTED":
            raise DataError(f"{where}: field 'slots': {facet!r} is not a facet name")
        clean[str(facet)] = str(value).strip()
    return {"slots": clean, "aliases": _aliases(aliases, where)}


def _ask_facets(obj: dict, where: str) -> list[str] | None:
    """The release's askable facets (``semantic_action_schema.ask_facets``), or None."""
    schema = obj.get("semantic_action_schema")
    if schema is None:
        return None
    facets = schema.get("ask_facets") if isinstance(schema, dict) else None
    if not isinstance(facets, list) or not all(isinstance(f, str) and f.strip() for f in facets):
        raise DataError(f"{where}: field 'semantic_action_schema.ask_facets': a list of facet "
                        "names is required")
    if "answer_aliases" in facets:
        raise DataError(f"{where}: field 'semantic_action_schema.ask_facets': 'answer_aliases' "
                        "is the intent's answer, not a facet to ask about")
    return facets


def parse_graph(obj, where: str) -> dict:
    """One graph checked: {cig_id, prompt, intents, domain, split}."""
    if not isinstance(obj, dict):
        raise DataError(f"{where}: a graph is a JSON object with cig_id, prompt and intents")
    intents = obj.get("intents")
    if not isinstance(intents, list) or not intents:
        raise DataError(f"{where}: field 'intents': a non-empty list is required")
    if len(intents) > MAX_INTENTS:
        raise DataError(f"{where}: field 'intents': {len(intents)} intents; at most {MAX_INTENTS}")
    facets = _ask_facets(obj, where)
    out = {"cig_id": text(obj.get("cig_id"), f"{where}: field 'cig_id'"),
           "prompt": text(obj.get("prompt"), f"{where}: field 'prompt'"),
           "intents": [_intent(x, f"{where} (intents[{k}])", facets) for k, x in enumerate(intents)]}
    for facet in facets or ():
        if not any(facet in i["slots"] for i in out["intents"]):
            raise DataError(f"{where}: field 'semantic_action_schema.ask_facets': {facet!r} "
                            "has a value in no intent's slots")
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


MANIFEST = "manifest.json"  # the release's index of its files, not a graph
SUMS = "SHA256SUMS"


def _sums(folder: Path, cache: dict) -> dict[str, str]:
    """{relative path: hex digest} of ``folder``'s SHA256SUMS ({} without one)."""
    if folder not in cache:
        entries = {}
        sums = folder / SUMS
        if sums.is_file():
            for n, line in enumerate(read_text(sums, style=STYLE).splitlines(), start=1):
                if not line.strip():
                    continue
                digest, _, name = line.strip().partition(" ")
                name = name.strip().removeprefix("*")  # sha256sum's binary-mode mark
                if len(digest) != 64 or not name:
                    raise DataError(f"{sums}: line {n}: not '<sha256>  <path>'")
                entries[name] = digest.lower()
        cache[folder] = entries
    return cache[folder]


def verify_checksum(f: Path, cache: dict) -> None:
    """Check ``f`` against the first SHA256SUMS in its folder or up to two above that lists
    it (the release keeps one per domain, naming ``<split>/<cig_id>.json``)."""
    for folder in (f.parent, f.parent.parent, f.parent.parent.parent):
        rel = f.relative_to(folder).as_posix()
        digest = _sums(folder, cache).get(rel)
        if digest is not None:
            actual = hashlib.sha256(read_dataset(f)).hexdigest()
            if actual != digest:
                raise DataError(f"{f}: SHA-256 {actual[:12]}... does not match {folder / SUMS} "
                                f"({digest[:12]}...): a changed or truncated download")
            return


def _folders(path: Path) -> tuple[str, str] | None:
    """<Domain>, <split>: the two folders above a graph file."""
    parts = path.resolve().parts[:-1]
    return (parts[-2], parts[-1]) if len(parts) >= 2 else None


def read_graphs(path) -> list[dict]:
    """Every graph of a folder in the release layout, of one graph file, or of one JSON list
    file."""
    path = Path(path)
    cache: dict = {}
    if path.is_dir():
        files = sorted(p for p in path.rglob("*.json") if p.is_file() and p.name != MANIFEST)
        if not files:
            raise DataError(f"{path}: no graph file in the folder (expected "
                            "data/<Domain>/<split>/<cig_id>.json)")
        graphs = []
        for f in files:
            verify_checksum(f, cache)
            obj = _read_json(f)
            if isinstance(obj, list):
                raise DataError(f"{f}: row 0: a per-item file holds one graph object, not a list")
            g = parse_graph(obj, f"{f}: row 0")
            folders = _folders(f)
            if folders:
                g["domain"], g["split"] = folders
            graphs.append(g)
        return graphs
    obj = _read_json(path)
    if isinstance(obj, dict):  # one graph file of the release
        verify_checksum(path, cache)
        g = parse_graph(obj, f"{path}: row 0")
        folders = _folders(path)
        if folders and g["domain"] is None and g["split"] is None:
            g["domain"], g["split"] = folders
        return [g]
    if not isinstance(obj, list) or not obj:
        raise DataError(f"{path}: expected a folder of graph files, one graph object or a "
                        f"non-empty JSON list of graphs, got {_kind(obj)}")
    return [parse_graph(x, f"{path}: row {i}") for i, x in enumerate(obj)]


def _kind(obj) -> str:
    return "an empty list" if obj == [] else f"a JSON {type(obj).__name__}"


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
