"""CarryOnBench's report, a layout section (tasks/report/assemble.py): report.md and
report.html with Table 2, the paper's figures and analyses and the conversation browser
(tasks/report/writer.py), over the views beside its spec."""

from __future__ import annotations

import math

from tasks.engine.registry import section
from tasks.report.assemble import Written


def _clean(v):
    # Prefect stores artifacts as JSON: NaN is not JSON, and None says "no value" plainly.
    return None if isinstance(v, float) and math.isnan(v) else v


@section("paper", title="CarryOnBench report", layout=True, compare=("paper",))
def paper(cfg, wh, run_id, compare=None) -> Written:
    from tasks.report.writer import build, summary_rows  # pandas, scipy, matplotlib: loaded now

    rep, browser = build(cfg, run_id, warehouse=wh)
    table = [{k: _clean(v) for k, v in r.items()} for r in rep.data.summary.to_dict("records")]
    notes = []
    if compare == "paper":
        from tasks.report.markdown import paper_section

        notes = paper_section(rep.stats)
    return Written(rep.folder, rep.markdown, table=table, console=summary_rows(wh),
                   summary={"targets": len(table), "conversations": len(rep.data.conv),
                            "browser_conversations": len(browser["conversations"])},
                   notes=notes)
