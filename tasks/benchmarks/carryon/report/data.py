"""Everything the report reads from the warehouse: the metric views, the run's provenance
and the conversation browser's data. SQL only through the views (and a few plain tables for
names and texts), so the report's numbers are the ones a user's SQL sees."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pandas as pd

from tasks.bench import load_spec
from tasks.benchmarks.carryon.conditions import BENCHMARK, CarryOnConditions, carryon_conditions
from tasks.report.errors import ReportError  # noqa: F401  (raised here, re-exported)
from tasks.report.folder import checkpoint
from tasks.report.page_base import JsonArray
from tasks.roles import report_roles
from warehouse import Warehouse

# The analyses speak of CarryOnBench's three conditions by the parts they play (BC, NC,
# oracle), as the paper names them; a spec may name the conditions otherwise (the views'
# carryon_conditions says which name plays which part).


@dataclass
class ReportData:
    run: dict
    config: dict
    summary: pd.DataFrame
    conv: pd.DataFrame
    turns: pd.DataFrame
    cumulative: pd.DataFrame
    sets: list[dict]
    coverage: dict  # kind -> {"n_judgments", "n_unscored"}
    status_counts: list[dict]  # per target x condition x status
    checklist_versions: list[str]
    extra: dict = field(default_factory=dict)
    # query_id, category, domain of every query (the per-domain analysis); None = not loaded.
    queries: pd.DataFrame | None = None
    names: CarryOnConditions = field(default_factory=carryon_conditions)

    @property
    def smoke(self) -> bool:
        """The embedded local model is for smoke runs only: its numbers are not a result."""
        from tasks.config import is_smoke_model

        return "openai/local-" in json.dumps(self.config) and any(
            is_smoke_model(m) for m in _model_strings(self.config.get("models") or {}))

    def unscored_share(self, kind: str) -> float | None:
        c = self.coverage.get(kind) or {}
        return c["n_unscored"] / c["n_judgments"] if c.get("n_judgments") else None

    def models(self) -> dict[str, list[str]]:
        """Models of the run's config, per role (name and model string)."""
        out: dict[str, list[str]] = {}
        models = self.config.get("models") if isinstance(self.config, dict) else None
        models = models if isinstance(models, dict) else {}
        for role in report_roles(load_spec(BENCHMARK).config_roles()):
            v = models.get(role)
            entries = v if isinstance(v, list) else ([v] if v else [])
            # A hand-written or older runs row may hold a bare model string.
            entries = [e if isinstance(e, dict) else {"model": str(e)} for e in entries]
            out[role] = [f"{e.get('name') or e.get('model')} ({e.get('model')})" if e.get("name")
                         else str(e.get("model")) for e in entries]
        return out


def _model_strings(models: dict):
    for value in models.values():
        for entry in value if isinstance(value, list) else [value]:
            if isinstance(entry, dict) and entry.get("model"):
                yield entry["model"]


def _run_row(wh: Warehouse, run_id: str | None) -> dict:
    if run_id:
        row = wh.run_row(run_id)
        if row is None:
            raise ReportError(f"{wh.path}: runs: no run with run_id {run_id!r}")
        return row
    rows = wh.query("SELECT * FROM runs ORDER BY started DESC LIMIT 1")
    if not rows:
        raise ReportError(f"{wh.path}: runs: the warehouse has no run yet (run `carryon run` first)")
    return rows[0]


def _check_choices(wh: Warehouse) -> None:
    bad = wh.query("SELECT c.kind, c.judgment_set_id FROM judgment_set_choice c "
                   "LEFT JOIN judgment_sets s ON s.judgment_set_id = c.judgment_set_id AND s.kind = c.kind "
                   "WHERE s.judgment_set_id IS NULL")
    if bad:
        b = bad[0]
        raise ReportError(f"{wh.path}: judgment_set_choice: kind {b['kind']!r} names judgment set "
                          f"{b['judgment_set_id']!r}, which is not a {b['kind']} set in judgment_sets "
                          f"(fix or delete the row)")


