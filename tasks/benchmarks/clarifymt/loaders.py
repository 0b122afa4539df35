"""ClarifyMT-style items: a query with hidden slots, crossed with persona rows.

Two formats, one item shape (docs/benchmarks.md, "ClarifyMT"):

- **The project's own JSON** (``sample.json`` beside this module is the team's sample): an
  object ``{format, personas, items}``. A persona row is ``{name, kind, behaviour, rate}``
  (``kind`` one of ``KINDS``: how the user policy treats the hidden slots; ``behaviour``: the
  words the simulated user is given; ``rate``: the share of replies in which the persona's
  deviation shows, default 1). An item is ``{id, query, dimension, subtype, intent, slots,
  clarifying_question, gold_acts, answers, off_topic, prefixes}``: ``dimension`` one of
  ``DIMENSIONS`` or null (an unambiguous query, no slots); a slot is ``{name, value,
  partial, alternative, wrong}`` (the value resolves the query; the other forms are what a
  vague, contradictory or mistaken persona says instead); ``gold_acts`` the right act
  (``ask`` / ``answer``) at depth 1, 2, 3 (the last one holds beyond); a prefix is a stored
  dialogue ``{persona, turns: [{assistant, user}], gold_acts}`` of at most two exchanges,
  which the ``static_prefix`` condition replays. Without ``personas`` the sample's six are used.
- **AmbigNQ** as published (github.com/shmsw25/AmbigQA, CC BY-SA 3.0: loaded from the user's
  path, never shipped; docs/benchmarks.md, "AmbigNQ as published", says what was read):
  ``train.json`` / ``dev.json`` or the ``_light`` files, a list of ``{id, question,
  annotations}``; an annotation is ``{type: singleAnswer, answer: [...]}`` or ``{type:
  multipleQAs, qaPairs: [{question, answer: [...]}]}``. The full files' extra fields
  (``viewed_doc_titles``, ``used_queries``, ``nq_answer``, ``nq_doc_title``) are ignored. A
  question is ambiguous by the upstream evaluation script's rule: *no* annotation is a
  ``singleAnswer`` (one annotator who found a single answer makes it unambiguous). Its hidden
  intents are the first ``multipleQAs`` annotation's disambiguated questions, one drawn as
  the user's (seeded by the question's id, so a file always gives the same draw), whose
  answers are the references; an unambiguous question's references are its ``singleAnswer``
  answers. A disambiguated question may hold several phrasings joined by ``|`` (upstream
  splits them the same way): the first is the question, the rest are kept as its
  paraphrases (``hidden.paraphrases``), never shown joined. Answers are de-duplicated (after
  collapsing whitespace), first spelling kept. AmbigNQ labels no ambiguity dimension
  (``dimension: unclassified``) and stores no dialogue (no static prefix).

Every item is crossed with every persona (items x personas), in diagonal order: the first
``len(items)`` rows take each item once with the personas in turn, so a small
``dataset.limit`` still spreads over items, dimensions and personas. Anything else in a file
is refused in one line naming the file, the row and the field.
"""

from __future__ import annotations

import hashlib
import re
from functools import partial
from pathlib import Path

from tasks.datasets.fields import DataError, read_json, text, texts
from tasks.core.items import Item, item_id
from tasks.core.registry import loader

HERE = Path(__file__).parent
SAMPLE = HERE / "sample.json"
BENCHMARK = "clarifymt"
KINDS = ("precise", "partial_vague", "off_focus", "contradictory", "factually_wrong", "refusal")
DIMENSIONS = ("linguistic", "intent", "contextual", "epistemic", "interactional")
ACTS = ("ask", "answer")
MAX_PREFIX = 2  # exchanges: the static condition judges depth 1-3
ITEM_FIELDS = {"id", "query", "dimension", "subtype", "intent", "slots", "clarifying_question",
               "gold_acts", "answers", "off_topic", "prefixes"}
SLOT_FIELDS = {"name", "value", "partial", "alternative", "wrong"}
DRAW_SALT = "clarifymt-ambignq-v1"


def _read(path) -> object:
    return read_json(Path(path))


# A text field of this format: stripped, every run of whitespace one space; an optional one
# may be null, not blank.
_text = partial(text, collapse=True)


def _acts(value, where: str) -> list[str]:
    if not isinstance(value, list) or not 1 <= len(value) <= 3 or any(a not in ACTS for a in value):
        raise DataError(f"{where}: a list of 1 to 3 acts, each 'ask' or 'answer' (depth 1, 2, 3)")
    return list(value)


