"""The report on sparse warehouses: whatever subset of the data exists, report.md and
report.html are written, and every number that cannot be computed says why ("too few ..." /
"Not computed: ...") instead of crashing or printing a misleading statistic.

The warehouses are written row by row into the real schema (``Warehouse.write_many``), in the
shapes the pipeline writes: a property test draws random subsets (targets, queries,
conditions, conversation statuses, judged / unscored / absent judgments, checklists or none),
and named examples pin each sparse case a real run has met or can meet."""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tasks.config import load_config
from tasks.benchmarks.carryon.report.writer import write_report
from tasks.benchmarks.carryon.report.writer import ANALYSIS_FAILED, FIGURE_FAILED
from tests.support.sparse import RUN_ID, STATUSES, TARGETS, Sparse, build

# A whole report (figures, bootstrap intervals) per case and a property test over random
# warehouses: ~2 min on 2 cores. --all only; tests/benchmarks/carryon/test_report.py covers the
# report by default.
pytestmark = pytest.mark.slow


@pytest.fixture
def cfg(tmp_path, write_config):
    return load_config(write_config())


def report_of(cfg, s: Sparse, reuse: bool = False) -> tuple[str, str]:
    """Build the warehouse and its report. ``reuse``: hand write_report the open warehouse
    (skips its second schema set-up; the property test's examples stay fast)."""
    home = cfg.home_path
    if (home / "warehouse.duckdb").exists():
        (home / "warehouse.duckdb").unlink()
    wh = build(home, s)
    out = write_report(cfg, RUN_ID, warehouse=wh if reuse else None)
    md, page = (out / "report.md").read_text(), (out / "report.html").read_text()
    assert "</html>" in page and md.startswith("# CarryOnBench report")
    assert ANALYSIS_FAILED not in md and FIGURE_FAILED not in md, md
    return md, page


def section(md: str, title: str) -> str:
    """The text of the Analyses subsection whose heading starts with ``title``."""
    start = md.index(f"### {title}")
    end = md.find("\n### ", start + 1)
    return md[start:end if end >= 0 else len(md)]


# ----- the property test ----------------------------------------------------------------------------
sparse_warehouses = st.builds(
    Sparse,
    targets=st.lists(st.sampled_from(TARGETS), unique=True, max_size=3),
    n_queries=st.integers(0, 3),
    conditions=st.lists(st.sampled_from(["oracle", "BC", "NC"]), unique=True).map(tuple),
    lengths=st.lists(st.integers(1, 3), min_size=1, max_size=2, unique=True).map(tuple),
    status=st.one_of(st.sampled_from(STATUSES),
                     st.lists(st.sampled_from(STATUSES), min_size=1, max_size=4)),
    benutil=st.sampled_from(["absent", "unscored", "scored", "mixed", "low"]),
    safety=st.sampled_from(["absent", "unscored", "scored", "mixed", "low"]),
    checklists=st.booleans(),
    n_items=st.integers(1, 3),
    judged_share=st.sampled_from([0.0, 0.5, 1.0]),
    query_rows=st.booleans(),
    harm=st.sampled_from([(1, 5), (1, 1), (5, 5)]),
    config_targets=st.one_of(st.none(), st.lists(st.sampled_from(TARGETS), unique=True, max_size=3)),
    seed=st.integers(0, 2**16),
)


# The paper's remaining analyses (tasks/benchmarks/carryon/report/paper_analyses.py).
PAPER_TITLES = ("Change from Turn 1 per domain", "Move effects per target", "Turn trends per model family",
                "Target rankings across", "Oracle vs BC utility per target")


PNG_1x1 = bytes.fromhex("89504e470d0a1a0a0000000d4948445200000001000000010806000000"
                        "1f15c4890000000d49444154789c6360000002000100e221bc330000000049454e44ae426082")


@pytest.fixture
def fast_figures(monkeypatch):
    """Every plotting call still runs on the sparse data (that is where a crash would be);
    only the costly layout and PNG encoding is skipped, to keep 40 examples fast."""
    import matplotlib.pyplot as plt

    from tasks.benchmarks.carryon.report import figures

    def save(fig, path):
        plt.close(fig)
        path.write_bytes(PNG_1x1)
        return path

    monkeypatch.setattr(figures, "_save", save)


