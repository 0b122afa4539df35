"""The report of an episode benchmark (a sister benchmark): report.md with the run, the
models per role, episode coverage (status and termination reasons) and the spec's sections
(registered with ``@section(name, title=...)``: ``fn(wh, spec) -> Markdown``, reading the
spec's own views; each beside its benchmark's spec, helpers in ``tasks/report/sections/``),
and report.html: the same, then a browser of the episodes with their verdicts
(tasks/report/episode_page.py).

A section that fails is reported as such in its place (the traceback goes to the log): the
others still appear. The report calls no model.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from tasks.core import registry
from tasks.report.folder import atomic_folder, checkpoint
from tasks.report.md_common import md_table, run_line
from tasks.report.sections import failed_target_lines, failure_reasons
from tasks.roles import report_roles

log = logging.getLogger(__name__)


def _models(cfg) -> list[str]:
    lines = []
    for role in report_roles(cfg.spec.config_roles(), registry.declared_roles()):
        specs = cfg.role_specs(role)
        if specs:
            lines.append(f"- {role}: " + ", ".join(f"{s.name} ({s.model})" if s.name != s.model
                                                  else s.model for s in specs))
    return lines


COVERAGE_NOTE = (
    "How episodes ended: `turn_cap` (the target's turn limit), `ended_not_asking` (the user "
    "policy stopped because the target's turn was not a clarifying question: a direct answer, "
    "a hedge or a refusal; whether that counts as *answered* is each section's own word, "
    "defined at the top of its views.sql), `user_stop`, `single_turn`; `failures`: the "
    "failed episodes' status (error kind) and count.")


def coverage_md(wh, benchmark: str) -> str:
    # episode_coverage.n_answered is the engine's termination 'answered'; it is shown under a
    # name that does not claim the episode answered (a refusal ends it too).
    df = wh.df("SELECT target, condition, n_episodes, n_completed, n_failed, n_turn_cap, "
               "n_answered AS n_ended_not_asking, n_user_stop, n_single_turn FROM episode_coverage "
               "WHERE benchmark = ? ORDER BY target, condition", [benchmark])
    if df.empty:
        return "Not computed: no episodes stored for this benchmark yet."
    reasons = failure_reasons(wh, benchmark)
    df["failures"] = [reasons.get((t, c), "") for t, c in zip(df["target"], df["condition"])]
    return COVERAGE_NOTE + "\n\n" + md_table(df)


def failed_targets_md(wh, benchmark: str) -> list[str]:
    """Lines naming the targets none of whose episodes completed (empty when none)."""
    lines = failed_target_lines(wh, benchmark)
    if not lines:
        return []
    return ["", "**Targets with no completed episode** (absent from the metric tables below, "
            "which read completed episodes; `carryon run` exits 1 when one is a target of its "
            "config):", "", *lines]


def section_md(wh, spec, name: str) -> tuple[str, str]:
    """(title, Markdown) of one section; a failing section says so instead of its content."""
    title = registry.lookup("section", name).meta.get("title", name)
    try:
        return title, spec.component("section", name)(wh, spec)
    except Exception as e:  # noqa: BLE001 - one broken section must not cost the report
        log.exception("report section %s failed", name)
        return title, f"Not computed: the section failed ({type(e).__name__}: {e})."


def report_sections(spec) -> list[str]:
    """The spec's sections, then those its judges show their verdicts in (registered with
    ``section=``: Ben-Util's and safety's, tasks/report/sections/benutil.py) where the spec
    does not list them."""
    out = list(spec.report)
    for name in spec.judges:
        extra = registry.lookup("judge", name).meta.get("section")
        if extra and extra not in out:
            out.append(extra)
    return out


def render(cfg, wh, run: dict) -> str:
    spec = cfg.spec
    out = [f"# {spec.title} report", "", run_line(run), f"- Benchmark: `{spec.name}` "
           f"({spec.description or spec.title})", "", "## Models", "", *_models(cfg), "",
           "## Conditions", ""]
    out += [f"- `{c.name}`: {c.description or c.prompt} (user: {c.user}, at most "
            f"{c.max_turns} target turn{'s' if c.max_turns != 1 else ''})" for c in spec.conditions]
    out += ["", "## Episodes", "", "Only completed episodes are scored; failed ones are counted "
            "here and left out of every metric.", "", coverage_md(wh, spec.name),
            *failed_targets_md(wh, spec.name), ""]
    for name in report_sections(spec):
        checkpoint()  # a Ctrl-C ends the report between sections (tasks/report/folder.py)
        title, body = section_md(wh, spec, name)
        out += [f"## {title}", "", body.strip(), ""]
    return "\n".join(out).rstrip() + "\n"


def write(cfg, wh, run_id: str) -> tuple[Path, str]:
    """Write reports/<run_id>/ (report.md, report.html, spec.json) atomically (a temporary
    folder renamed into place)."""
    from tasks.report import episode_page

    run = wh.run_row(run_id) or {"run_id": run_id, "status": "unknown"}
    text = render(cfg, wh, run)
    browser = episode_page.browser_data(wh, cfg.spec)
    final = cfg.home_path / "reports" / str(run_id)
    with atomic_folder(final) as tmp:
        (tmp / "report.md").write_text(text, encoding="utf-8")
        (tmp / "report.html").write_text(episode_page.render(
            f"{cfg.spec.title} report {run_id}", run, text, browser), encoding="utf-8")
        (tmp / "spec.json").write_text(json.dumps(cfg.spec.model_dump(mode="json"), indent=1),
                                       encoding="utf-8")
    return final, text