def _unknown(row: dict, allowed: set, where: str) -> None:
    extra = sorted(set(row) - allowed)
    if extra:
        raise DataError(f"{where}.{extra[0]}: unknown field (allowed: {', '.join(sorted(allowed))})")


# ----- personas ------------------------------------------------------------------------------
def personas(rows, path) -> list[dict]:
    if not isinstance(rows, list) or not rows:
        raise DataError(f"{path}: personas: a non-empty list of {{name, kind, behaviour, rate}}")
    out, names = [], set()
    for i, p in enumerate(rows):
        where = f"{path}: personas[{i}]"
        if not isinstance(p, dict):
            raise DataError(f"{where}: an object {{name, kind, behaviour, rate}}")
        _unknown(p, {"name", "kind", "behaviour", "rate"}, where)
        name = _text(p.get("name"), f"{where}.name")
        if name in names:
            raise DataError(f"{where}.name: {name!r} repeats an earlier persona")
        names.add(name)
        if p.get("kind") not in KINDS:
            raise DataError(f"{where}.kind: {p.get('kind')!r} is not one of {', '.join(KINDS)}")
        rate = p.get("rate", 1.0)
        if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0 <= rate <= 1:
            raise DataError(f"{where}.rate: a number from 0 to 1 is required")
        out.append({"name": name, "kind": p["kind"], "rate": float(rate),
                    "behaviour": _text(p.get("behaviour"), f"{where}.behaviour")})
    return out


def default_personas() -> list[dict]:
    return personas(_read(SAMPLE)["personas"], SAMPLE)


# ----- the project's own format --------------------------------------------------------------
def _slots(rows, where: str) -> list[dict]:
    if not isinstance(rows, list):
        raise DataError(f"{where}: a list of {{name, value, partial, alternative, wrong}}")
    out, names = [], set()
    for k, s in enumerate(rows):
        w = f"{where}[{k}]"
        if not isinstance(s, dict):
            raise DataError(f"{w}: an object {{name, value, partial, alternative, wrong}}")
        _unknown(s, SLOT_FIELDS, w)
        name = _text(s.get("name"), f"{w}.name")
        if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", name) or name in names:
            raise DataError(f"{w}.name: {name!r}: a distinct identifier (letters, digits, _)")
        names.add(name)
        out.append({"name": name, **{f: _text(s.get(f), f"{w}.{f}", required=f == "value")
                                     for f in ("value", "partial", "alternative", "wrong")}})
    return out


def _prefixes(rows, where: str, persona_names: set) -> dict[str, dict]:
    if rows is None:
        return {}
    if not isinstance(rows, list):
        raise DataError(f"{where}: a list of {{persona, turns, gold_acts}}")
    out = {}
    for k, p in enumerate(rows):
        w = f"{where}[{k}]"
        if not isinstance(p, dict):
            raise DataError(f"{w}: an object {{persona, turns, gold_acts}}")
        _unknown(p, {"persona", "turns", "gold_acts"}, w)
        name = p.get("persona")
        if name not in persona_names or name in out:
            raise DataError(f"{w}.persona: {name!r} names no persona row (or repeats one)")
        turns = p.get("turns")
        if not isinstance(turns, list) or len(turns) > MAX_PREFIX:
            raise DataError(f"{w}.turns: a list of at most {MAX_PREFIX} {{assistant, user}}")
        flat = []
        for j, t in enumerate(turns):
            if not isinstance(t, dict) or set(t) != {"assistant", "user"}:
                raise DataError(f"{w}.turns[{j}]: an object with exactly assistant and user")
            flat += [{"role": "assistant", "content": _text(t["assistant"], f"{w}.turns[{j}].assistant")},
                     {"role": "user", "content": _text(t["user"], f"{w}.turns[{j}].user")}]
        out[name] = {"turns": flat, "gold_acts": _acts(p["gold_acts"], f"{w}.gold_acts")
                     if "gold_acts" in p else None}
    return out


