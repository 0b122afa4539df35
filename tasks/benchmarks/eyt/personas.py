"""EYT-style items: a persona and an intent trajectory (the latent intent at each turn).

One loader, ``eyt_personas``, reads three kinds of file, told apart by their shape (a file of
any other shape is refused in one line naming the file, the row and the field; so is a file
whose shape is another source's than ``dataset.source``, an empty file and a CSV with a
header and no row). docs/benchmarks.md, "Nemotron-Personas-USA" and "PersonaMem-v2", says
what was read of each published dataset and how.

- the team's sample (``sample.json`` beside this module, written for this benchmark): a JSON
  list of ``{id, persona, opening, trajectory}``; a trajectory is a list of segments
  ``{turn, intent, explicit}``: from model turn ``turn`` on, the user's latent intent is
  ``intent``; ``explicit`` (default false) lets the simulated user name it outright;
- Nemotron-Personas-USA rows (NVIDIA, CC BY 4.0), Parquet (``.parquet``) or JSON lines
  (``.jsonl``), in the dataset's published columns: ``uuid`` and ``persona`` required, every
  other documented column turned into a readable sentence (``NEMOTRON_ORDER``);
- PersonaMem-v2 (CC BY 4.0), in either published layout: the benchmark CSV (``.csv``, one
  row per question, rows of a persona anywhere in the file: ``persona_id``, ``preference``
  by ``pref_type``, ``updated`` / ``prev_pref`` for a change, ``short_persona``,
  ``expanded_persona``), or the generator's persona files (``raw_data/``: a folder of
  ``.json`` files, or one of them, each ``{persona key: {<persona fields>...,
  stereotypical_preferences, anti_stereotypical_preferences, ..., conversations}}``).

A corpus persona's text is built from whole fields, most important first, each a sentence or
a short list, never raw JSON. ``persona_budget`` (characters, a loader argument) bounds it:
the least important fields are dropped whole until it fits (the first field never), and the
item records what was dropped (``hidden.persona_dropped``: the field names; ``meta``'s
``persona_dropped``: their count, which the report counts per source). Nothing is cut
inside a field.

Personas from a corpus carry no intents: each is paired with one of the team's trajectories
(``trajectories.json``), persona ``i`` with trajectory ``i mod T``, so a file's items are
reproducible. No row of either corpus ships with the project; the tests use fixtures the team
wrote in the published shapes.
"""

from __future__ import annotations

import ast
import csv
import io
import json
import re
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from tasks.datasets.fields import DataError, Style, json_lines, loads, read_json, read_text, text
from tasks.core.items import Item, item_id
from tasks.core.registry import loader

HERE = Path(__file__).parent
SAMPLE = HERE / "sample.json"
TRAJECTORIES = HERE / "trajectories.json"
# A corpus persona goes into every simulator prompt: past this many characters its least
# important fields are dropped whole (PersonaArgs.persona_budget; None: no budget). A
# Nemotron-Personas-USA row with every column at its published median length is about
# 5,500 characters.
PERSONA_BUDGET = 6000
# Nemotron-Personas-USA's narrative columns, most important first after ``persona`` and the
# demographic sentence: what the user does and wants, then background, then pastimes.
NEMOTRON_ORDER = (
    ("professional_persona", "Professional life"),
    ("career_goals_and_ambitions", "Career goals and ambitions"),
    ("skills_and_expertise", "Skills and expertise"),
    ("hobbies_and_interests", "Hobbies and interests"),
    ("cultural_background", "Cultural background"),
    ("sports_persona", "Sports"),
    ("arts_persona", "Arts"),
    ("travel_persona", "Travel"),
    ("culinary_persona", "Food and cooking"),
)
# A narrative column's published twin, a Python list repr in a string ("['a', 'b']"): read
# only when the narrative column is missing or empty (it repeats it as keywords).
NEMOTRON_LISTS = {"skills_and_expertise": "skills_and_expertise_list",
                  "hobbies_and_interests": "hobbies_and_interests_list"}
PERSONAMEM_LISTS = (("stereotypical_preferences", "stereotypical"),
                    ("anti_stereotypical_preferences", "anti-stereotypical"))
