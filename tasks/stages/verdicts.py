"""The episode engine's judging stage: the spec's judges over its stored episodes, one verdict
set per judge (``verdict_sets`` / ``verdicts``; tasks/engine/verdicts.py)."""

from __future__ import annotations

from tasks.core.registry import stage
from tasks.core.stages import Stage, component_roles


@stage("verdicts")
class Verdicts(Stage):
    name, phase, flow = "verdicts", "judge", "flows.verdicts:verdicts_flow"
    outputs = ("verdict_sets", "verdicts", "verdict_votes", "judge_agreement")
    reads = ("episodes",)
    runs_judges = True

    def roles(self, spec):
        return component_roles(spec, (("judge", spec.judges),))
