"""The regret report section: per target, user behaviour and domain, success, cost (turns,
tokens, ineffective questions), reward R, the reference planner's R_ref and regret = R_ref - R,
and the shares of answers that came too early or questions that came too late
(``regret_summary``); then success against turns per target (``regret_targets``), drawn as a
text scatter so it shows in any Markdown viewer. The rules (G1-G8) are in
tasks/benchmarks/regret/views.sql. "Not computed: ..." when nothing is scored; no figure is
drawn on empty data, a sentence says why instead."""

from __future__ import annotations

from tasks.core.registry import section as register_section
from tasks.report.sections import failed_targets, md_table, read_views, view_prefix

TITLE = "Clarification as a policy: regret against the reference planner"
WIDTH, HEIGHT = 41, 11  # the scatter's grid: turns across, success up
MARKS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


def _pct(v) -> str:
    return "n/a" if v is None else f"{100 * v:.1f}%"


def _num(v, signed=False) -> str:
    return "n/a" if v is None else (f"{v:+.3f}" if signed else f"{v:.2f}")


def scatter(points: list[tuple[str, float, float]], max_turns: float) -> list[str]:
    """Lines of a text scatter: one mark per (label, turns, success); '*' where marks meet."""
    grid = [[" "] * WIDTH for _ in range(HEIGHT)]
    lo, hi = 1.0, max(max_turns, 2.0)
    legend = []
    for k, (label, turns, success) in enumerate(points):
        mark = MARKS[k % len(MARKS)]
        x = round((min(max(turns, lo), hi) - lo) / (hi - lo) * (WIDTH - 1))
        y = HEIGHT - 1 - round(min(max(success, 0.0), 1.0) * (HEIGHT - 1))
        grid[y][x] = mark if grid[y][x] == " " else "*"
        legend.append(f"{mark} = {label} ({turns:.2f} turns, {100 * success:.1f}% success)")
    rows = []
    for i, line in enumerate(grid):
        axis = f"{100 * (HEIGHT - 1 - i) / (HEIGHT - 1):5.0f}% |" if i % 5 == 0 else "       |"
        rows.append(axis + "".join(line).rstrip())
    rows.append("       +" + "-" * WIDTH)
    rows.append(f"        {lo:<.0f} turn" + " " * (WIDTH - 16) + f"{hi:>.0f} turns")
    return ["```", *rows, "```", "", *[f"- {x}" for x in legend],
            "- `*`: two or more targets at the same place."]


# The reference planner's seat (a policy without a model, so the seat takes the policy's
# name) and the shape of its questions (cig.question_text); every other turn of it is an
# answer (cig.answer_text). Its acts are therefore known without a judge.
PLANNER = "planner"
PLANNER_QUESTION = r"^Which .+ do you mean: .+\?$"


def planner_agreement(wh, prefix: str) -> list[dict]:
    """Per planner turn the act judge labelled: the known act and the judge's label, with
    its episode, behaviour and domain (the regret row it feeds)."""
    return wh.query(
        f"SELECT t.episode_id, t.behaviour, t.domain, t.act, "
        f"  CASE WHEN regexp_matches(et.content, ?) THEN 'clarifying_question' "
        f"       ELSE 'direct_answer' END AS known "
        f"FROM {prefix}_turns t JOIN episode_turns et USING (episode_id, position) "
        f"WHERE t.target = ? AND t.act IS NOT NULL", [PLANNER_QUESTION, PLANNER])


def agreement_lines(rows: list[dict]) -> tuple[list[str], dict]:
    """The judge-agreement paragraph and {(behaviour, domain): episodes with a disagreement}."""
    if not rows:
        return [], {}
    wrong = [r for r in rows if r["act"] != r["known"]]
    kinds: dict[str, int] = {}
    for r in wrong:
        key = f"{'questions' if r['known'] == 'clarifying_question' else 'answers'} read as {r['act']}"
        kinds[key] = kinds.get(key, 0) + 1
    flagged: dict[tuple, set] = {}
    for r in wrong:
        flagged.setdefault((r["behaviour"], r["domain"]), set()).add(r["episode_id"])
    line = (f"**Act judge against the reference planner's known acts:** it agrees on "
            f"{len(rows) - len(wrong)} of {len(rows)} planner turns "
            f"({100 * (len(rows) - len(wrong)) / len(rows):.1f}%). The planner's acts are known "
            "(its questions are its own template, every other turn an answer), so each "
            "disagreement is the judge's error, and the regret of every target rests on the "
            "same judge.")
    if wrong:
        line += " Disagreements: " + "; ".join(f"{k} {n}" for k, n in sorted(kinds.items())) + \
            ". Planner rows marked **judge disagreed** rest on those episodes."
    return ["", line], {k: len(v) for k, v in flagged.items()}