def condition_parts(wh: Warehouse) -> dict[str, str]:
    """CarryOnBench's condition names -> their parts (BC, NC, oracle), from the spec rows the
    warehouse holds (a merged warehouse may hold several names for one part)."""
    return {r["condition"]: r["part"] for r in wh.query(
        "SELECT condition, part FROM carryon_conditions WHERE part IS NOT NULL")}


def condition_names(to_part: dict[str, str]) -> CarryOnConditions:
    """One name per part for display (the built-in spec's where a part has none)."""
    d = carryon_conditions()
    by_part = {}
    for name, part in sorted(to_part.items()):
        by_part.setdefault(part, name)
    return CarryOnConditions(by_part.get("BC", d.bc), by_part.get("NC", d.nc),
                             by_part.get("oracle", d.oracle))


def as_parts(df: pd.DataFrame, to_part: dict[str, str]) -> pd.DataFrame:
    """The frame with its ``condition`` column as parts (BC, NC, oracle): the one place a
    renamed condition is mapped for the analyses (identity for the built-in names)."""
    if "condition" not in df or all(k == v for k, v in to_part.items()):
        return df
    return df.assign(condition=df["condition"].map(lambda c: to_part.get(c, c)))


def load(wh: Warehouse, run_id: str | None) -> ReportData:
    # The small reads share one attachment (each alone costs ~8 ms). The metric views and each
    # section's data are read on attachments of their own: DuckDB keeps what a read allocated
    # until its attachment ends (Warehouse.connect then renews the instance), and every view
    # computes the chain over all judgments: held at once they kept 108 MB of DuckDB's
    # memory after loading 6,400 conversations (80 MB at 1,600).
    with wh.connect(read_only=True):
        run = _run_row(wh, run_id)
        try:
            config = json.loads(run.get("config_json") or "{}")
        except json.JSONDecodeError as e:
            raise ReportError(f"{wh.path}: runs row {run['run_id']}: field config_json is not JSON: {e}") from None
        if not isinstance(config, dict):  # e.g. "null": no config to name models from
            config = {}
        _check_choices(wh)
        sets = wh.query("SELECT * FROM selected_judgment_sets ORDER BY kind")
        status = wh.query("SELECT target, condition, status, count(*) AS n FROM conversations "
                          "GROUP BY ALL ORDER BY ALL")
        validated = wh.query("SELECT count(*) AS n FROM validation_annotations")[0]["n"]
        to_part = condition_parts(wh)
        queries = _queries(wh)
    coverage = {r["kind"]: r for r in wh.query("SELECT * FROM judgment_coverage")}
    cl = sorted({s["checklist_version"] for s in sets if s["kind"] == "benutil" and s["checklist_version"]})
    extra = {name: _guarded_load(name, fn, wh, run["run_id"]) for name, fn in _EXTRA_LOADERS.items()}
    if validated:
        from tasks.validation.report import validation_report

        extra["validation"] = validation_report(wh)  # people's labels beside the judges
    return ReportData(
        run=run, config=config,
        summary=wh.df("SELECT * FROM model_summary"),
        conv=as_parts(wh.df("SELECT * FROM conversation_scores"), to_part),
        turns=as_parts(wh.df("SELECT * FROM turn_scores"), to_part),
        cumulative=as_parts(wh.df("SELECT * FROM turn_cumulative"), to_part),
        sets=sets, coverage=coverage, status_counts=status, checklist_versions=cl, extra=extra,
        queries=queries, names=condition_names(to_part),
    )


def _load_construction(wh, run_id):
    from tasks.benchmarks.carryon.report import construction

    return construction.load(wh)


def _load_fidelity(wh, run_id):
    from tasks.benchmarks.carryon.report import fidelity

    return fidelity.load(wh)


