"""write_report: views -> analyses -> figures -> report.md + report.html, in one folder.

The report is written to a temporary folder beside the target and renamed into place, so a
failure leaves the previous report (or nothing), never half a report."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from tasks.config import Config
from tasks.benchmarks.carryon.report import analyses as an
from tasks.benchmarks.carryon.report import benutil_mode, construction, cost, fidelity, judging
from tasks.benchmarks.carryon.report import failure_modes as fm
from tasks.benchmarks.carryon.report import paper_analyses as pa
from tasks.benchmarks.carryon.report import paper_compare as pc
from tasks.benchmarks.carryon.report import table2_ci as t2ci
from tasks.benchmarks.carryon.report import html as html_mod
from tasks.benchmarks.carryon.report import markdown as md_mod
from tasks.report.assemble import find_run, open_warehouse
from tasks.benchmarks.carryon.report.data import ReportData, browser_data, load
from tasks.benchmarks.carryon.report.figure_cache import draw_once
from tasks.benchmarks.carryon.report.not_drawn import NotDrawn
from tasks.benchmarks.carryon.report.stats_cache import stats_once
from tasks.report.folder import atomic_folder, checkpoint
from tasks.report.page_base import write_page
from warehouse import Warehouse


log = logging.getLogger(__name__)

# Marks of the safety nets below; the sparse-data tests assert they never appear.
ANALYSIS_FAILED = "the analysis raised"
FIGURE_FAILED = "not drawn"


@dataclass
class Report:
    data: ReportData
    stats: list[an.Stat] = field(default_factory=list)
    figures: list[tuple[str, Path]] = field(default_factory=list)
    markdown: str = ""
    folder: Path | None = None  # where it was written
    problems: list[str] = field(default_factory=list)  # figures that could not be drawn
    table2: object = None  # the report's Table 2 (model_summary + harm means); None = the view
    rule_lines: list[str] = field(default_factory=list)  # rules added to the Rules section


def _guarded(fn, *specs: tuple[str, str]) -> list[an.Stat]:
    """Run one analysis; ``specs`` = the (key, title) of each Stat it returns. An analysis
    that raises on data nobody foresaw gives a visible "Not computed" note for each of its
    Stats (and a logged traceback) instead of losing the whole report."""
    checkpoint()  # a Ctrl-C ends the report here (outside the try: it is no failed analysis)
    try:
        out = fn()
    except Exception as e:  # noqa: BLE001 - a bug in one statistic must not cost the report
        log.exception("report analysis %s failed", specs[0][0])
        why = " ".join(f"{type(e).__name__}: {e}".split())[:300]
        return [an.Stat(title, None, f"Not computed: {ANALYSIS_FAILED} {why}.", key=key)
                for key, title in specs]
    return list(out) if isinstance(out, (list, tuple)) else [out]


# The sections that count this run's own calls (its requests, its reasoning tokens and blocked
# answers): a rerun changes them, so the statistics read from them are computed on every
# report (they are cheap) and are not in the kept set (stats_cache.py), whose key leaves them
# out. Were they in it, the first rerun after a cold run would miss every time.
PER_RUN_SECTIONS = ("judging", "calibration", "cost")


def per_run_stats(data: ReportData) -> list[an.Stat]:
    """The statistics of PER_RUN_SECTIONS, computed on every report."""
    return [
        *_guarded(lambda: judging.stats(_section(data, "judging")),
                  ("target_coverage", "Coverage beside utility: scored share of item judgments per target (%)"),
                  ("evidence_check", "Ben-Util evidence check per judge"),
                  ("blocked_turns", "Target turns blocked by the provider, per target"),
                  ("reasoning_calls", "Reasoning tokens and answers lost to reasoning or blocked")),
        *_guarded(lambda: benutil_mode.mode_stat(_section(data, "calibration")),
                  ("benutil_mode", benutil_mode.TITLE)),
        *_guarded(lambda: cost.stats(_section(data, "cost")), ("cost", cost.TITLE)),
    ]


def analysis_stats(data: ReportData, rules: fm.FailureRules) -> list[an.Stat]:
    """Every statistic but those of PER_RUN_SECTIONS: the set stats_cache.py keeps."""
    mixed = _guarded(lambda: an.mixed_models(data.conv),
                     ("mixed_model_utility", "Mixed linear model: Conversation utility"),
                     ("mixed_model_harm_max", "Mixed linear model: Conversation harm (max)"))
    return [
        *paper_stats(data, mixed),
        *_guarded(lambda: an.move_effects(data.turns),
                  ("move_effects", "Move effects (deviation from each target's mean follow-up turn)")),
        *_guarded(lambda: an.turn1_bins(data.conv), ("turn1_bins", "Turn-1 bins and where they end")),
        *_guarded(lambda: an.redundancy(data.turns),
                  ("redundancy_per_turn", "Redundancy per turn (%)"),
                  ("redundancy_per_target", "Redundancy per target (%)")),
        *mixed,
        *_guarded(lambda: an.spearman(data.summary),
                  ("spearman", "Spearman correlation of utility and harm rankings of targets")),
        *_guarded(lambda: an.per_category(data.conv),
                  ("per_category", "Utility recovery and harm change per category")),
        *_guarded(lambda: fm.failure_flags(data.summary, data.conv, data.turns, rules),
                  ("failure_flags", fm.TITLE)),
        *_guarded(lambda: pa.domain_changes(data.conv, data.queries),
                  ("domain_changes", "Change from Turn 1 per domain (BC, NC; oracle line)")),
        *_guarded(lambda: pa.move_effects_per_model(data.turns),
                  ("move_effects_per_model",
                   "Move effects per target (deviation from the target's mean follow-up turn)")),
        *_guarded(lambda: pa.family_turn_trends(data.turns, data.config),
                  ("family_turn_trends", "Turn trends per model family (BC, NC)")),
        *_guarded(lambda: pa.ranking_comparison(data.summary),
                  ("ranking_comparison", "Target rankings across Turn 1, Oracle, BC and NC")),
        *_guarded(lambda: pa.oracle_vs_bc(data.summary), ("oracle_vs_bc", "Oracle vs BC utility per target")),
        *_guarded(lambda: ci_display(t2ci.table2_ci(data.conv)), ("table2_ci", t2ci.TITLE)),
        *_guarded(lambda: construction.stats(_section(data, "construction")),
                  ("checklist_sizes", "Checklist items per query"),
                  ("checklist_size_histogram", "Checklist sizes (histogram)"),
                  ("checklist_categories", "Checklist items per category"),
                  ("dropped_queries", "Queries without a checklist"),
                  ("ensemble_answers_dropped", "Ensemble answers not used")),
        *_guarded(lambda: fidelity.stats(_section(data, "fidelity")),
                  ("move_fidelity", "Move fidelity (move checker)"),
                  ("move_check_flagged", "Conversations flagged by the move checker")),
    ]


def paper_stats(data: ReportData, mixed: list[an.Stat] | None = None) -> list[an.Stat]:
    """The "Beside the paper" section's statistics (paper_compare.py), each guarded alone;
    ``mixed``: the report's own mixed-model fits, reused when every target has a paper row."""
    def t(key):
        return (key, pc.TITLES[key])

    return [
        *_guarded(lambda: pc.scale(data.conv, data.config), t("paper_scale")),
        *_guarded(lambda: pc.table2(data.conv, data.config), t("paper_table2")),
        *_guarded(lambda: pc.rankings(data.summary, data.config), t("paper_rankings")),
        *_guarded(lambda: pc.domains(data.conv, data.queries, data.config), t("paper_domains")),
        *_guarded(lambda: pc.mixed_models(data.conv, data.config, mixed), t("paper_mixed_models")),
    ]


