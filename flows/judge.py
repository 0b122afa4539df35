"""Stage 3 (Ben-Util and safety judging) as a Prefect subflow."""

from __future__ import annotations

from prefect import flow

from tasks.run import StageNotBuilt, get_run


@flow(name="judge")
async def judge_flow(run_id: str) -> dict:
    get_run(run_id)
    raise StageNotBuilt("stage 'judge' is not built yet (issue #5 is open)")
