"""Report sections of the episode engine's benchmarks (one module per built-in section,
registered with ``@section(name, title=...)`` from tasks/engine/registry.py), and what every
section needs: its spec's view prefix, reading its views without crashing on an old or sparse
warehouse, and a Markdown table. A section is ``fn(wh, spec) -> Markdown``: it reads the views
of the spec it is given (the spec's ``views.prefix``), never a benchmark's name of its own."""

from __future__ import annotations


def view_prefix(spec, what: str) -> str:
    """The name prefix of the spec's own views, which a section reads."""
    if spec.views is None:
        raise ValueError(f"the {what} section reads its benchmark's views, and the spec "
                         f"{spec.name} has none (views: {{file, prefix}})")
    return spec.views.prefix


def read_views(wh, queries: dict[str, str], what: str) -> dict[str, list[dict]] | str:
    """{name: rows} of each query, or a "Not computed: ..." line when the views cannot be
    read (a warehouse written before they existed)."""
    try:
        return {name: wh.query(sql) for name, sql in queries.items()}
    except Exception as e:  # noqa: BLE001 - say so in the report, never crash it
        return f"Not computed: the {what} views cannot be read ({' '.join(str(e).split())[:200]})."


def _cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def md_table(headers: list[str], rows: list[list[str]]) -> list[str]:
    """Markdown table lines (a cell's pipes and line breaks escaped)."""
    out = ["| " + " | ".join(map(_cell, headers)) + " |", "|" + "---|" * len(headers)]
    return out + ["| " + " | ".join(map(_cell, r)) + " |" for r in rows]