def _section(data: ReportData, name: str) -> dict:
    """A section's data (ReportData.extra); its load error raised here becomes the section's
    "Not computed" note through _guarded."""
    extra = data.extra.get(name) or {}
    if "load_error" in extra:
        raise RuntimeError(f"reading the warehouse failed: {extra['load_error']}")
    return extra


def ci_display(stat: an.Stat) -> an.Stat:
    """The CI Stat as the report shows it: one row per target, "estimate [low, high]" per
    Table 2 column (the long form, one row per target x column, is what table2_ci stores)."""
    if stat.table is None:
        return stat
    return an.Stat(stat.title, stat.extra["wide"], stat.note, extra={"long": stat.table, **stat.extra},
                   key=stat.key)


def _store_ci(wh: Warehouse, stats: list[an.Stat], run_id: str, problems: list[str]) -> None:
    """Table 2's intervals into the warehouse table table2_ci, so SQL sees what the report
    shows (a seeded bootstrap cannot be a view; the table is refreshed with every report)."""
    try:
        stat = stat_by_key(stats, "table2_ci")
        long = stat.extra.get("long")
        if long is not None:
            t2ci.store(wh, an.Stat(stat.title, long, stat.note, extra=stat.extra, key=stat.key), run_id)
    except Exception as e:  # noqa: BLE001 - the report stands without the stored copy
        log.exception("storing table2_ci failed")
        problems.append(f"Table 2's intervals were not stored in table2_ci: {type(e).__name__}: {e}.")