def _item(row, i: int, path, persona_names: set) -> dict:
    where = f"{path}: items[{i}]"
    if not isinstance(row, dict):
        raise DataError(f"{where}: an object {{id, query, dimension, slots, gold_acts, answers, ...}}")
    _unknown(row, ITEM_FIELDS, where)
    dim = row.get("dimension")
    if dim is not None and dim not in DIMENSIONS:
        raise DataError(f"{where}.dimension: {dim!r} is not null or one of {', '.join(DIMENSIONS)}")
    slots = _slots(row.get("slots", []), f"{where}.slots")
    if (dim is None) == bool(slots):
        raise DataError(f"{where}.slots: an ambiguous item (a dimension) needs slots; an "
                        "unambiguous one (dimension null) has none")
    return {"id": _text(row.get("id"), f"{where}.id"), "query": _text(row.get("query"), f"{where}.query"),
            "dimension": dim,
            "subtype": _text(row.get("subtype"), f"{where}.subtype", required=False),
            "intent": _text(row.get("intent"), f"{where}.intent", required=False), "slots": slots,
            "clarifying_question": _text(row.get("clarifying_question"),
                                         f"{where}.clarifying_question", required=False),
            "gold_acts": _acts(row.get("gold_acts"), f"{where}.gold_acts"),
            "answers": texts(row.get("answers"), f"{where}.answers", collapse=True),
            "off_topic": _text(row.get("off_topic"), f"{where}.off_topic", required=False),
            "prefixes": _prefixes(row.get("prefixes"), f"{where}.prefixes", persona_names)}


def load_items_file(path, doc: dict) -> list[Item]:
    _unknown(doc, {"format", "personas", "items"}, f"{path}: (top level)")
    pers = personas(doc["personas"], path) if "personas" in doc else default_personas()
    rows = doc.get("items")
    if not isinstance(rows, list) or not rows:
        raise DataError(f"{path}: items: a non-empty list of items")
    names = {p["name"] for p in pers}
    items = [_item(r, i, path, names) for i, r in enumerate(rows)]
    seen = set()
    for i, it in enumerate(items):
        if it["id"] in seen:
            raise DataError(f"{path}: items[{i}].id: {it['id']!r} repeats an earlier item")
        seen.add(it["id"])
    return cross(items, pers, "sample" if Path(path).resolve() == SAMPLE else "clarifymt")


# ----- AmbigNQ ---------------------------------------------------------------------------------
def _answers(value, where: str) -> list[str]:
    """A list of answer strings, whitespace collapsed, duplicates dropped (the first spelling
    kept: annotators often enter the same answer twice)."""
    if not isinstance(value, list) or not value or not all(isinstance(a, str) for a in value):
        raise DataError(f"{where}: a non-empty list of answer strings is required")
    out = list(dict.fromkeys(" ".join(a.split()) for a in value if a.strip()))
    if not out:
        raise DataError(f"{where}: every answer is empty")
    return out


def phrasings(value, where: str) -> list[str]:
    """A disambiguated question's phrasings: AmbigNQ joins alternatives with "|" (the
    evaluation script and codes/QGData.py split them the same way); empty parts dropped."""
    joined = _text(value, where)
    out = list(dict.fromkeys(" ".join(p.split()) for p in joined.split("|") if p.strip()))
    if not out:
        raise DataError(f"{where}: no phrasing between the '|' separators")
    return out


def drawn(qid: str, n: int) -> int:
    """The index of the disambiguated question drawn as the user's (seeded by the id)."""
    return int(hashlib.sha256(f"{DRAW_SALT}|{qid}".encode()).hexdigest(), 16) % n


def _words(text: str) -> list[str]:
    return re.findall(r"[\w'-]+", text.lower())