def _load_judging(wh, run_id):
    from tasks.benchmarks.carryon.report import judging

    return judging.load(wh, run_id)


def _load_calibration(wh, run_id):
    from tasks.benchmarks.carryon.report import benutil_mode

    return benutil_mode.load(wh, run_id)


def _load_cost(wh, run_id):
    from tasks.benchmarks.carryon.report import cost

    return cost.load(wh, run_id)


# The report sections with data of their own (checklists, move checks, judging details,
# cost): ReportData.extra[name], read by that section's stats() in the writer.
_EXTRA_LOADERS = {"construction": _load_construction, "fidelity": _load_fidelity,
                  "judging": _load_judging, "calibration": _load_calibration,
                  "cost": _load_cost}


def _guarded_load(name: str, fn, wh, run_id) -> dict:
    """One section's data; a section that cannot read the warehouse (a bug, an odd old file)
    becomes that section's "Not computed" note in the writer, never a lost report."""
    checkpoint()  # a Ctrl-C ends the report here (tasks/report/folder.py)
    try:
        with wh.connect(read_only=True):  # the section's reads on one attachment (load)
            return fn(wh, run_id)
    except Exception as e:  # noqa: BLE001
        import logging

        logging.getLogger(__name__).exception("report data %s failed", name)
        return {"load_error": " ".join(f"{type(e).__name__}: {e}".split())[:300]}


def _queries(wh: Warehouse) -> pd.DataFrame:
    """query_id, category and domain of each query (domain NULL in a warehouse written before
    queries had one; the per-domain analysis then maps the category name)."""
    return wh.df("SELECT query_id, category, domain FROM queries")


BROWSER_CHUNK = 500  # conversations read, built and written at a time


def browser_data(wh: Warehouse, turn_scores: pd.DataFrame, max_conversations: int = 3000) -> dict:
    """Conversations with their turns, per-turn scores and the checklist items each turn
    fulfilled (new vs already fulfilled earlier), for the HTML browser. Model text is data
    here; html.py embeds it as JSON and the page renders it as text, never as markup.

    ``conversations`` is a ``JsonArray``: the turns are read, BROWSER_CHUNK conversations at
    a time, while the page is written, so the report holds one chunk's text, whatever the
    number of conversations (the page's JSON is the same as if it were built whole). Each
    turn's utility and harm come from ``turn_scores``, the view's frame the report read
    (ReportData.turns): reading the view again for each chunk would compute it whole each time."""
    convs = wh.query(
        "SELECT c.conversation_id, c.target, c.query_id, c.flow_id, c.condition, c.status, c.error, "
        "q.query, q.category FROM conversations c LEFT JOIN queries q USING (query_id) "
        "ORDER BY c.target, c.query_id, "
        "c.condition IN (SELECT condition FROM carryon_conditions WHERE part = 'oracle') DESC, "
        "c.condition, c.length, c.flow_id "
        "LIMIT ?", [max_conversations + 1])
    truncated = len(convs) > max_conversations
    convs = convs[:max_conversations]
    # The questions: each query's current checklist (latest version by creation time).
    qids = sorted({c["query_id"] for c in convs})
    checklist = wh.query(
        "WITH cur AS (SELECT query_id, checklist_version FROM checklists WHERE list_contains(?, query_id) "
        "  QUALIFY row_number() OVER (PARTITION BY query_id ORDER BY created DESC, checklist_version DESC) = 1) "
        "SELECT i.query_id, i.item_id, i.question, i.category FROM checklist_items i "
        "JOIN cur USING (query_id, checklist_version) ORDER BY i.query_id, i.item_id", [qids])
    out_items: dict[str, dict] = {}
    for r in checklist:
        out_items.setdefault(r["query_id"], {})[str(r["item_id"])] = r["question"]

    # Each query's selected Ben-Util set, read once: a chunk's items are read from
    # item_judgments of those sets (selected_item_judgments' rows), since the view
    # selected_item_judgments would select over every judgment of the run for each chunk.
    selected = wh.query("SELECT query_id, judgment_set_id FROM selected_set_per_query "
                        "WHERE kind = 'benutil' AND list_contains(?, query_id)", [qids])
    sets = ([r["query_id"] for r in selected], [r["judgment_set_id"] for r in selected])

    def chunks():
        for i in range(0, len(convs), BROWSER_CHUNK):
            checkpoint()  # a Ctrl-C ends the report here (tasks/report/folder.py)
            yield _browser_conversations(wh, convs[i:i + BROWSER_CHUNK], scores, sets)

    shown = turn_scores["conversation_id"].isin({c["conversation_id"] for c in convs})
    scores = {(c, int(t)): (u, h) for c, t, u, h in turn_scores.loc[
        shown, ["conversation_id", "turn_index", "utility", "harm"]].itertuples(index=False, name=None)}

    return {
        "conversations": JsonArray(len(convs), chunks),
        "items": out_items,
        "truncated": truncated,
        "max_conversations": max_conversations,
    }


