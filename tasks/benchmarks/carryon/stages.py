"""CarryOnBench's own stages, registered like any benchmark's and named in its spec beside the
engine's ``episodes`` (which plays its conversations) and ``report``:

- ``checklists`` (prepare): seemingly harmful queries -> per-query checklists of atomic items
  (tasks/benchmarks/carryon/checklists.py: ensemble answers, WildGuard filter, decomposition,
  merge, misuse filter). It defines the run's work (the selected queries,
  tasks/benchmarks/carryon/queries.py) and prepares the items the episodes stage plays: only
  queries with a current checklist, each with the benign intent and oracle prompt its
  checklist was built from (``prepared``).
- ``judge``: Ben-Util against the query's checklist and safety, per turn
  (tasks/benchmarks/carryon/judge.py).

Each stage's roles are the role table's (tasks/roles.py).
"""

from __future__ import annotations

from tasks.engine.registry import stage
from tasks.stages import Stage, table_roles

SUBFLOWS = "tasks.benchmarks.carryon.subflows"  # the stages' Prefect subflows, beside them


class _TableRoles(Stage):
    def roles(self, spec):
        return table_roles(self.name)


@stage("checklists")
class Checklists(_TableRoles):
    name, phase, flow = "checklists", "prepare", f"{SUBFLOWS}:checklists_flow"
    outputs = ("queries", "intents", "ensemble_answers", "guard_verdicts", "decomposed_items",
               "merged_items", "checklists", "checklist_items", "checklist_queries")
    defines_work = True

    # ----- the run's work: the selected queries ----------------------------------------------
    def select(self, cfg, limit):
        from tasks.benchmarks.carryon.queries import select_queries

        return select_queries(cfg, limit)

    def rows(self, ctx):
        from tasks.benchmarks.carryon.queries import run_queries

        return [q.to_row() for q in run_queries(ctx)]

    def plan(self, cfg, limit):
        from tasks.benchmarks.carryon.plan import carryon_plan  # every stage of the spec

        return carryon_plan(cfg, limit)

    def listing(self, cfg, limit) -> tuple[list[dict], list[dict], str]:
        queries = self.select(cfg, limit)
        rows = [{"id": q.query_id, "category": q.category, "query": q.query,
                 "context": q.context_line()} for q in queries]
        return [q.as_dict() for q in queries], rows, f"{len(queries)} queries selected"

    # ----- what play reads ------------------------------------------------------------------
    def prepared(self, ctx, items):
        """The items with a current checklist, each with its benign intent (hidden, what the
        benign-clarification moves tell) and its oracle prompt; the others with the step and
        reason that left them without one."""
        from dataclasses import replace

        from tasks.benchmarks.carryon.simulate_plan import select_checklisted

        # The key the scripted conditions tell the benign intent by (CarryOnBench's: intent).
        intent = next((c.script.intent for c in ctx.config.spec.conditions if c.script), "intent")
        ready, skipped, _ = select_checklisted(ctx.warehouse, items, key=lambda i: i.item_id)
        by_id = {r["query_id"]: r for r in ready}
        out = [replace(i, prompts={**i.prompts, "oracle": by_id[i.item_id]["oracle_prompt"]},
                       hidden={**i.hidden, intent: by_id[i.item_id]["intent"]})
               for i in items if i.item_id in by_id]
        return out, skipped


@stage("judge")
class Judge(_TableRoles):
    name, phase, flow = "judge", "judge", f"{SUBFLOWS}:judge_flow"
    outputs = ("judgment_sets", "item_judgments", "safety_judgments", "judge_votes",
               "judged_batches", "judge_agreement")
    reads = ("episodes", "checklists")
    runs_judges = True

    def check(self, spec):
        from tasks.benchmarks.carryon.conditions import carryon_conditions

        # It judges, and its views and report read, CarryOnBench's three conditions.
        carryon_conditions(spec)  # exactly BC, NC and oracle, else one line naming them
        # This stage runs Ben-Util (against the query's checklist) and safety into its own
        # tables, with the options of the config's `judging:` section: a spec that named other
        # judges, or gave these arguments, would be silently ignored, so it is refused.
        with_args = [n for n in spec.judges if spec.args.get(f"judge:{n}")]
        if sorted(spec.judges) != ["benutil", "safety"] or with_args:
            raise ValueError(f"judges: the judge stage (CarryOnBench's) runs exactly benutil and "
                             f"safety, without args (their options are the config's judging: "
                             f"section); got {spec.judges}"
                             + (f" with args for {with_args}" if with_args else ""))
