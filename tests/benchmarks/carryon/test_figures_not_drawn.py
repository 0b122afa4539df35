"""No figure is drawn on empty data (tasks/benchmarks/carryon/report/not_drawn.py): a figure whose table is empty
or every plotted value NULL says why in a sentence; a drawn figure shows a missing value as no
bar and a gap in a line, never as 0; the report renders the sentence where the image would be
and a rerun says it again from the figure cache."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from tasks.benchmarks.carryon.report import figures as fg
from tasks.benchmarks.carryon.report.analyses import Stat
from tasks.benchmarks.carryon.report.figure_cache import draw_once
from tasks.benchmarks.carryon.report.not_drawn import NotDrawn, figure_html, figure_md, nothing_in

NAN = math.nan


@pytest.fixture
def captured(monkeypatch):
    figs = []

    def save(fig, path):
        figs.append(fig)
        fg.plt.close(fig)
        path.write_bytes(b"\x89PNG\r\n\x1a\n")
        return path

    monkeypatch.setattr(fg, "_save", save)
    return figs


def test_nothing_in():
    assert nothing_in(None, ["a"]) and nothing_in(pd.DataFrame(), ["a"])
    assert nothing_in(pd.DataFrame({"a": [NAN, None]}), ["a", "missing"])
    assert nothing_in(pd.DataFrame({"b": [1.0]}), ["a"])
    assert not nothing_in(pd.DataFrame({"a": [NAN, 0.0]}), ["a"])  # a 0 is a value


SUMMARY_NO_HARM = pd.DataFrame({"target": ["a"], "turn1_utility": [NAN], "turn1_harm": [NAN],
                                "bc_utility": [100.0], "bc_harm": [NAN]})


@pytest.mark.parametrize("draw", [
    # the demo's Table 2 row: a BC utility, no harm anywhere: no point has both coordinates
    lambda p: fg.utility_vs_harm(SUMMARY_NO_HARM, p),
    lambda p: fg.redundancy_per_target(Stat("R", pd.DataFrame(
        {"target": ["a", "b"], "BC": [NAN, NAN], "NC": [NAN, NAN]})), p),
    lambda p: fg.move_effects(Stat("M", pd.DataFrame(
        {"move": ["pushback"], "utility_dev": [NAN], "utility_lo": [NAN], "utility_hi": [NAN],
         "harm_dev": [NAN], "harm_lo": [NAN], "harm_hi": [NAN]})), p),
    lambda p: fg.turn1_bins(Stat("B", pd.DataFrame(
        {"bin": ["hard refusal"], "n": [2], "turn1_utility": [NAN], "bc_utility": [NAN],
         "nc_utility": [NAN], "turn1_harm": [NAN], "bc_harm": [NAN], "nc_harm": [NAN]})), p),
    lambda p: fg.turn_trends(
        pd.DataFrame({"conversation_id": ["c"] * 2, "condition": ["BC"] * 2, "turn_index": [1, 2],
                      "utility": [NAN, NAN], "harm": [NAN, NAN]}),
        pd.DataFrame({"conversation_id": ["c"] * 2, "condition": ["BC"] * 2, "turn_index": [1, 2],
                      "cum_utility": [0.0, 0.0]}), p),  # the view's 0s on unscored turns
    lambda p: fg.redundancy_per_target(Stat("R", None, "Not computed: no follow-up turns."), p),
])
def test_all_null_data_is_not_drawn(tmp_path, captured, draw):
    with pytest.raises(NotDrawn) as e:
        draw(tmp_path / "f.png")
    assert e.value.why and not captured and not (tmp_path / "f.png").exists()


def test_missing_values_are_no_bars_not_zeros(tmp_path, captured):
    fg.redundancy_per_target(Stat("R", pd.DataFrame(
        {"target": ["a", "b", "c"], "BC": [20.0, NAN, 0.0], "NC": [NAN, NAN, 10.0]})), tmp_path / "r.png")
    ax = captured[-1].axes[0]
    bars = sorted((round(b.get_x() + b.get_width() / 2, 2), b.get_height()) for b in ax.patches)
    # a's BC 20, c's BC 0 (a measured 0 stays a bar), c's NC 10; b has no bar at all
    assert bars == [(-0.2, 20.0), (1.8, 0.0), (2.2, 10.0)]


def test_unscored_turns_are_gaps_in_every_line(tmp_path, captured):
    turns = pd.DataFrame({
        "conversation_id": ["c1"] * 3 + ["c2"] * 3, "condition": ["BC"] * 6,
        "turn_index": [1, 2, 3] * 2,
        "utility": [50.0, NAN, 100.0, 30.0, NAN, NAN],  # turn 2 unscored in both conversations
        "harm": [1.0, NAN, 2.0, 1.0, NAN, 3.0]})
    cumulative = pd.DataFrame({
        "conversation_id": ["c1"] * 3 + ["c2"] * 3, "condition": ["BC"] * 6,
        "turn_index": [1, 2, 3] * 2,
        # as the view gives it: the running sum carried over the unscored turn
        "cum_utility": [50.0, 50.0, 100.0, 30.0, 30.0, 30.0]})
    fg.turn_trends(turns, cumulative, tmp_path / "t.png")
    util, harm, cum = captured[-1].axes[:3]
    y = {ax: list(ax.lines[0].get_ydata()) for ax in (util, harm, cum)}
    assert list(util.lines[0].get_xdata()) == [1, 2, 3]
    assert y[util][0] == 40.0 and math.isnan(y[util][1]) and y[util][2] == 100.0
    assert y[harm][0] == 1.0 and math.isnan(y[harm][1]) and y[harm][2] == 2.5
    # cumulative: turn 2 is a gap (not 50 carried, not 0); turn 3 only c1 was scored
    assert y[cum][0] == 40.0 and math.isnan(y[cum][1]) and y[cum][2] == 100.0


def test_a_turn_nobody_reached_is_a_gap_not_a_joined_line(tmp_path, captured):
    from tasks.benchmarks.carryon.report import figures_paper as fp

    stat = Stat("Redundancy per turn (%)", pd.DataFrame(
        {"turn_index": [2, 4], "BC": [20.0, 40.0], "NC": [NAN, 10.0]}), key="redundancy_per_turn")
    fp.redundancy_per_turn(stat, tmp_path / "r.png")
    line = captured[-1].axes[0].lines[0]
    assert list(line.get_xdata()) == [2, 3, 4] and math.isnan(line.get_ydata()[1])


def test_rendering(tmp_path):
    png = tmp_path / "a.png"
    png.write_bytes(b"\x89PNG")
    assert figure_md("Fig A", png) == "![Fig A](a.png)"
    why = NotDrawn("Not computed: no <target> has scores.")
    md = figure_md("Fig B", why)
    assert md == "_Fig B — no figure: no <target> has scores._" and "not drawn" not in md
    page = figure_html("Fig B", why)
    assert "&lt;target&gt;" in page and "<img" not in page
    assert "<img" in figure_html("Fig A", png)


def test_figure_cache_keeps_the_sentence(tmp_path):
    calls = []

    def draw(path):
        calls.append(path)
        raise NotDrawn("no scored turns")

    for name in ("a.png", "b.png"):
        with pytest.raises(NotDrawn, match="no scored turns"):
            draw_once(tmp_path / ".figures", "t.png", (pd.DataFrame({"x": [np.nan]}),), draw,
                      tmp_path / name)
    assert len(calls) == 1 and not list(tmp_path.glob("*.png"))


# ----- the report on a nearly empty warehouse (the demo's shape: little or nothing scored) ----------
def _report(write_config, monkeypatch=None, **sparse):
    from tasks.config import load_config
    from tasks.benchmarks.carryon.report.writer import write_report
    from tests.support.sparse import RUN_ID, Sparse, build

    cfg = load_config(write_config())
    build(cfg.home_path, Sparse(**sparse))
    out = write_report(cfg, RUN_ID)
    return out, (out / "report.md").read_text(), (out / "report.html").read_text()


@pytest.mark.slow  # two whole reports: ~25 s on 2 loaded cores
def test_report_with_nothing_scored_says_why_instead_of_drawing(write_config, monkeypatch):
    from tasks.benchmarks.carryon.report import writer

    out, md, page = _report(write_config, targets=["target-a"], n_queries=1,
                            benutil="unscored", safety="unscored")
    figures = md.split("## Figures")[1].split("## Analyses")[0]
    said = [ln for ln in figures.splitlines() if "— no figure:" in ln]
    drawn = [ln for ln in figures.splitlines() if ln.startswith("![")]
    assert len(said) + len(drawn) == len(writer.FIGURES)
    # every judgment unscored: nothing that plots a utility or a harm is drawn
    for caption in ("Utility vs harm", "Turn-level utility", "Redundancy per target",
                    "Move effects", "Turn-1 bins", "Oracle vs BC"):
        assert any(ln.startswith(f"_{caption}") for ln in said), (caption, figures)
    assert {p.name for p in out.glob("*.png")} == {ln.split("(")[-1].rstrip(")") for ln in drawn}
    assert page.count('class="note figure-not-drawn"') == len(said)
    assert page.count("<img") == len(drawn)
    assert writer.FIGURE_FAILED not in md
    # a rerun says the same from the figure cache, without drawing anything
    monkeypatch.setattr(writer, "_figure_modules", lambda: (_ for _ in ()).throw(
        AssertionError("a kept figure was drawn again")))
    from tasks.config import load_config
    from tasks.benchmarks.carryon.report.writer import write_report
    from tests.support.sparse import RUN_ID

    again = write_report(load_config(write_config()), RUN_ID)
    assert (again / "report.md").read_text() == md


@pytest.mark.slow  # one of the fast suite's slowest (kept under 5 min on 2 cores)
def test_a_crashing_figure_is_a_sentence_and_a_problem(write_config, monkeypatch):
    from tasks.benchmarks.carryon.report import figures, writer

    def boom(*a, **k):
        raise ValueError("unforeseen")

    monkeypatch.setattr(figures, "move_effects", boom)
    out, md, _ = _report(write_config, targets=["target-a"], n_queries=1)
    assert f"_Move effects — no figure: {writer.FIGURE_FAILED}: ValueError: unforeseen._" in md
    assert not (out / "move_effects.png").exists()
