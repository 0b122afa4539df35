"""Queries: the CASE-Bench and SORRY-Bench loaders, the built-in sample, and selection.

Sources (``dataset.source`` in the config):

- ``sample``     the team's built-in set (``tasks/benchmarks/carryon/sample.json``), written in
                 the CASE-Bench shape; the default for the demo and the tests;
- ``casebench``  CASE-Bench's ``CASEBench_data.json`` (one JSON array, two adjacent rows per
                 query: one safe and one unsafe context);
- ``sorrybench`` SORRY-Bench's ``question.jsonl`` (JSON lines, no contexts).

Neither upstream file ships with the project (their owners' terms require users to obtain
them); the loaders take a path. Every problem in a file raises ``DataError`` naming the file,
the row (0-based index in the array, or 1-based line of a JSON-lines file) and the field,
before anything is written anywhere.

Selection keeps the *safe* context of each query, drops the excluded categories (default:
the paper's four), optionally drops queries whose safe context's ``safe_rate`` is below a
minimum, and keeps file order so ``--limit N`` always means the same N queries. A query id is
``sha256(source + "\\n" + query)[:16]`` (hex), stable across runs and machines.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path

from tasks.benchmarks.carryon.categories import ALIASES, CATEGORIES, Category, lookup
from tasks.config import Config
from tasks.core.items import in_shard
# DataError and read_dataset live beside the loaders' field helpers; the loaders and flows that
# import them from here still may.
from tasks.datasets.fields import (  # noqa: F401 - DataError, read_dataset: re-exported
    DataError, Style, json_lines, loads, read_dataset, read_json, read_text)

SAMPLE_PATH = Path(__file__).parent / "sample.json"

# The categories (ids, canonical names, domains, published spellings) live in tasks.benchmarks.carryon.categories.
# Kept for callers that want the canonical names: id string -> name, and the set of names.
SORRYBENCH_CATEGORIES: dict[str, str] = {str(c.id): c.name for c in CATEGORIES.values()}
KNOWN_CASEBENCH_CATEGORIES: frozenset[str] = frozenset(ALIASES)

# The fields of a CASE-Bench context, in the order the intent prompt shows them. Every one is
# optional (the published file lacks ``transmission_principle.urgency`` in about a quarter of
# its rows): a field may be missing, null, a string, or an object / list of named facts (22
# published values are objects). A context must carry at least one non-empty field.
CONTEXT_FIELDS: dict[str, tuple[str, ...]] = {
    "sender": ("nature_of_the_interaction", "platform_type"),
    "recipient": ("type", "background"),
    "transmission_principle": ("urgency", "sender_purpose", "confidentiality", "source_accountability"),
}

# CASE-Bench's and SORRY-Bench's wording of an unreadable file (tests and scripts match it).
STYLE = Style(cannot_read="{path}: cannot read: {strerror}",
              not_utf8="{path}: not UTF-8 text: {reason}",
              not_json="{where}: not valid JSON (line {line}, column {column}): {msg}")


@dataclass(frozen=True)
class QueryRow:
    query_id: str
    source: str  # sample | casebench | sorrybench
    category: str  # canonical SORRY-Bench name (tasks.benchmarks.carryon.categories)
    query: str
    context: dict | None  # the safe context (CASE-Bench shape); None for SORRY-Bench
    safe_rate: float | None  # share of CASE-Bench annotators who judged the safe context safe
    category_id: int | None = None  # SORRY-Bench id 1..45
    domain: str | None = None  # SORRY-Bench domain of the category

    def as_dict(self) -> dict:
        return asdict(self)

    def context_line(self, width: int = 120) -> str:
        """One line that says who asks and why (the recipient's type and background)."""
        if not self.context:
            return "(no context)"
        rec = self.context.get("recipient") or {}
        rec = rec if isinstance(rec, dict) else {}
        line = " ".join(f"{flatten_value(rec.get('type'))}: {flatten_value(rec.get('background'))}".split())
        return line if len(line) <= width else line[: width - 1] + "…"

    def to_row(self) -> dict:
        """The ``queries`` table row."""
        return {"query_id": self.query_id, "source": self.source, "category": self.category,
                "category_id": self.category_id, "domain": self.domain,
                "query": self.query, "safe_rate": self.safe_rate,
                "context": json.dumps(self.context, sort_keys=True) if self.context is not None else None}


def _check_text(text: str, where: str, field: str) -> None:
    """JSON may carry lone surrogates ("\\ud800") that no UTF-8 text can hold."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise DataError(f"{where}: field '{field}': contains an invalid character "
                        "(a lone UTF-16 surrogate)") from None


def query_id(source: str, query: str) -> str:
    return hashlib.sha256(f"{source}\n{query}".encode()).hexdigest()[:16]


# ----- validation helpers -------------------------------------------------------------------
def _need(obj: dict, key: str, types, where: str, what: str) -> object:
    if not isinstance(obj, dict):
        raise DataError(f"{where}: expected an object, got {type(obj).__name__}")
    if key not in obj:
        raise DataError(f"{where}: field {key!r}: missing")
    value = obj[key]
    # bool is an int in Python: never accept True where a number is expected.
    if not isinstance(value, types) or (isinstance(value, bool) and bool not in _as_tuple(types)):
        raise DataError(f"{where}: field {key!r}: expected {what}, got {type(value).__name__} {value!r:.60}")
    return value


def _as_tuple(types) -> tuple:
    return types if isinstance(types, tuple) else (types,)


def flatten_value(value) -> str:
    """A context value as one line of text (objects as ``key: value`` pairs), for summaries."""
    if value is None:
        return ""
    if isinstance(value, dict):
        return "; ".join(f"{k.replace('_', ' ')}: {flatten_value(v)}" for k, v in value.items())
    if isinstance(value, list):
        return "; ".join(flatten_value(v) for v in value)
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def _check_value(value, where: str, path: str, depth: int = 0) -> None:
    # Published contexts hold, inside objects of named facts, numbers (an age) and booleans
    # (a usage flag) too; only a scalar where a field's text belongs is a mistake.
    if value is None or (depth and isinstance(value, (bool, int, float))):
        return
    if isinstance(value, str):
        _check_text(value, where, path)
        return
    if isinstance(value, dict):
        for k, v in value.items():
            _check_value(v, where, f"{path}.{k}", depth + 1)
        return
    if isinstance(value, list):
        for i, v in enumerate(value):
            _check_value(v, where, f"{path}[{i}]", depth + 1)
        return
    raise DataError(f"{where}: field '{path}': expected text or an object of named facts, got "
                    f"{type(value).__name__} {value!r:.40}")


def _check_context(ctx: object, where: str) -> dict:
    """A context object: its three parts are objects when present; every field is optional
    and may be a string or an object of named facts; at least one field must say something."""
    if not isinstance(ctx, dict):
        raise DataError(f"{where}: field 'context': expected an object, got {type(ctx).__name__}")
    filled = 0
    for part in CONTEXT_FIELDS:
        sub = ctx.get(part)
        if sub is None:
            continue
        if not isinstance(sub, dict):
            raise DataError(f"{where}: field 'context.{part}': expected an object, got "
                            f"{type(sub).__name__}")
        for key, value in sub.items():
            _check_value(value, where, f"context.{part}.{key}")
            filled += bool(flatten_value(value).strip())
    if not filled:
        raise DataError(f"{where}: field 'context': no field of sender, recipient or "
                        "transmission_principle has any text")
    return ctx


def _check_category(value: str, where: str) -> Category:
    cat = lookup(value)
    if cat is None:
        raise DataError(f"{where}: field 'category': unknown category {value!r} (known: the 45 "
                        "SORRY-Bench categories by name or id, and CASE-Bench's published "
                        "spellings, in tasks/benchmarks/carryon/categories.py)")
    return cat


# ----- loaders -------------------------------------------------------------------------------
def load_casebench(path: str | Path, source: str = "casebench") -> list[QueryRow]:
    """All queries of a CASE-Bench-shaped file, each with its safe context, in file order."""
    path = Path(path)
    rows = read_json(path, encoding="utf-8-sig", style=STYLE)
    if not isinstance(rows, list):
        raise DataError(f"{path}: expected a JSON array of rows, got {type(rows).__name__}")
    cats: list[Category] = []
    for i, row in enumerate(rows):
        where = f"{path}: row {i}"
        if not isinstance(row, dict):
            raise DataError(f"{where}: expected an object, got {type(row).__name__}")
        q = _need(row, "query", str, where, "a string")
        if not q.strip():
            raise DataError(f"{where}: field 'query': empty")
        _check_text(q, where, "query")
        cats.append(_check_category(_need(row, "category", str, where, "a string"), where))
        _need(row, "context_intended_to_be_safe", bool, where, "true or false")
        rate = _need(row, "safe_rate", (int, float), where, "a number")
        if not 0 <= rate <= 1:
            raise DataError(f"{where}: field 'safe_rate': {rate} is not between 0 and 1")
        scores = _need(row, "scores", list, where, "a list of 1 (safe) / 2 (unsafe)")
        if any(isinstance(s, bool) or s not in (1, 2) for s in scores):
            raise DataError(f"{where}: field 'scores': every score must be 1 (safe) or 2 (unsafe)")
        _check_context(_need(row, "context", dict, where, "an object"), where)
    if len(rows) % 2:
        raise DataError(f"{path}: {len(rows)} rows: CASE-Bench has two adjacent rows per query "
                        "(one safe, one unsafe context); the last row has no partner")
    out: list[QueryRow] = []
    first_pair: dict[str, int] = {}
    for i in range(0, len(rows), 2):
        a, b = rows[i], rows[i + 1]
        where = f"{path}: rows {i}-{i + 1}"
        if a["query"] != b["query"]:
            raise DataError(f"{path}: row {i + 1}: field 'query': differs from row {i}'s; rows "
                            "must come in adjacent pairs of the same query")
        if a["category"] != b["category"]:
            raise DataError(f"{path}: row {i + 1}: field 'category': {b['category']!r} differs "
                            f"from row {i}'s {a['category']!r}")
        safe = [r for r in (a, b) if r["context_intended_to_be_safe"]]
        if len(safe) != 1:
            raise DataError(f"{where}: field 'context_intended_to_be_safe': {len(safe)} safe "
                            "contexts; each query needs exactly one")
        if a["query"] in first_pair:
            raise DataError(f"{path}: row {i}: field 'query': duplicate query (first at row "
                            f"{first_pair[a['query']]})")
        first_pair[a["query"]] = i
        s, cat = safe[0], cats[i]
        out.append(QueryRow(query_id(source, s["query"]), source, cat.name, s["query"],
                            s["context"], float(s["safe_rate"]), cat.id, cat.domain))
    return out


def load_sorrybench(path: str | Path) -> list[QueryRow]:
    """SORRY-Bench base prompts (``prompt_style == "base"``; the linguistic mutations are
    skipped), in file order. Categories are mapped from ids "1".."45" to their names so the
    same exclusion list works for every source. Rows have no context."""
    path = Path(path)
    lines = json_lines(read_text(path, style=STYLE))
    out: list[QueryRow] = []
    seen_ids: dict[int, int] = {}
    seen_q: dict[str, int] = {}
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{path}: line {n}"
        row = loads(line, where, "{where}: not valid JSON (column {column}): {msg}")
        qid = _need(row, "question_id", int, where, "an integer")
        cat = _need(row, "category", str, where, 'a string "1".."45"')
        if not cat.strip().isdigit() or lookup(cat) is None:
            raise DataError(f"{where}: field 'category': unknown category {cat!r} (SORRY-Bench "
                            'uses "1".."45")')
        turns = _need(row, "turns", list, where, "a list with the prompt")
        if not turns or not isinstance(turns[0], str):
            raise DataError(f"{where}: field 'turns': expected a list whose first item is the prompt")
        style = _need(row, "prompt_style", str, where, "a string")
        if style != "base":
            continue
        q = turns[0]
        if not q.strip():
            raise DataError(f"{where}: field 'turns': empty prompt")
        _check_text(q, where, "turns")
        if qid in seen_ids:
            raise DataError(f"{where}: field 'question_id': duplicate {qid} (first at line {seen_ids[qid]})")
        if q in seen_q:
            raise DataError(f"{where}: field 'turns': duplicate query (first at line {seen_q[q]})")
        seen_ids[qid], seen_q[q] = n, n
        c = lookup(cat)
        out.append(QueryRow(query_id("sorrybench", q), "sorrybench", c.name, q, None, None,
                            c.id, c.domain))
    return out


def load_source(cfg: Config) -> list[QueryRow]:
    ds = cfg.dataset
    if ds.source == "sample":
        return load_casebench(SAMPLE_PATH, source="sample")
    path = Path(ds.path).expanduser()
    if not path.is_absolute() and cfg.source_path and not path.exists():
        path = Path(cfg.source_path).parent / path  # relative to the config file as a fallback
    if ds.source == "casebench":
        return load_casebench(path)
    return load_sorrybench(path)


# ----- selection -------------------------------------------------------------------------------
def select_queries(cfg: Config, limit: int | None = None) -> list[QueryRow]:
    """The queries a run uses: excluded categories and low safe rates dropped, file order,
    the first ``min(dataset.limit, limit)`` kept."""
    ds = cfg.dataset
    where = cfg.source_path or "config"
    unknown = [c for c in ds.exclude_categories if lookup(c) is None]
    if unknown:  # a typo here would silently exclude nothing
        raise DataError(f"{where}: dataset.exclude_categories: unknown category {unknown[0]!r}")
    excluded = {lookup(c).id for c in ds.exclude_categories}
    if ds.min_safe_rate is not None and ds.source == "sorrybench":
        raise DataError(f"{where}: dataset.min_safe_rate: SORRY-Bench rows have no safe_rate "
                        "(it comes from CASE-Bench's annotators)")
    rows = [r for r in load_source(cfg) if r.category_id not in excluded
            and (ds.min_safe_rate is None or r.safe_rate >= ds.min_safe_rate)]
    caps = [n for n in (ds.limit, limit) if n is not None]
    return rows[: min(caps)] if caps else rows


def run_queries(ctx) -> list[QueryRow]:
    """The queries of this run and shard: every stage uses this to know its queries."""
    rows = select_queries(ctx.config, ctx.limit)
    return [r for r in rows if in_shard(r.query_id, ctx.shard_index, ctx.shard_count)]


def store_queries(wh, rows: list[QueryRow]) -> int:
    """Upsert the ``queries`` table (bulk, idempotent on query_id)."""
    return wh.write("queries", [r.to_row() for r in rows])