@register_section("regret", title=TITLE)
def section(wh, spec) -> str:
    p = view_prefix(spec, "regret")
    views = read_views(wh, {
        "summary": f"SELECT * FROM {p}_summary ORDER BY target, behaviour, domain",
        "targets": f"SELECT * FROM {p}_targets ORDER BY target"}, "regret")
    if isinstance(views, str):
        return views
    summary, targets = views["summary"], views["targets"]
    failed = failed_targets(wh, spec.name)
    if not summary and not failed:
        return ("Not computed: no completed episode of this benchmark yet (run the episodes "
                "and verdicts stages).")
    lines = ["R = U*correct - c*turns - lambda*ineffective questions; R_ref is the reference "
             "planner's reward on the same items (tasks/benchmarks/regret/cig.py), regret = R_ref - R (negative: "
             "the target did better than the planner). Too early: answered while several "
             "intents were consistent; too late: asked after at most one was. Episodes with an "
             "unscored verdict are left out and counted (rules G1-G8 in the views.sql beside "
             "the spec).", ""]
    agreement, flagged = agreement_lines(planner_agreement(wh, p))

    # Bold, not italics: report.html's Markdown subset (episode_page.md_html) sets `code` and
    # **bold** only, so *italics* showed there as literal asterisks.
    def who(r) -> str:
        n = flagged.get((r["behaviour"], r["domain"])) if r["target"] == PLANNER else None
        return f"{r['target']} (**judge disagreed** in {n} episode{'s' if n != 1 else ''})" if n \
            else r["target"]

    lines += md_table(
        ["target", "behaviour", "domain", "scored / completed episodes", "success", "turns", "tokens",
         "ineffective", "R", "R_ref", "regret", "too early", "too late"],
        [[who(r), r["behaviour"], r["domain"], f"{r['n_scored']} / {r['n_episodes']}",
          _pct(r["success"]), _num(r["turns"]), _num(r["tokens"], False),
          _pct(r["ineffective_rate"]), _num(r["reward"], True), _num(r["r_ref"], True),
          _num(r["regret"], True), _pct(r["too_early_rate"]), _pct(r["too_late_rate"])]
         for r in summary] +
        # A target none of whose episodes completed keeps its row: its count and why. The
        # column counts completed episodes in every row (the views read only those), so its
        # failed episodes are named beside "0 / 0", never as the column's denominator.
        [[r["target"], "all", "all", f"0 / 0 ({r['n_episodes']} failed: {r['reasons']})"]
         + ["n/a"] * 9 for r in failed])
    lines += agreement
    fallback = sum(r["n_correct_by_equivalence"] for r in summary)
    if fallback:
        lines += ["", f"{fallback} answer(s) counted correct by the equivalence judge's "
                      "fallback (no alias matched)."]
    lines += ["", "### Success against turns, per target", ""]
    points = [(r["target"], r["turns"], r["success"]) for r in targets
              if r["turns"] is not None and r["success"] is not None]
    # A target the figure cannot place is named under it with its counts, never just absent.
    placed = {p[0] for p in points}
    unplaced = [f"- not placed: {r['target']} (0 of {r['n_episodes']} completed episodes "
                "scored)" for r in targets if r["target"] not in placed] + \
        [f"- not placed: {r['target']} (0 of {r['n_episodes']} episodes completed: "
         f"{r['reasons']})" for r in failed]
    if not points:
        lines.append("No figure: no target has a scored episode yet, so there is no success "
                     "or turn count to place.")
        return "\n".join(lines + ([""] + unplaced if unplaced else []))
    max_turns = max(c.max_turns for c in spec.conditions)
    return "\n".join(lines + scatter(points, max_turns) + unplaced)