# The generator writes this literal where a conversation has no preference (a sensitive-info
# conversation): a placeholder, not something the person prefers.
PLACEHOLDER = "sensitive_info"
FORGET = "ask_to_forget"  # pref_type of a request to forget an earlier preference
CSV = Style(cannot_read="{path}: cannot read the CSV file ({error})")  # a PersonaMem-v2 CSV
OPTIONAL = Style(optional_blank=True)  # a corpus column left blank reads as absent


def trajectory(segments, where: str) -> list[dict]:
    """A checked trajectory: segments sorted by turn, the first at turn 1, turns distinct."""
    if not isinstance(segments, list) or not segments:
        raise DataError(f"{where}: a non-empty list of segments {{turn, intent, explicit}}")
    out = []
    for k, seg in enumerate(segments):
        w = f"{where}[{k}]"
        if not isinstance(seg, dict):
            raise DataError(f"{w}: a segment is an object {{turn, intent, explicit}}")
        extra = sorted(set(seg) - {"turn", "intent", "explicit"})
        if extra:
            raise DataError(f"{w}.{extra[0]}: unknown field")
        turn = seg.get("turn")
        if not isinstance(turn, int) or isinstance(turn, bool) or turn < 1:
            raise DataError(f"{w}.turn: a model turn number (1, 2, ...) is required")
        explicit = seg.get("explicit", False)
        if not isinstance(explicit, bool):
            raise DataError(f"{w}.explicit: true or false")
        out.append({"turn": turn, "intent": text(seg.get("intent"), f"{w}.intent"),
                    "explicit": explicit})
    out.sort(key=lambda s: s["turn"])
    if out[0]["turn"] != 1:
        raise DataError(f"{where}: the first segment must start at turn 1 (the starting intent)")
    turns = [s["turn"] for s in out]
    if len(set(turns)) != len(turns):
        raise DataError(f"{where}: two segments start at the same turn")
    return out


def latent_at(segments: list[dict], turn: int) -> dict:
    """The segment in force at model turn ``turn`` (the latest one started by then)."""
    current = segments[0]
    for seg in segments:
        if seg["turn"] <= turn:
            current = seg
    return current


def make_item(source: str, persona_id: str, persona: str, traj: dict, row: int,
              dropped: list[str] | None = None) -> Item:
    """An item; ``dropped`` (a corpus persona's fields left out under the budget) is recorded
    in hidden and, as a count, in meta (the team's sample has none: its items stay as they
    were)."""
    segs = traj["trajectory"]
    hidden = {"persona": persona, "trajectory": segs, "final_intent": segs[-1]["intent"]}
    meta = {"persona_source": source, "persona_id": persona_id, "trajectory_id": traj["id"],
            "n_shifts": sum(a["intent"] != b["intent"] for a, b in zip(segs, segs[1:]))}
    if dropped is not None:
        hidden["persona_dropped"] = dropped
        meta["persona_dropped"] = len(dropped)
    return Item(item_id("eyt", source, persona_id, traj["id"]), row, {"opening": traj["opening"]},
                hidden, meta)


def fit(fields: list[tuple[str, str]], budget: int | None) -> tuple[str, list[str]]:
    """(text, names dropped): the fields' texts one per line, most important first; while the
    text is over ``budget`` characters the last (least important) field is dropped whole. The
    first field is always kept, whatever its length."""
    kept = list(fields)
    dropped: list[str] = []
    while budget is not None and len(kept) > 1 and len("\n".join(t for _, t in kept)) > budget:
        dropped.insert(0, kept.pop()[0])
    return "\n".join(t for _, t in kept), dropped


def _words(value: str) -> str:
    """A coded value as words ("married_present" -> "married present")."""
    return " ".join(value.replace("_", " ").split())


def _listed(values: list[str]) -> str:
    return values[0] if len(values) == 1 else ", ".join(values[:-1]) + " and " + values[-1]


def _sentence(label: str, value: str) -> str:
    value = " ".join(value.split())
    return f"{label}: {value}" + ("" if value[-1] in ".!?" else ".")


def load_trajectories(path: Path) -> list[dict]:
    rows = read_json(path)
    if not isinstance(rows, list) or not rows:
        raise DataError(f"{path}: a non-empty JSON list of {{id, opening, trajectory}}")
    out = []
    for i, r in enumerate(rows):
        if not isinstance(r, dict):
            raise DataError(f"{path}: row {i}: an object {{id, opening, trajectory}}")
        out.append({"id": text(r.get("id"), f"{path}: row {i}: id"),
                     "opening": text(r.get("opening"), f"{path}: row {i}: opening"),
                     "trajectory": trajectory(r.get("trajectory"), f"{path}: row {i}: trajectory")})
    return out


