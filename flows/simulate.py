"""Stage 2 (flows and multi-turn simulation) as a Prefect subflow."""

from __future__ import annotations

from prefect import flow

from tasks.run import StageNotBuilt, get_run


@flow(name="simulate")
async def simulate_flow(run_id: str) -> dict:
    get_run(run_id)
    raise StageNotBuilt("stage 'simulate' is not built yet (issue #4 is open)")
