"""What every report section of the episode engine's benchmarks needs (a section is registered
with ``@section(name, title=...)`` from tasks/core/registry.py, beside its benchmark's
spec): its spec's view prefix, reading its views without crashing on an old or sparse
warehouse (or saying that nothing was played yet), a number with its count, and a Markdown
table. A section is ``fn(wh, spec) -> Markdown``: it reads the views of the spec it is given
(the spec's ``views.prefix``), never a benchmark's name of its own."""

from __future__ import annotations

from tasks.report.md_common import md_lines


def view_prefix(spec, what: str) -> str:
    """The name prefix of the spec's own views, which a section reads."""
    if spec.views is None:
        raise ValueError(f"the {what} section reads its benchmark's views, and the spec "
                         f"{spec.name} has none (views: {{file, prefix}})")
    return spec.views.prefix


def failure_reasons(wh, benchmark: str) -> dict[tuple[str, str], str]:
    """{(target, condition): "simulator_error (api_error) x 6; ..."}: the failed episodes'
    statuses and error kinds with their counts, most common first."""
    rows = wh.query(
        "SELECT target, condition, status || coalesce(' (' || nullif(split_part(error, ':', 1), '')"
        " || ')', '') AS reason, count(*) AS n FROM episodes "
        "WHERE benchmark = ? AND status <> 'completed' GROUP BY ALL ORDER BY n DESC, reason",
        [benchmark])
    out: dict[tuple[str, str], list[str]] = {}
    for r in rows:
        out.setdefault((r["target"], r["condition"]), []).append(f"{r['reason']} x {r['n']}")
    return {k: "; ".join(v) for k, v in out.items()}


def failed_targets(wh, benchmark: str) -> list[dict]:
    """The targets with episodes of which none completed: {target, n_episodes, reasons}.
    Every metric view reads completed episodes only, so without this they would vanish from
    the tables instead of showing as failed."""
    rows = wh.query("SELECT target, count(*) AS n_episodes FROM episodes WHERE benchmark = ? "
                    "GROUP BY target HAVING count(*) FILTER (WHERE status = 'completed') = 0 "
                    "ORDER BY target", [benchmark])
    if not rows:
        return []
    reasons = failure_reasons(wh, benchmark)
    for r in rows:
        r["reasons"] = "; ".join(v for (t, _), v in sorted(reasons.items()) if t == r["target"])
    return rows


def failed_target_lines(wh, benchmark: str) -> list[str]:
    """One line per target whose every episode failed, for a section to show under its
    tables (empty when there is none)."""
    return [f"- **{r['target']}**: 0 of {r['n_episodes']} episodes completed ({r['reasons']}); "
            "it has no row above because every measure reads completed episodes."
            for r in failed_targets(wh, benchmark)]


def read_views(wh, queries: dict[str, str], what: str) -> dict[str, list[dict]] | str:
    """{name: rows} of each query, or a "Not computed: ..." line when the views cannot be
    read (a warehouse written before they existed)."""
    try:
        return {name: wh.query(sql) for name, sql in queries.items()}
    except Exception as e:  # noqa: BLE001 - say so in the report, never crash it
        return f"Not computed: the {what} views cannot be read ({' '.join(str(e).split())[:200]})."


def section_views(wh, spec, what: str, views: dict[str, str], *, needs: tuple[str, ...],
                  nothing: str, label: str | None = None) -> dict[str, list[dict]] | str:
    """{name: rows} of the spec's views, or the one line the section shows instead.

    ``views`` gives each name its view and order (``{"summary": "summary ORDER BY target"}``
    reads ``SELECT * FROM <prefix>_summary ORDER BY target``). The line is read_views' when
    the views cannot be read (``label`` names them; default ``what``), or "Not computed:
    <nothing> (run the episodes and verdicts stages)." when none of ``needs`` has a row."""
    p = view_prefix(spec, what)
    rows = read_views(wh, {name: f"SELECT * FROM {p}_{q}" for name, q in views.items()},
                      label or what)
    if isinstance(rows, str):
        return rows
    if not any(rows[name] for name in needs):
        return f"Not computed: {nothing} (run the episodes and verdicts stages)."
    return rows


def number(value, n=None, *, pct: bool = False, digits: int | None = None,
           signed: bool = False) -> str:
    """A measure as text: "n/a" for None; a share as a percentage (1 decimal) or a number
    (3 decimals, ``signed``: with its sign); "(n=k)" after it when a count is given."""
    if value is None:
        return "n/a"
    if pct:
        text = f"{100 * value:.{1 if digits is None else digits}f}%"
    else:
        text = f"{value:{'+' if signed else ''}.{3 if digits is None else digits}f}"
    return f"{text} (n={n})" if n is not None else text


# A section's table: Markdown lines from headers and rows of text.
md_table = md_lines
