"""Tables of stage 4: numbers the report computes that SQL cannot express as a view."""

from __future__ import annotations

import datetime as dt

from sqlalchemy import Double
from sqlmodel import Field, SQLModel


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
