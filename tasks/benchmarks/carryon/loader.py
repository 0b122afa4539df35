"""CarryOnBench's queries as the engine's items: the queries the config's ``dataset:`` section
selects (tasks/benchmarks/carryon/queries.py: CASE-Bench or SORRY-Bench, excluded categories
and a minimum safe rate applied), each an item whose id is its query id and whose prompt
``query`` is the query verbatim. What play needs beyond that (the benign intent and the
oracle prompt, built from the query by the checklists stage) the checklists stage adds
(stages.py ``prepared``)."""

from __future__ import annotations

from tasks.benchmarks.carryon.queries import SAMPLE_PATH, QueryRow, load_casebench, select_queries
from tasks.core.items import Item
from tasks.core.registry import loader


def item_of(q: QueryRow, row: int) -> Item:
    return Item(q.query_id, row, {"query": q.query}, {},
                {"category": q.category, "domain": q.domain, "source": q.source})


def select(cfg, limit: int | None = None) -> list[Item]:
    return [item_of(q, i) for i, q in enumerate(select_queries(cfg, limit))]


@loader("carryon", sample=SAMPLE_PATH, select=select)
def load(path) -> list[Item]:
    """The queries of a CASE-Bench-shaped file (what ``dataset.source: casebench`` reads);
    a run selects through ``select``, which also reads SORRY-Bench and the config's filters."""
    return [item_of(q, i) for i, q in enumerate(load_casebench(path))]
