"""The report's statistics cache (tasks/benchmarks/carryon/report/stats_cache.py): computed once per input, read
back after, never read for other inputs, never kept when an analysis failed."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from tasks.config import load_config
from tasks.benchmarks.carryon.report.writer import write_report
from tasks.benchmarks.carryon.report.analyses import Stat
from tasks.benchmarks.carryon.report.failure_modes import FailureRules
from tasks.benchmarks.carryon.report.stats_cache import stats_once
from tests.support.report import build_synthetic

ROOT = Path(__file__).resolve().parents[3]


@dataclasses.dataclass
class _Data:  # the shape of ReportData that matters here: a run row and tables
    run: dict
    conv: pd.DataFrame
    config: dict
    extra: dict = dataclasses.field(default_factory=dict)


def _compute(calls: list, data: _Data):
    def compute():
        calls.append(1)
        return [Stat("mean", pd.DataFrame({"m": [data.conv["u"].mean()]}), key="mean")]
    return compute


def _never_failed(stats) -> bool:
    return False


def test_stats_are_computed_once_per_input(tmp_path):
    cache, calls = tmp_path / ".stats", []
    conv = pd.DataFrame({"target": ["a", "a", "b"], "u": [10.0, 20.0, 60.0]})
    data = _Data({"run_id": "r1"}, conv, {"seed": 0})
    first = stats_once(cache, data, FailureRules(), _compute(calls, data), _never_failed)
    assert calls == [1] and first[0].table["m"][0] == 30.0
    # Another run over the same rows, in another order: read back, not computed.
    again = _Data({"run_id": "r2", "status": "running"}, conv.iloc[::-1], {"seed": 0})
    kept = stats_once(cache, again, FailureRules(), _compute(calls, again), _never_failed)
    assert calls == [1] and kept[0].table.equals(first[0].table)
    # Changed rows, another config or other rules: computed again, each its own entry.
    changed = _Data({"run_id": "r3"}, conv.assign(u=[10.0, 20.0, 90.0]), {"seed": 0})
    assert stats_once(cache, changed, FailureRules(), _compute(calls, changed),
                      _never_failed)[0].table["m"][0] == 40.0
    other_cfg = _Data({"run_id": "r3"}, conv, {"seed": 1})
    stats_once(cache, other_cfg, FailureRules(), _compute(calls, other_cfg), _never_failed)
    stats_once(cache, data, FailureRules(harmful_score=5), _compute(calls, data), _never_failed)
    assert len(calls) == 4 and len(list(cache.glob("*.pkl"))) == 4
    # A section left out of the key (the cost lines: this run's requests) changes nothing;
    # any other section does.
    costly = _Data({"run_id": "r4"}, conv, {"seed": 0}, {"cost": {"requests_this_run": 6882}})
    cached = _Data({"run_id": "r5"}, conv, {"seed": 0}, {"cost": {"requests_this_run": 0}})
    for d in (costly, cached):  # both read back the first run's entry (no other section)
        stats_once(cache, d, FailureRules(), _compute(calls, d), _never_failed, leave_out=("cost",))
    assert len(calls) == 4
    judged = _Data({"run_id": "r5"}, conv, {"seed": 0}, {"cost": {}, "judging": {"n": 1}})
    stats_once(cache, judged, FailureRules(), _compute(calls, judged), _never_failed,
               leave_out=("cost",))
    assert len(calls) == 5
    # Not left out, the cost lines are inputs like any other.
    stats_once(cache, costly, FailureRules(), _compute(calls, costly), _never_failed)
    assert len(calls) == 6


def test_a_failed_statistic_is_never_kept_and_a_torn_file_is_recomputed(tmp_path):
    cache, calls = tmp_path / ".stats", []
    data = _Data({"run_id": "r1"}, pd.DataFrame({"u": [1.0]}), {})
    for _ in range(2):
        stats_once(cache, data, FailureRules(), _compute(calls, data), lambda s: True)
    assert len(calls) == 2 and not list(cache.glob("*.pkl"))
    stats_once(cache, data, FailureRules(), _compute(calls, data), _never_failed)
    (kept,) = cache.glob("*.pkl")
    kept.write_bytes(b"torn")
    assert stats_once(cache, data, FailureRules(), _compute(calls, data),
                      _never_failed)[0].table["m"][0] == 1.0
    assert len(calls) == 4


@pytest.mark.slow  # four whole reports, one of them in a fresh subprocess
def test_a_rerun_report_reads_its_statistics_back_without_the_numerical_stack(tmp_path,
                                                                               write_config):
    """The same report twice: the second, in a fresh process, is the same text and imports
    neither scipy, statsmodels, matplotlib nor litellm. After a changed judgment the
    statistics are computed again and the report changes."""
    cfg_path = write_config()
    cfg = load_config(cfg_path)
    wh, run_id = build_synthetic(cfg.home_path)
    folder = write_report(cfg, None)
    assert len(list((folder.parent / ".stats").glob("*.pkl"))) == 1
    # The rerun is another run (its own id, none of the first run's requests): the report of
    # the latest run, which reads every table as the first did.
    import datetime as dt

    run = wh.query("SELECT * FROM runs WHERE run_id = ?", [run_id])[0]
    wh.write("runs", [{**run, "run_id": run_id + "-rerun",
                       "started": run["started"] + dt.timedelta(hours=1)}])
    folder = write_report(cfg, None)
    assert folder.name == run_id + "-rerun"
    first = (folder / "report.md").read_text()
    assert len(list((folder.parent / ".stats").glob("*.pkl"))) == 1
    code = ("import sys\n"
            "from tasks.config import load_config\n"
            "from tasks.benchmarks.carryon.report.writer import write_report\n"
            f"write_report(load_config({str(cfg_path)!r}), None)\n"
            "print(sorted(m for m in ('scipy', 'statsmodels', 'matplotlib', 'litellm') "
            "if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, env=dict(os.environ), check=True).stdout
    assert out.strip().splitlines()[-1] == "[]"
    assert (folder / "report.md").read_text() == first
    # One Ben-Util verdict flipped: other inputs, so the statistics are computed again.
    row = wh.query("SELECT * FROM verdicts WHERE kind = 'benutil' AND value IS NOT NULL "
                   "LIMIT 1")[0]
    wh.write("verdicts", [{**row, "value": 1.0 - row["value"]}])
    write_report(cfg, None)
    assert len(list((folder.parent / ".stats").glob("*.pkl"))) == 2
    assert (folder / "report.md").read_text() != first