def _browser_conversations(wh: Warehouse, convs: list[dict], scores: dict,
                           sets: tuple[list, list]) -> list[dict]:
    """The browser's entries of ``convs``: each with its turns, scores (``scores``:
    (conversation id, model turn) -> (utility, harm) of each assistant turn) and items (the
    judgments of ``sets``: the query ids and their selected Ben-Util sets, in two lists)."""
    ids = [c["conversation_id"] for c in convs]
    with wh.connect(read_only=True):
        turns = wh.query(
            "SELECT t.conversation_id, t.position, t.role, t.model_turn, t.move, t.content "
            "FROM turns t WHERE t.conversation_id IN (SELECT unnest(?::VARCHAR[])) "
            "ORDER BY t.conversation_id, t.position", [ids])
        items = wh.query(
            "WITH j AS (SELECT conversation_id, position, item_id, model_turn, fulfilled, "
            "  min(CASE WHEN fulfilled THEN model_turn END) OVER (PARTITION BY conversation_id, item_id) AS first "
            "  FROM item_judgments JOIN (SELECT unnest(?::VARCHAR[]) AS query_id, "
            "    unnest(?::VARCHAR[]) AS judgment_set_id) USING (query_id, judgment_set_id) "
            "  WHERE conversation_id IN (SELECT unnest(?::VARCHAR[]))) "
            "SELECT conversation_id, position, "
            "  list(item_id ORDER BY item_id) FILTER (WHERE fulfilled AND model_turn = first) AS new, "
            "  list(item_id ORDER BY item_id) FILTER (WHERE fulfilled AND model_turn > first) AS repeated, "
            "  list(item_id ORDER BY item_id) FILTER (WHERE fulfilled IS NULL) AS unscored "
            "FROM j GROUP BY ALL", [*sets, ids])
    by_turn = {(r["conversation_id"], r["position"]): r for r in items}
    turns_by_conv: dict[str, list] = {}
    for t in turns:
        j = by_turn.get((t["conversation_id"], t["position"])) or {}
        utility, harm = (scores.get((t["conversation_id"], t["model_turn"]), (None, None))
                         if t["role"] == "assistant" else (None, None))
        turns_by_conv.setdefault(t["conversation_id"], []).append({
            "role": t["role"], "turn": t["model_turn"], "move": t["move"], "content": t["content"],
            "utility": _num(utility), "harm": _num(harm),
            "new": j.get("new") or [], "repeated": j.get("repeated") or [],
            "unscored": j.get("unscored") or [],
        })
    return [{**{k: c[k] for k in ("conversation_id", "target", "query_id", "flow_id",
                                  "condition", "status", "error", "query", "category")},
             "turns": turns_by_conv.get(c["conversation_id"], [])} for c in convs]


def _num(v):
    # From a frame: NaN, or pandas' NA in a nullable column, where the view held NULL.
    return None if v is None or pd.isna(v) else float(v)