def stat_by_key(stats: list[an.Stat], key: str) -> an.Stat:
    """The Stat with this stable key (never looked up by its display title, which may
    differ between a computed and a "not computed" Stat)."""
    for s in stats:
        if s.key == key:
            return s
    raise KeyError(f"no analysis with key {key!r} (keys: {[s.key for s in stats]})")


FIGURES = [  # (file name, caption)
    ("utility_vs_harm.png", "Utility vs harm per target, Turn 1 and BC"),
    ("turn_trends.png", "Turn-level utility, harm and cumulative utility, BC vs NC"),
    ("redundancy_per_target.png", "Redundancy per target"),
    ("move_effects.png", "Move effects"),
    ("turn1_bins.png", "Turn-1 bins: utility and harm per bin"),
    ("redundancy_per_turn.png", "Redundancy across turns, BC vs NC"),
    ("domain_changes.png", "Change from Turn 1 per SORRY-Bench domain, BC and NC, oracle line"),
    ("move_effects_per_model.png", "Move effects per target"),
    ("family_turn_trends.png", "Turn trends per model family"),
    ("ranking_comparison.png", "Target rankings across the four conditions"),
    ("oracle_vs_bc.png", "Oracle vs BC utility per target"),
    ("checklist_sizes.png", "Checklist sizes and item categories"),
]


def _figure_modules():
    # Imported when a figure is drawn, not with this module: matplotlib costs a second, and a
    # rerun whose figures are all kept (figure_cache.py) draws none.
    from tasks.benchmarks.carryon.report import figures, figures_paper

    return figures, figures_paper


def _figures(data: ReportData, stats: list[an.Stat], folder: Path,
             problems: list[str] | None = None, harmful_score: int = fm.FailureRules.harmful_score,
             cache_dir: Path | None = None) -> list[tuple[str, Path]]:
    """Draw every figure (or copy it from ``cache_dir``, drawn before from the same inputs:
    figure_cache.py). A figure with nothing to show is ``(caption, NotDrawn(why))``, a sentence
    in the report instead of empty axes (not_drawn.py); one that fails on unforeseen data is
    the same, saying so (and a line in ``problems``), never a lost report."""
    cache_dir = cache_dir or folder.parent / ".figures"
    # name -> (the inputs it is drawn from, the drawing): the inputs key the figure cache
    paper = ("redundancy_per_turn", "domain_changes", "move_effects_per_model",
             "family_turn_trends", "ranking_comparison", "oracle_vs_bc")

    def fg():
        return _figure_modules()[0]

    draw = {
        "utility_vs_harm.png": ((data.summary, harmful_score),
                                lambda p: fg().utility_vs_harm(data.summary, p, harmful_score)),
        "turn_trends.png": ((data.turns, data.cumulative),
                            lambda p: fg().turn_trends(data.turns, data.cumulative, p)),
        **{f"{k}.png": (stat_by_key(stats, k), lambda p, k=k: getattr(fg(), k)(stat_by_key(stats, k), p))
           for k in ("redundancy_per_target", "move_effects", "turn1_bins")},
        **{f"{k}.png": (stat_by_key(stats, k),
                        lambda p, k=k: getattr(_figure_modules()[1], k)(stat_by_key(stats, k), p))
           for k in paper},
        "checklist_sizes.png": (_section(data, "construction"),
                                lambda p: construction.figure(_section(data, "construction"), p)),
    }
    out = []
    for name, caption in FIGURES:
        checkpoint()
        path = folder / name
        inputs, drawing = draw[name]
        try:
            out.append((caption, draw_once(cache_dir, name, inputs, drawing, path)))
        except NotDrawn as e:
            out.append((caption, e))
        except Exception as e:  # noqa: BLE001
            log.exception("report figure %s failed", name)
            why = " ".join(f"{type(e).__name__}: {e}".split())[:300]
            if problems is not None:
                problems.append(f"Figure '{caption}' {FIGURE_FAILED}: {why}.")
            import matplotlib.pyplot as plt

            plt.close("all")
            out.append((caption, NotDrawn(f"{FIGURE_FAILED}: {why}")))
    return out