# ----- the team's sample ------------------------------------------------------------------
def sample_items(path: Path, rows: list) -> list[Item]:
    items = []
    for i, r in enumerate(rows):
        if not isinstance(r, dict):
            raise DataError(f"{path}: row {i}: an object {{id, persona, opening, trajectory}}")
        traj = {"id": text(r.get("id"), f"{path}: row {i}: id"),
                "opening": text(r.get("opening"), f"{path}: row {i}: opening"),
                "trajectory": trajectory(r.get("trajectory"), f"{path}: row {i}: trajectory")}
        items.append(make_item("sample", traj["id"],
                               text(r.get("persona"), f"{path}: row {i}: persona"), traj, i))
    return items


# ----- Nemotron-Personas-USA --------------------------------------------------------------
def _about(row: dict, where: str) -> str | None:
    """The demographic columns as one sentence ("63 years old, female, married. ...")."""
    def col(name):
        v = row.get(name)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return str(int(v)) if float(v).is_integer() else str(v)
        return text(v, f"{where}: {name}", required=False, style=OPTIONAL)

    parts = []
    age = col("age")
    who = [f"{age} years old" if age else None, col("sex"), col("marital_status")]
    if any(who):
        parts.append(", ".join(_words(w) for w in who if w).capitalize() + ".")
    edu, field = col("education_level"), col("bachelors_field")
    if edu:
        parts.append(f"Education: {_words(edu)}" + (f" ({_words(field)})." if field else "."))
    if col("occupation"):
        parts.append(f"Occupation: {_words(col('occupation'))}.")
    place = [col("city"), " ".join(x for x in (col("state"), col("zipcode")) if x), col("country")]
    if any(place):
        parts.append("Lives in " + ", ".join(p for p in place if p) + ".")
    return " ".join(parts) or None