def partial_of(original: str, meant: str) -> str | None:
    """Half of what the disambiguated question adds to the original (its first new words)."""
    new = [w for w in _words(meant) if w not in set(_words(original))]
    return " ".join(new[: (len(new) + 1) // 2]) or None


def ambignq_row(row, i: int, path) -> dict:
    where = f"{path}: row {i}"
    if not isinstance(row, dict):
        raise DataError(f"{where}: an object {{id, question, annotations}}")
    qid = row.get("id")
    if isinstance(qid, bool) or not isinstance(qid, (str, int)) or str(qid).strip() == "":
        raise DataError(f"{where}: field 'id': a string is required")
    question = _text(row.get("question"), f"{where}: field 'question'")
    anns = row.get("annotations")
    if not isinstance(anns, list) or not anns:
        raise DataError(f"{where}: field 'annotations': a non-empty list is required")
    single, multis = [], []
    for j, a in enumerate(anns):
        w = f"{where}: field 'annotations[{j}]"
        kind = a.get("type") if isinstance(a, dict) else None
        if kind == "singleAnswer":
            single += [x for x in _answers(a.get("answer"), f"{w}.answer'") if x not in single]
        elif kind == "multipleQAs":
            pairs = a.get("qaPairs")
            if not isinstance(pairs, list) or not pairs:
                raise DataError(f"{w}.qaPairs': a non-empty list of {{question, answer}}")
            parsed = []
            for k, p in enumerate(pairs):
                if not isinstance(p, dict):
                    raise DataError(f"{w}.qaPairs[{k}]': an object {{question, answer}}")
                parsed.append({"phrasings": phrasings(p.get("question"), f"{w}.qaPairs[{k}].question'"),
                               "answers": _answers(p.get("answer"), f"{w}.qaPairs[{k}].answer'")})
            multis.append(parsed)
        else:
            raise DataError(f"{w}.type': {kind!r} is not singleAnswer or multipleQAs")
    qid = str(qid)
    # The evaluation script's rule (ambigqa_evaluate_script.py, is_multi): ambiguous only
    # when no annotator gave a single answer.
    if single or not multis:
        return {"id": qid, "query": question, "dimension": None, "subtype": "ambignq",
                "intent": None, "slots": [], "clarifying_question": None,
                "gold_acts": ["answer"], "answers": single, "off_topic": None, "prefixes": {}}
    multi = multis[0]  # the first multipleQAs annotation
    k = drawn(qid, len(multi))
    meant, *paraphrases = multi[k]["phrasings"]
    other = multi[(k + 1) % len(multi)]["phrasings"][0] if len(multi) > 1 else None
    slot = {"name": "meaning", "value": meant, "partial": partial_of(question, meant),
            "alternative": other, "wrong": None}
    return {"id": qid, "query": question, "dimension": "unclassified", "subtype": "ambignq",
            "intent": meant, "slots": [slot], "clarifying_question": None,
            "gold_acts": ["ask", "answer", "answer"], "answers": multi[k]["answers"],
            "off_topic": None, "prefixes": {}, "paraphrases": paraphrases}


def load_ambignq(path, rows: list) -> list[Item]:
    items = [ambignq_row(r, i, path) for i, r in enumerate(rows)]
    return cross(items, default_personas(), "ambignq")


# ----- crossing --------------------------------------------------------------------------------
def make_item(it: dict, persona: dict, source: str, row: int) -> Item:
    slots = {s["name"]: s["value"] for s in it["slots"]}
    forms = {s["name"]: {f: s[f] for f in ("partial", "alternative", "wrong") if s.get(f)}
             for s in it["slots"]}
    hidden = {"question": it["query"], "slots": slots, "slot_forms": forms,
              "persona": persona["behaviour"], "persona_kind": persona["kind"],
              "persona_rate": persona["rate"], "gold_acts": it["gold_acts"],
              "answers": it["answers"]}
    for key in ("intent", "clarifying_question", "off_topic", "paraphrases"):
        if it.get(key):
            hidden[key] = it[key]
    prompts = {"query": it["query"]}
    prefix = it["prefixes"].get(persona["name"])
    if prefix is not None:
        prompts["static"] = it["query"]
        hidden["prefix"] = prefix["turns"]
        if prefix["gold_acts"]:
            hidden["static_gold_acts"] = prefix["gold_acts"]
    meta = {"ambiguous": bool(slots), "dimension": it["dimension"] or "none",
            "subtype": it["subtype"], "persona": persona["name"],
            "persona_kind": persona["kind"], "source": source, "source_id": it["id"],
            "n_slots": len(slots)}
    return Item(item_id(BENCHMARK, source, it["id"], persona["name"]), row, prompts, hidden, meta)


def cross(items: list[dict], pers: list[dict], source: str) -> list[Item]:
    """items x personas, diagonal first: round r pairs item j with persona (j + r) mod P."""
    out = []
    for r in range(len(pers)):
        for j, it in enumerate(items):
            out.append(make_item(it, pers[(j + r) % len(pers)], source, j))
    return out


def source_of(item: Item) -> str:
    """The ``dataset.source`` an item's file shape belongs to (the team's sample is in the
    project's own format)."""
    return "ambignq" if item.meta["source"] == "ambignq" else "clarifymt"


@loader("clarifymt", sample=SAMPLE, source_of=source_of)
def load(path) -> list[Item]:
    """The project's JSON or AmbigNQ, told apart by shape; any other shape is refused."""
    doc = _read(path)
    if isinstance(doc, dict) and "items" in doc:
        return load_items_file(path, doc)
    if isinstance(doc, list) and doc:
        return load_ambignq(path, doc)
    raise DataError(f"{path}: unknown shape: expected a ClarifyMT object {{personas, items}} or "
                    "an AmbigNQ list of {id, question, annotations}")


@loader("ambignq")
def load_ambignq_file(path) -> list[Item]:
    """AmbigNQ only (a spec of one's own may name it)."""
    doc = _read(path)
    if not isinstance(doc, list) or not doc:
        raise DataError(f"{path}: expected a non-empty JSON list of {{id, question, annotations}}")
    return load_ambignq(path, doc)
