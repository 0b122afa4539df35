"""Stage 4 (metrics, figures and the report) as a Prefect subflow.

The report reads the warehouse's views; it calls no model. Besides the files, it publishes
the model summary as a Prefect table artifact and report.md as a markdown artifact, so the
Prefect UI shows the run's headline numbers."""

from __future__ import annotations

from prefect import flow, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact

from tasks.engine.run import get_run
from tasks.report.assemble import CONSOLE_KEY


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
    """The run's report (tasks/report/assemble.py) and its artifacts: the headline table where
    the report has one, report.md."""
    from tasks.report.assemble import write

    ctx = get_run(run_id)
    title = ctx.config.spec.title
    out = write(ctx.config, ctx.warehouse, run_id)
    key = artifact_key(run_id)
    if out.table is not None:
        create_table_artifact(out.table, key=f"{key}-model-summary",
                              description=f"{title} model summary (Table 2), run {run_id}")
    create_markdown_artifact(out.markdown, key=f"{key}-report",
                             description=f"{title} report, run {run_id}")
    # The headline rows ride in the stage's summary (``carryon run`` prints them; a kept
    # report's memo keeps them): reading them again means the metric views' whole chain once
    # more, at the run's end, on top of what the report left (+150 MB at 6,400 conversations).
    console = {CONSOLE_KEY: out.console} if out.console is not None else {}
    return {"report": str(out.folder), **out.summary, **console}


@flow(name="report")
async def report_flow(run_id: str) -> dict:
    return write_report_task(run_id)