def _list_column(value, where: str) -> str | None:
    """A ``*_list`` column (a Python list repr in a string, as published) as words."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    try:
        parsed = ast.literal_eval(value) if isinstance(value, str) else value
    except (ValueError, SyntaxError):
        parsed = None
    if not isinstance(parsed, list) or not all(isinstance(x, str) for x in parsed):
        raise DataError(f"{where}: a list of strings (as published: \"['a', 'b']\") is required")
    words = [" ".join(x.split()) for x in parsed if x.strip()]
    return _listed(words) if words else None


def nemotron_fields(row: dict, where: str) -> tuple[str, list[tuple[str, str]]]:
    """(uuid, the persona's fields, most important first) of a Nemotron-Personas-USA row."""
    uid = text(row.get("uuid"), f"{where}: uuid")
    fields = [("persona", text(row.get("persona"), f"{where}: persona", collapse=True))]
    about = _about(row, where)
    if about:
        fields.append(("demographics", about))
    for name, label in NEMOTRON_ORDER:
        v = text(row.get(name), f"{where}: {name}", required=False, style=OPTIONAL)
        if v is None and name in NEMOTRON_LISTS:
            v = _list_column(row.get(NEMOTRON_LISTS[name]), f"{where}: {NEMOTRON_LISTS[name]}")
        if v:
            fields.append((name, _sentence(label, v)))
    return uid, fields


def _nemotron_rows(path: Path) -> list[dict]:
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq  # only for a Parquet file

        try:
            table = pq.read_table(path)
        except Exception as e:  # noqa: BLE001 - any unreadable Parquet file is one line
            why = " ".join(str(e).split())[:200]
            raise DataError(f"{path}: cannot read the Parquet file ({why})") from None
        missing = [c for c in ("uuid", "persona") if c not in table.column_names]
        if missing:
            raise DataError(f"{path}: row 0: {missing[0]}: not a Nemotron-Personas-USA file (its "
                            "published columns include uuid and persona)")
        return table.to_pylist()
    rows = []
    for i, line in enumerate(json_lines(read_text(path))):
        if not line.strip():
            continue
        row = loads(line, f"{path}: row {i}", "{where}: not JSON ({msg})")
        if not isinstance(row, dict):
            raise DataError(f"{path}: row {i}: a JSON object per line")
        rows.append(row)
    return rows


def nemotron_items(path: Path, trajs: list[dict], budget: int | None) -> list[Item]:
    items = []
    rows = _nemotron_rows(path)
    if not rows:
        raise DataError(f"{path}: no persona row in the file")
    for i, row in enumerate(rows):
        if "uuid" not in row or "persona" not in row:
            field = "uuid" if "uuid" not in row else "persona"
            raise DataError(f"{path}: row {i}: {field}: missing; not a Nemotron-Personas-USA row "
                            "(published columns: uuid, persona, age, sex, occupation, ...)")
        uid, fields = nemotron_fields(row, f"{path}: row {i}")
        persona, dropped = fit(fields, budget)
        items.append(make_item("nemotron", uid, persona, trajs[i % len(trajs)], i, dropped))
    return items


# ----- PersonaMem-v2 ----------------------------------------------------------------------
def _flag(value) -> bool:
    """``updated`` as written: a JSON bool in raw_data, "True" / "False" in the CSV."""
    return value is True or (isinstance(value, str) and value.strip().lower() in ("true", "1"))


def _pid(value, where: str) -> str:
    """A persona id as written; a whole number pandas wrote as a float ("12.0") is "12"."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = str(value)
    pid = text(value, where)
    return pid[:-2] if re.fullmatch(r"\d+\.0", pid) else pid


def _type_label(pref_type: str) -> str:
    words = _words(pref_type.removesuffix("_pref").removesuffix("_preferences"))
    return f"Preferences ({words})" if words else "Preferences"


def _structure(value) -> str:
    """A JSON value of the generator's persona as plain words (lists joined, objects as
    "key: value; ...")."""
    if isinstance(value, dict):
        return "; ".join(f"{_words(str(k))}: {_structure(v)}" for k, v in value.items()
                         if _structure(v))
    if isinstance(value, list):
        items = [_structure(v) for v in value]
        return _listed([x for x in items if x]) if any(items) else ""
    return "" if value is None else " ".join(str(value).split())


def persona_record_fields(record: dict) -> list[tuple[str, str]]:
    """The generator's persona fields (everything before ``stereotypical_preferences``, its
    own definition of the expanded persona), one readable line each, ``short_persona``
    first."""
    out = []
    for key, value in record.items():
        if key == "stereotypical_preferences":
            break
        words = _structure(value)
        if words:
            out.append((key, _sentence(_words(key).capitalize(), words)))
    out.sort(key=lambda f: f[0] != "short_persona")  # stable: the rest keep the file's order
    return out


class Preferences:
    """A persona's preferences by ``pref_type`` and its changes, in the order first seen: a
    placeholder is skipped; a forget request (``pref_type: ask_to_forget``) or an ``updated``
    row with a ``prev_pref`` is a change, and the earlier preference is no longer listed as
    one the person holds."""

    def __init__(self):
        self.by_type: dict[str, list[str]] = {}
        self.changes: list[str] = []
        self.retired: set[str] = set()

    def add(self, preference, pref_type, updated=False, prev_pref=None) -> None:
        pref = " ".join(str(preference or "").split())
        prev = " ".join(str(prev_pref or "").split())
        kind = " ".join(str(pref_type or "").split())
        if kind == FORGET:
            forgotten = prev or pref
            if forgotten and forgotten != PLACEHOLDER:
                self._change(f"Asked the assistant to forget: {forgotten}")
                self.retired.add(forgotten)
            return
        if not pref or pref == PLACEHOLDER:
            return
        if _flag(updated) and prev and prev != pref:
            self._change(f"Used to prefer: {prev}; now: {pref}")
            self.retired.add(prev)
        group = self.by_type.setdefault(kind, [])
        if pref not in group:
            group.append(pref)

    def _change(self, line: str) -> None:
        if line not in self.changes:
            self.changes.append(line)

    def fields(self) -> list[tuple[str, str]]:
        out = []
        for kind, prefs in self.by_type.items():
            held = [p for p in prefs if p not in self.retired]
            if held:
                out.append((f"preferences:{kind or 'untyped'}",
                            f"{_type_label(kind)}:\n" + "\n".join(f"- {p}" for p in held)))
        if self.changes:
            out.append(("changes", "Changes the person asked for:\n" +
                        "\n".join(f"- {c}" for c in self.changes)))
        return out


def _expanded(value: str, where: str) -> list[tuple[str, str]]:
    """The CSV's ``expanded_persona`` (the generator's persona fields as indented JSON) as
    readable fields; text that is not a JSON object is one field as written."""
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError:
        parsed = None
    if isinstance(parsed, dict):
        return persona_record_fields(parsed)
    if parsed is not None and not isinstance(parsed, str):
        raise DataError(f"{where}: expanded_persona: a JSON object of persona fields (or text)")
    return [("expanded_persona", _sentence("About", value))]


def _personamem_item(pid: str, head: list[tuple[str, str]], prefs: Preferences,
                     persona: list[tuple[str, str]], traj: dict, row: int,
                     budget: int | None, where: str) -> Item:
    """Most important first: the short persona, the preferences, the changes, then the
    other persona fields in the generator's order."""
    fields = head + prefs.fields() + persona
    if not fields:
        raise DataError(f"{where}: persona {pid} has no preference and no persona text")
    text_, dropped = fit(fields, budget)
    return make_item("personamem", pid, text_, traj, row, dropped)


