"""Stage 4 (metrics, figures and the report) as a Prefect subflow.

The report reads the warehouse's views; it calls no model. Besides the files, it publishes
the model summary as a Prefect table artifact and report.md as a markdown artifact, so the
Prefect UI shows the run's headline numbers."""

from __future__ import annotations

import math

from prefect import flow, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact

from tasks.run import get_run


def _clean(v):
    # Prefect stores artifacts as JSON: NaN is not JSON, and None says "no value" plainly.
    return None if isinstance(v, float) and math.isnan(v) else v


def artifact_key(run_id: str) -> str:
    return "carryon-" + "".join(c if c.isalnum() else "-" for c in run_id.lower())


def republish_report(run_id: str, markdown: str) -> None:
    """A new version of the run's report artifact (after the status line was rewritten)."""
    # _sync: called from the async carryon flow, where Prefect would otherwise hand back an
    # un-awaited coroutine (and publish nothing).
    create_markdown_artifact(markdown, key=f"{artifact_key(run_id)}-report",
                             description=f"CarryOnBench report, run {run_id}", _sync=True)


@task(name="write-report")
def write_report_task(run_id: str) -> dict:
    ctx = get_run(run_id)
    from tasks.report import build  # pandas, scipy, matplotlib: loaded when a report is due

    rep, browser = build(ctx.config, run_id, warehouse=ctx.warehouse)
    rows = [{k: _clean(v) for k, v in r.items()} for r in rep.data.summary.to_dict("records")]
    key = artifact_key(run_id)
    create_table_artifact(rows, key=f"{key}-model-summary",
                          description=f"CarryOnBench model summary (Table 2), run {run_id}")
    create_markdown_artifact(rep.markdown, key=f"{key}-report",
                             description=f"CarryOnBench report, run {run_id}")
    return {"report": str(rep.folder), "targets": len(rows),
            "conversations": len(rep.data.conv), "browser_conversations": len(browser["conversations"])}


@task(name="write-episode-report")
def write_episode_report_task(run_id: str) -> dict:
    """The report of an episode benchmark (a sister benchmark): report.md and its artifact."""
    from tasks.report.episodes import write

    ctx = get_run(run_id)
    folder, markdown = write(ctx.config, ctx.warehouse, run_id)
    create_markdown_artifact(markdown, key=f"{artifact_key(run_id)}-report",
                             description=f"{ctx.config.spec.title} report, run {run_id}")
    return {"report": str(folder)}


@flow(name="report")
async def report_flow(run_id: str) -> dict:
    if get_run(run_id).config.spec.engine == "episodes":
        return write_episode_report_task(run_id)
    return write_report_task(run_id)
