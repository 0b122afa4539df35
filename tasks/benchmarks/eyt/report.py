"""The EYT report section: FICR per target and persona source, the warm-up curve (latent-intent
accuracy by turn, with the alpha band) and the drift curve per target, drawn as inline SVG
figures (none on empty data: a sentence instead), subjective means, and ranking stability
across judges (Kendall's tau-b between two judges' rankings of the targets).

The rules are in views.sql beside the spec (Y1-Y7). Two are computed here, on the views' rows:

- ``warmup(curve, alpha)``: the plateau P is the mean accuracy over the later half of the
  turns with data (the last ceil(T/2) of T turns); the warm-up turn is the first turn from
  which every later accuracy stays at or above P - alpha; a warm-up effect is an accuracy on
  the first turn below P - alpha (tracking starts below the band and enters it). Our reading
  of the paper's alpha band, stated so it can be checked.
- ``kendall_tau_b(x, y)``: tau-b (ties in either ranking corrected), None when undefined.
"""

from __future__ import annotations

import base64
import math
from html import escape

from pydantic import BaseModel, ConfigDict, Field

from tasks.core.registry import section
from tasks.report.sections import md_table, number, section_views

TITLE = "Personas and intent drift: tracking the latent intent"
COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2")


class EytArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    alpha: float = Field(0.1, gt=0, lt=1)  # the warm-up band's half-width (accuracy points)


def warmup(curve: list[tuple[int, float]], alpha: float) -> dict | None:
    """The alpha band of a warm-up curve [(turn, accuracy)], or None with fewer than 2 turns."""
    pts = sorted((t, a) for t, a in curve if a is not None)
    if len(pts) < 2:
        return None
    late = pts[len(pts) // 2:]  # the last ceil(T/2) turns
    plateau = sum(a for _, a in late) / len(late)
    floor = plateau - alpha
    turn = None  # None: the last turn is below the band (the curve never settles in it)
    for t, a in reversed(pts):
        if a < floor - 1e-12:
            break
        turn = t
    return {"plateau": plateau, "floor": floor, "first": pts[0][1], "warmup_turn": turn,
            "warm_up": pts[0][1] < floor - 1e-12}


def kendall_tau_b(x: list[float], y: list[float]) -> float | None:
    """Kendall's tau-b of paired scores; None for fewer than 2 pairs or a constant ranking."""
    if len(x) != len(y):
        raise ValueError("kendall_tau_b: x and y differ in length")
    n = len(x)
    conc = disc = tie_x = tie_y = 0
    for i in range(n):
        for j in range(i + 1, n):
            dx, dy = x[i] - x[j], y[i] - y[j]
            if dx == 0 and dy == 0:
                tie_x += 1
                tie_y += 1
            elif dx == 0:
                tie_x += 1
            elif dy == 0:
                tie_y += 1
            elif (dx > 0) == (dy > 0):
                conc += 1
            else:
                disc += 1
    n0 = n * (n - 1) // 2
    denom = math.sqrt((n0 - tie_x) * (n0 - tie_y))
    return None if not denom else (conc - disc) / denom


def ranking_stability(rows: list[dict]) -> list[dict]:
    """Per kind and measure, Kendall's tau-b between each pair of judges' target means
    (rows of the judge_scores view), over the targets both scored."""
    groups: dict[tuple, dict[int, dict]] = {}
    names: dict[tuple, str] = {}
    for r in rows:
        if r["mean"] is None:
            continue
        key = (r["kind"], r["measure"])
        groups.setdefault(key, {}).setdefault(r["judge_index"], {})[r["target"]] = r["mean"]
        names[(r["kind"], r["judge_index"])] = r.get("judge") or f"judge {r['judge_index']}"
    out = []
    for (kind, measure), by_judge in sorted(groups.items()):
        judges = sorted(by_judge)
        for a_i, a in enumerate(judges):
            for b in judges[a_i + 1:]:
                shared = sorted(set(by_judge[a]) & set(by_judge[b]))
                tau = kendall_tau_b([by_judge[a][t] for t in shared],
                                    [by_judge[b][t] for t in shared])
                out.append({"kind": kind, "measure": measure, "judge_a": names[(kind, a)],
                            "judge_b": names[(kind, b)], "n_targets": len(shared), "tau": tau})
    return out


def svg_curves(series: dict[str, list[tuple[int, float]]], title: str, y_label: str,
               y_max: float) -> str | None:
    """A line chart (one line per target) as a Markdown image with an SVG data URI; None
    when no series has a point."""
    series = {k: sorted(p for p in v if p[1] is not None) for k, v in series.items()}
    series = {k: v for k, v in series.items() if v}
    if not series:
        return None
    w, h, left, top, bottom = 520, 260, 50, 30, 40
    turns = sorted({t for v in series.values() for t, _ in v})
    lo, hi = turns[0], max(turns[-1], turns[0] + 1)
    x = lambda t: left + (t - lo) / (hi - lo) * (w - left - 130)  # noqa: E731
    y = lambda v: top + (1 - min(v, y_max) / y_max) * (h - top - bottom)  # noqa: E731
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
             'font-family="sans-serif" font-size="11">',
             f'<text x="{left}" y="16" font-size="13">{escape(title)}</text>',
             f'<line x1="{left}" y1="{y(0)}" x2="{x(hi)}" y2="{y(0)}" stroke="#444"/>',
             f'<line x1="{left}" y1="{y(0)}" x2="{left}" y2="{y(y_max)}" stroke="#444"/>',
             f'<text x="4" y="{y(y_max) + 4}">{y_max:g}</text><text x="4" y="{y(0)}">0</text>',
             f'<text x="{left}" y="{h - 8}">model turn ({lo}-{hi}); y: {escape(y_label)}</text>']
    parts += [f'<text x="{x(t) - 3}" y="{y(0) + 14}">{t}</text>' for t in turns]
    for i, (name, pts) in enumerate(sorted(series.items())):
        colour = COLOURS[i % len(COLOURS)]
        coords = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in pts)
        parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{coords}"/>')
        parts += [f'<circle cx="{x(t):.1f}" cy="{y(v):.1f}" r="3" fill="{colour}"/>' for t, v in pts]
        parts.append(f'<text x="{w - 120}" y="{top + 14 * i}" fill="{colour}">'
                     f'{escape(name[:24])}</text>')
    parts.append("</svg>")
    data = base64.b64encode("".join(parts).encode()).decode()
    return f"![{title}](data:image/svg+xml;base64,{data})"