def personamem_csv_items(path: Path, trajs: list[dict], budget: int | None) -> list[Item]:
    reader = csv.DictReader(io.StringIO(read_text(path, style=CSV), newline=""))
    try:
        header = reader.fieldnames or []
        rows = list(reader)
    except csv.Error as e:
        raise DataError(CSV.cannot_read.format(path=path, error=e)) from None
    if "persona_id" not in header:
        raise DataError(f"{path}: row 0: persona_id: missing; not a PersonaMem-v2 benchmark CSV")
    # The columns as the current generator writes them, or as an earlier one did.
    pref_col = next((c for c in ("preference", "groundtruth_preference") if c in header), None)
    if pref_col is None:
        raise DataError(f"{path}: row 0: preference: missing (or groundtruth_preference); not a "
                        "PersonaMem-v2 benchmark CSV")
    type_col = "pref_type" if "pref_type" in header else "preference_type"
    prev_col = "prev_pref" if "prev_pref" in header else "previous_preference"
    if not rows:
        raise DataError(f"{path}: no rows after the header")
    order: list[tuple[str, int]] = []
    prefs: dict[str, Preferences] = {}
    about: dict[str, tuple[list, list]] = {}  # the first row of a persona that has any
    for i, r in enumerate(rows, start=1):  # row 0 is the header
        where = f"{path}: row {i}"
        pid = _pid(r.get("persona_id"), f"{where}: persona_id")
        if pid not in prefs:  # the published benchmark.csv is shuffled: group by persona
            order.append((pid, i))
            prefs[pid] = Preferences()
        prefs[pid].add(r.get(pref_col), r.get(type_col), r.get("updated"), r.get(prev_col))
        if not any(about.get(pid, ((), ()))):
            about[pid] = _csv_persona(r, where)
    items = []
    for k, (pid, row) in enumerate(order):
        head, persona = about[pid]
        items.append(_personamem_item(pid, head, prefs[pid], persona, trajs[k % len(trajs)],
                                      row, budget, f"{path}: row {row}"))
    return items


def _csv_persona(r: dict, where: str) -> tuple[list, list]:
    """(the short persona as a field, or none; the other persona fields) of a CSV row."""
    short = text(r.get("short_persona"), f"{where}: short_persona", required=False, style=OPTIONAL)
    expanded = text(r.get("expanded_persona"), f"{where}: expanded_persona", required=False,
                    style=OPTIONAL)
    fields = _expanded(expanded, where) if expanded else []
    head = [f for f in fields if f[0] == "short_persona"]
    if short:  # the CSV's own column wins over the copy inside expanded_persona
        head = [("short_persona", _sentence("Short persona", short))]
    return head, [f for f in fields if f[0] != "short_persona"]


def _raw_files(path: Path) -> list[Path]:
    """The generator's raw_data files: one file, or a folder's ``*.json`` in persona order
    (``..._persona<N>.json``; other names after, by name)."""
    if not path.is_dir():
        return [path]
    files = [p for p in path.glob("*.json") if p.is_file()]
    if not files:
        raise DataError(f"{path}: no persona file in the folder (expected the generator's "
                        "raw_data/raw_data_..._persona<N>.json)")

    def key(p: Path):
        m = re.search(r"persona(\d+)\.json$", p.name)
        return (0, int(m.group(1)), p.name) if m else (1, 0, p.name)

    return sorted(files, key=key)