def write_report(cfg: Config, run_id: str | None = None, *, warehouse: Warehouse | None = None,
                 rules: fm.FailureRules | None = None, max_conversations: int = 3000) -> Path:
    """Write ``<home>/reports/<run id>/`` (report.md, report.html, PNGs); return the folder.

    ``run_id`` None = the latest run in the warehouse. Raises ReportError for a missing
    warehouse or run, or an invalid judgment-set choice."""
    rep, _ = build(cfg, run_id, warehouse=warehouse, rules=rules, max_conversations=max_conversations)
    return rep.folder


def build(cfg: Config, run_id: str | None = None, *, warehouse: Warehouse | None = None,
          rules: fm.FailureRules | None = None, max_conversations: int = 3000) -> tuple[Report, dict]:
    """write_report's work; also returns the Report (stats, markdown) and the browser data."""
    wh = warehouse or open_warehouse(cfg)
    data = load(wh, run_id or find_run(wh, cfg))  # its reads grouped on attachments (data.py)
    rules = rules or fm.FailureRules()
    final = cfg.home_path / "reports" / str(data.run["run_id"])
    stats = stats_once(final.parent / ".stats", data, rules, lambda: analysis_stats(data, rules),
                       lambda out: any(ANALYSIS_FAILED in (s.note or "") for s in out),
                       leave_out=PER_RUN_SECTIONS)
    rep = Report(data=data, stats=[*stats, *per_run_stats(data)],
                 rule_lines=rules.describe() + _condition_rule(data.names))
    try:
        rep.table2 = pa.table2(data.summary, data.conv)
    except Exception:  # noqa: BLE001 - the view's Table 2 without harm means, never no report
        log.exception("report Table 2 harm means failed")
        rep.problems.append("Table 2's harm means could not be computed; the view's columns are shown.")
    _store_ci(wh, rep.stats, data.run["run_id"], rep.problems)
    with atomic_folder(final) as tmp:
        rep.figures = _figures(data, rep.stats, tmp, rep.problems, rules.harmful_score,
                               cache_dir=final.parent / ".figures")
        rep.markdown = md_mod.render(rep)
        (tmp / "report.md").write_text(rep.markdown, encoding="utf-8")
        with wh.connect(read_only=True):
            browser = browser_data(wh, data.turns, max_conversations)
        # The conversations are read a chunk at a time while the page is written (data.py).
        write_page(tmp / "report.html", html_mod.render(rep, browser))
    rep.figures = [(t, p if isinstance(p, NotDrawn) else final / p.name) for t, p in rep.figures]
    rep.folder = final
    return rep, browser


def _condition_rule(names) -> list[str]:
    """A rule line when the spec names the conditions otherwise than the paper (the tables
    and analyses say BC, NC and Oracle)."""
    if (names.bc, names.nc, names.oracle) == ("BC", "NC", "oracle"):
        return []
    return [f"Conditions: the spec's `{names.bc}` is BC, `{names.nc}` is NC and `{names.oracle}` "
            "is the Oracle in the tables and analyses."]
