"""CarryOnBench's own tables, brought to every warehouse by its package (``registry.tables``)
and rendered in schema.json beside this file: its queries and their benign intents (the
intents stage) and Table 2 with confidence intervals (its report).

    python -m warehouse.schema_file tasks.benchmarks.carryon.tables tasks/benchmarks/carryon/schema.json
"""

from __future__ import annotations

import datetime as dt

from sqlalchemy import Double
from sqlmodel import Field, SQLModel


class Query(SQLModel, table=True):
    __tablename__ = "queries"
    query_id: str = Field(primary_key=True)  # hash of source + query text
    source: str  # sample | casebench | sorrybench
    category: str  # canonical SORRY-Bench name (tasks/benchmarks/carryon/categories.py)
    query: str
    context: str | None = None  # JSON of the safe context (CASE-Bench shape)
    safe_rate: float | None = None
    category_id: int | None = None  # SORRY-Bench id 1..45
    domain: str | None = None  # SORRY-Bench domain: Hate Speech Generation, ...


class Intent(SQLModel, table=True):
    """The benign intent of a query, written by the intent_rewriter role."""

    __tablename__ = "intents"
    query_id: str = Field(primary_key=True)
    intent: str | None = None  # null when the rewriter failed (see error)
    oracle_prompt: str | None = None
    model: str
    call_hash: str | None = None
    error: str | None = None
    # "context": rewritten from the safe context; "query_only": no context (SORRY-Bench), the
    # rewriter proposed a plausible purpose from the query alone.
    basis: str = "context"



class Table2CI(SQLModel, table=True):
    """Table 2 with 95 % confidence intervals (tasks/report/table2_ci.py): per target and
    column of model_summary, the point estimate (equal to model_summary's) and the bounds of a
    bootstrap over queries (clustered: all conversations of a query resampled together).
    Replaced as a whole each time the report is written."""

    __tablename__ = "table2_ci"
    target: str = Field(primary_key=True)
    metric: str = Field(primary_key=True)  # a model_summary column, e.g. bc_utility
    # DOUBLE, not SQLModel's default FLOAT (4 bytes): the estimate must equal model_summary's.
    estimate: float | None = Field(default=None, sa_type=Double)
    ci_lo: float | None = Field(default=None, sa_type=Double)  # null: no interval (one query)
    ci_hi: float | None = Field(default=None, sa_type=Double)
    n_queries: int
    n_boot: int
    seed: int
    level: float = Field(sa_type=Double)
    run_id: str | None = None
    created: dt.datetime