def _curve_table(rows: list[dict], col: str, n_col: str) -> list[str]:
    targets = sorted({r["target"] for r in rows})
    turns = sorted({r["model_turn"] for r in rows})
    by = {(r["target"], r["model_turn"]): r for r in rows}
    body = [[str(t)] + [f"{number(by[(g, t)][col])} (n={by[(g, t)][n_col]})" if (g, t) in by
                        else "n/a" for g in targets] for t in turns]
    return md_table(["model turn"] + targets, body)


def _series(rows: list[dict], col: str) -> dict[str, list[tuple[int, float]]]:
    out: dict[str, list] = {}
    for r in rows:
        out.setdefault(r["target"], []).append((r["model_turn"], r[col]))
    return out


def _warmup_lines(warm: list[dict], alpha: float) -> list[str]:
    out = ["", f"Latent-intent accuracy by turn (the warm-up curve; alpha band = {alpha:g}):", ""]
    out += _curve_table(warm, "accuracy", "n_scored")
    fig = svg_curves(_series(warm, "accuracy"), "Warm-up: latent-intent accuracy", "accuracy", 1.0)
    out += ["", fig or "No warm-up figure: no turn has a scored latent-intent verdict."]
    rows = []
    for t in sorted({r["target"] for r in warm}):
        band = warmup([(r["model_turn"], r["accuracy"]) for r in warm if r["target"] == t], alpha)
        rows.append([t] + (["fewer than 2 scored turns"] + [""] * 3 if band is None else
                           [number(band["plateau"]), number(band["first"]),
                            str(band["warmup_turn"] or "never"),
                            "yes" if band["warm_up"] else "no"]))
    return out + [""] + md_table(["target", "plateau", "turn 1", "in band from turn",
                                  "warm-up effect"], rows)


