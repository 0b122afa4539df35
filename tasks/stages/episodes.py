"""The episode engine's play stage: every (item, condition, seat) episode of the spec, played
by the one play loop (tasks/engine/episode.py) and stored in ``episodes`` / ``episode_turns``."""

from __future__ import annotations

import json

from tasks.core.registry import stage
from tasks.core.stages import Stage, component_roles


@stage("episodes")
class Episodes(Stage):
    name, phase, flow = "episodes", "play", "flows.episodes:episodes_flow"
    outputs = ("bench_items", "episodes", "episode_turns", "move_checks")

    def roles(self, spec):
        # The target seat calls the configured target models only when a policy seats one.
        roles, optional = component_roles(spec, (("target", spec.targets), ("stop", spec.stops),
                                                 ("user", [c.user for c in spec.conditions])))
        if spec.needs_target_models():
            roles = ["targets", *[r for r in roles if r != "targets"]]
        return roles, optional

    def check(self, spec):
        if not spec.loader:
            raise ValueError("loader: an episode benchmark needs a dataset loader")
        bare = [c.name for c in spec.conditions if not c.prompt]
        if bare:
            raise ValueError(f"conditions {bare}: an episode condition needs `prompt` (the "
                             "item's prompt that opens the episode)")

    # ----- the run's work: the spec's items -------------------------------------------------
    def select(self, cfg, limit):
        from tasks.core.items import select_items

        return select_items(cfg, limit)

    def rows(self, ctx):
        from tasks.core.items import run_items

        return [i.to_row(ctx.config.spec.name) for i in run_items(ctx)]

    def plan(self, cfg, limit):
        from tasks.engine.plan import episode_plan

        return episode_plan(cfg, limit)

    def listing(self, cfg, limit) -> tuple[list[dict], list[dict], str]:
        """(JSON lines, table rows, count line) for ``carryon data``: the items and the
        conditions each can take."""
        from tasks.engine.episode import opening

        items = self.select(cfg, limit)
        lines, rows = [], []
        for it in items:
            conds = [c.name for c in cfg.spec.conditions if opening(it, c) is not None]
            lines.append({"item_id": it.item_id, "source_row": it.source_row,
                          "prompts": it.prompts, "meta": it.meta, "conditions": conds})
            rows.append({"id": it.item_id, "row": it.source_row, "conditions": ",".join(conds),
                         "meta": json.dumps(it.meta, ensure_ascii=False),
                         "prompt": next(iter(it.prompts.values()), "")})
        return lines, rows, f"{len(items)} items selected ({cfg.spec.title})"
