"""The report stage of every benchmark: the spec's report sections, assembled into one report
folder (tasks/report/assemble.py); it calls no model. Its memo (tasks/engine/stage_memo.py)
keeps the folder of the run that wrote it while nothing it reads has changed."""

from __future__ import annotations

from tasks.core.registry import stage
from tasks.report import assemble
from tasks.core.stages import Stage


@stage("report")
class Report(Stage):
    name, phase, flow = "report", "report", "flows.report:report_flow"

    def check(self, spec):
        assemble.check(spec)