def _budget_lines(rows: list[dict]) -> list[str]:
    """What the loader's persona budget dropped (nothing for the team's sample, which has
    no budget to meet)."""
    if not rows:
        return []
    return ["", "Persona budget (whole persona fields left out to fit the loader's "
            "persona_budget; each item's hidden.persona_dropped names them):", ""] + md_table(
        ["persona source", "personas", "personas trimmed", "fields dropped"],
        [[r["persona_source"], str(r["n_personas"]), str(r["n_trimmed"]),
          str(r["n_fields_dropped"])] for r in rows])


@section("eyt", title=TITLE, args=EytArgs)
class EytSection:
    def __init__(self, args: EytArgs):
        self.alpha = args.alpha

    def __call__(self, wh, spec) -> str:
        views = section_views(wh, spec, "eyt", {
            "ficr": "ficr ORDER BY target, persona_source",
            "warm": "warmup ORDER BY target, model_turn",
            "drift": "drift ORDER BY target, model_turn",
            "subj": "subjective ORDER BY target",
            "judges": "judge_scores ORDER BY kind, measure, judge_index",
            "budget": "persona_budget ORDER BY persona_source"},
            needs=("ficr", "warm", "drift", "subj"),
            nothing="no completed EYT episode has verdicts yet")
        if isinstance(views, str):
            return views
        lines = ["Each target states its perceived intent beside every reply (never shown to "
                 "the simulated user). Unscored verdicts are left out and counted (rules Y1-Y7 "
                 "in the views.sql beside the spec).", "",
                 "Final-intent completion rate (FICR) by persona source:", ""]
        lines += md_table(["target", "persona source", "scored / completed episodes", "FICR"],
                          [[r["target"], r["persona_source"], f"{r['n_scored']} / {r['n_episodes']}",
                            number(r["ficr"])] for r in views["ficr"]]) if views["ficr"] else [
            "Not computed: no final-intent verdict."]
        lines += _budget_lines(views["budget"])
        lines += _warmup_lines(views["warm"], self.alpha)
        lines += ["", "Intent drift by turn (cosine distance, perceived vs latent intent):", ""]
        lines += _curve_table(views["drift"], "drift_latent", "n_latent")
        fig = svg_curves(_series(views["drift"], "drift_latent"),
                         "Intent drift: perceived vs latent", "cosine distance", 1.0)
        lines += ["", fig or "No drift figure: no turn has an embedding distance."]
        lines += ["", "Drift between consecutive perceived intents:", ""]
        lines += _curve_table(views["drift"], "drift_step", "n_step")
        lines += ["", "Subjective dimensions (1-5, mean over episodes):", ""]
        lines += md_table(["target", "scored / completed episodes", "empathy", "persona consistency",
                           "anthropomorphism"],
                          [[r["target"], f"{r['n_scored']} / {r['n_episodes']}"]
                           + [number(r[c], digits=2) for c in
                              ("empathy", "persona_consistency", "anthropomorphism")]
                           for r in views["subj"]]) if views["subj"] else [
            "Not computed: no subjective verdict."]
        stab = ranking_stability(views["judges"])
        lines += ["", "Ranking stability across judges (Kendall's tau-b of the targets' means):", ""]
        lines += md_table(["judge kind", "measure", "judge A", "judge B", "targets", "tau-b"],
                          [[s["kind"], s["measure"], s["judge_a"], s["judge_b"],
                            str(s["n_targets"]), number(s["tau"])] for s in stab]) if stab else [
            "Not computed: one judge model per judge (give eyt_judge a list of models to compare "
            "their rankings)."]
        return "\n".join(lines)