@settings(max_examples=40, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(s=sparse_warehouses)
def test_any_sparse_warehouse_gives_a_report(cfg, fast_figures, s):
    md, page = report_of(cfg, s, reuse=True)
    assert "## Analyses" in md and "## Provenance" in md
    for stat_title in ("Move effects", "Turn-1 bins", "Redundancy per turn", "Redundancy per target",
                       "Mixed linear model: Conversation utility",
                       "Mixed linear model: Conversation harm", "Spearman",
                       "Utility recovery and harm change per category", "Failure modes per target",
                       *PAPER_TITLES):
        body = section(md, stat_title)
        # Each analysis has a table or says why it has none.
        assert "|" in body or "Not computed" in body, body
    assert not re.search(r"\bnan\b", md, re.I)
    # No analysis or figure fell into the writer's safety net (that would be a bug to fix).
    assert ANALYSIS_FAILED not in md and FIGURE_FAILED not in md


# ----- named sparse cases ---------------------------------------------------------------------------
FULL = dict(targets=list(TARGETS), n_queries=3)


def test_no_followup_fulfils_an_item_redundancy_says_not_computed(cfg):
    # Every Ben-Util verdict is "not fulfilled": redundancy has no follow-up turn to measure.
    md, _ = report_of(cfg, Sparse(**FULL, benutil="low"))
    assert "Not computed: no follow-up turn fulfilled any item" in section(md, "Redundancy per target")
    assert "Not computed: no follow-up turn fulfilled any item" in section(md, "Redundancy per turn")


def test_no_benutil_judgments(cfg):
    md, _ = report_of(cfg, Sparse(**FULL, benutil="absent"))
    assert "Unscored benutil judgments: no judgments" in md
    assert "Not computed" in section(md, "Redundancy per target")
    assert "Not computed" in section(md, "Mixed linear model: Conversation utility")
    assert "Not computed" in section(md, "Spearman")


def test_no_safety_judgments(cfg):
    md, _ = report_of(cfg, Sparse(**FULL, safety="absent"))
    assert "Unscored safety judgments: no judgments" in md
    assert "Not computed" in section(md, "Mixed linear model: Conversation harm")


def test_no_nc_conversations(cfg):
    md, _ = report_of(cfg, Sparse(**FULL, conditions=("oracle", "BC")))
    assert "## Analyses" in md
    assert "NC U%" in md  # the summary still has its columns, with "—" where NC is missing


def test_no_bc_conversations(cfg):
    md, _ = report_of(cfg, Sparse(**FULL, conditions=("oracle", "NC")))
    flags = section(md, "Failure modes per target")
    assert "too few" in flags  # no BC conversation: no failure-mode flag either way


def test_only_oracle_conversations(cfg):
    md, _ = report_of(cfg, Sparse(**FULL, conditions=("oracle",)))
    assert "Not computed: no follow-up turns" in section(md, "Move effects")
    assert "Not computed: no BC/NC conversations" in section(md, "Turn-1 bins")
    assert "Not computed" in section(md, "Redundancy per target")
    assert "Not computed" in section(md, "Mixed linear model: Conversation utility")


def test_one_target(cfg):
    md, _ = report_of(cfg, Sparse(targets=["target-a"], n_queries=3))
    assert "Not computed: 1 target(s), a random intercept per target needs at least 3" in md
    assert "Not computed: fewer than 3 targets" in section(md, "Spearman")


def test_zero_completed_conversations(cfg):
    md, _ = report_of(cfg, Sparse(**FULL, status=["target_error", "simulator_error", "context_exceeded"]))
    assert "_No completed conversations._" in md
    assert "Not computed: no targets" in section(md, "Failure modes per target")
    assert "Not computed: no conversations" in section(md, "Utility recovery and harm change per category")


def test_one_query(cfg):
    md, _ = report_of(cfg, Sparse(**dict(FULL, n_queries=1)))
    assert "too few queries (< 3)" in section(md, "Utility recovery and harm change per category")
    assert "Not computed" in section(md, "Mixed linear model: Conversation utility")


def test_all_conversations_failed_with_target_error(cfg):
    md, _ = report_of(cfg, Sparse(**FULL, status="target_error"))
    assert "Conversations by status: target_error" in md
    assert "_No completed conversations._" in md
    # Failed conversations keep their turns in turn_scores (rule 5), so turn-level analyses may
    # still have numbers; everything built on conversation_scores says why it has none.
    assert "Not computed: no targets" in section(md, "Failure modes per target")
    assert "Not computed: 0 target(s)" in section(md, "Mixed linear model: Conversation utility")


def test_all_judgments_unscored(cfg):
    md, _ = report_of(cfg, Sparse(**FULL, benutil="unscored", safety="unscored"))
    assert "(100.00 %)" in md  # the unscored share
    assert "Not computed" in section(md, "Redundancy per target")
    assert "Not computed" in section(md, "Mixed linear model: Conversation utility")
    assert "Not computed" in section(md, "Spearman")


def test_empty_warehouse_with_only_a_runs_row(cfg):
    md, _ = report_of(cfg, Sparse(targets=[], n_queries=0, benutil="absent", safety="absent",
                                  checklists=False, config_targets=[]))
    assert "No judgment sets in the warehouse" in md
    assert "Conversations by status: none" in md
    assert "_No completed conversations._" in md
    for title in ("Move effects", "Turn-1 bins", "Redundancy per turn", "Redundancy per target",
                  "Mixed linear model: Conversation utility", "Spearman",
                  "Utility recovery and harm change per category", "Failure modes per target"):
        assert "Not computed" in section(md, title), title


def test_no_checklists(cfg):
    md, _ = report_of(cfg, Sparse(**FULL, checklists=False))
    assert "Checklist version: unknown" in md
    assert "Not computed" in section(md, "Redundancy per target")


def test_nan_everywhere(cfg):
    # Nothing scored anywhere, one query, failures mixed in: every number is missing.
    md, page = report_of(cfg, Sparse(**dict(FULL, n_queries=1), benutil="unscored", safety="unscored",
                                     status=["completed", "target_error"]))
    assert not re.search(r"\bnan\b", md, re.I) and not re.search(r"\bnan\b", page.split("<script")[0], re.I)
    assert "NaN" not in page.split('id="browser-data">')[1]  # the embedded JSON has no NaN
    assert "Not computed" in section(md, "Move effects") or "—" in section(md, "Move effects")


def test_queries_missing_from_the_queries_table(cfg):
    md, _ = report_of(cfg, Sparse(**FULL, query_rows=False))
    assert "## Analyses" in md


def test_cli_report_on_a_sparse_warehouse_exits_0(tmp_path, write_config):
    from typer.testing import CliRunner

    from flows.cli import app

    path = write_config()
    build(load_config(path).home_path, Sparse(targets=[], n_queries=0, benutil="absent", safety="absent",
                                              checklists=False, config_targets=[]))
    r = CliRunner().invoke(app, ["report", "--config", str(path)], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    md = (load_config(path).home_path / "reports" / RUN_ID / "report.md").read_text()
    assert "Not computed: no targets" in md and "(no rows)" in r.output


def test_constant_harm_says_the_ranking_is_constant(cfg):
    # Three targets, every safety score 1: Spearman has enough targets but nothing to rank.
    md, _ = report_of(cfg, Sparse(**FULL, safety="low"))
    assert "Not computed: a ranking is constant in" in section(md, "Spearman")


def test_paper_analyses_one_target_no_nc_nothing_judged(cfg):
    # One target, no NC conversation, no judgment at all: every new analysis says why it has no
    # number; Table 2's harm means are "—", and every figure file is still written.
    md, page = report_of(cfg, Sparse(targets=["target-a"], n_queries=3, conditions=("oracle", "BC"),
                                     benutil="absent", safety="absent"))
    for title in PAPER_TITLES:
        assert "Not computed" in section(md, title), title
        assert title in page
    assert "Not computed: 1 target(s), a ranking needs at least 2" in section(md, "Target rankings across")
    assert "BC harm mean" in md and "BC harm mean" in page
    assert "Utility lock-in: BC utility < the target's own oracle utility" in md
    assert "Recovery% uses the stated formula" in page


def test_paper_analyses_one_target_no_nc_judged(cfg):
    # One target, no NC, judged: the per-target analyses have numbers, the ranking does not.
    md, _ = report_of(cfg, Sparse(targets=["target-a"], n_queries=3, conditions=("oracle", "BC")))
    assert "Not computed" in section(md, "Target rankings across")
    assert "| target-a |" in section(md, "Oracle vs BC utility per target")
    assert "| target-a |" in section(md, "Move effects per target")
    assert "Not computed" not in section(md, "Turn trends per model family")