def personamem_json_items(path: Path, trajs: list[dict], budget: int | None) -> list[Item]:
    items = []
    for f in _raw_files(path):
        doc = read_json(f)
        if not isinstance(doc, dict) or not doc:
            raise DataError(f"{f}: row 0: a PersonaMem-v2 persona file {{persona key: {{...}}}}")
        for j, (pid, rec) in enumerate(doc.items()):
            k = len(items)  # the item's row over every file (a file's own row in messages)
            where = f"{f}: row {j} (persona {pid})"
            if not isinstance(rec, dict) or not any(key in rec for key, _ in PERSONAMEM_LISTS):
                raise DataError(f"{where}: stereotypical_preferences: missing; not a PersonaMem-v2 "
                                "persona record")
            prefs = Preferences()
            for key, kind in PERSONAMEM_LISTS:
                values = rec.get(key, [])
                if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
                    raise DataError(f"{where}: {key}: a list of strings")
                for v in values:
                    prefs.add(v, kind)
            convs = rec.get("conversations", {})
            if not isinstance(convs, dict):
                raise DataError(f"{where}: conversations: an object {{scenario: [...]}}")
            for scenario, elems in convs.items():
                for elem in elems if isinstance(elems, list) else []:
                    if isinstance(elem, dict) and ("preference" in elem or "pref_type" in elem):
                        prefs.add(elem.get("preference", PLACEHOLDER), elem.get("pref_type"),
                                  elem.get("updated"), elem.get("prev_pref"))
            fields = persona_record_fields(rec)
            head = [f for f in fields if f[0] == "short_persona"]
            items.append(_personamem_item(str(pid), head, prefs,
                                          [f for f in fields if f[0] != "short_persona"],
                                          trajs[k % len(trajs)], k, budget, where))
    return items


class PersonaArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    # The trajectories corpus personas are paired with (a path; default the team's file).
    trajectories: str | None = None
    # A corpus persona's text, in characters: past it, whole fields are dropped, least
    # important first, and recorded (None: every field, however long).
    persona_budget: int | None = Field(PERSONA_BUDGET, ge=200)


def source_of(item: Item) -> str:
    """The ``dataset.source`` an item's file shape belongs to."""
    return item.meta["persona_source"]


@loader("eyt_personas", args=PersonaArgs, sample=SAMPLE, source_of=source_of)
class Personas:
    """``load(path)``: the items of a sample, Nemotron-Personas-USA or PersonaMem-v2 file (or
    a folder of the PersonaMem-v2 generator's persona files)."""

    def __init__(self, args: PersonaArgs):
        self.trajectories = Path(args.trajectories) if args.trajectories else TRAJECTORIES
        self.budget = args.persona_budget

    def __call__(self, path) -> list[Item]:
        path = Path(path)
        if path.is_dir():
            return personamem_json_items(path, load_trajectories(self.trajectories), self.budget)
        if not path.is_file():
            raise DataError(f"{path}: no such file")
        if path.suffix in (".parquet", ".jsonl"):
            return nemotron_items(path, load_trajectories(self.trajectories), self.budget)
        if path.suffix == ".csv":
            return personamem_csv_items(path, load_trajectories(self.trajectories), self.budget)
        if path.suffix != ".json":
            raise DataError(f"{path}: unknown file type {path.suffix or '(none)'}: give the "
                            "sample's .json, Nemotron-Personas-USA .parquet/.jsonl, a "
                            "PersonaMem-v2 .csv, or its generator's raw_data folder or .json file")
        doc = read_json(path)
        if isinstance(doc, list) and doc:
            return sample_items(path, doc)
        if isinstance(doc, dict) and doc:
            return personamem_json_items(path, load_trajectories(self.trajectories), self.budget)
        raise DataError(f"{path}: row 0: unknown shape: a list of {{id, persona, opening, "
                        "trajectory}} (the sample's) or PersonaMem-v2 persona records "
                        "{persona_id: {stereotypical_preferences, ...}}")
