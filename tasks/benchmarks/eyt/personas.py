"""EYT-style items: a persona and an intent trajectory (the latent intent at each turn).

One loader, ``eyt_personas``, reads three kinds of file, told apart by their shape (a file of
any other shape is refused in one line naming the file, the row and the field):

- the team's sample (``sample.json`` beside this module, written for this benchmark): a JSON
  list of ``{id, persona, opening, trajectory}``; a trajectory is a list of segments
  ``{turn, intent, explicit}``: from model turn ``turn`` on, the user's latent intent is
  ``intent``; ``explicit`` (default false) lets the simulated user name it outright;
- Nemotron-Personas-USA rows (NVIDIA, CC BY 4.0), Parquet (``.parquet``) or JSON lines
  (``.jsonl``), in the dataset's published columns: ``uuid`` and ``persona`` required;
  ``age``, ``sex``, ``occupation``, ``city``, ``state``, ``cultural_background``,
  ``hobbies_and_interests``, ``skills_and_expertise``, ``career_goals_and_ambitions`` used
  when present; other published columns (``professional_persona``, ``*_list``, ...) ignored;
- PersonaMem-v2 persona records (CC BY 4.0), in either published layout: the benchmark CSV
  (``.csv``, one row per question: ``persona_id`` with ``preference`` or
  ``groundtruth_preference``, rows grouped by persona; ``pref_type`` and ``expanded_persona``
  / ``short_persona`` used when present), or a persona file of the generator (``.json``:
  ``{persona_id: {stereotypical_preferences: [...], anti_stereotypical_preferences: [...],
  ...}}``).

Personas from a corpus carry no intents: each is paired with one of the team's trajectories
(``trajectories.json``), persona ``i`` with trajectory ``i mod T``, so a file's items are
reproducible. No row of either corpus ships with the project; the tests use fixtures the team
wrote in the published shapes.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from tasks.datasets.fields import DataError, Style, json_lines, loads, read_json, read_text, text
from tasks.engine.items import Item, item_id
from tasks.engine.registry import loader

HERE = Path(__file__).parent
SAMPLE = HERE / "sample.json"
TRAJECTORIES = HERE / "trajectories.json"
PERSONA_CHARS = 1500  # a corpus persona's text is capped: it goes into every simulator prompt
NEMOTRON_FIELDS = ("age", "sex", "occupation", "city", "state", "cultural_background",
                   "hobbies_and_interests", "skills_and_expertise", "career_goals_and_ambitions")
PERSONAMEM_LISTS = ("stereotypical_preferences", "anti_stereotypical_preferences")
MAX_PREFERENCES = 8
CSV = Style(cannot_read="{path}: cannot read the CSV file ({error})")  # a PersonaMem-v2 CSV


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


def make_item(source: str, persona_id: str, persona: str, traj: dict, row: int) -> Item:
    segs = traj["trajectory"]
    return Item(item_id("eyt", source, persona_id, traj["id"]), row,
                {"opening": traj["opening"]},
                {"persona": persona[:PERSONA_CHARS], "trajectory": segs,
                 "final_intent": segs[-1]["intent"]},
                {"persona_source": source, "persona_id": persona_id,
                 "trajectory_id": traj["id"],
                 "n_shifts": sum(a["intent"] != b["intent"] for a, b in zip(segs, segs[1:]))})


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
def nemotron_persona(row: dict, where: str) -> tuple[str, str]:
    """(uuid, persona text) of a Nemotron-Personas-USA row."""
    uid = text(row.get("uuid"), f"{where}: uuid")
    parts = [text(row.get("persona"), f"{where}: persona")]
    for f in NEMOTRON_FIELDS:
        v = row.get(f)
        if v is not None and str(v).strip():
            parts.append(f"{f.replace('_', ' ')}: {str(v).strip()}")
    return uid, "\n".join(parts)


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


def nemotron_items(path: Path, trajs: list[dict]) -> list[Item]:
    items = []
    for i, row in enumerate(_nemotron_rows(path)):
        if "uuid" not in row or "persona" not in row:
            field = "uuid" if "uuid" not in row else "persona"
            raise DataError(f"{path}: row {i}: {field}: missing; not a Nemotron-Personas-USA row "
                            "(published columns: uuid, persona, age, sex, occupation, ...)")
        uid, persona = nemotron_persona(row, f"{path}: row {i}")
        items.append(make_item("nemotron", uid, persona, trajs[i % len(trajs)], i))
    return items


# ----- PersonaMem-v2 ----------------------------------------------------------------------
def _personamem_text(prefs: list[str], intro: str | None) -> str:
    lines = [intro] if intro else []
    if prefs:
        lines.append("Preferences this person shows in conversation:")
        lines += [f"- {p}" for p in prefs[:MAX_PREFERENCES]]
    return "\n".join(lines)


def personamem_csv_items(path: Path, trajs: list[dict]) -> list[Item]:
    reader = csv.DictReader(io.StringIO(read_text(path, style=CSV), newline=""))
    try:
        header = reader.fieldnames or []
        rows = list(reader)
    except csv.Error as e:
        raise DataError(CSV.cannot_read.format(path=path, error=e)) from None
    if "persona_id" not in header:
        raise DataError(f"{path}: row 0: persona_id: missing; not a PersonaMem-v2 benchmark CSV")
    pref_col = next((c for c in ("preference", "groundtruth_preference") if c in header), None)
    if pref_col is None:
        raise DataError(f"{path}: row 0: preference: missing (or groundtruth_preference); not a "
                        "PersonaMem-v2 benchmark CSV")
    order, prefs, intro = [], {}, {}
    for i, r in enumerate(rows, start=1):  # row 0 is the header
        pid = text(r.get("persona_id"), f"{path}: row {i}: persona_id")
        if pid not in prefs:
            order.append((pid, i))
            prefs[pid] = []
        p = (r.get(pref_col) or "").strip()
        if p and p not in prefs[pid]:
            prefs[pid].append(p)
        about = (r.get("expanded_persona") or r.get("short_persona") or "").strip()
        if about and pid not in intro:
            intro[pid] = about
    items = []
    for k, (pid, row) in enumerate(order):
        if not prefs[pid] and pid not in intro:
            raise DataError(f"{path}: row {row}: {pref_col}: persona {pid} has no preference")
        items.append(make_item("personamem", pid, _personamem_text(prefs[pid], intro.get(pid)),
                               trajs[k % len(trajs)], row))
    return items


def personamem_json_items(path: Path, doc: dict, trajs: list[dict]) -> list[Item]:
    items = []
    for k, (pid, rec) in enumerate(doc.items()):
        where = f"{path}: row {k} (persona {pid})"
        if not isinstance(rec, dict) or not any(key in rec for key in PERSONAMEM_LISTS):
            raise DataError(f"{where}: stereotypical_preferences: missing; not a PersonaMem-v2 "
                            "persona record")
        prefs = []
        for key in PERSONAMEM_LISTS:
            values = rec.get(key, [])
            if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
                raise DataError(f"{where}: {key}: a list of strings")
            prefs += [v.strip() for v in values if v.strip()]
        if not prefs:
            raise DataError(f"{where}: stereotypical_preferences: no preference")
        items.append(make_item("personamem", str(pid), _personamem_text(prefs, None),
                               trajs[k % len(trajs)], k))
    return items


class PersonaArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    # The trajectories corpus personas are paired with (a path; default the team's file).
    trajectories: str | None = None


@loader("eyt_personas", args=PersonaArgs, sample=SAMPLE)
class Personas:
    """``load(path)``: the items of a sample, Nemotron-Personas-USA or PersonaMem-v2 file."""

    def __init__(self, args: PersonaArgs):
        self.trajectories = Path(args.trajectories) if args.trajectories else TRAJECTORIES

    def __call__(self, path) -> list[Item]:
        path = Path(path)
        if not path.is_file():
            raise DataError(f"{path}: no such file")
        if path.suffix in (".parquet", ".jsonl"):
            return nemotron_items(path, load_trajectories(self.trajectories))
        if path.suffix == ".csv":
            return personamem_csv_items(path, load_trajectories(self.trajectories))
        if path.suffix != ".json":
            raise DataError(f"{path}: unknown file type {path.suffix or '(none)'}: give the "
                            "sample's .json, Nemotron-Personas-USA .parquet/.jsonl or "
                            "PersonaMem-v2 .csv/.json")
        doc = read_json(path)
        if isinstance(doc, list) and doc:
            return sample_items(path, doc)
        if isinstance(doc, dict) and doc:
            return personamem_json_items(path, doc, load_trajectories(self.trajectories))
        raise DataError(f"{path}: row 0: unknown shape: a list of {{id, persona, opening, "
                        "trajectory}} (the sample's) or PersonaMem-v2 persona records "
                        "{persona_id: {stereotypical_preferences, ...}}")
